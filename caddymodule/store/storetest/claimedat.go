package storetest

import (
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// testClaimedAt: on every path that writes a key's claim (a plain
// claim, one taking a 461 preview over, a keyed presentation with and
// without a preview, the gate's ResolvePair, Renew writing a lost
// record again, Renew of a live claim), the Hold.ClaimedAt that a later
// claim of the key (and Peek) reads equals the writing claim's
// ClaimedAt, by which the engine tells its own running claim (claimID).
// The clock moves on every read, so a claimed-at read at another moment
// than the one the store wrote differs (helper-96: the fixed clock of
// testLeaseAndFencing could not tell).
func testClaimedAt(t *testing.T, h Harness) {
	clock := NewClock()
	clock.Advance(777 * time.Microsecond) // a sub-ms clock: the memory store keeps it, Redis does not
	f := NewFixture(t)
	// A clock that moves on every read: a claimed-at taken after the
	// script returned differs from the one it stored.
	ticking := func() time.Time { clock.Advance(time.Millisecond); return clock.Now() }
	a, b := h.New(t, Config{Now: ticking, Restorer: f.Restorer(t),
		Limits: store.Limits{Idempotency: idempotency.Limits{Window: time.Hour, Lease: time.Minute}}})
	check := func(what string, cl store.Claim, s store.Set, key string, viaPresent func() *store.Claimed) {
		t.Helper()
		var in store.Claimed
		if viaPresent != nil {
			in = *viaPresent()
		} else {
			in = claim(t, s, agentA, key, "fp")
		}
		if in.Outcome != idempotency.InFlight || in.Hold == nil {
			t.Fatalf("%s: repeat outcome %v hold %+v, want in flight", what, in.Outcome, in.Hold)
		}
		if got, want := in.Hold.ClaimedAt, cl.ClaimedAt(); got.UnixNano() != want.UnixNano() {
			t.Errorf("%s: Hold.ClaimedAt %v (%d) != Claim.ClaimedAt %v (%d)", what, got, got.UnixNano(), want, want.UnixNano())
		}
		// The operator's Peek (INSPECT) sees the same claimed-at.
		st, ok := peek(t, s, agentA, key)
		if !ok || st.Hold == nil || st.Hold.ClaimedAt.UnixMilli() != cl.ClaimedAt().UnixMilli() {
			t.Errorf("%s: Peek %+v (found %v), want claimed at %v", what, st.Hold, ok, cl.ClaimedAt())
		}
	}
	// 1. plain Claim.
	plain := claim(t, a, agentA, "plain", "fp")
	wantOutcome(t, plain, idempotency.Execute)
	clock.Advance(3 * time.Millisecond)
	check("plain claim", plain.Claim, b, "plain", nil)

	// 2. Claim confirming a stored 461 (takeover preview branch).
	c := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Hour)
	if _, err := a.Contracts.Mint(ctx, c, store.ModeConfirmFirst); err != nil {
		t.Fatal(err)
	}
	preview := idempotency.Response{Status: idempotency.PreviewStatus, Body: []byte(`{"status":461}`), Previewed: c.SynthesisID}
	g := claim(t, a, agentA, "conf", "fp")
	if err := g.Claim.Complete(ctx, preview); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5*time.Millisecond + 300*time.Microsecond)
	took := must[store.Claimed](t)(b.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agentA, Key: "conf", Fingerprint: "fp", SynthesisID: c.SynthesisID, Pending: true}))
	wantOutcome(t, took, idempotency.Execute)
	clock.Advance(2 * time.Millisecond)
	check("confirming claim (preview taken over)", took.Claim, a, "conf", nil)

	// 3. Present with a key, taking a preview over.
	g2 := claim(t, a, agentA, "pres", "fp")
	if err := g2.Claim.Complete(ctx, preview); err != nil {
		t.Fatal(err)
	}
	clock.Advance(4*time.Millisecond + 100*time.Microsecond)
	req := store.PresentRequest{Presenter: agentA, SynthesisID: c.SynthesisID, Method: "BOOK", Path: "/trip", Key: "pres", Fingerprint: "fp", Claim: true}
	// present presents req on s and returns the claim it took.
	present := func(s store.Set, req store.PresentRequest) store.Claim {
		t.Helper()
		p := must[store.Presentation](t)(s.Presenter.Present(ctx, req))
		if p.Claimed == nil {
			t.Fatalf("present %s: %+v", req.Key, p)
		}
		wantOutcome(t, *p.Claimed, idempotency.Execute)
		clock.Advance(2 * time.Millisecond)
		return p.Claimed.Claim
	}
	check("present (preview taken over)", present(b, req), a, "pres", func() *store.Claimed {
		return must[store.Presentation](t)(a.Presenter.Present(ctx, req)).Claimed
	})

	// 4. Present with a fresh key (plain claim branch of claim()).
	req.Key = "pres-fresh"
	check("present (fresh key)", present(b, req), a, "pres-fresh", nil)

	// 5. ResolvePair (gate path), on a pair with no contract.
	gate := store.PairRequest{AgentID: agentA, Method: "BOOK", Path: "/nothing", Key: "gate", Fingerprint: "fp", ClaimIfMissing: true}
	r := must[store.PairResolution](t)(a.Presenter.ResolvePair(ctx, gate))
	if r.Claimed == nil {
		t.Fatalf("resolve: %+v", r)
	}
	wantOutcome(t, *r.Claimed, idempotency.Execute)
	clock.Advance(2 * time.Millisecond)
	check("resolve pair (gate)", r.Claimed.Claim, b, "gate", func() *store.Claimed {
		return must[store.PairResolution](t)(b.Presenter.ResolvePair(ctx, gate)).Claimed
	})

	// 6. Renew writing a lost record again.
	lost := claim(t, a, agentA, "lost", "fp")
	wantOutcome(t, lost, idempotency.Execute)
	clock.Advance(2 * time.Minute)
	if _, err := b.Idempotency.Release(ctx, agentA, "lost"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(9 * time.Millisecond)
	if err := lost.Claim.Renew(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check("renew rewrote a lost record", lost.Claim, b, "lost", nil)

	// 7. Renew extending a live claim leaves the claimed-at.
	clock.Advance(30 * time.Second)
	if err := plain.Claim.Renew(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check("renewed live claim", plain.Claim, b, "plain", nil)
}
