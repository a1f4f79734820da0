package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// snapshotDir maps every file and directory under dir to its mode,
// size, modification time and content.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		s := info.Mode().String() + " " + strconv.FormatInt(info.Size(), 10) + " " + info.ModTime().Format(time.RFC3339Nano)
		if !d.IsDir() {
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s += " " + string(raw)
		}
		snap[p] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func assertSameDir(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for p, s := range before {
		if after[p] != s {
			t.Errorf("%s changed %s:\n before %q\n after  %q", what, p, s, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s created %s", what, p)
		}
	}
}

func storedAPIVersion(t *testing.T, dir string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest-version.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st manifestState
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
	before := snapshotDir(t, dir)
	validate("a")
	assertSameDir(t, "caddy validate", before, snapshotDir(t, dir))

	// Provision alone (a config load) writes nothing either.
	h := provisionedHandler(t, "provtest", dir, "a")
	assertSameDir(t, "Provision", before, snapshotDir(t, dir))
	if got := h.eng.apiVersion(); got != "38" {
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
	before = snapshotDir(t, dir)
	validate("changed")
	assertSameDir(t, "caddy validate of a changed config", before, snapshotDir(t, dir))
	h2 := provisionedHandler(t, "provtest", dir, "a")
	(&testGateway{h: h2}).serve(t, "GET", "/", nil, nil, 0)
	if v, got := storedAPIVersion(t, dir), h2.eng.apiVersion(); v != 38 || got != "38" {
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
	if v, got := storedAPIVersion(t, dir), h3.eng.apiVersion(); v != 39 || got != "39" {
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
		if !strings.Contains(out.String(), "2 chains, 3 records in 1 files") {
			t.Errorf("verify-log %s said %q, want the counts", dir, out.String())
		}
	}
}

// appendGate appends one gate record for agent to rs's log.
func appendGate(t *testing.T, rs *recordState, agent string) {
	t.Helper()
	rs.mu.Lock()
	log := rs.log
	rs.mu.Unlock()
	if log == nil {
		t.Fatal("no negotiation log open")
	}
	if _, err := log.Append(agent, map[string]any{"kind": records.KindGate, "outcome": records.OutcomeAccepted, "requested": map[string]any{}, "granted": nil}); err != nil {
		t.Fatal(err)
	}
}

// A records_dir belongs to one gateway: a second record state (another
// gateway, or another handler name in this process) opening it fails
// with an error that says who holds it and writes nothing there, so the
// hash chains stay intact; once the first closes, the second opens it.
// The holder itself reopens it (fsync changed on a reload) without
// tripping over its own lock, and verify-log reads it while held.
func TestRecordsDirBelongsToOneGateway(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	first := &recordState{name: "first"}
	if err := first.open(dir, records.FsyncOff, nil, zap.NewNop()); err != nil {
		t.Fatalf("first open: %v", err)
	}
	t.Cleanup(first.close)
	appendGate(t, first, "a")

	// A reload that changes fsync reopens the directory it holds.
	if err := first.open(dir, records.FsyncAlways, nil, zap.NewNop()); err != nil {
		t.Fatalf("reopen by the holder: %v", err)
	}
	if first.dir != dir {
		t.Fatalf("holder reopened memory-only (dir %q)", first.dir)
	}
	appendGate(t, first, "a")

	before := snapshotDir(t, dir)
	second := &recordState{name: "second"}
	t.Cleanup(second.close)
	err := second.open(dir, records.FsyncOff, nil, zap.NewNop())
	var held *heldError
	if !errors.As(err, &held) {
		t.Fatalf("second open: err %v, want a heldError", err)
	}
	for _, want := range []string{"records_dir " + dir + " is held by another rcns handler of this Caddy process", `name "first"`, "each gateway needs its own records_dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if second.log != nil || second.dir != "" || second.lock != nil {
		t.Fatalf("second state kept log %v, dir %q, lock %v; want memory-only", second.log, second.dir, second.lock)
	}
	// It serves on memory-only: the chain heads and AGTP-API-Version go
	// nowhere near dir.
	if _, err := second.bumpAPIVersion("h"); err != nil {
		t.Fatal(err)
	}
	if err := second.chains.Flush(); err != nil {
		t.Fatal(err)
	}
	assertSameDir(t, "the gateway that does not hold records_dir", before, snapshotDir(t, dir))

	// verify-log only reads: it works on a held directory.
	var out bytes.Buffer
	if err := verifyLog(&out, dir); err != nil || !strings.Contains(out.String(), "1 chains, 2 records") {
		t.Fatalf("verify-log on a held records_dir: %v, %q", err, out.String())
	}

	// Released on close: the second opens it and continues the chain.
	first.close()
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); !os.IsNotExist(err) {
		t.Errorf("owner file left after close (%v)", err)
	}
	if err := second.open(dir, records.FsyncOff, nil, zap.NewNop()); err != nil {
		t.Fatalf("second open after the first closed: %v", err)
	}
	appendGate(t, second, "a")
	raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
	var o lockOwner
	if err != nil || json.Unmarshal(raw, &o) != nil || o.PID != os.Getpid() || o.Name != "second" {
		t.Errorf("owner file %q (%v), want pid %d and name second", raw, err, os.Getpid())
	}
	out.Reset()
	if err := verifyLog(&out, dir); err != nil || !strings.Contains(out.String(), "1 chains, 3 records") {
		t.Fatalf("verify-log after the handover: %v, %q", err, out.String())
	}
}

// The holder of a records_dir named in another process's owner file is
// described by its pid, host and name, even when its pid is this
// process's (containers sharing a volume).
func TestHeldErrorNamesAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	// Another container on a shared volume: Caddy is pid 1 in both.
	other := lockOwner{PID: os.Getpid(), Host: "gw-a", Process: "0123", Name: "default", Since: "2026-01-01T00:00:00Z"}
	raw, _ := json.Marshal(other)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), raw, 0o640); err != nil {
		t.Fatal(err)
	}
	l := flock.New(filepath.Join(dir, lockFile))
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	before := snapshotDir(t, dir)
	rs := &recordState{name: "default"}
	t.Cleanup(rs.close)
	err := rs.open(dir, records.FsyncOff, nil, zap.NewNop())
	want := fmt.Sprintf(`records_dir %s is held by another gateway (pid %d on host gw-a, rcns handler name "default", since 2026-01-01T00:00:00Z): each gateway needs its own records_dir`, dir, os.Getpid())
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want prefix %q", err, want)
	}
	assertSameDir(t, "the gateway refused the lock", before, snapshotDir(t, dir))

	// The holder has not written its owner file yet.
	if err := os.Remove(filepath.Join(dir, ownerFile)); err != nil {
		t.Fatal(err)
	}
	err = rs.open(dir, records.FsyncOff, nil, zap.NewNop())
	if err == nil || !strings.HasPrefix(err.Error(), "records_dir "+dir+" is held by another gateway: ") {
		t.Errorf("holder unknown: %v", err)
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
		h.eng.logger = zap.New(core)
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

	before := snapshotDir(t, dir)
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
	assertSameDir(t, "the second handler", before, snapshotDir(t, dir))
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
	if len(lines) != 2 || !strings.Contains(lines[0], "1 chains, 3 records of node node-a in 1 files") ||
		!strings.Contains(lines[1], "1 chains, 1 records of node node-b in 1 files") {
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
