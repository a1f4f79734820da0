package caddymodule

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The tests here run the whole handler in process (benchHandler: the
// load test's documents, a real upstream on 127.0.0.1, records under a
// temporary records_dir) and look at one answer at a time.

// testScope is what benchAgent may claim.
const testScope = "rcns:negotiate, bench:read"

// testGateway is a provisioned handler and a next handler that counts
// the requests passed on (legacy HTTP).
type testGateway struct {
	h      *Handler
	passed int
}

func newTestGateway(t *testing.T) *testGateway {
	t.Helper()
	return &testGateway{h: benchHandler(t, benchUpstream(t).URL, false)}
}

// answer is one response, its body decoded when it is a JSON object.
type answer struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// str returns a string member of the body ("" when absent).
func (a *answer) str(key string) string {
	s, _ := a.body[key].(string)
	return s
}

// hdr returns a response header written in its AGTP spelling (the
// gateway sets AGTP-API-Version, Server-ID… as spelled, not
// canonicalized).
func (a *answer) hdr(name string) string {
	for k, v := range a.header {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (a *answer) String() string {
	return strconv.Itoa(a.status) + " " + a.raw
}

// serve sends one request with the given body reader and Content-Length
// (from 127.0.0.1, to a loopback listener, as Caddy hands it over).
func (g *testGateway) serve(t *testing.T, method, target string, hdr map[string]string, body io.Reader, length int64) *answer {
	t.Helper()
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	if length > 0 && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	return g.serveHeader(t, method, target, h, body, length)
}

// serveHeader is serve with the request's header fields as given
// (repeated fields included, no Content-Type added).
func (g *testGateway) serveHeader(t *testing.T, method, target string, hdr http.Header, body io.Reader, length int64) *answer {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, body)
	r.ContentLength = length
	r.Host = "127.0.0.1"
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header = hdr
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, benchLocalAddr))
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), rec, benchServer)
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		g.passed++
		w.WriteHeader(http.StatusTeapot)
		return nil
	})
	if err := g.h.ServeHTTP(rec, r, next); err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	a := &answer{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &a.body)
	return a
}

// do sends body (a JSON value, or none when nil) as benchAgent with
// testScope plus the given headers.
func (g *testGateway) do(t *testing.T, method, target string, body any, kv ...string) *answer {
	t.Helper()
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": testScope}
	for i := 0; i+1 < len(kv); i += 2 {
		hdr[kv[i]] = kv[i+1]
	}
	if body == nil {
		return g.serve(t, method, target, hdr, nil, 0)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return g.serve(t, method, target, hdr, strings.NewReader(string(raw)), int64(len(raw)))
}

// builtin sends a built-in (INSPECT, REVOKE, SUSPEND, PROPOSE) at "/"
// with the given envelope parameters.
func (g *testGateway) builtin(t *testing.T, method string, params map[string]any, kv ...string) *answer {
	t.Helper()
	return g.do(t, method, "/", map[string]any{"parameters": params}, kv...)
}

// wantError checks a §19 error body: status, reason and, when not
// empty, a fragment of the explanation.
func wantError(t *testing.T, a *answer, status int, reason, explanation string) {
	t.Helper()
	if a.status != status || a.str("reason") != reason || !strings.Contains(a.str("explanation"), explanation) {
		t.Fatalf("answer %s; want %d %s with %q in the explanation", a, status, reason, explanation)
	}
	if st, _ := a.body["status"].(float64); int(st) != status {
		t.Fatalf("body status %v differs from the HTTP status %d: %s", a.body["status"], status, a)
	}
}

// proposal is a wrapped PROPOSE for LOOKUP path (the lookup-item
// recipe), with more parameters from kv.
func proposal(path string, kv ...any) map[string]any {
	p := map[string]any{"endpoint": map[string]any{
		"method": "LOOKUP", "path": path, "description": "Looks up one item by id.",
		"semantic": map[string]any{"intent": "Look up one item by id.", "actor": "agent", "outcome": "The item record is returned.",
			"capability": "retrieval", "confidence": 0.9, "impact": "informational", "is_idempotent": true},
	}}
	for i := 0; i+1 < len(kv); i += 2 {
		p[kv[i].(string)] = kv[i+1]
	}
	return p
}

// propose mints a contract for LOOKUP path by PROPOSE and returns its
// synthesis id.
func (g *testGateway) propose(t *testing.T, path string, kv ...string) string {
	t.Helper()
	a := g.builtin(t, "PROPOSE", proposal(path), kv...)
	if a.status != 263 || a.str("synthesis_id") == "" {
		t.Fatalf("PROPOSE %s: %s", path, a)
	}
	return a.str("synthesis_id")
}

// otherAgent is a canonical Agent-ID no document registers.
var otherAgent = strings.Repeat("ab", 32)

// TestBuiltinParameterTypes: every built-in parameter is read by the
// reader of its type. A wrong JSON type or a malformed value is 400
// invalid-parameter, or the parameter's own reason (invalid-limit,
// invalid-cursor, invalid-duration, invalid-synthesis-id); it is never
// reported as missing, ignored, or taken for the default.
func TestBuiltinParameterTypes(t *testing.T) {
	g := newTestGateway(t)
	id := g.propose(t, "/item/a")
	sid := "0123456789abcdefABCDEF"
	for _, tc := range []struct {
		name, method string
		params       map[string]any
		status       int
		reason, expl string
	}{
		{"DISCOVER target number", "DISCOVER", map[string]any{"target": 5}, 400, "invalid-parameter", "parameter target must be a string, not a number"},
		{"INSPECT target number", "INSPECT", map[string]any{"target": 5}, 400, "invalid-parameter", "parameter target must be a string"},
		{"INSPECT target missing", "INSPECT", map[string]any{}, 400, "parameter-required", "needs a target"},
		{"INSPECT attempt_id object", "INSPECT", map[string]any{"target": "rcns-attempt", "attempt_id": map[string]any{}}, 400, "invalid-parameter", "attempt_id must be a string, not an object"},
		{"INSPECT synthesis_id number", "INSPECT", map[string]any{"target": "contract", "synthesis_id": 5}, 400, "invalid-synthesis-id", "INSPECT target=contract: parameter synthesis_id must be a string, not a number"},
		{"lifecycle agent_id malformed", "INSPECT", map[string]any{"target": "lifecycle", "agent_id": "abc"}, 400, "invalid-parameter", "canonical Agent-ID"},
		{"lifecycle agent_id uppercase", "INSPECT", map[string]any{"target": "lifecycle", "agent_id": strings.ToUpper(benchAgent)}, 400, "invalid-parameter", "canonical Agent-ID"},
		{"lifecycle agent_id number", "INSPECT", map[string]any{"target": "lifecycle", "agent_id": 5}, 400, "invalid-parameter", "must be a string"},
		{"lifecycle another agent", "INSPECT", map[string]any{"target": "lifecycle", "agent_id": otherAgent}, 403, "forbidden", ""},
		{"SUSPEND session_id number", "SUSPEND", map[string]any{"session_id": 5}, 400, "invalid-session-id", "session_id must be a string, not a number"},
		{"SUSPEND session_id malformed", "SUSPEND", map[string]any{"session_id": "sess-1"}, 400, "invalid-session-id", "must be a Session-ID: 22-256 characters"},
		{"SUSPEND session_id empty", "SUSPEND", map[string]any{"session_id": ""}, 400, "invalid-session-id", "must be a Session-ID"},
		{"SUSPEND both", "SUSPEND", map[string]any{"session_id": sid, "synthesis_id": id}, 400, "invalid-parameter", "not both"},
		{"SUSPEND reason number", "SUSPEND", map[string]any{"synthesis_id": id, "reason": 5}, 400, "invalid-parameter", "reason must be a string"},
		{"SUSPEND nothing", "SUSPEND", map[string]any{}, 400, "parameter-required", "synthesis_id or session_id"},
		{"SUSPEND synthesis_id null", "SUSPEND", map[string]any{"synthesis_id": nil}, 400, "parameter-required", "synthesis_id or session_id"},
		{"REVOKE actor number", "REVOKE", map[string]any{"target": "contract", "synthesis_id": id, "actor": 5}, 400, "invalid-parameter", "actor must be a string"},
		{"REVOKE reason bool", "REVOKE", map[string]any{"target": "contract", "synthesis_id": id, "reason": true}, 400, "invalid-parameter", "reason must be a string, not a boolean"},
		{"PROPOSE persistent string", "PROPOSE", proposal("/item/b", "persistent", "true"), 400, "invalid-parameter", "persistent must be true or false"},
		{"PROPOSE requested_duration number", "PROPOSE", proposal("/item/b", "requested_duration", 30), 400, "invalid-duration", "must be a string, not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/"
			if tc.method == "DISCOVER" {
				path = "/methods"
			}
			a := g.do(t, tc.method, path, map[string]any{"parameters": tc.params})
			wantError(t, a, tc.status, tc.reason, tc.expl)
		})
	}
	// None of the refusals touched the contract.
	if a := g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": id}); a.str("state") != "active" {
		t.Fatalf("the contract is no longer active after refused requests: %s", a)
	}
	// A well-typed request still works.
	wantStatus := func(a *answer, status int) {
		t.Helper()
		if a.status != status {
			t.Fatalf("answer %s; want %d", a, status)
		}
	}
	wantStatus(g.do(t, "DISCOVER", "/", map[string]any{"parameters": map[string]any{"target": "methods"}}), 200)
	wantStatus(g.do(t, "DISCOVER", "/methods", map[string]any{"parameters": map[string]any{"target": nil}}), 200)
	wantStatus(g.builtin(t, "INSPECT", map[string]any{"target": "lifecycle", "agent_id": benchAgent}), 200)
	wantStatus(g.builtin(t, "SUSPEND", map[string]any{"session_id": sid}), 200)
}

