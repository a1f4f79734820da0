package integration

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestClusterReloadUnderKeyedRequest: one of two gateways on one Redis
// is reloaded while a keyed BOOK runs on it (its write step done
// upstream, its answer not yet given), with store settings that differ
// from the running ones, so the reload ends the last configuration
// using its Redis client (docs/cluster.md, "The client is shared across
// reloads"). Caddy does not wait for the running request; the client
// must outlive it. In every case the BOOK answers, its answer is
// stored, a repeat of its key replays it on both nodes, and the write
// step ran once.
func TestClusterReloadUnderKeyedRequest(t *testing.T) {
	_, topo := startSingleRedis(t)
	w := startClusterWorld(t, topo.block(), clusterOpts{Extra: livenessExtra})
	// Each reload below gives node A's store a setting the running
	// configuration does not have: a change of any knob makes a new
	// client (the refused one leaves the running configuration).
	changed := func(g *Gateway, lines string) string {
		from := "\t\t\taddress " + topo.servers[0] + "\n"
		if !strings.Contains(g.Caddyfile, from) {
			t.Fatalf("node A's Caddyfile has no %q:\n%s", from, g.Caddyfile)
		}
		return strings.Replace(g.Caddyfile, from, from+lines, 1)
	}

	t.Run("settings changed: the request the reload overtook stores its answer", func(t *testing.T) {
		text := changed(w.A, "\t\t\tpool_size 7\n")
		reloadUnderBook(t, w, "reload-overtaken", func(t *testing.T) {
			start := time.Now()
			if status, body := reload(t, w.A, text); status != 200 {
				t.Fatalf("reload of node A: %d %s", status, body)
			}
			t.Logf("the reload took %v", time.Since(start))
		}, nil)
	})

	t.Run("Redis stalled: the reload is refused in bounded time, the running configuration answers", func(t *testing.T) {
		text := changed(w.A, "\t\t\tread_timeout 400ms\n")
		reloadUnderBook(t, w, "reload-stalled", func(t *testing.T) {
			topo.pause(t)
			start := time.Now()
			status, body := reload(t, w.A, text)
			took := time.Since(start)
			topo.resume(t)
			// A new client must reach Redis (store_required on): the
			// load fails with the store's own error within its dial
			// budget (dial 1 s + read 0.4 s), and the running
			// configuration stays.
			if status == 200 || !strings.Contains(body, "store redis at "+topo.servers[0]) || !strings.Contains(body, "store_required off") {
				t.Fatalf("reload of node A while Redis is stopped: %d %s\nwant refused, naming the store and store_required off", status, body)
			}
			if took > 10*time.Second {
				t.Fatalf("the refused reload took %v: it waited past the store's dial budget", took)
			}
		}, nil)
	})

	t.Run("Redis restarted empty before the reload: nothing runs twice", func(t *testing.T) {
		text := changed(w.A, "\t\t\tpool_size 9\n")
		reloadUnderBook(t, w, "reload-restarted", func(t *testing.T) {
			// The restart loses the BOOK's claim: the old client, which
			// sees the new run when it reconnects, writes it again
			// (reassert) and quarantines claims; the new client reads
			// the run ids the node saw (run_ids file). A repeat meets
			// the claim in flight or the quarantine (503), then the
			// stored answer.
			topo.kill(t)
			topo.restart(t)
			if status, body := reload(t, w.A, text); status != 200 {
				t.Fatalf("reload of node A after Redis restarted: %d %s", status, body)
			}
		}, nil)
	})

	t.Run("Redis full: the answer of the request the reload overtook is kept", func(t *testing.T) {
		setMax := func(v string) {
			if _, err := redistest.Do(topo.servers[0], "CONFIG", "SET", "maxmemory", v); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { setMax("0") })
		text := changed(w.A, "\t\t\tpool_size 11\n")
		reloadUnderBook(t, w, "reload-full", func(t *testing.T) {
			// A new client needs only PING, which a full Redis answers;
			// the answer's write runs while full (flags=allow-oom).
			setMax("1")
			if status, body := reload(t, w.A, text); status != 200 {
				t.Fatalf("reload of node A while Redis is full: %d %s", status, body)
			}
		}, func(t *testing.T) {
			// Claims are refused while full (503 before anything runs),
			// repeats included: room again, then the repeats.
			r := w.B.Do(t, "BOOK", "/room", hdr(agentKilled, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "reload-full"), bookBody())
			if !isStoreUnavailable(r) {
				t.Errorf("a repeat while Redis is full: want 503 store-unavailable, got:\n%s", r)
			}
			setMax("0")
		})
	})

	// A reload that would move node A's keys but fails (its operator
	// page's token placeholder is empty) never serves: the running
	// configuration is not refused, and the same move loaded next (the
	// subtest after this one) is.
	t.Run("a reload that fails after moving the keys refuses nothing", func(t *testing.T) {
		text := changed(w.A, "\t\t\tkey_prefix moved:\n")
		const at = "\t\tnode_id node-a\n"
		if !strings.Contains(text, at) {
			t.Fatalf("node A's Caddyfile has no %q:\n%s", at, text)
		}
		text = strings.Replace(text, at, at+"\t\toperator_page /rcns/op {\n\t\t\tbearer {env.RCNS_IT_UNSET_OPERATOR_TOKEN}\n\t\t}\n", 1)
		if status, body := reload(t, w.A, text); status == 200 || !strings.Contains(body, "placeholder is empty") {
			t.Fatalf("reload with an empty token placeholder: %d %s, want refused naming the placeholder", status, body)
		}
		r := w.A.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Idempotency-Key", "after-failed-reload"), nil)
		if r.Status != 200 {
			t.Fatalf("a keyed request on node A after a failed reload: want 200, got:\n%s", r)
		}
	})

	// Last: node A's keys move while its BOOK runs: keyed requests on
	// it are refused until the BOOK has ended.
	t.Run("key_prefix changed: keyed requests refused while the previous configuration's may run", func(t *testing.T) {
		const key = "reload-moved"
		keyed, before, answered, release := w.heldBook(t, agentKilled, key)
		defer release()
		if status, body := reload(t, w.A, changed(w.A, "\t\t\tkey_prefix moved:\n")); status != 200 {
			t.Fatalf("reload of node A with another key_prefix: %d %s", status, body)
		}
		r := w.A.Do(t, "BOOK", "/room", keyed, bookBody())
		if b := assertErrorBody(t, r, 503, "store-unavailable"); !strings.Contains(str(b, "explanation"), "Idempotency-Key store changed") {
			t.Fatalf("a repeat on node A after its keys moved: want the reload named:\n%s", r)
		}
		if r := w.A.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil); r.Status != 200 {
			t.Errorf("a request without a key on node A after its keys moved: want 200, got:\n%s", r)
		}
		first := awaitOvertakenBook(t, answered)
		w.Hotel.SlowAfter(0, nil)
		if r := w.A.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Idempotency-Key", "after-the-move"), nil); r.Status != 200 {
			t.Errorf("a keyed request on node A once the previous configuration's BOOK ended: want 200, got:\n%s", r)
		}
		var rep *Resp
		waitFor(t, 15*time.Second, 100*time.Millisecond, "a repeat on node B to replay", func() bool {
			rep = w.B.Do(t, "BOOK", "/room", keyed, bookBody())
			return rep.Status != 409
		})
		if rep.Status != first.Status || rep.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a repeat on node B (the old key_prefix): want the answer replayed:\n%s", rep)
		}
		if _, after := w.reservationWrites(); after[demoGuest] != before[demoGuest]+1 {
			t.Fatalf("the write step ran %d times, want once", after[demoGuest]-before[demoGuest])
		}
	})
}

