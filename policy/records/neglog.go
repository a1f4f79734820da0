package records

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
)

// FsyncPolicy says when [Log.Append] makes a record durable
// (ARCHITECTURE.md "Records").
type FsyncPolicy string

const (
	// FsyncAlways fsyncs the file after every record, before Append
	// returns: the slowest and safest (about 0.33 ms per record here).
	FsyncAlways FsyncPolicy = "always"
	// FsyncGroup (the default) is group commit: one flusher fsyncs as
	// soon as the previous fsync ends (no fixed floor, see
	// [GroupFsyncInterval]); Append returns only after an fsync that
	// covers its record, so concurrent Appends share one fsync and none
	// is acknowledged before it is durable.
	FsyncGroup FsyncPolicy = "group"
	// FsyncOff never fsyncs while running (only at Close and rotation):
	// Append returns once the record is written to the file, and a
	// machine crash can lose acknowledged records.
	FsyncOff FsyncPolicy = "off"
)

// GroupFsyncInterval is the least time between two fsyncs under
// [FsyncGroup]. Zero: a floor (10 ms before) only added latency, since
// records arriving during an fsync already share the next one
// (BenchmarkLogAppend in records_bench_test.go measures it).
const GroupFsyncInterval = 0

// LogCheckInterval is, under [FsyncOff], the time (by LogOptions.Now)
// after a check that the current file is still at its path from which
// the next Append checks again, or a timer does while no Append comes
// and records wait for a check (see [Log]); under the other policies
// the check follows each fsync. maxPendingBytes of lines written since
// the last check also start one.
const LogCheckInterval = time.Second

// maxPendingBytes bounds the lines a Log keeps to write again (Log.pend).
const maxPendingBytes = 64 << 10

// DefaultMaxFileBytes is the size at which a negotiation log file is
// rotated when [LogOptions.MaxFileBytes] is zero: 64 MiB.
const DefaultMaxFileBytes int64 = 64 << 20

// Negotiation record kinds (ARCHITECTURE.md "Records"): a gate
// evaluation (including 429), a PROPOSE turn, a contract release
// (SUSPEND or sweep), a REVOKE, a protocol version negotiation.
const (
	// KindGate records a four-lock gate evaluation, 429 included (RCNS §11).
	KindGate = "gate"
	// KindPropose records one PROPOSE turn (RCNS §15).
	KindPropose = "propose"
	// KindRelease records a contract release: SUSPEND or the stale sweep
	// (RCNS §14.4).
	KindRelease = "release"
	// KindRevoke records a REVOKE target=contract (RCNS §14.4).
	KindRevoke = "revoke"
	// KindProtocolVersion records a door's protocol version negotiation
	// (the MCP door's initialize and server/discover, seed 003):
	// requested and granted carry protocol_version; an accepted record
	// whose granted version differs from the requested one is a
	// downgrade.
	KindProtocolVersion = "protocol-version"
)

// kinds are the negotiation record kinds, in the order errors name
// them: the one list the writer (checkRecord) and the verifier
// (VerifyDir) both check, so a kind the gateway writes always verifies.
var kinds = []string{KindGate, KindPropose, KindRelease, KindRevoke, KindProtocolVersion}

// kindList names kinds for errors ("gate, propose, … or protocol-version").
var kindList = strings.Join(kinds[:len(kinds)-1], ", ") + " or " + kinds[len(kinds)-1]

// validKind reports whether kind is one of kinds.
func validKind(kind string) bool { return slices.Contains(kinds, kind) }

// IsKind reports whether kind is a negotiation record kind (gate,
// propose, release, revoke or protocol-version).
func IsKind(kind string) bool { return validKind(kind) }

// KindList names the negotiation record kinds for errors ("gate,
// propose, release, revoke or protocol-version").
func KindList() string { return kindList }

// Negotiation record outcomes (seed 003 §A.3): a downgrade is an
// accepted record whose granted differs from requested.
const (
	// OutcomeAccepted: something was granted, possibly less than asked.
	OutcomeAccepted = "accepted"
	// OutcomeRefused: nothing was granted; "granted" should be null.
	OutcomeRefused = "refused"
)

