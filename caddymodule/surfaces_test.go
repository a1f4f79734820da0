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
	setLogCore(t, g.h, core)
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
	setLogCore(t, g.h, core)
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
