package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Faults between a node and Redis that leave a claim where the node
// cannot see it: the node answers 503 "nothing was executed", so the
// key must be free for the retry, whatever Redis did meanwhile.

// keyExists reports whether the record of (agent, key) is in Redis,
// read over a connection of its own.
func keyExists(t *testing.T, addr, agent, key string) bool {
	t.Helper()
	n, err := redistest.Do(addr, "EXISTS", DefaultKeyPrefix+"{a:"+agent+"}:i:"+key)
	if err != nil {
		t.Fatal(err)
	}
	return n == "1"
}

// waitFree waits until a claim of (agent, key) executes, and abandons
// it.
func waitFree(t *testing.T, set store.Set, agent, key string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: agent, Key: key, Fingerprint: "fp"})
		if err == nil && got.Outcome == idempotency.Execute {
			_ = got.Claim.Abandon(context.Background())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s not free within %v: outcome %v, %v", key, within, got.Outcome, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLateClaimWritesNothing: a claim whose script reaches Redis only
// after the node stopped waiting (Redis stopped with the command in its
// socket, or a network path that holds bytes) writes nothing when it
// finally runs: its deadline, on Redis's own clock, has passed.
func TestLateClaimWritesNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, how := range []string{"SIGSTOP", "held bytes"} {
		t.Run(how, func(t *testing.T) {
			addr := srv.Addr()
			var proxy *redistest.Proxy
			if how == "held bytes" {
				proxy = redistest.StartProxy(t, srv.Addr())
				addr = proxy.Addr()
			}
			c, set := newSet(t, Config{Addrs: []string{addr}})
			if _, known := c.ClockOffset(); !known {
				t.Fatal("the clock offset was not measured at New")
			}
			key := "late-" + strings.ReplaceAll(how, " ", "-")
			if proxy != nil {
				proxy.Hold(true, false)
			} else {
				srv.Pause()
			}
			start := time.Now()
			_, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: key, Fingerprint: "fp"})
			if !errors.Is(err, store.ErrUnavailable) || !mayHaveRun(err) {
				t.Fatalf("claim during the stall: %v (may have run: %v), want ErrUnavailable that may have run", err, mayHaveRun(err))
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("the claim waited %v; want about the read timeout", d)
			}
			// The node stops at once (its background release of the
			// claim never runs): the claim's own deadline must keep it
			// from landing.
			_ = c.Close()
			time.Sleep(300 * time.Millisecond)
			if proxy != nil {
				proxy.Release()
			} else {
				srv.Resume()
			}
			// The held script runs now; it must write nothing.
			time.Sleep(300 * time.Millisecond)
			if keyExists(t, srv.Addr(), "a", key) {
				t.Fatal("the late claim holds the key: the retry would get 409 though nothing ran")
			}
			_, other := newSet(t, Config{Addrs: []string{srv.Addr()}})
			waitFree(t, other, "a", key, 5*time.Second)
		})
	}
}

