// Package storetest is the test suite every store implementation
// passes (package store's memory store, package redisstore against real
// Redis servers): the idempotency rules of RCNS §12.2 (replay, 409,
// 422, the 461 preview a confirmation takes over, fencing), the rate
// limits of §12.1, the contract lifecycle of §14 with its bounds and
// tombstones, the replay cache, attempt records and retained
// Attribution-Records; each seen from two nodes sharing the store, and
// the exactly-once claim under concurrency. Expiry runs on a fake clock.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Config is what a store under test is built from.
type Config struct {
	// Limits bound the store.
	Limits store.Limits
	// Now is the fake clock the test advances.
	Now func() time.Time
	// Restorer rebuilds captured plans on the second node (the memory
	// store ignores it).
	Restorer *recipes.Restorer
}

// Harness builds the store under test.
type Harness struct {
	// New returns two nodes' views of one fresh, empty store (the memory
	// store returns its one Set twice).
	New func(t *testing.T, cfg Config) (a, b store.Set)
	// Totals says the store enforces the gateway-wide bounds
	// (idempotency MaxRecords, MaxContracts) and counts idempotency
	// records. When false (Redis Cluster) the suite checks that a claim
	// or mint over the total is still served and that Len reports -1.
	Totals bool
	// ClockDrivesRetention says retained records and heads expire on
	// the fake clock (the memory store); the Redis store's expire on
	// Redis's clock, so the suite does not advance past them there.
	ClockDrivesRetention bool
}

// Clock is a fake clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at the current time, to the millisecond.
func NewClock() *Clock { return &Clock{now: time.Now().Truncate(time.Millisecond)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var ctx = context.Background()

// Agent ids used by the suite (registry ids are 64 lowercase hex).
var (
	agentA = strings.Repeat("a", 64)
	agentB = strings.Repeat("b", 64)
)

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	t.Run("idempotency", func(t *testing.T) { testIdempotency(t, h) })
	t.Run("idempotency-lease-and-fencing", func(t *testing.T) { testLeaseAndFencing(t, h) })
	t.Run("idempotency-renew", func(t *testing.T) { testRenew(t, h) })
	t.Run("idempotency-settle", func(t *testing.T) { testSettle(t, h) })
	t.Run("idempotency-confirming", func(t *testing.T) { testConfirming(t, h) })
	t.Run("idempotency-claimed-at", func(t *testing.T) { testClaimedAt(t, h) })
	t.Run("idempotency-bounds", func(t *testing.T) { testIdempotencyBounds(t, h) })
	t.Run("idempotency-exactly-once", func(t *testing.T) { testExactlyOnce(t, h) })
	t.Run("rate-limit", func(t *testing.T) { testRateLimit(t, h) })
	t.Run("contracts", func(t *testing.T) { testContracts(t, h) })
	t.Run("present", func(t *testing.T) { testPresent(t, h) })
	t.Run("resolve-pair", func(t *testing.T) { testResolvePair(t, h) })
	t.Run("contracts-expiry", func(t *testing.T) { testContractExpiry(t, h) })
	t.Run("contracts-bounds", func(t *testing.T) { testContractBounds(t, h) })
	t.Run("replay-cache", func(t *testing.T) { testReplay(t, h) })
	t.Run("attempts", func(t *testing.T) { testAttempts(t, h) })
	t.Run("records", func(t *testing.T) { testRecords(t, h) })
	t.Run("tasks", func(t *testing.T) { testTasks(t, h) })
	t.Run("task updates", func(t *testing.T) { testTaskUpdates(t, h) })
	t.Run("task polls", func(t *testing.T) { testTaskPolls(t, h) })
	t.Run("negotiations", func(t *testing.T) { testNegotiations(t, h) })
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func claim(t *testing.T, s store.Set, agent, key, fp string) store.Claimed {
	t.Helper()
	return must[store.Claimed](t)(s.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agent, Key: key, Fingerprint: fp}))
}

