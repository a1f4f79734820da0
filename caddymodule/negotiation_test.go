package caddymodule

import (
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestRedisNegotiationsKept: on the Redis store a PROPOSE turn keeps its
// negotiation only once it gets past the PROPOSE budget (helper-134 M3:
// every PROPOSE, a malformed one included, wrote a key kept for an
// hour, so the keys were not bounded by the budget). A malformed
// proposal (400) and a replay keep nothing; a rejected turn (463) keeps
// one key holding its count, which the next turn continues when it
// echoes the ID, in upper case too; a granted one keeps its own at 0; over maxmemory a malformed PROPOSE
// still gets its 400, and a turn that would be rejected its 463.
func TestRedisNegotiationsKept(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	up, _ := countingUpstream(t)
	g := redisGateway(t, up, srv.Addr())
	keys := func() []string {
		t.Helper()
		v, err := redistest.Do(srv.Addr(), "KEYS", "t:*:ng:*")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(v)
	}
	wantError(t, g.builtin(t, "PROPOSE", map[string]any{}), 400, "invalid-proposal", "")
	if k := keys(); len(k) != 0 {
		t.Fatalf("a malformed PROPOSE kept negotiations %v", k)
	}

	first := g.builtin(t, "PROPOSE", proposal("/nothing"))
	wantError(t, first, 463, "composition-impossible", "")
	neg := first.hdr("Negotiation-ID")
	if k := keys(); len(k) != 1 || !strings.HasSuffix(k[0], ":ng:"+neg) {
		t.Fatalf("after a rejected turn the negotiations are %v, want the one of %s", k, neg)
	}
	if n, _ := redistest.Do(srv.Addr(), "GET", keys()[0]); n != "1" {
		t.Fatalf("the rejected turn's count is %q, want 1", n)
	}
	// A granted turn keeps its negotiation (at 0); its replay keeps
	// nothing more.
	granted := g.builtin(t, "PROPOSE", proposal("/item/p1"), "Idempotency-Key", "neg-1")
	if granted.status != 263 || len(keys()) != 2 {
		t.Fatalf("a granted turn: %s, negotiations %v", granted, keys())
	}
	replay := g.builtin(t, "PROPOSE", proposal("/item/p1"), "Idempotency-Key", "neg-1")
	if replay.status != 263 || replay.hdr("Negotiation-ID") != granted.hdr("Negotiation-ID") || len(keys()) != 2 {
		t.Fatalf("the replay: %s (Negotiation-ID %s), negotiations %v", replay, replay.hdr("Negotiation-ID"), keys())
	}

	second := g.builtin(t, "PROPOSE", proposal("/nothing"), "Negotiation-ID", strings.ToUpper(neg))
	wantError(t, second, 463, "composition-impossible", "")
	if got := second.hdr("Negotiation-ID"); got != neg {
		t.Fatalf("a turn echoing %s in upper case got Negotiation-ID %s", neg, got)
	}
	if n, _ := redistest.Do(srv.Addr(), "GET", "t:{a:"+benchAgent+"}:ng:"+neg); n != "2" || len(keys()) != 2 {
		t.Fatalf("after the second rejected turn: count %q, negotiations %v", n, keys())
	}

	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	bad := g.builtin(t, "PROPOSE", map[string]any{}, "Negotiation-ID", neg)
	wantError(t, bad, 400, "invalid-proposal", "")
	if bad.hdr("Negotiation-ID") != neg || bad.str("negotiation_id") != neg {
		t.Fatalf("over maxmemory a turn echoing %s got Negotiation-ID %s", neg, bad.hdr("Negotiation-ID"))
	}
	// The budget's spend is a write: 503, the store full, naming the
	// negotiation it continues.
	third := g.builtin(t, "PROPOSE", proposal("/nothing"), "Negotiation-ID", neg)
	wantError(t, third, 503, "store-unavailable", "is full")
	if third.hdr("Negotiation-ID") != neg || third.str("negotiation_id") != neg {
		t.Fatalf("over maxmemory a turn echoing %s got Negotiation-ID %s", neg, third.hdr("Negotiation-ID"))
	}
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
}
