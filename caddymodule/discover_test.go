package caddymodule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// catalogEndpoint is an operator DISCOVER endpoint (Tier B) over the
// bench upstream.
const catalogEndpoint = `method: DISCOVER
path: /catalog/{item_id}
description: Describes one catalog item.
semantic:
  intent: Describe one catalog item by its id.
  actor: agent
  outcome: The item record is returned.
  capability: discovery
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
  timeout_seconds: 10
`

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