// TestListingLimit: one reader for limit on DISCOVER /methods, DISCOVER
// /contracts (query or body parameters) and INSPECT target=lifecycle:
// a positive integer, served as at most 1000; 0, negative, fractional or
// non-numeric values are 400 invalid-limit everywhere (INSPECT used to
// fall back to 100 silently, and a body limit on DISCOVER was ignored).
func TestListingLimit(t *testing.T) {
	g := newTestGateway(t)
	for _, p := range []string{"/item/a", "/item/b", "/item/c"} {
		g.propose(t, p)
	}
	listing := func(a *answer) []any {
		t.Helper()
		if a.status != 200 {
			t.Fatalf("answer %s; want 200", a)
		}
		var list []any
		if err := json.Unmarshal([]byte(a.raw), &list); err != nil {
			t.Fatalf("not a listing: %s", a)
		}
		return list
	}
	lifecycle := func(limit any) *answer {
		return g.builtin(t, "INSPECT", map[string]any{"target": "lifecycle", "limit": limit})
	}
	for _, bad := range []any{-1, 0, 1.5, "x", "5", true, map[string]any{}, []any{1}} {
		wantError(t, lifecycle(bad), 400, "invalid-limit", "positive integer")
		for _, path := range []string{"/contracts", "/methods"} {
			wantError(t, g.do(t, "DISCOVER", path, map[string]any{"parameters": map[string]any{"limit": bad}}), 400, "invalid-limit", "positive integer")
		}
	}
	for _, bad := range []string{"-1", "0", "1.5", "x", "", "+1", "1e3", "%201"} {
		for _, path := range []string{"/contracts", "/methods"} {
			wantError(t, g.do(t, "DISCOVER", path+"?limit="+bad, nil), 400, "invalid-limit", "positive integer")
		}
	}
	// In range, and above the maximum (served as 1000).
	if a := lifecycle(1); a.status != 200 || len(a.body["entries"].([]any)) != 1 {
		t.Fatalf("lifecycle limit 1: %s", a)
	}
	for _, big := range []any{1001, 5000, 1e300} {
		if a := lifecycle(big); a.status != 200 || len(a.body["entries"].([]any)) != 3 {
			t.Fatalf("lifecycle limit %v: %s", big, a)
		}
	}
	for _, q := range []string{"1001", "99999999999999999999999", "0001000"} {
		if l := listing(g.do(t, "DISCOVER", "/contracts?limit="+q, nil)); len(l) != 3 {
			t.Fatalf("limit=%s listed %d contracts, want 3", q, len(l))
		}
	}
	// The body limit is honoured, with the same Link as the query's.
	a := g.do(t, "DISCOVER", "/contracts", map[string]any{"parameters": map[string]any{"limit": 2}})
	if l := listing(a); len(l) != 2 || !strings.Contains(a.header.Get("Link"), "limit=2&cursor=") {
		t.Fatalf("body limit 2: Link %q, %s", a.header.Get("Link"), a)
	}
	q := listing(g.do(t, "DISCOVER", "/contracts?limit=2", nil))
	b := listing(g.do(t, "DISCOVER", "/contracts?limit=2", map[string]any{"parameters": map[string]any{"limit": 2}}))
	if len(q) != 2 || len(b) != 2 {
		t.Fatalf("query limit 2 = %d entries, query and body limit 2 = %d", len(q), len(b))
	}
	// Query and body disagreeing is refused, as for any parameter given twice.
	wantError(t, g.do(t, "DISCOVER", "/contracts?limit=1", map[string]any{"parameters": map[string]any{"limit": 2}}), 400, "parameter-conflict", `"limit"`)
	// The cursor is read the same way.
	next := strings.TrimPrefix(strings.Split(a.header.Get("Link"), ">")[0], "<")
	cursor := next[strings.Index(next, "cursor=")+len("cursor="):]
	if l := listing(g.do(t, "DISCOVER", "/contracts", map[string]any{"parameters": map[string]any{"limit": 2, "cursor": cursor}})); len(l) != 1 {
		t.Fatalf("body cursor: %d entries, want the last one", len(l))
	}
	wantError(t, g.do(t, "DISCOVER", "/contracts?cursor="+cursor, map[string]any{"parameters": map[string]any{"cursor": "x"}}), 400, "parameter-conflict", `"cursor"`)
	wantError(t, g.do(t, "DISCOVER", "/contracts", map[string]any{"parameters": map[string]any{"cursor": 5}}), 400, "invalid-cursor", "must be a string")
}

// TestLifecycleListing: INSPECT target=lifecycle reads limit from the
// query or the body through DISCOVER's reader (a query limit was
// ignored, ?limit=0 answered 200) and refuses a cursor (it was
// ignored): the stream is the newest limit events, without pages.
func TestLifecycleListing(t *testing.T) {
	g := newTestGateway(t)
	for _, p := range []string{"/item/a", "/item/b", "/item/c"} {
		g.propose(t, p)
	}
	lifecycle := func(target string, params map[string]any) *answer {
		t.Helper()
		params["target"] = "lifecycle"
		return g.do(t, "INSPECT", target, map[string]any{"parameters": params})
	}
	entries := func(a *answer) int {
		t.Helper()
		list, ok := a.body["entries"].([]any)
		if a.status != 200 || !ok {
			t.Fatalf("answer %s; want 200 with entries", a)
		}
		return len(list)
	}
	for _, bad := range []string{"0", "-1", "1.5", "x", "", "+1"} {
		wantError(t, lifecycle("/?limit="+bad, map[string]any{}), 400, "invalid-limit", "positive integer")
	}
	for target, want := range map[string]int{"/?limit=1": 1, "/?limit=2": 2, "/?limit=1001": 3, "/?limit=5&limit=1": 1, "/": 3} {
		if n := entries(lifecycle(target, map[string]any{})); n != want {
			t.Errorf("INSPECT %s target=lifecycle: %d entries; want %d", target, n, want)
		}
	}
	if n := entries(lifecycle("/?limit=2", map[string]any{"limit": 2})); n != 2 {
		t.Errorf("query and body limit 2: %d entries", n)
	}
	wantError(t, lifecycle("/?limit=1", map[string]any{"limit": 2}), 400, "parameter-conflict", `"limit"`)
	// A cursor is refused, saying why; a wrong type as on DISCOVER.
	for _, tc := range []struct {
		target string
		params map[string]any
	}{
		{"/", map[string]any{"cursor": "abc"}},
		{"/?cursor=abc", map[string]any{}},
		{"/?cursor=abc", map[string]any{"cursor": "abc", "limit": 1}},
	} {
		wantError(t, lifecycle(tc.target, tc.params), 400, "invalid-cursor", "has no pages: it returns the newest limit events")
	}
	wantError(t, lifecycle("/", map[string]any{"cursor": 5}), 400, "invalid-cursor", "must be a string")
	wantError(t, lifecycle("/?cursor=a", map[string]any{"cursor": "b"}), 400, "parameter-conflict", `"cursor"`)
	// null and the empty cursor (the first page) are no cursor.
	if n := entries(lifecycle("/", map[string]any{"cursor": nil})) + entries(lifecycle("/?cursor=", map[string]any{})); n != 6 {
		t.Errorf("null and empty cursors: %d entries; want 3 each", n)
	}
}

