package integration

import (
	"fmt"
	"testing"
)

// Cluster mode (issue 21, docs/cluster.md): two gateways on one Redis
// share Idempotency-Key claims and answers, rate budgets, contracts and
// their revocation, and the signature replay cache, so a request that
// lands on either node is answered as one gateway would answer it. The
// same suite runs against a single Redis, a three-master Redis Cluster
// and a Sentinel group; TestClusterSentinelFailover follows a Sentinel failover and
// cluster_store_test.go covers store_required.

// clusterBudget is the gate budget of the suite: burst 10 refilling 1
// per minute, so the test never sees a refill (policy q=10;w=600).
const (
	clusterBudget       = "\t\trate_limit rcns 1 10\n"
	clusterBudgetQ      = 10
	clusterBudgetWindow = 600
	clusterDuplicates   = 200
)

func TestClusterSingleRedis(t *testing.T) {
	_, topo := startSingleRedis(t)
	runClusterSuite(t, topo)
}

func TestClusterRedisCluster(t *testing.T) {
	_, topo := startRedisCluster(t)
	runClusterSuite(t, topo)
}

// TestClusterSentinel: the shared-state checks on a Sentinel group (issue
// 32: the two-node black-box tests on single Redis, Cluster and
// Sentinel). Its outage is TestClusterSentinelFailover's.
func TestClusterSentinel(t *testing.T) {
	_, topo := startSentinelRedis(t)
	runClusterSuite(t, topo)
}

// runClusterSuite runs every shared-state check on two nodes of topo,
// then the outage (which leaves Redis restarted empty, so it runs last;
// not on a topology that cannot be killed and restarted: Sentinel).
func runClusterSuite(t *testing.T, topo *redisTopology) {
	w := startClusterWorld(t, topo.block(), clusterOpts{Extra: clusterBudget + "\t\tmcp\n\t\tallow_persistent\n"})
	t.Run("duplicates across nodes execute once", func(t *testing.T) { clusterDuplicatesOnce(t, w) })
	t.Run("gate budget shared", func(t *testing.T) { clusterGateBudget(t, w) })
	t.Run("contract minted on A served on B", func(t *testing.T) { clusterContractAcross(t, w) })
	t.Run("REVOKE on B refused on A at once", func(t *testing.T) { clusterRevokeAcross(t, w) })
	t.Run("signature replayed on the other node", func(t *testing.T) { clusterSignatureReplay(t, topo) })
	t.Run("persistent synthesis in every node's manifest", func(t *testing.T) { clusterManifestAcross(t, w) })
	t.Run("PROPOSE negotiation continued on the other node", func(t *testing.T) { clusterNegotiationAcross(t, w) })
	if t.Failed() || topo.restart == nil {
		return
	}
	t.Run("Redis killed under load, then restarted", func(t *testing.T) { clusterOutage(t, w, topo) })
}

// clusterDuplicatesOnce: 200 concurrent duplicates of one keyed request,
// half to each node, execute once upstream; every other answer replays
// it (same status and body) or is 409 idempotency-key-in-flight, which
// ran nothing. Tier B (RESERVE) and the gate (BOOK /room, which also
// mints exactly one contract).
func clusterDuplicatesOnce(t *testing.T, w *clusterWorld) {
	for _, c := range []struct {
		name, agent, scope, method, path string
		body                             map[string]any
		kv                               []string
		status                           int
	}{
		{"RESERVE Tier B", agentA1, "hotel:book", "RESERVE", "/reservations", reserveBody("g-dup", 3), nil, 200},
		{"BOOK /room gate", agentOP, scopeAll, "BOOK", "/room", bookBody(), []string{"Allow-RCNS", "true"}, 263},
	} {
		t.Run(c.name, func(t *testing.T) {
			writes, _ := w.reservationWrites()
			reservations := len(w.JS.Reservations(t))
			contractsBefore := len(contracts(t, w.A, c.agent))
			h := hdr(c.agent, c.scope, append([]string{"Idempotency-Key", "dup-" + c.method}, c.kv...)...)
			resps := w.spread(t, clusterDuplicates, func(int) (string, string, map[string]string, any) {
				return c.method, c.path, h, c.body
			})
			var executed *Resp
			var replays []*Resp
			conflicts := 0
			for i, r := range resps {
				switch {
				case r.Status == 409:
					b := assertErrorBody(t, r, 409, "idempotency-key-in-flight")
					if b["retryable"] != true {
						t.Errorf("409 is not retryable:\n%s", r)
					}
					assertNoContractFields(t, r)
					conflicts++
				case r.Status == c.status && r.Header.Get("Idempotent-Replayed") == "true":
					replays = append(replays, r)
				case r.Status == c.status:
					if executed != nil {
						t.Fatalf("two of the duplicates executed (request %d on node %d):\n%s\n%s", i, i%2, executed, r)
					}
					executed = r
				default:
					t.Fatalf("duplicate %d (node %d): unexpected answer\n%s", i, i%2, r)
				}
			}
			if executed == nil {
				t.Fatalf("no duplicate executed (%d replays, %d conflicts)", len(replays), conflicts)
			}
			for _, r := range replays {
				assertReplay(t, executed, r)
			}
			t.Logf("%d executed, %d replayed, %d in flight (409)", 1, len(replays), conflicts)
			if n, _ := w.reservationWrites(); n != writes+1 {
				t.Errorf("reservation writes upstream %d → %d, want exactly one more", writes, n)
			}
			if n := len(w.JS.Reservations(t)); n != reservations+1 {
				t.Errorf("json-server reservations %d → %d, want exactly one more", reservations, n)
			}
			if c.status == 263 {
				for _, g := range w.Nodes {
					if n := len(contracts(t, g, c.agent)); n != contractsBefore+1 {
						t.Errorf("%s lists %d contracts of the agent, want %d (one new)", g.Addr, n, contractsBefore+1)
					}
				}
			}
			// Settled: the key replays on both nodes.
			defer w.noExecution(t)()
			for _, g := range w.Nodes {
				assertReplay(t, executed, g.Do(t, c.method, c.path, h, c.body))
			}
		})
	}
}

