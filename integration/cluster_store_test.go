package integration

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// Sentinel failover and store_required.

// TestClusterSentinelFailover: two nodes on a Sentinel group (a master,
// a replica, three sentinels). The master is killed under keyed load;
// the sentinels promote the replica and both nodes follow it by
// themselves: what was replicated before the kill (a contract minted on
// A, a keyed answer) is still there, no key runs twice, and the answers
// meanwhile are 503 store-unavailable.
func TestClusterSentinelFailover(t *testing.T) {
	g := redistest.StartSentinel(t)
	w := startClusterWorld(t, storeBlock(sentinelLines(g), ""), clusterOpts{Extra: clusterBudget})

	keyed := hdr(agentA1, "hotel:book", "Idempotency-Key", "before-failover")
	first := w.A.Do(t, "RESERVE", "/reservations", keyed, reserveBody("before-failover", 2))
	wantStatus(t, first, 200)
	assertReplay(t, first, w.B.Do(t, "RESERVE", "/reservations", keyed, reserveBody("before-failover", 2)))
	r := w.book(t, w.A, agentRevoke, scopeAll, "Allow-RCNS", "true")
	id := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	wantStatus(t, w.book(t, w.B, agentRevoke, scopeAll, "Contract-Synthesized", id), 200)

	// What was written so far is on the replica before the load starts
	// (replication is asynchronous: a write the master acknowledged in
	// its last moments may be lost, docs/cluster.md).
	waitFor(t, 10*time.Second, 100*time.Millisecond, "the replica to catch up with the master", func() bool {
		m, err1 := redistest.Do(g.Master.Addr(), "INFO", "replication")
		r, err2 := redistest.Do(g.Replica.Addr(), "INFO", "replication")
		mo, ro := infoField(m, "master_repl_offset"), infoField(r, "slave_repl_offset")
		return err1 == nil && err2 == nil && mo != "" && mo == ro
	})
	var down atomic.Bool
	load := startKeyedLoad(w, "failover", &down)
	waitFor(t, outageLoadLimit, 20*time.Millisecond, "keyed answers before the failover", func() bool {
		ok, _ := load.counts()
		return ok >= outageBeforeKill
	})
	down.Store(true)
	g.Master.Stop()
	waitFor(t, storeRecovery, 100*time.Millisecond, "the sentinels to promote the replica", func() bool {
		addr, err := g.MasterAddr()
		return err == nil && addr == g.Replica.Addr()
	})
	// The nodes follow the new master: an unkeyed gate synthesis on
	// each (a fresh agent's budget and a new contract).
	for i, node := range w.Nodes {
		agent := []string{agentRecover, agentBudget}[i]
		waitFor(t, storeRecovery, 200*time.Millisecond, node.Addr+" to serve state on the promoted replica", func() bool {
			r := w.book(t, node, agent, scopeAll, "Allow-RCNS", "true")
			if r.Status != 263 && !isStoreUnavailable(r) {
				t.Fatalf("gate synthesis during the failover: want 263 or 503 store-unavailable:\n%s", r)
			}
			return r.Status == 263
		})
	}
	answers := load.finish(t)
	checkKeyedAnswers(t, w, answers)

	t.Run("replicated state survives", func(t *testing.T) {
		for _, node := range w.Nodes {
			wantStatus(t, w.book(t, node, agentRevoke, scopeAll, "Contract-Synthesized", id), 200)
		}
		// The key that ran before the failover does not run again: its
		// answer replays, or, while the client's restart quarantine
		// lasts (the promoted replica started less than the in-flight
		// hold ago, as in a test), its claim is refused.
		for _, node := range w.Nodes {
			r := node.Do(t, "RESERVE", "/reservations", keyed, reserveBody("before-failover", 2))
			switch {
			case r.Status == 200:
				assertReplay(t, first, r)
			case !isStoreUnavailable(r):
				t.Errorf("repeat of the key that ran before the failover on %s: want a replay or 503 store-unavailable:\n%s", node.Addr, r)
			}
		}
		if _, writes := w.reservationWrites(); writes["before-failover"] != 1 {
			t.Errorf("the key that ran before the failover has %d upstream writes, want 1", writes["before-failover"])
		}
	})
	t.Run("revocation on the new master", func(t *testing.T) {
		wantStatus(t, revokeContract(t, w.B, agentRevoke, scopeAll, id), 200)
		defer w.noExecution(t)()
		assert464(t, w.book(t, w.A, agentRevoke, scopeAll, "Contract-Synthesized", id), "contract-revoked")
	})
}

