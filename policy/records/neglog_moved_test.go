package records

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
)

// movedLog opens a log in a new directory whose Moved messages are
// collected.
func movedLog(t *testing.T, policy FsyncPolicy, now func() time.Time) (l *Log, dir string, msgs func() []string) {
	t.Helper()
	dir = t.TempDir()
	var mu sync.Mutex
	var got []string
	l = mustOpenLog(t, LogOptions{Dir: dir, Fsync: policy, Now: now, Moved: func(m string) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}})
	return l, dir, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

// currentPath is the log's current file.
func currentPath(t *testing.T, l *Log) string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		t.Fatal("the log has no current file")
	}
	return l.f.Name()
}

// setClock is a clock a test sets, read by the log's goroutines too.
type setClock struct {
	mu sync.Mutex
	t  time.Time
}

func newSetClock(t time.Time) *setClock { return &setClock{t: t} }

func (c *setClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *setClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestLogFileMovedWhileWriting: a current log file removed, moved out
// of the directory or replaced by another file (an older copy of
// itself) while the log writes is found, under each fsync policy,
// before the records written to it after are acknowledged (always,
// group) or at the latest at Close (off, whose clock here never moves):
// every record it held that the file now at its path does not is read
// back from the file the log holds open and written again into a new
// file, which the log goes on in, and Moved names both files. The file
// put in its place is not written to. Either way records_dir then holds
// every record once and verifies (helper-140: the records a removed
// file held before the last check were lost with it).
func TestLogFileMovedWhileWriting(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncAlways, FsyncGroup, FsyncOff} {
		for _, how := range []string{"removed", "moved away", "replaced by a copy"} {
			t.Run(string(policy)+"/"+how, func(t *testing.T) {
				l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
				a1 := mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
				mustAppend(t, l, "B", gateRecord(OutcomeAccepted))
				path := currentPath(t, l)
				before, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				away := filepath.Join(t.TempDir(), "away.jsonl")
				switch how {
				case "removed":
					err = os.Remove(path)
				case "moved away":
					err = os.Rename(path, away)
				case "replaced by a copy":
					if err = os.WriteFile(away, before, 0o640); err == nil {
						err = os.Rename(away, path)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				mustAppend(t, l, "A", gateRecord(OutcomeRefused))
				mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
				mustAppend(t, l, "B", gateRecord(OutcomeRefused))
				if err := l.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}

				// Every record once, in order: the new file holds those
				// the file at the path does not; what replaced the old
				// one is left as it was.
				files, lines := readLines(t, dir)
				var got []string
				for _, ln := range lines {
					got = append(got, fmt.Sprintf("%s%v", ln["agent_id"], ln["seq"]))
				}
				if strings.Join(got, " ") != "A1 B1 A2 A3 B2" || lines[2]["prev"] != a1 {
					t.Fatalf("records in records_dir: %v, want A1 B1 A2 (prev %s) A3 B2", got, a1)
				}
				newFile := filepath.Join(dir, "negotiations-2026-11-29-0002.jsonl")
				wantFiles := []string{filepath.Base(newFile)}
				if how == "replaced by a copy" {
					wantFiles = []string{filepath.Base(path), filepath.Base(newFile)}
					if got, _ := os.ReadFile(path); !bytes.Equal(got, before) {
						t.Errorf("the file put in place of the log's was written to:\n%s", got)
					}
				}
				if strings.Join(files, " ") != strings.Join(wantFiles, " ") {
					t.Fatalf("files %v, want %v", files, wantFiles)
				}
				if st, err := VerifyDirStats(dir); err != nil || st.Records != 5 || st.Chains != 2 {
					t.Fatalf("VerifyDirStats = %+v, %v; want 5 records in 2 chains", st, err)
				}

				// Found at the first fsync after the move (the file then
				// held 3 records), or at Close under off (5).
				held := 3
				if policy == FsyncOff {
					held = 5
				}
				wantAgain := fmt.Sprintf("the %d records it held that the file now at its path does not are written again", held)
				if how == "replaced by a copy" {
					wantAgain = fmt.Sprintf("the %s it held that the file now at its path does not %s written again", plural.Count(held-2, "record", "records"), wasWere(held-2))
				}
				m := msgs()
				if len(m) != 1 || !strings.Contains(m[0], path+" was removed, moved, replaced or copied over") || !strings.Contains(m[0], wantAgain) ||
					!strings.Contains(m[0], newFile) || strings.Contains(m[0], "only as far as") {
					t.Fatalf("Moved told %q, want one message naming %s, %q and %s, and no loss", m, path, wantAgain, newFile)
				}
				if how == "moved away" {
					// The file moved keeps what was written to it.
					got, _ := os.ReadFile(away)
					if !bytes.HasPrefix(got, before) {
						t.Errorf("the file moved away lost its records:\n%s", got)
					}
				}
			})
		}
	}
}

// TestLogFileMovedOffChecksEachInterval: under FsyncOff the check
// follows the first write LogCheckInterval (by the log's clock) after
// the last one, so the records of a removed file are written again
// then, not only at Close; and the lines kept to write again stay
// bounded (maxPendingBytes) however long the clock stands still.
func TestLogFileMovedOffChecksEachInterval(t *testing.T) {
	clock := newSetClock(day1)
	l, dir, msgs := movedLog(t, FsyncOff, clock.now)
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	path := currentPath(t, l)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if m := msgs(); len(m) != 0 {
		t.Fatalf("Moved told %q before LogCheckInterval passed", m)
	}
	clock.add(LogCheckInterval)
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "the 3 records it held that the file now at its path does not are written again") {
		t.Fatalf("Moved told %q, want the 3 records the removed file held", m)
	}
	_, lines := readLines(t, dir)
	if len(lines) != 3 || lines[0]["seq"] != float64(1) || lines[2]["seq"] != float64(3) {
		t.Fatalf("lines after the check: %v, want seq 1 to 3", lines)
	}

	big := gateRecord(OutcomeAccepted)
	big["reason"] = strings.Repeat("x", 4096)
	for range 2 * maxPendingBytes / 4096 {
		mustAppend(t, l, "A", big)
		l.mu.Lock()
		n := len(l.pend)
		l.mu.Unlock()
		if n > maxPendingBytes+8192 {
			t.Fatalf("%d bytes kept to write again, want at most maxPendingBytes (%d) and a record", n, maxPendingBytes)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := VerifyDirStats(dir); err != nil || st.Records != 3+2*maxPendingBytes/4096 {
		t.Fatalf("VerifyDirStats = %+v, %v; want every record, none lost with the removed file", st, err)
	}
}

// TestLogNewestFileMovedBeforeFirstWrite: the newest file OpenLog read
// is written again by the first write, which may come hours later; one
// removed, or replaced by a copy (here cut mid-line, as a copy taken
// while the gateway wrote can be), in between is found then, as one
// moved while written is (helper-137: the copy was written to, and a
// removal lost the records of the next second): what it held that the
// file at its path does not is written again in a new file, read back
// from the file OpenLog holds open, the copy is not written to, and
// Moved says that the copy ends in a cut-off line, which verify-log
// names as no crash leaves it and the next OpenLog refuses.
func TestLogNewestFileMovedBeforeFirstWrite(t *testing.T) {
	for _, how := range []string{"removed", "replaced by a cut copy", "removed, a cut copy written at its path"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			first := mustOpenLog(t, LogOptions{Dir: dir, Now: func() time.Time { return day1 }})
			mustAppend(t, first, "A", gateRecord(OutcomeAccepted))
			h2 := mustAppend(t, first, "A", gateRecord(OutcomeAccepted))
			path := currentPath(t, first)
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			var got []string
			l := mustOpenLog(t, LogOptions{Dir: dir, Now: func() time.Time { return day1 }, Moved: func(m string) { got = append(got, m) }})
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cut := data[:len(data)-10]
			switch how {
			case "removed":
				err = os.Remove(path)
			case "removed, a cut copy written at its path":
				// Without the log holding the file open, the new file
				// could take the removed one's inode and pass for it
				// (helper-138).
				if err = os.Remove(path); err == nil {
					err = os.WriteFile(path, cut, 0o640)
				}
			default:
				tmp := path + ".tmp"
				if err = os.WriteFile(tmp, cut, 0o640); err == nil {
					err = os.Rename(tmp, path)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// Removed: the 3 records, read back; a cut copy holds the
			// first whole, and the second, cut, is written again.
			again := 3
			if how != "removed" {
				again = 2
			}
			next := filepath.Join(dir, "negotiations-2026-11-29-0002.jsonl")
			after, err := os.ReadFile(next)
			if err != nil || !strings.Contains(string(after), `"prev":"`+h2+`"`) || strings.Count(string(after), "\n") != again {
				t.Fatalf("%s = %s, %v; want %d records, the last chained to %s", next, after, err, again, h2)
			}
			if len(got) != 1 || !strings.Contains(got[0], path+" was removed, moved, replaced or copied over") ||
				!strings.Contains(got[0], fmt.Sprintf("the %d records it held that the file now at its path does not are written again in %s", again, next)) {
				t.Fatalf("Moved told %q, want one message naming %s and the %d records", got, path, again)
			}
			if how == "removed" {
				if st, err := VerifyDirStats(dir); err != nil || st.Records != 3 {
					t.Fatalf("VerifyDirStats = %+v, %v; want the 3 records", st, err)
				}
				return
			}
			if now, _ := os.ReadFile(path); !bytes.Equal(now, cut) {
				t.Fatalf("the copy put in the file's place was written to: %q", now)
			}
			if !strings.Contains(got[0], "holds a cut-off line, or bytes the gateway did not write, which verify-log and the gateway's next start refuse") {
				t.Errorf("Moved told %q, want the cut-off line named", got[0])
			}
			var ve *VerifyError
			if _, err := VerifyDirStats(dir); !errors.As(err, &ve) || ve.File != path || !strings.Contains(ve.Reason, "in a file that is not the newest: a crash leaves one only in the newest file") || strings.Contains(ve.Reason, "repairs it") {
				t.Fatalf("VerifyDirStats = %v, want the cut copy named as no crash leaves it, not as repaired at start", err)
			}
			if _, err := OpenLog(LogOptions{Dir: dir}); err == nil || !strings.Contains(err.Error(), "not the newest") {
				t.Fatalf("OpenLog on the cut copy: %v, want it refused", err)
			}
		})
	}
}

// TestLogFileCopiedOverInPlace: a copy written over the current file in
// place (cp onto the path keeps the inode) is told by its size, under
// always at the first record after it: the records go on in a new file.
// The one record written after the copy is at the copy's end (it is the
// same file), and is not written twice (helper-138: not found at all).
func TestLogFileCopiedOverInPlace(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncAlways, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	path := currentPath(t, l)
	older, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := os.WriteFile(path, older, 0o640); err != nil { // O_TRUNC: the same inode
		t.Fatal(err)
	}
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	m := msgs()
	if len(m) != 1 || !strings.Contains(m[0], "no record written to it since it was last found in place is lost (the file now at its path holds the 1 record)") {
		t.Fatalf("Moved told %q, want one message: the record written after the copy is in it", m)
	}
	_, lines := readLines(t, dir)
	var seqs []float64
	for _, ln := range lines {
		seqs = append(seqs, ln["seq"].(float64))
	}
	if fmt.Sprint(seqs) != "[1 3 4]" {
		t.Fatalf("seqs in the directory %v, want [1 3 4]: seq 2 went with the copy, 3 is at its end, 4 in the new file", seqs)
	}
}

// TestLogCutCopyHoldsWholeLines: a copy put back that ends in a cut-off
// line holds, whole, the lines before it: under off, where several
// lines wait for the check, those are not written again, so once the
// operator cuts the line off the log verifies (helper-138: all were
// written again, and verify-log then found them twice).
func TestLogCutCopyHoldsWholeLines(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncOff, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
	for range 3 {
		mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	}
	path := currentPath(t, l)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := data[:len(data)-20] // seq 1 to 3 whole, seq 4 cut
	putInPlace(t, path, cut)
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	m := msgs()
	if len(m) != 1 || !strings.Contains(m[0], "the 2 records it held that the file now at its path does not are written again") ||
		!strings.Contains(m[0], "holds the 3 records before them") || !strings.Contains(m[0], "holds a cut-off line") {
		t.Fatalf("Moved told %q, want seq 4 and 5 written again, 1 to 3 held, the cut-off line named", m)
	}
	if err := os.WriteFile(path, cut[:bytes.LastIndexByte(cut, '\n')+1], 0o640); err != nil {
		t.Fatal(err)
	}
	if st, err := VerifyDirStats(dir); err != nil || st.Records != 5 {
		t.Fatalf("VerifyDirStats after the cut-off line is cut = %+v, %v; want 5 records, none twice", st, err)
	}
}

// TestLogFileSymlinkRefused: an entry named as a log file that is a
// symlink (or anything but a regular file) is refused by OpenLog and
// verify-log, which skipped it without a word (helper-138: a chain
// started again at seq 1, and verify-log called the log intact).
func TestLogFileSymlinkRefused(t *testing.T) {
	dir := writeSample(t)
	files, _ := listLogFiles(dir)
	last := filepath.Join(dir, files[len(files)-1].name)
	elsewhere := filepath.Join(t.TempDir(), "moved.jsonl")
	if err := os.Rename(last, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, last); err != nil {
		t.Skipf("symlink: %v", err)
	}
	if _, err := OpenLog(LogOptions{Dir: dir}); err == nil || !strings.Contains(err.Error(), last+" is named as a negotiation log file but is a symbolic link") {
		t.Fatalf("OpenLog: %v, want the symlink refused", err)
	}
	if err := CheckLog(dir); err == nil {
		t.Fatal("CheckLog accepted the symlink")
	}
	if _, err := VerifyDirStats(dir); err == nil {
		t.Fatal("VerifyDirStats accepted the symlink")
	}
}

// TestLogCutCopyOverInPlace: a copy cut mid-line written over the file
// in place takes the next record glued to its cut line, which
// verify-log cannot read: that record is not counted as held but
// written again in the new file, and the ERROR names the cut
// (helper-139: the record was lost, and the ERROR said nothing was).
func TestLogCutCopyOverInPlace(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncAlways, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	path := currentPath(t, l)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)-30], 0o640); err != nil { // the same inode
		t.Fatal(err)
	}
	h3 := mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	m := msgs()
	if len(m) != 1 || !strings.Contains(m[0], "the 1 record written to it since it was last found in place is written again") || !strings.Contains(m[0], "holds a cut-off line") {
		t.Fatalf("Moved told %q, want the glued record written again and the cut named", m)
	}
	next, err := os.ReadFile(filepath.Join(dir, "negotiations-2026-11-29-0002.jsonl"))
	if err != nil || !strings.Contains(string(next), `"hash":"`+h3+`"`) {
		t.Fatalf("the new file = %s, %v; want the record %s", next, err, h3)
	}
}

