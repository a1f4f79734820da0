package records

// Opening the negotiation log: reading its files back into the chain
// heads, repairing what a crash leaves and refusing what an edit leaves.
// neglog.go has the log's format and Append, neglog_write.go its
// writing side.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
)

// OpenLog opens (creating if needed) the negotiation log in opt.Dir and
// reads back, from every existing file in order, the last hash and seq of
// each agent's chain, so that new records continue the chains. A torn
// last line at the end of the newest file (a crash mid-write) is
// truncated away. It returns an error for a missing Dir, an unknown Fsync
// policy, a negative MaxFileBytes, an entry named as a log file that is
// not a regular file, an unreadable file, or a complete line that does
// not parse (naming file and line: run [VerifyDir]). It holds the newest
// file open (see [Log] on a file moved under it). Under [FsyncGroup] it
// starts one goroutine that [Log.Close] stops: under [FsyncGroup] the
// flusher, under [FsyncOff] the timer that checks the current file.
func OpenLog(opt LogOptions) (*Log, error) {
	if opt.Dir == "" {
		return nil, errors.New("records: negotiation log Dir is empty")
	}
	switch opt.Fsync {
	case "":
		opt.Fsync = FsyncGroup
	case FsyncAlways, FsyncGroup, FsyncOff:
	default:
		return nil, fmt.Errorf("records: negotiation log fsync policy %q, want always, group or off", opt.Fsync)
	}
	if opt.MaxFileBytes < 0 {
		return nil, fmt.Errorf("records: negotiation log MaxFileBytes %d is negative", opt.MaxFileBytes)
	}
	if opt.MaxFileBytes == 0 {
		opt.MaxFileBytes = DefaultMaxFileBytes
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if err := os.MkdirAll(opt.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("records: create negotiation log directory: %w", err)
	}
	l := &Log{
		dir:      opt.Dir,
		policy:   opt.Fsync,
		maxBytes: opt.MaxFileBytes,
		now:      opt.Now,
		moved:    opt.Moved,
		heads:    map[string]logHead{},
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	l.cond.L = &l.mu
	files, err := listLogFiles(opt.Dir)
	if err != nil {
		return nil, err
	}
	for i, lf := range files {
		last := i == len(files)-1
		size, err := l.readHeads(lf, last, true)
		if err != nil {
			return nil, err
		}
		if !last && size == 0 {
			l.notes = append(l.notes, fmt.Sprintf("%s: holds no records and is not the newest log file: it was emptied or cut to nothing (only a disk that filled as its first record was written leaves one); left as it is, and verify-log refuses it", filepath.Join(opt.Dir, lf.name)))
		}
		if last && size == 0 {
			// Created, and the gateway stopped before its first record
			// was written whole (or a torn one was cut off above):
			// removed, so that no log file is ever left empty and
			// verify-log can tell an emptied one (VerifyDirStats).
			path := filepath.Join(opt.Dir, lf.name)
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("records: remove the empty newest log file %s: %w", path, err)
			}
			l.notes = append(l.notes, fmt.Sprintf("%s: removed the newest log file, which held no record", path))
			continue
		}
		l.curDay, l.curNum, l.curSize = lf.day, lf.num, size
	}
	if l.breaks > 0 {
		l.notes = append(l.notes, fmt.Sprintf("%s: a record before it is missing, repeated or changed (a log file removed whole, moved away and back, or edited, or removed, replaced or copied over under a running gateway); %s in all; the chains go on from the last records; %s, which names the first",
			l.firstBreak, plural.Count(l.breaks, "chain break", "chain breaks"), checkIt(l.dir)))
	}
	if l.curNum > 0 {
		// The newest file is opened now, not at the first write, which
		// may come hours later: held open, its inode is not reused by a
		// file created at its path meanwhile, so one removed, moved or
		// replaced is told from it (checkLocked). One that cannot be
		// opened is opened by the first write (writeLocked), which
		// reports the error.
		if f, fi, err := openAppend(l.curPath()); err == nil {
			l.f, l.fi = f, fi
		}
	}
	if l.policy == FsyncGroup {
		l.flusherDone = make(chan struct{})
		go l.flusher()
	}
	l.checkerDone = make(chan struct{})
	go l.checker()
	return l, nil
}

// CheckLog reads the negotiation log in dir as [OpenLog] would, without
// writing anything: no directory is created and a torn last line is left
// in place (OpenLog truncates it). It returns the errors OpenLog would
// for an unreadable file or a complete line that does not parse; a
// missing dir is not an error (OpenLog creates it). It lets a caller
// check a configuration (as `caddy validate` does) without touching a
// directory a running gateway writes to.
func CheckLog(dir string) error {
	if dir == "" {
		return errors.New("records: negotiation log Dir is empty")
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	files, err := listLogFiles(dir)
	if err != nil {
		return err
	}
	l := &Log{dir: dir, heads: map[string]logHead{}}
	for i, lf := range files {
		if _, err := l.readHeads(lf, i == len(files)-1, false); err != nil {
			return err
		}
	}
	return nil
}

// listLogFiles returns the log files of dir in write order. An entry
// named as a log file that is not a regular file (a symlink, a
// directory, a FIFO) is an error: read through, or skipped, it would
// change what the chains are without a word.
func listLogFiles(dir string) ([]logFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("records: list negotiation log: %w", err)
	}
	var files []logFile
	for _, e := range entries {
		lf, ok := parseLogName(e.Name())
		if !ok {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("records: %s is named as a negotiation log file but is %s: the log is regular files only; put the file itself there, or move it out of the directory", filepath.Join(dir, e.Name()), fileKind(e.Type()))
		}
		files = append(files, lf)
	}
	slices.SortFunc(files, func(a, b logFile) int {
		if a.day != b.day {
			if a.day < b.day {
				return -1
			}
			return 1
		}
		return a.num - b.num
	})
	return files, nil
}

// fileKind names a file type that is not a regular file, for errors.
func fileKind(t os.FileMode) string {
	switch {
	case t&os.ModeSymlink != 0:
		return "a symbolic link"
	case t.IsDir():
		return "a directory"
	case t&os.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case t&os.ModeSocket != 0:
		return "a socket"
	case t&os.ModeDevice != 0:
		return "a device"
	}
	return fmt.Sprintf("not a regular file (%v)", t)
}

// parseLogName parses negotiations-YYYY-MM-DD-NNNN.jsonl (NNNN at least
// four digits).
func parseLogName(name string) (logFile, bool) {
	const minLen = len(logPrefix) + len(dayLayout) + 1 + 4 + len(logSuffix)
	if len(name) < minLen || name[:len(logPrefix)] != logPrefix || name[len(name)-len(logSuffix):] != logSuffix {
		return logFile{}, false
	}
	rest := name[len(logPrefix) : len(name)-len(logSuffix)]
	day, numStr := rest[:len(dayLayout)], rest[len(dayLayout):]
	if _, err := time.Parse(dayLayout, day); err != nil || numStr[0] != '-' {
		return logFile{}, false
	}
	numStr = numStr[1:]
	for _, c := range numStr {
		if c < '0' || c > '9' {
			return logFile{}, false
		}
	}
	num, err := strconv.Atoi(numStr)
	if err != nil || num < 1 || len(numStr) < 4 || fmt.Sprintf("%04d", num) != numStr {
		return logFile{}, false
	}
	return logFile{name: name, day: day, num: num}, true
}

// logName is the file name for day and num.
func logName(day string, num int) string {
	return fmt.Sprintf("%s%s-%04d%s", logPrefix, day, num, logSuffix)
}

// readHeads reads one file's records into l.heads and returns the file's
// size after any torn tail was truncated (only when last, and only when
// truncate; without truncate a torn tail of the last file is left as it
// is and the size returned ends before it).
func (l *Log) readHeads(lf logFile, last, truncate bool) (int64, error) {
	path := filepath.Join(l.dir, lf.name)
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("records: open negotiation log: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			if len(line) == 0 {
				return off, nil
			}
			if !last {
				return 0, fmt.Errorf("records: %s:%d: torn line (no newline) in a file that is not the newest; %s", path, lineNo, checkIt(l.dir))
			}
			// A crash leaves at most one record after the last newline,
			// whole or cut short: anything else (two records, a "\r"
			// line ending, whitespace, a value that is no record) was an
			// edit, refused as one.
			// A power loss can leave the end of the file zero-filled (a
			// size written before its data): NUL bytes after the last
			// newline are residue of a write never acknowledged, cut
			// off with what precedes them.
			if trimmed := bytes.TrimRight(line, "\x00"); len(trimmed) < len(line) {
				if _, fault := tornTail(trimmed); len(trimmed) > 0 && fault != "" {
					return 0, fmt.Errorf("records: %s:%d: %s; %s", path, lineNo, fault, checkIt(l.dir))
				}
				if !truncate {
					return off, nil
				}
				kept, err := cutTail(path, off, line)
				if err != nil {
					return 0, fmt.Errorf("records: %s:%d: %w", path, lineNo, err)
				}
				l.notes = append(l.notes, fmt.Sprintf("%s:%d: cut off %d bytes after the last newline ending in NUL bytes (a write a power loss left zero-filled: never acknowledged under fsync always or group), kept in %s", path, lineNo, len(line), kept))
				return off, nil
			}
			whole, fault := tornTail(line)
			head, ok := parseHead(line)
			if fault == "" && whole && !ok {
				fault = "a JSON value that is not a negotiation record (agent_id, seq and hash required) after the last newline, so the file was edited"
			}
			if fault != "" {
				return 0, fmt.Errorf("records: %s:%d: %s; %s", path, lineNo, fault, checkIt(l.dir))
			}
			if !truncate {
				return off, nil
			}
			// A whole record without its newline (only the newline
			// lost, or an edit that removed it) is kept: its newline is
			// written back. A record whose write was cut short, never
			// acknowledged under always or group, is cut off.
			if whole {
				if err := appendNewline(path); err != nil {
					return 0, fmt.Errorf("records: restore the newline of the last record at %s:%d: %w", path, lineNo, err)
				}
				l.follow(path, lineNo, head)
				l.notes = append(l.notes, fmt.Sprintf("%s:%d: the last record had no newline; it is kept and its newline written", path, lineNo))
				return off + int64(len(line)) + 1, nil
			}
			kept, err := cutTail(path, off, line)
			if err != nil {
				return 0, fmt.Errorf("records: %s:%d: %w", path, lineNo, err)
			}
			l.notes = append(l.notes, fmt.Sprintf("%s:%d: cut off a torn last line of %d bytes (a record whose write did not finish: under fsync always or group it was never acknowledged), kept in %s", path, lineNo, len(line), kept))
			return off, nil
		}
		if err != nil {
			return 0, fmt.Errorf("records: read %s: %w", path, err)
		}
		if reason := lineEndingFault(line[:len(line)-1], r); reason != "" {
			return 0, fmt.Errorf("records: %s:%d: %s; %s", path, lineNo, reason, checkIt(l.dir))
		}
		head, ok := parseHead(line)
		if !ok {
			return 0, fmt.Errorf("records: %s:%d: unreadable negotiation record (agent_id, seq and hash required); %s", path, lineNo, checkIt(l.dir))
		}
		l.follow(path, lineNo, head)
		off += int64(len(line))
	}
}

