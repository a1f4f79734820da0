package records

// The negotiation log's current file moved under it: telling it
// (checkLocked, atPathLocked), what to write again in a new file (the
// lines since the last check, Log.pend, or everything the file held
// that the file now at its path does not), and what LogOptions.Moved is
// told. rotateLocked (neglog_write.go) acts on it.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
)

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

// heldAtPathLocked returns the pending lines the file now at the
// current file's path does not hold (to write again), how many it does
// hold, whether it holds a cut-off line or a line that is no record
// (cut), and, when it is the log's own file grown, whether it holds
// whole lines in the form of records the log did not write there
// (foreign: a record's line copied onto its end by hand). A pending line is held when the file holds it whole, after a
// newline or at its start, after the held lines before it: a copy of
// the file put back in its place holds the lines written before the
// copy was taken, and the file itself, grown by a line appended by
// hand, holds every one (helper-141: all were written again, and once
// the foreign line was cut off verify-log found them twice). A line
// the log appended to a copy that ends mid-line is glued to it, not
// held: written again, and the cut named. The file is fsynced (under
// always and group) before the records it holds are acknowledged; if
// it cannot be, every line is written again. Anything but a regular
// file at the path holds none (a FIFO is opened non-blocking: it does
// not hold the log's lock).
func (l *Log) heldAtPathLocked(regular bool) (again []byte, held int, cut, foreign bool) {
	all := l.pend[:l.pendEnd(len(l.pendEnds))]
	if !regular {
		return all, 0, false, false // a symlink holds nothing: what it names is not in records_dir
	}
	f, err := os.OpenFile(l.curPath(), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return all, 0, false, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return all, 0, false, false
	}
	// The pending lines, after up to 1 MiB of a line a copy may end in
	// cut short or lines appended by hand, and the byte before them.
	tail := make([]byte, min(fi.Size(), int64(len(l.pend))+1<<20+1))
	atStart := int64(len(tail)) == fi.Size() // tail[0] is the file's first byte
	if _, err := f.ReadAt(tail, fi.Size()-int64(len(tail))); err != nil {
		return all, 0, false, false
	}
	cut = tail[len(tail)-1] != '\n'
	if cut {
		// What the copy holds whole: up to its last newline.
		tail = tail[:bytes.LastIndexByte(tail, '\n')+1]
	}
	from := 0           // where in tail the next pending line may be
	var heldBytes int64 // the held lines' length
	for k := range l.pendEnds {
		line := l.pend[l.pendEnd(k):l.pendEnds[k]]
		at := -1
		for i := from; i <= len(tail)-len(line); {
			j := bytes.Index(tail[i:], line)
			if j < 0 {
				break
			}
			p := i + j
			if (p == 0 && atStart) || (p > 0 && tail[p-1] == '\n') {
				at = p
				break
			}
			// Glued to a line before it (a cut-off line): not held.
			cut = true
			i = p + 1
		}
		if at < 0 {
			again = append(again, line...)
			continue
		}
		held++
		heldBytes += int64(len(line))
		from = at + len(line)
	}
	// A line cut inside the file (truncated in place while the log
	// wrote: the next lines went after the cut), or one appended by
	// hand, is named too.
	cut = cut || brokenLine(tail, atStart)
	if !cut && os.SameFile(l.fi, fi) {
		// The log's own file, grown: at the last check it held exactly
		// what the log wrote before the pending lines, so bytes past
		// those and the held lines are whole lines someone else
		// appended, records in form (a record's line copied by hand) or
		// not (brokenLine).
		foreign = fi.Size() > l.curSize-int64(len(all))+heldBytes
	}
	if held > 0 && l.policy != FsyncOff && f.Sync() != nil {
		return all, 0, cut, foreign
	}
	return again, held, cut, foreign
}

// brokenLine reports whether a line of tail (whole lines, from a
// file's start when atStart, else after its first newline) is not a
// negotiation record: cut, glued to another, or written by another hand.
func brokenLine(tail []byte, atStart bool) bool {
	if !atStart {
		i := bytes.IndexByte(tail, '\n')
		if i < 0 {
			return false
		}
		tail = tail[i+1:]
	}
	for len(tail) > 0 {
		i := bytes.IndexByte(tail, '\n')
		if i < 0 {
			return false // a partial last line: the caller's cut
		}
		if _, ok := parseHead(tail[:i]); !ok {
			return true
		}
		tail = tail[i+1:]
	}
	return false
}