// TestBuiltinQueryParameters: INSPECT, REVOKE, SUSPEND and PROPOSE read
// their own parameters from the query as well as the body (the agent
// guide says so; INSPECT /?target=lifecycle&limit=1 was 400 "INSPECT
// needs a target" while its limit was read). The same value both ways
// is one parameter; different values are 400 parameter-conflict, as for
// limit; a query value is a string, so a boolean cannot come that way.
func TestBuiltinQueryParameters(t *testing.T) {
	g := newTestGateway(t)
	id := g.propose(t, "/item/a")
	g.propose(t, "/item/b")
	a := g.do(t, "INSPECT", "/?target=lifecycle&limit=1", nil)
	if list, _ := a.body["entries"].([]any); a.status != 200 || a.str("target") != "lifecycle" || len(list) != 1 {
		t.Fatalf("INSPECT /?target=lifecycle&limit=1: %s; want 200 with 1 entry", a)
	}
	if a := g.do(t, "INSPECT", "/?target=contract&synthesis_id="+id, nil); a.status != 200 || a.str("synthesis_id") != id || a.str("state") != "active" {
		t.Fatalf("INSPECT target and synthesis_id in the query: %s", a)
	}
	if a := g.do(t, "INSPECT", "/?target=contract", map[string]any{"parameters": map[string]any{"target": "contract", "synthesis_id": id}}); a.status != 200 {
		t.Fatalf("the same target in the query and the body: %s", a)
	}
	if a := g.do(t, "INSPECT", "/?target=contract", map[string]any{"parameters": map[string]any{"synthesis_id": id}}); a.status != 200 {
		t.Fatalf("target in the query, synthesis_id in the body: %s", a)
	}
	wantError(t, g.do(t, "INSPECT", "/?target=lifecycle", map[string]any{"parameters": map[string]any{"target": "contract", "synthesis_id": id}}),
		400, "parameter-conflict", `parameter "target" is given in the query and in the body with different values`)
	wantError(t, g.do(t, "INSPECT", "/?target=lifecycle", map[string]any{"target": 5}), 400, "parameter-conflict", `"target"`)
	wantError(t, g.do(t, "INSPECT", "/?target=nope", nil), 400, "unknown-target", `"nope"`)
	wantError(t, g.do(t, "REVOKE", "/?target=contract", nil), 400, "parameter-required", "needs synthesis_id")
	wantError(t, g.do(t, "SUSPEND", "/?session_id=short", nil), 400, "invalid-session-id", "SUSPEND: parameter session_id")
	wantError(t, g.do(t, "PROPOSE", "/?requested_duration=soon", proposal("/item/c")), 400, "invalid-duration", "requested_duration")
	wantError(t, g.do(t, "PROPOSE", "/?persistent=true", proposal("/item/c")), 400, "invalid-parameter", "persistent must be true or false, not a string")
	// The query's text of a body value is no conflict: a boolean and its
	// "true", two forms of one duration. Each answers as the body alone.
	for _, c := range []struct {
		query, key string
		val        any
	}{
		{"persistent=true", "persistent", true},
		{"requested_duration=PT10S", "requested_duration", "10s"},
	} {
		alone := g.do(t, "PROPOSE", "/", proposal("/item/q1"+c.key[:1], c.key, c.val))
		both := g.do(t, "PROPOSE", "/?"+c.query, proposal("/item/q2"+c.key[:1], c.key, c.val))
		if both.status != alone.status || both.str("granted_duration") != alone.str("granted_duration") || strings.Contains(both.String(), "parameter-conflict") {
			t.Errorf("?%s with body %s=%v: %s; the body alone: %s", c.query, c.key, c.val, both, alone)
		}
		if alone.status != 263 || c.key == "requested_duration" && alone.str("granted_duration") != "10s" {
			t.Errorf("body %s=%v alone: %s, want 263", c.key, c.val, alone)
		}
	}
	wantError(t, g.do(t, "PROPOSE", "/?persistent=false", proposal("/item/c", "persistent", true)), 400, "parameter-conflict", `"persistent"`)
	wantError(t, g.do(t, "PROPOSE", "/?requested_duration=PT2H", proposal("/item/c", "requested_duration", "1h")), 400, "parameter-conflict", `"requested_duration"`)
	if a := g.do(t, "SUSPEND", "/?synthesis_id="+id+"&reason=done", nil); a.status != 200 || fmt.Sprint(field(a.body, "result", "state")) != "released" {
		t.Fatalf("SUSPEND with synthesis_id in the query: %s", a)
	}
	if a := g.do(t, "REVOKE", "/?target=contract&synthesis_id="+id, nil); a.status != 200 || fmt.Sprint(field(a.body, "result", "noop")) != "true" {
		t.Fatalf("REVOKE with target and synthesis_id in the query: %s", a)
	}
}

// TestProposeRequestedDuration: granted_duration is at most the request
// and at most contract_ttl (spec §14.3); a request beyond any bound is
// granted contract_ttl; an empty, unparsable or sub-second request is
// 400 invalid-duration (it used to be ignored, to wrap, or to be granted
// already expired).
func TestProposeRequestedDuration(t *testing.T) {
	g := newTestGateway(t)
	ttl := time.Duration(g.h.ContractTTL)
	for i, tc := range []struct {
		requested string
		granted   time.Duration
	}{
		{"10s", 10 * time.Second}, {"PT20S", 20 * time.Second}, {"1s", time.Second}, {"PT1S", time.Second}, {"1000ms", time.Second}, {"1h", ttl}, {"213504d", ttl}, {"P213504D", ttl},
		{"99999999999999999999d", ttl}, {"9999999999h", ttl}, {"P1W", ttl}, {"PT0.5M", 30 * time.Second}, {"PT0,25M", 15 * time.Second},
		// A fraction of a second is not granted: contract times are whole
		// seconds, and expires_at − issued_at must equal the grant.
		{"PT1.9S", time.Second}, {"2.5s", 2 * time.Second}, {"PT0.3333M", 19 * time.Second},
	} {
		a := g.builtin(t, "PROPOSE", proposal("/item/d"+strconv.Itoa(i), "requested_duration", tc.requested))
		if a.status != 263 || a.str("granted_duration") != agtp.FormatDuration(tc.granted) {
			t.Fatalf("requested_duration %q: %s; want 263 granting %v", tc.requested, a, tc.granted)
		}
		issued, _ := time.Parse(time.RFC3339, a.str("issued_at"))
		expires, _ := time.Parse(time.RFC3339, a.str("expires_at"))
		if expires.Sub(issued) != tc.granted {
			t.Fatalf("requested_duration %q: expires_at - issued_at = %v; want %v", tc.requested, expires.Sub(issued), tc.granted)
		}
	}
	// The explanation names every accepted form, and why years and
	// months are not among them.
	wantError(t, g.builtin(t, "PROPOSE", proposal("/item/bad", "requested_duration", "P1Y")), 400, "invalid-duration",
		"a Go duration (30m, 1h30m, 1.5h), whole days (7d), or an ISO 8601 duration in weeks (P2W) or days, hours, minutes and seconds (P1DT2H, PT90M, PT1.5S; a fraction on the last part only; no years or months, whose length varies)")
	for _, bad := range []any{"", "0s", "PT0S", "0d", "-1h", "soon", "P1Y", "P1M", 30, true, map[string]any{}} {
		a := g.builtin(t, "PROPOSE", proposal("/item/bad", "requested_duration", bad))
		wantError(t, a, 400, "invalid-duration", "requested_duration")
		if a.str("negotiation_id") == "" {
			t.Fatalf("requested_duration %v: the refusal has no negotiation_id: %s", bad, a)
		}
	}
	// Below one second the contract would be expired when issued
	// (issued_at and expires_at are whole seconds): refused before the
	// rcns budget is spent (no RateLimit fields), not granted "1ns".
	for _, short := range []string{"1ns", "1ms", "999ms", "0.5s", "999999us", "PT0.5S", "PT0,999S"} {
		a := g.builtin(t, "PROPOSE", proposal("/item/short", "requested_duration", short))
		wantError(t, a, 400, "invalid-duration", "at least 1s")
		if a.hdr("RateLimit") != "" {
			t.Fatalf("requested_duration %q: the refusal spent the rcns budget (RateLimit %q)", short, a.hdr("RateLimit"))
		}
	}
	// Without requested_duration the grant is contract_ttl, unreported.
	if a := g.builtin(t, "PROPOSE", proposal("/item/plain", "requested_duration", nil)); a.status != 263 || a.body["granted_duration"] != nil {
		t.Fatalf("no requested_duration: %s", a)
	}
}

