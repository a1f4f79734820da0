package caddymodule

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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
	h := &Handler{Name: name, RecordsDir: dir, ServerID: serverID}
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
	if got := h.apiVersion(); got != "38" {
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
	if v, got := storedAPIVersion(t, dir), h2.apiVersion(); v != 38 || got != "38" {
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
	if v, got := storedAPIVersion(t, dir), h3.apiVersion(); v != 39 || got != "39" {
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
