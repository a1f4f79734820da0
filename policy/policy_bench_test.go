package policy

// Per-stage benchmarks of the request path (go test -bench): the
// parse and identity stages and the gate, as caddymodule's serve and
// gateway call them, with the bench documents' shapes
// (scripts/bench/docs). Run with `make bench` or
// `go test -run '^$' -bench . -benchmem ./policy`.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

const benchAgentID = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"

var (
	sinkBool    bool
	sinkRefusal *Refusal
	sinkCaller  *Caller
	sinkScopes  []Scope
	sinkStrings map[string]string
	sinkAny     any
)

// benchRegistry holds the bench agent among 999 others.
func benchRegistry(b *testing.B) *Registry {
	b.Helper()
	agents := []Agent{{ID: benchAgentID, Name: "rcns-bench-agent", OwnerID: "bench-ops", TrustTier: TrustTierVerified,
		Scopes: ScopeSet{MustParseScope("rcns:negotiate"), MustParseScope("bench:read")}}}
	for i := 1; i < 1000; i++ {
		agents = append(agents, Agent{ID: fmt.Sprintf("%064x", i), Name: fmt.Sprintf("agent-%d", i), TrustTier: TrustTierVerified,
			Scopes: ScopeSet{MustParseScope("bench:read")}})
	}
	r, err := NewRegistry(agents)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func benchPolicy(b *testing.B) *MethodPolicy {
	b.Helper()
	p := &MethodPolicy{Catalog: DefaultCatalog()}
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkParseEnvelopeBody is step 1 of serve: one JSON value read
// from the body into map[string]any (encoding/json, as caddymodule does).
func BenchmarkParseEnvelopeBody(b *testing.B) {
	raw := []byte(`{"parameters":{"item_id":"1"}}`)
	b.ReportAllocs()
	for b.Loop() {
		dec := json.NewDecoder(bytes.NewReader(raw))
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			b.Fatal(err)
		}
		sinkAny = v
	}
}

// BenchmarkResolveMethod is step 2: lexical form, alias, catalog.
func BenchmarkResolveMethod(b *testing.B) {
	p := benchPolicy(b)
	for _, m := range []string{"FETCH", "LOOKUP"} {
		b.Run(m, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rm, ref := p.ResolveMethod(m)
				if ref != nil {
					b.Fatal(ref)
				}
				sinkBool = rm.Info != nil
			}
		})
	}
}

// BenchmarkCheckPath is step 4, the path grammar.
func BenchmarkCheckPath(b *testing.B) {
	p := benchPolicy(b)
	for name, path := range map[string]string{"tierB": "/items/1", "contract": "/item/d-1234"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ref := p.CheckPath(path); ref != nil {
					b.Fatal(ref)
				}
			}
		})
	}
}

// BenchmarkParseAuthorityScope parses the bench Authority-Scope values.
func BenchmarkParseAuthorityScope(b *testing.B) {
	for name, h := range map[string]string{"one": "bench:read", "two": "rcns:negotiate, bench:read"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := ParseAuthorityScope(h)
				if err != nil {
					b.Fatal(err)
				}
				sinkScopes = s
			}
		})
	}
}

// BenchmarkResolveCaller is step 6: Agent-ID syntax, scope parse,
// registry lookup, claimed ⊆ granted.
func BenchmarkResolveCaller(b *testing.B) {
	reg := benchRegistry(b)
	b.ReportAllocs()
	for b.Loop() {
		c, ref := ResolveCaller(reg, benchAgentID, "", "rcns:negotiate, bench:read", true)
		if ref != nil {
			b.Fatal(ref)
		}
		sinkCaller = c
	}
}

// BenchmarkCheckRequiredScopes is the scope check of a Tier B call or a
// contract invocation.
func BenchmarkCheckRequiredScopes(b *testing.B) {
	reg := benchRegistry(b)
	c, ref := ResolveCaller(reg, benchAgentID, "", "bench:read", true)
	if ref != nil {
		b.Fatal(ref)
	}
	req := []Scope{MustParseScope("bench:read")}
	b.ReportAllocs()
	for b.Loop() {
		sinkRefusal = CheckRequiredScopes(c, req)
	}
}

// BenchmarkGateLocks evaluates the four locks of an admitted gate request
// (Locks12 then Locks34).
func BenchmarkGateLocks(b *testing.B) {
	reg := benchRegistry(b)
	c, ref := ResolveCaller(reg, benchAgentID, "", "rcns:negotiate, bench:read", true)
	if ref != nil {
		b.Fatal(ref)
	}
	g := Gate{Enabled: true, MinTrustTier: TrustTierVerified}
	b.ReportAllocs()
	for b.Loop() {
		states, proceed, ref := g.Locks12(AllowRCNS("true"))
		if !proceed || ref != nil {
			b.Fatal("locks 1-2 closed")
		}
		if ref := g.Locks34(c, &states); ref != nil {
			b.Fatal(ref)
		}
	}
}

// BenchmarkLockStatesMap is the lock map of every refusal's attempt
// record (caddymodule refuse).
func BenchmarkLockStatesMap(b *testing.B) {
	s := LockStates{LockOpen, LockOpen, LockOpen, LockOpen}
	b.ReportAllocs()
	for b.Loop() {
		sinkStrings = s.Map()
	}
}

// BenchmarkRouteLookup is the Tier B route table lookup (step 8) over a
// small table: a hit with one parameter and a miss.
func BenchmarkRouteLookup(b *testing.B) {
	p := benchPolicy(b)
	rt := &RouteTable[int]{}
	for i, t := range []string{"/items/{item_id}", "/slow/{item_id}", "/guests/{guest_id}", "/properties/{property_id}", "/reservations"} {
		tmpl, err := p.ParsePathTemplate(t)
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.Add("FETCH", tmpl, i); err != nil {
			b.Fatal(err)
		}
	}
	for name, c := range map[string][2]string{"hit": {"FETCH", "/items/1"}, "miss": {"LOOKUP", "/nothing"}} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m, ok := rt.Lookup(c[0], c[1])
				sinkBool = ok && m.Params != nil
			}
		})
	}
}