// lifecycleEvents returns benchAgent's lifecycle events (decoded JWS
// payloads), newest first.
func (g *testGateway) lifecycleEvents(t *testing.T) []map[string]any {
	t.Helper()
	a := g.builtin(t, "INSPECT", map[string]any{"target": "lifecycle", "limit": 1000})
	if a.status != 200 {
		t.Fatalf("INSPECT lifecycle: %s", a)
	}
	var out []map[string]any
	for _, e := range a.body["entries"].([]any) {
		parts := strings.Split(e.(map[string]any)["envelope"].(string), ".")
		raw, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatalf("lifecycle envelope: %v", err)
		}
		var ev map[string]any
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("lifecycle payload: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

// events returns the events of type typ about synthesis id.
func events(evs []map[string]any, typ, id string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["event_type"] == typ && e["synthesis_id"] == id {
			out = append(out, e)
		}
	}
	return out
}

// negotiationRecords returns the negotiation records of kind about
// synthesis id (requested.synthesis_id), or all of that kind when id is
// "".
func (g *testGateway) negotiationRecords(t *testing.T, kind, id string) []map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(g.h.RecordsDir, "negotiations", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no negotiation log under %s (%v)", g.h.RecordsDir, err)
	}
	var out []map[string]any
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if req, _ := rec["requested"].(map[string]any); rec["kind"] == kind && (id == "" || req["synthesis_id"] == id) {
				out = append(out, rec)
			}
		}
	}
	return out
}

// keys returns the sorted keys of m.
func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestSessionReleaseRecords: SUSPEND with session_id releases each of
// the caller's contracts of that session exactly as SUSPEND with its
// synthesis_id does: one rcns_release on the lifecycle stream and one
// release negotiation record per contract (it wrote neither), once.
func TestSessionReleaseRecords(t *testing.T) {
	g := newTestGateway(t)
	s1, s2 := "sess1-0123456789abcdefABCDEF", "sess2-0123456789abcdefABCDEF"
	a := g.propose(t, "/item/a", "Session-ID", s1)
	b := g.propose(t, "/item/b", "Session-ID", s1)
	c := g.propose(t, "/item/c")
	d := g.propose(t, "/item/d", "Session-ID", s2)

	r := g.builtin(t, "SUSPEND", map[string]any{"session_id": s1, "reason": "task done"})
	want := []any{a, b}
	if b < a {
		want = []any{b, a}
	}
	if r.status != 200 || !reflect.DeepEqual(r.body["result"], map[string]any{"session_id": s1, "released": want}) {
		t.Fatalf("SUSPEND session_id: %s; want %v released", r, want)
	}
	// The reference: a release by synthesis_id.
	if r := g.builtin(t, "SUSPEND", map[string]any{"synthesis_id": c, "reason": "task done"}); r.status != 200 {
		t.Fatalf("SUSPEND synthesis_id: %s", r)
	}
	evs := g.lifecycleEvents(t)
	ref := events(evs, "rcns_release", c)
	refRec := g.negotiationRecords(t, "release", c)
	if len(ref) != 1 || len(refRec) != 1 {
		t.Fatalf("release by synthesis_id: %d events, %d records; want 1 and 1", len(ref), len(refRec))
	}
	for _, id := range []string{a, b} {
		ev := events(evs, "rcns_release", id)
		if len(ev) != 1 || ev[0]["reason"] != "task done" || ev[0]["actor_agent_id"] != benchAgent || !reflect.DeepEqual(keys(ev[0]), keys(ref[0])) {
			t.Fatalf("contract %s released by session: events %v; want one rcns_release like %v", id, ev, ref)
		}
		rec := g.negotiationRecords(t, "release", id)
		if len(rec) != 1 || rec[0]["outcome"] != "accepted" || rec[0]["reason"] != "task done" ||
			!reflect.DeepEqual(rec[0]["granted"], map[string]any{"synthesis_id": id, "state": "released"}) ||
			!reflect.DeepEqual(rec[0]["requested"], map[string]any{"target": "session", "session_id": s1, "synthesis_id": id}) {
			t.Fatalf("contract %s released by session: negotiation records %v", id, rec)
		}
		if st := g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": id}).str("state"); st != "released" {
			t.Fatalf("contract %s is %q after its session ended", id, st)
		}
	}
	// Other sessions' and session-less contracts are untouched.
	if st := g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": d}).str("state"); st != "active" {
		t.Fatalf("contract %s of another session is %q", d, st)
	}
	if len(events(evs, "rcns_release", d)) != 0 {
		t.Fatalf("contract %s of another session has a release event", d)
	}
	// Ending the session again releases nothing and records nothing.
	if r := g.builtin(t, "SUSPEND", map[string]any{"session_id": s1}); r.status != 200 || len(r.body["result"].(map[string]any)["released"].([]any)) != 0 {
		t.Fatalf("second SUSPEND session_id: %s", r)
	}
	if n := len(events(g.lifecycleEvents(t), "rcns_release", a)); n != 1 || len(g.negotiationRecords(t, "release", a)) != 1 {
		t.Fatalf("a second session end recorded again: %d events", n)
	}
}

// TestPersistentContractLeavesManifest: a persistent contract released
// by synthesis_id or by its session, or revoked, leaves the manifest at
// once (and AGTP-API-Version moves); releases did not rebuild it.
func TestPersistentContractLeavesManifest(t *testing.T) {
	g := newTestGateway(t)
	g.h.AllowPersistent = true
	sid := "persist-0123456789abcdefABCDEF"
	manifest := func() (map[string]bool, string) {
		t.Helper()
		a := g.serve(t, "DISCOVER", "/", nil, nil, 0)
		paths := map[string]bool{}
		for _, e := range a.body["endpoints"].([]any) {
			paths[e.(map[string]any)["path"].(string)] = true
		}
		return paths, a.hdr("AGTP-API-Version")
	}
	for i, end := range []struct {
		name   string
		method string
		params func(id string) map[string]any
	}{
		{"SUSPEND synthesis_id", "SUSPEND", func(id string) map[string]any { return map[string]any{"synthesis_id": id} }},
		{"SUSPEND session_id", "SUSPEND", func(string) map[string]any { return map[string]any{"session_id": sid} }},
		{"REVOKE", "REVOKE", func(id string) map[string]any { return map[string]any{"target": "contract", "synthesis_id": id} }},
	} {
		path := "/item/persistent-" + strconv.Itoa(i)
		a := g.builtin(t, "PROPOSE", proposal(path, "persistent", true), "Session-ID", sid)
		if a.status != 263 || a.body["persistent"] != true {
			t.Fatalf("%s: persistent PROPOSE: %s", end.name, a)
		}
		in, v1 := manifest()
		if !in[path] {
			t.Fatalf("%s: the persistent contract is not in the manifest", end.name)
		}
		if r := g.builtin(t, end.method, end.params(a.str("synthesis_id"))); r.status != 200 {
			t.Fatalf("%s: %s", end.name, r)
		}
		in, v2 := manifest()
		if in[path] || v2 == v1 {
			t.Fatalf("%s: the ended persistent contract is still in the manifest (AGTP-API-Version %s → %s)", end.name, v1, v2)
		}
	}
}

