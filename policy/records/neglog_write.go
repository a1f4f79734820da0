package records

// The negotiation log's writing side: the current file and its
// rotation, the I/O failures that stop the log and the retry of a
// failed write, and the group-commit fsync. neglog.go has the log's
// format, opening and Append.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
)

// writeLocked writes line to the right file, rotating by day and size.
func (l *Log) writeLocked(now time.Time, line []byte) error {
	day := now.Format(dayLayout)
	if day < l.curDay {
		// The clock went back across midnight: keep file names in write
		// order so VerifyDir reads records in the order they were written.
		day = l.curDay
	}
	size := int64(len(line))
	switch {
	case l.curNum == 0 || day != l.curDay:
		if err := l.rotateLocked(day, 1); err != nil {
			return err
		}
	case l.curSize > 0 && l.curSize+size > l.maxBytes:
		if err := l.rotateLocked(day, l.curNum+1); err != nil {
			return err
		}
	case l.f == nil && l.fi != nil && (l.leaving || !l.atPathLocked(false)):
		// The file a failed write left (recoverLocked) was removed,
		// moved or replaced before this write reopened it.
		if err := l.rotateLocked(day, l.curNum+1); err != nil {
			return err
		}
	case l.f == nil:
		f, fi, err := openAppend(l.curPath())
		if err == nil && l.fi != nil && !os.SameFile(fi, l.fi) {
			_ = f.Close()
			if err := l.rotateLocked(day, l.curNum+1); err != nil {
				return err
			}
			break
		}
		if err != nil {
			l.failWriteLocked(fmt.Errorf("records: open negotiation log: %w", err))
			return l.failed
		}
		l.f, l.fi = f, fi
	}
	if _, err := l.f.Write(line); err != nil {
		l.failWriteLocked(fmt.Errorf("records: write negotiation log: %w", err))
		return l.failed
	}
	l.curSize += size
	return nil
}

// openAppend opens the log file at path to append to it, with its
// identity. Non-blocking: a FIFO put at the path fails here rather than
// hold the log's lock until something reads it; anything but a regular
// file is refused.
func openAppend(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// rotateLocked closes the current file (fsynced unless the policy is
// off) and creates the file for day with the first free number >= num.
// When the current file is no longer at its path (atPathLocked), the
// lines written to it since it last was (Log.pend) are written first in
// the new file and fsynced, and LogOptions.Moved is told.
func (l *Log) rotateLocked(day string, num int) error {
	moved := l.leaving || (l.fi != nil && !l.atPathLocked(l.f != nil))
	l.leaving = moved // until a new file takes the lines: a retry that fails to create one must not take the file back
	if l.f != nil {
		if l.policy != FsyncOff && !moved {
			if err := l.f.Sync(); err != nil {
				l.failLocked(fmt.Errorf("records: fsync negotiation log: %w", err))
				return l.failed
			}
			l.synced = l.written
			l.cond.Broadcast()
		}
		if err := l.f.Close(); err != nil && !moved {
			l.f = nil
			l.failLocked(fmt.Errorf("records: close negotiation log: %w", err))
			return l.failed
		}
		l.f = nil
	}
	oldPath := l.curPath()
	held, cut := 0, false // pending lines the file now at the old path ends with; it ends mid-line
	if moved {
		held, cut = l.heldAtPathLocked()
	}
	again := l.pend[l.pendEnd(held):]
	if moved && l.closed && len(again) == 0 {
		// Close, the file now at the path holding every line since the
		// last check: no new file is created only to stay empty.
		if l.moved != nil {
			l.moved(l.movedMessageLocked(oldPath, "", held, cut))
		}
		l.leaving = false
		l.resetPendingLocked()
		return nil
	}
	var f *os.File
	var fi os.FileInfo
	for ; ; num++ {
		path := filepath.Join(l.dir, logName(day, num))
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err == nil {
			if fi, err = f.Stat(); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			l.failWriteLocked(fmt.Errorf("records: create negotiation log file: %w", err))
			return l.failed
		}
		break
	}
	var size int64
	if moved && len(again) > 0 {
		// Written again, then made durable before any record they hold
		// is acknowledged. On a failure the new file is removed and the
		// log stays on the one that moved: the retry (recoverLocked)
		// finds it moved again, and pend is kept for it.
		_, err := f.Write(again)
		if err == nil && l.policy != FsyncOff {
			err = f.Sync()
		}
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			l.failWriteLocked(fmt.Errorf("records: write again, in a new file, the records written to %s after it was removed, moved or replaced: %w", oldPath, err))
			return l.failed
		}
		size = int64(len(again))
	}
	if moved && l.moved != nil {
		l.moved(l.movedMessageLocked(oldPath, f.Name(), held, cut))
	}
	l.f, l.fi, l.leaving = f, fi, false
	l.curDay, l.curNum, l.curSize = day, num, size
	if moved && l.policy != FsyncOff {
		l.synced = l.written
		l.cond.Broadcast()
	}
	l.resetPendingLocked()
	if l.policy != FsyncOff {
		if err := syncDir(l.dir); err != nil {
			l.failLocked(err)
			return l.failed
		}
	}
	return nil
}

