package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry spans end to end, in a real trace backend: Jaeger
// (built by `make deps` into .tools/bin/jaeger from tools/jaeger), fed
// over OTLP/HTTP by the gateway (Caddy's tracing, its autoexport
// environment variables), by the test's agent (the root span) and by
// the traced upstream, an otelhttp-instrumented Go server that joins
// the trace from the traceparent each step sends.

// Service names the spans of the test's own processes carry.
const (
	traceAgentService    = "rcns-it-agent"
	traceUpstreamService = "rcns-it-upstream"
	traceGatewayService  = "rcns-it-gateway"
)

// jaegerInstance is one running Jaeger (all in one, memory storage).
type jaegerInstance struct {
	OTLP  string // http://127.0.0.1:P, the OTLP/HTTP receiver
	Query string // http://127.0.0.1:Q, the query API (/api/traces)
}

// jaegerConfig binds every listener Jaeger opens to loopback and the
// given ports (its defaults bind the UI on every interface, and fixed
// ports): OTLP/HTTP in, the query API and its gRPC out, memory storage,
// no self-telemetry server.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{{QUERY}}
    grpc:
      endpoint: 127.0.0.1:{{QUERY_GRPC}}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{{OTLP}}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// startJaeger runs .tools/bin/jaeger with jaegerConfig on free ports
// and waits for its query API.
func startJaeger(t testing.TB) *jaegerInstance {
	t.Helper()
	bin := filepath.Join(repoRoot, ".tools", "bin", "jaeger")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("jaeger not found at %s: run `make deps` (builds it from tools/jaeger)", bin)
	}
	otlp, query, grpc := freePort(t), freePort(t), freePort(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	text := fill(jaegerConfig, "OTLP", strconv.Itoa(otlp), "QUERY", strconv.Itoa(query), "QUERY_GRPC", strconv.Itoa(grpc))
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "jaeger", dir, nil, bin, "--config", cfg)
	j := &jaegerInstance{OTLP: fmt.Sprintf("http://127.0.0.1:%d", otlp), Query: fmt.Sprintf("http://127.0.0.1:%d", query)}
	waitHTTP(t, p, j.Query+"/api/services", gatewayStartup)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("jaeger output (tail):\n%s", p.tail(logTailLines))
		}
	})
	return j
}

