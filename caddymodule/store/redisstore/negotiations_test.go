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

// TestNegotiationKeys: a negotiation is one key in its agent's slot,
// written by Record only, that expires store.NegotiationIdle after its
// last turn (a read and a record each move it). Over maxmemory
// (noeviction) a turn is still read (its PROPOSE is answered up to the
// mint: a malformed one gets its 400, not a 503), and a record is
// refused and writes nothing.
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
	if _, kept, err := set.Negotiations.Turn(ctx, "agent-1", "neg-1"); err != nil || kept {
		t.Fatalf("a new negotiation's turn: kept %v, %v", kept, err)
	}
	if n, _ := redistest.Do(srv.Addr(), "DBSIZE"); n != "0" {
		t.Fatalf("a turn's read wrote: DBSIZE %s", n)
	}
	if _, err := set.Negotiations.Record(ctx, "agent-1", "neg-1", false); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= store.NegotiationIdle-time.Minute || d > store.NegotiationIdle {
		t.Fatalf("PTTL of %s = %v, want about %v", key, d, store.NegotiationIdle)
	}
	if _, err := redistest.Do(srv.Addr(), "PEXPIRE", key, "60000"); err != nil {
		t.Fatal(err)
	}
	if n, kept, err := set.Negotiations.Turn(ctx, "agent-1", "neg-1"); err != nil || !kept || n != 0 {
		t.Fatalf("turn = %d, %v, %v; want 0, kept", n, kept, err)
	}
	if d := pttl(); d <= store.NegotiationIdle-time.Minute {
		t.Fatalf("a turn left the PTTL at %v, want about %v", d, store.NegotiationIdle)
	}

	fillRedis(t, srv.Addr())
	keysBefore, _ := redistest.Do(srv.Addr(), "DBSIZE")
	if n, kept, err := set.Negotiations.Turn(ctx, "agent-1", "neg-1"); err != nil || !kept || n != 0 {
		t.Fatalf("a turn over maxmemory = %d, %v, %v; want 0, kept", n, kept, err)
	}
	if _, err := set.Negotiations.Record(ctx, "agent-1", "neg-2", true); !errors.Is(err, store.ErrUnavailable) || !IsOOM(err) {
		t.Fatalf("a new negotiation recorded over maxmemory: %v, want an OOM refusal", err)
	}
	if keys, _ := redistest.Do(srv.Addr(), "DBSIZE"); keys != keysBefore {
		t.Fatalf("DBSIZE went from %s to %s: a refused record wrote", keysBefore, keys)
	}
}