// released returns the synthesis ids SUSPEND with session_id sid
// released.
func (g *testGateway) released(t *testing.T, sid string) []any {
	t.Helper()
	a := g.builtin(t, "SUSPEND", map[string]any{"session_id": sid})
	if a.status != 200 {
		t.Fatalf("SUSPEND session_id %s: %s", sid, a)
	}
	return field(a.body, "result", "released").([]any)
}

// TestBodySession: a request's session is the Session-ID header, else
// the envelope session_id, else (PROPOSE) parameters.session_id, each
// checked as a Session-ID (400 invalid-session-id); a contract carries
// it, so SUSPEND with session_id ends it. When two disagree the first
// wins and the disagreement is logged (spec OP-37). Body session ids
// used to be accepted and ignored.
func TestBodySession(t *testing.T) {
	g := newTestGateway(t)
	core, logs := observer.New(zap.InfoLevel)
	g.h.eng.logger = zap.New(core)
	hdrS, envS, parS := "hdr-0123456789abcdefABCDEF", "env-0123456789abcdefABCDEF", "par-0123456789abcdefABCDEF"
	propose := func(path string, envelope map[string]any, kv ...string) string {
		t.Helper()
		body := map[string]any{"parameters": proposal(path)}
		for k, v := range envelope {
			if k == "parameters.session_id" {
				body["parameters"].(map[string]any)["session_id"] = v
				continue
			}
			body[k] = v
		}
		a := g.do(t, "PROPOSE", "/", body, kv...)
		if a.status != 263 {
			t.Fatalf("PROPOSE %s %v: %s", path, envelope, a)
		}
		return a.str("synthesis_id")
	}
	disagreements := func() int { return logs.FilterMessageSnippet("session ids disagree").Len() }

	// No header: the envelope's, else the parameters'.
	a := propose("/item/env", map[string]any{"session_id": envS})
	b := propose("/item/par", map[string]any{"parameters.session_id": parS})
	c := propose("/item/both", map[string]any{"session_id": envS, "parameters.session_id": parS})
	if disagreements() != 1 {
		t.Fatalf("envelope and parameters disagreeing logged %d lines; want 1", disagreements())
	}
	// The header wins over either, with a log line each.
	d := propose("/item/hdr-env", map[string]any{"session_id": envS}, "Session-ID", hdrS)
	e := propose("/item/hdr-par", map[string]any{"parameters.session_id": parS}, "Session-ID", hdrS)
	f := propose("/item/hdr-same", map[string]any{"session_id": hdrS, "parameters.session_id": hdrS}, "Session-ID", hdrS)
	if n := disagreements(); n != 3 {
		t.Fatalf("%d disagreement lines; want 3 (agreeing values are not logged)", n)
	}
	l := logs.FilterMessageSnippet("session ids disagree").All()[1]
	if m := l.ContextMap(); l.Message != "session ids disagree; the Session-ID header wins (OP-37)" || m["session_id"] != hdrS || m["ignored_session_id"] != envS || m["ignored_from"] != "envelope session_id" {
		t.Fatalf("disagreement log line: %s %v", l.Message, m)
	}
	sorted := func(ids ...string) []any {
		sort.Strings(ids)
		out := make([]any, len(ids))
		for i, id := range ids {
			out[i] = id
		}
		return out
	}
	if got := g.released(t, parS); !reflect.DeepEqual(got, sorted(b)) {
		t.Fatalf("session %s released %v; want %v", parS, got, sorted(b))
	}
	if got := g.released(t, envS); !reflect.DeepEqual(got, sorted(a, c)) {
		t.Fatalf("session %s released %v; want %v", envS, got, sorted(a, c))
	}
	if got := g.released(t, hdrS); !reflect.DeepEqual(got, sorted(d, e, f)) {
		t.Fatalf("session %s released %v; want %v", hdrS, got, sorted(d, e, f))
	}
	// The envelope's session is the request's: its Attribution-Record
	// carries it, on any method.
	r := g.do(t, "DISCOVER", "/methods", map[string]any{"session_id": envS})
	if p := attributionPayload(t, r); r.status != 200 || p["session_id"] != envS {
		t.Fatalf("DISCOVER with an envelope session_id: %s, record %v", r, p)
	}
	// null is "not given".
	if r := g.do(t, "DISCOVER", "/methods", map[string]any{"session_id": nil}); r.status != 200 {
		t.Fatalf("envelope session_id null: %s", r)
	}
	// Each is checked as the header is, before anything is spent.
	for _, bad := range []any{"sess-a1b2c3d4", "", 5, true, map[string]any{}} {
		wantError(t, g.do(t, "DISCOVER", "/methods", map[string]any{"session_id": bad}), 400, "invalid-session-id", "envelope session_id must be")
		body := map[string]any{"parameters": proposal("/item/bad", "session_id", bad)}
		r := g.do(t, "PROPOSE", "/", body)
		wantError(t, r, 400, "invalid-session-id", "parameter session_id must be")
		if r.str("negotiation_id") == "" || r.hdr("RateLimit") != "" {
			t.Fatalf("PROPOSE parameters.session_id %v: %s (RateLimit %q); want a negotiation_id and no budget spent", bad, r, r.hdr("RateLimit"))
		}
	}
}

// TestTaskIDDisagreementLogged: the Task-ID header wins over the
// envelope task_id, and a disagreement is logged (spec OP-37).
func TestTaskIDDisagreementLogged(t *testing.T) {
	g := newTestGateway(t)
	core, logs := observer.New(zap.InfoLevel)
	g.h.eng.logger = zap.New(core)
	g.do(t, "DISCOVER", "/methods", map[string]any{"task_id": "t-1"}, "Task-ID", "t-1")
	if n := logs.FilterMessageSnippet("task_id disagree").Len(); n != 0 {
		t.Fatalf("agreeing task ids logged %d lines", n)
	}
	a := g.do(t, "DISCOVER", "/methods", map[string]any{"task_id": "t-2"}, "Task-ID", "t-1")
	if a.hdr("Task-ID") != "t-1" || logs.FilterMessageSnippet("task_id disagree").Len() != 1 {
		t.Fatalf("Task-ID t-1, task_id t-2: Task-ID %q echoed, %d log lines; want t-1 and 1", a.hdr("Task-ID"), logs.FilterMessageSnippet("task_id disagree").Len())
	}
}

// TestNullIsNotGiven pins what the docs say: JSON null in a built-in
// parameter, or as "parameters", is "not given" (the default applies),
// never a wrong type. (REVOKE's mode needs inspect:all, which
// benchAgent lacks.)
func TestNullIsNotGiven(t *testing.T) {
	g := newTestGateway(t)
	g.propose(t, "/item/a")
	for _, tc := range []struct {
		method, target string
		body           map[string]any
	}{
		{"DISCOVER", "/contracts", map[string]any{"parameters": nil}},
		{"DISCOVER", "/contracts", map[string]any{"parameters": map[string]any{"limit": nil, "cursor": nil}}},
		{"INSPECT", "/", map[string]any{"parameters": map[string]any{"target": "lifecycle", "limit": nil, "cursor": nil, "agent_id": nil}}},
	} {
		if a := g.do(t, tc.method, tc.target, tc.body); a.status != 200 {
			t.Errorf("%s %s %v: %s", tc.method, tc.target, tc.body, a)
		}
	}
	if a := g.builtin(t, "PROPOSE", proposal("/item/b", "requested_duration", nil, "session_id", nil, "persistent", nil)); a.status != 263 {
		t.Errorf("PROPOSE with null parameters: %s", a)
	}
}

