package integration

import (
	"testing"
)

// checkBooked checks one composed BOOK /room result and the reservation it
// created in json-server.
func checkBooked(t testing.TB, result any, reservation map[string]any) {
	t.Helper()
	if field(result, "reservation_id") == nil {
		t.Errorf("result has no reservation_id: %v", result)
	}
	if str(result, "guest", "id") != demoGuest || str(result, "property", "id") != demoProperty {
		t.Errorf("result guest/property = %v / %v", field(result, "guest"), field(result, "property"))
	}
	if str(result, "check_in") != demoCheckIn || field(result, "nights") != float64(demoNights) {
		t.Errorf("result check_in/nights = %v / %v", field(result, "check_in"), field(result, "nights"))
	}
	if reservation != nil {
		if field(result, "reservation_id") != reservation["id"] {
			t.Errorf("reservation_id %v is not the stored id %v", field(result, "reservation_id"), reservation["id"])
		}
		if reservation["guest_id"] != demoGuest || reservation["property_id"] != demoProperty ||
			reservation["check_in"] != demoCheckIn || reservation["nights"] != float64(demoNights) {
			t.Errorf("stored reservation = %v", reservation)
		}
	}
}

// Spec §24 items 41, 42, 100 and the demo flow in optimistic mode
// (RCNS §13.4).
func TestOptimisticBookRoom(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	// §24 41: 263 + Contract-Synthesized, executed inline.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	id := str(b, "synthesis_id")
	if got := r.Header.Get("Contract-Synthesized"); got != id {
		t.Fatalf("Contract-Synthesized header %q, body synthesis_id %q", got, id)
	}
	if _, ok := b["result"].(map[string]any); !ok {
		t.Fatalf("263 has no result object:\n%s", r)
	}
	rs := w.assertReservations(t, 1)
	checkBooked(t, b["result"], rs[0])
	if n := w.Hotel.Count(); n != 3 {
		t.Errorf("hotel upstream calls = %d, want 3 (guest, property, reservation)", n)
	}
	if cs := contracts(t, g, agentA1); len(cs) != 1 || str(cs[0], "synthesis_id") != id {
		t.Fatalf("DISCOVER /contracts = %v, want the one contract %s", cs, id)
	}

	// §24 42: presenting the contract executes it again, no new contract.
	t.Run("present contract", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("response Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
		rs := w.assertReservations(t, 2)
		checkBooked(t, r.Object(t)["result"], rs[1])
		if cs := contracts(t, g, agentA1); len(cs) != 1 {
			t.Errorf("contracts after presentation = %d, want 1", len(cs))
		}
	})

	// §24 100: Tier C by pair — neither header, same agent.
	t.Run("plain repeat served under the contract", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("Tier C by pair: Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
		rs := w.assertReservations(t, 3)
		checkBooked(t, r.Object(t)["result"], rs[2])
		p := attribution(t, r)
		if str(p, "synthesis_id") != id || str(p, "negotiation_origin") != "rcns-gate" {
			t.Errorf("Tier C by pair attribution payload = %v", p)
		}
	})

	// §24 100: another agent's plain request is not served under A1's contract.
	t.Run("tier3 plain repeat not served", func(t *testing.T) {
		r := w.book(t, agentA3, scopeAll)
		assertErrorBody(t, r, 404, "")
		assertNoRCNSSignal(t, r)
		w.assertReservations(t, 3)
	})
	t.Run("noscope plain repeat not served", func(t *testing.T) {
		r := w.book(t, agentA2, scopeNoRCNS)
		assertErrorBody(t, r, 404, "")
		assertNoRCNSSignal(t, r)
		w.assertReservations(t, 3)
	})

	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// Spec §24 items 34–38 and the pending-contract rule in confirm-first mode
// (RCNS §13.4; ARCHITECTURE.md: a 461 contract is pending until its
// holder presents it and does not resolve by pair).
func TestConfirmFirstBookRoom(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "confirm-first", LegacyCounter: true})
	g := w.GW

	// §24 34–36: 461 preview, nothing runs, hash reproducible.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 461, "BOOK", "/room", recipeName, recipeVer)
	id := str(b, "synthesis_id")
	if _, ok := b["result"]; ok {
		t.Errorf("461 carries a result:\n%s", r)
	}
	if n := w.Hotel.Count(); n != 0 {
		t.Fatalf("461 made %d hotel upstream calls", n)
	}
	w.assertReservations(t, 0)
	if cs := contracts(t, g, agentA1); len(cs) != 1 || str(cs[0], "synthesis_id") != id {
		t.Fatalf("DISCOVER /contracts after 461 = %v, want the pending contract", cs)
	}

	// A plain repeat before acceptance does not execute the preview.
	t.Run("plain repeat before acceptance", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll)
		assertErrorBody(t, r, 404, "")
		w.assertReservations(t, 0)
		if w.Hotel.Count() != 0 {
			t.Errorf("pending contract executed by pair")
		}
	})

	// §24 37, 38: presenting executes once; attribution names the contract.
	t.Run("accept by presenting", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("response Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
		rs := w.assertReservations(t, 1)
		checkBooked(t, r.Object(t)["result"], rs[0])
		p := attribution(t, r)
		if str(p, "synthesis_id") != id || str(p, "contract_hash") != str(b, "contract_hash") ||
			str(p, "negotiation_origin") != "rcns-gate" {
			t.Errorf("attribution payload = %v, want synthesis_id %s, contract_hash %s, rcns-gate", p, id, str(b, "contract_hash"))
		}
	})

	// Once accepted, the contract resolves by pair (§24 100).
	t.Run("plain repeat after acceptance", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll)
		wantStatus(t, r, 200)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
		w.assertReservations(t, 2)
	})

	if cs := contracts(t, g, agentA1); len(cs) != 1 {
		t.Errorf("contracts at the end = %d, want 1", len(cs))
	}
	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}
