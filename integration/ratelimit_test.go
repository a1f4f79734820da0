package integration

import (
	"fmt"
	"testing"
)

// Per-agent rate limits (RCNS §12.1, OP-4/OP-5; ARCHITECTURE.md "Rate
// limits"; spec §24 items 50–52). Budgets refill at 3 per minute or
// slower (20 s per token), so a test never sees a refill.

// gateNowhere is one gate evaluation that all four locks let through for
// A1/OP but that no recipe serves: 464 composition-impossible.
func gateNowhere(t testing.TB, g *Gateway, agent, scope string) *Resp {
	t.Helper()
	return g.Do(t, "BOOK", "/nowhere", hdr(agent, scope, "Allow-RCNS", "true"), bookBody())
}

// rate_limit rcns 3 3: the fourth gate evaluation by one agent is 429
// scope rcns; refused lock-3/lock-4 evaluations spend too; other agents,
// contract presentations and Tier C by pair are not affected.
func TestRateLimitGate(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\trate_limit rcns 3 3\n"})
	g := w.GW
	const q, win = 3, 60

	// A1: a synthesis (263) and two composition-impossible 464s spend
	// the three tokens; each answer reports what is left.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	id := str(b, "synthesis_id")
	assertRateLimitHeader(t, r, "rcns", 2, q, win)
	for i, left := range []int{1, 0} {
		r := gateNowhere(t, g, agentA1, scopeAll)
		assert464(t, r, "composition-impossible")
		assertRateLimitHeader(t, r, "rcns", left, q, win)
		if t.Failed() {
			t.Fatalf("evaluation %d", i+2)
		}
	}
	t.Run("fourth evaluation 429", func(t *testing.T) {
		defer w.noUpstreamCall(t)()
		r := gateNowhere(t, g, agentA1, scopeAll)
		assertRateLimited(t, r, "rcns", q, win)
		if v := r.Header.Get("Contract-Synthesized"); v != "" {
			t.Errorf("a 429 names contract %s", v)
		}
	})
	// A synthesis attempt for another pair beyond the budget is refused
	// before any synthesis: no upstream call, no contract.
	t.Run("synthesis beyond the budget 429", func(t *testing.T) {
		defer w.noUpstreamCall(t)()
		r := g.Do(t, "BOOK", "/suite", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
		assertRateLimited(t, r, "rcns", q, win)
	})
	// A1 holds an active contract for BOOK /room: with Allow-RCNS the
	// pair is still Tier C by pair (RCNS §10 step 8b), never a gate
	// evaluation, so it is served.
	t.Run("Tier C by pair with Allow-RCNS beyond the limit", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
		wantStatus(t, r, 200)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
	})

	// §24 52: presentations beyond the limit are never refused with an
	// RCNS 429.
	t.Run("presentations beyond the limit", func(t *testing.T) {
		for i := 0; i < 4; i++ {
			r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id)
			wantStatus(t, r, 200)
			if r.Header.Get("Contract-Synthesized") != id {
				t.Fatalf("presentation %d: Contract-Synthesized = %q", i, r.Header.Get("Contract-Synthesized"))
			}
		}
	})
	t.Run("Tier C by pair beyond the limit", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			r := w.book(t, agentA1, scopeAll)
			wantStatus(t, r, 200)
			if r.Header.Get("Contract-Synthesized") != id {
				t.Fatalf("by pair %d: Contract-Synthesized = %q", i, r.Header.Get("Contract-Synthesized"))
			}
		}
	})
	t.Run("still limited after presentations", func(t *testing.T) {
		assertRateLimited(t, gateNowhere(t, g, agentA1, scopeAll), "rcns", q, win)
	})

	// §24 51: another agent is not affected by A1's spent budget.
	t.Run("operator unaffected", func(t *testing.T) {
		// Requests with lock 2 closed are not gate evaluations: they
		// spend nothing.
		for i := 0; i < 5; i++ {
			r := g.Do(t, "BOOK", "/nowhere", hdr(agentOP, scopeAll), bookBody())
			assertErrorBody(t, r, 404, "")
			assertNoRCNSSignal(t, r)
			if v := r.Header.Get("RateLimit"); v != "" {
				t.Errorf("404 (lock 2 closed) carries RateLimit %s", v)
			}
		}
		for left := 2; left >= 0; left-- {
			r := gateNowhere(t, g, agentOP, scopeAll)
			assert464(t, r, "composition-impossible")
			assertRateLimitHeader(t, r, "rcns", left, q, win)
		}
		assertRateLimited(t, gateNowhere(t, g, agentOP, scopeAll), "rcns", q, win)
	})

	// OP-4: evaluations refused at lock 3 (A2 lacks rcns:negotiate) and
	// lock 4 (A3 is tier 3) spend the budget too.
	for _, c := range []struct {
		name, agent, scope string
		check              func(t testing.TB, r *Resp)
	}{
		{"lock 3 refusals spend", agentA2, scopeNoRCNS, func(t testing.TB, r *Resp) {
			b := assertErrorBody(t, r, 262, "")
			if str(b, "type") != "scope-required" {
				t.Errorf("262 type = %q, want scope-required", str(b, "type"))
			}
		}},
		{"lock 4 refusals spend", agentA3, scopeAll, func(t testing.TB, r *Resp) {
			assert464(t, r, "trust-tier-insufficient")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer w.noUpstreamCall(t)()
			for i := 0; i < q; i++ {
				r := w.book(t, c.agent, c.scope, "Allow-RCNS", "true")
				c.check(t, r)
				assertRateLimitHeader(t, r, "rcns", q-1-i, q, win)
				if t.Failed() {
					t.Fatalf("refusal %d:\n%s", i+1, r)
				}
			}
			assertRateLimited(t, w.book(t, c.agent, c.scope, "Allow-RCNS", "true"), "rcns", q, win)
		})
	}

	if cs := contracts(t, g, agentA1); len(cs) != 1 {
		t.Errorf("A1 contracts = %v, want only %s", contractIDs(cs), id)
	}
	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// rate_limit invocation 2 2: the third Tier B call by one agent is 429
