package redisstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestManifestVersions: the shared AGTP-API-Version (spec §4, §15.4)
// numbers one manifest with one version on every node, gives a changed
// manifest a version above everything any node served, never goes below
// a node's own floor and never numbers two manifests alike.
func TestManifestVersions(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	c, err := New(ctx, Config{Addrs: []string{srv.Addr()}, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	set, err := c.Set(store.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := set.Manifest
	if v, h, err := m.Current(ctx); err != nil || v != 0 || h != "" {
		t.Fatalf("Current on an empty store = %d %q %v, want 0 \"\" nil", v, h, err)
	}
	steps := []struct {
		what      string
		hash      string
		floor     int
		floorHash string
		wantV     int
	}{
		{"a first node, nothing served", "H1", 0, "", 1},
		{"a second node, same manifest", "H1", 0, "", 1},
		{"the same node again", "H1", 1, "H1", 1},
		{"a persistent synthesis changes it", "H2", 1, "H1", 2},
		{"the other node rebuilds: the same version", "H2", 1, "H1", 2},
		{"a node that served 5 for this manifest alone (Redis was down)", "H2", 5, "H2", 5},
		{"a node that served 7 for another manifest: above it", "H2", 7, "H9", 8},
		{"the stored version equal to a node's floor for another manifest", "H2", 8, "H3", 9},
		{"back to an earlier manifest: a new version, never an old one", "H1", 9, "H2", 10},
		{"another configuration's manifest, numbered in between", "HY", 3, "HY0", 11},
		{"a node of the first configuration catching up: the first's number, not a new one", "H1", 9, "H2", 10},
	}
	lastV, lastH := 0, ""
	for _, s := range steps {
		v, err := m.Version(ctx, s.hash, s.floor, s.floorHash)
		if err != nil || v != s.wantV {
			t.Fatalf("%s: Version(%s, %d, %s) = %d, %v; want %d", s.what, s.hash, s.floor, s.floorHash, v, err, s.wantV)
		}
		if v > lastV {
			lastV, lastH = v, s.hash
		}
		if cv, ch, err := m.Current(ctx); err != nil || cv != lastV || ch != lastH {
			t.Fatalf("%s: Current = %d %q %v; want the last version given, %d %q", s.what, cv, ch, err, lastV, lastH)
		}
	}
	// The numbers kept are bounded: past maxManifestNumbers they go but
	// the last, and an older manifest then gets a new number.
	for i := range maxManifestNumbers + 5 {
		if _, err := m.Version(ctx, fmt.Sprintf("B%d", i), 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.Redis().HLen(ctx, c.globalKey(manifestKeyName)).Result(); err != nil || n > maxManifestNumbers+2 {
		t.Fatalf("P{g}:manifest holds %d fields (%v), want at most %d", n, err, maxManifestNumbers+2)
	}
	top, _, _ := m.Current(ctx)
	if v, err := m.Version(ctx, "H1", 10, "H1"); err != nil || v != top+1 {
		t.Fatalf("H1 after its number was dropped: %d, %v; want a new one, %d", v, err, top+1)
	}
	srv.Stop()
	if _, err := m.Version(ctx, "H4", 10, "H1"); err == nil {
		t.Fatal("Version with Redis down: no error")
	}
	if _, _, err := m.Current(ctx); err == nil {
		t.Fatal("Current with Redis down: no error")
	}
}
