package recipes

// Per-stage benchmarks (go test -bench; the load comparison is make bench): the plan, upstream and
// validation stages of a contract presentation, a Tier B call and a
// synthesis, on the load test's own documents (scripts/bench/docs)
// against an in-process httptest upstream.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/cputime"
	"github.com/caddy-rcns/caddy-rcns/policy"
)

const benchDocs = "../scripts/bench/docs"

var (
	sinkAny    any
	sinkStr    string
	sinkBool   bool
	sinkRecipe *Recipe
)

// benchUpstream serves the bench upstream's two JSON routes, without the
// delay of /slow (scripts/bench/upstream).
func benchUpstream(b testing.TB) *httptest.Server {
	b.Helper()
	mux := http.NewServeMux()
	item := func(w http.ResponseWriter, r *http.Request) {
		raw, _ := json.Marshal(map[string]any{"id": r.PathValue("id"), "name": "bench item", "price": 12.5})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	}
	mux.HandleFunc("GET /items/{id}", item)
	mux.HandleFunc("GET /slow/{id}", item)
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	return srv
}

// benchSet loads the bench documents over an httptest upstream.
func benchSet(b testing.TB) (*Set, *Upstream) {
	b.Helper()
	srv := benchUpstream(b)
	up, err := NewUpstream("bench", srv.URL, UpstreamOptions{Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(up.Close)
	mp := &policy.MethodPolicy{Catalog: policy.DefaultCatalog()}
	if err := mp.Validate(); err != nil {
		b.Fatal(err)
	}
	s, err := Load([]string{benchDocs + "/endpoints"}, []string{benchDocs + "/recipes"}, mp, map[string]*Upstream{"bench": up})
	if err != nil {
		b.Fatal(err)
	}
	return s, up
}

func benchRecipe(b testing.TB, s *Set, name string) *Recipe {
	b.Helper()
	for _, r := range s.Recipes {
		if r.Name == name {
			return r
		}
	}
	b.Fatalf("no recipe %s", name)
	return nil
}

func benchEndpoint(b *testing.B, s *Set, method, path string) *Endpoint {
	b.Helper()
	e, ok := s.lookup(method, path)
	if !ok {
		b.Fatalf("no endpoint %s %s", method, path)
	}
	return e
}

var (
	inOne   = map[string]any{"item_id": "1"}
	inThree = map[string]any{"a": "1", "b": "2", "c": "3"}
	itemOut = map[string]any{"id": "1", "name": "bench item", "price": 12.5}
)

// BenchmarkSetRoute is the Tier B lookup of serve step 8 (a hit for (c);
// a miss for the gate and contract paths).
func BenchmarkSetRoute(b *testing.B) {
	s, _ := benchSet(b)
	for name, c := range map[string][2]string{"hit": {"FETCH", "/items/1"}, "miss": {"LOOKUP", "/nothing"}} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, p, ok := s.Route(c[0], c[1])
				sinkBool = ok && p != nil
			}
		})
	}
}

// BenchmarkSetMatch is the recipe match of the gate: a regex hit (g) and
// the miss of a composition-impossible refusal (f), which tries every
// recipe.
func BenchmarkSetMatch(b *testing.B) {
	s, _ := benchSet(b)
	for name, c := range map[string][2]string{"hit": {"LOOKUP", "/item/g-1-1"}, "miss": {"LOOKUP", "/nothing"}} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkRecipe = s.Match(c[0], c[1])
			}
		})
	}
}

// BenchmarkValidateInput validates request input against input_schema.
func BenchmarkValidateInput(b *testing.B) {
	s, _ := benchSet(b)
	ep := benchEndpoint(b, s, "FETCH", "/items/{item_id}")
	one := benchRecipe(b, s, "lookup-item")
	three := benchRecipe(b, s, "slow-three")
	cases := []struct {
		name string
		f    func() *Failure
	}{
		{"endpoint", func() *Failure { return ep.ValidateInput(inOne) }},
		{"recipe-1field", func() *Failure { return one.ValidateInput(inOne) }},
		{"recipe-3fields", func() *Failure { return three.ValidateInput(inThree) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if f := c.f(); f != nil {
					b.Fatal(f)
				}
			}
		})
	}
}

// BenchmarkValidateOutput is the output validation of a step's upstream
// answer (output_schema of the endpoint) and of the composed output:
// endpoint and recipe as the plan runs them (the fast check, see
// compileFast), and their -jsonschema twins with jsonschema/v6 alone,
// the path every validation took before the fast check.
func BenchmarkValidateOutput(b *testing.B) {
	s, _ := benchSet(b)
	ep := benchEndpoint(b, s, "FETCH", "/items/{item_id}")
	r := benchRecipe(b, s, "lookup-item")
	composed := map[string]any{"item": itemOut}
	for _, c := range []struct {
		name string
		f    func() []string
	}{
		{"endpoint", func() []string { return validateSchema(ep.output, itemOut) }},
		{"recipe", func() []string { return validateSchema(r.output, composed) }},
		{"endpoint-jsonschema", func() []string { return validate(ep.output.lib, itemOut) }},
		{"recipe-jsonschema", func() []string { return validate(r.output.lib, composed) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if p := c.f(); p != nil {
					b.Fatal(p)
				}
			}
		})
	}
}

