package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// RunGateMiss runs the gate's part of ResolvePair (PairRequest.Spend
// and PairRequest.Attempt) against h: on a miss whose claim, if any,
// executes, the budget is spent once and the refusal's attempt record
// kept when the budget allows it; a replayed key spends nothing and
// keeps nothing; a pair an active contract serves spends nothing. A
// store may leave the record to the caller (AttemptKept false: the
// Redis store in Cluster mode); one it says it kept is read on the
// other node.
func RunGateMiss(t *testing.T, h Harness) {
	clock := NewClock()
	f := NewFixture(t)
	a, b := h.New(t, Config{Now: clock.Now, Restorer: f.Restorer(t)})
	// Two requests, refilled one a minute: nothing refills meanwhile.
	lim := must[store.Limiter](t)(a.Limiters.Limiter(ratelimit.Budget{Name: "rcns", Burst: 2, PerMinute: 1}, 0))
	n := 0
	attempt := func() *store.Attempt {
		n++
		return &store.Attempt{ID: fmt.Sprintf("rcns-gate-miss-%d-%d", time.Now().UnixNano(), n), Method: "BOOK", Path: "/none",
			AgentID: agentA, Reason: "composition-impossible", Locks: map[string]string{"caller-opt-in": "open"}}
	}
	resolve := func(req store.PairRequest) store.PairResolution {
		t.Helper()
		return must[store.PairResolution](t)(a.Presenter.ResolvePair(ctx, req))
	}
	kept := func(what string, r store.PairResolution, id string, want bool) {
		t.Helper()
		_, found, err := b.Attempts.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !want && (r.AttemptKept || found) {
			t.Fatalf("%s: attempt kept %v, found %v; want none", what, r.AttemptKept, found)
		}
		if want && r.AttemptKept != found {
			t.Fatalf("%s: attempt kept %v, found on the other node %v", what, r.AttemptKept, found)
		}
	}
	spent := func(what string, r store.PairResolution, allowed bool, remaining int) {
		t.Helper()
		if r.Spent == nil || r.Spent.Allowed != allowed || (allowed && r.Spent.Remaining != remaining) {
			t.Fatalf("%s: spent %+v, want allowed %v remaining %d", what, r.Spent, allowed, remaining)
		}
	}
	miss := store.PairRequest{AgentID: agentA, Method: "BOOK", Path: "/none", Spend: lim}

	req := miss
	req.Attempt = attempt()
	r := resolve(req)
	spent("unkeyed miss", r, true, 1)
	kept("unkeyed miss", r, req.Attempt.ID, true)

	req = miss
	req.Key, req.Fingerprint, req.ClaimIfMissing, req.Attempt = "k", "fp", true, attempt()
	r = resolve(req)
	if r.Claimed == nil || r.Claimed.Outcome != idempotency.Execute {
		t.Fatalf("keyed miss: claimed %+v", r.Claimed)
	}
	spent("keyed miss", r, true, 0)
	kept("keyed miss", r, req.Attempt.ID, true)
	if err := r.Claimed.Claim.Complete(ctx, idempotency.Response{Status: 464}); err != nil {
		t.Fatal(err)
	}

	// The key's repeat is replayed: the budget is not spent, nothing
	// is recorded.
	req.Attempt = attempt()
	r = resolve(req)
	if r.Claimed == nil || r.Claimed.Outcome != idempotency.Replay || r.Spent != nil {
		t.Fatalf("replayed key: claimed %+v, spent %+v", r.Claimed, r.Spent)
	}
	kept("replayed key", r, req.Attempt.ID, false)

	// The budget is spent (by the two above, not the replay): refused,
	// and the refusal that would have followed is not recorded.
	req = miss
	req.Attempt = attempt()
	r = resolve(req)
	spent("spent budget", r, false, 0)
	if r.Spent.RetryAfter <= 0 {
		t.Fatalf("spent budget: Retry-After %v", r.Spent.RetryAfter)
	}
	kept("spent budget", r, req.Attempt.ID, false)
	if d := must[ratelimit.Decision](t)(lim.Allow(ctx, agentA)); d.Allowed {
		t.Fatalf("the budget ResolvePair spent is not the limiter's: %+v", d)
	}

	// No budget to spend (a refusal at locks 1-2): only the record.
	req = miss
	req.Spend, req.Attempt = nil, attempt()
	r = resolve(req)
	if r.Spent != nil {
		t.Fatalf("no Spend: spent %+v", r.Spent)
	}
	kept("no Spend", r, req.Attempt.ID, true)

	// A synthesis: the contract is minted when the store does it in
	// the call (Minted), visible on the other node, by id to another
	// agent (its owner index) and by pair; the caller mints it
	// otherwise.
	c := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Hour)
	r = resolve(store.PairRequest{AgentID: agentA, Method: "BOOK", Path: "/trip", Mint: c, MintMode: store.ModeOptimistic})
	if r.Contract != nil || r.AttemptKept {
		t.Fatalf("synthesis: %+v", r)
	}
	if r.Minted == nil {
		if _, _, err := a.Contracts.MintForPair(ctx, c, store.ModeOptimistic); err != nil {
			t.Fatal(err)
		}
	} else if r.Minted.Err != nil || r.Minted.Joined != nil || r.Minted.State != recipes.StateActive {
		t.Fatalf("synthesis minted %+v", r.Minted)
	}
	if got, res, err := b.Contracts.Lookup(ctx, agentB, c.SynthesisID); err != nil || res != recipes.LookupFound || got == nil || got.OriginatingAgentID != agentA {
		t.Fatalf("the minted contract by id from another agent: %v %d %v", got, res, err)
	}
	if got, err := b.Contracts.ActiveFor(ctx, agentA, "BOOK", "/trip"); err != nil || got == nil || got.SynthesisID != c.SynthesisID {
		t.Fatalf("the minted contract by pair: %v %v", got, err)
	}

	// A refused budget mints nothing.
	other := f.Contract(t, clock.Now(), agentA, "/other", recipes.OriginGate, time.Hour)
	r = resolve(store.PairRequest{AgentID: agentA, Method: "BOOK", Path: "/other", Spend: lim, Mint: other, MintMode: store.ModeOptimistic})
	if r.Spent == nil || r.Spent.Allowed || r.Minted != nil {
		t.Fatalf("refused synthesis: spent %+v, minted %+v", r.Spent, r.Minted)
	}
	if _, res, err := b.Contracts.Lookup(ctx, agentA, other.SynthesisID); err != nil || res != recipes.LookupUnknown {
		t.Fatalf("a refused synthesis minted: %d %v", res, err)
	}

	// An active contract serves the pair: nothing is spent, kept or
	// minted.
	req = store.PairRequest{AgentID: agentA, Method: "BOOK", Path: "/trip", Spend: lim, Attempt: attempt()}
	r = resolve(req)
	if r.Contract == nil || r.Spent != nil {
		t.Fatalf("pair served: contract %v, spent %+v", r.Contract != nil, r.Spent)
	}
	kept("pair served", r, req.Attempt.ID, false)
	third := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Hour)
	r = resolve(store.PairRequest{AgentID: agentA, Method: "BOOK", Path: "/trip", Mint: third, MintMode: store.ModeOptimistic})
	if r.Contract == nil || r.Minted != nil {
		t.Fatalf("pair served: minted %+v", r.Minted)
	}
}