// TestLostReplyClaimReleased: a claim that ran at Redis in time but
// whose reply never reached the node (503 "nothing was executed") is
// released in the background once Redis answers again.
func TestLostReplyClaimReleased(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	_, set := newSet(t, Config{Addrs: []string{proxy.Addr()}})
	// Load the claim script first: with the reply held, EVALSHA's
	// NOSCRIPT answer would never come back, and EVAL never go out.
	waitFree(t, set, "a", "warm-up", time.Second)
	proxy.Hold(false, true)
	_, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: "lost", Fingerprint: "fp"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("claim with its reply held: %v, want ErrUnavailable", err)
	}
	if !keyExists(t, srv.Addr(), "a", "lost") {
		t.Fatal("the claim did not reach Redis: this test needs it to have run")
	}
	time.Sleep(500 * time.Millisecond)
	proxy.Release()
	deadline := time.Now().Add(10 * time.Second)
	for keyExists(t, srv.Addr(), "a", "lost") {
		if time.Now().After(deadline) {
			t.Fatal("the claim whose reply was lost still holds its key 10 s after Redis answered again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFree(t, set, "a", "lost", 2*time.Second)
}

// usedMemory is INFO memory's used_memory.
func usedMemory(t *testing.T, addr string) int64 {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

// TestFullRedisRefuses: over maxmemory (noeviction), every script that
// may grow the data is refused before it runs (store.ErrUnavailable,
// naming OOM): claims, presentations that claim, mints and attempt
// records; memory does not grow. The writes that store an answer already
// sent, renew a lease or free memory still run.
func TestFullRedisRefuses(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	running, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "before", Fingerprint: "fp"})
	if err != nil || running.Outcome != idempotency.Execute {
		t.Fatalf("claim before: %v %v", running.Outcome, err)
	}
	if _, err := redistest.Do(srv.Addr(), "SET", "fill", strings.Repeat("x", 2<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", strconv.FormatInt(usedMemory(t, srv.Addr())-64<<10, 10)); err != nil {
		t.Fatal(err)
	}
	before := usedMemory(t, srv.Addr())
	keysBefore, err := redistest.Do(srv.Addr(), "DBSIZE")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		_, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k" + strconv.Itoa(i), Fingerprint: "fp"})
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(Cause(err), "OOM") || mayHaveRun(err) {
			t.Fatalf("claim %d over maxmemory: %v (cause %q), want an OOM refusal that did not run", i, err, Cause(err))
		}
	}
	if _, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: "a", Method: "BOOK", Path: "/room", Key: "k", Fingerprint: "fp", ClaimIfMissing: true}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("pair resolution with a claim over maxmemory: %v, want ErrUnavailable", err)
	}
	c := storetest.NewFixture(t).Contract(t, time.Now(), "a", "/room", recipes.OriginGate, time.Hour)
	if _, _, err := set.Contracts.MintForPair(ctx, c, "optimistic"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("mint over maxmemory: %v, want ErrUnavailable", err)
	}
	if err := set.Attempts.Add(ctx, store.Attempt{ID: "att-oom"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("attempt record over maxmemory: %v, want ErrUnavailable", err)
	}
	// No key was written; used_memory moves only by what Redis keeps of
	// its own (client buffers, the scripts it loaded).
	if keys, _ := redistest.Do(srv.Addr(), "DBSIZE"); keys != keysBefore {
		t.Fatalf("DBSIZE went from %s to %s while every write was refused", keysBefore, keys)
	}
	if after := usedMemory(t, srv.Addr()); after > before+128<<10 {
		t.Fatalf("used_memory grew from %d to %d while every write was refused", before, after)
	}
	// A request that ran before still renews and stores its answer.
	if err := running.Claim.Renew(ctx, 0); err != nil {
		t.Fatalf("renew over maxmemory: %v", err)
	}
	if err := running.Claim.Complete(ctx, idempotency.Response{Status: 200, Body: []byte("ran")}); err != nil {
		t.Fatalf("complete over maxmemory: %v", err)
	}
	rep, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "before", Fingerprint: "fp"})
	if !errors.Is(err, store.ErrUnavailable) {
		// A replay is refused too (the claim script may write): the
		// retry gets 503 and its answer once Redis has room.
		t.Fatalf("replay over maxmemory: %v %v, want ErrUnavailable", rep.Outcome, err)
	}
	if _, err := redistest.Do(srv.Addr(), "DEL", "fill"); err != nil {
		t.Fatal(err)
	}
	rep, err = set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "before", Fingerprint: "fp"})
	if err != nil || rep.Outcome != idempotency.Replay || string(rep.Response.Body) != "ran" {
		t.Fatalf("once Redis has room: %v %v, want the answer stored over maxmemory replayed", rep.Outcome, err)
	}
}