// LogRetryInterval is how long a [Log] that failed to write waits before
// an Append tries again; until then, and while a try fails, Appends
// return the failure at once.
const LogRetryInterval = time.Second

// ErrLogClosed is returned by [Log.Append] after [Log.Close].
var ErrLogClosed = errors.New("records: negotiation log is closed")

// ErrInvalidRecord is wrapped by the errors [Log.Append] returns for a
// record it refuses to write (missing or unknown kind or outcome,
// missing requested or granted, a reserved field set, an empty agent id,
// a value JSON cannot encode).
var ErrInvalidRecord = errors.New("records: invalid negotiation record")

// LogOptions configures [OpenLog].
type LogOptions struct {
	// Dir holds the log files; it is created (mode 0750) if missing.
	// Required.
	Dir string
	// Fsync is the durability policy; empty means [FsyncGroup].
	Fsync FsyncPolicy
	// MaxFileBytes rotates to a new file before a record would take the
	// current one past this size, in bytes; a record larger than it goes
	// alone in a file. Zero means [DefaultMaxFileBytes].
	MaxFileBytes int64
	// Now is the clock for "at", for naming files by UTC day and for
	// [LogCheckInterval]; nil means time.Now.
	Now func() time.Time
	// Moved, when set, is called when the log finds its current file
	// removed, moved or replaced under it, with a message naming the
	// file, how many records were written again and in which file (see
	// [Log]), and any cut-off line or bytes the log did not write in the
	// file now at its path. It is called once per file found moved, with
	// the log's lock held, so it must not call the Log.
	Moved func(msg string)
}

// Log is the negotiation log (ARCHITECTURE.md "Records"; seed 003; seed
// 002 §8.2): JSON Lines files in one directory, named
// negotiations-YYYY-MM-DD-NNNN.jsonl by UTC day and a sequence number
// from 0001, rotated by size and by day. Each line is one record in its
// RFC 8785 (JCS) form:
//
//	{"agent_id":A,"at":RFC3339Nano,"granted":{...}|null,"hash":H,
//	 "kind":"gate"|"propose"|"release"|"revoke",
//	 "outcome":"accepted"|"refused","prev":P,"reason":...,
//	 "requested":{...},"seq":N,...}
//
// Records of one agent form a hash chain: seq counts 1, 2, 3... per
// agent, prev is the hash of the agent's previous record ([ZeroHash] for
// the first), and hash is lowercase hex SHA-256 of the JCS form of the
// record without its hash member. Chains cross files and restarts.
//
// A Log is safe for concurrent use. After an I/O error it refuses
// records (the file may end in a torn line). A failure to write, or to
// open or create a file (a full disk, a file an operator moved), is
// tried again by the first Append at least [LogRetryInterval] later: it
// cuts the file back to its last complete line and writes on, the
// chains continuing from the last record written. A failed fsync, or a
// failed close or directory sync, is not retried (the kernel may have
// dropped the data it covered); reopening the log truncates a torn last
// line and continues.
//
// A current file removed, moved, replaced or copied over in place
// under the log (the path no longer names the file it holds open, or
// that file is not of the size the log wrote) is found after each
// fsync (under [FsyncAlways] and [FsyncGroup], before the records it
// covers are acknowledged), under [FsyncOff] at the first Append
// [LogCheckInterval] or more after the last check, or by a timer each
// LogCheckInterval (by LogOptions.Now) while records written since the
// last check wait and no Append comes; and, under every policy, at
// rotation, at Close and before a failed write is tried again. What it
// held that the file now at its path does not is then written again
// into a new file (created by the next record when there is none),
// and LogOptions.Moved is told: when it was removed, moved away, or
// replaced by another file, everything it held, read back from the
// file the log holds open (nothing is lost); when another file was
// copied over it in place (the same file: what it held is gone), the
// lines written since the last check that the file does not end with,
// what it held before going with the copy (verify-log shows the gap).
type Log struct {
	dir      string
	policy   FsyncPolicy
	maxBytes int64
	now      func() time.Time

	mu    sync.Mutex
	cond  sync.Cond // on mu; broadcast when synced, failed or flusherExited change
	heads map[string]logHead

	f       *os.File    // current file: the newest, opened by OpenLog; nil until the first Append when none exists, or after a failure
	fi      os.FileInfo // the current file's identity (os.SameFile), kept while f is closed after a failure
	curDay  string      // YYYY-MM-DD of the current (or last existing) file
	curNum  int         // its sequence number; 0 when no file exists yet
	curSize int64       // its size in bytes

	closed        bool
	failed        error     // the I/O error the log refuses records with
	retryable     bool      // failed is a write, open or create error (recoverLocked)
	failedAt      time.Time // when failed was set, or last tried again (l.now)
	written       uint64    // records written
	synced        uint64    // records known durable
	flusherExited bool

	notes []string // what OpenLog changed or found (Notes)
	// The chain breaks OpenLog read (follow): how many, and the first.
	breaks     int
	firstBreak string

	// The lines written to the current file since it was last found at
	// its path (checkLocked), to write again in the next file if it is
	// not: pend holds them, pendEnds their ends in it, and pendBase the
	// records written before the first.
	pend     []byte
	pendEnds []int
	pendBase uint64
	// lastLine is the last line that stopped being pending, which ends
	// where the pending lines begin in the current file (""
	// in a file none was checked in yet): heldIntactLocked compares it.
	lastLine  []byte
	checkedAt time.Time // the last check under FsyncOff, by l.now
	idleAt    time.Time // the last check of any kind, by the wall clock (checker)
	leaving   bool      // the current file was found moved, and no new file has taken its lines yet (rotateLocked)
	told      bool      // while leaving: LogOptions.Moved was told of it already (replaceMovedLocked)
	recreated bool      // the log directory was gone and createLocked made it again; told with the next Moved
	moved     func(msg string)

	kick        chan struct{} // wakes the flusher; buffered 1
	done        chan struct{} // closed by Close
	flusherDone chan struct{} // closed when the flusher (FsyncGroup) returns; nil without it
	checkerDone chan struct{} // closed when the checker returns
}

