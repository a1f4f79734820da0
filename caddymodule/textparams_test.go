package caddymodule

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shelfEndpoint is FETCH /shelves/{shelf} with an integer path
// parameter and boolean, integer and number query parameters, sent on to
// the upstream's query.
const shelfEndpoint = `method: FETCH
path: /shelves/{shelf}
description: Lists a shelf's books.
semantic: {intent: List the books on one shelf., actor: agent, outcome: The books are returned., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
input_schema:
  type: object
  additionalProperties: false
  required: [shelf]
  properties:
    shelf: {type: integer, minimum: 1}
    available: {type: boolean}
    limit: {type: integer, maximum: 50}
    min_rating: {type: number}
    title: {type: string}
output_schema: {type: object}
errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
required_scopes: [bench:read]
external_service:
  upstream: bench
  method: GET
  path: /shelves/{shelf}
  query:
    available: .available
    limit: .limit
    min_rating: .min_rating
    title: .title
`

// TestQueryAndPathValuesTyped (cases/07 item 2): query and path values
// are converted to the type the input_schema declares before
// validation; one that does not convert is refused 422 invalid-input
// naming the parameter; a body value keeps its JSON type.
func TestQueryAndPathValuesTyped(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /shelves/{shelf}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"shelf": r.PathValue("shelf"), "query": r.URL.RawQuery})
	})
	up := loopbackServer(t, mux).URL
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fetch-shelf.yaml"), []byte(shelfEndpoint), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &testGateway{h: benchHandlerWith(t, up, false, dir, "")}
	for _, tt := range []struct {
		name      string
		target    string
		body      any
		status    int
		wantQuery string // the upstream's query, on a 200
		wantParam string // the parameter a 422 names
	}{
		{"typed query", "/shelves/3?available=true&limit=10&min_rating=4.5&title=7", nil, 200, "available=true&limit=10&min_rating=4.5&title=7", ""},
		{"false and negative", "/shelves/3?available=false&min_rating=-1", nil, 200, "available=false&min_rating=-1", ""},
		{"boolean yes", "/shelves/3?available=yes", nil, 422, "", "available"},
		{"integer 1.5", "/shelves/3?limit=1.5", nil, 422, "", "limit"},
		{"path not an integer", "/shelves/abc", nil, 422, "", "shelf"},
		{"converted value still validated", "/shelves/3?limit=51", nil, 422, "", ""},
		{"path below minimum", "/shelves/0", nil, 422, "", ""},
		{"body keeps its JSON type", "/shelves/3", map[string]any{"parameters": map[string]any{"available": "true"}}, 422, "", ""},
		{"body typed", "/shelves/3", map[string]any{"parameters": map[string]any{"available": true, "limit": 2}}, 200, "available=true&limit=2", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := g.do(t, "FETCH", tt.target, tt.body)
			if a.status != tt.status {
				t.Fatalf("status %d, want %d: %s", a.status, tt.status, a)
			}
			if tt.status == 200 {
				res, _ := a.body["result"].(map[string]any)
				if res["query"] != tt.wantQuery || res["shelf"] != "3" {
					t.Fatalf("upstream saw %v, want shelf 3 and query %q", res, tt.wantQuery)
				}
				return
			}
			wantError(t, a, 422, "invalid-input", "")
			if tt.wantParam != "" {
				errObj, _ := a.body["error"].(map[string]any)
				details, _ := errObj["details"].(map[string]any)
				if details["parameter"] != tt.wantParam || !strings.Contains(a.str("explanation"), `"`+tt.wantParam+`"`) {
					t.Fatalf("refusal does not name parameter %q: %s", tt.wantParam, a)
				}
			}
		})
	}
}