// TestNoReleaseForUnsentClaims: a claim that could not reach Redis (no
// connection) was never sent, so nothing is released in the background
// for it.
func TestNoReleaseForUnsentClaims(t *testing.T) {
	srv := redistest.StartServer(t)
	addr := srv.Addr()
	srv.Stop()
	c, err := NewDegraded(Config{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set, err := c.Set(store.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if !errors.Is(err, store.ErrUnavailable) || mayHaveRun(err) {
		t.Fatalf("claim with Redis down: %v (may have run: %v), want ErrUnavailable never sent", err, mayHaveRun(err))
	}
	if n := c.pending.Load(); n != 0 {
		t.Fatalf("%d background releases pending for a claim never sent", n)
	}
}

// TestAnswerCallsGrouped: answer-path scripts made while groupFrom
// others are on the wire go together in the record writer's next batch
// (runNow: one write and one read for all of them), each with its own
// reply; a call made alone goes at once on its own. With Redis stalled, every
// grouped call returns at its own deadline (ErrUnavailable: not sent
// when still queued, else it may have run), and once Redis answers
// again none of them holds its key: the late claims wrote nothing.
func TestAnswerCallsGrouped(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	// groupWait 100 ms: the held batch below stays within it.
	c, set := newSet(t, Config{Addrs: []string{proxy.Addr()}, ReadTimeout: time.Second, WriteTimeout: time.Second})
	waitFree(t, set, "a", "warm-up", time.Second) // loads the claim script
	claimAll := func(prefix string, n int) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: fmt.Sprintf("%s-%d", prefix, i), Fingerprint: "fp"})
				if err == nil && cl.Outcome != idempotency.Execute {
					err = fmt.Errorf("outcome %v, want execute", cl.Outcome)
				}
				errs[i] = err
			}()
			if i == 0 {
				// The first is on the wire, held, before the others start.
				for c.answering.Load() < 1 {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		for c.answering.Load() < int64(n) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the others queued
		proxy.Release()
		wg.Wait()
		return errs
	}
	counts := func() (uint64, uint64) {
		c.recs.mu.Lock()
		defer c.recs.mu.Unlock()
		return c.recs.batched, c.recs.carried
	}

	// Alone: at once, on its own connection.
	calls0, batches0 := counts()
	if _, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: "alone", Fingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	if calls, _ := counts(); calls != calls0 {
		t.Fatalf("a claim made alone went through the record writer (%d calls)", calls-calls0)
	}

	// Eight together, held on the wire: up to groupFrom under
	// way, each goes on its own connection; the four after them share at
	// most two batches (the first taken at once, the rest behind it).
	proxy.Hold(true, false)
	for i, err := range claimAll("group", 8) {
		if err != nil {
			t.Fatalf("claim %d of 8: %v", i, err)
		}
	}
	calls, batches := counts()
	if want := uint64(8 - groupFrom); calls-calls0 != want || batches-batches0 > 2 {
		t.Fatalf("%d claims made while %d were on the wire went in %d grouped calls over %d batches; want %d in at most 2", 8-groupFrom, groupFrom, calls-calls0, batches-batches0, want)
	}
	for i := range 8 {
		if !keyExists(t, srv.Addr(), "a", fmt.Sprintf("group-%d", i)) {
			t.Fatalf("claim group-%d answered execute but holds no key", i)
		}
	}

	// Stalled: each returns by its own deadline, and none lands late.
	proxy.Hold(true, false)
	errs := make(chan error, 8)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: fmt.Sprintf("stalled-%d", i), Fingerprint: "fp"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("8 claims against a stalled Redis took %v; want about the timeouts", d)
	}
	for err := range errs {
		// Sent (it may have run) or, grouped and still queued when its
		// deadline came, not sent at all.
		if !errors.Is(err, store.ErrUnavailable) || mayHaveRun(err) == errors.Is(err, errNotSent) {
			t.Fatalf("claim during the stall: %v (may have run: %v), want ErrUnavailable, not sent or may have run", err, mayHaveRun(err))
		}
	}
	_ = c.Close() // no background release: the deadlines alone must hold
	time.Sleep(300 * time.Millisecond)
	proxy.Release()
	time.Sleep(300 * time.Millisecond)
	for i := range 8 {
		if keyExists(t, srv.Addr(), "a", fmt.Sprintf("stalled-%d", i)) {
			t.Fatalf("claim stalled-%d landed after its deadline: a retry would get 409 though nothing ran", i)
		}
	}
}