// TestLogRetryLeavesCopyOverInPlace: a file copied over the log's in
// place (the same inode) before a write is tried again is left as the
// operator wrote it, and the retry creates a new file:
//   - "new file not created": a larger copy was found and the new file
//     could not be created (as rotateLocked leaves it); the retry does
//     not cut the copy back to the size the log had written;
//   - "after a failed write": a smaller copy put there after a write
//     failed is not padded with NUL bytes up to that size (helper-139).
func TestLogRetryLeavesCopyOverInPlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		copied []byte
		// fail makes the next write fail with path's content replaced
		// by copied (the same inode).
		fail func(t *testing.T, l *Log, path string, copied []byte)
	}{
		{"new file not created", bytes.Repeat([]byte("an operator's copy, longer than the log's\n"), 100), func(t *testing.T, l *Log, path string, copied []byte) {
			if err := os.WriteFile(path, copied, 0o640); err != nil {
				t.Fatal(err)
			}
			l.mu.Lock()
			l.leaving = true
			_ = l.f.Close()
			l.f = nil
			l.failWriteLocked(errors.New("records: create negotiation log file: injected"))
			l.mu.Unlock()
		}},
		{"after a failed write", []byte("short\n"), func(t *testing.T, l *Log, _ string, copied []byte) {
			path := breakWrites(t, l)
			if _, err := l.Append("A", gateRecord(OutcomeRefused)); err == nil {
				t.Fatal("Append on a read-only handle succeeded")
			}
			if err := os.WriteFile(path, copied, 0o640); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := day1
			l, dir, _ := movedLog(t, FsyncGroup, func() time.Time { return now })
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			path := currentPath(t, l)
			tc.fail(t, l, path, tc.copied)
			now = now.Add(LogRetryInterval)
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, tc.copied) {
				t.Fatalf("the copy became %q", got)
			}
			if _, err := os.Stat(filepath.Join(dir, "negotiations-2026-11-29-0002.jsonl")); err != nil {
				t.Fatalf("the record after the retry: %v", err)
			}
		})
	}
}

