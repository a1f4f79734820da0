package engine

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// The engine's micro-benchmarks: one step of the request path each,
// without a door (the whole path is caddymodule's BenchmarkServe).

// BenchmarkAttribution is the Attribution-Record of one contract
// answer as the handler builds it (payload appended by hand in
// encoding/json's key order, request_hash of a 30-byte body, chain
// append, JWS), unsigned and Ed25519.
func BenchmarkAttribution(b *testing.B) {
	up := testUpstream(b)
	for _, signed := range []bool{false, true} {
		name := "none"
		if signed {
			name = "ed25519"
		}
		b.Run(name, func(b *testing.B) {
			adjust := []func(*Config){func(c *Config) { c.Upstreams["bench"].URL = up }}
			if signed {
				adjust = append(adjust, withRecordKey(b))
			}
			h := newTestEngine(b, adjust...)
			h.Activate() // what the first request does: opens the record chains
			body := []byte(`{"parameters":{"item_id":"1"}}`)
			r := httptest.NewRequest("LOOKUP", "/item/d-1", bytes.NewReader(body))
			x := &exchange{h: h.Engine, in: &agtp.Request{Method: r.Method, Target: r.RequestURI, ContentLength: r.ContentLength}, bodyRead: true, rawBody: body, agentID: testAgent, method: "LOOKUP", ownerID: "bench-ops", requestID: newUUID(),
				contract: idempotency.ContractRef{SynthesisID: "syn-UAnHZX7sOG7zkqfyKqWafw", NegotiationOrigin: "rcns-gate",
					ContractHash: "b514591affe87603c866d338581f7f760e9fade9d9b6de220051aa808cf915d3"}}
			resp := newUUID()
			b.ReportAllocs()
			for b.Loop() {
				rec, id := x.attribution(200, resp)
				if rec == "" || id == "" {
					b.Fatal("empty Attribution-Record")
				}
			}
		})
	}
}

// BenchmarkContractAnswer is the 263 body of a one-step synthesis as
// the handler writes it: the canonical endpoint bytes spliced in, the
// other members and the result encoded around them.
func BenchmarkContractAnswer(b *testing.B) {
	h := newTestEngine(b)
	var r *recipes.Recipe
	for _, rc := range h.RecipeSet().Recipes {
		if rc.Name == "lookup-item" {
			r = rc
		}
	}
	if r == nil {
		b.Fatal("no lookup-item recipe")
	}
	hash, ep, err := r.ContractHashFor("LOOKUP", "/item/g-1-1")
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	c := &recipes.Contract{SynthesisID: recipes.NewSynthesisID(), Method: "LOOKUP", Path: "/item/g-1-1", Recipe: r, EndpointJSON: ep,
		Lineage: r.Lineage(), ContractHash: hash, NegotiationOrigin: recipes.OriginGate, IssuedAt: now, ExpiresAt: now.Add(30 * time.Second)}
	result := map[string]any{"item": map[string]any{"id": "1", "name": "bench item", "price": 12.5}}
	b.ReportAllocs()
	for b.Loop() {
		body := contractBody(c)
		body.Members["status"] = 263
		body.Members["result"] = result
		raw, err := body.Encode()
		if err != nil || len(raw) == 0 {
			b.Fatal(err)
		}
	}
}

// BenchmarkMetricsPresentation is the metrics of one contract
// presentation (request count and duration, presentation, composition,
// step and upstream call), from every core at once as under load: resolved is the handler's
// path (children resolved once: presented, recipeRun, the request
// counter's last code); with-label-values is the path it replaced,
// WithLabelValues on every observation (kept here only as the baseline).
func BenchmarkMetricsPresentation(b *testing.B) {
	m, err := newMetrics(nil, []string{"LOOKUP"})
	if err != nil {
		b.Fatal(err)
	}
	r := &recipes.Recipe{Name: "lookup-item"}
	reports := []recipes.StepReport{{Name: "item", Upstream: "bench", State: recipes.StepSucceeded, Called: true, Duration: time.Millisecond}}
	b.Run("resolved", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.recipeRun(r, 0.001, reports)
				m.presentation(viaSynthesisID, "executed")
				m.request("LOOKUP", 200, "http")
				m.requestDuration("http", kindContract, 200, "", 0.002)
			}
		})
	})
	b.Run("with-label-values", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.compositionSeconds.WithLabelValues(r.Name).Observe(0.001)
				m.stepSeconds.WithLabelValues(r.Name, reports[0].Name).Observe(0.001)
				m.upstreamSeconds.WithLabelValues(reports[0].Upstream).Observe(0.001)
				m.presentations.WithLabelValues(presentationVia.label(viaSynthesisID), presentationOutcomes.label("executed")).Inc()
				m.requests.WithLabelValues(m.methodSeries("LOOKUP")[0].label, codeLabel(200), "http").Inc()
				m.requestSeconds.WithLabelValues("http", requestKinds[kindContract], requestOutcomes[outcomeIndex(200, "")]).Observe(0.002)
			}
		})
	})
}

// BenchmarkMetricsRequestDuration is the request duration histogram's
// observation of one answer, from every core at once: resolved is the
// engine's path (requestDuration, the child resolved once per binding,
// kind and outcome); with-label-values resolves the child at every
// observation (the baseline).
func BenchmarkMetricsRequestDuration(b *testing.B) {
	m, err := newMetrics(nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("resolved", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.requestDuration("http", kindTierB, 200, "", 0.002)
			}
		})
	})
	b.Run("with-label-values", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.requestSeconds.WithLabelValues("http", requestKinds[kindTierB], requestOutcomes[outcomeIndex(200, "")]).Observe(0.002)
			}
		})
	})
}
