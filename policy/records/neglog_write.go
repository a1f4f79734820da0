package records

// The negotiation log's writing side: the current file and its
// rotation, the I/O failures that stop the log and the retry of a
// failed write, and the group-commit fsync. neglog.go has the log's
// format, opening and Append.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
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
		if err := l.rotateLocked(day, 1, false); err != nil {
			return err
		}
	case l.curSize > 0 && l.curSize+size > l.maxBytes:
		if err := l.rotateLocked(day, l.curNum+1, false); err != nil {
			return err
		}
	case l.leaving || l.f == nil && l.fi != nil && !l.atPathLocked(false):
		// A file found changed and left in place (replaceMovedLocked),
		// or the file a failed write left (recoverLocked) removed,
		// moved or replaced before this write reopened it.
		if err := l.rotateLocked(day, l.curNum+1, false); err != nil {
			return err
		}
	case l.f == nil:
		f, fi, err := openAppend(l.curPath())
		if err == nil && l.fi != nil && !os.SameFile(fi, l.fi) {
			_ = f.Close()
			if err := l.rotateLocked(day, l.curNum+1, false); err != nil {
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
	if l.curSize > 0 && l.curSize+size > l.maxBytes {
		// Only after a rotation above that found the current file moved
		// and wrote what it held again in the new file: line goes in the
		// next one if that leaves no room, so that no file passes
		// MaxFileBytes (helper-141: the read-back and line did, by line).
		if err := l.rotateLocked(day, l.curNum+1, false); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(line); err != nil {
		l.failWriteLocked(fmt.Errorf("records: write negotiation log: %w", err))
		return l.failed
	}
	l.curSize += size
	return nil
}

// openAppend opens the log file at path to append to it (and to read
// it back: planMovedLocked), with its identity. Non-blocking: a FIFO
// put at the path fails here rather than hold the log's lock until
// something reads it; anything but a regular file is refused.
func openAppend(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|syscall.O_NONBLOCK, 0)
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
// When the current file is no longer at its path (atPathLocked), what
// it held that the file now at its path does not (planMovedLocked) is
// written first in the new file and fsynced, and LogOptions.Moved is
// told; with lazy (a check after a write, not a write to come) and
// nothing to write again, no file is created until the next record.
func (l *Log) rotateLocked(day string, num int, lazy bool) error {
	moved := l.leaving || (l.fi != nil && !l.atPathLocked(l.f != nil))
	l.leaving = moved // until a new file takes the lines: a retry that fails to create one must not take the file back
	if moved {
		return l.replaceMovedLocked(day, num, lazy)
	}
	if l.f != nil {
		if l.policy != FsyncOff {
			if err := l.f.Sync(); err != nil {
				l.failLocked(fmt.Errorf("records: fsync negotiation log: %w", err))
				return l.failed
			}
			l.synced = l.written
			l.cond.Broadcast()
		}
		if l.fi != nil && !l.atPathLocked(true) {
			// Moved while it was fsynced (helper-143: a move then went
			// unseen, and the file's records with it).
			l.leaving = true
			return l.replaceMovedLocked(day, num, lazy)
		}
		err := l.f.Close()
		l.f = nil
		if err != nil {
			l.failLocked(fmt.Errorf("records: close negotiation log: %w", err))
			return l.failed
		}
	}
	f, fi, num, err := l.createLocked(day, num)
	if err != nil {
		return err
	}
	return l.takeLocked(f, fi, day, num, 0)
}

// replaceMovedLocked is rotateLocked for a current file found moved.
// The bytes written again come from the current file itself while the
// log holds it open, and it is closed once they are in the new file: a
// failure leaves it open for the retry (recoverLocked), with the new
// file removed.
func (l *Log) replaceMovedLocked(day string, num int, lazy bool) error {
	oldPath := l.curPath()
	plan := l.planMovedLocked()
	none := plan.none(l)
	if none && (lazy || l.told) {
		if !l.told && l.moved != nil {
			l.moved(l.movedMessageLocked(oldPath, "", plan))
		}
		l.told = true
		if lazy {
			// The next record creates the new file. Until then the file
			// stays open, and the newest: removed or moved meanwhile, it
			// is found (checkLocked) and what it held read back
			// (helper-145: closed here, a file appended to by hand and
			// then removed lost its records without a word).
			if plan.intact {
				// Grown by another hand: the pending lines stay kept,
				// so that where they begin still marks the end of what
				// the log wrote before the bytes appended (a removal
				// next reads back up to there, then them).
				l.syncedMovedLocked()
			} else {
				l.ackMovedLocked()
			}
			return nil
		}
	}
	f, fi, num, err := l.createLocked(day, num)
	if err != nil {
		return err
	}
	var size int64
	switch {
	case plan.from >= 0 && !plan.none(l):
		c := &lineCounter{w: f}
		if plan.from < plan.upTo {
			size, err = io.Copy(c, io.NewSectionReader(l.f, plan.from, plan.upTo-plan.from))
		}
		if pend := l.pend[:l.pendEnd(len(l.pendEnds))]; err == nil && plan.grown && len(pend) > 0 {
			var n int
			n, err = c.Write(pend)
			size += int64(n)
		}
		plan.again = c.n
	case plan.from < 0 && plan.again > 0:
		_, err = f.Write(plan.lines)
		size = int64(len(plan.lines))
	}
	if err == nil && size > 0 && l.policy != FsyncOff {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		l.failWriteLocked(fmt.Errorf("records: write again, in a new file, the records %s held after it was removed, moved or replaced: %w", oldPath, err))
		return l.failed
	}
	if (!l.told || !none) && l.moved != nil { // told already, of a file left in place that has since gone
		l.moved(l.movedMessageLocked(oldPath, f.Name(), plan))
	}
	if l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
	l.ackMovedLocked()
	return l.takeLocked(f, fi, day, num, size)
}

// ackMovedLocked marks durable the records a file found moved held,
// now written again or held by the file at its path (fsynced, unless
// the policy is off), and forgets its pending lines.
func (l *Log) ackMovedLocked() {
	l.syncedMovedLocked()
	l.resetPendingLocked()
}

// syncedMovedLocked is ackMovedLocked keeping the pending lines.
func (l *Log) syncedMovedLocked() {
	if l.policy != FsyncOff {
		l.synced = l.written
		l.cond.Broadcast()
	}
}

// createLocked creates the file for day with the first free number >=
// num, open to append and to read (planMovedLocked reads it back). A
// log directory removed or moved under the log is created again
// (l.recreated), so that the records a file moved with it held, and
// the next ones, have somewhere to go (helper-141: they failed until
// an operator made it, and a gateway stopped before lost them).
func (l *Log) createLocked(day string, num int) (*os.File, os.FileInfo, int, error) {
	for ; ; num++ {
		path := filepath.Join(l.dir, logName(day, num))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, os.ErrNotExist) {
			if merr := os.MkdirAll(l.dir, 0o750); merr == nil {
				l.recreated = true
				_ = syncDir(filepath.Dir(l.dir))
				f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o640)
			}
		}
		if errors.Is(err, os.ErrExist) {
			continue
		}
		var fi os.FileInfo
		if err == nil {
			if fi, err = f.Stat(); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			l.failWriteLocked(fmt.Errorf("records: create negotiation log file: %w", err))
			return nil, nil, 0, l.failed
		}
		return f, fi, num, nil
	}
}