// reloadUnderBook sends a keyed BOOK to node A whose write step the
// hotel holds for 3 s once done upstream, runs during while it is held
// and after (when not nil) once the BOOK answered. It checks that the
// BOOK answered (263, or 200 under the contract an earlier BOOK
// minted), that its key replays on both nodes (after 409 in flight
// while the answer is being stored, or 503 while a restart's
// quarantine lasts, at most), and that the write step ran once.
func reloadUnderBook(t *testing.T, w *clusterWorld, key string, during, after func(t *testing.T)) {
	t.Helper()
	keyed, before, answered, release := w.heldBook(t, agentKilled, key)
	defer release()
	during(t)
	first := awaitOvertakenBook(t, answered)
	release()
	if after != nil {
		after(t)
	}
	for _, g := range []*Gateway{w.B, w.A} {
		var r *Resp
		// A restart's quarantine (the 12 s lease of livenessExtra)
		// answers 503 meanwhile.
		waitFor(t, 30*time.Second, 250*time.Millisecond, "a repeat of "+key+" on "+g.URL+" to replay its answer", func() bool {
			r = g.Do(t, "BOOK", "/room", keyed, bookBody())
			return (r.Status != 409 || str(r.JSON(), "reason") != "idempotency-key-in-flight") && !isStoreUnavailable(r)
		})
		wantStatus(t, r, first.Status)
		if r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a repeat of %s on %s: not replayed:\n%s", key, g.URL, r)
		}
	}
	if _, after := w.reservationWrites(); after[demoGuest] != before[demoGuest]+1 {
		t.Fatalf("the write step of %s ran %d times, want once", key, after[demoGuest]-before[demoGuest])
	}
}

