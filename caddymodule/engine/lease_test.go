package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// panickingSink is an EventSink that panics: a defect below Serve after
// the request's Idempotency-Key was claimed.
type panickingSink struct{}

func (panickingSink) Emit(string, map[string]any) { panic("event sink defect") }

// TestPanicStopsLeaseRenewal: a request that panics while it holds its
// Idempotency-Key's claim (here the lifecycle event of the contract it
// minted) no longer has the claim renewed for as long as the process
// lives: Serve stops the renewer on the way out, so the lease ends as a
// stopped node's does (the key answers 409 outcome-unknown after it,
// never in flight for ever), and the node no longer lists the claim as
// running. Before, only the answer's write stopped it.
func TestPanicStopsLeaseRenewal(t *testing.T) {
	te := newTestEngine(t)
	te.events = panickingSink{}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the synthesis did not reach the panicking event sink")
			}
		}()
		te.do(t, "LOOKUP", "/item/p1", map[string]any{"parameters": map[string]any{"item_id": "1"}},
			"Allow-RCNS", "true", "Idempotency-Key", "panics")
	}()
	if claims, n := te.st.inflight.list(10); n != 0 {
		t.Fatalf("after the panic %d claims are still listed as running (and renewed): %+v", n, claims)
	}
	// It had reached execution (the contract was minted and its event
	// emitted): the key stays claimed, not released for a second run.
	again := te.do(t, "LOOKUP", "/item/p1", map[string]any{"parameters": map[string]any{"item_id": "1"}},
		"Allow-RCNS", "true", "Idempotency-Key", "panics")
	if again.Status != 409 {
		t.Fatalf("a repeat of the key of a request that panicked after it ran: %s, want 409 (in flight until the lease ends)", again)
	}
}

// panicOnceLimiters gives the store's limiters, the invocation budget's
// wrapped to panic on its first Allow while armed: a defect below Serve
// after the request's Idempotency-Key was claimed and before anything
// ran.
type panicOnceLimiters struct {
	store.Limiters
	armed *atomic.Bool
}

func (p panicOnceLimiters) Limiter(b ratelimit.Budget, maxAgents int64) (store.Limiter, error) {
	l, err := p.Limiters.Limiter(b, maxAgents)
	if err != nil || b.Name != ratelimit.BudgetInvocation {
		return l, err
	}
	return panicOnceLimiter{Limiter: l, armed: p.armed}, nil
}

type panicOnceLimiter struct {
	store.Limiter
	armed *atomic.Bool
}

func (p panicOnceLimiter) Allow(ctx context.Context, agentID string) (ratelimit.Decision, error) {
	if p.armed.CompareAndSwap(true, false) {
		panic("invocation limiter defect")
	}
	return p.Limiter.Allow(ctx, agentID)
}

// TestPanicBeforeRunReleasesKey: a request that panics after claiming
// its Idempotency-Key but before it ran anything (here in the
// invocation budget's limiter) has its claim released on the way out,
// as a refusal's is: the agent's retry with the same key runs at once
// (200, not a replay), and the one after it replays that answer. Before,
// the key answered 409 in flight until the lease ended and
// outcome-unknown for the rest of its window.
func TestPanicBeforeRunReleasesKey(t *testing.T) {
	armed := &atomic.Bool{}
	te := newTestEngineSet(t, func(s store.Set) store.Set {
		s.Limiters = panicOnceLimiters{Limiters: s.Limiters, armed: armed}
		return s
	}, func(c *Config) { c.InvocationRateLimitPerMinute = 1e6 })
	armed.Store(true)
	func() {
		defer func() {
			if p := recover(); p != "invocation limiter defect" {
				t.Fatalf("recovered %v, want the limiter's panic, unchanged", p)
			}
		}()
		te.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "panics-first")
	}()
	retry := te.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "panics-first")
	if retry.Status != 200 || retry.header("Idempotent-Replayed") != "" {
		t.Fatalf("the retry of a key whose request panicked before it ran: %s (replayed %q), want it run: 200", retry, retry.header("Idempotent-Replayed"))
	}
	replay := te.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "panics-first")
	if replay.Status != 200 || replay.header("Idempotent-Replayed") != "true" {
		t.Fatalf("the next repeat: %s (replayed %q), want the retry's answer replayed", replay, replay.header("Idempotent-Replayed"))
	}
}

