package caddymodule

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/internal/dirsnap"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

func storedAPIVersion(t *testing.T, dir string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest-version.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st.Version
}

// provisionedHandler provisions a handler named name on records_dir dir
// as a config load (or reload) does.
func provisionedHandler(t *testing.T, name, dir, serverID string) *Handler {
	t.Helper()
	h := &Handler{}
	h.Name = name
	h.RecordsDir = dir
	h.ServerID = serverID
	swapLogger(t, h)
	if err := h.Provision(benchContext(t)); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { _ = h.Cleanup() })
	return h
}

// `caddy validate` provisions every module; the rcns handler must not
// write to the records_dir of the gateway that may be running on it
// (nor create it), and AGTP-API-Version is stored only once a handler
// serves.
func TestProvisionWritesNothingToRecordsDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	validate := func(serverID string) {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"s": map[string]any{
			"listen": []string{":8080"},
			"routes": []any{map[string]any{"handle": []any{map[string]any{"handler": "rcns", "name": "provtest", "records_dir": dir, "server_id": serverID}}}},
		}}}}})
		if err := validateJSON(t, raw); err != nil {
			t.Fatalf("validate: %v", err)
		}
	}

	// A records_dir that does not exist yet is not created.
	validate("a")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("caddy validate created %s (%v)", dir, err)
	}

	// A live gateway's records_dir: a stored version and a log whose
	// last line is torn (a write in progress).
	if err := os.MkdirAll(filepath.Join(dir, "negotiations"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest-version.json"), []byte(`{"version":37,"hash":"old"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "negotiations", "negotiations-2026-01-01-0001.jsonl"), []byte(`{"agent_id":"a`), 0o640); err != nil {
		t.Fatal(err)
	}
	before := dirsnap.Take(t, dir)
	validate("a")
	dirsnap.Same(t, "caddy validate", before, dirsnap.Take(t, dir))

	// Provision alone (a config load) writes nothing either.
	h := provisionedHandler(t, "provtest", dir, "a")
	dirsnap.Same(t, "Provision", before, dirsnap.Take(t, dir))
	if got := h.eng.APIVersion(); got != "38" {
		t.Errorf("computed AGTP-API-Version %s, want 38", got)
	}

	// The first request stores the version.
	g := &testGateway{h: h}
	g.serve(t, "GET", "/", nil, nil, 0)
	if v := storedAPIVersion(t, dir); v != 38 {
		t.Fatalf("stored AGTP-API-Version %d after the first request, want 38", v)
	}

	// Validating a changed config against the live gateway's directory
	// changes nothing; reloading the unchanged config does not bump.
	before = dirsnap.Take(t, dir)
	validate("changed")
	dirsnap.Same(t, "caddy validate of a changed config", before, dirsnap.Take(t, dir))
	h2 := provisionedHandler(t, "provtest", dir, "a")
	(&testGateway{h: h2}).serve(t, "GET", "/", nil, nil, 0)
	if v, got := storedAPIVersion(t, dir), h2.eng.APIVersion(); v != 38 || got != "38" {
		t.Errorf("reload of the unchanged config: stored %d, served %s, want 38", v, got)
	}

	// A changed config bumps once it serves, and the old handler still
	// alive does not take the version back.
	h3 := provisionedHandler(t, "provtest", dir, "changed")
	if v := storedAPIVersion(t, dir); v != 38 {
		t.Errorf("Provision of a changed config stored %d, want 38 until it serves", v)
	}
	(&testGateway{h: h3}).serve(t, "GET", "/", nil, nil, 0)
	(&testGateway{h: h2}).serve(t, "GET", "/", nil, nil, 0)
	if v, got := storedAPIVersion(t, dir), h3.eng.APIVersion(); v != 39 || got != "39" {
		t.Errorf("reload of a changed config: stored %d, served %s, want 39", v, got)
	}
}

// verify-log on a directory without any log (an empty one, or the
// parent of the records_dirs) fails instead of calling it intact; on a
// records_dir or its negotiations folder it says how much it checked.
func TestVerifyLogNeedsLogs(t *testing.T) {
	parent := t.TempDir()
	recDir := filepath.Join(parent, "default")
	l, err := records.OpenLog(records.LogOptions{Dir: filepath.Join(recDir, "negotiations"), Fsync: records.FsyncOff})
	if err != nil {
		t.Fatal(err)
	}
	for _, agent := range []string{"a", "a", "b"} {
		if _, err := l.Append(agent, map[string]any{"kind": records.KindGate, "outcome": records.OutcomeAccepted, "requested": map[string]any{}, "granted": nil}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{parent, t.TempDir(), filepath.Join(parent, "missing")} {
		var out bytes.Buffer
		err := verifyLog(&out, dir)
		if err == nil || !strings.Contains(err.Error(), "no record logs found in "+dir) && !strings.Contains(err.Error(), "no such file") {
			t.Errorf("verify-log %s: err %v, out %q; want no record logs found", dir, err, out.String())
		}
	}
	for _, dir := range []string{recDir, filepath.Join(recDir, "negotiations")} {
		var out bytes.Buffer
		if err := verifyLog(&out, dir); err != nil {
			t.Fatalf("verify-log %s: %v", dir, err)
		}
		if !strings.Contains(out.String(), "2 chains, 3 records in 1 file:") {
			t.Errorf("verify-log %s said %q, want the counts", dir, out.String())
		}
	}
	// A log file alone is refused with what to give instead, and a
	// directory given twice is verified once (helper-140).
	files, _ := filepath.Glob(filepath.Join(recDir, "negotiations", "*.jsonl"))
	var out bytes.Buffer
	if len(files) != 1 {
		t.Fatalf("log files %v, want one", files)
	}
	if err := verifyLog(&out, files[0]); err == nil || !strings.Contains(err.Error(), "is a file, not a directory: give the records_dir") {
		t.Errorf("verify-log on a log file: %v, want it refused naming the records_dir", err)
	}
	out.Reset()
	if err := verifyLog(&out, recDir, recDir+"/", filepath.Join(recDir, "negotiations")); err != nil || strings.Count(out.String(), "every chain is intact") != 1 || !strings.Contains(out.String(), "given before; verified once") {
		t.Errorf("verify-log on one directory twice: %v, %q; want it verified once", err, out.String())
	}
	// An emptied log is not reported intact (helper-130).
	logs, _ := filepath.Glob(filepath.Join(recDir, "negotiations", "*.jsonl"))
	if len(logs) != 1 || os.Truncate(logs[0], 0) != nil {
		t.Fatalf("cannot empty the log: %v", logs)
	}
	out.Reset()
	if err := verifyLog(&out, recDir); err == nil || !strings.Contains(err.Error(), "1 file holds no records: nothing to verify") || strings.Contains(out.String(), "intact") {
		t.Errorf("verify-log of an emptied log: %v %q, want an error saying nothing to verify", err, out.String())
	}
}

// In one process: a reload (same handler name) keeps records_dir; a
// handler with another name on the same records_dir is refused it on
// its first request, logs who holds it and serves on without durable
// records.
func TestRecordsDirHandlers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	observed := func(h *Handler) *observer.ObservedLogs {
		core, logs := observer.New(zap.InfoLevel)
		setLogCore(t, h, core)
		return logs
	}
	h1 := provisionedHandler(t, "lock-one", dir, "a")
	logs1 := observed(h1)
	(&testGateway{h: h1}).serve(t, "GET", "/", nil, nil, 0)
	h2 := provisionedHandler(t, "lock-one", dir, "a")
	logs2 := observed(h2)
	(&testGateway{h: h2}).serve(t, "GET", "/", nil, nil, 0)
	for i, logs := range []*observer.ObservedLogs{logs1, logs2} {
		if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
			t.Errorf("handler %d (same name, a reload) logged %d errors: %v", i+1, n, logs.All())
		}
	}

	before := dirsnap.Take(t, dir)
	other := provisionedHandler(t, "lock-other", dir, "a")
	logs := observed(other)
	if a := (&testGateway{h: other}).serve(t, "DISCOVER", "/", nil, nil, 0); a.status != 200 {
		t.Fatalf("the handler without records_dir does not serve: %s", a)
	}
	errs := logs.FilterMessageSnippet("opening records_dir failed").All()
	if len(errs) != 1 {
		t.Fatalf("logged %v, want one records_dir error", logs.All())
	}
	msg, _ := errs[0].ContextMap()["error"].(string)
	if !strings.Contains(msg, `held by another rcns handler of this Caddy process (name "lock-one")`) || !strings.Contains(msg, "each gateway needs its own records_dir") {
		t.Errorf("error %q does not name the holder and the remedy", msg)
	}
	dirsnap.Same(t, "the second handler", before, dirsnap.Take(t, dir))
}

// TestVerifyLogNodes: records name their node (node_id); verify-log
// checks one records_dir per node, each on its own, and says whose it
// is; a log that gained node_id on an upgrade (older records without
// it) verifies as one chain per agent, as it was written.
func TestVerifyLogNodes(t *testing.T) {
	write := func(dir string, recs ...map[string]any) {
		t.Helper()
		l, err := records.OpenLog(records.LogOptions{Dir: filepath.Join(dir, "negotiations"), Fsync: records.FsyncOff})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			rec := map[string]any{"kind": records.KindGate, "outcome": records.OutcomeAccepted, "requested": map[string]any{}, "granted": nil}
			for k, v := range r {
				rec[k] = v
			}
			if _, err := l.Append(benchAgent, rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	write(a, map[string]any{}, map[string]any{"node_id": "node-a"}, map[string]any{"node_id": "node-a"})
	write(b, map[string]any{"node_id": "node-b"})
	var out bytes.Buffer
	if err := verifyLog(&out, a, b); err != nil {
		t.Fatalf("verify-log: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "1 chain, 3 records of node node-a in 1 file:") ||
		!strings.Contains(lines[1], "1 chain, 1 record of node node-b in 1 file:") {
		t.Fatalf("verify-log said %q", out.String())
	}
	out.Reset()
	if err := verifyLog(&out, a, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no record logs found") {
		t.Fatalf("verify-log with an empty second dir: %v", err)
	}
}

// TestNegotiationRecordsNameTheNode: every negotiation record carries
// the node_id of the node that wrote it.
func TestNegotiationRecordsNameTheNode(t *testing.T) {
	g := &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, false, "", "", func(h *Handler) { h.NodeID = "node-7" })}
	g.propose(t, "/item/n1")
	recs := g.negotiationRecords(t, records.KindPropose, "")
	if len(recs) != 1 || recs[0]["node_id"] != "node-7" {
		t.Fatalf("negotiation records %v, want one naming node-7", recs)
	}
}

// TestInspectNegotiationsAreTheLogsRecords: INSPECT target=negotiations
// returns the records the negotiation log holds, member for member
// (agent-guide.md "Negotiation records"): seq, at and prev as the log
// wrote them, and the log's hash.
func TestInspectNegotiationsAreTheLogsRecords(t *testing.T) {
	g := &testGateway{h: benchHandler(t, benchUpstream(t).URL, false)}
	g.propose(t, "/item/same-1")
	g.propose(t, "/item/same-2")
	logged := g.negotiationRecords(t, records.KindPropose, "")
	a := g.builtin(t, "INSPECT", map[string]any{"target": "negotiations", "kind": records.KindPropose})
	got, _ := a.body["records"].([]any)
	if a.status != 200 || len(got) != 2 || len(logged) != 2 {
		t.Fatalf("INSPECT target=negotiations: %s; the log holds %d propose records", a, len(logged))
	}
	for i, r := range got { // newest first
		want := logged[len(logged)-1-i]
		if !reflect.DeepEqual(r, want) {
			t.Errorf("INSPECT record %d:\n%v\nthe log's:\n%v", i, r, want)
		}
	}
}

// TestRecordsBoundAgentText: what an agent's request puts into the
// records the gateway keeps is bounded (engine.MaxRecordedText and its
// siblings), whatever the request body allowed (helper-84: a rate-limited
// agent filled 62 MB of log and 211 MB of heap with 1 MB PROPOSE
// descriptions): a PROPOSE turn's description, scope_requested and path,
// and a REVOKE's reason in its negotiation record, its INSPECT copy and
// its lifecycle event, are cut and marked with "…".
func TestRecordsBoundAgentText(t *testing.T) {
	g := newTestGateway(t)
	core, logs := observer.New(zap.InfoLevel)
	setLogCore(t, g.h, core)
	long := strings.Repeat("é", 150<<10) // 300 KiB, two bytes a character
	scopes := make([]any, 100)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("bench:%d:", i) + strings.Repeat("x", 2048)
	}
	pair := "/item/" + strings.Repeat("p", 3000) // the pair is kept whole (at most engine.MaxTargetBytes)
	p := proposal(pair)
	p["endpoint"].(map[string]any)["description"] = long
	p["scope_requested"] = scopes
	a := g.builtin(t, "PROPOSE", p)
	recs := g.negotiationRecords(t, records.KindPropose, "")
	if len(recs) != 1 {
		t.Fatalf("PROPOSE answered %s; %d propose records, want 1", a, len(recs))
	}
	req := recs[0]["requested"].(map[string]any)
	desc, _ := req["description"].(string)
	if len(desc) > engine.MaxRecordedText || !strings.HasSuffix(desc, "…") || !strings.HasPrefix(long, strings.TrimSuffix(desc, "…")) {
		t.Errorf("recorded description: %d bytes, %.20q…%q", len(desc), desc, desc[max(0, len(desc)-8):])
	}
	if req["path"] != pair || req["method"] != "LOOKUP" {
		t.Errorf("recorded pair %v %.20v… (%d bytes), want LOOKUP and the %d-byte path whole", req["method"], req["path"], len(fmt.Sprint(req["path"])), len(pair))
	}
	sc, _ := req["scope_requested"].([]any)
	if len(sc) == 0 || len(sc) > engine.MaxRecordedItems+1 || sc[len(sc)-1] != "…" {
		t.Errorf("recorded scope_requested: %d elements, last %v", len(sc), sc[max(0, len(sc)-1)])
	}
	raw, _ := json.Marshal(req)
	if len(raw) > engine.MaxRecordedRequest+len(pair)+2048 { // strings bounded; the pair, quotes, commas and the "…" marks beside
		t.Errorf("recorded requested side: %d bytes of JSON", len(raw))
	}
	ins := g.builtin(t, "INSPECT", map[string]any{"target": "negotiations", "kind": records.KindPropose})
	if got, _ := ins.body["records"].([]any); len(got) != 1 || !reflect.DeepEqual(got[0], recs[0]) {
		t.Errorf("INSPECT target=negotiations: %s; want the log's record", ins)
	}

	id := g.propose(t, "/item/revoked")
	reason := strings.Repeat("r", 100<<10)
	if a := g.builtin(t, "REVOKE", map[string]any{"target": "contract", "synthesis_id": id, "reason": reason}); a.status != 200 {
		t.Fatalf("REVOKE: %s", a)
	}
	rev := g.negotiationRecords(t, records.KindRevoke, id)
	if len(rev) != 1 {
		t.Fatalf("%d revoke records for %s, want 1", len(rev), id)
	}
	want := strings.Repeat("r", engine.MaxRecordedText-len("…")) + "…"
	if rev[0]["reason"] != want {
		t.Errorf("revoke record's reason: %d bytes, want the first %d and …", len(rev[0]["reason"].(string)), engine.MaxRecordedText-len("…"))
	}
	evs := events(g.lifecycleEvents(t), records.EventRevoke, id)
	if len(evs) != 1 || evs[0]["reason"] != want {
		t.Errorf("revoke lifecycle events %d; reason %d bytes, want %d", len(evs), len(fmt.Sprint(evs[0]["reason"])), len(want))
	}
	// So does Caddy's log line of the revocation (helper-85).
	lines := logs.FilterMessage("rcns contract revoked").All()
	if len(lines) != 1 || lines[0].ContextMap()["reason"] != want {
		t.Errorf("%d 'rcns contract revoked' lines; want one with the reason cut", len(lines))
	}
}

// TestRecordsBoundAgentTextNative: the same bound over the native
// AGTP/1.0 door (one engine, every door): a PROPOSE whose description
// is 300 KiB is recorded with it cut at engine.MaxRecordedText.
func TestRecordsBoundAgentTextNative(t *testing.T) {
	g := newTestGateway(t)
	addr := nativeDoor(t, g.h, zap.NewNop())
	p := proposal("/item/bounded-native")
	p["endpoint"].(map[string]any)["description"] = strings.Repeat("n", 300<<10)
	body, _ := json.Marshal(map[string]any{"parameters": p})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "AGTP/1.0 PROPOSE /\r\nAgent-ID: %s\r\nAuthority-Scope: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", benchAgent, testScope, len(body), body)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "AGTP/1.0 ") {
		t.Fatalf("native PROPOSE: %q, %v", line, err)
	}
	recs := g.negotiationRecords(t, records.KindPropose, "")
	if len(recs) != 1 {
		t.Fatalf("native PROPOSE answered %q; %d propose records, want 1", line, len(recs))
	}
	req := recs[0]["requested"].(map[string]any)
	if d, _ := req["description"].(string); len(d) != engine.MaxRecordedText || !strings.HasSuffix(d, "…") || req["path"] != "/item/bounded-native" {
		t.Errorf("native record: description %d bytes, path %v", len(d), req["path"])
	}
}