// TestClusterStoreRequiredOff: with store_required off and Redis down,
// Caddy starts degraded (and says so), answers 503 store-unavailable to
// what needs state while pass-through and the manifest work, and serves
// state by itself once Redis starts.
func TestClusterStoreRequiredOff(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	keepPort(srv)
	srv.Stop()
	w := startClusterWorld(t, storeBlock("address "+srv.Addr(), ""), clusterOpts{Extra: clusterBudget, Required: "off"})
	waitFor(t, 5*time.Second, 50*time.Millisecond, "the degraded-start warning", func() bool {
		return strings.Contains(w.A.Output(), "store_required off")
	})
	func() {
		defer w.noExecution(t)()
		for _, g := range w.Nodes {
			assertStoreUnavailable(t, g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "down-1"), reserveBody("down-1", 1)))
			assertStoreUnavailable(t, w.book(t, g, agentA1, scopeAll, "Allow-RCNS", "true"))
			wantStatus(t, g.Do(t, "DISCOVER", "/", nil, nil), 200)
			if status, _, _ := plainRequest(t, "GET", g.URL+"/guests/g-1", nil, nil); status != 200 {
				t.Errorf("pass-through GET on %s with Redis down: %d", g.Addr, status)
			}
		}
	}()

	srv.Restart()
	for _, g := range w.Nodes {
		var r *Resp
		waitFor(t, storeRecovery, 200*time.Millisecond, g.Addr+" to serve keyed requests once Redis answers", func() bool {
			r = g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "up-"+g.Addr), reserveBody("up", 1))
			if r.Status != 200 && !isStoreUnavailable(r) {
				t.Fatalf("keyed RESERVE after Redis started: want 200 or 503 store-unavailable:\n%s", r)
			}
			return r.Status == 200
		})
		assertExecuted(t, r)
		assertReplay(t, r, w.other(g).Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "up-"+g.Addr), reserveBody("up", 1)))
	}
	if _, writes := w.reservationWrites(); writes["up"] != 2 || writes["down-1"] != 0 {
		t.Errorf("upstream writes %v, want two for the keys sent once Redis answered and none while it was down", writes)
	}
	r := w.book(t, w.A, agentA1, scopeAll, "Allow-RCNS", "true")
	id := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	wantStatus(t, w.book(t, w.B, agentA1, scopeAll, "Contract-Synthesized", id), 200)
}

// TestClusterStoreRequiredOn: with store_required on (the default) and
// Redis down, the config load fails, naming the store and its address,
// and `caddy run` exits; `caddy validate` fails the same way.
func TestClusterStoreRequiredOn(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t)) // nothing listens there
	js := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	for _, required := range []string{"", "on"} {
		t.Run("store_required "+map[string]string{"": "unset", "on": "on"}[required], func(t *testing.T) {
			extra := storeBlock("address "+addr, "") + "\t\tnode_id node-a\n"
			if required != "" {
				extra += "\t\tstore_required " + required + "\n"
			}
			site := fill(idvSite, "IDENTITY", "header", "MODE", "optimistic", "HOTEL", js,
				"AGENTS", "examples/hotel/agents", "EXTRA", extra, "LEGACY", js)
			check := func(what, out string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s succeeded with Redis down at %s:\n%s", what, addr, out)
				}
				for _, want := range []string{"store redis", addr} {
					if !strings.Contains(out, want) {
						t.Errorf("%s error does not name %q:\n%s", what, want, out)
					}
				}
			}
			out, err := caddyValidate(t, site)
			check("caddy validate", out, err)

			text, _, _ := renderCaddyfile(t, site)
			b, err := caddyRunExit(t, text)
			check("caddy run", b, err)
		})
	}
}

