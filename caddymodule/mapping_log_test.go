package caddymodule

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// raisingEndpoint is Tier B FETCH /raise/{item_id} whose query mapping
// raises an operator-written error for item "bad".
var raisingEndpoint = itemEndpoint("FETCH", "/raise/{item_id}", "Fetches one item, refusing withdrawn ones in its query mapping.",
	"Fetch one item record by its id.", "retrieval",
	`    v: 'if .item_id == "bad" then error("item bad is withdrawn") else "1" end'
`)

// raisingRecipe is LOOKUP /raise-item/… whose one step's input mapping
// raises for item "bad".
const raisingRecipe = `name: raise-item
version: "1"
description: Looks up one item, refusing withdrawn ones in its step mapping.
required_scopes: [bench:read]
pattern:
  method: LOOKUP
  path_regex: '/raise-item/[a-z]+'
endpoint:
  description: Looks up one item by id.
  semantic:
    intent: Look up one item by id.
    actor: agent
    outcome: The item record is returned.
    capability: retrieval
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
  errors: [composition_failed]
steps:
  - name: item
    method: FETCH
    path: /items/{item_id}
    input: 'if $input.item_id == "bad" then error("item bad is withdrawn") else {item_id: $input.item_id} end'
output: '{item: $item}'
`

// TestMappingErrorLogged: when an operator's jq mapping fails on an
// agent's input, the agent's answer names the mapping and the message
// the expression raised, never the expression; the gateway's log
// carries the jq error with the expression, for the operator (Tier B
// endpoint mappings and recipe step mappings alike), at INFO: an
// error("…") is a refusal the operator designed, no page. The line
// carries the request's Request-ID as request_id, the access log's
// join key.
func TestMappingErrorLogged(t *testing.T) {
	eps, rcs := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(eps, "fetch-raise.yaml"), []byte(raisingEndpoint), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rcs, "raise-item.yaml"), []byte(raisingRecipe), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, false, eps, rcs)}
	core, logs := observer.New(zap.InfoLevel)
	setLogCore(t, g.h, core)

	check := func(t *testing.T, a *answer, reason, msg, rid string) {
		t.Helper()
		wantError(t, a, 422, reason, "item bad is withdrawn")
		if strings.Contains(a.raw, "if ") || strings.Contains(a.raw, "error(") {
			t.Fatalf("the answer shows the operator's expression: %s", a.raw)
		}
		entries := logs.FilterMessage(msg).All()
		if len(entries) != 1 {
			t.Fatalf("%d %q log entries, want 1 (all: %v)", len(entries), msg, logs.All())
		}
		cause, _ := entries[0].ContextMap()["cause"].(string)
		if !strings.Contains(cause, "item bad is withdrawn") || !strings.Contains(cause, "then error(") {
			t.Fatalf("logged cause %q, want the jq error with the expression", cause)
		}
		if entries[0].Level != zap.InfoLevel {
			t.Errorf("%q logged at %s, want info (a designed refusal)", msg, entries[0].Level)
		}
		if got := entries[0].ContextMap()["request_id"]; got != rid {
			t.Errorf("%q request_id = %v, want the Request-ID sent, %s", msg, got, rid)
		}
	}

	t.Run("endpoint query mapping", func(t *testing.T) {
		const rid = "01a23c15-0000-7000-8000-0000000000a1"
		check(t, g.do(t, "FETCH", "/raise/bad", nil, "Authority-Scope", "bench:read", "Request-ID", rid), "invalid-input", "endpoint mapping failed", rid)
		if a := g.do(t, "FETCH", "/raise/good", nil, "Authority-Scope", "bench:read"); a.status != 200 {
			t.Fatalf("FETCH /raise/good: %s", a)
		}
	})
	t.Run("recipe step mapping", func(t *testing.T) {
		a := g.do(t, "LOOKUP", "/raise-item/bad", map[string]any{"parameters": map[string]any{"item_id": "bad"}},
			"Allow-RCNS", "true", "Authority-Scope", "rcns:negotiate, bench:read", "Request-ID", "01a23c15-0000-7000-8000-0000000000a2")
		check(t, a, "composition_failed", "composition failed", "01a23c15-0000-7000-8000-0000000000a2")
	})
}

