package storetest

import (
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/google/uuid"
)

// testNegotiations: a negotiation kept on one node continues on the
// other with its count of rejected turns (spec §24 item 97, OP-35); it
// is the agent's alone; one never recorded is not kept; an idle one is
// forgotten (on the fake clock).
func testNegotiations(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now})
	turn := func(s store.Set, agent, id string, want int, wantKept bool) {
		t.Helper()
		n, kept, err := s.Negotiations.Turn(ctx, agent, id)
		if err != nil {
			t.Fatal(err)
		}
		if n != want || kept != wantKept {
			t.Fatalf("Turn(%s) = %d, %v; want %d, %v", id, n, kept, want, wantKept)
		}
	}
	record := func(s store.Set, agent, id string, rejected bool, want int) {
		t.Helper()
		n, err := s.Negotiations.Record(ctx, agent, id, rejected)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("Record(%s, %v) = %d, want %d", id, rejected, n, want)
		}
	}

	// A new negotiation: not kept until its first turn is recorded.
	id := uuid.NewString()
	turn(a, agentA, id, 0, false)
	record(a, agentA, id, true, 1)
	// The next turn, on the other node, continues it.
	turn(b, agentA, id, 1, true)
	record(b, agentA, id, true, 2)
	turn(a, agentA, id, 2, true)
	record(a, agentA, id, false, 2) // a turn granted or refused otherwise
	turn(b, agentA, id, 2, true)

	// Another agent echoing it finds nothing.
	turn(b, agentB, id, 0, false)

	// A turn recorded without a rejection keeps a new negotiation at 0.
	granted := uuid.NewString()
	record(b, agentA, granted, false, 0)
	turn(a, agentA, granted, 0, true)

	if !h.ClockDrivesRetention {
		return
	}
	// Idle for NegotiationIdle: forgotten. A turn just before keeps it.
	clock.Advance(store.NegotiationIdle - 1)
	turn(a, agentA, id, 2, true)
	clock.Advance(store.NegotiationIdle)
	turn(a, agentA, id, 0, false)
}
