package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// itemEndpoint is a Tier B endpoint document for method and path over
// the bench upstream's GET /items/{item_id}; query, when not empty, is
// the external_service query block (indented under it).
func itemEndpoint(method, path, description, intent, capability, query string) string {
	if query != "" {
		query = "  query:\n" + query
	}
	return `method: ` + method + `
path: ` + path + `
description: ` + description + `
semantic:
  intent: ` + intent + `
  actor: agent
  outcome: The item record is returned.
  capability: ` + capability + `
  confidence: 0.9
  impact: informational
  is_idempotent: true
input_schema:
  type: object
  additionalProperties: false
  required: [item_id]
  properties:
    item_id: {type: string, minLength: 1}
output_schema: {type: object}
errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
required_scopes: [bench:read]
external_service:
  upstream: bench
  method: GET
  path: /items/{item_id}
` + query + `  timeout_seconds: 10
`
}

// catalogEndpoint is an operator DISCOVER endpoint (Tier B) over the
// bench upstream.
var catalogEndpoint = itemEndpoint("DISCOVER", "/catalog/{item_id}", "Describes one catalog item.",
	"Describe one catalog item by its id.", "discovery", "")

// newCatalogGateway is newTestGateway plus catalogEndpoint.
func newCatalogGateway(t *testing.T) *testGateway {
	t.Helper()
	eps := t.TempDir()
	if err := os.WriteFile(filepath.Join(eps, "discover-catalog.yaml"), []byte(catalogEndpoint), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, false, eps, "")}
}

// wantAGTPAnswer checks the response headers every AGTP answer carries
// (spec §4) and a JSON body.
func wantAGTPAnswer(t *testing.T, a *answer) {
	t.Helper()
	for _, h := range []string{"Server-ID", "Response-ID", "AGTP-API-Version", "Attribution-Record", "Audit-ID", "Content-Type"} {
		if a.hdr(h) == "" {
			t.Errorf("answer lacks %s: %s", h, a)
		}
	}
	if a.body == nil {
		t.Errorf("answer has no JSON object body: %s", a)
	}
}

// TestAnonymousDiscoverOutsideBuiltins: a DISCOVER without Agent-ID of
// anything but the manifest and the read-only built-ins is 401
// agent-unauthenticated with the AGTP headers and the §19 body, like
// any other request without Agent-ID (identity, §10 step 6, comes
// before the match). It was an empty 200 without any AGTP header.
func TestAnonymousDiscoverOutsideBuiltins(t *testing.T) {
	g := newCatalogGateway(t)
	tests := []struct {
		name, target, path string
		body               any
	}{
		{name: "unknown path", target: "/nope", path: "/nope"},
		{name: "path of a Tier B endpoint of another method", target: "/items/1", path: "/items/1"},
		{name: "path of a Tier B DISCOVER endpoint", target: "/catalog/1", path: "/catalog/1"},
		{name: "below a built-in", target: "/patterns/x", path: "/patterns/x"},
		{name: "body target", target: "/", body: map[string]any{"parameters": map[string]any{"target": "nope"}}, path: "/nope"},
		{name: "top-level body target", target: "/", body: map[string]any{"target": "/catalog/1"}, path: "/catalog/1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := g.anonymous(t, "DISCOVER", tc.target, tc.body)
			wantError(t, a, 401, "agent-unauthenticated", "DISCOVER "+tc.path+" needs an Agent-ID")
			wantAGTPAnswer(t, a)
			if a.str("path") != tc.path || a.str("method") != "DISCOVER" {
				t.Errorf("body names %s %s, want DISCOVER %s", a.str("method"), a.str("path"), tc.path)
			}
		})
	}
	t.Run("body target naming a built-in", func(t *testing.T) {
		a := g.anonymous(t, "DISCOVER", "/", map[string]any{"parameters": map[string]any{"target": "patterns"}})
		if a.status != 200 || a.body["patterns"] == nil {
			t.Fatalf("DISCOVER / target=patterns without Agent-ID: %s", a)
		}
	})
	if g.passed != 0 {
		t.Errorf("%d AGTP requests passed to the next handler", g.passed)
	}
}