// movedMessageLocked is what LogOptions.Moved is told when the current
// file, at oldPath, was found moved: how many of the pending lines were
// written again in newPath ("" when none was and no file was created),
// how many the file now at oldPath ends with (held), and whether it ends
// in a cut-off line.
func (l *Log) movedMessageLocked(oldPath, newPath string, held int, cut bool) string {
	msg := oldPath + " was removed, moved, replaced or copied over under the running gateway"
	switch n := len(l.pendEnds) - held; {
	case n > 0:
		msg += fmt.Sprintf(": the %s written to it since it was last found in place %s written again in %s",
			plural.Count(n, "record", "records"), wasWere(n), newPath)
	default:
		msg += ": no record written to it since it was last found in place is lost"
	}
	switch {
	case held > 0 && len(l.pendEnds) > held:
		msg += fmt.Sprintf(" (the file now at its path ends with the %s before them)", plural.Count(held, "record", "records"))
	case held > 0:
		msg += fmt.Sprintf(" (the file now at its path ends with the %s)", plural.Count(held, "record", "records"))
	}
	if !l.closed {
		msg += "; the log goes on in " + newPath
	}
	msg += "; what it held before is in records_dir only as far as the file now at its path holds it (verify-log names the first record missing or repeated)"
	if cut {
		msg += "; the file now at its path holds a cut-off line, which verify-log and the gateway's next start refuse: cut that line off or restore the file"
	}
	return msg
}