// clusterGateBudget: one agent's gate evaluations alternate between the
// nodes and spend one budget of 10: each answer reports what is left of
// the shared budget, and the 11th evaluation, on either node, is 429.
// Each refusal's attempt record is inspected at once on the other node
// (over the suite's door: HTTP, then native AGTP/1.0).
func clusterGateBudget(t *testing.T, w *clusterWorld) {
	for i := range clusterBudgetQ {
		r := gateNowhere(t, w.node(i), agentBudget, scopeAll)
		assert464(t, r, "composition-impossible")
		assertRateLimitHeader(t, r, "rcns", clusterBudgetQ-1-i, clusterBudgetQ, clusterBudgetWindow)
		// The refusal's attempt record (queued with the node's records,
		// off the answer path) is found at once on the other node.
		id := r.Header.Get("RCNS-Attempt-Id")
		a := builtinCall(t, w.node(i+1), "INSPECT", agentBudget, scopeAll, map[string]any{"target": "rcns-attempt", "attempt_id": id})
		wantStatus(t, a, 200)
		if b := a.Object(t); str(b, "attempt_id") != id || str(b, "reason") != "composition-impossible" {
			t.Errorf("INSPECT on the other node of the attempt %s of a 464: %v", id, b)
		}
		if t.Failed() {
			t.Fatalf("gate evaluation %d (node %d)", i+1, i%2)
		}
	}
	defer w.noExecution(t)()
	for i, g := range []*Gateway{w.node(clusterBudgetQ), w.node(clusterBudgetQ + 1)} {
		r := gateNowhere(t, g, agentBudget, scopeAll)
		assertRateLimited(t, r, "rcns", clusterBudgetQ, clusterBudgetWindow)
		if t.Failed() {
			t.Fatalf("gate evaluation %d (node %d)", clusterBudgetQ+1+i, (clusterBudgetQ+i)%2)
		}
	}
	// A synthesis beyond the budget is refused too, on both nodes.
	for _, g := range w.Nodes {
		assertRateLimited(t, w.book(t, g, agentBudget, scopeAll, "Allow-RCNS", "true"), "rcns", clusterBudgetQ, clusterBudgetWindow)
	}
	// Another agent's budget is its own.
	r := gateNowhere(t, w.B, agentA3, scopeAll)
	if r.Status == 429 {
		t.Errorf("another agent is rate-limited by agentBudget's spent budget:\n%s", r)
	}
}