// tracerProvider is an SDK provider for service that exports each span
// to j as it ends (a synchronous exporter: the test flushes nothing).
func (j *jaegerInstance) tracerProvider(t testing.TB, service string) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(j.OTLP+"/v1/traces"))
	if err != nil {
		t.Fatalf("OTLP exporter: %v", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// jaegerTrace is the part of the query API's trace JSON the test reads.
type jaegerTrace struct {
	Spans []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []struct {
			RefType string `json:"refType"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
		ProcessID string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// span is one span of a trace, its parent and service resolved.
type span struct {
	ID, Name, Parent, Service string
	Tags                      map[string]any
}

// fetchTrace reads trace id from j's query API: its spans, or nil
// while Jaeger does not know the trace.
func (j *jaegerInstance) fetchTrace(t testing.TB, id string) []span {
	t.Helper()
	resp, err := testClient.Get(j.Query + "/api/traces/" + id)
	if err != nil {
		t.Fatalf("jaeger query: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var body struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("jaeger query %s: status %d, %v", id, resp.StatusCode, err)
	}
	var out []span
	for _, tr := range body.Data {
		for _, s := range tr.Spans {
			sp := span{ID: s.SpanID, Name: s.OperationName, Service: tr.Processes[s.ProcessID].ServiceName, Tags: map[string]any{}}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					sp.Parent = r.SpanID
				}
			}
			for _, tg := range s.Tags {
				sp.Tags[tg.Key] = tg.Value
			}
			out = append(out, sp)
		}
	}
	return out
}

// spanTree is a trace's spans by id, and their children.
type spanTree struct {
	byID     map[string]span
	children map[string][]span
}

func newSpanTree(spans []span) *spanTree {
	st := &spanTree{byID: map[string]span{}, children: map[string][]span{}}
	for _, s := range spans {
		st.byID[s.ID] = s
		st.children[s.Parent] = append(st.children[s.Parent], s)
	}
	return st
}

// find is the spans named name in the subtree under id.
func (st *spanTree) find(id, name string) []span {
	var out []span
	for _, c := range st.children[id] {
		if c.Name == name {
			out = append(out, c)
		}
		out = append(out, st.find(c.ID, name)...)
	}
	return out
}

// describe lists the tree under root, indented, for failure messages.
func (st *spanTree) describe(root string, depth int) string {
	var b strings.Builder
	for _, c := range st.children[root] {
		fmt.Fprintf(&b, "%s%s [%s] %v\n", strings.Repeat("  ", depth), c.Name, c.Service, c.Tags)
		b.WriteString(st.describe(c.ID, depth+1))
	}
	return b.String()
}

// checkRequestTree reports what the span tree of one traced request over
// door lacks: beneath the agent's root span, the gateway's server span
// (Caddy's tracing module), beneath it the engine's request span named
// for the method and path template with its attributes, beneath that
// the identity and record signing stages and one span per recipe step
// (in order a, b, c, each with its upstream and status), and beneath
// each step the traced upstream's own server span. "" when complete.
func checkRequestTree(spans []span, rootID, door string) string {
	st := newSpanTree(spans)
	var problems []string
	reqs := st.find(rootID, "AGTP COMPILE /trace-chain")
	if len(reqs) != 1 {
		return fmt.Sprintf("want one request span AGTP COMPILE /trace-chain beneath the agent's span, got %d", len(reqs))
	}
	req := reqs[0]
	if srv, ok := st.byID[req.Parent]; !ok || srv.Service != traceGatewayService || srv.Parent == "" {
		problems = append(problems, fmt.Sprintf("the request span's parent %q is not the gateway's server span (Caddy's tracing)", req.Parent))
	}
	for k, want := range map[string]any{"rcns.door": door, "rcns.method": "COMPILE", "rcns.path_template": "/trace-chain",
		"rcns.agent_id": agentA1, "rcns.outcome": "negotiated", "rcns.kind": "gate", "rcns.recipe": "trace-chain"} {
		if got := req.Tags[k]; got != want {
			problems = append(problems, fmt.Sprintf("request span %s = %v, want %v", k, got, want))
		}
	}
	if id, _ := req.Tags["rcns.contract_id"].(string); id == "" {
		problems = append(problems, "request span without rcns.contract_id")
	}
	for _, stage := range []string{"rcns.identity", "rcns.gate", "rcns.recipe", "rcns.record.sign"} {
		if len(st.find(req.ID, stage)) != 1 {
			problems = append(problems, "no single "+stage+" span beneath the request span")
		}
	}
	for _, step := range []string{"a", "b", "c"} {
		ss := st.find(req.ID, "rcns.step "+step)
		if len(ss) != 1 {
			problems = append(problems, fmt.Sprintf("%d spans for step %s, want 1", len(ss), step))
			continue
		}
		s := ss[0]
		if s.Tags["rcns.upstream"] != "traced" || fmt.Sprint(s.Tags["http.response.status_code"]) != "200" || s.Tags["rcns.step"] != step {
			problems = append(problems, fmt.Sprintf("step %s span tags %v", step, s.Tags))
		}
		var up []span
		for _, c := range st.children[s.ID] {
			if c.Service == traceUpstreamService {
				up = append(up, c)
			}
		}
		if len(up) != 1 || up[0].Name != "upstream GET /parts/"+step {
			problems = append(problems, fmt.Sprintf("step %s: want the upstream's own span beneath it, got %v", step, up))
		}
	}
	if len(problems) == 0 {
		return ""
	}
	return strings.Join(problems, "\n") + "\ntree:\n" + st.describe("", 0)
}

// tracingSite is the gateway of TestTracingSpanTree: Caddy's tracing
// before rcns (the HTTP binding and the MCP door), the native door's
// tracing in the agtp option, and the three-step recipe on the traced
// upstream.
const tracingSite = `
	tracing {
		span caddy
	}
	rcns {
		server_id caddy-rcns-it
		identity header
		enabled true
		mode optimistic
		upstream traced {{UP}}
		agents examples/hotel/agents
		endpoints integration/testdata/tracing/endpoints
		recipes integration/testdata/tracing/recipes
		mcp
	}
`

// TestTracingSpanTree: a three-step recipe over each door (the HTTP
// binding, the native AGTP/1.0 door, MCP) is one trace in Jaeger: the
// agent's span, the gateway's server span, the engine's request span
// with its stages, a span per step, and beneath each step the
// upstream's own span. It covers the three doors itself, so it runs
// once (not again under RCNS_IT_DOOR=agtp).
func TestTracingSpanTree(t *testing.T) {
	j := startJaeger(t)
	agent := j.tracerProvider(t, traceAgentService).Tracer("rcns-it")
	upTP := j.tracerProvider(t, traceUpstreamService)
	prop := propagation.TraceContext{}
	up := serve(t, otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		part := strings.TrimPrefix(r.URL.Path, "/parts/")
		writeJSON(w, http.StatusOK, map[string]any{"part": part})
	}), "upstream", otelhttp.WithTracerProvider(upTP), otelhttp.WithPropagators(prop),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "upstream " + r.Method + " " + r.URL.Path })))

	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, fill(tracingSite, "UP", up), "agtp")
	const native = "\t\thandler default\n"
	if !strings.Contains(text, native) {
		t.Fatalf("no native door in the rendered Caddyfile:\n%s", text)
	}
	text = strings.Replace(text, native, native+"\t\ttracing {\n\t\t\tspan agtp\n\t\t}\n", 1)
	gw := launchTextEnv(t, text, sitePort, adminPort, agtpPort, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLP,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_SERVICE_NAME=" + traceGatewayService,
		"OTEL_BSP_SCHEDULE_DELAY=100",
	})

	// rooted starts the agent's root span and returns its traceparent
	// and ids; the span ends when the door's request has been answered.
	rooted := func(door string) (ctx context.Context, end func(), tp, traceID, rootID string) {
		ctx, sp := agent.Start(context.Background(), "agent "+door)
		h := propagation.HeaderCarrier{}
		prop.Inject(ctx, h)
		sc := trace.SpanContextFromContext(ctx)
		return ctx, func() { sp.End() }, h.Get("Traceparent"), sc.TraceID().String(), sc.SpanID().String()
	}
	body := map[string]any{"parameters": map[string]any{}}
	// Each door's call from a new agent session, so each runs the gate
	// (the contract is the agent's: a second call would run it by pair).
	doors := []struct {
		door string
		call func(t *testing.T, tp string)
	}{
		{"http", func(t *testing.T, tp string) {
			r := gw.DoHTTP(t, "COMPILE", "/trace-chain", hdr(agentA1, scopeAll, "Allow-RCNS", "true", "traceparent", tp), body)
			if r.Status != 263 {
				t.Fatalf("HTTP door: %s", r)
			}
		}},
		{"agtp", func(t *testing.T, tp string) {
			r := gw.Do(t, "COMPILE", "/trace-chain", hdr(agentA1, scopeAll, "Allow-RCNS", "true", "traceparent", tp), body)
			if r.Status != 263 || r.Reason == "" {
				t.Fatalf("native door: %s", r)
			}
		}},
		{"mcp", func(t *testing.T, tp string) {
			c := mcpConnect(t, gw, "/mcp", agentA1, scopeAll)
			c.tr.hdr["traceparent"] = tp
			c.call(t, "trace-chain", map[string]any{}, nil).wantSuccess(t, 263)
		}},
	}
	for _, d := range doors {
		t.Run(d.door, func(t *testing.T) {
			releaseAll(t, gw, agentA1) // the gate again, not the contract of the door before
			_, end, tp, traceID, rootID := rooted(d.door)
			d.call(t, tp)
			end()
			// The gateway exports in batches (OTEL_BSP_SCHEDULE_DELAY):
			// poll until the tree is whole, within a bound.
			var why string
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				spans := j.fetchTrace(t, traceID)
				if why = checkRequestTree(spans, rootID, d.door); why == "" {
					t.Logf("trace %s over the %s door:\n%s", traceID, d.door, newSpanTree(spans).describe("", 0))
					return
				}
				if spans == nil {
					why = "Jaeger does not know the trace " + traceID
				}
			}
			t.Fatalf("trace %s over the %s door:\n%s", traceID, d.door, why)
		})
	}
	// Under RCNS_IT_RACE=1 the gateway is built with -race: the spans of
	// concurrent steps and stages raced nothing.
	if strings.Contains(gw.Output(), "WARNING: DATA RACE") {
		t.Errorf("the gateway reported a data race:\n%s", gw.Output())
	}
}

// releaseAll revokes every contract agent holds on g.
func releaseAll(t testing.TB, g *Gateway, agent string) {
	t.Helper()
	for _, id := range contractIDs(contracts(t, g, agent)) {
		if r := revokeContract(t, g, agent, scopeAll, id); r.Status != 200 {
			t.Fatalf("REVOKE %s: %s", id, r)
		}
	}
}