// TestUpstreamStatusOmitted: a 422 upstream failure carries
// error.details.upstream_status (and the "upstream failure" log line its
// upstream_status) only when the upstream answered with a status; a
// refused connection, which has none, answered "upstream_status":0.
func TestUpstreamStatusOmitted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(broken.Close)
	for _, tc := range []struct {
		name, upstream, reason string
		status                 float64 // 0: no upstream_status
	}{
		{"refused", closed, "upstream_connection_error", 0},
		{"503", broken.URL, "upstream_error", 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &testGateway{h: benchHandler(t, tc.upstream, false)}
			core, logs := observer.New(zap.InfoLevel)
			setLogCore(t, g.h, core)
			a := g.do(t, "FETCH", "/items/1", nil, "Authority-Scope", "bench:read")
			wantError(t, a, 422, tc.reason, "")
			details, _ := a.body["error"].(map[string]any)["details"].(map[string]any)
			st, has := details["upstream_status"]
			if details["upstream"] != "bench" || has != (tc.status != 0) || (has && st != tc.status) {
				t.Fatalf("error.details = %v, want upstream bench and upstream_status %v (absent for 0): %s", details, tc.status, a)
			}
			entries := logs.FilterMessage("upstream failure").All()
			if len(entries) != 1 {
				t.Fatalf("%d \"upstream failure\" log entries, want 1 (all: %v)", len(entries), logs.All())
			}
			if entries[0].Level != zap.WarnLevel {
				t.Errorf("an unmapped upstream failure logged at %s, want warn", entries[0].Level)
			}
			lst, has := entries[0].ContextMap()["upstream_status"]
			if has != (tc.status != 0) || (has && lst != int64(tc.status)) {
				t.Fatalf("logged upstream_status %v (present %v), want %v (absent for 0)", lst, has, tc.status)
			}
		})
	}
}

// mappedEndpoint is Tier B FETCH /mapped/{item_id} whose upstream's 404
// the endpoint document maps to item_not_found.
var mappedEndpoint = strings.Replace(strings.Replace(itemEndpoint("FETCH", "/mapped/{item_id}", "Fetches one item, 404 mapped.",
	"Fetch one item record by its id.", "retrieval", ""),
	"upstream_error]", "upstream_error, item_not_found]", 1),
	"  timeout_seconds: 10\n", "  error_map:\n    \"404\": item_not_found\n  timeout_seconds: 10\n", 1)

// TestMappedStatusLoggedInfo: an upstream status the endpoint document
// maps (error_map) is a refusal the operator designed: its "upstream
// failure" line is INFO, not WARN.
func TestMappedStatusLoggedInfo(t *testing.T) {
	eps := t.TempDir()
	if err := os.WriteFile(filepath.Join(eps, "fetch-mapped.yaml"), []byte(mappedEndpoint), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	}))
	g := &testGateway{h: benchHandlerWith(t, missing.URL, false, eps, "")}
	core, logs := observer.New(zap.DebugLevel)
	setLogCore(t, g.h, core)
	a := g.do(t, "FETCH", "/mapped/1", nil, "Authority-Scope", "bench:read")
	wantError(t, a, 422, "item_not_found", "")
	entries := logs.FilterMessage("upstream failure").All()
	if len(entries) != 1 || entries[0].Level != zap.InfoLevel {
		t.Fatalf("\"upstream failure\" entries %v, want one at info", logs.All())
	}
	if n := logs.FilterLevelExact(zap.WarnLevel).Len(); n != 0 {
		t.Errorf("%d WARN lines for a mapped 404: %v", n, logs.All())
	}
}
