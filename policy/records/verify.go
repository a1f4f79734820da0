package records

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/hexid"
	"github.com/gowebpki/jcs"
)

// VerifyError names the first broken record [VerifyDir] found.
type VerifyError struct {
	// File is the path of the log file.
	File string
	// Line is the 1-based line number in File; 0 when the fault is the
	// file's as a whole.
	Line int
	// AgentID is the record's agent, "" when the line did not parse.
	AgentID string
	// Reason says what is wrong.
	Reason string
}

// Error returns "records: FILE:LINE: agent "A": REASON" (without the
// agent when not known, without the line when 0).
func (e *VerifyError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("records: %s: %s", e.File, e.Reason)
	}
	if e.AgentID == "" {
		return fmt.Sprintf("records: %s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("records: %s:%d: agent %q: %s", e.File, e.Line, e.AgentID, e.Reason)
}

// VerifyDir checks every negotiation log file in dir, in write order
// (ARCHITECTURE.md "Records"; seed 002 §8.2): every line is a complete
// record in JCS form with the required fields, its hash is the SHA-256 of
// its JCS form without hash, its prev is the hash of the same agent's
// previous record ([ZeroHash] for the first), and its seq is one more
// than that record's (1 for the first). It returns nil, a *[VerifyError]
// naming the file, line and agent of the first broken record, or an
// error for an unreadable directory or file.
func VerifyDir(dir string) error {
	_, err := VerifyDirStats(dir)
	return err
}

// VerifyStats is what [VerifyDirStats] checked.
type VerifyStats struct {
	Files   int   // log files read
	Chains  int   // agents (hash chains) seen
	Records int64 // records checked
	// Nodes are the node_id values the records name, sorted: the
	// gateway node that wrote them (one, unless the node was renamed);
	// records without node_id (written before it existed) add none.
	Nodes []string
}

// VerifyDirStats is [VerifyDir] that also says how much it checked (the
// counts up to the first broken record when there is one). Zero Files is
// not an error here; a caller that was given dir to check should treat
// it as one (the wrong directory, or an empty one).
//
// Only what is stored can be checked: a chain whose last records were
// removed (or a newest log file deleted whole) still verifies, since
// nothing records how long each chain was.
func VerifyDirStats(dir string) (st VerifyStats, err error) {
	files, err := listLogFiles(dir)
	if err != nil {
		return st, err
	}
	heads := map[string]logHead{}
	nodes := map[string]bool{}
	defer func() {
		for n := range nodes {
			st.Nodes = append(st.Nodes, n)
		}
		slices.Sort(st.Nodes)
	}()
	for i, lf := range files {
		st.Files++
		before := st.Records
		path := filepath.Join(dir, lf.name)
		err := verifyFile(path, heads, nodes, i == len(files)-1)
		st.Chains = len(heads)
		st.Records = 0
		for _, h := range heads {
			st.Records += h.seq
		}
		if err != nil {
			return st, err
		}
		if st.Records == before && i < len(files)-1 {
			// A gateway writes a file with its first record and removes
			// a newest one left empty when it opens the log (OpenLog),
			// so an older file holds at least one.
			return st, &VerifyError{File: path, Reason: "the file holds no records, and is not the newest: a gateway writes a log file with its first record and never empties one, so it was emptied or cut to nothing (only a disk that filled as the file's first record was written leaves one too, and the gateway's log then says so)"}
		}
	}
	return st, nil
}

// verifyFile checks one file against and advances heads, adding the
// node ids its records name to nodes. A directory is one node's (its
// records_dir), so each agent's chain is checked across node ids: a
// node renamed keeps writing the same chain.
func verifyFile(path string, heads map[string]logHead, nodes map[string]bool, newest bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("records: open negotiation log: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			if len(line) == 0 {
				return nil
			}
			return &VerifyError{File: path, Line: lineNo, Reason: tornReason(line, newest)}
		}
		if err != nil {
			return fmt.Errorf("records: read %s: %w", path, err)
		}
		if reason := lineEndingFault(line[:len(line)-1], r); reason != "" {
			// Name the agent when the rest of the line is its record.
			rec, _ := parseRecord(bytes.TrimSuffix(line[:len(line)-1], []byte("\r")))
			return &VerifyError{File: path, Line: lineNo, AgentID: rec.agentID, Reason: reason}
		}
		rec, err := parseRecord(line[:len(line)-1])
		if err != nil {
			return &VerifyError{File: path, Line: lineNo, AgentID: rec.agentID, Reason: err.Error()}
		}
		want, ok := heads[rec.agentID]
		if !ok {
			want.hash = ZeroHash
		}
		if rec.seq != want.seq+1 {
			why := "records missing before it (removed or edited, or the files before it moved away)"
			if rec.seq <= want.seq {
				why = "the agent's chain already went past it: a record repeated (a file moved back, or copied in twice) or out of order"
			}
			return &VerifyError{File: path, Line: lineNo, AgentID: rec.agentID,
				Reason: fmt.Sprintf("seq %d, want %d: %s", rec.seq, want.seq+1, why)}
		}
		if rec.prev != want.hash {
			return &VerifyError{File: path, Line: lineNo, AgentID: rec.agentID,
				Reason: fmt.Sprintf("prev %s, want %s (hash of the agent's previous record)", rec.prev, want.hash)}
		}
		heads[rec.agentID] = logHead{hash: rec.hash, seq: rec.seq}
		if rec.nodeID != "" {
			nodes[rec.nodeID] = true
		}
	}
}