func wantOutcome(t *testing.T, got store.Claimed, want idempotency.Outcome) {
	t.Helper()
	if got.Outcome != want {
		t.Fatalf("outcome = %v, want %v", got.Outcome, want)
	}
	if (got.Claim != nil) != (want == idempotency.Execute) {
		t.Fatalf("outcome %v with claim %v", got.Outcome, got.Claim)
	}
}

func testIdempotency(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now})
	first := claim(t, a, agentA, "k1", "fp1")
	wantOutcome(t, first, idempotency.Execute)
	if ag, k := first.Claim.Key(); ag != agentA || k != "k1" || first.Claim.Token() == "" {
		t.Fatalf("claim key = %q %q token %q", ag, k, first.Claim.Token())
	}
	wantOutcome(t, claim(t, b, agentA, "k1", "fp1"), idempotency.InFlight)
	wantOutcome(t, claim(t, b, agentA, "k1", "fp2"), idempotency.Mismatch)
	wantOutcome(t, claim(t, b, agentB, "k1", "fp2"), idempotency.Execute) // keys are per agent
	resp := idempotency.Response{Status: 201, Body: []byte(`{"id":1}`),
		Header:   map[string]string{"content-type": "application/json", "Location": "/r/1", "X-Other": "dropped"},
		Contract: idempotency.ContractRef{SynthesisID: "syn-1", ContractHash: strings.Repeat("c", 64), NegotiationOrigin: recipes.OriginGate}}
	if err := first.Claim.Complete(ctx, resp); err != nil {
		t.Fatal(err)
	}
	// Settled: later calls are no-ops.
	if err := first.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Claim.Complete(ctx, idempotency.Response{Status: 500}); err != nil {
		t.Fatalf("a second Complete: %v, want nil (no-op)", err)
	}
	rep := claim(t, b, agentA, "k1", "fp1")
	wantOutcome(t, rep, idempotency.Replay)
	r := rep.Response
	if r.Status != 201 || !bytes.Equal(r.Body, resp.Body) || r.Contract != resp.Contract || r.Previewed != "" {
		t.Fatalf("replayed %+v, want %+v", r, resp)
	}
	if len(r.Header) != 2 || r.Header["Content-Type"] != "application/json" || r.Header["Location"] != "/r/1" {
		t.Fatalf("replayed header = %v, want Content-Type and Location only", r.Header)
	}
	wantOutcome(t, claim(t, a, agentA, "k1", "fp9"), idempotency.Mismatch)

	// Abandon frees the key for the next request.
	ab := claim(t, a, agentA, "k2", "fp1")
	wantOutcome(t, ab, idempotency.Execute)
	if err := ab.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	next := claim(t, b, agentA, "k2", "fp2")
	wantOutcome(t, next, idempotency.Execute)
	if err := next.Claim.Complete(ctx, idempotency.Response{Status: 204}); err != nil {
		t.Fatal(err)
	}
	got := claim(t, a, agentA, "k2", "fp2")
	if got.Outcome != idempotency.Replay || got.Response.Status != 204 || len(got.Response.Body) != 0 {
		t.Fatalf("replay of a 204 = %v %+v", got.Outcome, got.Response)
	}
	if l := a.Idempotency.Limits(); l.Window != idempotency.DefaultWindow || l.MaxPerAgent != idempotency.DefaultMaxPerAgent {
		t.Fatalf("default limits = %+v", l)
	}
}