// logHead is the end of one agent's chain.
type logHead struct {
	hash string
	seq  int64
}

const (
	logPrefix = "negotiations-"
	logSuffix = ".jsonl"
	dayLayout = "2006-01-02"
)

// logFile is one log file's name parts.
type logFile struct {
	name string
	day  string
	num  int
}

// Append writes one negotiation record for agentID (ARCHITECTURE.md
// "Records"; seed 003) and returns its hash (64 lowercase hex). rec holds
// the caller's fields: "kind" (one of the Kind constants), "outcome"
// ([OutcomeAccepted] or [OutcomeRefused]), "requested" (any JSON value)
// and "granted" (a JSON value or nil for null) are required; "reason"
// and any other fields are free. The log adds "agent_id", "seq", "at"
// (l's clock, UTC, RFC 3339 with nanoseconds), "prev" and "hash"; rec
// must not set them (an "agent_id" equal to agentID is tolerated). rec is
// not modified. Numbers pass through RFC 8785, so integers beyond 2^53
// lose precision.
//
// The record is written to the file before Append returns and, under
// [FsyncAlways] and [FsyncGroup], fsynced too. Errors: one wrapping
// [ErrInvalidRecord] for a record refused before writing, [ErrLogClosed]
// after Close, or the I/O error that failed the log.
func (l *Log) Append(agentID string, rec map[string]any) (hash string, err error) {
	record, err := checkRecord(agentID, rec, false)
	if err != nil {
		return "", err
	}
	return l.append(agentID, record)
}

// AppendOwned is Append completing the caller's map: the log adds
// "agent_id", "seq", "at" and "prev" to rec itself instead of to a
// copy, so no other goroutine may read or write rec, or write its
// values' maps, during the call. When it returns nil, rec is the
// record as written (without its "hash", which it returns) and is the
// caller's again; after an error, rec may hold some of the added
// members. The line written is the one Append writes for the same
// fields. A map made with room for the four added members (len(rec)+4)
// is not grown.
func (l *Log) AppendOwned(agentID string, rec map[string]any) (hash string, err error) {
	record, err := checkRecord(agentID, rec, true)
	if err != nil {
		return "", err
	}
	return l.append(agentID, record)
}

