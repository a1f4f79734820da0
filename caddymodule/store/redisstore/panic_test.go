package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/internal/testwait"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// panicLine waits up to 5 s for the one ERROR line whose message
// starts with msg and returns its fields.
func panicLine(t *testing.T, logs *observer.ObservedLogs, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := logs.FilterMessageSnippet(msg).All()
		if len(lines) == 1 {
			f := lines[0].ContextMap()
			if _, ok := f["stack"].(string); !ok {
				t.Fatalf("%q has no stack: %v", msg, f)
			}
			return f
		}
		if len(lines) > 1 || time.Now().After(deadline) {
			t.Fatalf("%d lines %q, want 1: %v", len(lines), msg, logs.All())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queueSettle starts a settle (a script call the record writer's next
// batch carries, as a keyed answer's store is) that waits at most
// within, and returns its result's channel once the settle is queued
// or moved on reports true; it fails t after 5 s of neither.
func queueSettle(t *testing.T, c *Client, within time.Duration, movedOn func() bool) <-chan error {
	t.Helper()
	settled := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		_, err := c.recs.call(ctx, redis.NewScript("return 1"), []string{c.prefix + "{a:p}:x"})
		settled <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.recs.mu.Lock()
		n := len(c.recs.settles)
		c.recs.mu.Unlock()
		if n == 1 || movedOn() {
			return settled
		}
		if time.Now().After(deadline) {
			t.Fatal("the settle was not queued")
		}
	}
}

// mustFailUnavailable fails t unless settled delivers an error
// wrapping store.ErrUnavailable within 5 s; what names the settle.
func mustFailUnavailable(t *testing.T, settled <-chan error, what string) {
	t.Helper()
	select {
	case err := <-settled:
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%s: %v, want store.ErrUnavailable", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still waits", what)
	}
}

// TestPanicInRecordBatch: a panic while the record writer writes a
// batch (a defect; here a test hook before its pipeline) is logged at
// ERROR with the batch's counts instead of ending the process; the
// node's reader waiting for the batch's record returns (it is counted
// as ended, not written: it is missing from Redis), a settle in the
// batch fails with store.ErrUnavailable at once instead of waiting for
// its context, the next record is written as before, and Close still
// drains and returns.
func TestPanicInRecordBatch(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, Logger: zap.New(core), RecordBatchDelay: 50 * time.Millisecond})
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("%064d", i) }

	var armed atomic.Bool
	hook := func([]queuedRecord) {
		if armed.CompareAndSwap(true, false) {
			panic("record batch defect")
		}
	}
	testHookWriteBatch.Store(&hook)
	defer testHookWriteBatch.Store(nil)
	armed.Store(true)

	// One batch: a settle and a record gathered together.
	settled := queueSettle(t, c, 10*time.Second, func() bool { return !armed.Load() })
	if err := set.Records.Retain(ctx, store.Record{AuditID: id(1), AgentID: "p", NodeID: "n1", Compact: "e30.x."}); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	heads, err := set.Records.Heads(rctx, "p") // waits for the batch
	if err != nil || len(heads) != 0 {
		t.Fatalf("Heads after the batch panicked: %+v %v, want none (the record is not in Redis) and no wait", heads, err)
	}
	mustFailUnavailable(t, settled, "the settle of the batch that panicked")
	f := panicLine(t, logs, "panic writing a batch of records to Redis")
	if f["panic"] != "record batch defect" || f["records"] != int64(1) || f["settles"] != int64(1) {
		t.Fatalf("the line's fields: %v", f)
	}

	// The writer goes on: the next record is written and read.
	if err := set.Records.Retain(ctx, store.Record{AuditID: id(2), AgentID: "p", NodeID: "n1", Compact: "e30.x."}); err != nil {
		t.Fatalf("Retain after the panic: %v", err)
	}
	if r, ok, err := set.Records.Get(ctx, id(2)); err != nil || !ok || r.AuditID != id(2) {
		t.Fatalf("the record after the panic: %+v %v %v", r, ok, err)
	}

	// A batch that panics while the Client closes does not keep Close
	// from returning, nor the rest from being drained.
	armed.Store(true)
	if err := set.Records.Retain(ctx, store.Record{AuditID: id(3), AgentID: "p", NodeID: "n1", Compact: "e30.x."}); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	testwait.Returns(t, 10*time.Second, c.Close, "Close after a batch panicked")
	if n := logs.FilterMessageSnippet("panic writing a batch of records to Redis").Len(); n != 2 {
		t.Fatalf("%d batch panic lines, want 2", n)
	}
}

