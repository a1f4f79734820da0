package integration

import (
	"testing"
)

// Independent steps run concurrently: the barrier upstream answers only
// when all three requests are in flight at once (ARCHITECTURE.md
// "Composition").
func TestCompositionFanOut(t *testing.T) {
	w := startLab(t, "optimistic", "")

	r := w.GW.Do(t, "AGGREGATE", "/shards", hdr(agentA1, "rcns:negotiate, hotel:read", "Allow-RCNS", "true"),
		map[string]any{"parameters": map[string]any{}})
	b := assertContractBody(t, r, 263, "AGGREGATE", "/shards", "fan-out", "1")
	for _, s := range []string{"a", "b", "c"} {
		if field(b, "result", s, "ok") != true || str(b, "result", s, "path") != "/"+s {
			t.Errorf("result.%s = %v", s, field(b, "result", s))
		}
	}
	if w.Barrier.Count() != 3 || w.Barrier.Timeouts() != 0 {
		t.Errorf("barrier saw %d requests, %d timed out; want 3 and 0", w.Barrier.Count(), w.Barrier.Timeouts())
	}
}

// The same plan called as the MCP door's recipe tool: its steps, on
// the door's reused goroutines (internal/workers) as the call itself
// is, are in flight at once too.
func TestCompositionFanOutMCP(t *testing.T) {
	w := startLab(t, "optimistic", "\t\tmcp")
	c := mcpConnect(t, w.GW, "/mcp", agentA1, "rcns:negotiate, hotel:read")
	r := c.call(t, "fan-out", map[string]any{}, nil)
	res := r.wantSuccess(t, 263)
	for _, s := range []string{"a", "b", "c"} {
		if field(res, s, "ok") != true || str(res, s, "path") != "/"+s {
			t.Errorf("result.%s = %v", s, field(res, s))
		}
	}
	if w.Barrier.Count() != 3 || w.Barrier.Timeouts() != 0 {
		t.Errorf("barrier saw %d requests, %d timed out; want 3 and 0", w.Barrier.Count(), w.Barrier.Timeouts())
	}
}

// A failing step: 422 composition_failed naming the failed step, its
// method, the underlying error and the outputs captured so far; later
// steps never start (§24 item 81; RCNS §7.3, §13.4).
func TestCompositionFailure(t *testing.T) {
	w := startLab(t, "optimistic", "")

	r := w.GW.Do(t, "COMPILE", "/slow-chain", hdr(agentA1, "rcns:negotiate, hotel:read", "Allow-RCNS", "true"),
		map[string]any{"parameters": map[string]any{}})
	b := assertNamedError(t, r, "composition_failed")
	// OP-18: the contract exists even though its first run failed.
	if r.Header.Get("Contract-Synthesized") == "" {
		t.Errorf("optimistic failure lacks Contract-Synthesized:\n%s", r)
	}
	// The 422 alone says which contract the agent holds and its state
	// (cases/03); INSPECT agrees.
	if str(b, "synthesis_id") != r.Header.Get("Contract-Synthesized") || str(b, "contract_state") != "active" {
		t.Errorf("composition_failed body does not name the contract kept and its state:\n%s", r)
	}
	if in := inspectContract(t, w.GW, agentA1, "rcns:negotiate, hotel:read", str(b, "synthesis_id")); str(in.JSON(), "state") != "active" {
		t.Errorf("INSPECT of the contract kept after the failed run:\n%s", in)
	}
	details := field(b, "error", "details")
	if details == nil {
		t.Fatalf("composition_failed without error.details:\n%s", r)
	}
	for what, want := range map[string]string{
		"the failed step's name":          "slow",
		"the failed step's method":        "FETCH",
		"the underlying error":            "upstream_timeout",
		"the captured output of mark":     "captured-before-timeout",
		"the state of the step not begun": "not-started",
		"the state of the failed step":    "failed",
		"the state of the finished step":  "succeeded",
	} {
		if !findString(details, want) {
			t.Errorf("error.details does not carry %s (%q):\n%s", what, want, mustJSON(t, details))
		}
	}
	if n := w.Counter.Count(); n != 0 {
		t.Errorf("the step after the failure started: counter saw %d requests %+v", n, w.Counter.Requests())
	}
}

// §24 item 79: a plan longer than max_synthesis_depth is never synthesized.
func TestMaxSynthesisDepth(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", Extra: "\t\tmax_synthesis_depth 2\n", LegacyCounter: true})

	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	assert464(t, r, "composition-impossible")
	if n := w.Hotel.Count(); n != 0 {
		t.Errorf("depth refusal made %d hotel upstream calls", n)
	}
	w.assertReservations(t, 0)
	if cs := contracts(t, w.GW, agentA1); len(cs) != 0 {
		t.Errorf("depth refusal created contracts: %v", cs)
	}
}

// §24 item 80: authority preservation. The caller holds rcns:negotiate
// but not a step's scope: refused before any upstream call.
func TestAuthorityPreservation(t *testing.T) {
	w := startLab(t, "optimistic", "")

	// vault:read is granted to no demo agent: 455 scope-exceeded.
	t.Run("step scope not granted 455", func(t *testing.T) {
		r := w.GW.Do(t, "EXAMINE", "/vault", hdr(agentA1, "rcns:negotiate, hotel:read", "Allow-RCNS", "true"),
			map[string]any{"parameters": map[string]any{}})
		assertErrorBody(t, r, 455, "scope-exceeded")
		if n := w.Counter.Count(); n != 0 {
			t.Errorf("refused synthesis called the counter upstream %d times", n)
		}
	})

	// hotel:read is granted but not claimed: 262 scope-required, and the
	// hotel API is not called.
	t.Run("step scope granted but not claimed 262", func(t *testing.T) {
		r := w.GW.Do(t, "BOOK", "/room", hdr(agentA1, "rcns:negotiate, hotel:book", "Allow-RCNS", "true"), bookBody())
		b := assertErrorBody(t, r, 262, "")
		if str(b, "type") != "scope-required" && str(b, "reason") != "scope-required" {
			t.Errorf("262 does not name scope-required:\n%s", r)
		}
		if n := w.Hotel.Count(); n != 0 {
			t.Errorf("refused synthesis made %d hotel upstream calls", n)
		}
		if rs := w.JS.Reservations(t); len(rs) != 0 {
			t.Errorf("refused synthesis booked %v", rs)
		}
	})

	if cs := contracts(t, w.GW, agentA1); len(cs) != 0 {
		t.Errorf("refused syntheses created contracts: %v", cs)
	}
}