// BenchmarkJQ evaluates the one-step recipe's step input and output
// mappings, as the plan runs them (both are projections, see
// compileProjection) and, as -gojq, through gojq's interpreter alone,
// the path every mapping took before.
func BenchmarkJQ(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	ctx := context.Background()
	in, out := r.Steps[0].input, r.outExpr
	gojqOnly := func(e *Expr) *Expr { return &Expr{src: e.src, vars: e.vars, code: e.code} }
	for _, c := range []struct {
		name string
		e    *Expr
		vals []any
	}{
		{"step-input", in, []any{inOne}},
		{"output", out, []any{inOne, any(itemOut)}},
		{"step-input-gojq", gojqOnly(in), []any{inOne}},
		{"output-gojq", gojqOnly(out), []any{inOne, any(itemOut)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v, err := c.e.Eval(ctx, inOne, c.vals...)
				if err != nil {
					b.Fatal(err)
				}
				sinkAny = v
			}
		})
	}
}

// BenchmarkEndpointFor builds the synthesized endpoint map of a contract.
func BenchmarkEndpointFor(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	b.ReportAllocs()
	for b.Loop() {
		sinkAny = r.EndpointFor("LOOKUP", "/item/g-1-1")
	}
}

// BenchmarkContractHash is contract_hash of a new contract: JSON and
// RFC 8785 form of the endpoint (schemas included) and lineage, SHA-256.
func BenchmarkContractHash(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	ep := r.EndpointFor("LOOKUP", "/item/g-1-1")
	lin := r.Lineage()
	b.ReportAllocs()
	for b.Loop() {
		h, err := ContractHash(ep, &lin)
		if err != nil {
			b.Fatal(err)
		}
		sinkStr = h
	}
}

// BenchmarkContractHashFor is contract_hash as a synthesis computes it
// now: the recipe's endpoint members are canonicalized once at load, and
// only method and path are spliced in per contract. BenchmarkContractHash
// is the whole-projection path it replaced.
func BenchmarkContractHashFor(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		h, _, err := r.ContractHashFor("LOOKUP", "/item/g-"+strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		sinkStr = h
	}
}

// BenchmarkContractBodyEncode is the JSON encoding of a 263 body as it
// was first written: the endpoint map with its schemas through
// encoding/json on every synthesis. Kept as the baseline of caddymodule
// BenchmarkContractAnswer (the canonical endpoint bytes spliced in).
func BenchmarkContractBodyEncode(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	now := time.Now().UTC().Truncate(time.Second)
	body := map[string]any{
		"status": 263, "synthesis_id": NewSynthesisID(), "method": "LOOKUP", "path": "/item/g-1-1",
		"endpoint": r.EndpointFor("LOOKUP", "/item/g-1-1"), "recipe_lineage": r.Lineage(),
		"contract_hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "negotiation_origin": OriginGate,
		"issued_at": now.Format(time.RFC3339), "expires_at": now.Add(30 * time.Second).Format(time.RFC3339),
		"result": map[string]any{"item": itemOut},
	}
	b.ReportAllocs()
	for b.Loop() {
		raw, err := json.Marshal(body)
		if err != nil {
			b.Fatal(err)
		}
		sinkStr = string(raw[:1])
	}
}

// BenchmarkNewSynthesisID draws a synthesis id (128 bits, CSPRNG).
func BenchmarkNewSynthesisID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkStr = NewSynthesisID()
	}
}

// BenchmarkStorePutLookup stores a new contract (its own pair) and looks
// it up, with about 1,000 live contracts (the clock moves 1 ms per
// iteration, TTL 1 s).
func BenchmarkStorePutLookup(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := NewStore(StoreLimits{MaxContracts: 1 << 30, MaxPerAgent: 1 << 30, TombstoneTTL: time.Second}, func() time.Time { return t })
	_, ep, err := r.ContractHashFor("LOOKUP", "/item/x")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t = t.Add(time.Millisecond)
		i++
		c := &Contract{SynthesisID: NewSynthesisID(), Method: "LOOKUP", Path: fmt.Sprintf("/item/g-%d", i), Recipe: r, EndpointJSON: ep,
			OriginatingAgentID: "agent", IssuedAt: t, ExpiresAt: t.Add(time.Second)}
		if err := st.Put(c, StateActive); err != nil {
			b.Fatal(err)
		}
		if _, res := st.Lookup(c.SynthesisID); res != LookupFound {
			b.Fatal("not found")
		}
	}
}