// scope invocation; contract invocations spend the same budget.
func TestRateLimitInvocation(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\trate_limit invocation 2 2\n"})
	g := w.GW
	const q, win = 2, 60

	for left := 1; left >= 0; left-- {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		assertRateLimitHeader(t, r, "invocation", left, q, win)
	}
	before := w.Hotel.Count()
	r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	assertRateLimited(t, r, "invocation", q, win)
	if str(r.Object(t), "scope") == "rcns" {
		t.Errorf("an invocation 429 claims scope rcns")
	}
	r = g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book"), reserveBody(demoGuest, 1))
	assertRateLimited(t, r, "invocation", q, win)
	if n := w.Hotel.Count(); n != before {
		t.Errorf("refused Tier B calls made %d upstream calls", n-before)
	}
	w.assertReservations(t, 0)

	t.Run("another agent unaffected", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/properties/p-1", hdr(agentOP, "hotel:read"), nil)
		wantStatus(t, r, 200)
	})

	// The gate budget is separate: A1's spent invocation budget does not
	// refuse a gate evaluation as rcns.
	t.Run("gate budget separate", func(t *testing.T) {
		r := gateNowhere(t, g, agentA1, scopeAll)
		assert464(t, r, "composition-impossible")
	})

	// Contract invocations spend the invocation budget (configuration
	// reference, "Rate limits"): within three presentations by an agent
	// with a budget of two, one is refused with scope invocation.
	t.Run("contract invocations spend it", func(t *testing.T) {
		r := w.book(t, agentOP, scopeAll, "Allow-RCNS", "true")
		if r.Status != 263 && r.Status != 429 {
			t.Fatalf("OP synthesis: want 263:\n%s", r)
		}
		if r.Status == 429 {
			b := r.Object(t)
			t.Fatalf("the gate synthesis was refused with scope %q:\n%s", str(b, "scope"), r)
		}
		id := str(r.Object(t), "synthesis_id")
		var limited *Resp
		for i := 0; i < 3 && limited == nil; i++ {
			r := w.book(t, agentOP, scopeAll, "Contract-Synthesized", id)
			switch r.Status {
			case 200:
			case 429:
				limited = r
			default:
				t.Fatalf("presentation %d:\n%s", i, r)
			}
		}
		if limited == nil {
			t.Fatalf("three presentations with an invocation budget of %d (one already spent by FETCH) were all served", q)
		}
		assertRateLimited(t, limited, "invocation", q, win)
	})
}