// wasWere is the verb for a count.
func wasWere(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// curPath is the current file's path.
func (l *Log) curPath() string { return filepath.Join(l.dir, logName(l.curDay, l.curNum)) }

// atPathLocked reports whether the current file (l.fi) is still the
// file at its path and, with size, still of the size the log wrote
// (l.curSize): a file copied over it in place (cp onto the path keeps
// its inode) is told by its size. Without size (after a failed write,
// which may have left part of a line) the identity alone. An error
// reading the path other than its absence (which cannot tell) reports
// true: the check is there to find a file moved, and must not stop a
// log that writes.
func (l *Log) atPathLocked(size bool) bool {
	pi, err := os.Lstat(l.curPath()) // a symlink put at the path is not the file
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	if !os.SameFile(l.fi, pi) {
		return false
	}
	if size {
		return pi.Size() == l.curSize
	}
	return pi.Size() >= l.curSize // a failed write may have added part of a line; a smaller file was copied over
}

// heldAtPathLocked returns how many of the pending lines, from the
// first, the file now at the current file's path ends with, and whether
// it ends mid-line. A copy of the file put back in its place holds the
// lines written before the copy was taken: they are not written again,
// and the copy is fsynced (under always and group) before their records
// are acknowledged; if it cannot be, they are written again. A copy
// taken while the file was written may end mid-line. Anything but a
// regular file at the path holds none (a FIFO is opened non-blocking:
// it does not hold the log's lock).
func (l *Log) heldAtPathLocked() (held int, cut bool) {
	if li, err := os.Lstat(l.curPath()); err != nil || !li.Mode().IsRegular() {
		return 0, false // a symlink holds nothing: what it names is not in records_dir
	}
	f, err := os.OpenFile(l.curPath(), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return 0, false
	}
	// The pending lines, after up to 1 MiB of a line a copy may end in
	// cut short (a record is far smaller), and the byte before them.
	tail := make([]byte, min(fi.Size(), int64(len(l.pend))+1<<20+1))
	atStart := int64(len(tail)) == fi.Size() // tail[0] is the file's first byte
	if _, err := f.ReadAt(tail, fi.Size()-int64(len(tail))); err != nil {
		return 0, false
	}
	cut = tail[len(tail)-1] != '\n'
	if cut {
		// What the copy holds whole: up to its last newline.
		tail = tail[:bytes.LastIndexByte(tail, '\n')+1]
	}
	for k := len(l.pendEnds); k > 0; k-- {
		m := l.pend[:l.pendEnds[k-1]]
		if !bytes.HasSuffix(tail, m) {
			continue
		}
		// Held only as whole lines: after a newline, or at the file's
		// start. Lines the log appended to a copy written over the file
		// in place that ends mid-line are glued to that line, which
		// verify-log cannot read: written again, and the cut named.
		if start := len(tail) - len(m); (start == 0 && atStart) || (start > 0 && tail[start-1] == '\n') {
			held = k
		} else {
			cut = true
		}
		break
	}
	if held > 0 && l.policy != FsyncOff && f.Sync() != nil {
		held = 0
	}
	return held, cut
}

// pendEnd is the end in l.pend of its first k lines.
func (l *Log) pendEnd(k int) int {
	if k == 0 {
		return 0
	}
	return l.pendEnds[k-1]
}

// checkLocked follows a write or an fsync covering the records up to n:
// when the current file is still at its path, the lines of those
// records are no longer kept to write again; when it is not, the log
// rotates to a new file, writing them again there (rotateLocked).
func (l *Log) checkLocked(n uint64) error {
	if l.fi == nil || l.atPathLocked(true) {
		l.dropPendingLocked(n)
		return nil
	}
	return l.rotateLocked(l.curDay, l.curNum+1)
}

// keepPendingLocked keeps line, just written to the current file, to
// write again should the file turn out moved (checkLocked).
func (l *Log) keepPendingLocked(line []byte) {
	if len(l.pendEnds) == 0 {
		l.pendBase = l.written
	}
	l.pend = append(l.pend, line...)
	l.pendEnds = append(l.pendEnds, len(l.pend))
}

// dropPendingLocked stops keeping the lines of the records up to n.
func (l *Log) dropPendingLocked(n uint64) {
	if n <= l.pendBase {
		return
	}
	k := int(min(n-l.pendBase, uint64(len(l.pendEnds))))
	if k == len(l.pendEnds) {
		l.resetPendingLocked()
		return
	}
	cut := l.pendEnds[k-1]
	l.pend = l.pend[:copy(l.pend, l.pend[cut:])]
	l.pendEnds = l.pendEnds[:copy(l.pendEnds, l.pendEnds[k:])]
	for i := range l.pendEnds {
		l.pendEnds[i] -= cut
	}
	l.pendBase += uint64(k)
}

// resetPendingLocked keeps no line; a buffer a burst grew past
// maxPendingBytes is let go.
func (l *Log) resetPendingLocked() {
	if cap(l.pend) > 2*maxPendingBytes {
		l.pend, l.pendEnds = nil, nil
	}
	l.pend, l.pendEnds = l.pend[:0], l.pendEnds[:0]
	l.pendBase = l.written
}

// failLocked records the first I/O error; the log refuses records after.
func (l *Log) failLocked(err error) {
	if l.failed == nil {
		l.failed = err
	}
	l.cond.Broadcast()
}

// failWriteLocked is failLocked for an error writing, opening or
// creating a file, which recoverLocked tries again.
func (l *Log) failWriteLocked(err error) {
	if l.failed == nil {
		l.failed, l.retryable, l.failedAt = err, true, l.now()
	}
	l.cond.Broadcast()
}

// recoverLocked clears a retryable failure once LogRetryInterval has
// passed since it (or since the last try): it fsyncs and closes the
// current file (unless the policy is off), cuts it back to its last
// complete line (curSize: a failed write may have left part of a line),
// and leaves the next write to reopen it; a current file that is gone
// is followed by a new one. It returns the failure while the log stays
// failed (the try's own error when the try failed); a failed fsync here
// makes the failure final.
func (l *Log) recoverLocked() error {
	if !l.retryable || l.flusherExited || l.now().Sub(l.failedAt) < LogRetryInterval {
		return l.failed
	}
	l.failedAt = l.now()
	// The file is gone (moved away to make room) or another is in its
	// place, which is not cut: the next records go in a new file, after
	// the lines written to the old one since it was last found at its
	// path (rotateLocked).
	moved := l.curNum > 0 && l.fi != nil && (l.leaving || !l.atPathLocked(false))
	if l.f != nil {
		if l.policy != FsyncOff && !moved {
			// The flusher's fsync skips a failed log: records written
			// before the failure are made durable here, before the close
			// (which the flusher would otherwise read as a rotation).
			if err := l.f.Sync(); err != nil {
				l.failed, l.retryable = fmt.Errorf("records: fsync negotiation log: %w", err), false
				return l.failed
			}
			l.synced = l.written
		}
		_ = l.f.Close()
		l.f = nil
	}
	l.failed, l.retryable = nil, false
	if moved {
		return l.rotateLocked(l.curDay, l.curNum+1)
	}
	if l.curNum > 0 {
		err := os.Truncate(l.curPath(), l.curSize)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := l.rotateLocked(l.curDay, l.curNum+1); err != nil {
				return err
			}
		case err != nil:
			l.failWriteLocked(fmt.Errorf("records: cut the negotiation log back to its last complete line: %w", err))
			return l.failed
		}
	}
	l.cond.Broadcast()
	return nil
}

