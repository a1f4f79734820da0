package storetest

import (
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/google/uuid"
)

// testNegotiations: a negotiation begun on one node continues on the
// other with its count of rejected turns (spec §24 item 97, OP-35); it
// is the agent's alone; an ID the store does not keep begins a new one;
// a rejection of a negotiation not kept keeps nothing; an idle one is
// forgotten (on the fake clock).
func testNegotiations(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now})
	turn := func(s store.Set, agent, echoed string) (string, string, int) {
		t.Helper()
		fresh := uuid.NewString()
		id, n, err := s.Negotiations.Turn(ctx, agent, echoed, fresh)
		if err != nil {
			t.Fatal(err)
		}
		return id, fresh, n
	}
	reject := func(s store.Set, agent, id string, want int) {
		t.Helper()
		n, err := s.Negotiations.Reject(ctx, agent, id)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("Reject(%s) = %d, want %d", id, n, want)
		}
	}

	id, fresh, n := turn(a, agentA, "")
	if id != fresh || n != 0 {
		t.Fatalf("first turn = %s, %d; want the fresh %s, 0", id, n, fresh)
	}
	reject(a, agentA, id, 1)
	// The next turn, on the other node, continues it.
	if got, _, n := turn(b, agentA, id); got != id || n != 1 {
		t.Fatalf("turn on the other node = %s, %d; want %s, 1", got, n, id)
	}
	reject(b, agentA, id, 2)
	if got, _, n := turn(a, agentA, id); got != id || n != 2 {
		t.Fatalf("third turn = %s, %d; want %s, 2", got, n, id)
	}

	// Another agent echoing it begins its own, and cannot count a
	// rejection on agent A's.
	if got, fresh, n := turn(b, agentB, id); got != fresh || n != 0 {
		t.Fatalf("agent B echoing A's negotiation = %s, %d; want a new one", got, n)
	}
	reject(a, agentB, id, 0)
	if got, _, n := turn(b, agentA, id); got != id || n != 2 {
		t.Fatalf("after B's rejection A's negotiation = %s, %d; want %s, 2", got, n, id)
	}

	// An ID the store never kept begins a new negotiation, and a
	// rejection of it keeps nothing.
	unknown := uuid.NewString()
	reject(a, agentA, unknown, 0)
	if got, fresh, n := turn(b, agentA, unknown); got != fresh || n != 0 {
		t.Fatalf("an unknown Negotiation-ID = %s, %d; want a new one", got, n)
	}

	if !h.ClockDrivesRetention {
		return
	}
	// Idle for NegotiationIdle: forgotten. A turn just before keeps it.
	clock.Advance(store.NegotiationIdle - 1)
	if got, _, _ := turn(a, agentA, id); got != id {
		t.Fatalf("a negotiation idle for just under NegotiationIdle was forgotten")
	}
	clock.Advance(store.NegotiationIdle)
	reject(a, agentA, id, 0)
	if got, fresh, _ := turn(a, agentA, id); got != fresh {
		t.Fatalf("a negotiation idle for NegotiationIdle = %s, want a new one", got)
	}
}