// TestGroupedCallLeftQueued (helper-99's defect 1): a grouped claim
// whose caller is cancelled while the claim waits for its batch is not
// sent at all (errNotSent, mayHaveRun false) and never lands: on the
// first version it returned "may have run" while still queued, its
// background release ran before it landed, and the key stayed in
// flight with no request behind it. One already on the wire when its
// caller is cancelled waits for its reply, as Script.Run does, and the
// caller holds the claim.
func TestGroupedCallLeftQueued(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	c, set := newSet(t, Config{Addrs: []string{proxy.Addr()}, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	waitFree(t, set, "a", "warm-up", time.Second)
	claim := func(ctx context.Context, key string) (store.Claimed, error) {
		return set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: key, Fingerprint: "fp"})
	}
	type result struct {
		cl  store.Claimed
		err error
	}
	start := func(ctx context.Context, key string, want int64) chan result {
		ch := make(chan result, 1)
		go func() {
			cl, err := claim(ctx, key)
			ch <- result{cl, err}
		}()
		for c.answering.Load() < want {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(30 * time.Millisecond)
		return ch
	}
	taken := func() int {
		c.recs.mu.Lock()
		defer c.recs.mu.Unlock()
		return len(c.recs.calls)
	}

	proxy.Hold(false, true) // commands reach Redis, replies wait
	direct := make(map[string]chan result)
	for i := range groupFrom {
		key := "direct-" + strconv.Itoa(i)
		direct[key] = start(context.Background(), key, int64(i+1))
	}
	onWire, cancelOnWire := context.WithCancel(context.Background())
	direct["on the wire, its caller cancelled"] = start(onWire, "on-wire", groupFrom+1) // the writer's batch, on the wire
	queuedCtx, cancelQueued := context.WithCancel(context.Background())
	queued := start(queuedCtx, "queued", groupFrom+2) // waits for the next batch
	if n := taken(); n != 1 {
		t.Fatalf("%d calls waiting for the next batch, want the one made while a batch was on the wire", n)
	}
	cancelQueued()
	r := <-queued
	if !errors.Is(r.err, store.ErrUnavailable) || !errors.Is(r.err, errNotSent) || mayHaveRun(r.err) {
		t.Fatalf("a queued claim whose caller left: %v (may have run: %v), want ErrUnavailable, not sent", r.err, mayHaveRun(r.err))
	}
	cancelOnWire()
	time.Sleep(100 * time.Millisecond)
	proxy.Release()
	for name, ch := range direct {
		if r := <-ch; r.err != nil || r.cl.Outcome != idempotency.Execute {
			t.Fatalf("claim %s: %+v %v, want execute", name, r.cl, r.err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if keyExists(t, srv.Addr(), "a", "queued") {
		t.Fatal("the claim left queued landed: its key is in flight with no request behind it")
	}
	waitFree(t, set, "a", "queued", time.Second)
}

// TestGroupedCallQueueFull (helper-99's defect 2): with the record
// writer's queue full (Redis stalled behind it), an answer-path call
// does not wait for room past its own deadline: it goes on its own
// connection, as a call made alone does, and fails by its deadline.
func TestGroupedCallQueueFull(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	c, set := newSet(t, Config{Addrs: []string{proxy.Addr()}, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 3 * time.Second})
	waitFree(t, set, "a", "warm-up", time.Second)
	proxy.Hold(true, false)
	c.recs.mu.Lock()
	for i := range MaxQueuedRecords {
		c.recs.queue = append(c.recs.queue, queuedRecord{key: c.prefix + "{r:" + strconv.Itoa(i) + "}", raw: []byte("{}"), retention: time.Minute})
	}
	c.recs.mu.Unlock()
	const n = groupFrom + 2 // the last two would be grouped
	errs := make(chan error, n)
	began := time.Now()
	for i := range n {
		key := "full-" + strconv.Itoa(i)
		go func() {
			_, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: key, Fingerprint: "fp"})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; !errors.Is(err, store.ErrUnavailable) || !mayHaveRun(err) {
			t.Fatalf("claim with the queue full and Redis stalled: %v (may have run: %v), want ErrUnavailable that may have run", err, mayHaveRun(err))
		}
	}
	// Waiting for room would have taken the write and read timeouts
	// (3.3 s); its own connection's read timeout is 0.3 s.
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("claims with the queue full took %v: they waited for room past their deadline", d)
	}
	proxy.Release()
}

// blackhole is a proxy to a healthy Redis whose next connection to send
// once armed has everything it sends dropped (a connection that
// stopped answering); the others flow.
type blackhole struct {
	l     net.Listener
	armed atomic.Bool
}

func startBlackhole(t *testing.T, target string) *blackhole {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{l: l}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = r.Close() })
			go func() { _, _ = io.Copy(c, r) }()
			go func() {
				dead := false
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && !dead && b.armed.CompareAndSwap(true, false) {
						dead = true
					}
					if n > 0 && !dead {
						if _, err := r.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return b
}

// TestGroupedCallDeadConnection (helper-100's defect 1): while the
// record writer's batch sits on a connection that stopped answering,
// Redis healthy on every other, answer-path calls do not wait for it:
// calls made then go on their own connections (stuck), and none fails.
// On the first version every claim made during the dead batch's read
// timeout failed (1 ok, 8 refused); before the grouping, none.
func TestGroupedCallDeadConnection(t *testing.T) {
	srv := redistest.StartServer(t)
	bh := startBlackhole(t, srv.Addr())
	const timeout = 500 * time.Millisecond
	c, set := newSet(t, Config{Addrs: []string{bh.l.Addr().String()}, ReadTimeout: timeout, WriteTimeout: timeout})
	waitFree(t, set, "a", "warm-up", time.Second)
	var wg sync.WaitGroup
	for range 16 { // idle connections in the pool
		wg.Add(1)
		go func() { defer wg.Done(); c.rdb.Ping(context.Background()) }()
	}
	wg.Wait()
	bh.armed.Store(true)
	if err := c.recs.add(queuedRecord{key: c.prefix + "{r:x}", raw: []byte("{}"), heads: c.prefix + "{a:x}:h", node: "n", head: "x 1", retention: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c.recs.hurry()
	for bh.armed.Load() {
		time.Sleep(time.Millisecond)
	}
	var ok, failed atomic.Int64
	stop := time.Now().Add(timeout)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000 && time.Now().Before(stop); i++ {
				cl, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: fmt.Sprintf("d%d-%d", w, i), Fingerprint: "fp"})
				if err != nil {
					failed.Add(1)
					t.Logf("worker %d: %v", w, err)
					continue
				}
				ok.Add(1)
				_ = cl.Claim.Abandon(context.Background())
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 || ok.Load() < 8 {
		t.Fatalf("during one dead connection's read timeout, Redis answering on every other: %d claims ok, %d failed; want none failed", ok.Load(), failed.Load())
	}
}