// TestLogCloseUnderFullCopyCreatesNoFile: at Close under off, a copy put
// in the file's place that holds every record waiting for the check is
// told to Moved, and no new file is created only to stay empty
// (helper-139: Close created one, which the next start removed with a
// WARN).
func TestLogCloseUnderFullCopyCreatesNoFile(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncOff, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	path := currentPath(t, l)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	putInPlace(t, path, data) // another inode, every line
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	m := msgs()
	if len(m) != 1 || !strings.Contains(m[0], "the file now at its path holds every record it held; none is lost") ||
		strings.Contains(m[0], "goes on") {
		t.Fatalf("Moved told %q, want one message: the 2 records waiting are in the copy", m)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != filepath.Base(path) {
		t.Fatalf("records_dir holds %v, want the copy alone", ents)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
		t.Fatalf("the copy became %q", got)
	}
	if st, err := VerifyDirStats(dir); err != nil || st.Records != 3 {
		t.Fatalf("VerifyDirStats = %+v, %v; want 3 records", st, err)
	}
}

// TestLogFileMovedOffCheckedWithoutAppend: under off, a file removed
// after the last records is found by the timer, with no Append after:
// its records are written again in a new file (read back from the file
// the log holds open, which a killed gateway loses), and Moved is told,
// LogCheckInterval (by the log's clock) after the last check. Before,
// nothing checked until the next record or Close.
func TestLogFileMovedOffCheckedWithoutAppend(t *testing.T) {
	clock := newSetClock(day1)
	l, dir, msgs := movedLog(t, FsyncOff, clock.now)
	defer l.Close()
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	if err := os.Remove(currentPath(t, l)); err != nil {
		t.Fatal(err)
	}
	// The timer ticks in real time; by the log's clock no interval has
	// passed, so it does not check yet.
	time.Sleep(LogCheckInterval + LogCheckInterval/2)
	if m := msgs(); len(m) != 0 {
		t.Fatalf("Moved told %q before LogCheckInterval passed by the log's clock", m)
	}
	clock.add(LogCheckInterval)
	deadline := time.Now().Add(10 * LogCheckInterval)
	for len(msgs()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "the 3 records it held that the file now at its path does not are written again") {
		t.Fatalf("Moved told %q, want the 3 records of the removed file written again, with no Append", m)
	}
	_, lines := readLines(t, dir)
	if len(lines) != 3 || lines[0]["seq"] != float64(1) || lines[2]["seq"] != float64(3) {
		t.Fatalf("lines in records_dir: %v, want seq 1 to 3 in the new file", lines)
	}
}

// TestLogMovedNothingAgainWaitsForNextRecord: a file found moved whose
// replacement holds every record it held (here the same file, a line
// appended to it by hand) creates no new file until the next record:
// Moved is told once, naming the line the gateway did not write, and a
// gateway stopped before the next record leaves no empty file
// (helper-140: one was left, which the next start removed).
func TestLogMovedNothingAgainWaitsForNextRecord(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncGroup, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	path := currentPath(t, l)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("{\"x\":1}\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // after the foreign line, in the same file
	m := msgs()
	if len(m) != 1 || !strings.Contains(m[0], "no record written to it since it was last found in place is lost") ||
		!strings.Contains(m[0], "the next record starts a new file") || !strings.Contains(m[0], "bytes the gateway did not write") {
		t.Fatalf("Moved told %q, want one message: nothing lost, the next record starts a new file, the foreign line named", m)
	}
	if files, _ := readLines(t, dir); len(files) != 1 {
		t.Fatalf("files %v after the move, want the one moved: no new file before the next record", files)
	}
	h3 := mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if m := msgs(); len(m) != 1 {
		t.Fatalf("Moved told %q, want it told once", m)
	}
	next, err := os.ReadFile(filepath.Join(dir, "negotiations-2026-11-29-0002.jsonl"))
	if err != nil || strings.Count(string(next), "\n") != 1 || !strings.Contains(string(next), h3) {
		t.Fatalf("the new file = %q, %v; want the next record alone", next, err)
	}
}

// TestLogFileRemovedIdleFoundAtClose: under always and group, a file
// removed while no record comes is found at Close, and the records it
// held are written again in a new file, read back from the file the log
// held open (helper-140: nothing was said, the next start began the
// chains again at seq 1, and verify-log called the log intact).
func TestLogFileRemovedIdleFoundAtClose(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncAlways, FsyncGroup} {
		t.Run(string(policy), func(t *testing.T) {
			l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			mustAppend(t, l, "B", gateRecord(OutcomeRefused))
			path := currentPath(t, l)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "the 2 records it held that the file now at its path does not are written again") {
				t.Fatalf("Moved told %q, want the 2 records written again", m)
			}
			if st, err := VerifyDirStats(dir); err != nil || st.Records != 2 || st.Chains != 2 {
				t.Fatalf("VerifyDirStats = %+v, %v; want the 2 records", st, err)
			}
			l2 := mustOpenLog(t, LogOptions{Dir: dir, Fsync: policy, Now: func() time.Time { return day1 }})
			defer l2.Close()
			if l2.heads["A"].seq != 1 || l2.heads["B"].seq != 1 {
				t.Fatalf("heads after a restart %+v, want the chains to go on from seq 1", l2.heads)
			}
		})
	}
}

