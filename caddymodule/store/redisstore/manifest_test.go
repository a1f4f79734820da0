package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	c, m := manifestNode(t, Config{Addrs: []string{srv.Addr()}}, fmt.Sprintf("t%d:", prefixes.Add(1)))
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

// TestManifestVersionsOverMaxmemory: while Redis is over maxmemory
// (noeviction: a script that may grow the data is refused), the
// manifest numbering still runs (allow-oom): a manifest keeps its
// number, a changed one gets the next, Current follows, and numbering
// many manifests keeps the hash bounded (at most maxManifestNumbers+2
// fields) and used_memory with it.
func TestManifestVersionsOverMaxmemory(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1))})
	ctx := context.Background()
	m := set.Manifest
	hash := func(i int) string { return fmt.Sprintf("%064x", i) } // a manifest's content hash: 64 hex digits
	if v, err := m.Version(ctx, hash(1), 0, ""); err != nil || v != 1 {
		t.Fatalf("Version before Redis is full = %d, %v; want 1", v, err)
	}
	fillRedis(t, srv.Addr())
	// Redis is full: a write that may grow the data is refused.
	if err := set.Attempts.Add(ctx, store.Attempt{ID: "att-oom"}); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(Cause(err), "OOM") {
		t.Fatalf("attempt record over maxmemory: %v, want an OOM refusal (Redis is not full)", err)
	}
	if v, err := m.Version(ctx, hash(1), 0, ""); err != nil || v != 1 {
		t.Fatalf("the same manifest over maxmemory = %d, %v; want its number, 1", v, err)
	}
	if v, err := m.Version(ctx, hash(2), 1, hash(1)); err != nil || v != 2 {
		t.Fatalf("a changed manifest over maxmemory = %d, %v; want the next number, 2", v, err)
	}
	if v, h, err := m.Current(ctx); err != nil || v != 2 || h != hash(2) {
		t.Fatalf("Current over maxmemory = %d %q %v; want 2 and the changed manifest's hash", v, h, err)
	}
	before := usedMemory(t, srv.Addr())
	key := c.globalKey(manifestKeyName)
	for i := range 3 * maxManifestNumbers {
		want := i + 3
		v, err := m.Version(ctx, hash(i+3), 0, "")
		if err != nil || v != want {
			t.Fatalf("manifest %d over maxmemory = %d, %v; want %d", i+3, v, err, want)
		}
		if n, err := c.Redis().HLen(ctx, key).Result(); err != nil || n > maxManifestNumbers+2 {
			t.Fatalf("after manifest %d P{g}:manifest holds %d fields (%v), want at most %d", i+3, n, err, maxManifestNumbers+2)
		}
	}
	// The hash's fields at most (short of its largest) is all it adds.
	if after := usedMemory(t, srv.Addr()); after > before+256<<10 {
		t.Fatalf("used_memory grew from %d to %d numbering manifests over maxmemory, want the hash bounded", before, after)
	}
	if v, h, err := m.Current(ctx); err != nil || v != 3*maxManifestNumbers+2 || h != hash(3*maxManifestNumbers+2) {
		t.Fatalf("Current after numbering over maxmemory = %d %q %v; want the last number given, %d", v, h, err, 3*maxManifestNumbers+2)
	}
	if _, err := redistest.Do(srv.Addr(), "DEL", "fill"); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Version(ctx, hash(1), 0, ""); err != nil || v != 3*maxManifestNumbers+3 {
		t.Fatalf("manifest 1 once Redis has room, its number long dropped = %d, %v; want a new one", v, err)
	}
}
