package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestNegotiationKeys: a negotiation is one key in its agent's slot that
// expires store.NegotiationIdle after its last turn (a turn and a
// rejection each move it); over maxmemory (noeviction) a turn is refused
// (store full: the PROPOSE would need room to mint anyway) and writes
// nothing, while a rejection of a kept negotiation is still counted.
func TestNegotiationKeys(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	key := "rcns:{a:agent-1}:ng:neg-1"
	pttl := func() time.Duration {
		t.Helper()
		v, err := redistest.Do(srv.Addr(), "PTTL", key)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.ParseInt(v, 10, 64)
		return time.Duration(ms) * time.Millisecond
	}
	if _, _, err := set.Negotiations.Turn(ctx, "agent-1", "", "neg-1"); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= store.NegotiationIdle-time.Minute || d > store.NegotiationIdle {
		t.Fatalf("PTTL of %s = %v, want about %v", key, d, store.NegotiationIdle)
	}
	if _, err := redistest.Do(srv.Addr(), "PEXPIRE", key, "60000"); err != nil {
		t.Fatal(err)
	}
	if id, n, err := set.Negotiations.Turn(ctx, "agent-1", "neg-1", "neg-2"); err != nil || id != "neg-1" || n != 0 {
		t.Fatalf("turn = %s, %d, %v; want neg-1, 0", id, n, err)
	}
	if d := pttl(); d <= store.NegotiationIdle-time.Minute {
		t.Fatalf("a turn left the PTTL at %v, want about %v", d, store.NegotiationIdle)
	}
	if exists, _ := redistest.Do(srv.Addr(), "EXISTS", "rcns:{a:agent-1}:ng:neg-2"); exists != "0" {
		t.Fatal("a turn that continued a negotiation kept the fresh one too")
	}

	fillRedis(t, srv.Addr())
	keysBefore, _ := redistest.Do(srv.Addr(), "DBSIZE")
	if _, _, err := set.Negotiations.Turn(ctx, "agent-1", "", "neg-3"); !errors.Is(err, store.ErrUnavailable) || !IsOOM(err) {
		t.Fatalf("a new negotiation over maxmemory: %v, want an OOM refusal", err)
	}
	if keys, _ := redistest.Do(srv.Addr(), "DBSIZE"); keys != keysBefore {
		t.Fatalf("DBSIZE went from %s to %s: a refused turn wrote", keysBefore, keys)
	}
	if n, err := set.Negotiations.Reject(ctx, "agent-1", "neg-1"); err != nil || n != 1 {
		t.Fatalf("a rejection over maxmemory = %d, %v; want 1", n, err)
	}
}
