package records

import (
	"bytes"
	"fmt"
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
			appendByHand(t, path, data[:bytes.IndexByte(data, '\n')+1]) // the first record's line
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			m := msgs()
			if len(m) != 1 || !strings.Contains(m[0], "no record written to it since it was last found in place is lost") ||
				!strings.Contains(m[0], "whole lines, in the form of records, that the gateway did not write there") || strings.Contains(m[0], "cut-off line") ||
				strings.Contains(m[0], "only as far as") {
				t.Fatalf("Moved told %q, want nothing lost and the record line appended by hand named", m)
			}
			if names, lines := readLines(t, dir); len(names) != 1 || len(lines) != 4 {
				t.Fatalf("records_dir holds %d lines in %v, want the 3 records and the copied line in one file", len(lines), names)
			}
		})
	}
}

// TestLogMovedAfterLinesAppendedByHand: lines appended by hand to the
// file the log writes (a record's line copied, or bytes cut short),
// which is then moved away or removed before the log's next record, are
// not read back into the new file, and the log's own records, those
// written after them included, are: every
// record once, in order, and the log verifies, under each policy
// (helper-143: the read-back took the file's first bytes up to the size
// the log wrote, so the hand line took the place of the last record,
// which was lost, and bytes cut short were glued to the next record).
func TestLogMovedAfterLinesAppendedByHand(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncAlways, FsyncGroup, FsyncOff} {
		for _, hand := range []string{"a record's line", "bytes cut short"} {
			for _, how := range []string{"moved away", "removed"} {
				t.Run(string(policy)+"/"+hand+"/"+how, func(t *testing.T) {
					l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
					path, data := appendThree(t, l, "A")
					extra := data[:bytes.IndexByte(data, '\n')+1] // the first record's line
					if hand == "bytes cut short" {
						extra = []byte(`{"ag`)
					}
					appendByHand(t, path, extra)
					var err error
					if how == "moved away" {
						err = os.Rename(path, filepath.Join(t.TempDir(), "away.jsonl"))
					} else {
						err = os.Remove(path)
					}
					if err != nil {
						t.Fatal(err)
					}
					mustAppend(t, l, "A", gateRecord(OutcomeRefused)) // after the hand's bytes, in the file moved
					mustAppend(t, l, "A", gateRecord(OutcomeRefused))
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					_, lines := readLines(t, dir)
					var seqs []string
					for _, ln := range lines {
						seqs = append(seqs, fmt.Sprint(ln["seq"]))
					}
					if strings.Join(seqs, " ") != "1 2 3 4 5" {
						t.Fatalf("records_dir holds seqs %v, want 1 2 3 4 5 once each", seqs)
					}
					if st, err := VerifyDirStats(dir); err != nil || st.Records != 5 {
						t.Fatalf("VerifyDirStats = %+v, %v; want 5 records", st, err)
					}
					if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "appended by hand), which were not written again") {
						t.Fatalf("Moved told %q, want the lines appended by hand named as left out", m)
					}
				})
			}
		}
	}
}

// TestLogReplacedByFileOfWholeRecordsNamed: a file put in place of the
// current one (mv) that holds, after the log's records, whole lines in
// the form of records (a copy with a record's line added by hand) is
// named as holding lines the gateway did not write there, not as
// holding a cut-off line the start and verify-log refuse, which they do
// not (helper-143 L1); one holding bytes cut short still is.
func TestLogReplacedByFileOfWholeRecordsNamed(t *testing.T) {
	for _, extra := range []string{"a record's line", "bytes cut short"} {
		t.Run(extra, func(t *testing.T) {
			l, _, msgs := movedLog(t, FsyncGroup, func() time.Time { return day1 })
			path, data := appendThree(t, l, "A")
			add := data[:bytes.IndexByte(data, '\n')+1]
			if extra == "bytes cut short" {
				add = []byte(`{"ag`)
			}
			putInPlace(t, path, append(append([]byte(nil), data...), add...))
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			m := msgs()
			if len(m) != 1 {
				t.Fatalf("Moved told %q, want one message", m)
			}
			foreign := strings.Contains(m[0], "whole lines, in the form of records, that the gateway did not write there")
			cut := strings.Contains(m[0], "cut-off line")
			if want := extra == "a record's line"; foreign != want || cut == want {
				t.Fatalf("Moved told %q; want the whole record lines named (%v), a cut-off line named (%v)", m[0], want, !want)
			}
		})
	}
}

// TestLogFileRemovedIdleFound: a current file removed while no record
// comes, every record in it checked (always and group check each one;
// off once its interval passed), is found by the checker within about
// two LogCheckIntervals, with no record nor Close, and its records
// written again in a new file (helper-143: under always and group it
// went unseen until the next record, and a crash meanwhile lost every
// fsynced record it held).
func TestLogFileRemovedIdleFound(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncAlways, FsyncGroup, FsyncOff} {
		t.Run(string(policy), func(t *testing.T) {
			l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
			defer l.Close()
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
			mustAppend(t, l, "B", gateRecord(OutcomeAccepted))
			if policy == FsyncOff {
				// Off checks the second record by the log's clock, which
				// stands still here: Close would. What is at stake is
				// the file once every record in it was checked.
				l.mu.Lock()
				_ = l.checkLocked(l.written)
				l.mu.Unlock()
			}
			if err := os.Remove(currentPath(t, l)); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * LogCheckInterval)
			for len(msgs()) == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "the 2 records it held") {
				t.Fatalf("Moved told %q within %v of the removal, want the 2 records written again", m, 10*LogCheckInterval)
			}
			if _, lines := readLines(t, dir); len(lines) != 2 {
				t.Fatalf("records_dir holds %d records before Close, want the 2 the removed file held", len(lines))
			}
		})
	}
}