// TestLogCutInPlaceNamed: a file cut short in place (truncate) while the
// log writes under off, the next records landing after the cut, leaves
// a cut-off line inside the file, not at its end: Moved names it, as
// verify-log and the next start refuse the file (helper-140: said only
// under group, where the cut was at the end).
func TestLogCutInPlaceNamed(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncOff, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	path := currentPath(t, l)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-30); err != nil { // the same file
		t.Fatal(err)
	}
	mustAppend(t, l, "A", gateRecord(OutcomeRefused)) // glued after the cut
	mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "holds a cut-off line") {
		t.Fatalf("Moved told %q, want the cut-off line inside the file named", m)
	}
	if _, err := VerifyDirStats(dir); err == nil {
		t.Fatal("VerifyDirStats passed a file with a line cut inside it")
	}
}

// TestOpenLogKeepsCutTail: the start cuts off a torn last line (a record
// cut short, or one ending in NUL bytes) only after keeping its bytes
// beside the file, in <file>.torn (then .torn-2...), which no reader of
// the log reads: nothing is destroyed that the gateway cannot prove it
// wrote (helper-140: 5 MB appended by hand were deleted with a WARN).
func TestOpenLogKeepsCutTail(t *testing.T) {
	dir := writeSample(t)
	files, _ := listLogFiles(dir)
	path := filepath.Join(dir, files[len(files)-1].name)
	for i, tail := range [][]byte{
		append([]byte(`{"agent_id":"`), bytes.Repeat([]byte("a"), 5<<20)...),
		append([]byte(`{"agent_id":"A","at":"2026-`), make([]byte, 100)...),
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, tail...), 0o640); err != nil {
			t.Fatal(err)
		}
		l, err := OpenLog(LogOptions{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		kept := path + ".torn"
		if i > 0 {
			kept += "-2"
		}
		notes := strings.Join(l.Notes(), "\n")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(notes, "kept in "+kept) {
			t.Fatalf("notes %q, want the tail named as kept in %s", notes, kept)
		}
		if got, err := os.ReadFile(kept); err != nil || !bytes.Equal(got, tail) {
			t.Fatalf("%s = %d bytes, %v; want the %d bytes cut off", kept, len(got), err, len(tail))
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
			t.Fatalf("the file was not cut back to its last complete line")
		}
		if _, err := VerifyDirStats(dir); err != nil {
			t.Fatalf("VerifyDirStats with %s beside the log: %v", kept, err)
		}
	}
}

