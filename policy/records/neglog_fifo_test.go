//go:build unix

package records

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLogFIFOAtPath: a FIFO put in place of the current log file (by
// someone with write access to records_dir) does not hang the log, which
// opens what is at the path without blocking (helper-137: a gate
// request, and the process's shutdown, waited for a reader): the file is
// found moved and the log goes on in a new one, which holds the records
// of the file removed, read back.
func TestLogFIFOAtPath(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncGroup, FsyncOff} {
		t.Run(string(policy), func(t *testing.T) {
			l, dir, msgs := movedLog(t, policy, func() time.Time { return day1 })
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			path := currentPath(t, l)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o640); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := l.Append("A", gateRecord(OutcomeAccepted))
				if err == nil {
					err = l.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				// Unblock it: open the FIFO for reading and writing.
				if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
					_ = f.Close()
				}
				t.Fatal("Append or Close hung on a FIFO at the log file's path")
			}
			if m := msgs(); len(m) != 1 || !strings.Contains(m[0], path+" was removed, moved, replaced or copied over") {
				t.Fatalf("Moved told %q, want the file named", m)
			}
			// A FIFO named as a log file is refused by OpenLog and
			// verify-log: the operator removes it.
			if _, err := VerifyDirStats(dir); err == nil || !strings.Contains(err.Error(), "is a FIFO (named pipe)") {
				t.Errorf("VerifyDirStats with the FIFO there: %v, want it refused", err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			files, lines := readLines(t, dir)
			if len(files) != 1 || len(lines) != 2 || lines[0]["seq"] != float64(1) || lines[1]["seq"] != float64(2) {
				t.Fatalf("files %v with %v, want one new file with seq 1 (read back from the removed file) and 2", files, lines)
			}
		})
	}
}

// TestLogSymlinkAtPath: a symlink put in place of the current log file,
// to the file moved elsewhere or to itself, is not the file: the records
// go on in a new file, after those the file held, read back (helper-139:
// they went on to the moved file, or, the link a loop, to the removed
// one).
func TestLogSymlinkAtPath(t *testing.T) {
	for _, loop := range []bool{false, true} {
		l, dir, msgs := movedLog(t, FsyncAlways, func() time.Time { return day1 })
		mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
		path := currentPath(t, l)
		target := path
		if !loop {
			target = filepath.Join(t.TempDir(), "moved.jsonl")
			if err := os.Rename(path, target); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Skipf("symlink: %v", err)
		}
		mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "what is now at its path is not a regular file") {
			t.Fatalf("loop %v: Moved told %q, want one message, naming the symlink to remove", loop, m)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		_, lines := readLines(t, dir)
		if len(lines) != 2 || lines[0]["seq"] != float64(1) || lines[1]["seq"] != float64(2) {
			t.Fatalf("loop %v: lines %v, want seq 1 (read back) and 2 in a new file", loop, lines)
		}
	}
}