// append is Append after checkRecord.
func (l *Log) append(agentID string, record map[string]any) (hash string, err error) {
	l.mu.Lock()
	// Deferred, not unlocked on each return: a panic under the lock (a
	// defect) would otherwise hold it for the life of the process, and
	// every later record, and every gate request, would wait on it.
	defer l.mu.Unlock()
	if l.closed {
		return "", ErrLogClosed
	}
	if l.failed != nil {
		if err := l.recoverLocked(); err != nil {
			return "", err
		}
	}
	head, ok := l.heads[agentID]
	if !ok {
		head.hash = ZeroHash
	}
	now := l.now().UTC()
	record["agent_id"] = agentID
	record["seq"] = head.seq + 1
	record["at"] = now.Format(time.RFC3339Nano)
	record["prev"] = head.hash
	lp := getBuf()
	line, hash, err := appendRecord((*lp)[:0], record)
	if err == nil {
		err = l.writeLocked(now, line)
	}
	if err == nil {
		l.keepPendingLocked(line)
	}
	*lp = line
	putBuf(lp)
	if err != nil {
		return "", err
	}
	l.heads[agentID] = logHead{hash: hash, seq: head.seq + 1}
	l.written++
	mine := l.written

	switch l.policy {
	case FsyncAlways:
		if err := l.f.Sync(); err != nil {
			l.failLocked(fmt.Errorf("records: fsync negotiation log: %w", err))
			err := l.failed
			return "", err
		}
		if err := l.checkLocked(mine); err != nil {
			return "", err
		}
		l.synced = max(l.synced, mine)
	case FsyncOff:
		if len(l.pend) >= maxPendingBytes || now.Sub(l.checkedAt) >= LogCheckInterval || now.Before(l.checkedAt) {
			l.checkedAt = now
			if err := l.checkLocked(mine); err != nil {
				return "", err
			}
		}
	case FsyncGroup:
		select {
		case l.kick <- struct{}{}:
		default:
		}
		for l.synced < mine && l.failed == nil && !l.flusherExited {
			l.cond.Wait()
		}
		if l.synced < mine {
			err := l.failed
			if err == nil {
				err = ErrLogClosed
			}
			return "", err
		}
	}
	return hash, nil
}

// checkRecord validates rec and returns the map to complete: a copy, or
// rec itself when owned.
func checkRecord(agentID string, rec map[string]any, owned bool) (map[string]any, error) {
	if agentID == "" {
		return nil, fmt.Errorf("%w: empty agent id", ErrInvalidRecord)
	}
	if kind, _ := rec["kind"].(string); !validKind(kind) {
		return nil, fmt.Errorf("%w: kind %v, want %s", ErrInvalidRecord, rec["kind"], kindList)
	}
	outcome, _ := rec["outcome"].(string)
	if outcome != OutcomeAccepted && outcome != OutcomeRefused {
		return nil, fmt.Errorf("%w: outcome %v, want accepted or refused", ErrInvalidRecord, rec["outcome"])
	}
	for _, k := range []string{"requested", "granted"} {
		if _, ok := rec[k]; !ok {
			return nil, fmt.Errorf("%w: %q is required (null allowed)", ErrInvalidRecord, k)
		}
	}
	for _, k := range []string{"seq", "at", "prev", "hash"} {
		if _, ok := rec[k]; ok {
			return nil, fmt.Errorf("%w: %q is set by the log", ErrInvalidRecord, k)
		}
	}
	if v, ok := rec["agent_id"]; ok && v != agentID {
		return nil, fmt.Errorf("%w: agent_id %v differs from %q", ErrInvalidRecord, v, agentID)
	}
	if owned {
		return rec, nil
	}
	out := make(map[string]any, len(rec)+5)
	for k, v := range rec {
		out[k] = v
	}
	return out, nil
}

// encodeRecord returns the JCS line (with a trailing newline) of record
// plus its "hash" member, and that hash: lowercase hex SHA-256 of the JCS
// form of record, which must not have a "hash" member itself.
func encodeRecord(record map[string]any) (line []byte, hash string, err error) {
	return appendRecord(nil, record)
}