// nestedItems is a JSON Schema {"items":{"items":...{"type":"string"}}}
// whose JSON nesting is depth levels (the schema object itself is one).
func nestedItems(depth int) map[string]any {
	m := map[string]any{"type": "string"}
	for i := 1; i < depth; i++ {
		m = map[string]any{"items": m}
	}
	return m
}

// TestProposeSchemaShapeLimits: a proposed input_schema or output_schema
// nested deeper than recipes.MaxProposedSchemaDepth or holding more than
// recipes.MaxProposedSchemaNodes values is refused 400 invalid-schema
// before jsonschema's compiler (cubic in depth) sees it; at the limits
// it is compiled and the proposal goes on.
func TestProposeSchemaShapeLimits(t *testing.T) {
	g := newTestGateway(t)
	withSchema := func(path, key string, s any) map[string]any {
		p := proposal(path)
		p["endpoint"].(map[string]any)[key] = s
		return p
	}
	wide := map[string]any{}
	for i := 0; i < recipes.MaxProposedSchemaNodes; i++ {
		wide["p"+strconv.Itoa(i)] = true
	}
	for _, tc := range []struct {
		name, key string
		schema    any
		expl      string
	}{
		{"deep input_schema", "input_schema", nestedItems(2000), "input_schema is refused: it nests deeper than 32 levels"},
		{"one level too deep", "output_schema", nestedItems(recipes.MaxProposedSchemaDepth + 1), "output_schema is refused: it nests deeper than 32 levels"},
		{"too many values", "input_schema", map[string]any{"type": "object", "properties": wide}, "holds more than 1000 JSON values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := g.builtin(t, "PROPOSE", withSchema("/item/x", tc.key, tc.schema))
			wantError(t, a, 400, "invalid-schema", tc.expl)
			if a.body["limit_depth"] != float64(recipes.MaxProposedSchemaDepth) || a.body["limit_nodes"] != float64(recipes.MaxProposedSchemaNodes) || a.body["schema"] != tc.key {
				t.Errorf("refusal fields: %s", a)
			}
		})
	}
	for i, key := range []string{"input_schema", "output_schema"} {
		if a := g.builtin(t, "PROPOSE", withSchema("/item/ok"+strconv.Itoa(i), key, nestedItems(recipes.MaxProposedSchemaDepth))); a.status != 263 {
			t.Errorf("%s nested exactly %d deep: %s; want 263", key, recipes.MaxProposedSchemaDepth, a)
		}
	}
}

// TestProposeSchemaErrorBounded: a proposed schema the compiler refuses
// is quoted on one line, without the internal resource name, in at most
// maxSchemaErrorBytes: 300 invalid properties with long names and
// values (under the node limit) gave a 326 kB multi-line explanation.
func TestProposeSchemaErrorBounded(t *testing.T) {
	g := newTestGateway(t)
	props := map[string]any{}
	for i := 0; i < 300; i++ {
		props["p"+strconv.Itoa(i)+strings.Repeat("x", 200)] = map[string]any{"type": "nope" + strings.Repeat("y", 2000)}
	}
	p := proposal("/item/bad-schema")
	p["endpoint"].(map[string]any)["input_schema"] = map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	a := g.builtin(t, "PROPOSE", p)
	wantError(t, a, 400, "invalid-schema", "input_schema is not a valid JSON Schema: ")
	e := a.str("explanation")
	if len(e) > maxSchemaErrorBytes+len("input_schema is not a valid JSON Schema: ") || strings.Contains(e, "\n") || strings.Contains(e, "mem:") {
		t.Fatalf("explanation is %d bytes (newline %v, mem: %v): %.300s", len(e), strings.Contains(e, "\n"), strings.Contains(e, "mem:"), e)
	}
	if len(a.raw) > 4096 {
		t.Fatalf("answer is %d bytes", len(a.raw))
	}
}

// TestProposeErrorMethodPath: the uniform error body's method and path
// are the request's own (spec §19, OP-28): PROPOSE and "/" on every
// PROPOSE refusal, except that a 459 names the method it refuses (§19:
// "459 adds method"), the proposed one. The proposal's pair is in
// proposed_method and proposed_path and in the explanation. A 460
// answered PROPOSE with path /query/x.
func TestProposeErrorMethodPath(t *testing.T) {
	g := newTestGateway(t)
	with := func(method, path string) map[string]any {
		p := proposal(path)
		p["endpoint"].(map[string]any)["method"] = method
		return p
	}
	for _, tc := range []struct {
		name, method, path string
		status             int
		reason, expl       string
		fields             map[string]any
	}{
		{"459", "FROB", "/item/a", 459, "method-not-in-catalog", "proposed method FROB is not in catalog", map[string]any{"catalog_version": g.h.eng.methods.Catalog.Version()}},
		// Outside the lexical rule: named so, as for a request method
		// (it was method-not-in-catalog; fresh-user review).
		{"459 lowercase", "book", "/item/a", 459, "invalid-method-token", `proposed method "book" is not a valid AGTP method token`, map[string]any{"method": "book"}},
		{"459 digit", "B0OK", "/item/a", 459, "invalid-method-token", `proposed method "B0OK" is not a valid AGTP method token`, map[string]any{"method": "B0OK"}},
		{"459 too long", strings.Repeat("A", 34), "/item/a", 459, "invalid-method-token", "is not a valid AGTP method token", nil},
		{"460", "LOOKUP", "/query/x", 460, "path-grammar-violation", `Path segment "query"`, map[string]any{"segment": "query"}},
		{"463", "LOOKUP", "/nothing-here", 463, "composition-impossible", "no recipe can build LOOKUP /nothing-here", nil},
		{"400", "LOOKUP", "/item/a", 400, "invalid-semantic", "the semantic block is invalid", nil},
		// A missing block is named missing (it was "semantic block is
		// null, want an object"; fresh-user review); null is null.
		{"400 missing", "LOOKUP", "/item/a", 400, "invalid-semantic", "has no semantic block", nil},
		{"400 null", "LOOKUP", "/item/a", 400, "invalid-semantic", "semantic block is null, want an object", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := with(tc.method, tc.path)
			switch tc.name {
			case "400":
				delete(p["endpoint"].(map[string]any)["semantic"].(map[string]any), "impact")
			case "400 missing":
				delete(p["endpoint"].(map[string]any), "semantic")
			case "400 null":
				p["endpoint"].(map[string]any)["semantic"] = nil
			}
			a := g.builtin(t, "PROPOSE", p)
			wantError(t, a, tc.status, tc.reason, tc.expl)
			// A 459 names the method it refuses (spec §19: 459 adds
			// method): the proposed one; any other answer the request's.
			wantMethod := "PROPOSE"
			if tc.status == 459 {
				wantMethod = tc.method
			}
			if a.str("method") != wantMethod || a.str("path") != "/" {
				t.Errorf("method/path = %q %q, want %s /: %s", a.str("method"), a.str("path"), wantMethod, a)
			}
			if a.str("proposed_method") != tc.method || a.str("proposed_path") != tc.path {
				t.Errorf("proposed_method/proposed_path = %q %q, want %q %q: %s", a.str("proposed_method"), a.str("proposed_path"), tc.method, tc.path, a)
			}
			for k, v := range tc.fields {
				if a.body[k] != v {
					t.Errorf("%s = %v, want %v: %s", k, a.body[k], v, a)
				}
			}
		})
	}
}