// movedPlan is what rotateLocked writes again for a current file found
// moved (planMovedLocked).
type movedPlan struct {
	// from is, when >= 0, where in the current file (held open) the
	// bytes to write again begin: they run to upTo, then, with grown,
	// the pending lines follow. -1: the pending lines after the first
	// held.
	from int64
	// upTo is where the bytes read back end: l.curSize, or, when grown,
	// where the pending lines began.
	upTo int64
	// grown: the current file held more than the log wrote to it,
	// lines appended by another hand since the last check, among which
	// the pending lines no longer lie at their offsets: the bytes up to
	// the last check are read back, then the pending lines from Log.pend
	// (helper-143: a record line appended by hand took the place of the
	// log's last record, which was lost), and what was appended is not
	// written again.
	grown bool
	// held is how many of the log's records the file now at the path
	// holds: of the pending ones (from < 0), or from the file's start.
	held int
	// again is how many records are written again (from >= 0: counted
	// as they are).
	again int
	// lines are, when from < 0, the pending lines to write again.
	lines []byte
	// cut: the file now at the path holds, after those, a cut-off line
	// or bytes the log did not write there.
	cut bool
	// foreign: the file at the path holds whole lines of record form
	// the log did not write there (appended by hand to the log's own
	// file, or another file put in its place). Not set with cut, which
	// names them already.
	foreign bool
	// odd: what is at the path is not a regular file (a symlink, a
	// FIFO), which the next start and verify-log refuse.
	odd bool
	// intact: the file at the path is the log's own, grown by bytes
	// appended by another hand: it holds every record it held, but
	// those written again.
	intact bool
}

// none reports whether the plan writes nothing again.
func (p movedPlan) none(l *Log) bool {
	if p.from >= 0 {
		return p.from >= p.upTo && (!p.grown || len(l.pendEnds) == 0)
	}
	return p.again == 0
}

// planMovedLocked works out what to write again of a current file found
// moved. While the log holds it open and another file (or none) is at
// its path (it was removed, moved away, or replaced by a copy with
// mv), every line it held that the file now at its path does not,
// read back from it: the records of a file removed are all written
// again, not only those since the last check (up to the last check
// and then the pending lines, when lines were appended to it by
// another hand: grown). A file copied over it in place (the same file:
// what it held is gone), one a failure closed, or one moved after it
// was cut or copied over in place (heldIntactLocked): the pending
// lines the file at the path does not hold (heldAtPathLocked). odd:
// what is at the path is no regular file. The path is read with one
// Lstat, which both are given.
func (l *Log) planMovedLocked() movedPlan {
	li, err := os.Lstat(l.curPath()) // once: a symlink put at the path is not the file
	regular := err == nil && li.Mode().IsRegular()
	moved := l.f != nil && (err != nil || !os.SameFile(l.fi, li))
	size, intact := l.heldIntactLocked()
	var p movedPlan
	if moved && intact {
		p.from, p.held, p.cut, p.foreign = l.sharedPrefixLocked(regular)
		p.upTo = l.curSize
		if size > l.curSize {
			p.grown, p.upTo = true, l.curSize-int64(l.pendEnd(len(l.pendEnds)))
			p.from = min(p.from, p.upTo)
		}
	} else {
		// Not moved (copied over in place, or closed by a failure), or
		// moved after it was cut or copied over in place, when what it
		// held before the last check went with its bytes (helper-146:
		// read back, it was said none was lost, an empty file was
		// left, or another file's records were written as the log's
		// own): the pending lines the file at the path does not hold,
		// from memory, and the message says what may be missing.
		p.lines, p.held, p.cut, p.foreign = l.heldAtPathLocked(regular)
		p.from, p.again = -1, len(l.pendEnds)-p.held
		// The log's own file, grown by another hand: nothing it held
		// before the last check is missing (a pending line glued to a
		// cut-off one is written again).
		p.intact = !moved && err == nil && l.fi != nil && os.SameFile(l.fi, li) && li.Size() > l.curSize && intact
	}
	p.odd = err == nil && !regular
	return p
}