// TestLogLineAppendedByHandHoldsRecords: a line appended by hand to the
// file the log writes, under off and group, leaves the records written
// since the last check in the file, around it: they are held, not
// written again, so once the foreign line is cut off, as the ERROR
// says, the log verifies with every record once (helper-141: all were
// written again, and verify-log then found them twice).
func TestLogLineAppendedByHandHoldsRecords(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncOff, FsyncGroup} {
		t.Run(string(policy), func(t *testing.T) {
			l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted)) // checked: the first Append
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			path := currentPath(t, l)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			const junk = "{\"junk\":1}\n"
			if _, err := f.WriteString(junk); err != nil {
				t.Fatal(err)
			}
			f.Close()
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			m := msgs()
			if len(m) != 1 || !strings.Contains(m[0], "no record written to it since it was last found in place is lost") || !strings.Contains(m[0], "bytes the gateway did not write") {
				t.Fatalf("Moved told %q, want nothing lost and the foreign line named", m)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, bytes.Replace(data, []byte(junk), nil, 1), 0o640); err != nil {
				t.Fatal(err)
			}
			if st, err := VerifyDirStats(dir); err != nil || st.Records != 4 {
				t.Fatalf("VerifyDirStats after the foreign line is cut off = %+v, %v; want the 4 records once", st, err)
			}
		})
	}
}

