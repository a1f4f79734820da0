package recipes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// captureRecipe is a two-step recipe whose second step reads the first,
// with a description holding characters JSON encoders like to escape.
const captureRecipe = `name: trip
version: "7"
description: fetch <a> & <b>
required_scopes: [t:write]
pattern: {method: BOOK, path_exact: /trip}
endpoint:
  description: a & b <both>
  semantic: {intent: Do it., actor: agent, outcome: Done., capability: retrieval, confidence: 1, impact: informational, is_idempotent: true}
  input_schema: {type: object, additionalProperties: false, properties: {id: {type: string}}}
  output_schema: {type: object}
  errors: [composition_failed]
steps:
  - {name: a, method: FETCH, path: /alpha, input: '{id: $input.id}'}
  - {name: b, method: FETCH, path: /beta, input: '{id: $a.id}'}
output: '{a: $a.id, b: $b.id}'
`

func echoServer(t *testing.T, prefix string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"id":%q}`, prefix+strings.TrimPrefix(r.URL.Path, "/"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func captureEndpoints() []string {
	return []string{
		endpointDoc("FETCH", "/alpha", "GET", "/a/{id}", ""),
		endpointDoc("FETCH", "/beta", "GET", "/b/{id}", ""),
	}
}

func TestCapturedPlanRunsOnAnotherNode(t *testing.T) {
	// Node A loaded the recipe; node B has other upstream clients (its
	// own "up", another server), loaded the same endpoint files and never
	// the recipe file.
	a := newUpstream(t, echoServer(t, "A-").URL)
	r, _ := buildSet(t, a, captureRecipe, captureEndpoints()...)
	hash, epJSON, err := r.ContractHashFor("BOOK", "/trip")
	if err != nil {
		t.Fatal(err)
	}
	c := &Contract{SynthesisID: NewSynthesisID(), Method: "BOOK", Path: "/trip", Recipe: r, EndpointJSON: epJSON,
		Lineage: r.Lineage(), ContractHash: hash, OriginatingAgentID: strings.Repeat("a", 64), NegotiationOrigin: OriginGate,
		IssuedAt: time.Unix(1700000000, 0).UTC(), ExpiresAt: time.Unix(1700003600, 0).UTC(), SessionID: "s-1"}
	cc, plan, err := c.Capture()
	if err != nil {
		t.Fatal(err)
	}
	meta, err := cc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(meta), "a & b <both>") {
		t.Fatalf("captured endpoint was escaped: %s", meta)
	}

	b := newUpstream(t, echoServer(t, "B-").URL)
	_, bEps := buildSet(t, b, captureRecipe, captureEndpoints()...)
	rs, err := NewRestorer(methodPolicy(), map[string]*Upstream{"up": b}, endpointList(bEps), nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	if _, ok := rs.Cached(cc.PlanHash); ok {
		t.Fatal("an unknown plan is cached before any restore")
	}
	back, err := UnmarshalCapturedContract(meta)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Restore(back.PlanHash, plan)
	if err != nil {
		t.Fatal(err)
	}
	got, err := back.Contract(rr)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.EndpointJSON) != string(c.EndpointJSON) {
		t.Fatalf("endpoint bytes changed:\n got %s\nwant %s", got.EndpointJSON, c.EndpointJSON)
	}
	h2, _, err := rr.ContractHashFor("BOOK", "/trip")
	if err != nil || h2 != c.ContractHash {
		t.Fatalf("restored contract hash = %s (%v), want %s", h2, err, c.ContractHash)
	}
	if rr.ContentHash != r.ContentHash || rr.Lineage() != r.Lineage() || len(rr.Steps) != 2 || rr.Steps[1].Deps[0] != 0 {
		t.Fatalf("restored recipe differs: %+v", rr)
	}
	if !got.IssuedAt.Equal(c.IssuedAt) || !got.ExpiresAt.Equal(c.ExpiresAt) || got.SessionID != "s-1" || got.OriginatingAgentID != c.OriginatingAgentID {
		t.Fatalf("restored contract fields differ: %+v", got)
	}
	out, _, cf := got.Recipe.Execute(context.Background(), map[string]any{"id": "x"}, 5*time.Second)
	if cf != nil {
		t.Fatal(cf)
	}
	// B's upstream answered: the plan runs on the restoring node's clients.
	if want := "map[a:B-a/x b:B-b/B-a/x]"; fmt.Sprint(out) != want {
		t.Fatalf("output = %v, want %s", out, want)
	}
}

func TestRestorerPrefersLoadedRecipes(t *testing.T) {
	up := newUpstream(t, echoServer(t, "").URL)
	r, _ := buildSet(t, up, captureRecipe, captureEndpoints()...)
	plan, hash, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := NewRestorer(methodPolicy(), map[string]*Upstream{"up": up}, nil, []*Recipe{r}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	got, err := rs.Restore(hash, plan)
	if err != nil || got != r {
		t.Fatalf("Restore of a loaded plan = %p (%v), want the loaded recipe %p", got, err, r)
	}
	if c, ok := rs.Cached(hash); !ok || c != r {
		t.Fatal("a loaded plan is not Cached")
	}
}

func TestRestoreRefusals(t *testing.T) {
	up := newUpstream(t, echoServer(t, "").URL)
	r, _ := buildSet(t, up, captureRecipe, captureEndpoints()...)
	plan, hash, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		upstreams map[string]*Upstream
		hash      string
		data      []byte
		want      string
	}{
		{"tampered bytes", map[string]*Upstream{"up": up}, hash, []byte(strings.Replace(string(plan), `"7"`, `"8"`, 1)), "hash to"},
		{"too large", map[string]*Upstream{"up": up}, hash, make([]byte, MaxPlanBytes+1), "limit"},
		{"not json", map[string]*Upstream{"up": up}, PlanHash([]byte("{")), []byte("{"), "captured plan cannot be restored"},
		{"other version", map[string]*Upstream{"up": up}, PlanHash([]byte(`{"version":3}`)), []byte(`{"version":3}`), "version 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := NewRestorer(methodPolicy(), tt.upstreams, nil, nil, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			_, err = rs.Restore(tt.hash, tt.data)
			if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrPlan mentioning %q", err, tt.want)
			}
		})
	}
}

// TestRestoreUnboundUpstream: a plan whose upstream the configuration
// no longer declares is rebuilt (a contract stays listable and can be
// refused by name), names the upstream in MissingUpstreams, and never
// calls anything.
func TestRestoreUnboundUpstream(t *testing.T) {
	up := newUpstream(t, echoServer(t, "").URL)
	r, _ := buildSet(t, up, captureRecipe, captureEndpoints()...)
	plan, hash, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.MissingUpstreams(); got != nil {
		t.Fatalf("a loaded recipe reports missing upstreams %v", got)
	}
	other := newUpstream(t, echoServer(t, "").URL)
	rs, err := NewRestorer(methodPolicy(), map[string]*Upstream{"other": other}, nil, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rr, err := rs.Restore(hash, plan)
	if err != nil {
		t.Fatalf("Restore without the upstream: %v", err)
	}
	if got := rr.MissingUpstreams(); !slices.Equal(got, []string{"up"}) {
		t.Fatalf("MissingUpstreams = %v, want [up]", got)
	}
	if got := rr.UnavailableEndpoints(); !slices.Equal(got, []string{"FETCH /alpha", "FETCH /beta"}) {
		t.Fatalf("UnavailableEndpoints = %v, want both steps' endpoints", got)
	}
	if rr.Steps[0].Endpoint.UpstreamConfigured() {
		t.Fatal("a step bound to no upstream reports it configured")
	}
	_, reports, cf := rr.Execute(context.Background(), map[string]any{"id": "x"}, time.Second)
	if cf == nil || cf.Cause.Code != ErrUpstreamConnection || !strings.Contains(cf.Cause.Explanation, "upstream up is not declared") {
		t.Fatalf("Execute = %v, want upstream_connection_error naming up", cf)
	}
	if cf.Cause.Sent || reports[0].Upstream != "up" {
		t.Fatalf("failure sent = %v, report upstream = %q; want not sent, up", cf.Cause.Sent, reports[0].Upstream)
	}
}

func TestUnmarshalCapturedContractRefusals(t *testing.T) {
	for _, tt := range []struct{ name, data string }{
		{"not json", "{"},
		{"no plan hash", `{"synthesis_id":"syn-1","originating_agent_id":"a"}`},
		{"no agent", `{"synthesis_id":"syn-1","plan_hash":"h"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := UnmarshalCapturedContract([]byte(tt.data)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