// takeLocked makes f, just created for day with number num and holding
// size bytes, the current file.
func (l *Log) takeLocked(f *os.File, fi os.FileInfo, day string, num int, size int64) error {
	l.f, l.fi, l.leaving, l.told = f, fi, false, false
	l.curDay, l.curNum, l.curSize = day, num, size
	l.resetPendingLocked()
	l.lastLine = l.lastLine[:0] // the new file's own lines are checked from here
	if l.policy != FsyncOff {
		if err := syncDir(l.dir); err != nil {
			l.failLocked(err)
			return l.failed
		}
	}
	return nil
}

// lineCounter counts the lines written through it.
type lineCounter struct {
	w io.Writer
	n int
}

func (c *lineCounter) Write(b []byte) (int, error) {
	c.n += bytes.Count(b, []byte{'\n'})
	return c.w.Write(b)
}

// curPath is the current file's path.
func (l *Log) curPath() string { return filepath.Join(l.dir, logName(l.curDay, l.curNum)) }

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
	if l.f != nil && !moved { // one moved is read back, then closed, by rotateLocked
		if l.policy != FsyncOff {
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
		return l.rotateLocked(l.curDay, l.curNum+1, false)
	}
	if l.curNum > 0 {
		err := os.Truncate(l.curPath(), l.curSize)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := l.rotateLocked(l.curDay, l.curNum+1, false); err != nil {
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

// checker is the goroutine, under every policy, that checks the
// current file each LogCheckInterval while no record has checked it
// (by the wall clock; records waiting to be checked under off, by
// l.now, as Append): a file moved, or removed, while no record comes is found, and
// what it held written again in a new file, within about two intervals,
// not only at the next record or at Close (helper-143: under always and
// group a file removed while the gateway was idle went unseen, and a
// crash then lost every record it held). A failure it meets is the
// log's (l.failed), which the next Append reports.
func (l *Log) checker() {
	defer close(l.checkerDone)
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
	if l.closed || l.f == nil || l.failed != nil {
		return
	}
	if l.policy == FsyncOff && len(l.pendEnds) > 0 {
		// Records wait to be checked: by the log's clock, as Append.
		if now := l.now(); now.Sub(l.checkedAt) >= LogCheckInterval || now.Before(l.checkedAt) {
			l.checkedAt = now
			_ = l.checkLocked(l.written)
		}
		return
	}
	// Every record checked (under always and group, each one is): by
	// the wall clock, since the last check of any kind. Under group,
	// only the lines of records fsynced stop being kept: one written
	// and not yet fsynced keeps its line until its own check
	// (helper-145).
	n := l.written
	if l.policy == FsyncGroup {
		n = l.synced
	}
	if time.Since(l.idleAt) >= LogCheckInterval {
		_ = l.checkLocked(n)
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
