package caddymodule

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddyserver/caddy/v2"
)

// TestEndsReachEveryLease: two nodes on one Redis, each with its own
// client. A node serves an agent's unkeyed presentations of its active
// contract from a lease (docs/cluster.md "Presentation leases"); a
// REVOKE, an agent's SUSPEND or the operator page's revoke answered by
// the other node leaves no node serving the contract: the presentation
// sent to the leasing node as soon as the answer arrived is refused,
// and nothing ran upstream;
// so is one sent after a REVOKE, a SUSPEND by session_id or an
// operator's stale sweep that found nothing to end because another
// request, still waiting, had ended it. It fails when an answer does
// not wait for the leases (engine afterEnding, store.LeaseFence).
func TestEndsReachEveryLease(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits := countingUpstream(t)
	const lease = 400 * time.Millisecond
	node := func(name string, pool int) *testGateway {
		return redisGateway(t, up, srv.Addr(), withOperator(t), func(h *Handler) {
			h.NodeID, h.Name, h.Redis.PoolSize = name, name, pool
			h.Redis.ContractLease = caddy.Duration(lease)
		})
	}
	a, b := node("lease-a", 3), node("lease-b", 4)
	if a.h.redis == b.h.redis {
		t.Fatal("the two nodes share one Redis client: not two nodes")
	}
	presents := func(g *testGateway) uint64 {
		return uint64(metricValue(t, g.h, "caddy_rcns_store_round_trip_duration_seconds", "op", string(store.OpPresent)))
	}
	// leased synthesizes a contract for path on a (kv: more headers)
	// and presents it on b, which takes a lease on it; its id.
	leased := func(t *testing.T, path string, kv ...string) string {
		t.Helper()
		syn := a.do(t, "LOOKUP", path, itemInput, append([]string{"Allow-RCNS", "true"}, kv...)...)
		if syn.status != 263 {
			t.Fatalf("gate: %s", syn)
		}
		id := syn.str("synthesis_id")
		if r := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); r.status != 200 {
			t.Fatalf("presentation on the other node: %s", r)
		}
		return id
	}
	// refusedOnB wants the presentation of id sent to b right after
	// what answered refused, with nothing run upstream.
	refusedOnB := func(t *testing.T, path, id, what string) {
		t.Helper()
		ran := hits.Load()
		if r := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); r.status == 200 || hits.Load() != ran {
			t.Fatalf("a presentation sent to the leasing node right after %s was answered: %s (%d upstream calls)", what, r, hits.Load()-ran)
		}
	}
	// awaitState waits until a reads id in state (written by a request
	// still waiting for its fence).
	awaitState := func(t *testing.T, id, state string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); a.inspectState(t, id) != state; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("contract %s not %s within 10 s", id, state)
			}
		}
	}
	// ends are the requests that end a live contract, each with how it
	// is sent to a.
	ends := []struct {
		name string
		end  func(t *testing.T, id string)
	}{
		{"REVOKE", func(t *testing.T, id string) {
			if r := a.endContract(t, "REVOKE", id); r.status != 200 {
				t.Fatalf("REVOKE: %s", r)
			}
		}},
		{"SUSPEND", func(t *testing.T, id string) {
			if r := a.endContract(t, "SUSPEND", id); r.status != 200 {
				t.Fatalf("SUSPEND: %s", r)
			}
		}},
		// The operator page's revoke, under the page's own 5 s deadline.
		{"operator page", func(t *testing.T, id string) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if res, err := a.h.eng.OperatorRevoke(ctx, id, "lease test", engine.Operator{Name: "op", Access: "cidr"}); err != nil || res.Noop {
				t.Fatalf("OperatorRevoke = %+v, %v", res, err)
			}
		}},
	}
	for i, e := range ends {
		t.Run(e.name, func(t *testing.T) {
			path := "/item/lease-end-" + strconv.Itoa(i)
			id := leased(t, path)
			before := presents(b)
			for range 2 {
				if r := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); r.status != 200 {
					t.Fatalf("presentation on the other node: %s", r)
				}
			}
			if n := presents(b) - before; n != 0 {
				t.Fatalf("two presentations within the lease made %d round trips of op present, want 0", n)
			}
			start := time.Now()
			e.end(t, id)
			took := time.Since(start)
			refusedOnB(t, path, id, e.name)
			if took < lease {
				t.Fatalf("%s answered after %v, before the lease (%v) the other node took", e.name, took, lease)
			}
		})
	}

	// A node whose contract_lease is off (a reload rolling across the
	// nodes) answers its REVOKE after the lease b took (helper-65).
	off := redisGateway(t, up, srv.Addr(), func(h *Handler) {
		h.NodeID, h.Name, h.Redis.PoolSize = "lease-off", "lease-off", 2
		h.Redis.ContractLease = -1
	})
	t.Run("REVOKE on a node with leases off", func(t *testing.T) {
		path := "/item/lease-off"
		id := leased(t, path)
		start := time.Now()
		if r := off.endContract(t, "REVOKE", id); r.status != 200 {
			t.Fatalf("REVOKE: %s", r)
		}
		took := time.Since(start)
		refusedOnB(t, path, id, "the REVOKE on the node with leases off")
		if took < lease {
			t.Fatalf("REVOKE on the node with leases off answered after %v, before the lease (%v) the other node took", took, lease)
		}
	})

	// A second request that ends nothing, because the first one ended
	// the contract a moment before and still waits, waits too: a REVOKE
	// that finds it revoked answers noop (helper-62), a SUSPEND by
	// session_id lists nothing to release (helper-63), nor does an
	// operator's stale sweep. Each answered at once, and the leasing
	// node ran the contract after it.
	for i, tc := range []struct {
		name, first, state string
		second             func(t *testing.T, id string)
	}{
		{"REVOKE twice", "REVOKE", "revoked", func(t *testing.T, id string) {
			if r := a.endContract(t, "REVOKE", id); r.status != 200 || r.body["result"].(map[string]any)["noop"] != true {
				t.Fatalf("second REVOKE: %s, want 200 noop", r)
			}
		}},
		{"SUSPEND session_id after a release", "SUSPEND", "released", func(t *testing.T, _ string) {
			r := a.builtin(t, "SUSPEND", map[string]any{"session_id": leaseSession})
			if released, _ := r.body["result"].(map[string]any)["released"].([]any); r.status != 200 || len(released) != 0 {
				t.Fatalf("SUSPEND session_id: %s, want 200 with nothing released", r)
			}
		}},
		// On a node with leases off, which cannot read the lease of a
		// contract it does not list (helper-67).
		{"SUSPEND session_id on a node with leases off after a release", "SUSPEND", "released", func(t *testing.T, _ string) {
			r := off.builtin(t, "SUSPEND", map[string]any{"session_id": leaseSession})
			if released, _ := r.body["result"].(map[string]any)["released"].([]any); r.status != 200 || len(released) != 0 {
				t.Fatalf("SUSPEND session_id: %s, want 200 with nothing released", r)
			}
		}},
		{"stale sweep after a release", "SUSPEND", "released", func(t *testing.T, id string) {
			r := a.do(t, "REVOKE", "/", map[string]any{"parameters": map[string]any{"target": "stale-contracts", "mode": "invalidate"}},
				"Agent-ID", operatorAgent, "Authority-Scope", "inspect:all")
			contracts, _ := r.body["contracts"].([]any)
			for _, c := range contracts {
				if c.(map[string]any)["synthesis_id"] == id {
					t.Fatalf("the stale sweep listed the released contract: %s", r)
				}
			}
			if r.status != 200 {
				t.Fatalf("REVOKE target=stale-contracts: %s", r)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/item/lease-race-" + strconv.Itoa(i)
			id := leased(t, path, "Session-ID", leaseSession)
			t.Run("first", func(t *testing.T) {
				t.Parallel()
				if r := a.endContract(t, tc.first, id); r.status != 200 {
					t.Errorf("first %s: %s", tc.first, r)
				}
			})
			t.Run("second", func(t *testing.T) {
				t.Parallel()
				awaitState(t, id, tc.state)
				tc.second(t, id)
				refusedOnB(t, path, id, "the second request")
			})
		})
	}
}

// leaseSession is the Session-ID of TestEndsReachEveryLease's contracts.
const leaseSession = "lease-session-0123456789abc"