// heldIntactLocked reports whether the file the log holds open still
// holds what the log wrote to it up to the last check: it is at least
// as long as the log wrote (l.curSize), and the last line checked
// (l.lastLine) ends where the pending lines begin, or, with none
// checked in it yet, the first pending line begins it. A file cut, or
// copied over in place, fails it (an error reading it too, or no file
// held); one grown by lines appended by hand passes. size is the held
// file's.
func (l *Log) heldIntactLocked() (size int64, ok bool) {
	if l.f == nil {
		return 0, false
	}
	hi, err := l.f.Stat()
	if err != nil || hi.Size() < l.curSize {
		return 0, false
	}
	base := l.curSize - int64(l.pendEnd(len(l.pendEnds)))
	want, at := l.lastLine, base-int64(len(l.lastLine))
	if len(want) == 0 || at < 0 {
		// Nothing checked in this file yet: its first pending line
		// begins it (nothing is read back before it either way).
		if base != 0 || len(l.pendEnds) == 0 {
			return hi.Size(), true
		}
		want, at = l.pend[:l.pendEnds[0]], 0
	}
	b := make([]byte, len(want))
	if _, err := l.f.ReadAt(b, at); err != nil {
		return 0, false
	}
	return hi.Size(), bytes.Equal(b, want)
}

// sharedPrefixLocked returns the length of the whole lines the file now
// at the current file's path begins with that the current file (held
// open) begins with too, how many lines that is, and what the file at
// the path holds after them (extraLines: cut or foreign). No regular file at the path (regular false, from
// planMovedLocked's one Lstat) shares none. When it
// shares some and the policy is not off, it is fsynced first, before
// the records it holds are acknowledged; if it cannot be, it shares
// none (they are written again).
func (l *Log) sharedPrefixLocked(regular bool) (from int64, lines int, cut, foreign bool) {
	if !regular {
		return 0, 0, false, false // a symlink holds nothing: what it names is not in records_dir
	}
	p, err := os.OpenFile(l.curPath(), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, 0, false, false
	}
	defer p.Close()
	pi, err := p.Stat()
	if err != nil || !pi.Mode().IsRegular() {
		return 0, 0, false, false
	}
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for off := int64(0); off < l.curSize; {
		m := int(min(int64(len(a)), l.curSize-off))
		na, _ := l.f.ReadAt(a[:m], off)
		nb, _ := p.ReadAt(b[:m], off)
		i := 0
		for i < na && i < nb && a[i] == b[i] {
			if a[i] == '\n' {
				from, lines = off+int64(i)+1, lines+1
			}
			i++
		}
		if i < m {
			break
		}
		off += int64(m)
	}
	if pi.Size() > from {
		cut, foreign = extraLines(p, pi.Size(), from)
	}
	if from > 0 && l.policy != FsyncOff && p.Sync() != nil {
		return 0, 0, cut, foreign
	}
	return from, lines, cut, foreign
}