// TestClusterRestartEmptyUnderKeyedRequests: Redis is killed and
// restarted empty (no persistence) while keyed RESERVE calls run on
// node A, their writes done at the hotel API and their answers not yet
// given; nothing else of the node meets the restart first. Each call
// answers, its answer is stored although Redis lost its claim (the
// answer's store is written afresh: Redis restarted since the claim),
// and once the restart's quarantine is over a repeat of each key on
// node B replays it: the write ran once. Before, a review ran 5 of 6
// such keys twice.
func TestClusterRestartEmptyUnderKeyedRequests(t *testing.T) {
	_, topo := startSingleRedis(t)
	w := startClusterWorld(t, topo.block(), clusterOpts{Extra: livenessExtra})
	const calls = 6
	w.Hotel.SlowAfter(3*time.Second, func(r *http.Request) bool { return r.Method == "POST" && r.URL.Path == "/reservations" })
	defer w.Hotel.SlowAfter(0, nil)
	keyOf := func(i int) string { return "restarted-" + strconv.Itoa(i) }
	answered := make(chan *Resp, calls)
	for i := range calls {
		go func() {
			r, err := tryDoor(w.A, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", keyOf(i)), reserveBody(keyOf(i), 1))
			if err != nil {
				t.Errorf("RESERVE %s: %v", keyOf(i), err)
			}
			answered <- r
		}()
	}
	waitFor(t, 10*time.Second, 20*time.Millisecond, "the writes to reach the hotel API", func() bool {
		total, _ := w.reservationWrites()
		return total >= calls
	})
	topo.kill(t)
	topo.restart(t)
	for range calls {
		if r := <-answered; r != nil && r.Status != 200 {
			t.Errorf("a RESERVE across the restart: want 200, got:\n%s", r)
		}
	}
	w.Hotel.SlowAfter(0, nil)
	for i := range calls {
		var r *Resp
		// 503 while the restart's quarantine (12 s) lasts.
		waitFor(t, 30*time.Second, 250*time.Millisecond, "a repeat of "+keyOf(i)+" to be served", func() bool {
			r = w.B.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", keyOf(i)), reserveBody(keyOf(i), 1))
			return !isStoreUnavailable(r)
		})
		if r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("a repeat of %s after the restart: want its answer replayed, got:\n%s", keyOf(i), r)
		}
	}
	_, byGuest := w.reservationWrites()
	for i := range calls {
		if n := byGuest[keyOf(i)]; n != 1 {
			t.Errorf("the write of %s ran %d times, want once", keyOf(i), n)
		}
	}
	if t.Failed() {
		t.Logf("node A:\n%s\nnode B:\n%s", w.A.proc.tail(200), w.B.proc.tail(200))
	}
}

