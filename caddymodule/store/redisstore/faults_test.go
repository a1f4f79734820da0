package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
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

// TestLateSettleWritesNothing: an operator's settle (release or
// resolve) of an outcome-unknown key whose script reaches Redis only
// after the node stopped waiting (Redis stopped with the command in its
// socket) writes nothing when it finally runs: the operator was
// answered 503, nothing was recorded, and the key stays outcome-unknown
// for the settle to be sent again (helper-149: it took effect, and the
// second settle was refused).
func TestLateSettleWritesNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, action := range []string{"release", "resolve"} {
		t.Run(action, func(t *testing.T) {
			key := "late-settle-" + action
			_, set := newSet(t, Config{Addrs: []string{srv.Addr()}})
			got, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: key, Fingerprint: "fp", Lease: time.Millisecond})
			if err != nil || got.Outcome != idempotency.Execute {
				t.Fatalf("claim: %v, %v", got.Outcome, err)
			}
			time.Sleep(20 * time.Millisecond) // the lease ends: outcome-unknown
			c, late := newSet(t, Config{Addrs: []string{srv.Addr()}})
			// Load the settle script first: held, EVALSHA's NOSCRIPT
			// answer would go to a closed client, and EVAL never out.
			if _, err := late.Idempotency.Release(context.Background(), "a", "warm-up"); !errors.Is(err, idempotency.ErrNoRecord) {
				t.Fatalf("warm-up settle: %v, want ErrNoRecord", err)
			}
			srv.Pause()
			if action == "release" {
				_, err = late.Idempotency.Release(context.Background(), "a", key)
			} else {
				_, err = late.Idempotency.Resolve(context.Background(), "a", key, idempotency.Response{Status: 200, Body: []byte(`{"late":true}`)})
			}
			if !errors.Is(err, store.ErrUnavailable) {
				srv.Resume()
				t.Fatalf("%s during the stall: %v, want ErrUnavailable", action, err)
			}
			_ = c.Close()
			time.Sleep(300 * time.Millisecond)
			srv.Resume()
			time.Sleep(300 * time.Millisecond) // the held script runs now; it must write nothing
			st, found, err := set.Idempotency.Peek(context.Background(), "a", key)
			if err != nil || !found || st.State != idempotency.StateOutcomeUnknown {
				t.Fatalf("after the late %s: %+v found %v, %v; want the key still outcome-unknown", action, st, found, err)
			}
			if _, err := set.Idempotency.Release(context.Background(), "a", key); err != nil {
				t.Fatalf("the settle sent again: %v; want it to settle", err)
			}
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

// fillRedis puts the server at addr over its maxmemory: a 2 MiB value
// "fill", then maxmemory 64 KiB below what is used, so that (under
// noeviction) every write that may grow the data is refused with OOM.
// emptyRedis undoes it.
func fillRedis(t *testing.T, addr string) {
	t.Helper()
	if _, err := redistest.Do(addr, "SET", "fill", strings.Repeat("x", 2<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(addr, "CONFIG", "SET", "maxmemory", strconv.FormatInt(usedMemory(t, addr)-64<<10, 10)); err != nil {
		t.Fatal(err)
	}
}

// emptyRedis undoes fillRedis: no maxmemory, no "fill".
func emptyRedis(addr string) {
	_, _ = redistest.Do(addr, "CONFIG", "SET", "maxmemory", "0")
	_, _ = redistest.Do(addr, "DEL", "fill")
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
	fillRedis(t, srv.Addr())
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
