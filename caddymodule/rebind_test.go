package caddymodule

import (
	"fmt"
	"slices"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestContractUpstreamRebound (cases/06): a contract captures its
// recipe, not the infrastructure. Presented after a reload, it calls the
// address the running configuration gives its upstream; after a reload
// that removes the upstream, it is refused 464 composition-impossible
// naming it (nothing runs), and the stale sweep lists it. On the memory
// store (which keeps the contract object across reloads) and on Redis
// (which restores it through the configuration's Restorer) alike.
func TestContractUpstreamRebound(t *testing.T) {
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) func(*Handler)
	}{
		{"memory", func(*testing.T) func(*Handler) { return func(*Handler) {} }},
		{"redis", func(t *testing.T) func(*Handler) {
			addr := redistest.StartServer(t).Addr()
			return func(h *Handler) {
				h.Store = StoreRedis
				h.Redis = &RedisConfig{Addresses: []string{addr}, KeyPrefix: "t:"}
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.store(t)
			oldUp, oldHits := countingUpstream(t)
			newUp, newHits := countingUpstream(t)
			first := &testGateway{h: benchHandlerWith(t, oldUp, false, "", "", st, withOperator(t))}
			syn := first.do(t, "LOOKUP", "/item/r1", itemInput, "Allow-RCNS", "true")
			id := syn.str("synthesis_id")
			if syn.status != 263 || id == "" || oldHits.Load() != 1 {
				t.Fatalf("gate synthesis on the first configuration: %s (%d calls)", syn, oldHits.Load())
			}
			hash := syn.str("contract_hash")

			// The reload corrects the upstream's address: the same
			// contract, presented or by pair, calls the new one.
			second := &testGateway{h: benchHandlerWith(t, newUp, false, "", "", st, withOperator(t))}
			if err := first.h.Cleanup(); err != nil {
				t.Fatal(err)
			}
			a := second.do(t, "LOOKUP", "/item/r1", itemInput, "Contract-Synthesized", id)
			if a.status != 200 || a.hdr("Contract-Synthesized") != id || newHits.Load() != 1 || oldHits.Load() != 1 {
				t.Fatalf("presented after the reload: %s (old upstream %d calls, new %d); want 200 from the new one", a, oldHits.Load(), newHits.Load())
			}
			if a := second.do(t, "LOOKUP", "/item/r1", itemInput); a.status != 200 || newHits.Load() != 2 {
				t.Fatalf("by pair after the reload: %s (new upstream %d calls)", a, newHits.Load())
			}
			insp := second.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": id})
			if got := fmt.Sprint(insp.body["contract_hash"]); insp.status != 200 || got != hash {
				t.Fatalf("INSPECT after the reload: %s; want contract_hash %s unchanged", insp, hash)
			}
			sweep := second.do(t, "REVOKE", "/", map[string]any{"parameters": map[string]any{"target": "stale-contracts", "mode": "grandfather"}},
				"Agent-ID", operatorAgent, "Authority-Scope", "inspect:all")
			if e := sweepEntry(t, sweep, id); e["disposition"] != "unchanged" || e["missing_upstreams"] != nil {
				t.Fatalf("sweep after the corrected address: %v", e)
			}

			// The reload removes the upstream (its endpoints and recipes
			// with it): the contract is refused naming it, nothing runs.
			empty := t.TempDir()
			third := &testGateway{h: benchHandlerWith(t, newUp, false, "", "", st, withOperator(t), func(h *Handler) {
				h.Upstreams = map[string]*engine.UpstreamConfig{"elsewhere": {URL: newUp}}
				h.Endpoints, h.Recipes = []string{empty}, []string{empty}
			})}
			if err := second.h.Cleanup(); err != nil {
				t.Fatal(err)
			}
			// Presented, and by pair (the agent's live contract still
			// resolves its pair with the recipe gone).
			for _, kv := range [][]string{{"Contract-Synthesized", id}, nil} {
				a := third.do(t, "LOOKUP", "/item/r1", itemInput, kv...)
				wantError(t, a, 464, "composition-impossible", "upstream bench")
				if ups, _ := a.body["missing_upstreams"].([]any); len(ups) != 1 || ups[0] != "bench" || a.hdr("RCNS-Attempt-Id") == "" {
					t.Fatalf("refusal without missing_upstreams [bench] or RCNS-Attempt-Id: %v %s", a.header, a)
				}
			}
			if newHits.Load() != 2 {
				t.Fatalf("the removed upstream was called: %d calls", newHits.Load())
			}
			sweep = third.do(t, "REVOKE", "/", map[string]any{"parameters": map[string]any{"target": "stale-contracts", "mode": "grandfather"}},
				"Agent-ID", operatorAgent, "Authority-Scope", "inspect:all")
			e := sweepEntry(t, sweep, id)
			ups, _ := e["missing_upstreams"].([]any)
			if e["disposition"] != "grandfathered" || !slices.Equal(ups, []any{"bench"}) {
				t.Fatalf("sweep without the upstream: %v; want grandfathered, missing_upstreams [bench]", e)
			}
			sweep = third.do(t, "REVOKE", "/", map[string]any{"parameters": map[string]any{"target": "stale-contracts", "mode": "invalidate"}},
				"Agent-ID", operatorAgent, "Authority-Scope", "inspect:all")
			if e := sweepEntry(t, sweep, id); e["disposition"] != "evicted" {
				t.Fatalf("invalidate sweep without the upstream: %v", e)
			}
		})
	}
}

// sweepEntry returns the stale sweep's entry for contract id.
func sweepEntry(t *testing.T, a *answer, id string) map[string]any {
	t.Helper()
	list, _ := a.body["contracts"].([]any)
	for _, e := range list {
		if m, _ := e.(map[string]any); m["synthesis_id"] == id {
			return m
		}
	}
	t.Fatalf("stale sweep does not list %s: %s", id, a)
	return nil
}
