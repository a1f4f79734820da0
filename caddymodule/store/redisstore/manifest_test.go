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
		{"a node that served 5 for this manifest alone (the store lost it)", "H2", 5, "H2", 5},
		{"a node that served 7 for another manifest: above it", "H2", 7, "H9", 8},
		{"the stored version equal to a node's floor for another manifest", "H2", 8, "H3", 9},
		{"back to an earlier manifest: a new version, never an old one", "H1", 9, "H2", 10},
	}
	for _, s := range steps {
		v, err := m.Version(ctx, s.hash, s.floor, s.floorHash)
		if err != nil || v != s.wantV {
			t.Fatalf("%s: Version(%s, %d, %s) = %d, %v; want %d", s.what, s.hash, s.floor, s.floorHash, v, err, s.wantV)
		}
		if cv, ch, err := m.Current(ctx); err != nil || cv != v || ch != s.hash {
			t.Fatalf("%s: Current = %d %q %v; want %d %q", s.what, cv, ch, err, v, s.hash)
		}
	}
	srv.Stop()
	if _, err := m.Version(ctx, "H4", 10, "H1"); err == nil {
		t.Fatal("Version with Redis down: no error")
	}
	if _, _, err := m.Current(ctx); err == nil {
		t.Fatal("Current with Redis down: no error")
	}
}