// appendRecord is encodeRecord appending the line to dst. The JCS form
// it hashes is built in a pooled buffer, so a record costs one
// allocation for its line at most, none when dst has room.
func appendRecord(dst []byte, record map[string]any) (line []byte, hash string, err error) {
	bp := getBuf()
	defer putBuf(bp)
	canon, err := appendCanonical((*bp)[:0], record)
	*bp = canon
	if err != nil {
		return dst, "", err
	}
	sum := sha256.Sum256(canon)
	var hx [64]byte
	hex.Encode(hx[:], sum[:])
	return append(insertHash(dst, canon, hx[:]), '\n'), string(hx[:]), nil
}

// maxPooledBuf is the largest buffer getBuf's pool keeps: a record
// larger than 64 KiB (a long reason, a large grant) gets its own.
const maxPooledBuf = 64 << 10

// bufPool holds the negotiation log's encoding buffers (appendRecord's
// JCS form, Log.append's line), which no record outlives: the line is
// in the file once write(2) returns.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBuf {
		*bp = (*bp)[:0]
		bufPool.Put(bp)
	}
}

// insertHash appends to dst canon, the JCS form of an object, with
// "hash":HASH inserted where RFC 8785 §3.2.3 ordering puts it, saving a
// second canonicalization. Keys are compared as raw bytes of their JSON string
// form: for the all-ASCII "hash" that is the UTF-16 order JCS uses,
// since every escape (\\, \", \b... \u001f) stands for a character
// below 'a', as its backslash is.
func insertHash(dst, canon, hash []byte) []byte {
	var mb [len(`"hash":""`) + 64]byte
	member := append(append(append(mb[:0], `"hash":"`...), hash...), '"')
	out := slices.Grow(dst, len(canon)+len(member)+2) // room for ',' and the line's '\n'
	depth, inStr, esc := 0, false, false
	for i := 0; i < len(canon); i++ {
		c := canon[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			if depth == 1 && (canon[i-1] == '{' || canon[i-1] == ',') {
				j := i + 1
				for ; canon[j] != '"'; j++ {
					if canon[j] == '\\' {
						j++
					}
				}
				if string(canon[i+1:j]) > "hash" {
					out = append(out, canon[:i]...)
					out = append(out, member...)
					out = append(out, ',')
					return append(out, canon[i:]...)
				}
				i = j
				continue
			}
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	// Every key sorts before "hash": append before the closing brace.
	out = append(out, canon[:len(canon)-1]...)
	if len(canon) > 2 {
		out = append(out, ',')
	}
	out = append(out, member...)
	return append(out, '}')
}

// Close stops the flusher, fsyncs and closes the current file. Appends
// waiting for a group fsync are completed first. Later Appends return
// [ErrLogClosed]; a second Close returns nil. It returns the first error
// met while syncing or closing, or while writing again in a new file
// the records of a current file moved (see [Log]).
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()

	close(l.done)
	if l.flusherDone != nil {
		<-l.flusherDone
	}
	<-l.checkerDone

	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.f != nil && l.failed != nil && l.retryable && l.fi != nil && (l.leaving || !l.atPathLocked(false)) {
		// A file found moved whose records could not be written again
		// yet: one last try now, as the descriptor that holds them
		// closes (helper-141: they were lost without a word).
		l.failed, l.retryable = nil, false
		err = l.rotateLocked(l.curDay, l.curNum+1, true)
	}
	if l.f != nil && l.failed == nil {
		// A file moved since the last check (under every policy: one
		// removed while no record came is found here too) gets what it
		// held that the file at its path does not written again in a
		// new one, which the Sync below covers. With none to write, no
		// file is created.
		err = l.checkLocked(l.written)
	}
	if l.f != nil {
		if l.failed == nil {
			if serr := l.f.Sync(); serr != nil {
				err = fmt.Errorf("records: fsync negotiation log: %w", serr)
			} else {
				l.synced = l.written
			}
		}
		if cerr := l.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("records: close negotiation log: %w", cerr)
		}
		l.f = nil
	}
	l.cond.Broadcast()
	return err
}

// canonical is jsonenc.Canonical with its failures marked
// ErrInvalidRecord.
func canonical(v any) ([]byte, error) { return appendCanonical(nil, v) }

// appendCanonical is canonical appending to dst.
func appendCanonical(dst []byte, v any) ([]byte, error) {
	out, err := jsonenc.AppendCanonical(dst, v)
	if err != nil {
		return dst, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	return out, nil
}