// infoField reads name's value from an INFO reply (name:value lines).
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// TestClusterRedisRestartKeepsState: Redis with the append-only file
// (as docker/compose.yaml runs it) restarted between two requests keeps
// the state: a contract minted on A before the restart is served on B
// after it, a revocation before it still holds, and a key that ran
// before it does not run again (its answer replays, or its claim is
// refused while the restart quarantine lasts).
func TestClusterRedisRestartKeepsState(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction", "--appendonly", "yes", "--appendfsync", "always")
	keepPort(srv)
	w := startClusterWorld(t, storeBlock("address "+srv.Addr(), ""), clusterOpts{Extra: livenessExtra})
	keyed := hdr(agentA1, "hotel:book", "Idempotency-Key", "before-restart")
	first := w.A.Do(t, "RESERVE", "/reservations", keyed, reserveBody("before-restart", 1))
	wantStatus(t, first, 200)
	r := w.book(t, w.A, agentRecover, scopeAll, "Allow-RCNS", "true")
	id := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	r = w.book(t, w.A, agentRevoke, scopeAll, "Allow-RCNS", "true")
	revoked := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	wantStatus(t, revokeContract(t, w.B, agentRevoke, scopeAll, revoked), 200)

	srv.Restart()
	restarted := time.Now()
	waitFor(t, storeRecovery, 200*time.Millisecond, "B to serve the contract minted before the restart", func() bool {
		p := w.book(t, w.B, agentRecover, scopeAll, "Contract-Synthesized", id)
		if p.Status != 200 && !isStoreUnavailable(p) {
			t.Fatalf("presentation after the restart: want 200 (the contract survived) or 503 store-unavailable:\n%s", p)
		}
		return p.Status == 200
	})
	defer w.noExecution(t)()
	for _, g := range w.Nodes {
		assert464(t, w.book(t, g, agentRevoke, scopeAll, "Contract-Synthesized", revoked), "contract-revoked")
		r := g.Do(t, "RESERVE", "/reservations", keyed, reserveBody("before-restart", 1))
		switch {
		case r.Status == 200:
			assertReplay(t, first, r)
		case !isStoreUnavailable(r):
			t.Errorf("repeat of the key that ran before the restart on %s: want a replay or 503 store-unavailable:\n%s", g.Addr, r)
		default:
			// The quarantine's answer says how long it lasts and why,
			// not the one second of an unreachable store: at most the
			// longest lease (RESERVE's 10 s timeout + the 2 s margin).
			if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 1 || ra > 12 || !strings.Contains(str(r.JSON(), "explanation"), "Redis restarted") {
				t.Errorf("%s: the quarantine's 503 has Retry-After %q and explanation %q; want the time left (at most 12 s) and why",
					g.Addr, r.Header.Get("Retry-After"), str(r.JSON(), "explanation"))
			}
		}
	}
	// Keyed requests are served again within the longest lease the
	// configuration gives (12 s), not an hour.
	waitFor(t, 12*time.Second+5*time.Second-time.Since(restarted), 200*time.Millisecond, "keyed requests served after the restart quarantine", func() bool {
		r := w.B.Do(t, "RESERVE", "/reservations", keyed, reserveBody("before-restart", 1))
		if r.Status == 200 {
			assertReplay(t, first, r)
			return true
		}
		return false
	})
}

// TestClusterNodeIDConflict: two Caddy processes given one node_id on one
// Redis both learn it from their health checks (every 5 s): each logs
// the WARN and exports caddy_rcns_store_node_id_conflict 1, which
// RCNSNodeIDConflict alerts on. Both still serve.
func TestClusterNodeIDConflict(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	w := startClusterWorld(t, storeBlock("address "+srv.Addr(), ""), clusterOpts{NodeID: "same-node"})
	for _, g := range w.Nodes {
		waitFor(t, 45*time.Second, 500*time.Millisecond, g.Addr+" to report the shared node_id", func() bool {
			return scrapeMetrics(t, g).value("caddy_rcns_store_node_id_conflict") == 1
		})
		if !strings.Contains(g.Output(), "another live gateway process uses this node_id") {
			t.Errorf("%s: no WARN naming the clash in its log", g.Addr)
		}
		wantStatus(t, g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil), 200)
	}
}