// Without a configured invocation budget, Tier B calls are never 429.
func TestRateLimitInvocationOff(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	for i := 0; i < 25; i++ {
		r := g.Do(t, "FETCH", fmt.Sprintf("/guests/g-%d", 1+i%2), hdr(agentA1, "hotel:read"), nil)
		if r.Status != 200 {
			t.Fatalf("Tier B call %d: want 200:\n%s", i+1, r)
		}
		if v := r.Header.Get("RateLimit"); v != "" {
			if name, _, _, _ := rateLimitField(v); name == "invocation" {
				t.Fatalf("call %d reports an invocation budget that is not configured: %s", i+1, v)
			}
		}
	}
	if n := w.Hotel.Count(); n != 25 {
		t.Errorf("hotel upstream calls = %d, want 25", n)
	}
}

// §24 item 50 with the default budget (no rate_limit line: 10 per minute,
// burst 10): the 11th gate evaluation by one agent in quick succession is
// 429 scope rcns; §24 51: another agent is unaffected.
func TestRateLimitDefaultBudget(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	const q, win = 10, 60
	for i := 1; i <= q; i++ {
		r := gateNowhere(t, g, agentA1, scopeAll)
		assert464(t, r, "composition-impossible")
		assertRateLimitHeader(t, r, "rcns", q-i, q, win)
		if t.Failed() {
			t.Fatalf("evaluation %d:\n%s", i, r)
		}
	}
	assertRateLimited(t, gateNowhere(t, g, agentA1, scopeAll), "rcns", q, win)
	// Still refused, however many times it asks.
	assertRateLimited(t, gateNowhere(t, g, agentA1, scopeAll), "rcns", q, win)

	r := gateNowhere(t, g, agentOP, scopeAll)
	assert464(t, r, "composition-impossible")
	assertRateLimitHeader(t, r, "rcns", q-1, q, win)
	if n := w.Hotel.Count(); n != 0 {
		t.Errorf("refused evaluations made %d hotel upstream calls", n)
	}
}

// noUpstreamCall snapshots the hotel upstream and json-server; the
// returned func fails the test when either changed since.
func (w *hotelWorld) noUpstreamCall(t testing.TB) func() {
	t.Helper()
	calls, res := w.Hotel.Count(), len(w.JS.Reservations(t))
	return func() {
		t.Helper()
		if n := w.Hotel.Count(); n != calls {
			t.Errorf("%d hotel upstream calls, want none", n-calls)
		}
		if n := len(w.JS.Reservations(t)); n != res {
			t.Errorf("reservations %d → %d, want unchanged", res, n)
		}
	}
}

// RCNS §12.1 (OP-4): every PROPOSE evaluation spends the rcns budget,
// approved or rejected.
func TestRateLimitPropose(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\trate_limit rcns 2 2\n"})
	g := w.GW
	r := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"))
	assertProposeBody(t, r, "BOOK", "/room", recipeName, recipeVer)
	assertRateLimitHeader(t, r, "rcns", 1, 2, 60)
	r = proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/nothing-here"))
	assert463(t, r, "composition-impossible")
	n := len(contracts(t, g, agentA1))
	r = proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"))
	assertRateLimited(t, r, "rcns", 2, 60)
	if got := len(contracts(t, g, agentA1)); got != n {
		t.Errorf("a rate-limited PROPOSE minted a contract")
	}
	// The gate shares the budget.
	assertRateLimited(t, gateNowhere(t, g, agentA1, scopeAll), "rcns", 2, 60)
	// Another agent proposes freely.
	assertProposeBody(t, proposeCall(t, g, agentOP, scopeAll, wrappedProposal("BOOK", "/room")), "BOOK", "/room", recipeName, recipeVer)
}