// TestOneNameTwoStoresReload: two site blocks that leave the rcns name
// unset share one name (and its state), one keeping its Idempotency-Keys
// in Redis, the other in memory. That is one configuration, not a reload
// that moved the keys: keyed requests on both are served when it
// starts and after a reload that keeps both stores.
// Requests go over the HTTP binding: the native door addresses a
// handler by name, and two handlers here have one.
func TestOneNameTwoStoresReload(t *testing.T) {
	_, topo := startSingleRedis(t)
	w := &clusterWorld{JS: startJSONServer(t, hotelDB)}
	w.Hotel = startCountingProxy(t, w.JS.URL)
	o := clusterOpts{Identity: "header", Agents: clusterAgents(t, nil)}
	text, sitePort, adminPort, _ := renderCaddyfileDoor(t, clusterNodeSite(w, topo.block(), "node-r", o), "http")
	memPort := freePort(t)
	text += fmt.Sprintf("\nhttp://127.0.0.1:%d {\n\tbind 127.0.0.1\n%s}\n", memPort, clusterNodeSite(w, "", "node-m", o))
	onRedis := launchText(t, text, sitePort, adminPort, 0)
	onMemory := *onRedis
	onMemory.Addr = fmt.Sprintf("127.0.0.1:%d", memPort)
	onMemory.URL = "http://" + onMemory.Addr

	n := 0
	keyed := func(g *Gateway) *Resp {
		n++
		return g.DoHTTP(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Idempotency-Key", "one-name-"+strconv.Itoa(n)), nil)
	}
	check := func(when string) {
		t.Helper()
		for _, g := range []*Gateway{onRedis, &onMemory} {
			if r := keyed(g); r.Status != 200 {
				t.Fatalf("%s: a keyed FETCH on %s: want 200, got:\n%s", when, g.Addr, r)
			}
		}
	}
	check("at start")
	// A change both stores keep: the log level of the Redis site's
	// access log.
	again := strings.Replace(text, "\tlog {\n\t\toutput stderr\n", "\tlog {\n\t\toutput stderr\n\t\tlevel INFO\n", 1)
	if again == text {
		t.Fatalf("the Caddyfile has no access log block to change:\n%s", text)
	}
	if status, body := reload(t, onRedis, again); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	check("after a reload that keeps both stores")
	if out := onRedis.Output(); strings.Contains(out, "the Idempotency-Key store changed") {
		t.Fatalf("the gateway logged a store change:\n%s", out)
	}

	// The two sites swap stores while a keyed BOOK runs on the memory
	// site: a repeat on that site (now on Redis) is refused until the
	// BOOK has ended, and the write step runs once (review: the swap
	// was taken for no move, and the repeat ran the write again).
	_, before := w.reservationWrites()
	w.Hotel.SlowAfter(3*time.Second, func(r *http.Request) bool { return r.Method == "POST" && r.URL.Path == "/reservations" })
	defer w.Hotel.SlowAfter(0, nil)
	book := hdr(agentKilled, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "swapped")
	answered := make(chan bookResult, 1)
	go func() { answered <- bookResult{r: onMemory.DoHTTP(t, "BOOK", "/room", book, bookBody())} }()
	waitFor(t, 10*time.Second, 20*time.Millisecond, "the write step to reach the hotel API", func() bool {
		_, now := w.reservationWrites()
		return now[demoGuest] > before[demoGuest]
	})
	swapped := strings.Replace(again, clusterNodeSite(w, topo.block(), "node-r", o), clusterNodeSite(w, "", "node-r", o), 1)
	swapped = strings.Replace(swapped, clusterNodeSite(w, "", "node-m", o), clusterNodeSite(w, topo.block(), "node-m", o), 1)
	if strings.Count(swapped, "store redis") != 1 || swapped == again {
		t.Fatalf("the swapped Caddyfile:\n%s", swapped)
	}
	if status, body := reload(t, onRedis, swapped); status != 200 {
		t.Fatalf("reload that swaps the stores: %d %s", status, body)
	}
	r := onMemory.DoHTTP(t, "BOOK", "/room", book, bookBody())
	if b := assertErrorBody(t, r, 503, "store-unavailable"); !strings.Contains(str(b, "explanation"), "Idempotency-Key store changed") {
		t.Fatalf("a repeat on the site that moved to Redis while its BOOK runs: want the reload named:\n%s", r)
	}
	awaitOvertakenBook(t, answered)
	if _, after := w.reservationWrites(); after[demoGuest] != before[demoGuest]+1 {
		t.Fatalf("the write step ran %d times, want once", after[demoGuest]-before[demoGuest])
	}
	w.Hotel.SlowAfter(0, nil)
	check("once the BOOK ended")
}

// awaitOvertakenBook waits, at most 30 s, for the answer of the BOOK a
// reload overtook, and checks that it ran (263 or 200).
func awaitOvertakenBook(t *testing.T, answered <-chan bookResult) *Resp {
	t.Helper()
	var first bookResult
	select {
	case first = <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the BOOK the reload overtook did not answer")
	}
	if first.err != nil {
		t.Fatalf("the BOOK the reload overtook: %v", first.err)
	}
	if first.r.Status != 263 && first.r.Status != 200 {
		t.Fatalf("the BOOK the reload overtook: want 263 (synthesized) or 200 (the contract the last one minted):\n%s", first.r)
	}
	return first.r
}