// TestPanicInAnswerWriteReleasesKey: a keyed gate request refused
// before anything ran (464, no recipe) that panics while its answer is
// being written, in the negotiation record written before the claim is
// settled, has its key released all the same: the retry is answered
// 464 again, not 409 in flight then outcome-unknown (helper-105's L1:
// the answer counted as written before its claim was settled).
func TestPanicInAnswerWriteReleasesKey(t *testing.T) {
	te := newTestEngine(t)
	refuse := func(key string) *testAnswer {
		return te.do(t, "LOOKUP", "/nothing/here", map[string]any{"parameters": map[string]any{}}, "Allow-RCNS", "true", "Idempotency-Key", key)
	}
	if a := refuse("baseline"); a.Status != 464 {
		t.Fatalf("the refusal without the defect: %s, want 464", a)
	}
	var armed atomic.Bool
	log, err := records.OpenLog(records.LogOptions{Dir: t.TempDir(), Fsync: records.FsyncOff, Now: func() time.Time {
		if armed.CompareAndSwap(true, false) {
			panic("negotiation log defect")
		}
		return time.Now()
	}})
	if err != nil {
		t.Fatal(err)
	}
	te.st.records.mu.Lock()
	engineLog := te.st.records.log
	te.st.records.log = log
	te.st.records.mu.Unlock()
	t.Cleanup(func() { // before the engine's: it closes its own log
		te.st.records.mu.Lock()
		te.st.records.log = engineLog
		te.st.records.mu.Unlock()
		_ = log.Close()
	})
	armed.Store(true)
	func() {
		defer func() {
			if p := recover(); p != "negotiation log defect" {
				t.Fatalf("recovered %v, want the log's panic", p)
			}
		}()
		refuse("k-panics")
	}()
	if a := refuse("k-panics"); a.Status != 464 {
		t.Fatalf("the retry of the key: %s, want 464 as the first refusal (its claim released)", a)
	}
}

// faultyIdempotency is the memory store's Idempotency-Key store with
// two defects, each armed once: Len panics (the gauge refreshed after a
// claim, before the request takes the claim over), and the Abandon of
// a claim it hands out panics.
type faultyIdempotency struct {
	store.Idempotency
	lenPanics, abandonPanics *atomic.Bool
}

func (f faultyIdempotency) Len(ctx context.Context) (int, error) {
	if f.lenPanics.CompareAndSwap(true, false) {
		panic("idempotency gauge defect")
	}
	return f.Idempotency.Len(ctx)
}

func (f faultyIdempotency) Claim(ctx context.Context, req idempotency.ClaimRequest) (store.Claimed, error) {
	c, err := f.Idempotency.Claim(ctx, req)
	if c.Claim != nil {
		c.Claim = faultyClaim{Claim: c.Claim, panics: f.abandonPanics}
	}
	return c, err
}

type faultyClaim struct {
	store.Claim
	panics *atomic.Bool
}

func (c faultyClaim) Abandon(ctx context.Context) error {
	if c.panics.CompareAndSwap(true, false) {
		panic("abandon defect")
	}
	return c.Claim.Abandon(ctx)
}

// newFaultyIdempotencyEngine is a test engine whose Idempotency-Key
// store is faultyIdempotency over the memory store's, and whose
// invocation limiter panics once while limiterPanics is armed.
func newFaultyIdempotencyEngine(t *testing.T) (te *testEngine, lenPanics, abandonPanics, limiterPanics *atomic.Bool) {
	lenPanics, abandonPanics, limiterPanics = &atomic.Bool{}, &atomic.Bool{}, &atomic.Bool{}
	te = newTestEngineSet(t, func(s store.Set) store.Set {
		s.Idempotency = faultyIdempotency{Idempotency: s.Idempotency, lenPanics: lenPanics, abandonPanics: abandonPanics}
		s.Limiters = panicOnceLimiters{Limiters: s.Limiters, armed: limiterPanics}
		return s
	}, func(c *Config) { c.InvocationRateLimitPerMinute = 1e6 })
	return te, lenPanics, abandonPanics, limiterPanics
}

// mustPanic runs f and fails t unless f panics with want.
func mustPanic(t *testing.T, want any, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != want {
			t.Fatalf("recovered %v, want %v", p, want)
		}
	}()
	f()
}

