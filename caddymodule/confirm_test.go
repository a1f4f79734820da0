package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// TestRefusedPresentationLeavesContractPending: in confirm-first mode a
// presentation refused before the plan runs (here 262, its scope
// missing) does not accept the 461 contract, which so still serves no
// (method, path) pair; a presentation that runs it does (spec §13.4).
func TestRefusedPresentationLeavesContractPending(t *testing.T) {
	up := benchUpstream(t)
	h := benchHandlerWith(t, up.URL, false, "", "", func(h *Handler) { h.Mode = engine.ModeConfirmFirst })
	serve := func(path, body string, hdr map[string]string) *discardWriter {
		t.Helper()
		w := &discardWriter{hdr: http.Header{}}
		if err := h.ServeHTTP(w, benchRequest(w, "LOOKUP", path, body, hdr), notFound); err != nil {
			t.Fatal(err)
		}
		return w
	}
	const path, one = "/item/cf-1", `{"parameters":{"item_id":"1"}}`
	if w := serve(path, one, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true", "Content-Type": "application/json"}); w.status != 461 {
		t.Fatalf("synthesis: status %d, want 461: %s", w.status, w.head)
	}
	var c *recipes.Contract
	for _, k := range h.state.MemoryStore().ContractStore().List(benchAgent) {
		if k.Path == path {
			c = k
		}
	}
	if c == nil {
		t.Fatal("no contract for " + path)
	}
	present := func(scope string) *discardWriter {
		return serve(path, one, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": scope, "Content-Type": "application/json", "Contract-Synthesized": c.SynthesisID})
	}
	plain := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json"}
	if w := present("rcns:negotiate"); w.status != policy.StatusAuthorizationRequired {
		t.Fatalf("presentation without bench:read: status %d, want 262: %s", w.status, w.head)
	}
	if st := h.state.MemoryStore().ContractStore().State(c); st != recipes.StatePending {
		t.Errorf("after a refused presentation the contract is %s, want pending", st)
	}
	if w := serve(path, one, plain); w.status != 404 {
		t.Errorf("by pair after a refused presentation: status %d, want 404 (a pending contract serves no pair): %s", w.status, w.head)
	}
	if w := present("bench:read"); w.status != 200 {
		t.Fatalf("presentation: status %d, want 200: %s", w.status, w.head)
	}
	if st := h.state.MemoryStore().ContractStore().State(c); st != recipes.StateActive {
		t.Errorf("after a presentation that ran it the contract is %s, want active", st)
	}
	if w := serve(path, one, plain); w.status != 200 {
		t.Errorf("by pair once accepted: status %d, want 200: %s", w.status, w.head)
	}
}

// serveBench sends method path with hdr through h, with the bench
// recipe's one-item envelope as the body of a LOOKUP (none otherwise),
// and returns what h answered.
func serveBench(t *testing.T, h *Handler, method, path string, hdr map[string]string) *discardWriter {
	t.Helper()
	body := ""
	if method == "LOOKUP" {
		body = `{"parameters":{"item_id":"1"}}`
	}
	w := &discardWriter{hdr: http.Header{}}
	if err := h.ServeHTTP(w, benchRequest(w, method, path, body, hdr), notFound); err != nil {
		t.Fatal(err)
	}
	return w
}

// confirmFirstHandler is a confirm-first bench handler (set further by
// opt, when not nil) over a loopback upstream serving GET /items/{id},
// and the count of the calls that upstream answered.
func confirmFirstHandler(t *testing.T, opt func(*Handler)) (*Handler, *atomic.Int32) {
	t.Helper()
	calls := new(atomic.Int32)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"1","name":"bench item","price":12.5}`)
	})
	h := benchHandlerWith(t, loopbackServer(t, mux).URL, false, "", "", func(h *Handler) {
		h.Mode = engine.ModeConfirmFirst
		if opt != nil {
			opt(h)
		}
	})
	return h, calls
}

// TestConfirmWithTheGateRequestsKey: in confirm-first mode, presenting
// the 461 contract with the Idempotency-Key of the gate request that
// minted it confirms it (spec §13.4): the contract runs under the key,
// instead of the stored 461 being replayed while the contract stayed
// pending for the whole idempotency window (fresh-user review). A
// confirmation refused before it runs leaves the preview stored; once
// one ran, every repeat with the key, by presentation or by pair,
// replays its 200, and the upstream was called once.
func TestConfirmWithTheGateRequestsKey(t *testing.T) {
	h, calls := confirmFirstHandler(t, nil)
	serve := func(hdr map[string]string) *discardWriter {
		t.Helper()
		return serveBench(t, h, "LOOKUP", "/item/cf-key", hdr)
	}
	const key = "k-gate"
	gate := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true",
		"Content-Type": "application/json", "Idempotency-Key": key}
	if w := serve(gate); w.status != 461 {
		t.Fatalf("synthesis: status %d, want 461: %s", w.status, w.head)
	}
	cs := h.state.MemoryStore().ContractStore().List(benchAgent)
	if len(cs) != 1 {
		t.Fatalf("%d contracts after the 461, want 1", len(cs))
	}
	c := cs[0]
	replayed := func(w *discardWriter) bool { return w.hdr.Get("Idempotent-Replayed") == "true" }
	if w := serve(gate); w.status != 461 || !replayed(w) || len(h.state.MemoryStore().ContractStore().List(benchAgent)) != 1 {
		t.Fatalf("gate request repeated with its key: status %d, replayed %v, %d contracts; want the stored 461 and one contract",
			w.status, replayed(w), len(h.state.MemoryStore().ContractStore().List(benchAgent)))
	}
	present := func(scope string) *discardWriter {
		return serve(map[string]string{"Agent-ID": benchAgent, "Authority-Scope": scope, "Content-Type": "application/json",
			"Contract-Synthesized": c.SynthesisID, "Idempotency-Key": key})
	}
	// Refused before the plan (its scope missing): the preview stays.
	if w := present("rcns:negotiate"); w.status != policy.StatusAuthorizationRequired {
		t.Fatalf("confirmation without bench:read: status %d, want 262: %s", w.status, w.head)
	}
	if w := serve(gate); w.status != 461 || !replayed(w) {
		t.Fatalf("gate repeat after a refused confirmation: status %d, replayed %v; want the stored 461", w.status, replayed(w))
	}
	if st := h.state.MemoryStore().ContractStore().State(c); st != recipes.StatePending {
		t.Errorf("after the refused confirmation the contract is %s, want pending", st)
	}
	w := present("bench:read")
	if w.status != 200 || replayed(w) || w.hdr.Get("Contract-Synthesized") != c.SynthesisID {
		t.Fatalf("confirmation with the gate request's key: status %d, replayed %v, contract %q; want 200 run under %s: %s",
			w.status, replayed(w), w.hdr.Get("Contract-Synthesized"), c.SynthesisID, w.head)
	}
	if st := h.state.MemoryStore().ContractStore().State(c); st != recipes.StateActive {
		t.Errorf("after the confirmation the contract is %s, want active", st)
	}
	for name, hdr := range map[string]map[string]string{
		"presentation": {"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json", "Contract-Synthesized": c.SynthesisID, "Idempotency-Key": key},
		"gate repeat":  gate,
		"by pair":      {"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json", "Idempotency-Key": key},
	} {
		if w := serve(hdr); w.status != 200 || !replayed(w) || w.hdr.Get("Contract-Synthesized") != c.SynthesisID {
			t.Errorf("%s with the key after the confirmation: status %d, replayed %v, contract %q; want its 200 replayed",
				name, w.status, replayed(w), w.hdr.Get("Contract-Synthesized"))
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("upstream called %d times, want once (by the confirmation)", n)
	}
}

// TestConfirmingKeyAcrossContracts: a key holding contract A's 461 is
// not used to run contract B (422 idempotency-key-reused, B stays
// pending), and a contract already confirmed under a new key is not run
// again by its preview's key (the preview is replayed): nothing runs
// twice whichever keys an agent mixes (second fresh-user review).
func TestConfirmingKeyAcrossContracts(t *testing.T) {
	h, calls := confirmFirstHandler(t, nil)
	serve := func(hdr map[string]string) *discardWriter {
		t.Helper()
		return serveBench(t, h, "LOOKUP", "/item/cf-mix", hdr)
	}
	gate := func(key string) string {
		t.Helper()
		before := map[string]bool{}
		for _, c := range h.state.MemoryStore().ContractStore().List(benchAgent) {
			before[c.SynthesisID] = true
		}
		w := serve(map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true",
			"Content-Type": "application/json", "Idempotency-Key": key})
		if w.status != 461 {
			t.Fatalf("gate with %s: status %d, want 461: %s", key, w.status, w.head)
		}
		for _, c := range h.state.MemoryStore().ContractStore().List(benchAgent) {
			if !before[c.SynthesisID] {
				return c.SynthesisID
			}
		}
		t.Fatalf("gate with %s minted no contract", key)
		return ""
	}
	present := func(id, key string) *discardWriter {
		return serve(map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json",
			"Contract-Synthesized": id, "Idempotency-Key": key})
	}
	a, b := gate("k-a"), gate("k-b")
	w := present(b, "k-a")
	var body struct{ Reason, Explanation string }
	_ = json.Unmarshal(w.head, &body)
	if w.status != 422 || body.Reason != "idempotency-key-reused" || !strings.Contains(body.Explanation, "holds the answer for another contract") {
		t.Fatalf("contract B under A's preview key: status %d, reason %q (%s); want 422 idempotency-key-reused", w.status, body.Reason, body.Explanation)
	}
	for _, id := range []string{a, b} {
		c, _ := h.state.MemoryStore().ContractStore().Lookup(id)
		if st := h.state.MemoryStore().ContractStore().State(c); st != recipes.StatePending {
			t.Errorf("%s is %s after the refusal, want pending", id, st)
		}
	}
	if w := present(a, "k-new"); w.status != 200 || w.hdr.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("confirmation of A with a new key: status %d, replayed %q; want 200 run", w.status, w.hdr.Get("Idempotent-Replayed"))
	}
	if w := present(a, "k-a"); w.status != 461 || w.hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("A, already confirmed, presented with its preview's key: status %d, replayed %q; want the 461 replayed, nothing run",
			w.status, w.hdr.Get("Idempotent-Replayed"))
	}
	// B confirmed without a key, then presented under A's preview key:
	// still another contract's answer, so 422 (it replayed A's 461).
	if w := serve(map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json",
		"Contract-Synthesized": b}); w.status != 200 {
		t.Fatalf("confirmation of B without a key: status %d, want 200", w.status)
	}
	if w := present(b, "k-a"); w.status != 422 {
		t.Fatalf("B, confirmed, under A's preview key: status %d, want 422: %s", w.status, w.head)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("upstream called %d times, want twice (A and B once each)", n)
	}
}

// TestRefusedConfirmationKeepsPreview: a confirmation that took its
// key's 461 over and was then refused before it ran (429, its
// invocation budget spent) gives the preview back: the gate repeat
// replays the 461, and the contract stays pending.
func TestRefusedConfirmationKeepsPreview(t *testing.T) {
	h, calls := confirmFirstHandler(t, func(h *Handler) { h.InvocationRateLimitPerMinute, h.InvocationRateLimitBurst = 1, 1 })
	do := func(method, path string, hdr map[string]string) *discardWriter {
		t.Helper()
		return serveBench(t, h, method, path, hdr)
	}
	gate := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true",
		"Content-Type": "application/json", "Idempotency-Key": "k-429"}
	if w := do("LOOKUP", "/item/cf-429", gate); w.status != 461 {
		t.Fatalf("synthesis: status %d, want 461: %s", w.status, w.head)
	}
	c := h.state.MemoryStore().ContractStore().List(benchAgent)[0]
	// The one invocation token goes to a Tier B call.
	if w := do("FETCH", "/items/1", map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"}); w.status != 200 {
		t.Fatalf("Tier B call: status %d, want 200: %s", w.status, w.head)
	}
	w := do("LOOKUP", "/item/cf-429", map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json",
		"Contract-Synthesized": c.SynthesisID, "Idempotency-Key": "k-429"})
	if w.status != 429 {
		t.Fatalf("confirmation with the budget spent: status %d, want 429: %s", w.status, w.head)
	}
	if w := do("LOOKUP", "/item/cf-429", gate); w.status != 461 || w.hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("gate repeat after the refused confirmation: status %d, replayed %q; want the stored 461", w.status, w.hdr.Get("Idempotent-Replayed"))
	}
	if st := h.state.MemoryStore().ContractStore().State(c); st != recipes.StatePending {
		t.Errorf("after the refused confirmation the contract is %s, want pending", st)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("upstream called %d times, want once (the Tier B call)", n)
	}
}