// TestContractLimitExplanation: a refusal at the per-agent contract
// limit states the limit as enforced (the default 100 when
// max_contracts_per_agent is unset, not 0) and the agent's actual count
// (which exceeds the limit after a reload lowered it).
func TestContractLimitExplanation(t *testing.T) {
	g := newTestGateway(t)
	g.h.MaxContractsPerAgent = 0 // unset: the default applies
	g.h.eng.st.mem.ContractStore().SetLimits(g.h.storeLimits())
	for i := 0; i < recipes.DefaultMaxContractsPerAgent; i++ {
		g.propose(t, "/item/n"+strconv.Itoa(i))
	}
	a := g.builtin(t, "PROPOSE", proposal("/item/over"))
	wantError(t, a, 463, "policy-refused", "the agent already holds 100 live contracts; max_contracts_per_agent is 100")
	g.h.MaxContractsPerAgent = 50
	g.h.eng.st.mem.ContractStore().SetLimits(g.h.storeLimits())
	a = g.builtin(t, "PROPOSE", proposal("/item/over"))
	wantError(t, a, 463, "policy-refused", "the agent already holds 100 live contracts; max_contracts_per_agent is 50")
	// The store-wide bound: its count and limit.
	g.h.MaxContracts, g.h.MaxContractsPerAgent = 80, 0
	g.h.eng.st.mem.ContractStore().SetLimits(g.h.storeLimits())
	a = g.builtin(t, "PROPOSE", proposal("/item/over"))
	wantError(t, a, 463, "policy-refused", "the gateway holds 100 live contracts, its maximum (max_contracts is 80)")
}

// TestIdempotencyStoreFullNamesTheBound: 503 idempotency-store-full
// says whether the agent's bound (idempotency_max_per_agent) or the
// store's (idempotency_max_records) was hit.
func TestIdempotencyStoreFullNamesTheBound(t *testing.T) {
	for _, tc := range []struct {
		name         string
		limits       idempotency.Limits
		bound, expl  string
		limitRecords float64
	}{
		{"per agent", idempotency.Limits{MaxRecords: 10, MaxPerAgent: 1}, "idempotency_max_per_agent", "this agent holds its maximum of 1 idempotency records (idempotency_max_per_agent)", 1},
		{"store", idempotency.Limits{MaxRecords: 1, MaxPerAgent: 5}, "idempotency_max_records", "the gateway's idempotency store holds its maximum of 1 records for all agents (idempotency_max_records)", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGateway(t)
			g.h.eng.st.mem.ResetIdempotency(tc.limits)
			if a := g.builtin(t, "PROPOSE", proposal("/item/k1"), "Idempotency-Key", "k1"); a.status != 263 {
				t.Fatalf("first keyed PROPOSE: %s", a)
			}
			a := g.builtin(t, "PROPOSE", proposal("/item/k2"), "Idempotency-Key", "k2")
			wantError(t, a, 503, "idempotency-store-full", tc.expl)
			if a.body["bound"] != tc.bound || a.body["limit_records"] != tc.limitRecords {
				t.Errorf("fields: %s", a)
			}
		})
	}
}

// TestProposeMethodPathTyped: a proposal whose method or path is
// missing or not a string is told which, and how (a number method was
// answered "needs method and path"; second fresh-user review).
func TestProposeMethodPathTyped(t *testing.T) {
	g := newTestGateway(t)
	for _, tc := range []struct {
		name string
		set  func(ep map[string]any)
		expl string
	}{
		{"number method", func(ep map[string]any) { ep["method"] = 123 }, "method must be a string, not a number"},
		{"object path", func(ep map[string]any) { ep["path"] = map[string]any{} }, "path must be a string, not an object"},
		{"missing path", func(ep map[string]any) { delete(ep, "path") }, "path is missing"},
		{"empty method, missing path", func(ep map[string]any) { ep["method"] = ""; delete(ep, "path") }, "method is missing; path is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := proposal("/item/a")
			tc.set(p["endpoint"].(map[string]any))
			wantError(t, g.builtin(t, "PROPOSE", p), 400, "invalid-proposal", tc.expl)
		})
	}
}

// TestProposeEchoBounded: a PROPOSE's method and path are echoed in its
// error answers, so they are bounded: a proposed path over 8000 bytes is
// 400 invalid-proposal, and an over-long method is cut in the 459's
// explanation and proposed_method. A 500 kB method gave a 1 MB 459.
func TestProposeEchoBounded(t *testing.T) {
	g := newTestGateway(t)
	p := proposal("/item/" + strings.Repeat("a", 8000))
	a := g.builtin(t, "PROPOSE", p)
	wantError(t, a, 400, "invalid-proposal", "the proposed path is 8006 bytes; at most 8000")
	if len(a.raw) > 2048 {
		t.Errorf("400 answer is %d bytes", len(a.raw))
	}
	p = proposal("/item/a")
	p["endpoint"].(map[string]any)["method"] = strings.Repeat("A", 500_000)
	a = g.builtin(t, "PROPOSE", p)
	wantError(t, a, 459, "invalid-method-token", `proposed method "AAAA`)
	if len(a.raw) > 2048 {
		t.Errorf("459 answer is %d bytes", len(a.raw))
	}
	if m := a.str("proposed_method"); len(m) > 100 || !strings.HasPrefix(m, "AAAA") {
		t.Errorf("proposed_method %q…, want the method cut", m[:min(len(m), 80)])
	}
}

// endContract asks for contract id to end: REVOKE target=contract or
// SUSPEND synthesis_id.
func (g *testGateway) endContract(t *testing.T, method, id string) *answer {
	t.Helper()
	p := map[string]any{"synthesis_id": id}
	if method == "REVOKE" {
		p["target"] = "contract"
	}
	return g.builtin(t, method, p)
}

// inspectState returns the state INSPECT target=contract reports for
// id, failing unless it answers 200.
func (g *testGateway) inspectState(t *testing.T, id string) string {
	t.Helper()
	a := g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": id})
	if a.status != 200 {
		t.Fatalf("INSPECT target=contract %s: %s", id, a)
	}
	return a.str("state")
}

// TestEndedContractNoopReportsState: SUSPEND synthesis_id or REVOKE
// target=contract on a contract that has already ended is a 200 no-op
// reporting the state the contract is in, the one INSPECT reports
// (revoked, expired), not the state the request would have set (spec
// §14.4); it writes no lifecycle event. SUSPEND of a revoked contract
// used to answer "released".
func TestEndedContractNoopReportsState(t *testing.T) {
	g := newTestGateway(t)
	for i, tc := range []struct {
		name, end, then, want string
	}{
		{"SUSPEND a revoked one", "REVOKE", "SUSPEND", recipes.StateRevoked},
		{"REVOKE a revoked one", "REVOKE", "REVOKE", recipes.StateRevoked},
		{"SUSPEND an expired one", "expire", "SUSPEND", recipes.StateExpired},
		{"REVOKE an expired one", "expire", "REVOKE", recipes.StateExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := g.propose(t, "/item/ended-"+strconv.Itoa(i))
			if tc.end == "expire" {
				if !g.h.eng.st.mem.ContractStore().End(id, recipes.StateExpired) {
					t.Fatalf("contract %s was not live", id)
				}
			} else if a := g.endContract(t, tc.end, id); a.status != 200 || field(a.body, "result", "noop") != false {
				t.Fatalf("%s: %s", tc.end, a)
			}
			evs := len(g.lifecycleEvents(t))
			a := g.endContract(t, tc.then, id)
			want := map[string]any{"synthesis_id": id, "state": tc.want, "noop": true}
			if a.status != 200 || !reflect.DeepEqual(a.body["result"], want) {
				t.Fatalf("%s: %s; want 200 with result %v", tc.then, a, want)
			}
			if st := g.inspectState(t, id); st != tc.want {
				t.Fatalf("INSPECT reports %q, the no-op %q", st, tc.want)
			}
			if n := len(g.lifecycleEvents(t)); n != evs {
				t.Fatalf("the no-op %s wrote %d lifecycle events", tc.then, n-evs)
			}
		})
	}
}

