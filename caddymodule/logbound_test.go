package caddymodule

import (
	"strconv"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestLogBoundMCPFlood: a flood of malformed MCP messages from one
// agent (bad JSON, bad JSON-RPC, unknown methods and tools, bad
// arguments, and requests its identity is refused on) logs at most
// engine.LogBurst lines per (agent, reason) within a window, and the
// SDK's own warnings at most engine.LogBurst per level: the volume
// does not grow with the flood.
func TestLogBoundMCPFlood(t *testing.T) {
	h, url := mcpGateway(t)
	core, logs := observer.New(zap.DebugLevel)
	setLogCore(t, h, core)
	agent := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"}
	malformed := map[string]string{"Agent-ID": strings.Repeat("Z", 64)}
	const n = 60
	for i := range n {
		for _, b := range []string{`{`, `{"jsonrpc":"2.0"}`, `{"jsonrpc":"2.0","id":1,"method":"nope"}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"x":1}}}`,
			`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"x":1}}},{"x":1}]`} {
			mcpPost(t, url, b, agent)
		}
		if st, _, _ := mcpPost(t, url, listMsg, malformed); st != 400 {
			t.Fatalf("request %d with a malformed Agent-ID answered %d, want 400", i, st)
		}
	}
	perKey := map[string]int{}
	for _, e := range logs.All() {
		m := e.ContextMap()
		perKey[e.Message+"|"+e.Level.String()+"|"+str(m["agent_id"])+"|"+str(m["reason"])]++
	}
	total := 0
	for k, c := range perKey {
		total += c
		if c > engine.LogBurst {
			t.Errorf("%d lines for %s, want at most %d", c, k, engine.LogBurst)
		}
	}
	if got := logs.FilterMessage("MCP identity refused").Len(); got == 0 || got > engine.LogBurst {
		t.Errorf("%d \"MCP identity refused\" lines for %d refusals, want 1..%d", got, n, engine.LogBurst)
	}
	t.Logf("lines by (message, level, agent, reason): %v", perKey)
	if total > 4*engine.LogBurst {
		t.Errorf("%d lines for a flood of %d requests, want at most %d: %v", total, 7*n, 4*engine.LogBurst, perKey)
	}
	// Every request is counted, the ones the log leaves out included:
	// the malformed payloads (the SDK's 400s) and the identity refusals
	// (400) by status, each HTTP request once.
	all := 0.0
	for _, code := range []string{"200", "400"} {
		all += metricValue(t, h, "caddy_rcns_mcp_http_requests_total", "code", code)
	}
	if all != 7*n || metricValue(t, h, "caddy_rcns_mcp_http_requests_total", "code", "400") < 3*n {
		t.Errorf("caddy_rcns_mcp_http_requests_total: %v requests counted (400: %v), want %d (at least %d 400s)",
			all, metricValue(t, h, "caddy_rcns_mcp_http_requests_total", "code", "400"), 7*n, 3*n)
	}
}

// TestLogBoundRefusals: an agent's refusals on the HTTP door (the RCNS
// gate's, then its rate limit's) log at most engine.LogBurst lines per
// reason within a window, however many it sends.
func TestLogBoundRefusals(t *testing.T) {
	g := &testGateway{h: benchHandler(t, benchUpstream(t).URL, false)}
	core, logs := observer.New(zap.InfoLevel)
	setLogCore(t, g.h, core)
	const n = 50
	reasons := map[string]int{}
	for range n {
		a := g.do(t, "LOOKUP", "/item/x", nil, "Allow-RCNS", "true", "Authority-Scope", "bench:read")
		if a.str("reason") == "" {
			t.Fatalf("LOOKUP without rcns:negotiate was not refused: %s", a)
		}
		reasons[a.str("reason")]++
	}
	for _, msg := range []string{"rcns refusal", "rate limited"} {
		if got := logs.FilterMessage(msg).Len(); got > engine.LogBurst {
			t.Errorf("%d %q lines for %d refusals (%v), want at most %d", got, msg, n, reasons, engine.LogBurst)
		}
	}
	t.Logf("%d refusals %v: %d lines", n, reasons, logs.Len())
	if logs.Len() == 0 {
		t.Errorf("no line at all for %d refusals (%v): the first of each reason is logged", n, reasons)
	}
}

// TestLogBoundSyntheses: the lines of an agent's successful requests
// that change a contract (the gate's synthesis, PROPOSE, SUSPEND) are
// held to the same bound as its refusals: engine.LogBurst per (agent,
// kind) within a window, the first written, every one still counted in
// caddy_rcns_syntheses_total. An agent synthesizing at its rate limit
// wrote one INFO line per synthesis.
func TestLogBoundSyntheses(t *testing.T) {
	g := &testGateway{h: benchHandler(t, benchUpstream(t).URL, false)}
	core, logs := observer.New(zap.InfoLevel)
	setLogCore(t, g.h, core)
	const n = 3 * engine.LogBurst
	var ids []string
	for i := range n {
		a := g.do(t, "LOOKUP", "/item/lb-gate-"+strconv.Itoa(i), map[string]any{"parameters": map[string]any{"item_id": "1"}}, "Allow-RCNS", "true")
		if a.status != 263 {
			t.Fatalf("synthesis %d: %s", i, a)
		}
		ids = append(ids, g.propose(t, "/item/lb-propose-"+strconv.Itoa(i)))
	}
	for _, id := range ids {
		if a := g.builtin(t, "SUSPEND", map[string]any{"synthesis_id": id}); a.status != 200 {
			t.Fatalf("SUSPEND %s: %s", id, a)
		}
	}
	for _, msg := range []string{"rcns contract synthesized", "rcns proposal accepted", "rcns contract released"} {
		if got := logs.FilterMessage(msg).Len(); got == 0 || got > engine.LogBurst {
			t.Errorf("%d %q lines for %d requests, want 1..%d", got, msg, n, engine.LogBurst)
		}
	}
	for mode, want := range map[string]float64{"optimistic": n, "propose": n} {
		var got float64
		for _, outcome := range []string{"previewed", "executed", "failed"} {
			got += metricValue(t, g.h, "caddy_rcns_syntheses_total", "mode", mode, "outcome", outcome)
		}
		if got != want {
			t.Errorf("caddy_rcns_syntheses_total{mode=%q}: %v, want %v (every synthesis counted)", mode, got, want)
		}
	}
}

// str is v as a string, "" when it is not one.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// TestLogBoundMalformed: a flood of malformed AGTP requests on the HTTP
// door from one agent (a body that is not JSON, a JSON body too deep
// for the limit, an invalid Idempotency-Key, a Task-ID that is not a
// token, a malformed Agent-ID, a method outside the catalog, a path
// with bad percent-encoding) writes no line above INFO and, per
// (message, agent, reason), at most engine.LogBurst lines within a
// window: the volume does not grow with the flood, while every request
// is answered with its refusal.
func TestLogBoundMalformed(t *testing.T) {
	g := &testGateway{h: benchHandler(t, benchUpstream(t).URL, false)}
	core, logs := observer.New(zap.DebugLevel)
	setLogCore(t, g.h, core)
	agent := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": testScope, "Content-Type": "application/json"}
	with := func(kv ...string) map[string]string {
		h := map[string]string{}
		for k, v := range agent {
			h[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	cases := []struct {
		name, method, target string
		hdr                  map[string]string
		body                 string
	}{
		{"not JSON", "FETCH", "/items/1", agent, `{"parameters":`},
		{"too deep", "FETCH", "/items/1", agent, `{"parameters":{"x":` + deep + `}}`},
		{"bad Idempotency-Key", "FETCH", "/items/1", with("Idempotency-Key", "\x01"), ""},
		{"bad Task-ID", "FETCH", "/items/1", with("Task-ID", "not a token"), ""},
		{"malformed Agent-ID", "FETCH", "/items/1", with("Agent-ID", strings.Repeat("Z", 64)), ""},
		{"unknown method", "ZZZFROB", "/items/1", agent, ""},
		{"dot segment", "FETCH", "/items/%2e%2e", agent, ""},
	}
	const n = 40
	for i := range n {
		for _, c := range cases {
			var a *answer
			if c.body == "" {
				a = g.serve(t, c.method, c.target, c.hdr, nil, 0)
			} else {
				a = g.serve(t, c.method, c.target, c.hdr, strings.NewReader(c.body), int64(len(c.body)))
			}
			if a.status < 400 || a.str("reason") == "" {
				t.Fatalf("%s (request %d) was not refused: %s", c.name, i, a)
			}
		}
	}
	perKey := map[string]int{}
	for _, e := range logs.All() {
		if e.Level > zap.InfoLevel {
			t.Errorf("a %s line for an agent's malformed request: %s %v", e.Level, e.Message, e.ContextMap())
		}
		m := e.ContextMap()
		perKey[e.Message+"|"+str(m["agent_id"])+"|"+str(m["reason"])]++
	}
	total := 0
	for k, c := range perKey {
		total += c
		if c > engine.LogBurst {
			t.Errorf("%d lines for %s, want at most %d", c, k, engine.LogBurst)
		}
	}
	t.Logf("%d requests: lines by (message, agent, reason): %v", n*len(cases), perKey)
	if total > len(cases)*engine.LogBurst {
		t.Errorf("%d lines for %d requests, want at most %d", total, n*len(cases), len(cases)*engine.LogBurst)
	}
}