// flusher is the group-commit goroutine: woken by Append, it fsyncs at
// most every GroupFsyncInterval and wakes the Appends its fsync covered.
func (l *Log) flusher() {
	defer func() {
		l.mu.Lock()
		l.flusherExited = true
		l.cond.Broadcast()
		l.mu.Unlock()
		close(l.flusherDone)
	}()
	var last time.Time
	var timer *time.Timer
	for {
		select {
		case <-l.kick:
		case <-l.done:
			l.syncNow()
			return
		}
		if !last.IsZero() {
			if wait := GroupFsyncInterval - time.Since(last); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C:
				case <-l.done:
					timer.Stop()
					l.syncNow()
					return
				}
			}
		}
		last = time.Now()
		l.syncNow()
	}
}

// checker is the FsyncOff goroutine that checks the current file each
// LogCheckInterval while records written since the last check wait and
// no Append has checked (by l.now): a file moved while no record comes
// is found, and its lines written again, within about two intervals of
// the last record, not only at the next one. A failure it meets is the
// log's (l.failed), which the next Append reports.
func (l *Log) checker() {
	defer close(l.flusherDone)
	t := time.NewTicker(LogCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.done:
			return
		}
		l.checkIdle()
	}
}

// checkIdle is one tick of checker.
func (l *Log) checkIdle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.f == nil || l.failed != nil || len(l.pendEnds) == 0 {
		return
	}
	if now := l.now(); now.Sub(l.checkedAt) >= LogCheckInterval || now.Before(l.checkedAt) {
		l.checkedAt = now
		_ = l.checkLocked(l.written)
	}
}

// syncNow fsyncs the current file and marks every record written before
// it durable.
func (l *Log) syncNow() {
	l.mu.Lock()
	gen, f := l.written, l.f
	if gen == l.synced || f == nil || l.failed != nil {
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()

	err := f.Sync()
	if errors.Is(err, os.ErrClosed) {
		// Rotated meanwhile: rotation fsynced the file before closing it
		// (or wrote its records again in the next file and fsynced that),
		// so every record up to gen is durable.
		err = nil
	}

	l.mu.Lock()
	switch {
	case err != nil:
		l.failLocked(fmt.Errorf("records: fsync negotiation log: %w", err))
	case l.f == f && l.failed == nil && l.checkLocked(gen) != nil:
		// Moved, and writing its records again failed: they wait for
		// the retry (recoverLocked), their Appends get the failure.
	case gen > l.synced && l.failed == nil:
		l.synced = gen
	}
	l.cond.Broadcast()
	l.mu.Unlock()
}
