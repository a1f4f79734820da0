package integration

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Store faults: Redis killed under load, restarted empty, or failed
// over. A request that needs state answers 503 store-unavailable
// (retryable, Retry-After) and executes nothing; no Idempotency-Key
// executes twice; the gateways recover by themselves.

// Bounds of the outage load.
const (
	outageKeys       = 1000 // keys at most (each sent to both nodes)
	outageWorkers    = 4
	outagePace       = 50 * time.Millisecond // each worker's pause between keys
	outageBeforeKill = 12                    // keys answered 200 before Redis is killed
	outageDown503    = 24                    // 503 answers seen before the load stops
)

// keyedAnswer is one answer of the outage load.
type keyedAnswer struct {
	key  string
	node int
	down bool // sent after the store was killed
	r    *Resp
	err  error
}

// keyedLoad sends keyed RESERVE requests, each key to every node at
// once (the duplicate a retry through a load balancer makes), from
// outageWorkers workers, until stop is closed, outageKeys keys are
// used or outageLoadLimit passes. down tells whether the store was
// killed when a request was sent. Each key's reservation names it as
// guest_id, so upstream writes count per key.
type keyedLoad struct {
	w      *clusterWorld
	prefix string
	down   *atomic.Bool
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	answers []keyedAnswer
	ok, bad int // 200 answers; 503 answers
}

func startKeyedLoad(w *clusterWorld, prefix string, down *atomic.Bool) *keyedLoad {
	l := &keyedLoad{w: w, prefix: prefix, down: down, stop: make(chan struct{}), done: make(chan struct{})}
	deadline := time.Now().Add(outageLoadLimit)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range outageWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				k := int(next.Add(1) - 1)
				if k >= outageKeys || time.Now().After(deadline) {
					return
				}
				l.sendKey(guestKey(prefix, k))
				time.Sleep(outagePace)
			}
		}()
	}
	go func() { wg.Wait(); close(l.done) }()
	return l
}

// sendKey sends key's request to every node at once.
func (l *keyedLoad) sendKey(key string) {
	h := hdr(agentA1, "hotel:book", "Idempotency-Key", key)
	body := reserveBody(key, 1)
	var wg sync.WaitGroup
	for i, g := range l.w.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			down := l.down.Load()
			r, err := tryDoor(g, "RESERVE", "/reservations", h, body)
			l.mu.Lock()
			defer l.mu.Unlock()
			l.answers = append(l.answers, keyedAnswer{key: key, node: i, down: down, r: r, err: err})
			switch {
			case err != nil:
			case r.Status == 200:
				l.ok++
			case r.Status == 503:
				l.bad++
			}
		}()
	}
	wg.Wait()
}

// counts returns the 200 and 503 answers so far.
func (l *keyedLoad) counts() (ok, unavailable int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.bad
}

// finish stops the load and waits for its requests (bounded).
func (l *keyedLoad) finish(t testing.TB) []keyedAnswer {
	t.Helper()
	close(l.stop)
	select {
	case <-l.done:
	case <-time.After(2*requestTimeout + 10*time.Second):
		t.Fatalf("the outage load did not stop within %s", 2*requestTimeout+10*time.Second)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]keyedAnswer(nil), l.answers...)
}

// checkKeyedAnswers checks the load's answers: each is 200 (run, or a
// replay of its key's run), 409 in flight or 503 store-unavailable;
// no key has more than one upstream write; a key answered by a run has
// exactly one, and its replays repeat that run. It returns the keys
// that ran (wrote a reservation).
func checkKeyedAnswers(t testing.TB, w *clusterWorld, answers []keyedAnswer) (ran map[string]bool) {
	t.Helper()
	_, writes := w.reservationWrites()
	byKey := map[string][]keyedAnswer{}
	statuses := map[string]int{}
	for _, a := range answers {
		if a.err != nil {
			t.Fatalf("key %s on node %d: %v", a.key, a.node, a.err)
		}
		byKey[a.key] = append(byKey[a.key], a)
		replayed := a.r.Header.Get("Idempotent-Replayed") == "true"
		statuses[fmt.Sprintf("%d replayed=%v down=%v", a.r.Status, replayed, a.down)]++
		switch a.r.Status {
		case 200:
		case 409:
			assertErrorBody(t, a.r, 409, "idempotency-key-in-flight")
		case 503:
			assertStoreUnavailable(t, a.r)
		default:
			t.Errorf("key %s on node %d (store down %v): unexpected answer\n%s", a.key, a.node, a.down, a.r)
		}
	}
	t.Logf("outage load answers: %v", statuses)
	ran = map[string]bool{}
	for key, as := range byKey {
		n := writes[key]
		if n > 1 {
			t.Errorf("key %s was executed %d times upstream: %v", key, n, answerStatuses(as))
		}
		if n > 0 {
			ran[key] = true
		}
		var run *Resp
		var replays []*Resp
		for _, a := range as {
			if a.r.Status != 200 {
				continue
			}
			if a.r.Header.Get("Idempotent-Replayed") == "true" {
				replays = append(replays, a.r)
				continue
			}
			if run != nil {
				t.Errorf("key %s ran twice (two first answers):\n%s\n%s", key, run, a.r)
			}
			run = a.r
		}
		if run != nil && n != 1 {
			t.Errorf("key %s was answered as run but has %d upstream writes", key, n)
		}
		for _, r := range replays {
			if run != nil {
				assertReplay(t, run, r)
			}
		}
		if n == 1 && run == nil && len(replays) == 0 && allStoreUnavailable(as) {
			t.Errorf("key %s was executed upstream, yet every answer was 503 store-unavailable, which says nothing was executed: %v", key, answerStatuses(as))
		}
	}
	return ran
}