// TestReleasedContractStaysKnown: a released contract is known while
// its tombstone is kept, to REVOKE and SUSPEND as to INSPECT: both
// answer 200 noop with state released (spec §14.4: 404 is for ids the
// server does not know; they used to answer 404 contract-not-found
// while INSPECT showed the record). Presenting it stays 404 (§14.4 path
// 1). Once the tombstone is gone (tombstone_ttl), and for an id never
// issued, INSPECT, REVOKE and SUSPEND all answer 404.
func TestReleasedContractStaysKnown(t *testing.T) {
	g := newTestGateway(t)
	var ids []string
	for i, end := range []string{"SUSPEND synthesis_id", "SUSPEND session_id", "stale sweep"} {
		sid := "known-" + strconv.Itoa(i) + "-0123456789abcdefABCDEF"
		path := "/item/released-" + strconv.Itoa(i)
		id := g.propose(t, path, "Session-ID", sid)
		switch end {
		case "SUSPEND synthesis_id":
			if a := g.endContract(t, "SUSPEND", id); a.status != 200 || field(a.body, "result", "noop") != false {
				t.Fatalf("%s: %s", end, a)
			}
		case "SUSPEND session_id":
			if got := g.released(t, sid); len(got) != 1 || got[0] != id {
				t.Fatalf("%s released %v; want [%s]", end, got, id)
			}
		case "stale sweep":
			// Released as an invalidating sweep releases (its recipe is
			// unchanged here, so a sweep would keep it).
			if !g.h.eng.st.mem.ContractStore().End(id, recipes.StateReleased) {
				t.Fatalf("contract %s was not live", id)
			}
		}
		ids = append(ids, id)
		if st := g.inspectState(t, id); st != recipes.StateReleased {
			t.Fatalf("released by %s: INSPECT reports %q", end, st)
		}
		evs := len(g.lifecycleEvents(t))
		for _, method := range []string{"REVOKE", "SUSPEND"} {
			a := g.endContract(t, method, id)
			want := map[string]any{"synthesis_id": id, "state": recipes.StateReleased, "noop": true}
			if a.status != 200 || !reflect.DeepEqual(a.body["result"], want) {
				t.Fatalf("released by %s, then %s: %s; want 200 with result %v", end, method, a, want)
			}
		}
		if n := len(g.lifecycleEvents(t)); n != evs {
			t.Fatalf("released by %s: the no-ops wrote %d lifecycle events", end, n-evs)
		}
		if st := g.inspectState(t, id); st != recipes.StateReleased {
			t.Fatalf("released by %s: INSPECT reports %q after the no-ops", end, st)
		}
		wantError(t, g.do(t, "LOOKUP", path, map[string]any{"parameters": map[string]any{"item_id": "1"}}, "Contract-Synthesized", id),
			404, "contract-not-found", "")
	}
	// A revoked contract too, until its tombstone goes.
	revoked := g.propose(t, "/item/revoked")
	if a := g.endContract(t, "REVOKE", revoked); a.status != 200 {
		t.Fatalf("REVOKE: %s", a)
	}
	ids = append(ids, revoked)
	// With the tombstones gone the ids are unknown to all three, as an
	// id never issued is.
	g.h.TombstoneTTL = caddy.Duration(time.Nanosecond)
	g.h.eng.st.mem.ContractStore().SetLimits(g.h.storeLimits())
	for _, id := range append(ids, "syn-AAAAAAAAAAAAAAAAAAAAAA") {
		wantError(t, g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": id}), 404, "contract-not-found", "")
		wantError(t, g.endContract(t, "REVOKE", id), 404, "contract-not-found", "")
		wantError(t, g.endContract(t, "SUSPEND", id), 404, "contract-not-found", "")
	}
}

// TestGrantedDurationForm: granted_duration, in the 263 body and in the
// propose negotiation record, is written in a form requested_duration
// accepts, the shortest Go form without zero units ("30m", "1h30m",
// "26h"), not Go's "30m0s" / "1h30m0s" / "26h0m0s"; it reads back as the
// duration granted.
func TestGrantedDurationForm(t *testing.T) {
	g := newTestGateway(t)
	g.h.ContractTTL = caddy.Duration(100 * time.Hour)
	for i, tc := range []struct{ requested, granted string }{
		{"30m", "30m"}, {"PT30M", "30m"}, {"1h30m", "1h30m"}, {"90m", "1h30m"}, {"PT90M", "1h30m"}, {"24h", "24h"}, {"P1D", "24h"},
		{"P1DT2H", "26h"}, {"45s", "45s"}, {"3600s", "1h"}, {"1h0m1s", "1h1s"}, {"1.5s", "1s"}, {"PT1.9S", "1s"}, {"PT59.9999999999M", "59m59s"}, {"7d", "100h"}, {"61m", "1h1m"},
	} {
		a := g.builtin(t, "PROPOSE", proposal("/item/form"+strconv.Itoa(i), "requested_duration", tc.requested))
		if a.status != 263 || a.str("granted_duration") != tc.granted {
			t.Fatalf("requested_duration %q: %s; want 263 with granted_duration %q", tc.requested, a, tc.granted)
		}
		want, _ := time.ParseDuration(tc.granted)
		if d, err := agtp.ParseRequestedDuration(tc.granted); err != nil || d != want {
			t.Fatalf("granted_duration %q reads back as %v, %v; want %v", tc.granted, d, err, want)
		}
		var recs []any
		for _, rec := range g.negotiationRecords(t, "propose", "") {
			if field(rec, "granted", "synthesis_id") == a.str("synthesis_id") {
				recs = append(recs, field(rec, "granted", "granted_duration"))
			}
		}
		if !reflect.DeepEqual(recs, []any{tc.granted}) {
			t.Fatalf("requested_duration %q: the negotiation record grants %v; want [%s]", tc.requested, recs, tc.granted)
		}
	}
}

// TestPersistentGrantHasNoDuration: a persistent PROPOSE with
// requested_duration is granted no duration in the 263 answer, and its
// negotiation record says the same; the record wrote the internal
// lifetime of persistent contracts ("876000h") as granted_duration.
func TestPersistentGrantHasNoDuration(t *testing.T) {
	g := newTestGateway(t)
	g.h.AllowPersistent = true
	a := g.builtin(t, "PROPOSE", proposal("/item/persist-d", "persistent", true, "requested_duration", "30m"))
	if a.status != 263 || a.body["persistent"] != true || a.body["granted_duration"] != nil {
		t.Fatalf("persistent PROPOSE: %s; want 263, persistent, no granted_duration", a)
	}
	n := 0
	for _, rec := range g.negotiationRecords(t, "propose", "") {
		if field(rec, "granted", "synthesis_id") != a.str("synthesis_id") {
			continue
		}
		n++
		if d := field(rec, "granted", "granted_duration"); d != nil {
			t.Errorf("the negotiation record grants duration %v to a persistent contract", d)
		}
		if r := field(rec, "requested", "requested_duration"); r != "30m" {
			t.Errorf("the negotiation record's requested_duration is %v, want 30m", r)
		}
	}
	if n != 1 {
		t.Fatalf("%d negotiation records of the synthesis, want 1", n)
	}
}

// TestProposeErrorsNameNegotiation: every error answer of PROPOSE names
// its negotiation in the body and the Negotiation-ID header, those of
// the shared Idempotency-Key and budget checks included (they named
// none while PROPOSE's own refusals did).
func TestProposeErrorsNameNegotiation(t *testing.T) {
	g := newTestGateway(t)
	if a := g.builtin(t, "PROPOSE", proposal("/item/n1"), "Idempotency-Key", "nk"); a.status != 263 {
		t.Fatalf("first PROPOSE: %s", a)
	}
	a := g.builtin(t, "PROPOSE", proposal("/item/n2"), "Idempotency-Key", "nk")
	wantError(t, a, 422, "idempotency-key-reused", "")
	if id := a.str("negotiation_id"); id == "" || a.hdr("Negotiation-ID") != id || a.str("proposed_path") != "/item/n2" {
		t.Errorf("reused key: %s (Negotiation-ID %q); want negotiation_id in the body and the header, and proposed_path", a, a.hdr("Negotiation-ID"))
	}
	a = g.builtin(t, "PROPOSE", map[string]any{"endpoint": 5})
	wantError(t, a, 400, "invalid-proposal", "")
	if id := a.str("negotiation_id"); id == "" || a.hdr("Negotiation-ID") != id {
		t.Errorf("invalid proposal: %s (Negotiation-ID %q); want negotiation_id in the body and the header", a, a.hdr("Negotiation-ID"))
	}
}