// TestPanicInClaimReleasesKey: a panic after the store granted the
// Idempotency-Key's claim and before the request took it over (here in
// the gauge refreshed between the two) releases the key as any other
// panic before the request ran: the retry runs (200, not replayed).
// Before, the claim lived only in a local variable there, so nothing
// released it: the retry got 409 in flight, then outcome-unknown for a
// day (helper-106's L7).
func TestPanicInClaimReleasesKey(t *testing.T) {
	te, lenPanics, _, _ := newFaultyIdempotencyEngine(t)
	lenPanics.Store(true)
	mustPanic(t, "idempotency gauge defect", func() {
		te.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "claim-panics")
	})
	retry := te.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "claim-panics")
	if retry.Status != 200 || retry.header("Idempotent-Replayed") != "" {
		t.Fatalf("the retry of a key whose request panicked while claiming it: %s (replayed %q), want it run: 200", retry, retry.header("Idempotent-Replayed"))
	}
}

// TestPanicInReleaseStillEndsRun: when the release of an unrun
// request's claim panics in its turn (a second defect, in the store's
// Abandon), that panic is logged and stopped in the release: the
// request's own panic reaches the door's server unchanged (not replaced
// by the second), and Serve's other clean-ups run, so the request no
// longer counts as a keyed run (a reload that changes the store would
// otherwise answer keyed requests 503 for ever). Before, the second
// panic replaced the first and skipped the rest (helper-106's L6,
// helper-108's L2).
func TestPanicInReleaseStillEndsRun(t *testing.T) {
	te, _, abandonPanics, limiterPanics := newFaultyIdempotencyEngine(t)
	core, logs := observer.New(zap.ErrorLevel)
	te.logger = zap.New(core) // before any request: nothing reads it yet
	limiterPanics.Store(true)
	abandonPanics.Store(true)
	mustPanic(t, "invocation limiter defect", func() {
		te.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "release-panics")
	})
	keyedRuns.Lock()
	runs := len(keyedRuns.byName[te.Name])
	keyedRuns.Unlock()
	if runs != 0 {
		t.Fatalf("after the panics %d keyed runs of the engine are still counted, want 0", runs)
	}
	lines := logs.FilterMessageSnippet("panic releasing the Idempotency-Key claim").All()
	if len(lines) != 1 || lines[0].ContextMap()["panic"] != "abandon defect" {
		t.Fatalf("the release's panic logged %+v, want one line with its value", lines)
	}
}

// renewPanicClaim is a claim whose Renew panics, counting its calls.
type renewPanicClaim struct {
	store.Claim
	renews *atomic.Int32
}

func (c renewPanicClaim) Key() (string, string) { return "agent-r", "key-r" }
func (c renewPanicClaim) ClaimedAt() time.Time  { return time.Unix(1, 0) }
func (c renewPanicClaim) Renew(context.Context, time.Duration) error {
	c.renews.Add(1)
	panic("renew defect")
}

// TestPanicInRenewalStopsRenewals: a panic in a lease renewal, which
// runs on a timer's goroutine outside any request, is logged at ERROR
// with the key and its stack instead of ending the process, and that
// claim's renewals stop (its lease then ends as a stopped node's does);
// the request's stop still works after it.
func TestPanicInRenewalStopsRenewals(t *testing.T) {
	te := newTestEngine(t)
	core, logs := observer.New(zap.ErrorLevel)
	te.logger = zap.New(core) // before any request: nothing reads it yet
	renews := &atomic.Int32{}
	x := &exchange{h: te.Engine, in: &agtp.Request{}, agentID: "agent-r", method: "FETCH", path: "/items/1"}
	r := te.renewLease(x, renewPanicClaim{renews: renews}, time.Millisecond) // renewed every second
	defer r.stop()
	deadline := time.Now().Add(5 * time.Second)
	for logs.FilterMessageSnippet("panic renewing an Idempotency-Key lease").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no ERROR line for the renewal's panic after 5s (%d renewals)", renews.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	line := logs.FilterMessageSnippet("panic renewing an Idempotency-Key lease").All()[0]
	f := line.ContextMap()
	if f["agent_id"] != "agent-r" || f["key"] != "key-r" || f["request"] != "FETCH /items/1" || f["panic"] != "renew defect" ||
		!strings.Contains(f["stack"].(string), "Renew") {
		t.Fatalf("the line's fields: %v", f)
	}
	time.Sleep(1500 * time.Millisecond) // past the next renewal it would have made
	if n := renews.Load(); n != 1 {
		t.Fatalf("%d renewals after the panic, want 1 (renewals stop)", n)
	}
	if _, n := te.st.inflight.list(10); n != 1 {
		t.Fatalf("%d claims listed as running, want 1 (the request runs on)", n)
	}
	r.stop()
	if _, n := te.st.inflight.list(10); n != 0 {
		t.Fatalf("%d claims listed after stop, want 0", n)
	}
}