// anonymous sends method target without Agent-ID, with body (JSON) when
// not nil.
func (g *testGateway) anonymous(t *testing.T, method, target string, body any) *answer {
	t.Helper()
	if body == nil {
		return g.serve(t, method, target, nil, nil, 0)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return g.serve(t, method, target, nil, bytes.NewReader(raw), int64(len(raw)))
}

// TestDiscoverBodyTarget: DISCOVER / with the body target X is the
// request DISCOVER /X (api-01 §5.10): an unknown X is refused naming
// X, not "/"; X is read as a path (grammar, percent-encoding); an
// operator DISCOVER endpoint at X serves it with the same input as the
// path form (the target does not reach the input).
func TestDiscoverBodyTarget(t *testing.T) {
	g := newCatalogGateway(t)
	target := func(v any) map[string]any { return map[string]any{"parameters": map[string]any{"target": v}} }
	tests := []struct {
		name                string
		path                string
		body                any
		status              int
		reason, explanation string
		wantPath            string
	}{
		{name: "unknown target", path: "/", body: target("nope"), status: 404, reason: "not-found",
			explanation: "no endpoint serves DISCOVER /nope", wantPath: "/nope"},
		{name: "unknown target with a slash", path: "/", body: target("/nope/deeper"), status: 404, reason: "not-found",
			explanation: "DISCOVER /nope/deeper", wantPath: "/nope/deeper"},
		{name: "path served under other methods", path: "/", body: target("items/1"), status: 405, reason: "method-not-allowed",
			explanation: "DISCOVER /items/1", wantPath: "/items/1"},
		{name: "outside the path grammar", path: "/", body: target("a b"), status: 460, wantPath: "/a b"},
		{name: "bad percent-encoding", path: "/", body: target("x%zz"), status: 400, reason: "invalid-parameter",
			explanation: `parameter target "/x%zz"`},
		{name: "conflict with the path", path: "/methods", body: target("nope"), status: 400, reason: "target-conflict",
			explanation: `"nope" disagrees with the path /methods`, wantPath: "/methods"},
		// A body target is bounded like a request-line path; the answer
		// never echoes an unbounded one.
		{name: "target over the limit", path: "/", body: target(strings.Repeat("a", engine.MaxTargetBytes+1)), status: 400, reason: "invalid-parameter",
			explanation: "parameter target is 8001 bytes; the limit is 8000", wantPath: "/"},
		{name: "long target in a conflict is clipped", path: "/methods", body: target(strings.Repeat("b", engine.MaxTargetBytes)), status: 400, reason: "target-conflict",
			explanation: "disagrees with the path /methods", wantPath: "/methods"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := g.do(t, "DISCOVER", tc.path, tc.body, "Authority-Scope", "bench:read")
			if tc.reason == "" {
				if a.status != tc.status {
					t.Fatalf("answer %s; want %d", a, tc.status)
				}
			} else {
				wantError(t, a, tc.status, tc.reason, tc.explanation)
			}
			wantAGTPAnswer(t, a)
			if len(a.raw) > 2048 {
				t.Errorf("answer is %d bytes; a refusal should not echo an unbounded target", len(a.raw))
			}
			if tc.wantPath != "" && a.str("path") != tc.wantPath {
				t.Errorf("body path %q, want %q", a.str("path"), tc.wantPath)
			}
		})
	}
	for _, body := range []any{target("catalog/7"), target("/catalog/7"), map[string]any{"target": "catalog/7"}} {
		a := g.do(t, "DISCOVER", "/", body, "Authority-Scope", "bench:read")
		if a.status != 200 || field(a.body, "result", "id") != "7" {
			t.Fatalf("DISCOVER / %v: %s; want 200 from the catalog endpoint", body, a)
		}
	}
	for _, body := range []any{nil, target("catalog/7"), map[string]any{"target": "/catalog/7"}} {
		if a := g.do(t, "DISCOVER", "/catalog/7", body, "Authority-Scope", "bench:read"); a.status != 200 {
			t.Fatalf("DISCOVER /catalog/7 %v: %s; want 200", body, a)
		}
	}
	if a := g.do(t, "DISCOVER", "/", target("methods")); a.status != 200 || !strings.Contains(a.raw, `"/catalog/{item_id}"`) {
		t.Fatalf("DISCOVER / target=methods: %s", a)
	}
}

// TestEveryAGTPRequestAnswered: every AGTP request gets an answer with
// the AGTP response headers and a JSON body, whatever the method, path,
// identity and body (a DISCOVER without Agent-ID outside the built-ins
// was an empty 200), and never through ServeHTTP's net for a dispatch
// path that forgot to answer (logged "no answer written").
func TestEveryAGTPRequestAnswered(t *testing.T) {
	g := newCatalogGateway(t)
	core, logs := observer.New(zap.InfoLevel)
	setLogCore(t, g.h, core)
	bodies := []any{nil, map[string]any{}, map[string]any{"parameters": map[string]any{"target": "nope"}},
		map[string]any{"parameters": map[string]any{"target": "methods"}}, map[string]any{"target": "catalog/1"}}
	n := 0
	for _, method := range []string{"DISCOVER", "FETCH", "LOOKUP", "INSPECT", "PROPOSE", "REVOKE", "SUSPEND", "QUERY"} {
		for _, path := range []string{"/", "/nope", "/items/1", "/item/1", "/catalog/1", "/patterns", "/patterns/x", "/contracts", "/genesis"} {
			for _, body := range bodies {
				for _, hdr := range []map[string]string{nil, {"Agent-ID": benchAgent}, {"Agent-ID": benchAgent, "Authority-Scope": testScope, "Allow-RCNS": "true"}} {
					var raw []byte
					if body != nil {
						raw, _ = json.Marshal(body)
					}
					passed := g.passed
					a := g.serve(t, method, path, hdr, bytes.NewReader(raw), int64(len(raw)))
					if g.passed != passed {
						continue // not AGTP: the next handler's
					}
					n++
					what := fmt.Sprintf("%s %s %s %v", method, path, raw, hdr)
					if a.status < 200 || a.hdr("Server-ID") == "" || a.hdr("Response-ID") == "" || a.hdr("Attribution-Record") == "" ||
						a.hdr("AGTP-API-Version") == "" || a.hdr("Content-Type") == "" || !json.Valid([]byte(a.raw)) {
						t.Fatalf("%s: answer %s with headers %v", what, a, a.header)
					}
				}
			}
		}
	}
	if n < 300 {
		t.Fatalf("only %d AGTP requests", n)
	}
	if l := logs.FilterMessage("no answer written for an AGTP request"); l.Len() != 0 {
		t.Fatalf("%d requests reached no answer: %v", l.Len(), l.All()[0].ContextMap())
	}
}
