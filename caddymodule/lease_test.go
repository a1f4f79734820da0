package caddymodule

import (
	"context"
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
// REVOKE or an agent's SUSPEND answered by the other node leaves no
// node serving the contract: the presentation sent to the leasing node
// as soon as the answer arrived is refused, and nothing ran upstream;
// so is one sent after a REVOKE that found the contract revoked by
// another still waiting. It fails when an answer does not wait for the
// leases (engine afterEnding, store.LeaseFence).
func TestEndsReachEveryLease(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits := countingUpstream(t)
	const lease = 400 * time.Millisecond
	node := func(name string, pool int) *testGateway {
		return redisGateway(t, up, srv.Addr(), func(h *Handler) {
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
	for i, end := range []struct{ method, path string }{{"REVOKE", "/item/lease-revoked"}, {"SUSPEND", "/item/lease-released"}} {
		t.Run(end.method, func(t *testing.T) {
			syn := a.do(t, "LOOKUP", end.path, itemInput, "Allow-RCNS", "true")
			if syn.status != 263 {
				t.Fatalf("gate: %s", syn)
			}
			id := syn.str("synthesis_id")
			before := presents(b)
			for range 3 {
				if r := b.do(t, "LOOKUP", end.path, itemInput, "Contract-Synthesized", id); r.status != 200 {
					t.Fatalf("presentation on the other node: %s", r)
				}
			}
			if n := presents(b) - before; n != 1 {
				t.Fatalf("three presentations made %d round trips of op present, want 1 (then the lease)", n)
			}
			ran := hits.Load()
			start := time.Now()
			if r := a.endContract(t, end.method, id); r.status != 200 {
				t.Fatalf("%s: %s", end.method, r)
			}
			took := time.Since(start)
			if r := b.do(t, "LOOKUP", end.path, itemInput, "Contract-Synthesized", id); r.status == 200 || hits.Load() != ran {
				t.Fatalf("a presentation sent to the leasing node right after the %s was answered: %s (%d upstream calls)", end.method, r, hits.Load()-ran)
			}
			if took < lease {
				t.Fatalf("%s %d answered after %v, before the lease (%v) the other node took", end.method, i, took, lease)
			}
		})
	}

	// The operator page's revoke (engine.OperatorRevoke) answers after
	// the leases too, under the page's own 5 s deadline.
	t.Run("operator page", func(t *testing.T) {
		const path = "/item/lease-operator"
		syn := a.do(t, "LOOKUP", path, itemInput, "Allow-RCNS", "true")
		if syn.status != 263 {
			t.Fatalf("gate: %s", syn)
		}
		id := syn.str("synthesis_id")
		if r := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); r.status != 200 {
			t.Fatalf("presentation on the other node: %s", r)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if res, err := a.h.eng.OperatorRevoke(ctx, id, "lease test", engine.Operator{Name: "op", Access: "cidr"}); err != nil || res.Noop {
			t.Fatalf("OperatorRevoke = %+v, %v", res, err)
		}
		took := time.Since(start)
		ran := hits.Load()
		if p := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); p.status == 200 || hits.Load() != ran {
			t.Fatalf("a presentation sent to the leasing node right after the operator's revoke: %s (%d upstream calls)", p, hits.Load()-ran)
		}
		if took < lease {
			t.Fatalf("the operator's revoke returned after %v, before the lease (%v)", took, lease)
		}
	})

	// A SUSPEND by session_id that lists no live contract, because a
	// SUSPEND by synthesis_id released the session's one a moment before
	// and still waits, waits too (helper-63: it answered "released": []
	// at once, and the leasing node ran the contract after it).
	t.Run("SUSPEND session_id after a release", func(t *testing.T) {
		const path, session = "/item/lease-session", "lease-session-0123456789abc"
		syn := a.do(t, "LOOKUP", path, itemInput, "Allow-RCNS", "true", "Session-ID", session)
		if syn.status != 263 {
			t.Fatalf("gate: %s", syn)
		}
		id := syn.str("synthesis_id")
		if r := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); r.status != 200 {
			t.Fatalf("presentation on the other node: %s", r)
		}
		t.Run("by synthesis_id", func(t *testing.T) {
			t.Parallel()
			if r := a.endContract(t, "SUSPEND", id); r.status != 200 {
				t.Errorf("SUSPEND synthesis_id: %s", r)
			}
		})
		t.Run("by session_id", func(t *testing.T) {
			t.Parallel()
			for deadline := time.Now().Add(10 * time.Second); a.inspectState(t, id) != "released"; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the release was not written within 10 s")
				}
			}
			r := a.builtin(t, "SUSPEND", map[string]any{"session_id": session})
			if released, _ := r.body["result"].(map[string]any)["released"].([]any); r.status != 200 || len(released) != 0 {
				t.Fatalf("SUSPEND session_id: %s, want 200 with nothing released", r)
			}
			ran := hits.Load()
			if p := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); p.status == 200 || hits.Load() != ran {
				t.Fatalf("a presentation sent to the leasing node right after SUSPEND session_id was answered: %s (%d upstream calls)", p, hits.Load()-ran)
			}
		})
	})

	// Two REVOKEs at once: the second finds the contract revoked while
	// the first still waits for the leases, and answers noop. Its answer
	// too leaves no node serving the contract (helper-62: it answered at
	// once, and the leasing node ran the contract after it).
	t.Run("REVOKE twice", func(t *testing.T) {
		const path = "/item/lease-twice"
		syn := a.do(t, "LOOKUP", path, itemInput, "Allow-RCNS", "true")
		if syn.status != 263 {
			t.Fatalf("gate: %s", syn)
		}
		id := syn.str("synthesis_id")
		if r := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); r.status != 200 {
			t.Fatalf("presentation on the other node: %s", r)
		}
		t.Run("first", func(t *testing.T) {
			t.Parallel()
			if r := a.endContract(t, "REVOKE", id); r.status != 200 {
				t.Errorf("first REVOKE: %s", r)
			}
		})
		t.Run("second", func(t *testing.T) {
			t.Parallel()
			for deadline := time.Now().Add(10 * time.Second); a.inspectState(t, id) != "revoked"; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the first REVOKE's end was not written within 10 s")
				}
			}
			r := a.endContract(t, "REVOKE", id)
			if r.status != 200 || r.body["result"].(map[string]any)["noop"] != true {
				t.Fatalf("second REVOKE: %s, want 200 noop", r)
			}
			ran := hits.Load()
			if p := b.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", id); p.status == 200 || hits.Load() != ran {
				t.Fatalf("a presentation sent to the leasing node right after the noop REVOKE was answered: %s (%d upstream calls)", p, hits.Load()-ran)
			}
		})
	})
}
