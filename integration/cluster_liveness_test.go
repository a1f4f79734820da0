package integration

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// Liveness of Idempotency-Keys on two gateways sharing Redis (issue 27,
// docs/cluster.md "Failure modes"): a stall, a node killed mid-step, a
// full Redis and concurrent first calls. Exactly once must hold, and no
// key may stay stuck: a key answered 503 "nothing was executed" runs on
// its next retry; a key whose node died answers outcome-unknown within
// its lease, never runs again, and an operator can resolve it.

// livenessExtra gives the worlds short plans, so leases are seconds: a
// plan (BOOK) 5 s + the 2 s margin; a Tier B call (RESERVE, its 10 s
// timeout) 12 s; the restart quarantine 12 s. The gate budget is large
// enough for 20 concurrent first calls.
const livenessExtra = "\t\tcomposition_timeout 5s\n\t\tidempotency_lease_margin 2s\n\t\trate_limit rcns 1 100\n\t\tmcp\n"

// Bounds of the liveness tests.
const (
	stallFor      = 10 * time.Second // Redis stopped under load
	heldFor       = 5 * time.Second  // a network path holding bytes
	bookLease     = 7 * time.Second  // BOOK's lease under livenessExtra
	coalesceCalls = 20
)

func TestClusterLivenessSingle(t *testing.T) {
	_, topo := startSingleRedis(t)
	runLiveness(t, topo)
}

func TestClusterLivenessCluster(t *testing.T) {
	_, topo := startRedisCluster(t)
	runLiveness(t, topo)
}

// runLiveness runs every liveness check on two nodes of topo; the node
// kill runs last (it leaves node A dead).
func runLiveness(t *testing.T, topo *redisTopology) {
	w := startClusterWorld(t, topo.block(), clusterOpts{Extra: livenessExtra})
	t.Run("stall under load: every 503 runs once on its retry", func(t *testing.T) {
		livenessStall(t, w, "stall-"+topo.name, stallFor, topo.pause, topo.resume)
	})
	t.Run("concurrent first calls give one contract", func(t *testing.T) { livenessCoalesce(t, w) })
	t.Run("full Redis refuses before anything runs", func(t *testing.T) { livenessFull(t, w, topo) })
	t.Run("a repeat on the node running its key: 409 without claims again", func(t *testing.T) { livenessRepeatHere(t, w) })
	if t.Failed() {
		return
	}
	t.Run("node killed mid-step: outcome-unknown, then resolved", func(t *testing.T) { livenessKilled(t, w) })
}