// testLeaseAndFencing: a claim holds its key for its lease; a lease
// that ends with no answer (the node died mid-plan) is outcome-unknown,
// never free, until the window from its end; the holder's late Complete
// still stores its answer; a claim whose record was dropped stores
// nothing over a newer claim (fencing).
func testLeaseAndFencing(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now, Limits: store.Limits{Idempotency: idempotency.Limits{Window: time.Hour, Lease: 2 * time.Minute}}})
	holder := idempotency.Holder{Node: "node-a", What: "BOOK /room"}
	old := must[store.Claimed](t)(a.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agentA, Key: "k", Fingerprint: "fp", Holder: holder}))
	wantOutcome(t, old, idempotency.Execute)
	claimedAt := clock.Now()
	clock.Advance(2*time.Minute - time.Second)
	in := claim(t, b, agentA, "k", "fp")
	wantOutcome(t, in, idempotency.InFlight)
	if in.Hold == nil || in.Hold.Node != "node-a" || in.Hold.What != "BOOK /room" || !in.Hold.ClaimedAt.Equal(claimedAt) ||
		in.Hold.LeaseEnds.Sub(clock.Now()) != time.Second {
		t.Fatalf("in flight: hold %+v, want node-a's, claimed at %v, 1 s of lease left", in.Hold, claimedAt)
	}
	// The claim knows the hold it left (the engine tells its own running
	// claim from a later one of the key by it).
	if got := old.Claim.ClaimedAt(); !got.Equal(in.Hold.ClaimedAt) {
		t.Fatalf("the claim's ClaimedAt %v, the hold read %v", got, in.Hold.ClaimedAt)
	}
	clock.Advance(time.Second)
	un := claim(t, b, agentA, "k", "fp")
	wantOutcome(t, un, idempotency.OutcomeUnknown)
	if un.Hold == nil || un.Hold.Node != "node-a" || !un.Hold.LeaseEnds.Equal(clock.Now()) {
		t.Fatalf("outcome-unknown: hold %+v", un.Hold)
	}
	wantOutcome(t, claim(t, a, agentA, "k", "other"), idempotency.Mismatch)
	st, ok := peek(t, a, agentA, "k")
	if !ok || st.State != idempotency.StateOutcomeUnknown || st.Hold == nil || st.Hold.Node != "node-a" {
		t.Fatalf("Peek = %+v %v, want outcome-unknown by node-a", st, ok)
	}
	// Outcome-unknown for the window from the end of the lease.
	clock.Advance(time.Hour - time.Second)
	wantOutcome(t, claim(t, b, agentA, "k", "fp"), idempotency.OutcomeUnknown)
	clock.Advance(time.Second)
	// Dropped: the key is free; the old claim stores nothing over the
	// newer one (its token no longer matches), nor renews it.
	newer := claim(t, b, agentA, "k", "fp")
	wantOutcome(t, newer, idempotency.Execute)
	if newer.Claim.Token() == old.Claim.Token() {
		t.Fatal("two claims of one key share a fencing token")
	}
	if err := old.Claim.Renew(ctx, 0); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Renew of a claim that lost its key: %v, want ErrClaimLost", err)
	}
	if err := old.Claim.Complete(ctx, idempotency.Response{Status: 500, Body: []byte("stale")}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete of a claim that lost its key: %v, want ErrClaimLost", err)
	}
	if err := old.Claim.Complete(ctx, idempotency.Response{Status: 500, Body: []byte("stale")}); err != nil {
		t.Fatalf("a second Complete of a lost claim: %v, want nil (no-op)", err)
	}
	if err := old.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, claim(t, a, agentA, "k", "fp"), idempotency.InFlight)
	// A lease that ended, then the holder's late Complete: stored and
	// replayed (the request did run).
	clock.Advance(3 * time.Minute)
	wantOutcome(t, claim(t, a, agentA, "k", "fp"), idempotency.OutcomeUnknown)
	if err := newer.Claim.Complete(ctx, idempotency.Response{Status: 200, Body: []byte("new")}); err != nil {
		t.Fatalf("the holder's Complete after its lease: %v", err)
	}
	got := claim(t, a, agentA, "k", "fp")
	if got.Outcome != idempotency.Replay || string(got.Response.Body) != "new" {
		t.Fatalf("after the late Complete: %v %+v, want its answer", got.Outcome, got.Response)
	}
	// The window counts from Complete.
	clock.Advance(time.Hour - time.Second)
	wantOutcome(t, claim(t, b, agentA, "k", "fp"), idempotency.Replay)
	clock.Advance(time.Second)
	late := claim(t, b, agentA, "k", "other")
	wantOutcome(t, late, idempotency.Execute)
	// A claim refused before it ran releases its key, also after its
	// lease ended: nothing ran.
	clock.Advance(5 * time.Minute)
	if err := late.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, claim(t, b, agentA, "k", "fp"), idempotency.Execute)
}

// peek is Idempotency.Peek, failing the test on an error.
func peek(t *testing.T, s store.Set, agent, key string) (idempotency.KeyState, bool) {
	t.Helper()
	st, ok, err := s.Idempotency.Peek(ctx, agent, key)
	if err != nil {
		t.Fatal(err)
	}
	return st, ok
}

// testRenew: the holder renews its lease while its request runs, past
// several leases, on either node; a claim's own lease comes from its
// request when set.
func testRenew(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now, Limits: store.Limits{Idempotency: idempotency.Limits{Window: time.Hour, Lease: time.Minute}}})
	c := claim(t, a, agentA, "k", "fp")
	wantOutcome(t, c, idempotency.Execute)
	for range 5 {
		clock.Advance(50 * time.Second)
		if err := c.Claim.Renew(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	wantOutcome(t, claim(t, b, agentA, "k", "fp"), idempotency.InFlight)
	if err := c.Claim.Complete(ctx, idempotency.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if err := c.Claim.Renew(ctx, 0); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Renew after Complete: %v, want ErrClaimLost", err)
	}
	wantOutcome(t, claim(t, b, agentA, "k", "fp"), idempotency.Replay)
	// A claim that names its lease holds for it.
	short := must[store.Claimed](t)(b.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agentA, Key: "short", Fingerprint: "fp", Lease: 5 * time.Second}))
	wantOutcome(t, short, idempotency.Execute)
	clock.Advance(6 * time.Second)
	wantOutcome(t, claim(t, a, agentA, "short", "fp"), idempotency.OutcomeUnknown)
	// A renewal brings it back in flight: the holder still runs.
	if err := short.Claim.Renew(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, claim(t, a, agentA, "short", "fp"), idempotency.InFlight)

	// A claim whose record is gone (released while its holder was taken
	// for dead; with Redis, lost in a restart) takes its key again when
	// renewed: the holder still runs. After Abandon, a renewal never
	// brings the key back.
	gone := claim(t, a, agentA, "gone", "fp")
	clock.Advance(2 * time.Minute)
	if _, err := b.Idempotency.Release(ctx, agentA, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := gone.Claim.Renew(ctx, 0); err != nil {
		t.Fatalf("Renew of a claim whose record is gone: %v, want it written again", err)
	}
	wantOutcome(t, claim(t, b, agentA, "gone", "fp"), idempotency.InFlight)
	if err := gone.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	if err := gone.Claim.Renew(ctx, 0); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Renew after Abandon: %v, want ErrClaimLost", err)
	}
	wantOutcome(t, claim(t, b, agentA, "gone", "fp"), idempotency.Execute)
	// A key another claim took meanwhile is not taken back.
	slow := claim(t, a, agentA, "taken", "fp")
	clock.Advance(2 * time.Minute)
	if _, err := b.Idempotency.Release(ctx, agentA, "taken"); err != nil {
		t.Fatal(err)
	}
	newer := claim(t, b, agentA, "taken", "fp")
	wantOutcome(t, newer, idempotency.Execute)
	if err := slow.Claim.Renew(ctx, 0); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Renew of a claim whose key another claim holds: %v, want ErrClaimLost", err)
	}
	if err := newer.Claim.Complete(ctx, idempotency.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
}

// testSettle: the operator's release and resolve of an outcome-unknown
// key, on either node; a key still running or answered is refused.
func testSettle(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now, Limits: store.Limits{Idempotency: idempotency.Limits{Window: time.Hour, Lease: time.Minute}}})
	if _, err := b.Idempotency.Release(ctx, agentA, "none"); !errors.Is(err, idempotency.ErrNoRecord) {
		t.Fatalf("Release of an unknown key: %v, want ErrNoRecord", err)
	}
	run := claim(t, a, agentA, "run", "fp")
	if st, err := b.Idempotency.Release(ctx, agentA, "run"); !errors.Is(err, idempotency.ErrLeaseLive) || st.State != idempotency.StateInFlight {
		t.Fatalf("Release of a running key: %+v %v, want ErrLeaseLive", st, err)
	}
	done := claim(t, a, agentA, "done", "fp")
	if err := done.Claim.Complete(ctx, idempotency.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Idempotency.Resolve(ctx, agentA, "done", idempotency.Response{Status: 200}); !errors.Is(err, idempotency.ErrAnswered) || st.Status != 201 {
		t.Fatalf("Resolve of an answered key: %+v %v, want ErrAnswered with its status", st, err)
	}
	stuck := must[store.Claimed](t)(a.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agentA, Key: "stuck", Fingerprint: "fp",
		Holder: idempotency.Holder{Node: "node-a", What: "BOOK /room"}}))
	ran := claim(t, a, agentA, "ran", "fp")
	clock.Advance(2 * time.Minute)
	st, err := b.Idempotency.Release(ctx, agentA, "stuck")
	if err != nil || st.State != idempotency.StateOutcomeUnknown || st.Hold == nil || st.Hold.Node != "node-a" {
		t.Fatalf("Release of an outcome-unknown key: %+v %v", st, err)
	}
	if err := stuck.Claim.Complete(ctx, idempotency.Response{Status: 200}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete of a released claim: %v, want ErrClaimLost", err)
	}
	again := claim(t, a, agentA, "stuck", "fp")
	wantOutcome(t, again, idempotency.Execute)
	if err := again.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	answer := idempotency.Response{Status: 200, Body: []byte(`{"resolved":true}`), Header: map[string]string{"Content-Type": "application/json"}}
	if _, err := a.Idempotency.Resolve(ctx, agentA, "ran", answer); err != nil {
		t.Fatal(err)
	}
	rep := claim(t, b, agentA, "ran", "fp")
	if rep.Outcome != idempotency.Replay || rep.Response.Status != 200 || string(rep.Response.Body) != `{"resolved":true}` {
		t.Fatalf("after Resolve: %v %+v", rep.Outcome, rep.Response)
	}
	if st, ok := peek(t, b, agentA, "ran"); !ok || st.State != idempotency.StateAnswered || st.Status != 200 {
		t.Fatalf("Peek after Resolve = %+v %v", st, ok)
	}
	if err := ran.Claim.Complete(ctx, idempotency.Response{Status: 500}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete of a resolved claim: %v, want ErrClaimLost", err)
	}
	if err := run.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
}

func testConfirming(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now, Limits: store.Limits{Idempotency: idempotency.Limits{Window: time.Hour, Lease: time.Hour}}})
	conf := func(s store.Set, key, fp, sid string, pending bool) store.Claimed {
		t.Helper()
		return must[store.Claimed](t)(s.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agentA, Key: key, Fingerprint: fp, SynthesisID: sid, Pending: pending}))
	}
	gate := claim(t, a, agentA, "k", "fp")
	wantOutcome(t, gate, idempotency.Execute)
	preview := idempotency.Response{Status: idempotency.PreviewStatus, Body: []byte(`{"status":461}`), Previewed: "syn-1",
		Header: map[string]string{"Content-Type": "application/vnd.agtp.endpoint+json"}}
	if err := gate.Claim.Complete(ctx, preview); err != nil {
		t.Fatal(err)
	}
	clock.Advance(50 * time.Minute)

	wantOutcome(t, conf(b, "k", "fp", "syn-2", true), idempotency.OtherContract)
	wantOutcome(t, conf(b, "k", "other-fp", "syn-1", true), idempotency.Mismatch)
	took := conf(b, "k", "fp", "syn-1", true)
	wantOutcome(t, took, idempotency.Execute)
	if p := took.Claim.Preview(); p == nil || p.Status != 461 || p.Previewed != "syn-1" || string(p.Body) != `{"status":461}` {
		t.Fatalf("Preview = %+v", p)
	}
	wantOutcome(t, conf(a, "k", "fp", "syn-1", true), idempotency.InFlight)
	// The takeover holds the key from now, past the preview's own expiry.
	clock.Advance(20 * time.Minute)
	wantOutcome(t, claim(t, a, agentA, "k", "fp"), idempotency.InFlight)
	// Refused before it ran: the preview comes back with its expiry
	// (which has passed now), so the key is free.
	if err := took.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, claim(t, a, agentA, "k2", "fp"), idempotency.Execute)

	// A preview restored within its window replays again.
	g2 := claim(t, a, agentA, "k3", "fp")
	if err := g2.Claim.Complete(ctx, preview); err != nil {
		t.Fatal(err)
	}
	t2 := conf(b, "k3", "fp", "syn-1", true)
	wantOutcome(t, t2, idempotency.Execute)
	if err := t2.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	rep := claim(t, a, agentA, "k3", "fp")
	if rep.Outcome != idempotency.Replay || rep.Response.Status != 461 || rep.Response.Previewed != "syn-1" {
		t.Fatalf("restored preview: %v %+v", rep.Outcome, rep.Response)
	}
	// Not pending any more (confirmed under another key): the preview
	// replays and nothing runs.
	wantOutcome(t, conf(a, "k3", "fp", "syn-1", false), idempotency.Replay)
	// A confirmation that runs replaces the preview.
	t3 := conf(b, "k3", "fp", "syn-1", true)
	wantOutcome(t, t3, idempotency.Execute)
	ran := idempotency.Response{Status: 200, Body: []byte(`{"ok":true}`), Contract: idempotency.ContractRef{SynthesisID: "syn-1"}}
	if err := t3.Claim.Complete(ctx, ran); err != nil {
		t.Fatal(err)
	}
	rep = conf(a, "k3", "fp", "syn-1", true)
	if rep.Outcome != idempotency.Replay || rep.Response.Status != 200 || rep.Response.Contract.SynthesisID != "syn-1" {
		t.Fatalf("after the confirmation: %v %+v", rep.Outcome, rep.Response)
	}
	wantOutcome(t, conf(a, "k3", "fp", "syn-9", true), idempotency.OtherContract)
	// A key holding an answer that names no contract is a plain repeat.
	g4 := claim(t, a, agentA, "k4", "fp")
	if err := g4.Claim.Complete(ctx, idempotency.Response{Status: 404}); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, conf(b, "k4", "fp", "syn-1", true), idempotency.Replay)
}

func testIdempotencyBounds(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now, Limits: store.Limits{Idempotency: idempotency.Limits{Window: time.Hour, MaxPerAgent: 2, MaxRecords: 3}}})
	wantOutcome(t, claim(t, a, agentA, "1", "fp"), idempotency.Execute)
	c2 := claim(t, b, agentA, "2", "fp")
	wantOutcome(t, c2, idempotency.Execute)
	if err := c2.Claim.Complete(ctx, idempotency.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, claim(t, a, agentA, "3", "fp"), idempotency.AgentFull)
	wantOutcome(t, claim(t, b, agentB, "1", "fp"), idempotency.Execute)
	n := must[int](t)(a.Idempotency.Len(ctx))
	if h.Totals {
		wantOutcome(t, claim(t, b, agentB, "2", "fp"), idempotency.StoreFull)
		if n != 3 {
			t.Fatalf("Len = %d, want 3", n)
		}
	} else {
		wantOutcome(t, claim(t, b, agentB, "2", "fp"), idempotency.Execute)
		if n != -1 {
			t.Fatalf("Len = %d, want -1 (not counted)", n)
		}
	}
	// Expired records free their agent's share (the one never completed
	// after its lease and the window of its outcome-unknown record).
	clock.Advance(time.Hour + idempotency.DefaultLease + time.Second)
	wantOutcome(t, claim(t, a, agentA, "3", "fp"), idempotency.Execute)
	if h.Totals {
		if n := must[int](t)(b.Idempotency.Len(ctx)); n != 1 {
			t.Fatalf("Len after expiry = %d, want 1 (the new claim; every other record's hold or window passed)", n)
		}
	}
}

func testExactlyOnce(t *testing.T, h Harness) {
	a, b := h.New(t, Config{Now: time.Now})
	const n = 200
	var executed, inFlight, replayed atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := s.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agentA, Key: "dup", Fingerprint: "fp"})
			if err != nil {
				errs <- err
				return
			}
			switch got.Outcome {
			case idempotency.Execute:
				executed.Add(1)
				if err := got.Claim.Complete(ctx, idempotency.Response{Status: 200, Body: []byte("once")}); err != nil {
					errs <- err
				}
			case idempotency.InFlight:
				inFlight.Add(1)
			case idempotency.Replay:
				replayed.Add(1)
				if string(got.Response.Body) != "once" {
					errs <- fmt.Errorf("replayed %q", got.Response.Body)
				}
			default:
				errs <- fmt.Errorf("outcome %v", got.Outcome)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if executed.Load() != 1 || executed.Load()+inFlight.Load()+replayed.Load() != n {
		t.Fatalf("executed %d, in flight %d, replayed %d of %d: want exactly one execution", executed.Load(), inFlight.Load(), replayed.Load(), n)
	}
}

func testRateLimit(t *testing.T, h Harness) {
	a, b := h.New(t, Config{Now: time.Now})
	// Three requests at once, then one per hour: the test never races
	// the refill.
	budget := ratelimit.Budget{Name: ratelimit.BudgetRCNS, Burst: 3, PerMinute: 1.0 / 60}
	la := must[store.Limiter](t)(a.Limiters.Limiter(budget, 0))
	lb := must[store.Limiter](t)(b.Limiters.Limiter(budget, 0))
	if la.PolicyHeader() != `"rcns";q=3;w=10800` || la.Budget() != budget {
		t.Fatalf("policy = %q, budget %+v", la.PolicyHeader(), la.Budget())
	}
	for i, l := range []store.Limiter{la, lb, la} {
		d := must[ratelimit.Decision](t)(l.Allow(ctx, agentA))
		if !d.Allowed || d.Remaining != 2-i || d.RetryAfter != 0 {
			t.Fatalf("request %d: %+v, want allowed with %d left", i+1, d, 2-i)
		}
		// (i+1) hours to refill what was taken, within a second of
		// Redis's clock moving.
		if want := time.Duration(i+1) * time.Hour; d.Reset > want || d.Reset < want-time.Second {
			t.Fatalf("request %d: reset %v, want about %v", i+1, d.Reset, want)
		}
	}
	d := must[ratelimit.Decision](t)(lb.Allow(ctx, agentA))
	if d.Allowed || d.Remaining != 0 || d.RetryAfter > time.Hour || d.RetryAfter < time.Hour-time.Second {
		t.Fatalf("fourth request: %+v, want refused, retry in about 1 h", d)
	}
	if got := lb.RateLimitHeader(d); got != `"rcns";r=0;t=3600` && got != `"rcns";r=0;t=3599` {
		t.Fatalf("RateLimit = %q", got)
	}
	if ratelimit.RetryAfterSeconds(d) < 3599 {
		t.Fatalf("Retry-After %d", ratelimit.RetryAfterSeconds(d))
	}
	// Agents never share a budget; budgets never share a bucket.
	if d := must[ratelimit.Decision](t)(la.Allow(ctx, agentB)); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("another agent: %+v", d)
	}
	inv := must[store.Limiter](t)(b.Limiters.Limiter(ratelimit.Budget{Name: ratelimit.BudgetInvocation, Burst: 1, PerMinute: 1.0 / 60}, 0))
	if d := must[ratelimit.Decision](t)(inv.Allow(ctx, agentA)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("another budget: %+v", d)
	}
	if _, err := a.Limiters.Limiter(ratelimit.Budget{Name: "x", Burst: 0, PerMinute: 1}, 0); err == nil {
		t.Fatal("burst 0 accepted")
	}
}

func testReplay(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now})
	seen := func(s store.Set, agent string, sig []byte, exp time.Time) bool {
		t.Helper()
		return must[bool](t)(s.Replay.Seen(ctx, agent, sig, exp))
	}
	exp := clock.Now().Add(5 * time.Minute)
	sig := []byte("signature-1")
	if seen(a, agentA, sig, exp) || !seen(b, agentA, sig, exp) || !seen(a, agentA, sig, exp) {
		t.Fatal("a signature is accepted once, on any node")
	}
	if seen(b, agentA, []byte("signature-2"), exp) {
		t.Fatal("another signature was seen")
	}
	past := clock.Now().Add(-time.Second)
	if seen(a, agentA, []byte("old"), past) {
		t.Fatal("an expired signature was seen")
	}
	if seen(b, agentA, []byte("old"), past) {
		t.Fatal("an expired signature was recorded")
	}
	clock.Advance(5*time.Minute + time.Second)
	if seen(b, agentA, sig, exp) {
		t.Fatal("a signature past its window is still refused")
	}
}

func testAttempts(t *testing.T, h Harness) {
	a, b := h.New(t, Config{Now: time.Now, Limits: store.Limits{Attempts: 2}})
	recs := make([]store.Attempt, 3)
	for i := range recs {
		recs[i] = store.Attempt{ID: recipes.NewAttemptID(), Method: "BOOK", Path: "/trip", AgentID: agentA, TrustTier: 2,
			Locks: map[string]string{"server_policy": "open"}, Reason: "composition-impossible", Explanation: "no recipe", At: "2026-01-01T00:00:00Z"}
		s := a
		if i == 1 {
			s = b
		}
		if err := s.Attempts.Add(ctx, recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, _ := b.Attempts.Get(ctx, recs[0].ID); ok {
		t.Fatal("the oldest attempt outlived the bound")
	}
	got, ok, err := b.Attempts.Get(ctx, recs[2].ID)
	if err != nil || !ok || got.Reason != "composition-impossible" || got.Locks["server_policy"] != "open" || got.TrustTier != 2 || got.AgentID != agentA {
		t.Fatalf("Get = %+v %v %v", got, ok, err)
	}
	if n := must[int](t)(a.Attempts.Len(ctx)); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
}

func testRecords(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now, Limits: store.Limits{RecordRetention: time.Hour}})
	rec := func(id, node string) store.Record {
		return store.Record{AuditID: strings.Repeat(id, 64), AgentID: agentA, NodeID: node, Compact: "e30." + id + ".", IssuedAt: clock.Now().UTC()}
	}
	for _, r := range []store.Record{rec("1", "n1"), rec("2", "n2"), rec("3", "n1")} {
		s := a
		if r.NodeID == "n2" {
			s = b
		}
		if err := s.Records.Retain(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// A Set reads its own records at once (a store may write them after
	// Retain returns: store.Records); another Set once they are written,
	// which the writer's own read waits for here.
	if got, ok, err := a.Records.Get(ctx, strings.Repeat("3", 64)); err != nil || !ok || got.Compact != "e30.3." {
		t.Fatalf("Get of a record the same Set just retained = %+v %v %v", got, ok, err)
	}
	if hs := must[[]store.Head](t)(b.Records.Heads(ctx, agentA)); len(hs) != 2 {
		t.Fatalf("Heads after both Sets read their own = %+v", hs)
	}
	got, ok, err := b.Records.Get(ctx, strings.Repeat("1", 64))
	if err != nil || !ok || got.Compact != "e30.1." || got.NodeID != "n1" || got.AgentID != agentA || !got.IssuedAt.Equal(rec("1", "").IssuedAt) {
		t.Fatalf("Get = %+v %v %v", got, ok, err)
	}
	heads := must[[]store.Head](t)(a.Records.Heads(ctx, agentA))
	if len(heads) != 2 || heads[0] != (store.Head{NodeID: "n1", AuditID: strings.Repeat("3", 64)}) || heads[1].NodeID != "n2" {
		t.Fatalf("Heads = %+v", heads)
	}
	if hs := must[[]store.Head](t)(a.Records.Heads(ctx, agentB)); len(hs) != 0 {
		t.Fatalf("another agent's heads = %+v", hs)
	}
	if _, ok, _ := a.Records.Get(ctx, strings.Repeat("9", 64)); ok {
		t.Fatal("an unknown record was found")
	}
	if h.ClockDrivesRetention {
		clock.Advance(time.Hour)
		if _, ok, _ := a.Records.Get(ctx, strings.Repeat("1", 64)); ok {
			t.Fatal("a record outlived its retention")
		}
		if hs := must[[]store.Head](t)(b.Records.Heads(ctx, agentA)); len(hs) != 0 {
			t.Fatalf("heads outlived the retention: %+v", hs)
		}
	}
}