// extraLines tells what the file f (of size bytes) holds after the
// first from, which the log did not write there: a cut-off line or
// bytes that are no record (cut), or whole lines in the form of records
// (foreign: another log file put in place of the current one, a
// record's line added by hand), which the start and verify-log read as
// records (helper-143: named as a cut-off line they refuse). The last
// 1 MiB is read.
func extraLines(f *os.File, size, from int64) (cut, foreign bool) {
	n := min(size-from, 1<<20)
	tail := make([]byte, n)
	if _, err := f.ReadAt(tail, size-n); err != nil || tail[n-1] != '\n' || brokenLine(tail, n == size-from) {
		return true, false
	}
	return false, true
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
// rotates to a new file, writing again there what the file at its path
// does not hold (rotateLocked; none: the next record creates it).
func (l *Log) checkLocked(n uint64) error {
	l.idleAt = time.Now()
	if l.leaving && l.told && l.f != nil && l.atPathLocked(false) {
		// Found changed and left in place, and still there: the next
		// record starts the new file (replaceMovedLocked).
		return nil
	}
	if l.fi == nil || l.atPathLocked(true) {
		l.dropPendingLocked(n)
		return nil
	}
	return l.rotateLocked(l.curDay, l.curNum+1, true)
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
	l.lastLine = append(l.lastLine[:0], l.pend[l.pendEnd(k-1):l.pendEnds[k-1]]...)
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
	if k := len(l.pendEnds); k > 0 {
		l.lastLine = append(l.lastLine[:0], l.pend[l.pendEnd(k-1):l.pendEnds[k-1]]...)
	}
	if cap(l.pend) > 2*maxPendingBytes {
		l.pend, l.pendEnds = nil, nil
	}
	l.pend, l.pendEnds = l.pend[:0], l.pendEnds[:0]
	l.pendBase = l.written
}

// movedMessageLocked is what LogOptions.Moved is told when the current
// file, at oldPath, was found moved: how many records were written
// again in newPath ("" when none was and no file was created yet), how
// many the file now at oldPath holds, and whether it holds a cut-off
// line (plan).
func (l *Log) movedMessageLocked(oldPath, newPath string, plan movedPlan) string {
	msg := oldPath + " was removed, moved, replaced or copied over under the running gateway"
	if plan.intact {
		msg = oldPath + " had bytes appended by another hand under the running gateway"
	}
	if l.recreated {
		msg += " (its folder was gone, and was created again)"
		l.recreated = false
	}
	read := plan.from >= 0 // read back from the file held open: nothing it held is lost
	switch n := plan.again; {
	case n > 0 && read:
		msg += fmt.Sprintf(": the %s it held that the file now at its path does not %s written again in %s, read back from the file the gateway held open",
			plural.Count(n, "record", "records"), wasWere(n), newPath)
	case n > 0:
		msg += fmt.Sprintf(": the %s written to it since it was last found in place %s written again in %s",
			plural.Count(n, "record", "records"), wasWere(n), newPath)
	case read:
		msg += ": the file now at its path holds every record it held; none is lost"
	default:
		msg += ": no record written to it since it was last found in place is lost"
	}
	switch {
	case read && plan.held > 0 && plan.again > 0:
		msg += fmt.Sprintf(" (the file now at its path holds the %s before them)", plural.Count(plan.held, "record", "records"))
	case read:
	case plan.held > 0 && plan.again > 0:
		msg += fmt.Sprintf(" (the file now at its path holds the other %s)", plural.Count(plan.held, "record", "records"))
	case plan.held > 0:
		msg += fmt.Sprintf(" (the file now at its path holds the %s)", plural.Count(plan.held, "record", "records"))
	}
	switch {
	case l.closed:
	case newPath != "":
		msg += "; the log goes on in " + newPath + " (and the files after it)"
	default:
		msg += "; the next record starts a new file"
	}
	if !read && !plan.intact {
		msg += "; what it held before is in records_dir only as far as the file now at its path holds it (verify-log names the first record missing or repeated)"
	}
	// The log's own file grown by hand, left in place: the next record
	// starts a new file, and this one, no longer the newest (the one
	// the guide keeps from archiving), holds the only copy of its
	// records; removed for the bytes the hand added, they are lost
	// (helper-147). One instruction, not two (helper-150).
	keep := plan.intact && !read
	const onlyCopy = ": it holds the only copy of the records before them, which are not written again"
	const kept = ", in place, and keep the file" + onlyCopy
	if plan.cut {
		msg += "; the file now at its path holds a cut-off line, or bytes the gateway did not write, which verify-log and the gateway's next start refuse"
		if keep {
			msg += ": cut them off (verify-log names the line)" + kept
		} else {
			msg += ": cut that line off or restore the file"
		}
	}
	if plan.grown {
		msg += "; it held lines the gateway did not write there (appended by hand), which were not written again"
	}
	if plan.foreign {
		msg += "; the file now at its path holds whole lines, in the form of records, that the gateway did not write there (appended by hand, or another file put in its place): verify-log and the next start read them as records (a copy of one the log holds is named as a repeat)"
		if keep {
			msg += "; cut them off" + kept
		} else {
			msg += "; cut them off or restore the file"
		}
	}
	if keep && !plan.cut && !plan.foreign {
		msg += "; keep the file, with what the hand added edited out" + onlyCopy
	}
	if plan.odd {
		msg += "; what is now at its path is not a regular file (a symbolic link, a FIFO), which verify-log and the gateway's next start refuse: remove it"
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