// TestClusterLivenessHeldBytes: the stall of a network path that holds
// the bytes both ways (a TCP proxy between the gateways and Redis):
// claims that reach Redis late write nothing, claims whose reply was
// held are released once Redis answers again.
func TestClusterLivenessHeldBytes(t *testing.T) {
	srv, _ := startSingleRedis(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	w := startClusterWorld(t, storeBlock("address "+proxy.Addr(), ""), clusterOpts{Extra: livenessExtra})
	livenessStall(t, w, "held", heldFor, func(testing.TB) { proxy.Hold(true, true) }, func(testing.TB) { proxy.Release() })
}

// livenessStall runs keyed load on both nodes, stalls Redis for d
// (stall, then resume), and checks: no key ran twice; every key that
// met a 503 store-unavailable and was not run (no first answer 200)
// succeeds on its retry with the same key and then has exactly one
// upstream write; a key that ran (its other node answered it) is not
// run again by its retry.
func livenessStall(t *testing.T, w *clusterWorld, prefix string, d time.Duration, stall, resume func(testing.TB)) {
	var down atomic.Bool
	load := startKeyedLoad(w, prefix, &down)
	waitFor(t, outageLoadLimit, 20*time.Millisecond, fmt.Sprintf("%d keyed answers before the stall", outageBeforeKill), func() bool {
		ok, _ := load.counts()
		return ok >= outageBeforeKill
	})
	down.Store(true)
	stall(t)
	time.Sleep(d)
	resume(t)
	down.Store(false)
	time.Sleep(time.Second)
	answers := load.finish(t)
	checkKeyedAnswers(t, w, answers)
	met503, ran := map[string]bool{}, map[string]bool{}
	for _, a := range answers {
		if a.r != nil && isStoreUnavailable(a.r) {
			met503[a.key] = true
		}
		if a.r != nil && a.r.Status == 200 && a.r.Header.Get("Idempotent-Replayed") != "true" {
			ran[a.key] = true
		}
	}
	if len(met503) == 0 {
		t.Fatalf("no request met the stall (503): %d answers", len(answers))
	}
	t.Logf("%d keys met a 503 during the %v stall", len(met503), d)
	for key := range met503 {
		r := retryKeyed(t, w.B, key)
		switch {
		case r.Status == 200:
		case ran[key]:
			// It ran on the other node, whose answer is stored once
			// Redis answers its background retry: until then the key
			// is in flight, or outcome-unknown past its lease.
			t.Logf("key %s (ran on the other node) answers on its retry:\n%s", key, r)
		default:
			t.Errorf("key %s, answered 503 during the stall and not run, is not served on its retry after Redis resumed:\n%s", key, r)
		}
	}
	_, writes := w.reservationWrites()
	for key := range met503 {
		if writes[key] != 1 {
			t.Errorf("key %s has %d upstream writes after its retry, want exactly 1", key, writes[key])
		}
	}
}

// retryKeyed retries key's RESERVE on g until it is no longer 409
// idempotency-key-in-flight (waiting its Retry-After, which is at most
// its lease's end) or 503 store-unavailable (Redis may still be
// catching up), for at most the Tier B lease plus a margin.
func retryKeyed(t *testing.T, g *Gateway, key string) *Resp {
	t.Helper()
	deadline := time.Now().Add(12*time.Second + 5*time.Second)
	for {
		r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", key), reserveBody(key, 1))
		inFlight := r.Status == 409 && str(r.JSON(), "reason") == "idempotency-key-in-flight"
		if (!inFlight && !isStoreUnavailable(r)) || time.Now().After(deadline) {
			return r
		}
		ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if err != nil || ra < 1 || (inFlight && ra > 5) {
			t.Fatalf("retry of %s: Retry-After %q, want 1-5 s:\n%s", key, r.Header.Get("Retry-After"), r)
		}
		time.Sleep(time.Duration(ra) * time.Second)
	}
}

// livenessCoalesce: 20 concurrent first gate calls of one agent for one
// pair, each with its own key, spread over both nodes, mint one
// contract: one answer synthesized it (263), every other ran under it
// (200), all naming it.
func livenessCoalesce(t *testing.T, w *clusterWorld) {
	resps := w.spread(t, coalesceCalls, func(i int) (string, string, map[string]string, any) {
		return "BOOK", "/room", hdr(agentCoalesce, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", fmt.Sprintf("coalesce-%d", i)), bookBody()
	})
	ids := map[string]int{}
	minted := 0
	for i, r := range resps {
		switch r.Status {
		case 263:
			minted++
		case 200:
		default:
			t.Fatalf("first call %d (node %d): want 263 or 200:\n%s", i, i%2, r)
		}
		ids[r.Header.Get("Contract-Synthesized")]++
	}
	if len(ids) != 1 || minted != 1 {
		t.Fatalf("%d concurrent first calls gave contracts %v (%d synthesized); want one contract", coalesceCalls, ids, minted)
	}
}

// livenessFull: with every Redis server over maxmemory (noeviction),
// keyed and unkeyed requests that need state answer 503
// store-unavailable, nothing runs upstream, and no key is written; once
// Redis has room again they are served.
func livenessFull(t *testing.T, w *clusterWorld, topo *redisTopology) {
	dbsize := func() int {
		n := 0
		for _, a := range topo.servers {
			v, err := redistest.Do(a, "DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			k, _ := strconv.Atoi(v)
			n += k
		}
		return n
	}
	setMax := func(v string) {
		for _, a := range topo.servers {
			if _, err := redistest.Do(a, "CONFIG", "SET", "maxmemory", v); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A contract of the pair to present while full.
	r := w.book(t, w.A, agentRevoke, scopeAll, "Allow-RCNS", "true")
	id := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	// Records are written off the answer path (gathered 2 ms, then a
	// round trip): count the keys once that answer's record landed, when
	// the count holds still.
	keys := dbsize()
	for stable, deadline := 0, time.Now().Add(5*time.Second); stable < 5 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if n := dbsize(); n == keys {
			stable++
		} else {
			keys, stable = n, 0
		}
	}
	setMax("1")
	t.Cleanup(func() { setMax("0") })
	func() {
		defer w.noExecution(t)()
		for i, g := range w.Nodes {
			key := fmt.Sprintf("full-%d", i)
			assertStoreUnavailable(t, g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", key), reserveBody(key, 1)))
			assertStoreUnavailable(t, w.book(t, g, agentRecover, scopeAll, "Allow-RCNS", "true"))
			assertStoreUnavailable(t, w.book(t, g, agentRecover, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", key+"-gate"))
			assertStoreUnavailable(t, w.book(t, g, agentRevoke, scopeAll, "Contract-Synthesized", id))
		}
	}()
	if n := dbsize(); n != keys {
		t.Errorf("Redis holds %d keys after the refused requests, %d before: something was written while full", n, keys)
	}
	setMax("0")
	waitFor(t, storeRecovery, 200*time.Millisecond, "a keyed request served once Redis has room", func() bool {
		r := w.A.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "full-after"), reserveBody("full-after", 1))
		return r.Status == 200
	})
}

// livenessRepeatHere: a keyed BOOK runs on A, its write step held at
// the hotel API. Its repeats on A, over the suite's door and over MCP,
// get 409 in flight after the gate's one round trip, with no claims
// again (A knows the claim is its own running request's: the engine's
// runningHere); its repeat on B claims again (B cannot know whether the
// answer is on its way), then gets the 409. Once A answered, a repeat
// on either node replays it. The write ran once.
func livenessRepeatHere(t *testing.T, w *clusterWorld) {
	const key = "repeat-here"
	keyed, before, first, release := w.heldBook(t, agentRepeat, key)
	defer release()
	claims := func(g *Gateway) float64 {
		return scrapeMetrics(t, g).value(`caddy_rcns_store_round_trip_duration_seconds_count{op="idempotency_claim"}`)
	}
	a0, b0 := claims(w.A), claims(w.B)
	assertErrorBody(t, w.A.Do(t, "BOOK", "/room", keyed, bookBody()), 409, "idempotency-key-in-flight")
	mc := mcpConnect(t, w.A, "/mcp", agentRepeat, scopeAll, "Idempotency-Key", key)
	mc.call(t, "book-room", bookArgs(), nil).wantError(t, "idempotency-key-in-flight", 409, true)
	if n := claims(w.A) - a0; n != 0 {
		t.Errorf("the repeats on the node running the key made %v claims again, want none", n)
	}
	assertErrorBody(t, w.B.Do(t, "BOOK", "/room", keyed, bookBody()), 409, "idempotency-key-in-flight")
	if n := claims(w.B) - b0; n < 1 {
		t.Errorf("the repeat on the other node made %v claims again, want some (the answer may be on its way)", n)
	}
	if r := <-first; r.err != nil || r.r.Status != 263 {
		t.Fatalf("the first BOOK: %v %v", r.r, r.err)
	}
	for _, g := range []*Gateway{w.A, w.B} {
		waitFor(t, 5*time.Second, 20*time.Millisecond, "the answer replayed on "+g.URL, func() bool {
			rep := g.Do(t, "BOOK", "/room", keyed, bookBody())
			return rep.Status == 263 && rep.Header.Get("Idempotent-Replayed") == "true"
		})
	}
	if _, after := w.reservationWrites(); after[demoGuest] != before[demoGuest]+1 {
		t.Fatalf("the write step ran %d times, want once", after[demoGuest]-before[demoGuest])
	}
}

// livenessKilled: node A is killed (SIGKILL) while a keyed BOOK's write
// step waits for its answer (the write is done upstream). Retries of
// the key on B get 409 in flight (Retry-After within the lease) and,
// once the lease ended, 409 outcome-unknown naming node-a and the
// request, never a second execution. The operator reads the key and
// resolves it; retries then replay the operator's answer.
func livenessKilled(t *testing.T, w *clusterWorld) {
	const key = "killed-mid-step"
	keyed, before, _, release := w.heldBook(t, agentKilled, key) // A is killed before it answers
	defer release()
	time.Sleep(time.Second)
	w.A.Kill(t)
	killedAt := time.Now()

	r := w.B.Do(t, "BOOK", "/room", keyed, bookBody())
	b := assertErrorBody(t, r, 409, "idempotency-key-in-flight")
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 5 {
		t.Errorf("409 in flight: Retry-After %q, want 1-5 s", r.Header.Get("Retry-After"))
	}
	ends, err := time.Parse(time.RFC3339Nano, str(b, "lease_ends_at"))
	if err != nil || ends.After(killedAt.Add(bookLease)) {
		t.Fatalf("409 in flight: lease_ends_at %q, want within %v of the kill", str(b, "lease_ends_at"), bookLease)
	}
	time.Sleep(time.Until(ends) + 500*time.Millisecond)
	for range 2 {
		r = w.B.Do(t, "BOOK", "/room", keyed, bookBody())
		b = assertErrorBody(t, r, 409, "outcome-unknown")
		if b["retryable"] != false || str(b, "node_id") != "node-a" || str(b, "request") != "BOOK /room" || r.Header.Get("Retry-After") != "" {
			t.Fatalf("outcome-unknown: want not retryable, naming node-a and BOOK /room, no Retry-After:\n%s", r)
		}
	}
	// The MCP door meets the same record: the recipe's tool with the
	// same arguments and key is the tool error outcome-unknown.
	mc := mcpConnect(t, w.B, "/mcp", agentKilled, scopeAll, "Idempotency-Key", key)
	mc.call(t, "book-room", bookArgs(), nil).wantError(t, "outcome-unknown", 409, false)
	if _, after := w.reservationWrites(); after[demoGuest] != before[demoGuest]+1 {
		t.Fatalf("the killed request's write step ran %d times, want once", after[demoGuest]-before[demoGuest])
	}

	// The operator reads the key (the operator API) and resolves it
	// (the CLI, over the HTTP binding); the agent itself may not.
	op := hdr(agentOP, "inspect:all")
	insp := w.B.Do(t, "INSPECT", "/", op, map[string]any{"parameters": map[string]any{"target": "idempotency-key", "agent_id": agentKilled, "key": key}})
	wantStatus(t, insp, 200)
	if ib := insp.JSON(); str(ib, "state") != "outcome-unknown" || str(ib, "node_id") != "node-a" {
		t.Fatalf("INSPECT target=idempotency-key: want outcome-unknown by node-a:\n%s", insp)
	}
	notOp := w.B.Do(t, "REVOKE", "/", hdr(agentKilled, scopeAll), map[string]any{"parameters": map[string]any{
		"target": "idempotency-key", "agent_id": agentKilled, "key": key, "action": "release"}})
	assertErrorBody(t, notOp, 403, "forbidden")
	bin := cliBuild(t)
	out, errOut, code := cliRun(t, bin, "key", "resolve", "-agent-id", agentOP, "-for", agentKilled, "-target-key", key,
		"-reason", "booked: reservation checked by hand", "-result", `{"booked":true}`, w.B.URL+"/")
	if code != 0 || !strings.Contains(out, `"action":"resolve"`) || !strings.Contains(out, `"state":"answered"`) || !strings.Contains(out, `"settled_state":"outcome-unknown"`) {
		t.Fatalf("rcns-agent key resolve: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code := cliRun(t, bin, "key", "release", "-agent-id", agentOP, "-for", agentKilled, "-target-key", key, w.B.URL+"/"); code != 4 {
		t.Errorf("rcns-agent key release of a key already resolved: exit %d, want 4 (409 idempotency-key-not-settleable)", code)
	}
	defer w.noExecution(t)()
	rep := w.B.Do(t, "BOOK", "/room", keyed, bookBody())
	wantStatus(t, rep, 200)
	if rep.Header.Get("Idempotent-Replayed") != "true" || rep.JSON()["resolved_by_operator"] != true {
		t.Fatalf("after the operator resolved the key: want the resolved answer replayed:\n%s", rep)
	}
	if !strings.Contains(string(rep.Body), `"booked":true`) {
		t.Errorf("the replay does not carry the operator's result:\n%s", rep)
	}
}