// TestPanicInRecordLoop: a panic in the record writer's loop outside a
// batch's own recovery (a defect; here a test hook as the loop wakes)
// is logged and the loop starts again a second later, kicked: the
// record queued when it panicked is written then, with no other record
// to wake the writer (helper-108's L1). A defect hit on every pass
// while the Client closes does not spin and hold Close for ever: the
// queue is dropped once (its settle fails with store.ErrUnavailable)
// and Close returns, after one line, the rest throttled (helper-108's
// M1: before, 140,845 lines in 2 s and no return).
func TestPanicInRecordLoop(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, Logger: zap.New(core), RecordBatchDelay: 10 * time.Millisecond})
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("%064d", i) }
	var armed, always atomic.Bool
	hook := func() {
		if always.Load() || armed.CompareAndSwap(true, false) {
			panic("record loop defect")
		}
	}
	testHookLoop.Store(&hook)
	defer testHookLoop.Store(nil)

	armed.Store(true)
	if err := set.Records.Retain(ctx, store.Record{AuditID: id(1), AgentID: "p", NodeID: "n1", Compact: "e30.x."}); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	panicLine(t, logs, "panic in the record writer's loop")
	found := false
	for deadline := time.Now().Add(5 * time.Second); !found && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n, err := c.rdb.Exists(ctx, records{c: c}.recordKey(id(1))).Result()
		if err != nil {
			t.Fatal(err)
		}
		found = n == 1
	}
	if !found {
		t.Fatal("the record queued when the loop panicked was not written after it started again")
	}
	if r, ok, err := set.Records.Get(ctx, id(1)); err != nil || !ok || r.AuditID != id(1) {
		t.Fatalf("the record: %+v %v %v", r, ok, err)
	}

	// A defect on every pass, as the Client closes with a settle queued.
	always.Store(true)
	settled := queueSettle(t, c, 20*time.Second, func() bool { return false })
	testwait.Returns(t, 10*time.Second, c.Close, "Close while the record writer's loop panics on every pass")
	mustFailUnavailable(t, settled, "the settle queued as the Client closed")
	// Every pass panicked, within a minute of the first: one line, the
	// rest counted (loopPanics).
	if n := logs.FilterMessageSnippet("panic in the record writer's loop").Len(); n != 1 {
		t.Fatalf("%d loop panic lines, want 1 (the rest throttled)", n)
	}
}

