package records

// The negotiation log's writing side: the current file and its
// rotation, the I/O failures that stop the log and the retry of a
// failed write, and the group-commit fsync. neglog.go has the log's
// format, opening and Append.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		if err := l.rotateLocked(day, 1); err != nil {
			return err
		}
	case l.curSize > 0 && l.curSize+size > l.maxBytes:
		if err := l.rotateLocked(day, l.curNum+1); err != nil {
			return err
		}
	case l.f == nil:
		path := filepath.Join(l.dir, logName(l.curDay, l.curNum))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			l.failWriteLocked(fmt.Errorf("records: open negotiation log: %w", err))
			return l.failed
		}
		l.f = f
	}
	if _, err := l.f.Write(line); err != nil {
		l.failWriteLocked(fmt.Errorf("records: write negotiation log: %w", err))
		return l.failed
	}
	l.curSize += size
	return nil
}

// rotateLocked closes the current file (fsynced unless the policy is
// off) and creates the file for day with the first free number >= num.
func (l *Log) rotateLocked(day string, num int) error {
	if l.f != nil {
		if l.policy != FsyncOff {
			if err := l.f.Sync(); err != nil {
				l.failLocked(fmt.Errorf("records: fsync negotiation log: %w", err))
				return l.failed
			}
			l.synced = l.written
			l.cond.Broadcast()
		}
		if err := l.f.Close(); err != nil {
			l.f = nil
			l.failLocked(fmt.Errorf("records: close negotiation log: %w", err))
			return l.failed
		}
		l.f = nil
	}
	for ; ; num++ {
		path := filepath.Join(l.dir, logName(day, num))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			l.failWriteLocked(fmt.Errorf("records: create negotiation log file: %w", err))
			return l.failed
		}
		l.f = f
		break
	}
	l.curDay, l.curNum, l.curSize = day, num, 0
	if l.policy != FsyncOff {
		if err := syncDir(l.dir); err != nil {
			l.failLocked(err)
			return l.failed
		}
	}
	return nil
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
	if l.f != nil {
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
	if l.curNum > 0 {
		err := os.Truncate(filepath.Join(l.dir, logName(l.curDay, l.curNum)), l.curSize)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// The file is gone (moved away to make room): the next
			// records go in a new one.
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
		// Rotated meanwhile: rotation fsynced the file before closing it,
		// so every record up to gen is durable.
		err = nil
	}

	l.mu.Lock()
	if err != nil {
		l.failLocked(fmt.Errorf("records: fsync negotiation log: %w", err))
	} else if gen > l.synced {
		l.synced = gen
	}
	l.cond.Broadcast()
	l.mu.Unlock()
}