// TestLogDirRemovedRecreated: the log's directory removed under it
// (with the file it writes) is created again at the next check, and the
// records the file held are written into it, read back from the file
// the log holds open; the ERROR says the folder was made again
// (helper-141: records failed until an operator made it, and a gateway
// stopped before that lost every record the file held).
func TestLogDirRemovedRecreated(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncGroup, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	mustAppend(t, l, "B", gateRecord(OutcomeAccepted))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "its folder was gone, and was created again") || !strings.Contains(m[0], "the 3 records it held") {
		t.Fatalf("Moved told %q, want the folder made again and the 3 records written again", m)
	}
	if st, err := VerifyDirStats(dir); err != nil || st.Records != 3 || st.Chains != 2 {
		t.Fatalf("VerifyDirStats = %+v, %v; want the 3 records", st, err)
	}
}

// TestLogCloseTriesMovedRecordsOnce: a file found moved whose records
// could not be written again yet (the new file could not be created) is
// tried once more at Close, before the descriptor that holds them
// closes, without waiting for LogRetryInterval (helper-141: they were
// lost without a word).
func TestLogCloseTriesMovedRecordsOnce(t *testing.T) {
	l, dir, msgs := movedLog(t, FsyncGroup, func() time.Time { return day1 })
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := os.Remove(currentPath(t, l)); err != nil {
		t.Fatal(err)
	}
	// As replaceMovedLocked leaves it when the new file cannot be
	// created: the file held open, the log failed until the retry.
	l.mu.Lock()
	l.leaving = true
	l.failWriteLocked(errors.New("records: create negotiation log file: injected"))
	l.mu.Unlock()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "the 2 records it held") {
		t.Fatalf("Moved told %q, want the 2 records written again at Close", m)
	}
	if st, err := VerifyDirStats(dir); err != nil || st.Records != 2 {
		t.Fatalf("VerifyDirStats = %+v, %v; want the 2 records", st, err)
	}
}