// cutTail cuts the log file at path back to off, its last complete
// line, after keeping the bytes cut off (tail) in a file beside it,
// path+".torn" (".torn-2", ".torn-3"... when taken), which no reader of
// the log reads: the start repairs what a crash leaves without
// destroying bytes it cannot prove it wrote (helper-140: 5 MB a hand
// had appended were deleted with a WARN). It returns the file kept.
func cutTail(path string, off int64, tail []byte) (string, error) {
	var kept string
	var f *os.File
	for n := 1; ; n++ {
		kept = path + ".torn"
		if n > 1 {
			kept += fmt.Sprintf("-%d", n)
		}
		var err error
		f, err = os.OpenFile(kept, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("keep the torn last line aside before cutting it off: %w", err)
		}
		break
	}
	_, err := f.Write(tail)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(kept)
		return "", fmt.Errorf("keep the torn last line aside before cutting it off: %w", err)
	}
	if err := os.Truncate(path, off); err != nil {
		return "", fmt.Errorf("truncate torn line: %w", err)
	}
	return kept, nil
}

// follow makes head its agent's chain head, noting (l.breaks) a record
// that does not follow the one before it: a seq other than the next, or
// a prev other than that record's hash (verify-log checks the hashes
// themselves).
func (l *Log) follow(path string, lineNo int, head agentHead) {
	last, ok := l.heads[head.agent]
	if !ok {
		last.hash = ZeroHash
	}
	if head.seq != last.seq+1 || head.prev != last.hash {
		if l.breaks == 0 {
			where := fmt.Sprintf("%s:%d: agent %s's record seq %d", path, lineNo, head.agent, head.seq)
			switch {
			case !ok:
				l.firstBreak = where + " is the first of its chain in the log, not seq 1"
			case head.seq <= last.seq:
				l.firstBreak = fmt.Sprintf("%s comes after its seq %d (written twice, or out of order)", where, last.seq)
			default:
				l.firstBreak = fmt.Sprintf("%s does not follow its seq %d", where, last.seq)
			}
		}
		l.breaks++
	}
	l.heads[head.agent] = head.logHead
}

// checkIt tells an operator how to check the log in dir.
func checkIt(dir string) string {
	return "check the log with `caddy rcns verify-log " + dir + "`"
}

// appendNewline writes "\n" at the end of path and syncs it.
func appendNewline(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte{'\n'}); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Notes says what OpenLog changed in the log to open it, or found wrong
// in it and left, one line each (file and what), for the caller to log
// at WARN: a torn last line cut off, the newline of a whole last record
// written back, a newest file without a record removed; an older file
// without a record (emptied: verify-log refuses it). Nil when there was
// nothing to say.
func (l *Log) Notes() []string { return l.notes }
