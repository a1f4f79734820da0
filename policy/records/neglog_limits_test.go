package records

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLogMovedReadBackKeepsMaxFileBytes: when the record that finds the
// current file moved (at a new day, or at a size rotation) follows the
// records read back from it into a new file, it goes in the file after
// that one if the read-back leaves it no room: no file passes
// MaxFileBytes (helper-141: the read-back and the record did, by the
// record), and every record is in records_dir once.
func TestLogMovedReadBackKeepsMaxFileBytes(t *testing.T) {
	// One record's line, to size the limit: two and a half of them.
	probe := t.TempDir()
	pl := mustOpenLog(t, LogOptions{Dir: probe, Fsync: FsyncOff, Now: func() time.Time { return day1 }})
	mustAppend(t, pl, "A", gateRecord(OutcomeAccepted))
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	_, probeLines := readLines(t, probe)
	files, _ := os.ReadDir(probe)
	fi, err := os.Stat(filepath.Join(probe, files[0].Name()))
	if err != nil || len(probeLines) != 1 {
		t.Fatalf("probe: %v, %d lines", err, len(probeLines))
	}
	max := fi.Size()*5/2 + 8

	for _, when := range []string{"next day", "size rotation"} {
		t.Run(when, func(t *testing.T) {
			clock := newSetClock(day1)
			dir := t.TempDir()
			var moved []string
			l := mustOpenLog(t, LogOptions{Dir: dir, Fsync: FsyncOff, MaxFileBytes: max, Now: clock.now, Moved: func(m string) { moved = append(moved, m) }})
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // not checked: the clock stands still
			path := currentPath(t, l)
			if err := os.Rename(path, filepath.Join(t.TempDir(), "away.jsonl")); err != nil {
				t.Fatal(err)
			}
			if when == "next day" {
				clock.add(24 * time.Hour)
			}
			// At the size rotation the third record does not fit the
			// first file; at a new day every record starts a new one.
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			names, lines := readLines(t, dir)
			if len(lines) != 3 || len(names) != 2 {
				t.Fatalf("records_dir holds %d records in %v, want 3 in 2 files (the 2 read back, then the third)", len(lines), names)
			}
			for _, name := range names {
				st, err := os.Stat(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if st.Size() > max {
					t.Errorf("%s is %d bytes, over MaxFileBytes %d", name, st.Size(), max)
				}
			}
			if st, err := VerifyDirStats(dir); err != nil || st.Records != 3 {
				t.Fatalf("VerifyDirStats = %+v, %v; want 3 records", st, err)
			}
			if len(moved) != 1 || !strings.Contains(moved[0], "the 2 records it held") {
				t.Fatalf("Moved told %q, want the 2 records read back named", moved)
			}
		})
	}
}

// TestLogRecordLineAppendedByHandNamed: a line appended by hand to the
// file the log writes that is itself in the form of a record (a copy of
// one of its lines) is named in Moved as lines the gateway did not
// write, as a line that is no record is (helper-141: it went unnamed,
// and verify-log then found a record repeated); the log's own records
// are held, not written again.
func TestLogRecordLineAppendedByHandNamed(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncOff, FsyncGroup} {
		t.Run(string(policy), func(t *testing.T) {
			l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			path := currentPath(t, l)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			first := data[:bytes.IndexByte(data, '\n')+1]
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(first); err != nil {
				t.Fatal(err)
			}
			f.Close()
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			m := msgs()
			if len(m) != 1 || !strings.Contains(m[0], "no record written to it since it was last found in place is lost") ||
				!strings.Contains(m[0], "whole lines, in the form of records, that the gateway did not write there") || strings.Contains(m[0], "cut-off line") {
				t.Fatalf("Moved told %q, want nothing lost and the record line appended by hand named", m)
			}
			if names, lines := readLines(t, dir); len(names) != 1 || len(lines) != 4 {
				t.Fatalf("records_dir holds %d lines in %v, want the 3 records and the copied line in one file", len(lines), names)
			}
		})
	}
}
