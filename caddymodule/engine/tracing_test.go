package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedUpstream serves GET /items/{id} as testUpstream does and keeps
// each request's traceparent.
type tracedUpstream struct {
	URL string
	mu  sync.Mutex
	tps []string
}

func newTracedUpstream(t testing.TB) *tracedUpstream {
	u := &tracedUpstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.tps = append(u.tps, r.Header.Get("Traceparent"))
		u.mu.Unlock()
		b, _ := json.Marshal(map[string]any{"id": r.PathValue("id"), "name": "bench item", "price": 12.5})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})
	u.URL = serveLoopback(t, mux)
	return u
}

func (u *tracedUpstream) take() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.tps
	u.tps = nil
	return out
}

// spanAttrs is a recorded span's attributes as strings.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// TestSpans: under a recording parent span (a door's: Caddy's tracing
// handler's), a Tier B call and a gate synthesis are each one request
// span named for the method and path template, with the stages that
// cost time beneath it, and each upstream call carries its own span as
// traceparent. Under a span that does not record, nothing is recorded
// and the agent's traceparent goes upstream as it came.
func TestSpans(t *testing.T) {
	up := newTracedUpstream(t)
	te := newTestEngine(t, func(c *Config) { c.Upstreams["bench"] = &UpstreamConfig{URL: up.URL} })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	serveUnder := func(ctx context.Context, method, target, body string, kv ...string) *testAnswer {
		hdr := agentHeader(kv...)
		if body != "" {
			hdr.Set("Content-Type", "application/json")
		}
		in := newTestRequest(t, method, target, hdr, body)
		resp := te.Serve(ctx, in)
		a := &testAnswer{Response: resp}
		_ = json.Unmarshal(resp.Body, &a.body)
		return a
	}
	byName := func() map[string][]sdktrace.ReadOnlySpan {
		m := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			m[s.Name()] = append(m[s.Name()], s)
		}
		return m
	}
	ctx, door := tp.Tracer("test").Start(context.Background(), "door")

	// A Tier B call: FETCH /items/{id}.
	if a := serveUnder(ctx, "FETCH", "/items/42", ""); a.Status != 200 {
		t.Fatalf("FETCH: %s", a)
	}
	spans := byName()
	reqs := spans["AGTP FETCH /items/{item_id}"]
	if len(reqs) != 1 {
		t.Fatalf("request spans: %v", spans)
	}
	req := reqs[0]
	if req.Parent().SpanID() != door.SpanContext().SpanID() {
		t.Errorf("the request span's parent is not the door's span")
	}
	want := map[string]string{AttrDoor: "http", AttrMethod: "FETCH", AttrPathTemplate: "/items/{item_id}", AttrAgentID: testAgent,
		AttrKind: "tier_b", AttrStatus: "200", AttrOutcome: "success"}
	got := spanAttrs(req)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("request span %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	for _, name := range []string{SpanIdentity, SpanUpstream, SpanRecordSign} {
		ss := spans[name]
		if len(ss) != 1 || ss[0].Parent().SpanID() != req.SpanContext().SpanID() {
			t.Errorf("%s: want one child of the request span, got %d", name, len(ss))
		}
	}
	upSpan := spans[SpanUpstream][0]
	if a := spanAttrs(upSpan); a["rcns.upstream"] != "bench" || a["http.response.status_code"] != "200" || a["http.request.method"] != "GET" {
		t.Errorf("upstream span attributes %v", a)
	}
	if tps := up.take(); len(tps) != 1 || tps[0] != "00-"+upSpan.SpanContext().TraceID().String()+"-"+upSpan.SpanContext().SpanID().String()+"-01" {
		t.Errorf("upstream traceparent %q, want the upstream span's (%s)", tps, upSpan.SpanContext().SpanID())
	}

	// A gate synthesis: LOOKUP /item/{id} under the recipe lookup-item.
	rec.Reset()
	body := `{"parameters":{"item_id":"7"}}`
	if a := serveUnder(ctx, "LOOKUP", "/item/t-7", body, "Allow-RCNS", "true"); a.Status != 263 {
		t.Fatalf("LOOKUP: %s", a)
	}
	spans = byName()
	var reqSpan sdktrace.ReadOnlySpan
	for name, ss := range spans {
		if len(name) > 12 && name[:12] == "AGTP LOOKUP " {
			reqSpan = ss[0]
		}
	}
	if reqSpan == nil {
		t.Fatalf("no request span: %v", spans)
	}
	ra := spanAttrs(reqSpan)
	if ra[AttrPathTemplate] == "/item/t-7" || ra[AttrPathTemplate] == "" || ra[AttrKind] != "gate" || ra[AttrContractID] == "" || ra[AttrRecipe] != "lookup-item" {
		t.Errorf("gate request span %q attributes %v", reqSpan.Name(), ra)
	}
	gate, recipe, step := spans[SpanGate], spans[SpanRecipe], spans["rcns.step item"]
	if len(gate) != 1 || len(recipe) != 1 || len(step) != 1 {
		t.Fatalf("gate %d, recipe %d, step %d spans; want one each", len(gate), len(recipe), len(step))
	}
	if gate[0].Parent().SpanID() != reqSpan.SpanContext().SpanID() || recipe[0].Parent().SpanID() != gate[0].SpanContext().SpanID() ||
		step[0].Parent().SpanID() != recipe[0].SpanContext().SpanID() {
		t.Errorf("the step is not beneath the recipe beneath the gate beneath the request")
	}
	if a := spanAttrs(step[0]); a["rcns.upstream"] != "bench" || a["http.response.status_code"] != "200" || a["rcns.step"] != "item" {
		t.Errorf("step span attributes %v", a)
	}
	if tps := up.take(); len(tps) != 1 || tps[0][36:52] != step[0].SpanContext().SpanID().String() {
		t.Errorf("upstream traceparent %q, want the step span's (%s)", tps, step[0].SpanContext().SpanID())
	}

	// A keyed call: its claim is a span of its own. A refusal: the
	// request span names the reason and the outcome, the stage that
	// refused is marked failed.
	rec.Reset()
	if a := serveUnder(ctx, "FETCH", "/items/44", "", "Idempotency-Key", "trace-key-1"); a.Status != 200 {
		t.Fatalf("keyed FETCH: %s", a)
	}
	if spans = byName(); len(spans[SpanClaim]) != 1 {
		t.Errorf("keyed call: %d %s spans, want 1", len(spans[SpanClaim]), SpanClaim)
	}
	up.take()
	rec.Reset()
	hdr := http.Header{"Agent-Id": {strings.Repeat("0", 64)}}
	te.Serve(ctx, newTestRequest(t, "FETCH", "/items/45", hdr, ""))
	spans = byName()
	refused, ident := spans["AGTP FETCH"], spans[SpanIdentity]
	if len(refused) != 1 || len(ident) != 1 {
		t.Fatalf("refusal: spans %v", spans)
	}
	if a := spanAttrs(refused[0]); a[AttrOutcome] != "refused" || a[AttrReason] == "" || a[AttrKind] != "unrouted" {
		t.Errorf("refused request span attributes %v", a)
	}
	if ident[0].Status().Code != codes.Error || ident[0].Status().Description != spanAttrs(refused[0])[AttrReason] {
		t.Errorf("the identity span of a refused identity: status %v", ident[0].Status())
	}
	door.End()

	// Not recording (no tracing configured, or not sampled): no spans,
	// the agent's traceparent forwarded unchanged.
	rec.Reset()
	const agentTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	if a := serveUnder(unsampled, "FETCH", "/items/43", "", "Traceparent", agentTP); a.Status != 200 {
		t.Fatalf("FETCH: %s", a)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded under a parent that does not record", n)
	}
	if tps := up.take(); len(tps) != 1 || tps[0] != agentTP {
		t.Errorf("untraced upstream traceparent %q, want the agent's %q", tps, agentTP)
	}
}

// newTestRequest is the agtp.Request the HTTP door frames for method
// and target with hdr and body, from a loopback address.
func newTestRequest(t testing.TB, method, target string, hdr http.Header, body string) *agtp.Request {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatalf("target %q: %v", target, err)
	}
	in := &agtp.Request{Binding: agtp.BindingHTTP, Method: method, Target: target, URL: u, Host: "127.0.0.1",
		Header: hdr, ContentLength: int64(len(body)), Loopback: true}
	if body != "" {
		in.Body = strings.NewReader(body)
	}
	return in
}