// tornReason says what verify-log finds in the bytes after the last
// newline of a file: residue a crash leaves, which the gateway repairs
// when it opens the log (OpenLog), or an edit, which it refuses. A crash
// leaves residue only in the newest file: in another the gateway
// refuses any.
func tornReason(tail []byte, newest bool) string {
	if !newest {
		return "torn line (no newline at end of file) in a file that is not the newest: a crash leaves one only in the newest file, so this one was cut, or copied while the gateway wrote it (a copy put back in place of the file it wrote, say); the gateway refuses it: cut the line off or restore the file, then verify again"
	}
	const repaired = "; starting the gateway on this records_dir repairs it (a WARN names it), then verify again"
	if trimmed := bytes.TrimRight(tail, "\x00"); len(trimmed) < len(tail) {
		if _, fault := tornTail(trimmed); len(trimmed) == 0 || fault == "" {
			return "torn line (no newline at end of file), ending in NUL bytes a power loss leaves: a write never acknowledged under fsync always or group" + repaired + " by cutting it off (its bytes kept beside the file, in the same name ending .torn)"
		}
	}
	whole, fault := tornTail(tail)
	switch _, ok := parseHead(tail); {
	case fault != "":
		return "torn line (no newline at end of file): " + fault
	case whole && ok:
		return "the last record has no newline" + repaired + " by writing the newline back"
	case whole:
		return "torn line (no newline at end of file): a JSON value that is not a negotiation record, so the file was edited"
	}
	return "torn line (no newline at end of file): a record cut short (under fsync always or group, never acknowledged)" + repaired + " by cutting it off (its bytes kept beside the file, in the same name ending .torn)"
}

// lineEndingFault says what is wrong with a log line (without its
// newline) that is empty, holds only whitespace, or ends in a carriage
// return, and is "" for any other line. The gateway writes none of
// these (each line is one record in JCS form ending in "\n" alone), so
// each means the file was edited: an empty line (a trailing "\n\n"), a
// whitespace-only line, or "\r\n" line endings from an editor or a
// copy that converted them. rest, when not nil, is read from to say
// whether an empty line is the file's last.
func lineEndingFault(line []byte, rest *bufio.Reader) string {
	const edited = "the gateway never writes one, so the file was edited"
	switch {
	case len(line) == 0:
		if rest != nil {
			if _, err := rest.Peek(1); err == io.EOF {
				return "empty line at the end of the file (it ends in two newlines); " + edited
			}
		}
		return "empty line; " + edited
	case len(bytes.TrimSpace(line)) == 0:
		return fmt.Sprintf("line holds only whitespace (%q); %s", line, edited)
	case line[len(line)-1] == '\r':
		return `line ends in "\r\n" (a carriage return before the newline); the gateway ends every line with "\n" alone, so the file was edited or its line endings converted`
	}
	return ""
}

// parsedRecord is what the chain check needs of one line.
type parsedRecord struct {
	agentID string
	nodeID  string
	seq     int64
	prev    string
	hash    string
}