// putInPlace puts a new file holding data at path, as a copy put back
// with mv does: written beside it, then renamed over it (another inode).
func putInPlace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// appendByHand appends b to the file at path, as an operator's shell
// would (>>), beside the log that writes it.
func appendByHand(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestLogAppendedByHandThenRemoved: a file found with lines appended by
// hand (by the idle checker: nothing to write again, so the next record
// starts the new file) stays open until then, so its removal after is
// found too and everything it held read back into a new file, and said
// in a second message, under each policy (helper-145: the file was
// closed when found, and an rm after lost its records without a word).
func TestLogAppendedByHandThenRemoved(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncAlways, FsyncGroup, FsyncOff} {
		t.Run(string(policy), func(t *testing.T) {
			l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
			defer l.Close()
			for range 3 {
				mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			}
			l.mu.Lock()
			_ = l.checkLocked(l.written) // off: every record checked, as after its interval
			l.mu.Unlock()
			path := currentPath(t, l)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			appendByHand(t, path, data[:bytes.IndexByte(data, '\n')+1])
			waitMsgs := func(n int) []string {
				deadline := time.Now().Add(10 * LogCheckInterval)
				for len(msgs()) < n && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				return msgs()
			}
			if m := waitMsgs(1); len(m) != 1 || !strings.Contains(m[0], "had bytes appended by another hand") || strings.Contains(m[0], "only as far as") ||
				!strings.Contains(m[0], "keep the file") || !strings.Contains(m[0], "the only copy of the records before them") || strings.Contains(m[0], "restore the file") {
				t.Fatalf("Moved told %q, want the lines appended by hand found by the checker, nothing missing, and the file to be kept, one instruction (helper-147: the next record starts a new file, and this one then holds the only copy of its records; helper-150: restore the file beside it)", m)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			m := waitMsgs(2)
			if len(m) != 2 || !strings.Contains(m[1], "the 3 records it held") {
				t.Fatalf("Moved told %q, want a second message: the file removed, its 3 records written again", m)
			}
			if _, lines := readLines(t, dir); len(lines) != 3 {
				t.Fatalf("records_dir holds %d records, want the 3 the removed file held", len(lines))
			}
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if st, err := VerifyDirStats(dir); err != nil || st.Records != 4 {
				t.Fatalf("VerifyDirStats = %+v, %v; want 4 records", st, err)
			}
		})
	}
}

// TestLogDestroyedThenRemovedToldHonestly: a current file cut (truncate)
// or copied over in place with another log file, then removed, before
// the log checks it: what it held before the last check went with its
// bytes, and the log neither says none was lost, nor writes another
// file's records as its own, nor leaves an empty file (helper-146).
// And a file grown by a line appended by hand among the log's own
// records, found (nothing to write again) and then removed, has every
// record read back.
func TestLogDestroyedThenRemovedToldHonestly(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncAlways, FsyncGroup, FsyncOff} {
		for _, how := range []string{"truncated", "copied over by another log file", "appended among its records"} {
			t.Run(string(policy)+"/"+how, func(t *testing.T) {
				l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
				defer l.Close()
				if how == "copied over by another log file" {
					for range 4 {
						mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
					}
					l.mu.Lock()
					_ = l.rotateLocked(l.curDay, l.curNum+1, false)
					l.mu.Unlock()
				}
				path, data := appendThree(t, l, "B")
				var err error
				switch how {
				case "truncated":
					err = os.Truncate(path, 0)
				case "copied over by another log file":
					var older []byte
					if older, err = os.ReadFile(filepath.Join(dir, "negotiations-2026-11-29-0001.jsonl")); err == nil {
						err = os.WriteFile(path, older, 0o640) // same inode, larger, not the log's bytes
					}
				case "appended among its records":
					appendByHand(t, path, data[:bytes.IndexByte(data, '\n')+1])
					mustAppend(t, l, "B", gateRecord(OutcomeRefused)) // after the hand's line
				}
				if err != nil {
					t.Fatal(err)
				}
				l.mu.Lock()
				_ = l.checkLocked(l.written) // found changed in place, before the removal
				l.mu.Unlock()
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				names, lines := readLines(t, dir)
				all := strings.Join(msgs(), "\n")
				if how == "appended among its records" {
					var bs int
					for _, ln := range lines {
						if ln["agent_id"] == "B" {
							bs++
						}
					}
					if bs != 4 {
						t.Fatalf("records_dir holds %d of B's 4 records in %v; Moved told:\n%s", bs, names, all)
					}
					return
				}
				for _, ln := range lines {
					if ln["agent_id"] == "A" && how == "copied over by another log file" && len(names) > 1 && fmt.Sprint(ln["seq"]) == "1" {
						for _, n := range names[1:] {
							if b, _ := os.ReadFile(filepath.Join(dir, n)); bytes.Contains(b, []byte(`"agent_id":"A"`)) {
								t.Fatalf("%s holds A's records, another file's, written again as the log's own; Moved told:\n%s", n, all)
							}
						}
					}
				}
				for _, n := range names {
					if fi, err := os.Stat(filepath.Join(dir, n)); err == nil && fi.Size() == 0 {
						t.Fatalf("an empty file %s was left; Moved told:\n%s", n, all)
					}
				}
				if strings.Contains(all, "none is lost") || !strings.Contains(all, "only as far as") {
					t.Fatalf("Moved told:\n%s\nwant no claim that none was lost, and what may be missing said", all)
				}
			})
		}
	}
}

// appendThree appends three records of agent to l and returns its
// current file and what the file holds.
func appendThree(t *testing.T, l *Log, agent string) (path string, data []byte) {
	t.Helper()
	for range 3 {
		mustAppend(t, l, agent, gateRecord(OutcomeAccepted))
	}
	path = currentPath(t, l)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}