// TestPanicInBackgroundCall: a panic in a call the client retries in
// the background (a released claim, a contract released after its
// mint failed) is logged at ERROR with what it was doing instead of
// ending the process; it is not tried again, it no longer counts
// towards maxBackground, and Close returns.
func TestPanicInBackgroundCall(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	c, _ := newSet(t, Config{Addrs: []string{srv.Addr()}, Logger: zap.New(core)})
	var calls atomic.Int32
	c.background("testing a panic", time.Minute, 0, func(context.Context) error {
		calls.Add(1)
		panic("background defect")
	}, zap.String("agent_id", "a1"))
	f := panicLine(t, logs, "panic in a background call to Redis")
	if f["panic"] != "background defect" || f["doing"] != "testing a panic" || f["agent_id"] != "a1" {
		t.Fatalf("the line's fields: %v", f)
	}
	for i := 0; c.pending.Load() != 0 && i < 1000; i++ {
		time.Sleep(time.Millisecond)
	}
	if n := c.pending.Load(); n != 0 {
		t.Fatalf("%d background calls pending after the panic, want 0", n)
	}
	time.Sleep(2 * backgroundFirst)
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn called %d times, want 1 (not retried after a panic)", n)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestPanicBesideScript: in Cluster mode pipeScript sends the commands
// beside a script from a goroutine of its own; a panic there (a defect
// in what adds them) is logged at ERROR and returned as their error
// (the caller undoes the script's writes), and the script's reply still
// comes back. A single server stands in for the cluster: both calls go
// to it.
func TestPanicBesideScript(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	c, _ := newSet(t, Config{Addrs: []string{srv.Addr()}, Logger: zap.New(core)})
	c.cluster = true // before any call: pipeScript's concurrent path
	v, err := c.pipeScript(context.Background(), redis.NewScript("return 7"), []string{c.prefix + "{a:b}:x"}, nil, func(redis.Pipeliner) {
		panic("beside defect")
	})
	var p *recovered.Panic
	if !errors.As(err, &p) || p.Value != "beside defect" || v != int64(7) {
		t.Fatalf("pipeScript: %v %v, want the script's reply 7 and the panic as the error", v, err)
	}
	if f := panicLine(t, logs, "panic sending the writes beside a script"); f["panic"] != "beside defect" ||
		!strings.Contains(f["stack"].(string), "TestPanicBesideScript") {
		t.Fatalf("the line's fields: %v", f)
	}
}

// TestPanicInBesideWrites: in Cluster mode a synthesis's mint writes
// its owner index and the global live index from a goroutine of its own
// beside the script (startBeside); a panic there (a defect) is logged
// at ERROR with its stack, and the mint counts as one whose other
// writes failed: the request gets store.ErrUnavailable (503), the
// contract the script minted is released, the key it claimed executes
// on its next claim, and the process goes on. A single server stands in
// for the cluster, as in TestPanicBesideScript.
func TestPanicInBesideWrites(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	f := storetest.NewFixture(t)
	c, set := newRestoredSet(t, Config{Addrs: []string{srv.Addr()}, Logger: zap.New(core)}, f.Restorer(t))
	c.cluster = true // before any call: the mint's other writes go beside its script
	ctx := context.Background()
	const agent = "agent-p"
	hook := func() { panic("beside writes defect") }
	testHookBeside.Store(&hook)
	defer testHookBeside.Store(nil)
	m := f.Contract(t, time.Now(), agent, "/trip", recipes.OriginGate, time.Hour)
	_, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/trip", Key: "k", Fingerprint: "fp",
		ClaimIfFound: true, ClaimIfMissing: true, Mint: m, MintMode: store.ModeOptimistic})
	var p *recovered.Panic
	if !errors.Is(err, store.ErrUnavailable) || !errors.As(err, &p) || p.Value != "beside writes defect" {
		t.Fatalf("ResolvePair with a panic beside its script: %v, want store.ErrUnavailable carrying the panic", err)
	}
	if f := panicLine(t, logs, "panic writing a contract's indexes beside its mint"); f["panic"] != "beside writes defect" ||
		f["synthesis_id"] != m.SynthesisID || !strings.Contains(f["stack"].(string), "startBeside") {
		t.Fatalf("the line's fields: %v", f)
	}
	testHookBeside.Store(nil)
	eventually(t, 10*time.Second, func() (bool, string) {
		st, err := set.Contracts.State(ctx, m)
		return err == nil && st == recipes.StateReleased, fmt.Sprintf("the contract minted for a 503 is %q (%v), want released", st, err)
	})
	eventually(t, 10*time.Second, func() (bool, string) {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agent, Key: "k", Fingerprint: "fp"})
		return err == nil && got.Outcome == idempotency.Execute, fmt.Sprintf("the key of a 503: %v %v, want it to execute", got.Outcome, err)
	})
	// The next synthesis, the defect gone, mints.
	n := f.Contract(t, time.Now(), agent, "/trip2", recipes.OriginGate, time.Hour)
	r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/trip2", Mint: n, MintMode: store.ModeOptimistic})
	if err != nil || r.Minted == nil || r.Minted.Err != nil || r.Minted.State != recipes.StateActive {
		t.Fatalf("a synthesis after the panic: %+v %v", r, err)
	}
}
