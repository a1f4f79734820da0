package records

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// stepClock returns a clock that starts at start and advances by step on
// every call.
func stepClock(start time.Time, step time.Duration) func() time.Time {
	var mu sync.Mutex
	t := start
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := t
		t = t.Add(step)
		return now
	}
}

var day1 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func gateRecord(outcome string) map[string]any {
	granted := any(map[string]any{"method": "BOOK", "path": "/room", "mode": "optimistic"})
	if outcome == OutcomeRefused {
		granted = nil
	}
	return map[string]any{
		"kind":      KindGate,
		"requested": map[string]any{"method": "BOOK", "path": "/room", "mode": "optimistic"},
		"granted":   granted,
		"outcome":   outcome,
		"reason":    "no-matching-recipe",
	}
}

func mustOpenLog(t *testing.T, opt LogOptions) *Log {
	t.Helper()
	l, err := OpenLog(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustAppend(t *testing.T, l *Log, agent string, rec map[string]any) string {
	t.Helper()
	h, err := l.Append(agent, rec)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// readLines returns every line of every log file in dir, in write order.
func readLines(t *testing.T, dir string) (files []string, lines []map[string]any) {
	t.Helper()
	lfs, err := listLogFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, lf := range lfs {
		files = append(files, lf.name)
		data, err := os.ReadFile(filepath.Join(dir, lf.name))
		if err != nil {
			t.Fatal(err)
		}
		for _, ln := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			if len(ln) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(ln, &m); err != nil {
				t.Fatalf("%s: %v", lf.name, err)
			}
			lines = append(lines, m)
		}
	}
	return files, lines
}

func TestLogRecordShape(t *testing.T) {
	dir := t.TempDir()
	l := mustOpenLog(t, LogOptions{Dir: dir, Now: stepClock(day1, time.Millisecond)})
	rec := gateRecord(OutcomeAccepted)
	h1 := mustAppend(t, l, "A", rec)
	if _, ok := rec["seq"]; ok {
		t.Error("Append modified the caller's map")
	}
	h2 := mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, lines := readLines(t, dir)
	if want := []string{"negotiations-2026-11-29-0001.jsonl"}; fmt.Sprint(files) != fmt.Sprint(want) {
		t.Errorf("files = %v, want %v", files, want)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	tests := []struct {
		name  string
		line  int
		field string
		want  any
	}{
		{name: "first seq", line: 0, field: "seq", want: 1.0},
		{name: "first prev", line: 0, field: "prev", want: ZeroHash},
		{name: "first hash", line: 0, field: "hash", want: h1},
		{name: "agent", line: 0, field: "agent_id", want: "A"},
		{name: "at", line: 0, field: "at", want: "2026-11-29T10:00:00Z"},
		{name: "kind", line: 0, field: "kind", want: "gate"},
		{name: "outcome", line: 0, field: "outcome", want: "accepted"},
		{name: "reason", line: 0, field: "reason", want: "no-matching-recipe"},
		{name: "second seq", line: 1, field: "seq", want: 2.0},
		{name: "second prev", line: 1, field: "prev", want: h1},
		{name: "second hash", line: 1, field: "hash", want: h2},
		{name: "second at", line: 1, field: "at", want: "2026-11-29T10:00:00.001Z"},
		{name: "refused granted null", line: 1, field: "granted", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := lines[tt.line][tt.field]
			if !ok || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("line %d %s = %v (present %v), want %v", tt.line+1, tt.field, got, ok, tt.want)
			}
		})
	}
	if req, _ := lines[0]["requested"].(map[string]any); req["method"] != "BOOK" {
		t.Errorf("requested = %v", lines[0]["requested"])
	}
	if err := VerifyDir(dir); err != nil {
		t.Errorf("VerifyDir: %v", err)
	}
}

func TestLogReopenContinuesChains(t *testing.T) {
	dir := t.TempDir()
	clock := stepClock(day1, time.Second)
	l := mustOpenLog(t, LogOptions{Dir: dir, Now: clock})
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	hA := mustAppend(t, l, "A", gateRecord(OutcomeRefused))
	hB := mustAppend(t, l, "B", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l2 := mustOpenLog(t, LogOptions{Dir: dir, Now: clock})
	mustAppend(t, l2, "A", map[string]any{
		"kind": KindPropose, "outcome": OutcomeAccepted,
		"requested": map[string]any{"mode": "optimistic"},
		"granted":   map[string]any{"mode": "confirm-first"}, // a downgrade
	})
	mustAppend(t, l2, "B", gateRecord(OutcomeAccepted))
	mustAppend(t, l2, "C", gateRecord(OutcomeAccepted))
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}

	files, lines := readLines(t, dir)
	if len(files) != 1 {
		t.Errorf("files = %v, want the reopened log to keep appending to one file", files)
	}
	last := map[string]map[string]any{}
	for _, ln := range lines {
		last[ln["agent_id"].(string)] = ln
	}
	tests := []struct {
		name     string
		agent    string
		wantSeq  float64
		wantPrev string
	}{
		{name: "A continues", agent: "A", wantSeq: 3, wantPrev: hA},
		{name: "B continues", agent: "B", wantSeq: 2, wantPrev: hB},
		{name: "C starts", agent: "C", wantSeq: 1, wantPrev: ZeroHash},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := last[tt.agent]
			if got["seq"] != tt.wantSeq || got["prev"] != tt.wantPrev {
				t.Errorf("seq %v prev %v, want %v %v", got["seq"], got["prev"], tt.wantSeq, tt.wantPrev)
			}
		})
	}
	if err := VerifyDir(dir); err != nil {
		t.Errorf("VerifyDir: %v", err)
	}
}