// clusterContractAcross: a contract minted on A (263) is presented on B
// (Contract-Synthesized, and the Synthesis-Id alias), served there by
// pair, listed and inspected there; each run on B executes once.
func clusterContractAcross(t *testing.T, w *clusterWorld) {
	r := w.book(t, w.A, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	id, hash := str(b, "synthesis_id"), str(b, "contract_hash")
	assertContractFields(t, r, id, hash, "rcns-gate")
	writes, _ := w.reservationWrites()

	ran := func(t *testing.T, r *Resp, how string) {
		t.Helper()
		wantStatus(t, r, 200)
		assertContractFields(t, r, id, hash, "rcns-gate")
		writes++
		if n, _ := w.reservationWrites(); n != writes {
			t.Fatalf("%s on B: reservation writes %d, want %d (one per run)", how, n, writes)
		}
	}
	t.Run("presented on B", func(t *testing.T) {
		ran(t, w.book(t, w.B, agentA1, scopeAll, "Contract-Synthesized", id), "presentation")
	})
	t.Run("Synthesis-Id alias on B", func(t *testing.T) {
		ran(t, w.book(t, w.B, agentA1, scopeAll, "Synthesis-Id", id), "Synthesis-Id")
	})
	t.Run("by pair on B", func(t *testing.T) {
		ran(t, w.book(t, w.B, agentA1, scopeAll), "Tier C by pair")
	})
	t.Run("keyed presentation on B replays on A", func(t *testing.T) {
		first := w.book(t, w.B, agentA1, scopeAll, "Contract-Synthesized", id, "Idempotency-Key", "present-across")
		ran(t, first, "keyed presentation")
		defer w.noExecution(t)()
		assertReplay(t, first, w.book(t, w.A, agentA1, scopeAll, "Contract-Synthesized", id, "Idempotency-Key", "present-across"))
	})
	t.Run("listed and inspected on B", func(t *testing.T) {
		if cs := contracts(t, w.B, agentA1); !hasContract(cs, id) {
			t.Errorf("DISCOVER /contracts on B lacks %s: %v", id, contractIDs(cs))
		}
		ins := inspectContract(t, w.B, agentA1, scopeAll, id)
		wantStatus(t, ins, 200)
		if !findString(ins.Object(t), id) {
			t.Errorf("INSPECT on B does not name %s:\n%s", id, ins)
		}
	})
	t.Run("each node names itself in its records", func(t *testing.T) {
		for i, g := range w.Nodes {
			r := w.book(t, g, agentA1, scopeAll, "Contract-Synthesized", id)
			ran(t, r, "presentation")
			if got := str(attribution(t, r), "node_id"); got != clusterNodeNames[i] {
				t.Errorf("%s: Attribution-Record node_id %q, want %q", g.Addr, got, clusterNodeNames[i])
			}
		}
	})
	t.Run("another agent on B", func(t *testing.T) {
		defer w.noExecution(t)()
		assert464(t, w.book(t, w.B, agentA3, scopeAll, "Contract-Synthesized", id), "contract-not-yours")
	})
}

// clusterRevokeAcross: a contract minted on A and run on both nodes (so
// each has met it and holds a lease on it: docs/cluster.md
// "Presentation leases") is revoked on B; A refuses it on the very next
// request, by presentation (464 contract-revoked, over the test's door
// and the MCP door) and by pair (404), and executes nothing.
func clusterRevokeAcross(t *testing.T, w *clusterWorld) {
	r := w.book(t, w.A, agentRevoke, scopeAll, "Allow-RCNS", "true")
	id := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	for _, g := range w.Nodes {
		wantStatus(t, w.book(t, g, agentRevoke, scopeAll, "Contract-Synthesized", id), 200)
		wantStatus(t, w.book(t, g, agentRevoke, scopeAll), 200)
	}
	// The MCP door presents it too: connected before the REVOKE, so that
	// its call comes within the lease A took (docs/cluster.md
	// "Presentation leases": the REVOKE answers after every lease).
	mc := mcpConnect(t, w.A, "/mcp", agentRevoke, scopeAll)
	args := bookArgs()
	args["synthesis_id"] = id
	mc.call(t, "book-room", args, nil).wantSuccess(t, 200)
	wantStatus(t, w.book(t, w.A, agentRevoke, scopeAll, "Contract-Synthesized", id), 200) // A's lease, fresh
	wantStatus(t, revokeContract(t, w.B, agentRevoke, scopeAll, id), 200)
	defer w.noExecution(t)()
	mc.call(t, "book-room", args, nil).wantError(t, "contract-revoked", 464, false)
	assert464(t, w.book(t, w.A, agentRevoke, scopeAll, "Contract-Synthesized", id), "contract-revoked")
	assertErrorBody(t, w.book(t, w.A, agentRevoke, scopeAll), 404, "")
	assert464(t, w.book(t, w.B, agentRevoke, scopeAll, "Contract-Synthesized", id), "contract-revoked")
	if cs := contracts(t, w.A, agentRevoke); hasContract(cs, id) {
		t.Errorf("A still lists the revoked contract: %v", contractIDs(cs))
	}
	// A keyed presentation of it is refused on A too, and stores nothing.
	assert464(t, w.book(t, w.A, agentRevoke, scopeAll, "Contract-Synthesized", id, "Idempotency-Key", "after-revoke"), "contract-revoked")
}

// guestKey is the guest_id of load request i: it names the request's
// Idempotency-Key, so upstream writes can be counted per key.
func guestKey(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }
