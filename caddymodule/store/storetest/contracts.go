package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// Fixture builds the recipe the suite's contracts capture: two steps
// over two Tier B endpoints on upstream "up" (127.0.0.1:9, never
// answering).
type Fixture struct {
	recipe    *recipes.Recipe
	mp        *policy.MethodPolicy
	upstreams map[string]*recipes.Upstream
	endpoints []*recipes.Endpoint
}

const fixtureEndpoint = `method: FETCH
path: %s
description: test endpoint
semantic: {intent: Do it., actor: agent, outcome: Done., capability: retrieval, confidence: 1, impact: informational, is_idempotent: true}
input_schema: {type: object, additionalProperties: false, properties: {id: {type: string}}}
output_schema: {type: object}
errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
external_service: {upstream: up, method: GET, path: /x}
`

const fixtureRecipe = `name: trip
version: "3"
description: fetch <both> & more
pattern: {method: BOOK, path_exact: /trip}
endpoint:
  description: both
  semantic: {intent: Do it., actor: agent, outcome: Done., capability: retrieval, confidence: 1, impact: informational, is_idempotent: true}
  input_schema: {type: object, additionalProperties: false, properties: {id: {type: string}}}
  output_schema: {type: object}
  errors: [composition_failed]
steps:
  - {name: a, method: FETCH, path: /alpha, input: '{id: $input.id}'}
  - {name: b, method: FETCH, path: /beta, input: '{id: $a.id}'}
output: '{a: $a, b: $b}'
`

// NewFixture builds the fixture's endpoints and recipe.
func NewFixture(t *testing.T) *Fixture {
	t.Helper()
	up, err := recipes.NewUpstream("up", "http://127.0.0.1:9", recipes.UpstreamOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	f := &Fixture{mp: &policy.MethodPolicy{Catalog: policy.DefaultCatalog()}, upstreams: map[string]*recipes.Upstream{"up": up}}
	eps := map[string]*recipes.Endpoint{}
	for _, p := range []string{"/alpha", "/beta"} {
		doc, err := schema.Parse("ep"+p+".yaml", fmt.Appendf(nil, fixtureEndpoint, p), schema.KindEndpoint)
		if err != nil {
			t.Fatal(err)
		}
		e, err := recipes.BuildEndpoint(doc, f.mp, f.upstreams)
		if err != nil {
			t.Fatal(err)
		}
		eps[e.Method+" "+e.Path] = e
		f.endpoints = append(f.endpoints, e)
	}
	doc, err := schema.Parse("trip.yaml", []byte(fixtureRecipe), schema.KindRecipe)
	if err != nil {
		t.Fatal(err)
	}
	if f.recipe, err = recipes.BuildRecipe(doc, f.mp, func(m, p string) (*recipes.Endpoint, bool) { e, ok := eps[m+" "+p]; return e, ok }); err != nil {
		t.Fatal(err)
	}
	return f
}

// Restorer is a second node's: the same upstream names and endpoint
// files, no loaded recipe.
func (f *Fixture) Restorer(t *testing.T) *recipes.Restorer {
	t.Helper()
	rs, err := recipes.NewRestorer(f.mp, f.upstreams, f.endpoints, nil, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	return rs
}

// Contract returns a new contract value (not stored) of agent on
// (BOOK, path), issued at now for ttl.
func (f *Fixture) Contract(t *testing.T, now time.Time, agent, path, origin string, ttl time.Duration) *recipes.Contract {
	t.Helper()
	hash, ep, err := f.recipe.ContractHashFor("BOOK", path)
	if err != nil {
		t.Fatal(err)
	}
	issued := now.UTC().Truncate(time.Second)
	return &recipes.Contract{SynthesisID: recipes.NewSynthesisID(), Method: "BOOK", Path: path, Recipe: f.recipe, EndpointJSON: ep,
		Lineage: f.recipe.Lineage(), ContractHash: hash, OriginatingAgentID: agent, NegotiationOrigin: origin,
		IssuedAt: issued, ExpiresAt: issued.Add(ttl), SessionID: "session-0123456789abcdefghij"}
}

func sameContract(t *testing.T, got, want *recipes.Contract) {
	t.Helper()
	if got == nil {
		t.Fatalf("contract %s not found", want.SynthesisID)
	}
	_, gh, _ := got.Recipe.Plan()
	_, wh, _ := want.Recipe.Plan()
	if got.SynthesisID != want.SynthesisID || got.Method != want.Method || got.Path != want.Path ||
		!bytes.Equal(got.EndpointJSON, want.EndpointJSON) || got.Lineage != want.Lineage || got.ContractHash != want.ContractHash ||
		got.OriginatingAgentID != want.OriginatingAgentID || got.NegotiationOrigin != want.NegotiationOrigin ||
		!got.IssuedAt.Equal(want.IssuedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) || got.SessionID != want.SessionID ||
		got.Persistent != want.Persistent || gh != wh {
		t.Fatalf("contract read back differs:\n got %+v\nwant %+v", got, want)
	}
}

func testContracts(t *testing.T, h Harness) {
	clock := NewClock()
	f := NewFixture(t)
	a, b := h.New(t, Config{Now: clock.Now, Restorer: f.Restorer(t)})
	mint := func(s store.Set, c *recipes.Contract, mode, want string) {
		t.Helper()
		state, err := s.Contracts.Mint(ctx, c, mode)
		if err != nil || state != want {
			t.Fatalf("Mint = %q, %v; want %q", state, err, want)
		}
	}
	lookup := func(s store.Set, presenter, id string) (*recipes.Contract, int) {
		t.Helper()
		c, res, err := s.Contracts.Lookup(ctx, presenter, id)
		if err != nil {
			t.Fatal(err)
		}
		return c, res
	}
	state := func(s store.Set, c *recipes.Contract) string {
		t.Helper()
		return must[string](t)(s.Contracts.State(ctx, c))
	}
	pair := func(s store.Set, agent string) *recipes.Contract {
		t.Helper()
		return must[*recipes.Contract](t)(s.Contracts.ActiveFor(ctx, agent, "BOOK", "/trip"))
	}

	pending := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Hour)
	mint(a, pending, store.ModeConfirmFirst, recipes.StatePending)
	if got, res := lookup(b, agentA, pending.SynthesisID); res != recipes.LookupFound {
		t.Fatalf("lookup on the other node = %d", res)
	} else {
		sameContract(t, got, pending)
		out, _, cf := got.Recipe.Execute(ctx, map[string]any{}, 2*time.Second)
		if cf == nil || out != nil {
			t.Fatalf("the restored plan did not run its steps (the upstream is closed): %v", out)
		}
	}
	if state(b, pending) != recipes.StatePending || pair(b, agentA) != nil {
		t.Fatal("a pending contract resolves by pair")
	}
	if !must[bool](t)(b.Contracts.Activate(ctx, pending)) || must[bool](t)(a.Contracts.Activate(ctx, pending)) {
		t.Fatal("Activate: want true once, then false")
	}
	sameContract(t, pair(a, agentA), pending)
	if state(a, pending) != recipes.StateActive || pair(a, agentB) != nil {
		t.Fatal("activated contract state, or another agent's pair")
	}
	// Another agent presenting it finds whose it is.
	if got, res := lookup(a, agentB, pending.SynthesisID); res != recipes.LookupFound || got.OriginatingAgentID != agentA {
		t.Fatalf("lookup by another agent = %d %v", res, got)
	}
	if _, res := lookup(a, agentA, "syn-never"); res != recipes.LookupUnknown {
		t.Fatalf("unknown id = %d", res)
	}

	// Newer contracts serve the pair; optimistic gate and PROPOSE ones
	// start active.
	clock.Advance(time.Second)
	newer := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Hour)
	mint(b, newer, store.ModeOptimistic, recipes.StateActive)
	sameContract(t, pair(a, agentA), newer)
	proposed := f.Contract(t, clock.Now(), agentA, "/other", recipes.OriginPropose, 2*time.Hour)
	proposed.Persistent = true
	mint(a, proposed, store.ModeConfirmFirst, recipes.StateActive)
	other := f.Contract(t, clock.Now(), agentB, "/trip", recipes.OriginPropose, time.Hour)
	mint(b, other, store.ModeOptimistic, recipes.StateActive)

	list := must[[]*recipes.Contract](t)(b.Contracts.List(ctx, agentA))
	if len(list) != 3 || list[0].SynthesisID != pending.SynthesisID {
		t.Fatalf("List(A) = %d contracts", len(list))
	}
	all := must[[]*recipes.Contract](t)(a.Contracts.List(ctx, ""))
	if len(all) != 4 || must[int](t)(b.Contracts.Len(ctx)) != 4 {
		t.Fatalf("List() = %d, Len = %d; want 4", len(all), must[int](t)(b.Contracts.Len(ctx)))
	}
	for i := 1; i < len(all); i++ {
		if all[i].IssuedAt.Before(all[i-1].IssuedAt) || all[i].IssuedAt.Equal(all[i-1].IssuedAt) && all[i].SynthesisID < all[i-1].SynthesisID {
			t.Fatal("List is not sorted by issue time then id")
		}
	}

	// A revocation on one node is seen at once on the other.
	if !must[bool](t)(b.Contracts.End(ctx, newer, recipes.StateRevoked)) || must[bool](t)(a.Contracts.End(ctx, newer, recipes.StateRevoked)) {
		t.Fatal("End: want true once, then false")
	}
	if c, res := lookup(a, agentA, newer.SynthesisID); res != recipes.LookupRevoked || c == nil || c.SynthesisID != newer.SynthesisID {
		t.Fatalf("revoked lookup = %d", res)
	}
	if state(a, newer) != recipes.StateRevoked {
		t.Fatal("revoked state")
	}
	sameContract(t, pair(a, agentA), pending) // the older active one serves the pair again
	if c, st, found, err := a.Contracts.Inspect(ctx, newer.SynthesisID); err != nil || !found || st != recipes.StateRevoked || c.SynthesisID != newer.SynthesisID {
		t.Fatalf("Inspect revoked = %v %q %v", found, st, err)
	}
	if _, st, found, _ := b.Contracts.Inspect(ctx, pending.SynthesisID); !found || st != recipes.StateActive {
		t.Fatalf("Inspect live = %v %q", found, st)
	}
	// A release forgets the contract for presentation, keeps it for INSPECT.
	if !must[bool](t)(a.Contracts.End(ctx, pending, recipes.StateReleased)) {
		t.Fatal("release")
	}
	if _, res := lookup(b, agentA, pending.SynthesisID); res != recipes.LookupUnknown {
		t.Fatalf("released lookup = %d, want unknown", res)
	}
	if _, st, found, _ := b.Contracts.Inspect(ctx, pending.SynthesisID); !found || st != recipes.StateReleased {
		t.Fatalf("Inspect released = %v %q", found, st)
	}
	if pair(b, agentA) != nil {
		t.Fatal("no active contract is left for the pair")
	}
	if n := must[int](t)(a.Contracts.Len(ctx)); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
}

func testContractExpiry(t *testing.T, h Harness) {
	clock := NewClock()
	f := NewFixture(t)
	a, b := h.New(t, Config{Now: clock.Now, Restorer: f.Restorer(t), Limits: store.Limits{Contracts: recipes.StoreLimits{TombstoneTTL: time.Hour}}})
	c := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Minute)
	if _, err := a.Contracts.Mint(ctx, c, store.ModeOptimistic); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + time.Second)
	if got := must[*recipes.Contract](t)(b.Contracts.ActiveFor(ctx, agentA, "BOOK", "/trip")); got != nil {
		t.Fatal("an expired contract serves the pair")
	}
	if _, res, _ := b.Contracts.Lookup(ctx, agentA, c.SynthesisID); res != recipes.LookupRevoked {
		t.Fatalf("expired lookup = %d, want revoked (464)", res)
	}
	if st := must[string](t)(a.Contracts.State(ctx, c)); st != recipes.StateExpired {
		t.Fatalf("state = %q, want expired", st)
	}
	if _, st, found, _ := a.Contracts.Inspect(ctx, c.SynthesisID); !found || st != recipes.StateExpired {
		t.Fatalf("Inspect expired = %v %q", found, st)
	}
	if n := must[int](t)(a.Contracts.Len(ctx)); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
	clock.Advance(time.Hour)
	if _, res, _ := b.Contracts.Lookup(ctx, agentA, c.SynthesisID); res != recipes.LookupUnknown {
		t.Fatalf("lookup after the tombstone TTL = %d, want unknown (404)", res)
	}
	if _, _, found, _ := a.Contracts.Inspect(ctx, c.SynthesisID); found {
		t.Fatal("Inspect after the tombstone TTL found it")
	}
}

func testContractBounds(t *testing.T, h Harness) {
	clock := NewClock()
	f := NewFixture(t)
	a, b := h.New(t, Config{Now: clock.Now, Restorer: f.Restorer(t), Limits: store.Limits{Contracts: recipes.StoreLimits{MaxPerAgent: 2, MaxContracts: 3}}})
	if l := a.Contracts.Limits(); l.MaxPerAgent != 2 || l.MaxContracts != 3 || l.TombstoneTTL != 24*time.Hour {
		t.Fatalf("limits = %+v", l)
	}
	for i, s := range []store.Set{a, b} {
		if _, err := s.Contracts.Mint(ctx, f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginPropose, time.Hour), store.ModeOptimistic); err != nil {
			t.Fatalf("mint %d: %v", i, err)
		}
	}
	_, err := a.Contracts.Mint(ctx, f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginPropose, time.Hour), store.ModeOptimistic)
	var le *store.LimitError
	if !errors.As(err, &le) || !errors.Is(err, store.ErrAgentFull) || le.Held != 2 || le.Limit != 2 ||
		err.Error() != "the agent already holds 2 live contracts; max_contracts_per_agent is 2; release some first" {
		t.Fatalf("third contract of one agent: %v", err)
	}
	if _, err := b.Contracts.Mint(ctx, f.Contract(t, clock.Now(), agentB, "/trip", recipes.OriginPropose, time.Hour), store.ModeOptimistic); err != nil {
		t.Fatal(err)
	}
	_, err = b.Contracts.Mint(ctx, f.Contract(t, clock.Now(), agentB, "/trip", recipes.OriginPropose, time.Hour), store.ModeOptimistic)
	if h.Totals {
		if !errors.As(err, &le) || !errors.Is(err, store.ErrStoreFull) || le.Held != 3 || le.Limit != 3 ||
			err.Error() != "the gateway holds 3 live contracts, its maximum (max_contracts is 3); try later" {
			t.Fatalf("over the total: %v", err)
		}
	} else if err != nil {
		t.Fatalf("over the total (not enforced here): %v", err)
	}
	// Expired contracts free the agent's share.
	clock.Advance(time.Hour)
	if _, err := a.Contracts.Mint(ctx, f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginPropose, time.Hour), store.ModeOptimistic); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

func testPresent(t *testing.T, h Harness) {
	clock := NewClock()
	f := NewFixture(t)
	a, b := h.New(t, Config{Now: clock.Now, Restorer: f.Restorer(t)})
	c := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Hour)
	if _, err := a.Contracts.Mint(ctx, c, store.ModeConfirmFirst); err != nil {
		t.Fatal(err)
	}
	gate := claim(t, a, agentA, "k", "fp")
	if err := gate.Claim.Complete(ctx, idempotency.Response{Status: 461, Body: []byte("preview"), Previewed: c.SynthesisID}); err != nil {
		t.Fatal(err)
	}
	present := func(s store.Set, req store.PresentRequest) store.Presentation {
		t.Helper()
		return must[store.Presentation](t)(s.Presenter.Present(ctx, req))
	}
	req := store.PresentRequest{Presenter: agentA, SynthesisID: c.SynthesisID, Method: "BOOK", Path: "/trip", Key: "k", Fingerprint: "fp", Claim: true}

	p := present(b, req)
	if p.Lookup != recipes.LookupFound || p.State != recipes.StatePending || p.Claimed == nil {
		t.Fatalf("present = %+v", p)
	}
	sameContract(t, p.Contract, c)
	wantOutcome(t, *p.Claimed, idempotency.Execute)
	if pv := p.Claimed.Claim.Preview(); pv == nil || string(pv.Body) != "preview" {
		t.Fatalf("the confirmation did not take the preview over: %+v", pv)
	}
	if again := present(a, req); again.Claimed == nil || again.Claimed.Outcome != idempotency.InFlight {
		t.Fatalf("concurrent confirmation = %+v", again.Claimed)
	}
	if err := p.Claimed.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	noClaim := req
	noClaim.Claim = false
	if p := present(a, noClaim); p.Claimed != nil || p.Lookup != recipes.LookupFound || p.State != recipes.StatePending {
		t.Fatalf("present without claim = %+v", p)
	}
	noKey := req
	noKey.Key = ""
	if p := present(a, noKey); p.Claimed != nil || p.Lookup != recipes.LookupFound {
		t.Fatalf("present without key = %+v", p)
	}
	other := req
	other.Presenter = agentB
	if p := present(b, other); p.Claimed != nil || p.Lookup != recipes.LookupFound || p.Contract.OriginatingAgentID != agentA {
		t.Fatalf("present by another agent = %+v", p)
	}
	wrongPair := req
	wrongPair.Path = "/elsewhere"
	if p := present(b, wrongPair); p.Claimed != nil || p.Contract == nil || p.Contract.Path != "/trip" {
		t.Fatalf("present on another pair = %+v", p)
	}
	unknown := req
	unknown.SynthesisID = "syn-unknown"
	if p := present(a, unknown); p.Claimed != nil || p.Lookup != recipes.LookupUnknown || p.Contract != nil {
		t.Fatalf("present unknown = %+v", p)
	}
	// Accepted: the key now confirms an active contract, which replays
	// the preview (it is no longer pending).
	if _, err := a.Contracts.Activate(ctx, c); err != nil {
		t.Fatal(err)
	}
	if p := present(b, req); p.State != recipes.StateActive || p.Claimed == nil || p.Claimed.Outcome != idempotency.Replay {
		t.Fatalf("present of the active contract = %+v", p)
	}
	if _, err := b.Contracts.End(ctx, c, recipes.StateRevoked); err != nil {
		t.Fatal(err)
	}
	if p := present(a, req); p.Lookup != recipes.LookupRevoked || p.State != recipes.StateRevoked || p.Claimed != nil {
		t.Fatalf("present revoked = %+v", p)
	}
}

func testResolvePair(t *testing.T, h Harness) {
	clock := NewClock()
	f := NewFixture(t)
	a, b := h.New(t, Config{Now: clock.Now, Restorer: f.Restorer(t)})
	resolve := func(s store.Set, req store.PairRequest) store.PairResolution {
		t.Helper()
		return must[store.PairResolution](t)(s.Presenter.ResolvePair(ctx, req))
	}
	gate := store.PairRequest{AgentID: agentA, Method: "BOOK", Path: "/trip", Key: "g", Fingerprint: "fp", ClaimIfMissing: true}
	// No contract: the gate's claim is made.
	r := resolve(a, gate)
	if r.Contract != nil || r.Claimed == nil {
		t.Fatalf("no contract: %+v", r)
	}
	wantOutcome(t, *r.Claimed, idempotency.Execute)
	if again := resolve(b, gate); again.Claimed == nil || again.Claimed.Outcome != idempotency.InFlight {
		t.Fatalf("repeat in flight: %+v", again.Claimed)
	}
	if err := r.Claimed.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	c := f.Contract(t, clock.Now(), agentA, "/trip", recipes.OriginGate, time.Hour)
	if _, err := a.Contracts.Mint(ctx, c, store.ModeOptimistic); err != nil {
		t.Fatal(err)
	}
	// An active contract serves the pair: no gate claim.
	r = resolve(b, gate)
	if r.Claimed != nil {
		t.Fatalf("a gate claim beside a contract: %+v", r.Claimed)
	}
	sameContract(t, r.Contract, c)
	tierC := gate
	tierC.Key, tierC.ClaimIfFound = "c", true
	r = resolve(b, tierC)
	sameContract(t, r.Contract, c)
	if r.Claimed == nil {
		t.Fatal("no Tier C claim")
	}
	wantOutcome(t, *r.Claimed, idempotency.Execute)
	if err := r.Claimed.Claim.Complete(ctx, idempotency.Response{Status: 200, Body: []byte("ran")}); err != nil {
		t.Fatal(err)
	}
	if r := resolve(a, tierC); r.Claimed == nil || r.Claimed.Outcome != idempotency.Replay || string(r.Claimed.Response.Body) != "ran" {
		t.Fatalf("Tier C repeat: %+v", r.Claimed)
	}
	noKey := tierC
	noKey.Key = ""
	if r := resolve(a, noKey); r.Claimed != nil || r.Contract == nil {
		t.Fatalf("without a key: %+v", r)
	}
	other := gate
	other.AgentID = agentB
	if r := resolve(a, other); r.Contract != nil || r.Claimed == nil || r.Claimed.Outcome != idempotency.Execute {
		t.Fatalf("another agent's pair: %+v", r)
	}
}