// parseRecord parses one log line (without its newline) and checks that
// it is in JCS form, has the required fields and that its hash member is
// the hash of the rest. agentID is filled in as soon as it is known, even
// on error.
func parseRecord(line []byte) (parsedRecord, error) {
	var p parsedRecord
	canon, err := jcs.Transform(line)
	if err != nil {
		return p, fmt.Errorf("not JSON: %v", err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return p, errors.New("not a JSON object")
	}
	p.agentID, _ = m["agent_id"].(string)
	p.nodeID, _ = m["node_id"].(string)
	if !bytes.Equal(canon, line) {
		return p, errors.New("line is not in JCS (RFC 8785) form")
	}
	if p.agentID == "" {
		return p, errors.New(`"agent_id" missing or not a non-empty string`)
	}
	seq, ok := m["seq"].(json.Number)
	if !ok {
		return p, errors.New(`"seq" missing or not a number`)
	}
	p.seq, err = strconv.ParseInt(string(seq), 10, 64)
	if err != nil || p.seq < 1 {
		return p, fmt.Errorf(`"seq" %s is not a positive integer`, seq)
	}
	if at, _ := m["at"].(string); at == "" {
		return p, errors.New(`"at" missing or not a string`)
	} else if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
		return p, fmt.Errorf(`"at" %q is not RFC 3339`, at)
	}
	if kind, _ := m["kind"].(string); !validKind(kind) {
		return p, fmt.Errorf(`"kind" %v is not %s`, m["kind"], kindList)
	}
	if outcome, _ := m["outcome"].(string); outcome != OutcomeAccepted && outcome != OutcomeRefused {
		return p, fmt.Errorf(`"outcome" %v is not accepted or refused`, m["outcome"])
	}
	for _, k := range []string{"requested", "granted"} {
		if _, ok := m[k]; !ok {
			return p, fmt.Errorf("%q missing", k)
		}
	}
	p.prev, _ = m["prev"].(string)
	if !hexid.Valid(p.prev) {
		return p, errors.New(`"prev" is not 64 lowercase hex digits`)
	}
	p.hash, _ = m["hash"].(string)
	if !hexid.Valid(p.hash) {
		return p, errors.New(`"hash" is not 64 lowercase hex digits`)
	}
	delete(m, "hash")
	rest, err := canonical(m)
	if err != nil {
		return p, err
	}
	sum := sha256.Sum256(rest)
	if got := hex.EncodeToString(sum[:]); got != p.hash {
		return p, fmt.Errorf("hash %s does not match the record (computed %s)", p.hash, got)
	}
	return p, nil
}

// tornTail says what the bytes after a log file's last newline are: one
// whole JSON value (whole true), or the start of one cut short (whole
// false), as a crash can leave them; else fault says why they are
// neither, and so were edited: a second value after the first, anything
// but a value's first byte at the start, or bytes after a whole value
// (a "\r" of converted line endings, whitespace).
func tornTail(tail []byte) (whole bool, fault string) {
	const edited = "after the last newline; a crash leaves at most one record there, whole or cut short, so the file was edited"
	if len(tail) == 0 || tail[0] != '{' {
		return false, fmt.Sprintf("%q starts the bytes %s", tail[:1], edited)
	}
	dec := json.NewDecoder(bytes.NewReader(tail))
	var v json.RawMessage
	switch err := dec.Decode(&v); {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return false, ""
	case err != nil:
		return false, fmt.Sprintf("%d bytes that are not the start of one JSON record (%v) %s", len(tail), err, edited)
	case dec.InputOffset() < int64(len(tail)):
		return false, fmt.Sprintf("a record followed by %d more bytes %s (line endings converted to \"\\r\"?)", int64(len(tail))-dec.InputOffset(), edited)
	}
	return true, ""
}

// agentHead is the chain head one record leaves.
type agentHead struct {
	agent string
	prev  string // the record's prev
	logHead
}

// parseHead reads the agent, seq, hash and prev of one record line (its
// newline or none).
func parseHead(line []byte) (agentHead, bool) {
	var rec struct {
		AgentID string `json:"agent_id"`
		Seq     int64  `json:"seq"`
		Hash    string `json:"hash"`
		Prev    string `json:"prev"`
	}
	if err := json.Unmarshal(line, &rec); err != nil || rec.AgentID == "" || rec.Seq < 1 || !hexid.Valid(rec.Hash) {
		return agentHead{}, false
	}
	return agentHead{rec.AgentID, rec.Prev, logHead{hash: rec.Hash, seq: rec.Seq}}, true
}