func allStoreUnavailable(as []keyedAnswer) bool {
	for _, a := range as {
		if !isStoreUnavailable(a.r) {
			return false
		}
	}
	return true
}

func answerStatuses(as []keyedAnswer) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("node %d: %d %s", a.node, a.r.Status, str(a.r.JSON(), "reason")))
	}
	return out
}

// clusterOutage: keyed load on both nodes; Redis is killed mid-load.
// Requests that need state answer 503 store-unavailable and execute
// nothing; pass-through traffic and the manifest keep working; no key
// runs twice. After the restart (Redis comes back empty) the nodes
// serve state again by themselves (a gate synthesis on A presented on
// B), and the keys that ran before the kill do not run again.
func clusterOutage(t *testing.T, w *clusterWorld, topo *redisTopology) {
	var down atomic.Bool
	load := startKeyedLoad(w, "outage-"+topo.name, &down)
	waitFor(t, outageLoadLimit, 20*time.Millisecond, fmt.Sprintf("%d keyed answers before the kill", outageBeforeKill), func() bool {
		ok, _ := load.counts()
		return ok >= outageBeforeKill
	})
	down.Store(true)
	topo.kill(t)
	waitFor(t, outageLoadLimit, 20*time.Millisecond, fmt.Sprintf("%d answers 503 while Redis is down", outageDown503), func() bool {
		_, bad := load.counts()
		return bad >= outageDown503
	})
	answers := load.finish(t)
	ran := checkKeyedAnswers(t, w, answers)
	if len(ran) < outageBeforeKill/2 {
		t.Errorf("only %d keys ran before the kill", len(ran))
	}

	t.Run("while down", func(t *testing.T) {
		defer w.noExecution(t)()
		for _, g := range w.Nodes {
			assertStoreUnavailable(t, w.book(t, g, agentRecover, scopeAll, "Allow-RCNS", "true"))
			assertStoreUnavailable(t, g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "while-down"), reserveBody("while-down", 1)))
			r := g.Do(t, "DISCOVER", "/", nil, nil)
			wantStatus(t, r, 200)
			assertAGTPHeaders(t, r)
			status, _, body := plainRequest(t, "GET", g.URL+"/guests/g-1", nil, nil)
			if _, _, direct := w.JS.Get(t, "/guests/g-1"); status != 200 || string(body) != string(direct) {
				t.Errorf("pass-through GET /guests/g-1 on %s while Redis is down: %d %s", g.Addr, status, body)
			}
		}
	})

	topo.restart(t)
	t.Run("recovers after restart", func(t *testing.T) {
		var r *Resp
		waitFor(t, storeRecovery, 200*time.Millisecond, "a gate synthesis on A after the restart", func() bool {
			r = w.book(t, w.A, agentRecover, scopeAll, "Allow-RCNS", "true")
			if r.Status != 263 && !isStoreUnavailable(r) {
				t.Fatalf("gate synthesis after the restart: want 263 or 503 store-unavailable:\n%s", r)
			}
			return r.Status == 263
		})
		id := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
		waitFor(t, storeRecovery, 200*time.Millisecond, "B to serve the contract minted on A after the restart", func() bool {
			p := w.book(t, w.B, agentRecover, scopeAll, "Contract-Synthesized", id)
			if p.Status != 200 && !isStoreUnavailable(p) {
				t.Fatalf("presentation on B after the restart: want 200 or 503 store-unavailable:\n%s", p)
			}
			return p.Status == 200
		})
		wantStatus(t, w.book(t, w.A, agentRecover, scopeAll), 200)
	})

	// Redis came back empty: it forgot the stored answers. A repeat of a
	// key that ran before the kill must not run it again within the
	// restart quarantine (docs/cluster.md "Redis restarted empty").
	t.Run("no key runs twice after the restart", func(t *testing.T) {
		n := 0
		for key := range ran {
			if n == 10 {
				break
			}
			n++
			for _, g := range w.Nodes {
				r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", key), reserveBody(key, 1))
				if r.Status != 200 && !isStoreUnavailable(r) {
					t.Errorf("repeat of %s on %s after the restart: want a replay or 503 store-unavailable:\n%s", key, g.Addr, r)
				}
				if r.Status == 200 && r.Header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("key %s ran again on %s after Redis restarted empty:\n%s", key, g.Addr, r)
				}
			}
			if _, writes := w.reservationWrites(); writes[key] != 1 {
				t.Errorf("key %s has %d upstream writes after its repeats, want 1", key, writes[key])
			}
		}
	})
}