func TestLogRotationBySize(t *testing.T) {
	dir := t.TempDir()
	const max = 700
	l := mustOpenLog(t, LogOptions{Dir: dir, MaxFileBytes: max, Fsync: FsyncOff, Now: stepClock(day1, time.Millisecond)})
	for i := range 12 {
		mustAppend(t, l, fmt.Sprintf("agent-%d", i%3), gateRecord(OutcomeAccepted))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, lines := readLines(t, dir)
	if len(lines) != 12 {
		t.Fatalf("%d records, want 12", len(lines))
	}
	if len(files) < 3 {
		t.Fatalf("files = %v, want rotation into several", files)
	}
	for i, name := range files {
		if want := fmt.Sprintf("negotiations-2026-11-29-%04d.jsonl", i+1); name != want {
			t.Errorf("file %d = %s, want %s", i, name, want)
		}
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > max {
			t.Errorf("%s is %d bytes, over the %d limit", name, st.Size(), max)
		}
	}
	if err := VerifyDir(dir); err != nil {
		t.Errorf("VerifyDir across rotated files: %v", err)
	}

	// Reopen continues in the last file while it has room, then rotates.
	l2 := mustOpenLog(t, LogOptions{Dir: dir, MaxFileBytes: max, Fsync: FsyncOff, Now: stepClock(day1, time.Millisecond)})
	for range 6 {
		mustAppend(t, l2, "agent-0", gateRecord(OutcomeRefused))
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	files2, _ := readLines(t, dir)
	if len(files2) <= len(files) {
		t.Errorf("files after reopen = %v, want more than %d", files2, len(files))
	}
	if err := VerifyDir(dir); err != nil {
		t.Errorf("VerifyDir after reopen: %v", err)
	}
}

func TestLogRotationByDay(t *testing.T) {
	dir := t.TempDir()
	times := []time.Time{
		time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 11, 30, 0, 0, 1, 0, time.UTC),
		time.Date(2026, 11, 29, 23, 59, 58, 0, time.UTC),                 // clock stepped back
		time.Date(2026, 12, 1, 9, 0, 0, 0, time.FixedZone("X", 10*3600)), // 2026-11-30 UTC
	}
	var i int
	l := mustOpenLog(t, LogOptions{Dir: dir, Now: func() time.Time { i++; return times[i-1] }})
	for range times {
		mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, lines := readLines(t, dir)
	want := []string{"negotiations-2026-11-29-0001.jsonl", "negotiations-2026-11-30-0001.jsonl"}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Errorf("files = %v, want %v", files, want)
	}
	if got := lines[3]["at"]; got != "2026-11-30T23:00:00Z" {
		t.Errorf("at = %v, want UTC", got)
	}
	if err := VerifyDir(dir); err != nil {
		t.Errorf("VerifyDir: %v", err)
	}
}

// writeSample writes a log with interleaved agents in two files and
// returns the directory.
func writeSample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// Records are about 400 bytes: six fit in the first file.
	l := mustOpenLog(t, LogOptions{Dir: dir, MaxFileBytes: 2600, Now: stepClock(day1, time.Millisecond)})
	for i := range 10 {
		mustAppend(t, l, []string{"A", "B"}[i%2], gateRecord(OutcomeAccepted))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := VerifyDir(dir); err != nil {
		t.Fatalf("VerifyDir on an intact log: %v", err)
	}
	return dir
}

func TestVerifyDirDetectsTampering(t *testing.T) {
	type edit func(t *testing.T, lines [][]byte) [][]byte
	// byteEdit replaces the byte just after the first occurrence of
	// marker in line n with c.
	byteEdit := func(n int, marker string, c byte) edit {
		return func(t *testing.T, lines [][]byte) [][]byte {
			i := bytes.Index(lines[n], []byte(marker))
			if i < 0 {
				t.Fatalf("marker %q not in line %d", marker, n+1)
			}
			lines[n][i+len(marker)] = c
			return lines
		}
	}
	// rewrite changes line n's reason and recomputes its hash, as a forger
	// would: the record itself checks out, the agent's next one does not.
	rewrite := func(n int) edit {
		return func(t *testing.T, lines [][]byte) [][]byte {
			dec := json.NewDecoder(bytes.NewReader(lines[n]))
			dec.UseNumber()
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			m["reason"] = "forged"
			delete(m, "hash")
			line, _, err := encodeRecord(m)
			if err != nil {
				t.Fatal(err)
			}
			lines[n] = bytes.TrimSuffix(line, []byte("\n"))
			return lines
		}
	}
	tests := []struct {
		name      string
		edit      edit
		wantLine  int
		wantAgent string
		wantMsg   string
	}{
		{name: "one byte of reason", edit: byteEdit(2, `"reason":"`, 'N'), wantLine: 3, wantAgent: "A", wantMsg: "does not match"},
		{name: "one byte of granted", edit: byteEdit(1, `"path":"/`, 'x'), wantLine: 2, wantAgent: "B", wantMsg: "does not match"},
		{name: "one byte of hash", edit: byteEdit(0, `"hash":"`, 'g'), wantLine: 1, wantAgent: "A", wantMsg: "hash"},
		{name: "one byte of prev", edit: byteEdit(3, `"prev":"`, 'F'), wantLine: 4, wantAgent: "B", wantMsg: "prev"},
		{name: "rewritten with recomputed hash", edit: rewrite(2), wantLine: 5, wantAgent: "A", wantMsg: "prev"},
		{name: "seq changed", edit: byteEdit(2, `"seq":`, '9'), wantLine: 3, wantAgent: "A", wantMsg: "does not match"},
		{name: "record deleted", edit: func(_ *testing.T, l [][]byte) [][]byte { return append(l[:1], l[2:]...) }, wantLine: 3, wantAgent: "B", wantMsg: "seq 2, want 1"},
		{name: "records swapped", edit: func(_ *testing.T, l [][]byte) [][]byte { l[0], l[2] = l[2], l[0]; return l }, wantLine: 1, wantAgent: "A", wantMsg: "seq 2, want 1"},
		{name: "not json", edit: func(_ *testing.T, l [][]byte) [][]byte { l[1] = []byte("{oops"); return l }, wantLine: 2, wantMsg: "not JSON"},
		{name: "whitespace added", edit: func(_ *testing.T, l [][]byte) [][]byte { l[1] = append([]byte(" "), l[1]...); return l }, wantLine: 2, wantAgent: "B", wantMsg: "JCS"},
		// Lines the gateway never writes say what they are, not "not JSON".
		{name: "empty line", edit: func(_ *testing.T, l [][]byte) [][]byte { return append(l[:1], append([][]byte{{}}, l[1:]...)...) }, wantLine: 2, wantMsg: "empty line; the gateway never writes one"},
		{name: "file ends in two newlines", edit: func(_ *testing.T, l [][]byte) [][]byte { return append(l[:5], []byte{}) }, wantLine: 6, wantMsg: "empty line at the end of the file (it ends in two newlines)"},
		{name: "whitespace-only line", edit: func(_ *testing.T, l [][]byte) [][]byte {
			return append(l[:1], append([][]byte{[]byte(" \t ")}, l[1:]...)...)
		}, wantLine: 2, wantMsg: `line holds only whitespace (" \t ")`},
		{name: "carriage return alone", edit: func(_ *testing.T, l [][]byte) [][]byte {
			return append(l[:1], append([][]byte{[]byte("\r")}, l[1:]...)...)
		}, wantLine: 2, wantMsg: `line holds only whitespace ("\r")`},
		{name: "CRLF line endings", edit: func(_ *testing.T, l [][]byte) [][]byte {
			for i := range l {
				l[i] = append(l[i], '\r')
			}
			return l
		}, wantLine: 1, wantAgent: "A", wantMsg: `line ends in "\r\n"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeSample(t)
			files, err := listLogFiles(dir)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, files[0].name)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
			if len(lines) < 5 {
				t.Fatalf("first file has %d lines, want at least 5", len(lines))
			}
			lines = tt.edit(t, lines)
			if err := os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
			err = VerifyDir(dir)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("VerifyDir = %v, want a *VerifyError", err)
			}
			if ve.File != path || ve.Line != tt.wantLine || ve.AgentID != tt.wantAgent {
				t.Errorf("error at %s:%d agent %q, want %s:%d agent %q (%v)", ve.File, ve.Line, ve.AgentID, path, tt.wantLine, tt.wantAgent, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d", path, tt.wantLine)) {
				t.Errorf("err = %v, want file:line and %q", err, tt.wantMsg)
			}
		})
	}
}

func TestVerifyDirSecondFile(t *testing.T) {
	dir := writeSample(t)
	files, _ := listLogFiles(dir)
	if len(files) < 2 {
		t.Fatalf("want at least two files, got %v", files)
	}
	path := filepath.Join(dir, files[1].name)
	data, _ := os.ReadFile(path)
	i := bytes.Index(data, []byte(`"outcome":"a`))
	data[i+len(`"outcome":"a`)] = 'X'
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var ve *VerifyError
	if err := VerifyDir(dir); !errors.As(err, &ve) || ve.File != path || ve.Line != 1 {
		t.Errorf("VerifyDir = %v, want %s line 1", err, path)
	}
}

func TestVerifyDirTornLine(t *testing.T) {
	dir := writeSample(t)
	files, _ := listLogFiles(dir)
	path := filepath.Join(dir, files[len(files)-1].name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"agent_id":"A","seq`)
	_ = f.Close()
	var ve *VerifyError
	if err := VerifyDir(dir); !errors.As(err, &ve) || !strings.Contains(ve.Reason, "torn") {
		t.Fatalf("VerifyDir = %v, want a torn-line error", err)
	}

	// Reopening truncates the torn tail, says so, and continues the
	// chains.
	l := mustOpenLog(t, LogOptions{Dir: dir, Now: stepClock(day1.Add(time.Hour), time.Millisecond)})
	if r := l.Notes(); len(r) != 1 || !strings.Contains(r[0], "cut off a torn last line of 20 bytes") {
		t.Errorf("Notes = %q, want the torn line cut off", r)
	}
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := VerifyDir(dir); err != nil {
		t.Errorf("VerifyDir after reopen: %v", err)
	}
}

// TestOpenLogKeepsLastRecordWithoutNewline: a whole record whose newline
// is missing (an edit removed it, or only the newline was lost) is kept,
// its newline written back, and its chain continues from it
// (helper-134 L8: it was cut off with the torn lines, silently, and the
// next record reused its seq with verify-log passing).
func TestOpenLogKeepsLastRecordWithoutNewline(t *testing.T) {
	dir := writeSample(t)
	before, err := VerifyDirStats(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := listLogFiles(dir)
	path := filepath.Join(dir, files[len(files)-1].name)
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, bytes.TrimSuffix(data, []byte("\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	var ve *VerifyError
	if err := VerifyDir(dir); !errors.As(err, &ve) || !strings.Contains(ve.Reason, "the last record has no newline; starting the gateway") {
		t.Errorf("VerifyDir = %v, want the missing newline named as repaired at start", err)
	}
	l := mustOpenLog(t, LogOptions{Dir: dir, Now: stepClock(day1.Add(time.Hour), time.Millisecond)})
	if r := l.Notes(); len(r) != 1 || !strings.Contains(r[0], "the last record had no newline; it is kept") {
		t.Errorf("Notes = %q, want the newline written back", r)
	}
	if raw, _ := os.ReadFile(path); !bytes.Equal(raw, data) {
		t.Fatalf("the file after reopening differs from before the newline was removed")
	}
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := VerifyDirStats(dir)
	if err != nil || after.Records != before.Records+1 {
		t.Fatalf("VerifyDirStats after = %+v, %v; want %d records", after, err, before.Records+1)
	}
}

// TestEmptyLogFiles: OpenLog removes a newest file that holds no record
// (created, then the gateway stopped before its first record was
// written whole), so a gateway leaves no empty log file, and
// VerifyDirStats refuses an empty file that is not the newest: it was
// emptied (helper-134 L7: one emptied file next to an intact one
// verified as intact).
func TestEmptyLogFiles(t *testing.T) {
	dir := writeSample(t)
	files, _ := listLogFiles(dir)
	if len(files) < 2 {
		t.Fatalf("the sample has %d files, want two or more", len(files))
	}
	first := filepath.Join(dir, files[0].name)
	if err := os.WriteFile(first, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var ve *VerifyError
	if _, err := VerifyDirStats(dir); !errors.As(err, &ve) || ve.File != first || !strings.Contains(ve.Reason, "holds no records, and is not the newest") {
		t.Fatalf("VerifyDirStats with the first file emptied = %v, want it named", err)
	}
	// The gateway opens it, saying so (helper-135: silently).
	l := mustOpenLog(t, LogOptions{Dir: dir})
	if n := l.Notes(); len(n) != 2 || !strings.Contains(n[0], first+": holds no records and is not the newest log file") || !strings.Contains(n[1], "is the first of its chain in the log, not seq 1") {
		t.Errorf("Notes = %q, want the emptied file named, and the chains it broke", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// A newest file that holds no record (only a torn line, cut off) is
	// allowed to verify-log and removed by OpenLog, which writes on.
	dir = writeSample(t)
	files, _ = listLogFiles(dir)
	next := filepath.Join(dir, logName(files[len(files)-1].day, files[len(files)-1].num+1))
	if err := os.WriteFile(next, []byte(`{"agent_id":"A","se`), 0o640); err != nil {
		t.Fatal(err)
	}
	l = mustOpenLog(t, LogOptions{Dir: dir, Now: stepClock(day1.Add(time.Hour), time.Millisecond)})
	if r := l.Notes(); len(r) != 2 || !strings.Contains(r[1], "removed the newest log file, which held no record") {
		t.Errorf("Notes = %q, want the torn line cut off and the file removed", r)
	}
	if _, err := os.Stat(next); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the emptied newest file is still there: %v", err)
	}
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := VerifyDirStats(dir); err != nil || st.Records != 11 {
		t.Fatalf("VerifyDirStats after writing on = %+v, %v; want 11 records", st, err)
	}
}

// TestOpenLogRefusesEditedTail: after the last newline a crash leaves at
// most one record, whole or cut short; OpenLog and CheckLog refuse
// anything else as an edit and change nothing (helper-135: a newest file
// whose "\n" were all made "\r" was read as one torn line, cut off and
// removed, and verify-log then found the chains intact).
func TestOpenLogRefusesEditedTail(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(data []byte) []byte
		want string
	}{
		{"line endings made \\r", func(d []byte) []byte { return bytes.ReplaceAll(d, []byte("\n"), []byte("\r")) }, "a record followed by"},
		{"newlines removed", func(d []byte) []byte { return bytes.ReplaceAll(d, []byte("\n"), nil) }, "a record followed by"},
		{"last record ending in \\r", func(d []byte) []byte { return append(bytes.TrimSuffix(d, []byte("\n")), '\r') }, "a record followed by 1 more bytes"},
		{"last record ending in a space", func(d []byte) []byte { return append(bytes.TrimSuffix(d, []byte("\n")), ' ') }, "a record followed by 1 more bytes"},
		{"a value that is no record", func(d []byte) []byte { return append(d, `{"x":1}`...) }, "not a negotiation record"},
		{"not JSON", func(d []byte) []byte { return append(d, "garbage"...) }, `"g" starts the bytes`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSample(t)
			files, _ := listLogFiles(dir)
			path := filepath.Join(dir, files[len(files)-1].name)
			data, _ := os.ReadFile(path)
			edited := c.edit(data)
			if err := os.WriteFile(path, edited, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := CheckLog(dir); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "so the file was edited") {
				t.Errorf("CheckLog = %v, want it refused with %q", err, c.want)
			}
			if _, err := OpenLog(LogOptions{Dir: dir}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("OpenLog = %v, want it refused with %q", err, c.want)
			}
			if raw, _ := os.ReadFile(path); !bytes.Equal(raw, edited) {
				t.Errorf("the refused file was changed")
			}
		})
	}
}

// TestOpenLogNULTail: a power loss can leave a file's end zero-filled
// (its size written before its data). NUL bytes after the last newline,
// with or without the start of a record before them, are residue of a
// write never acknowledged: CheckLog accepts them, OpenLog cuts them off
// with a note, and verify-log says starting the gateway repairs them
// (helper-136: refused as an edit, stopping the gateway).
func TestOpenLogNULTail(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(data []byte) []byte
	}{
		{"the last record's end zeroed", func(d []byte) []byte {
			return append(d[:len(d)-60], make([]byte, 300)...)
		}},
		{"zeros after the last newline", func(d []byte) []byte { return append(d, make([]byte, 4096)...) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSample(t)
			files, _ := listLogFiles(dir)
			path := filepath.Join(dir, files[len(files)-1].name)
			data, _ := os.ReadFile(path)
			if err := os.WriteFile(path, c.edit(data), 0o600); err != nil {
				t.Fatal(err)
			}
			var ve *VerifyError
			if err := VerifyDir(dir); !errors.As(err, &ve) || !strings.Contains(ve.Reason, "NUL bytes a power loss leaves") || !strings.Contains(ve.Reason, "starting the gateway") {
				t.Errorf("VerifyDir = %v, want the NUL residue named as repaired at start", err)
			}
			if err := CheckLog(dir); err != nil {
				t.Fatalf("CheckLog = %v, want the residue accepted", err)
			}
			l := mustOpenLog(t, LogOptions{Dir: dir, Now: stepClock(day1.Add(time.Hour), time.Millisecond)})
			if n := l.Notes(); len(n) != 1 || !strings.Contains(n[0], "ending in NUL bytes") {
				t.Errorf("Notes = %q, want the residue cut off", n)
			}
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := VerifyDir(dir); err != nil {
				t.Fatalf("VerifyDir after reopening: %v", err)
			}
		})
	}
}

func TestVerifyDirEmptyAndMissing(t *testing.T) {
	if err := VerifyDir(t.TempDir()); err != nil {
		t.Errorf("empty dir: %v", err)
	}
	if err := VerifyDir(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("missing dir: nil error")
	}
}

func TestOpenLogBadLine(t *testing.T) {
	dir := writeSample(t)
	files, _ := listLogFiles(dir)
	path := filepath.Join(dir, files[0].name)
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append([]byte("garbage\n"), data...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenLog(LogOptions{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), path+":1") {
		t.Errorf("OpenLog = %v, want an error naming %s:1", err, path)
	}

	// A blank line is named as what it is, not as an unreadable record.
	for _, blank := range []string{"\n", " \t\n", "\r\n", "\f\n", "\u00a0\n"} {
		if err := os.WriteFile(path, append([]byte(blank), data...), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenLog(LogOptions{Dir: dir})
		if err == nil || !strings.Contains(err.Error(), path+":1: ") || !strings.Contains(err.Error(), "the gateway never writes one") {
			t.Errorf("OpenLog with a line %q = %v, want an error naming %s:1 and the blank line", blank, err, path)
		}
		if err != nil && !strings.Contains(err.Error(), "check the log with `caddy rcns verify-log "+dir+"`") {
			t.Errorf("OpenLog with a line %q = %v, want it to name verify-log", blank, err)
		}
	}
	// A record ending in "\r\n" is refused as verify-log refuses it
	// (helper-134 L6: the gateway opened and appended to it).
	crlf := bytes.Replace(data, []byte("\n"), []byte("\r\n"), 1)
	if err := os.WriteFile(path, crlf, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(LogOptions{Dir: dir}); err == nil || !strings.Contains(err.Error(), path+":1: ") || !strings.Contains(err.Error(), `ends in "\r\n"`) {
		t.Errorf("OpenLog with a CRLF line = %v, want it refused naming %s:1", err, path)
	}
}

func TestLogFsyncPolicies(t *testing.T) {
	tests := []struct {
		name   string
		policy FsyncPolicy
	}{
		{name: "always", policy: FsyncAlways},
		{name: "group", policy: FsyncGroup},
		{name: "default is group", policy: ""},
		{name: "off", policy: FsyncOff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpenLog(t, LogOptions{Dir: dir, Fsync: tt.policy, MaxFileBytes: 4096})
			wantPolicy := tt.policy
			if wantPolicy == "" {
				wantPolicy = FsyncGroup
			}
			if l.policy != wantPolicy {
				t.Errorf("policy = %q, want %q", l.policy, wantPolicy)
			}
			const workers, per = 10, 10
			var wg sync.WaitGroup
			hashes := make(chan string, workers*per)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						h, err := l.Append(fmt.Sprintf("agent-%d", w%4), gateRecord(OutcomeAccepted))
						if err != nil {
							t.Error(err)
							return
						}
						hashes <- h
					}
				}()
			}
			wg.Wait()
			close(hashes)
			l.mu.Lock()
			written, synced := l.written, l.synced
			l.mu.Unlock()
			if written != workers*per {
				t.Errorf("written = %d, want %d", written, workers*per)
			}
			if wantPolicy != FsyncOff && synced != written {
				t.Errorf("synced = %d of %d written after every Append returned", synced, written)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for h := range hashes {
				seen[h] = true
			}
			_, lines := readLines(t, dir)
			if len(lines) != workers*per || len(seen) != workers*per {
				t.Errorf("%d lines, %d distinct hashes, want %d", len(lines), len(seen), workers*per)
			}
			if err := VerifyDir(dir); err != nil {
				t.Errorf("VerifyDir: %v", err)
			}
		})
	}
}

func TestLogClose(t *testing.T) {
	tests := []struct {
		name   string
		policy FsyncPolicy
	}{
		{name: "group", policy: FsyncGroup},
		{name: "always", policy: FsyncAlways},
		{name: "off", policy: FsyncOff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := OpenLog(LogOptions{Dir: t.TempDir(), Fsync: tt.policy})
			if err != nil {
				t.Fatal(err)
			}
			if (tt.policy == FsyncGroup) != (l.flusherDone != nil) || l.checkerDone == nil {
				t.Fatalf("%s policy: flusher started %v (want only under group), checker %v (want always)", tt.name, l.flusherDone != nil, l.checkerDone != nil)
			}
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			for _, ch := range []chan struct{}{l.flusherDone, l.checkerDone} {
				if ch == nil {
					continue
				}
				select {
				case <-ch:
				default:
					t.Error("Close returned with the flusher or checker still running")
				}
			}
			if _, err := l.Append("A", gateRecord(OutcomeAccepted)); !errors.Is(err, ErrLogClosed) {
				t.Errorf("Append after Close = %v, want ErrLogClosed", err)
			}
			if err := l.Close(); err != nil {
				t.Errorf("second Close = %v, want nil", err)
			}
		})
	}
}

func TestLogCloseWhileAppending(t *testing.T) {
	l, err := OpenLog(LogOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := l.Append(fmt.Sprintf("a%d", w), gateRecord(OutcomeAccepted))
				if errors.Is(err, ErrLogClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	mustAppend(t, l, "x", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait() // every Append returned: none hangs on a stopped flusher
}

func TestLogAppendInvalid(t *testing.T) {
	l := mustOpenLog(t, LogOptions{Dir: t.TempDir()})
	with := func(k string, v any) map[string]any {
		r := gateRecord(OutcomeAccepted)
		r[k] = v
		return r
	}
	without := func(k string) map[string]any {
		r := gateRecord(OutcomeAccepted)
		delete(r, k)
		return r
	}
	tests := []struct {
		name  string
		agent string
		rec   map[string]any
		want  string
	}{
		{name: "empty agent", agent: "", rec: gateRecord(OutcomeAccepted), want: "empty agent id"},
		{name: "nil record", agent: "A", rec: nil, want: "kind"},
		{name: "missing kind", agent: "A", rec: without("kind"), want: "kind"},
		{name: "unknown kind", agent: "A", rec: with("kind", "identity"), want: "kind identity"},
		{name: "downgraded outcome", agent: "A", rec: with("outcome", "downgraded"), want: "outcome downgraded"},
		{name: "missing requested", agent: "A", rec: without("requested"), want: `"requested"`},
		{name: "missing granted", agent: "A", rec: without("granted"), want: `"granted"`},
		{name: "seq set", agent: "A", rec: with("seq", 5), want: `"seq" is set by the log`},
		{name: "prev set", agent: "A", rec: with("prev", ZeroHash), want: `"prev"`},
		{name: "hash set", agent: "A", rec: with("hash", ZeroHash), want: `"hash"`},
		{name: "at set", agent: "A", rec: with("at", "now"), want: `"at"`},
		{name: "other agent_id", agent: "A", rec: with("agent_id", "B"), want: "agent_id B"},
		{name: "NaN", agent: "A", rec: with("score", math.NaN()), want: "NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := l.Append(tt.agent, tt.rec)
			if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrInvalidRecord mentioning %q", err, tt.want)
			}
		})
	}
	// The refused records left no trace: the next record starts the chain.
	mustAppend(t, l, "A", with("agent_id", "A"))
	l.mu.Lock()
	head := l.heads["A"]
	l.mu.Unlock()
	if head.seq != 1 {
		t.Errorf("seq after refused records = %d, want 1", head.seq)
	}
}

func TestOpenLogOptions(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opt  LogOptions
		want string
	}{
		{name: "no dir", opt: LogOptions{}, want: "Dir is empty"},
		{name: "unknown policy", opt: LogOptions{Dir: dir, Fsync: "sometimes"}, want: `"sometimes"`},
		{name: "negative size", opt: LogOptions{Dir: dir, MaxFileBytes: -1}, want: "negative"},
		{name: "dir is a file", opt: LogOptions{Dir: filepath.Join(notDir, "sub")}, want: "directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := OpenLog(tt.opt)
			if err == nil {
				_ = l.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestOpenLogCreatesDirAndIgnoresStrayFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	l := mustOpenLog(t, LogOptions{Dir: dir})
	mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"README", "negotiations-2026-13-01-0001.jsonl", "negotiations-2026-11-29-1.jsonl", "negotiations-2026-11-29-0000.jsonl"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("junk\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := VerifyDir(dir); err != nil {
		t.Errorf("VerifyDir with stray files: %v", err)
	}
}

func TestParseLogName(t *testing.T) {
	tests := []struct {
		name   string
		file   string
		ok     bool
		wantNm int
	}{
		{name: "plain", file: "negotiations-2026-11-29-0001.jsonl", ok: true, wantNm: 1},
		{name: "five digits", file: "negotiations-2026-11-29-12345.jsonl", ok: true, wantNm: 12345},
		{name: "zero", file: "negotiations-2026-11-29-0000.jsonl"},
		{name: "short number", file: "negotiations-2026-11-29-001.jsonl"},
		{name: "padded five", file: "negotiations-2026-11-29-00001.jsonl"},
		{name: "bad day", file: "negotiations-2026-02-30-0001.jsonl"},
		{name: "other suffix", file: "negotiations-2026-11-29-0001.json"},
		{name: "sign", file: "negotiations-2026-11-29-+001.jsonl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lf, ok := parseLogName(tt.file)
			if ok != tt.ok || (ok && lf.num != tt.wantNm) {
				t.Errorf("parseLogName(%s) = %+v, %v", tt.file, lf, ok)
			}
		})
	}
	// Sorting is numeric past 9999.
	files := []string{"negotiations-2026-11-29-10000.jsonl", "negotiations-2026-11-29-9999.jsonl"}
	sort.Strings(files)
	dir := t.TempDir()
	for _, f := range files {
		_ = os.WriteFile(filepath.Join(dir, f), nil, 0o600)
	}
	lfs, _ := listLogFiles(dir)
	if len(lfs) != 2 || lfs[0].num != 9999 {
		t.Errorf("listLogFiles order = %+v", lfs)
	}
}

func TestInsertHashMatchesJCS(t *testing.T) {
	tests := []struct {
		name string
		obj  map[string]any
	}{
		{name: "empty", obj: map[string]any{}},
		{name: "all before", obj: map[string]any{"a": 1, "agent_id": "x", "granted": nil}},
		{name: "all after", obj: map[string]any{"kind": "gate", "seq": 2, "z": []any{"hash", "}"}}},
		{name: "neighbours", obj: map[string]any{"has": 1, "hasg": 2, "hasha": 3, "hasi": 4, "h": 5, "hb": 6}},
		{name: "escaped keys", obj: map[string]any{"ha\u0001": 1, "ha\"": 2, "ha\\": 3, "\n": 4}},
		{name: "non-ascii keys", obj: map[string]any{"ü": 1, "€": 2, "😀": 3, "\ufb01": 4, "ha\u00e9": 5}},
		{name: "nested hash-like", obj: map[string]any{"a": map[string]any{"zz": 1, "hash": "inner", "b": "\"{,"}, "prev": ZeroHash}},
		{name: "record", obj: gateRecord(OutcomeAccepted)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			canon, err := canonical(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			with := map[string]any{"hash": ZeroHash}
			for k, v := range tt.obj {
				with[k] = v
			}
			want, err := canonical(with)
			if err != nil {
				t.Fatal(err)
			}
			if got := insertHash(nil, canon, []byte(ZeroHash)); !bytes.Equal(got, want) {
				t.Errorf("insertHash =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// CheckLog reads as OpenLog does but writes nothing: a missing
// directory is not created, a torn last line is left in place, and a
// complete line that does not parse is the error OpenLog gives.
func TestCheckLogWritesNothing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "negotiations")
	if err := CheckLog(missing); err != nil {
		t.Fatalf("missing dir: %v", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("CheckLog created %s (%v)", missing, err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "negotiations-2026-01-01-0001.jsonl")
	torn := []byte(`{"agent_id":"a`)
	if err := os.WriteFile(path, torn, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := CheckLog(dir); err != nil {
		t.Fatalf("torn last line: %v", err)
	}
	if raw, _ := os.ReadFile(path); !bytes.Equal(raw, torn) {
		t.Fatalf("CheckLog changed the torn line to %q", raw)
	}
	if err := os.WriteFile(path, []byte("{}\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := CheckLog(dir); err == nil || !strings.Contains(err.Error(), "unreadable negotiation record") {
		t.Fatalf("bad line: %v", err)
	}
}

// TestEveryKindVerifies: a log holding a record of every kind the
// writer accepts verifies (cases: verify-log refused the protocol-version
// records the MCP door writes on initialize, so an intact log read as
// broken); an unknown kind is refused on both sides.
func TestEveryKindVerifies(t *testing.T) {
	dir := t.TempDir()
	l := mustOpenLog(t, LogOptions{Dir: dir, Now: stepClock(day1, time.Millisecond)})
	for _, k := range kinds {
		rec := gateRecord(OutcomeAccepted)
		rec["kind"] = k
		mustAppend(t, l, "A", rec)
	}
	bad := gateRecord(OutcomeAccepted)
	bad["kind"] = "mystery"
	if _, err := l.Append("A", bad); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("append kind mystery: %v, want ErrInvalidRecord", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := VerifyDir(dir); err != nil {
		t.Fatalf("VerifyDir with every kind: %v", err)
	}
}

// TestAppendOwnedSameLines: AppendOwned writes, byte for byte, the lines
// and hashes Append writes for the same records at the same clock
// readings (a map sized for the added members, and one that must grow),
// refuses what Append refuses, and VerifyDir accepts its log.
func TestAppendOwnedSameLines(t *testing.T) {
	rec := func(i int) map[string]any {
		return map[string]any{"kind": KindGate, "outcome": OutcomeAccepted, "requested": map[string]any{"method": "LOOKUP", "path": fmt.Sprintf("/item/%d<&\u2028>", i), "allow_rcns": true},
			"granted": map[string]any{"synthesis_id": "syn-x", "scope": []string{"bench:read"}, "persistent": false}, "request_id": "r", "identity_assurance": "unverified"}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	a, err := OpenLog(LogOptions{Dir: dirA, Fsync: FsyncOff, Now: stepClock(day1, time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenLog(LogOptions{Dir: dirB, Fsync: FsyncOff, Now: stepClock(day1, time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		ha, err := a.Append("A", rec(i))
		if err != nil {
			t.Fatal(err)
		}
		owned := rec(i)
		if i%2 == 0 {
			sized := make(map[string]any, len(owned)+4)
			maps.Copy(sized, owned)
			owned = sized
		}
		hb, err := b.AppendOwned("A", owned)
		if err != nil || hb != ha {
			t.Fatalf("record %d: AppendOwned = %s, %v; Append = %s", i, hb, err, ha)
		}
	}
	if _, err := b.AppendOwned("A", map[string]any{"kind": KindGate, "outcome": "maybe", "requested": nil, "granted": nil}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("AppendOwned of a bad outcome = %v, want ErrInvalidRecord", err)
	}
	for _, l := range []*Log{a, b} {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{dirA, dirB} {
		if err := VerifyDir(d); err != nil {
			t.Fatalf("VerifyDir(%s): %v", d, err)
		}
	}
	la, lb := readDir(t, dirA), readDir(t, dirB)
	if la == "" || la != lb {
		t.Fatalf("logs differ:\n%s\n%s", la, lb)
	}
}

// readDir is the concatenation of dir's files, by name.
func readDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(e.Name() + "\n")
		out.Write(raw)
	}
	return out.String()
}

// breakWrites swaps l's current file handle for a read-only one on the
// same file, so that its next write fails as a full disk's would, and
// returns the file's path.
func breakWrites(t *testing.T, l *Log) string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	path := l.f.Name()
	_ = l.f.Close()
	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l.f = ro
	return path
}

// TestLogRecoversAfterWriteFailure: a write that fails (here: the file
// handle turned read-only, the kind of error a full disk gives) is
// refused at once until LogRetryInterval has passed, then the next
// Append cuts the file back to its last complete line (a torn tail is
// left behind on purpose) and writes on: the directory verifies, the
// chain continuing from the last record written. A failure that is not
// a write's (a failed fsync) is not retried.
func TestLogRecoversAfterWriteFailure(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncOff, FsyncGroup, FsyncAlways} {
		t.Run(string(policy), func(t *testing.T) {
			dir := t.TempDir()
			var mu sync.Mutex
			now := day1
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			l := mustOpenLog(t, LogOptions{Dir: dir, Fsync: policy, Now: clock})
			mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			mustAppend(t, l, "B", gateRecord(OutcomeAccepted))

			path := breakWrites(t, l)
			torn, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := torn.WriteString(`{"agent_id":"A","at":"2026-`); err != nil {
				t.Fatal(err)
			}
			_ = torn.Close()

			if _, err := l.Append("A", gateRecord(OutcomeRefused)); err == nil || !strings.Contains(err.Error(), "write negotiation log") {
				t.Fatalf("Append on a read-only handle: %v, want the write error", err)
			}
			advance(LogRetryInterval / 2)
			if _, err := l.Append("A", gateRecord(OutcomeRefused)); err == nil {
				t.Fatal("Append before LogRetryInterval passed succeeded, want the failure")
			}
			advance(LogRetryInterval / 2)
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			mustAppend(t, l, "B", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			st, err := VerifyDirStats(dir)
			if err != nil || st.Records != 4 || st.Chains != 2 {
				t.Fatalf("VerifyDirStats = %+v, %v; want 4 records in 2 chains, no torn line", st, err)
			}
		})
	}
	// The operator moves the full file away to make room, and may put
	// another file in its place: that one is not cut back to the old
	// file's size, nor written to; the records go on in a new file,
	// after those the old file held (read back from the handle the log
	// kept), and Moved says so.
	for _, other := range []string{"", strings.Repeat("an operator's file, longer than the log's was, and not to be cut\n", 8)} {
		name := "current file moved away"
		if other != "" {
			name += ", another put in its place"
		}
		t.Run(name, func(t *testing.T) {
			now := day1
			l, dir, msgs := movedLog(t, FsyncGroup, func() time.Time { return now })
			h1 := mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
			path := breakWrites(t, l)
			if _, err := l.Append("A", gateRecord(OutcomeRefused)); err == nil {
				t.Fatal("Append on a read-only handle succeeded")
			}
			if err := os.Rename(path, filepath.Join(t.TempDir(), "archived.jsonl")); err != nil {
				t.Fatal(err)
			}
			if other != "" {
				if err := os.WriteFile(path, []byte(other), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(LogRetryInterval)
			mustAppend(t, l, "A", gateRecord(OutcomeRefused))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if other != "" {
				if got, _ := os.ReadFile(path); string(got) != other {
					t.Fatalf("the file put in place of the log's was changed to %q", got)
				}
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			files, lines := readLines(t, dir)
			if len(files) != 1 || files[0] == filepath.Base(path) || len(lines) != 2 {
				t.Fatalf("files %v with %d lines, want one new file with the record the moved file held and the one written after", files, len(lines))
			}
			if lines[0]["hash"] != h1 || lines[1]["seq"] != float64(2) || lines[1]["prev"] != h1 {
				t.Errorf("records: %v, want %s read back, then seq 2 chained to it", lines, h1)
			}
			if m := msgs(); len(m) != 1 || !strings.Contains(m[0], "the 1 record it held that the file now at its path does not is written again") {
				t.Fatalf("Moved told %q, want one message: the record the moved file held written again", m)
			}
		})
	}
	t.Run("fsync failure is final", func(t *testing.T) {
		now := day1
		l := mustOpenLog(t, LogOptions{Dir: t.TempDir(), Fsync: FsyncOff, Now: func() time.Time { return now }})
		mustAppend(t, l, "A", gateRecord(OutcomeAccepted))
		l.mu.Lock()
		l.failLocked(errors.New("records: fsync negotiation log: input/output error"))
		l.mu.Unlock()
		now = now.Add(10 * LogRetryInterval)
		if _, err := l.Append("A", gateRecord(OutcomeAccepted)); err == nil || !strings.Contains(err.Error(), "fsync") {
			t.Fatalf("Append after a failed fsync: %v, want the fsync failure", err)
		}
		_ = l.Close()
	})
}

// TestLogPooledBuffers: records encoded in the log's pooled buffers
// (appendRecord, Log.append) are written whole and unchanged, whatever
// the order of sizes: small ones after one larger than the pool keeps
// (maxPooledBuf), one whose key takes the reference path (non-ASCII),
// and many appended at once from several goroutines. Every line reads
// back as the record appended, and the directory verifies.
func TestLogPooledBuffers(t *testing.T) {
	dir := t.TempDir()
	l := mustOpenLog(t, LogOptions{Dir: dir, Fsync: FsyncOff})
	reason := func(g, i int) string {
		n := 10 + (g*7+i*13)%200
		if i%9 == 4 {
			n = maxPooledBuf + 1000 // not kept by the pool
		}
		return fmt.Sprintf("g%d-i%d-", g, i) + strings.Repeat(string(rune('a'+(g+i)%26)), n)
	}
	const goroutines, each = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("agent-%d", g)
			for i := range each {
				rec := gateRecord(OutcomeRefused)
				rec["reason"] = reason(g, i)
				if i%5 == 2 {
					rec["requested"] = map[string]any{"méthode": "BOOK", "path": "/room"}
				}
				if _, err := l.Append(agent, rec); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := VerifyDir(dir); err != nil {
		t.Fatalf("VerifyDir: %v", err)
	}
	_, lines := readLines(t, dir)
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
	seen := map[string]bool{}
	for _, ln := range lines {
		var g, i int
		r, _ := ln["reason"].(string)
		if _, err := fmt.Sscanf(r, "g%d-i%d-", &g, &i); err != nil || r != reason(g, i) {
			t.Fatalf("line's reason %.40q… (%d bytes) is not one appended", r, len(r))
		}
		if ln["agent_id"] != fmt.Sprintf("agent-%d", g) || seen[r] {
			t.Fatalf("record g%d i%d: agent %v, seen before %v", g, i, ln["agent_id"], seen[r])
		}
		seen[r] = true
		_, nonASCII := ln["requested"].(map[string]any)["méthode"]
		if nonASCII != (i%5 == 2) {
			t.Errorf("record g%d i%d: requested %v", g, i, ln["requested"])
		}
	}
}

// TestOpenLogNotesChainBreaks: an older log file removed whole (or a
// record removed or changed) leaves chains that do not follow on; the
// gateway opens the log, writing on from the last records, and says so
// in one note naming the first break and how many there are, pointing
// at verify-log (helper-136 L6: it said nothing). An intact log gives
// no note.
func TestOpenLogNotesChainBreaks(t *testing.T) {
	dir := writeSample(t)
	l := mustOpenLog(t, LogOptions{Dir: dir})
	if n := l.Notes(); len(n) != 0 {
		t.Errorf("Notes on an intact log = %q, want none", n)
	}
	_ = l.Close()

	files, _ := listLogFiles(dir)
	if len(files) < 2 {
		t.Fatalf("the sample has %d files, want two or more", len(files))
	}
	if err := os.Remove(filepath.Join(dir, files[0].name)); err != nil {
		t.Fatal(err)
	}
	_, lines := readLines(t, dir)
	agents := map[any]bool{}
	for _, ln := range lines {
		agents[ln["agent_id"]] = true
	}
	second := filepath.Join(dir, files[1].name)
	l = mustOpenLog(t, LogOptions{Dir: dir})
	n := l.Notes()
	want := fmt.Sprintf("%d chain breaks in all", len(agents))
	if len(agents) == 1 {
		want = "1 chain break in all"
	}
	if len(n) != 1 || !strings.HasPrefix(n[0], second+":1: agent ") || !strings.Contains(n[0], "is the first of its chain in the log, not seq 1") ||
		!strings.Contains(n[0], want) || !strings.Contains(n[0], "caddy rcns verify-log "+dir) {
		t.Fatalf("Notes = %q, want one naming %s:1, %q and verify-log", n, second, want)
	}
	_ = l.Close()

	// A record written twice (a file moved away and back after the log
	// wrote its last records again in a new one) is named as a repeat.
	dir = writeSample(t)
	files, _ = listLogFiles(dir)
	last := filepath.Join(dir, files[len(files)-1].name)
	data, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	lns := strings.SplitAfter(string(data), "\n")
	if err := os.WriteFile(last, []byte(string(data)+lns[0]), 0o640); err != nil {
		t.Fatal(err)
	}
	l = mustOpenLog(t, LogOptions{Dir: dir})
	if n := l.Notes(); len(n) != 1 || !strings.Contains(n[0], fmt.Sprintf("%s:%d: agent ", last, len(lns))) || !strings.Contains(n[0], "(written twice, or out of order)") {
		t.Fatalf("Notes = %q, want the repeated record at %s:%d named", n, last, len(lns))
	}
	_ = l.Close()
}
