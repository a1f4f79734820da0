package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// roomsEndpoint is a Tier B endpoint whose path and query parameters
// are typed (integer, boolean, number), as `caddy rcns import-openapi`
// writes them from an OpenAPI document.
const roomsEndpoint = `method: FETCH
path: /floors/{floor}/rooms
description: Lists the rooms of one floor.
semantic: {intent: List the rooms of one floor., actor: agent, outcome: The rooms are returned., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
input_schema:
  type: object
  additionalProperties: false
  required: [floor]
  properties:
    floor: {type: integer, minimum: 0}
    available: {type: boolean}
    limit: {type: integer, maximum: 100}
    max_price: {type: number}
output_schema: {type: object}
errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
required_scopes: [hotel:read]
external_service:
  upstream: hotel
  method: GET
  path: /floors/{floor}/rooms
  query:
    available: .available
    limit: .limit
    max_price: .max_price
`

// TestQueryValuesTyped is ../shared/cases/07 item 2: query and path
// values are text on the wire; the gateway converts them to the type
// the endpoint's input_schema declares before validation, and refuses
// a value that does not convert with 422 invalid-input naming the
// parameter.
func TestQueryValuesTyped(t *testing.T) {
	up := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "query": r.URL.RawQuery})
	}))
	docs := t.TempDir()
	copyDocs(t, "examples/hotel/agents", filepath.Join(docs, "agents"))
	copyDocs(t, "examples/hotel/recipes", filepath.Join(docs, "recipes"))
	copyDocs(t, "examples/hotel/endpoints", filepath.Join(docs, "endpoints"))
	if err := os.WriteFile(filepath.Join(docs, "endpoints", "fetch-rooms.yaml"), []byte(roomsEndpoint), 0o644); err != nil {
		t.Fatal(err)
	}
	legacy := startCounter(t)
	g := startGateway(t, fill(reloadSite, "HOTEL", up, "DOCS", docs, "RECIPES", filepath.Join(docs, "recipes"), "LEGACY", legacy.URL))

	r := g.Do(t, "FETCH", "/floors/2/rooms?available=true&limit=10&max_price=99.5", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, r, 200)
	if got := field(r.Object(t), "result", "query"); got != "available=true&limit=10&max_price=99.5" {
		t.Errorf("upstream query = %v, want the converted values sent on:\n%s", got, r)
	}
	if got := field(r.Object(t), "result", "path"); got != "/floors/2/rooms" {
		t.Errorf("upstream path = %v, want /floors/2/rooms", got)
	}
	for _, tc := range []struct{ target, param string }{
		{"/floors/2/rooms?available=yes", "available"},
		{"/floors/2/rooms?limit=ten", "limit"},
		{"/floors/two/rooms", "floor"},
	} {
		b := assertErrorBody(t, g.Do(t, "FETCH", tc.target, hdr(agentA1, "hotel:read"), nil), 422, "invalid-input")
		if field(b, "error", "details", "parameter") != tc.param || !strings.Contains(str(b, "explanation"), `"`+tc.param+`"`) {
			t.Errorf("%s: the refusal does not name parameter %q: %v", tc.target, tc.param, b)
		}
	}
	// A converted value is still validated against the schema.
	assertErrorBody(t, g.Do(t, "FETCH", "/floors/2/rooms?limit=101", hdr(agentA1, "hotel:read"), nil), 422, "invalid-input")
}
