package integration

import (
	"testing"
	"time"
)

// Spec §24 items 40, 43, 44, 57, 58 and the Synthesis-Id alias (RCNS
// §13.5, §14.1, §17.2).
func TestContractScoping(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	id := str(b, "synthesis_id")
	w.assertReservations(t, 1)

	// §24 57: the inventory entry.
	t.Run("DISCOVER /contracts entry", func(t *testing.T) {
		cs := contracts(t, g, agentA1)
		if len(cs) != 1 {
			t.Fatalf("contracts = %v, want 1", cs)
		}
		c := cs[0]
		for k, want := range map[string]string{
			"synthesis_id": id, "method": "BOOK", "path": "/room",
			"originating_agent_id": agentA1, "contract_hash": str(b, "contract_hash"),
			"negotiation_origin": "rcns-gate",
		} {
			if str(c, k) != want {
				t.Errorf("entry %s = %q, want %q", k, str(c, k), want)
			}
		}
		if str(c, "recipe_lineage", "recipe_name") != recipeName || str(c, "recipe_lineage", "recipe_version") != recipeVer {
			t.Errorf("entry recipe_lineage = %v", field(c, "recipe_lineage"))
		}
	})

	// §24 58: other agents never see A1's contract; inspect:all does.
	t.Run("DISCOVER /contracts scoping", func(t *testing.T) {
		if cs := contracts(t, g, agentA3); len(cs) != 0 {
			t.Errorf("A3 sees %v", cs)
		}
		if cs := contracts(t, g, agentA2); len(cs) != 0 {
			t.Errorf("A2 sees %v", cs)
		}
		cs := contracts(t, g, agentOP)
		found := false
		for _, c := range cs {
			found = found || str(c, "synthesis_id") == id
		}
		if !found {
			t.Errorf("operator (inspect:all) does not see A1's contract: %v", cs)
		}
	})

	// §24 43: another agent presenting A1's contract.
	for name, agent := range map[string]string{"A2": agentA2, "A3": agentA3, "OP": agentOP} {
		t.Run("contract-not-yours "+name, func(t *testing.T) {
			r := w.book(t, agent, scopeNoRCNS, "Contract-Synthesized", id)
			assert464(t, r, "contract-not-yours")
			w.assertReservations(t, 1)
		})
	}

	// §24 44: unknown synthesis_id.
	t.Run("unknown synthesis_id 404", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", "syn-AAAAAAAAAAAAAAAAAAAAAA")
		assertErrorBody(t, r, 404, "")
		w.assertReservations(t, 1)
	})

	// §24 40: presenting with Allow-RCNS: true mints nothing new.
	t.Run("presentation with Allow-RCNS creates no contract", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id, "Allow-RCNS", "true")
		wantStatus(t, r, 200)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
		w.assertReservations(t, 2)
		if cs := contracts(t, g, agentA1); len(cs) != 1 {
			t.Errorf("contracts = %d, want 1: %v", len(cs), cs)
		}
	})

	// OP-3: Synthesis-Id is accepted as an alias request header.
	t.Run("Synthesis-Id alias", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Synthesis-Id", id)
		wantStatus(t, r, 200)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
		w.assertReservations(t, 3)
	})
	t.Run("Synthesis-Id alias from another agent", func(t *testing.T) {
		r := w.book(t, agentA3, scopeAll, "Synthesis-Id", id)
		assert464(t, r, "contract-not-yours")
		w.assertReservations(t, 3)
	})

	// OP-3: both headers, different values → 400; equal values are fine.
	t.Run("both headers differ 400", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id, "Synthesis-Id", "syn-BBBBBBBBBBBBBBBBBBBBBB")
		assertErrorBody(t, r, 400, "")
		w.assertReservations(t, 3)
	})
	t.Run("both headers equal", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id, "Synthesis-Id", id)
		wantStatus(t, r, 200)
		w.assertReservations(t, 4)
	})

	// OP-19: a malformed synthesis_id is a 400.
	t.Run("malformed synthesis_id 400", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", "syn with spaces!")
		assertErrorBody(t, r, 400, "")
		w.assertReservations(t, 4)
	})

	// A contract presented on another pair never executes (404).
	t.Run("presented on another pair", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, scopeAll, "Contract-Synthesized", id), nil)
		assertErrorBody(t, r, 404, "")
		w.assertReservations(t, 4)
	})

	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// Spec §24 item 45: after the TTL a presentation is 464 contract-revoked
// (a tombstone, not 404).
func TestContractExpiry(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", Extra: "\t\tcontract_ttl 2s\n", LegacyCounter: true})

	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	id := str(b, "synthesis_id")
	issued, _ := time.Parse(time.RFC3339, str(b, "issued_at"))
	expires, _ := time.Parse(time.RFC3339, str(b, "expires_at"))
	if d := expires.Sub(issued); d < time.Second || d > 3*time.Second {
		t.Errorf("expires_at - issued_at = %s, want about 2s", d)
	}
	w.assertReservations(t, 1)

	// Wait past expires_at (bounded; expires_at may be cut to whole
	// seconds, hence the margin), then poll until the tombstone answers.
	if d := time.Until(expires.Add(1500 * time.Millisecond)); d > 0 && d < 10*time.Second {
		time.Sleep(d)
	}
	var last *Resp
	waitFor(t, 10*time.Second, 250*time.Millisecond, "the contract to expire", func() bool {
		last = w.book(t, agentA1, scopeAll, "Contract-Synthesized", id)
		return last.Status == 464
	})
	assert464(t, last, "contract-revoked")

	// An expired contract no longer resolves by pair and is not listed.
	r = w.book(t, agentA1, scopeAll)
	assertErrorBody(t, r, 404, "")
	if cs := contracts(t, w.GW, agentA1); len(cs) != 0 {
		t.Errorf("expired contract still listed: %v", cs)
	}
	// Another agent presenting it is still told it is not theirs or revoked.
	r = w.book(t, agentA3, scopeAll, "Contract-Synthesized", id)
	if r.Status != 464 {
		t.Errorf("A3 presenting an expired contract: %d, want 464:\n%s", r.Status, r)
	}

	// Nothing executed after the first synthesis.
	if n := len(w.JS.Reservations(t)); n != 1 {
		t.Errorf("reservations = %d, want 1: the expired contract executed", n)
	}
}
