package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
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