// BenchmarkStoreLookup is the presentation's lookup (Contract-Synthesized
// → contract) among 10,000 live contracts.
func BenchmarkStoreLookup(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := NewStore(StoreLimits{MaxContracts: 1 << 30, MaxPerAgent: 1 << 30}, func() time.Time { return t })
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = NewSynthesisID()
		c := &Contract{SynthesisID: ids[i], Method: "LOOKUP", Path: fmt.Sprintf("/item/%d", i), Recipe: r,
			OriginatingAgentID: "agent", IssuedAt: t, ExpiresAt: t.Add(time.Hour)}
		if err := st.Put(c, StateActive); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, res := st.Lookup(ids[i%len(ids)]); res != LookupFound {
			b.Fatal("not found")
		}
		i++
	}
}

// BenchmarkValidSynthesisID is the syntax check of a presented
// Contract-Synthesized value (a regexp).
func BenchmarkValidSynthesisID(b *testing.B) {
	id := NewSynthesisID()
	b.ReportAllocs()
	for b.Loop() {
		sinkBool = ValidSynthesisID(id)
	}
}

// BenchmarkStoreSweep is one periodic sweep (at most once a second, under
// the store's mutex, from the Put of a synthesis) over live contracts of
// which none has expired: the walk every Put pays once a second.
func BenchmarkStoreSweep(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("live=%d", n), func(b *testing.B) {
			t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			st := NewStore(StoreLimits{MaxContracts: 1 << 30, MaxPerAgent: 1 << 30}, func() time.Time { return t })
			for i := 0; i < n; i++ {
				c := &Contract{SynthesisID: fmt.Sprintf("syn-%d", i), Method: "LOOKUP", Path: fmt.Sprintf("/item/%d", i), Recipe: r,
					OriginatingAgentID: "agent", IssuedAt: t, ExpiresAt: t.Add(time.Hour)}
				if err := st.Put(c, StateActive); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				st.mu.Lock()
				st.sweepLocked(true)
				st.mu.Unlock()
			}
		})
	}
}

// BenchmarkUpstreamBaseline is the network floor of one step: the
// upstream's own transport doing GET /items/1 and decoding the JSON,
// with no mapping or validation.
func BenchmarkUpstreamBaseline(b *testing.B) {
	_, up := benchSet(b)
	target, err := up.requestURL("/items/1", "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodGet, "", nil)
		req.URL, req.Host = target, target.Host
		resp, err := up.transport.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			b.Fatal(err)
		}
		sinkAny = v
	}
}

// BenchmarkEndpointInvoke is a Tier B call (c): input validation, path
// expansion, the upstream call, JSON decode, output validation.
func BenchmarkEndpointInvoke(b *testing.B) {
	s, _ := benchSet(b)
	ep := benchEndpoint(b, s, "FETCH", "/items/{item_id}")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, f := ep.Invoke(ctx, inOne)
		if f != nil {
			b.Fatal(f)
		}
		sinkAny = out
	}
}

// BenchmarkRecipeExecuteOneStep runs the one-step plan of (d) and (g):
// step input jq, Invoke, output jq, output validation.
func BenchmarkRecipeExecuteOneStep(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "lookup-item")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, _, cf := r.Execute(ctx, inOne, time.Minute)
		if cf != nil {
			b.Fatal(cf)
		}
		sinkAny = out
	}
}

// BenchmarkRecipeExecuteThreeParallel runs the three independent steps
// of (e) (here without the upstream's delay).
func BenchmarkRecipeExecuteThreeParallel(b *testing.B) {
	s, _ := benchSet(b)
	r := benchRecipe(b, s, "slow-three")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, _, cf := r.Execute(ctx, inThree, time.Minute)
		if cf != nil {
			b.Fatal(cf)
		}
		sinkAny = out
	}
}

// BenchmarkExecuteParallelSteps: a plan of three independent steps
// against an in-process upstream that answers at once, so most of an
// op is the steps' own work, each on a goroutine of its own
// (internal/workers: reused ones). cpu-ns/op is the process's CPU per
// plan run (the upstream's included).
func BenchmarkExecuteParallelSteps(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"`+r.URL.Path[1:]+`"}`)
	}))
	b.Cleanup(srv.Close)
	up := newUpstream(b, srv.URL)
	r, _ := buildSet(b, up, recipeHead+`steps:
  - {name: a, method: FETCH, path: /alpha, input: '{}'}
  - {name: b, method: FETCH, path: /beta, input: '{}'}
  - {name: c, method: FETCH, path: /gamma, input: '{}'}
output: '{a: $a.id, b: $b.id, c: $c.id}'
`,
		endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
		endpointDoc("FETCH", "/beta", "GET", "/b", ""),
		endpointDoc("FETCH", "/gamma", "GET", "/c", ""))
	ctx := context.Background()
	b.ReportAllocs()
	start := cputime.Process()
	for b.Loop() {
		if out, _, cf := r.Execute(ctx, map[string]any{}, 10*time.Second); cf != nil || fmt.Sprint(out) != "map[a:a b:b c:c]" {
			b.Fatalf("Execute: %v %v", out, cf)
		}
	}
	b.ReportMetric(float64(cputime.Process()-start)/float64(b.N), "cpu-ns/op")
}
