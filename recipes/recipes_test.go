package recipes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

func methodPolicy() *policy.MethodPolicy {
	return &policy.MethodPolicy{Catalog: policy.DefaultCatalog()}
}

const upstreamErrors = `[upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error, not_found]`

var upstreamParam = regexp.MustCompile(`\{(\w+)\}`)

// endpointDoc renders a Tier B endpoint document over upstream "up". Its
// input_schema requires the upstream path's {parameters}, as the load
// does (checkUpstreamParams).
func endpointDoc(method, path, upMethod, upPath, extra string) string {
	var required []string
	for _, m := range upstreamParam.FindAllStringSubmatch(upPath, -1) {
		required = append(required, m[1])
	}
	return fmt.Sprintf(`method: %s
path: %s
description: test endpoint
semantic: {intent: Do it., actor: agent, outcome: Done., capability: retrieval, confidence: 1, impact: informational, is_idempotent: true}
input_schema:
  type: object
  additionalProperties: false
  required: [%s]
  properties: {id: {type: string}, name: {type: string}, n: {type: integer}}
output_schema: {type: object}
errors: %s
required_scopes: [t:read]
external_service:
  upstream: up
  method: %s
  path: %s
%s`, method, path, strings.Join(required, ", "), upstreamErrors, upMethod, upPath, extra)
}

func buildEndpoint(t *testing.T, src string, up *Upstream) *Endpoint {
	t.Helper()
	doc, err := schema.Parse("ep.yaml", []byte(src), schema.KindEndpoint)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	e, err := BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return e
}

func newUpstream(t *testing.T, url string) *Upstream {
	t.Helper()
	up, err := NewUpstream("up", url, UpstreamOptions{Timeout: 2 * time.Second, MaxResponseBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	return up
}

func TestNewUpstreamSchemeRule(t *testing.T) {
	tests := []struct {
		name, url string
		insecure  bool
		ok        bool
	}{
		{"https", "https://api.example.com", false, true},
		{"http loopback v4", "http://127.0.0.1:3000", false, true},
		{"http localhost", "http://localhost:3000", false, true},
		{"http loopback v6", "http://[::1]:3000", false, true},
		{"http remote refused", "http://api.example.com", false, false},
		{"http remote insecure", "http://api.example.com", true, true},
		{"ftp refused", "ftp://127.0.0.1", false, false},
		{"no host", "http://", false, false},
		{"query refused", "https://a.example/?x=1", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewUpstream("u", tc.url, UpstreamOptions{InsecureHTTP: tc.insecure})
			if (err == nil) != tc.ok {
				t.Fatalf("NewUpstream(%q) err = %v, want ok=%v", tc.url, err, tc.ok)
			}
		})
	}
}

func TestInvokeMapsUpstreamOutcomes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.EscapedPath() {
		case "/ok/a%2Fb":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"a/b","q":%q}`, r.URL.RawQuery)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
		case "/html":
			fmt.Fprint(w, "<html>nope</html>")
		case "/401":
			w.WriteHeader(401)
		case "/404":
			w.WriteHeader(404)
		case "/500":
			w.WriteHeader(500)
		case "/empty":
			w.WriteHeader(204)
		case "/empty200":
			w.WriteHeader(200)
		case "/huge-number":
			fmt.Fprint(w, `{"n":1e400}`)
		case "/big":
			fmt.Fprintf(w, `{"x":"%s"}`, strings.Repeat("a", 1<<17))
		default:
			w.WriteHeader(418)
		}
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	tests := []struct {
		name, upPath, extra string
		input               map[string]any
		wantCode            string
		wantStatus          int
	}{
		{"success with escaped segment", "/ok/{id}", "  query: {name: .name}\n", map[string]any{"id": "a/b", "name": "x y"}, "", 0},
		{"timeout", "/slow", "  timeout_seconds: 0.2\n", map[string]any{}, ErrUpstreamTimeout, 0},
		{"non-JSON 2xx", "/html", "", map[string]any{}, ErrUpstreamMalformed, 200},
		{"401", "/401", "", map[string]any{}, ErrUpstreamAuthentication, 401},
		{"unmapped 500", "/500", "", map[string]any{}, ErrUpstream, 500},
		{"mapped 404", "/404", "  error_map: {\"404\": not_found}\n", map[string]any{}, "not_found", 404},
		{"204 is null, not an object", "/empty", "", map[string]any{}, ErrUpstreamMalformed, 204},
		{"empty 200 is null, not an object", "/empty200", "", map[string]any{}, ErrUpstreamMalformed, 200},
		{"number out of range", "/huge-number", "", map[string]any{}, ErrUpstreamMalformed, 200},
		{"response over limit", "/big", "", map[string]any{}, ErrUpstreamMalformed, 200},
		{"unknown input field", "/ok/{id}", "", map[string]any{"id": "x", "bogus": 1}, ErrInvalidInput, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "GET", tc.upPath, tc.extra), up)
			out, f := ep.Invoke(context.Background(), tc.input)
			if tc.wantCode == "" {
				if f != nil {
					t.Fatalf("Invoke failed: %v", f)
				}
				if tc.upPath == "/ok/{id}" {
					m := out.(map[string]any)
					if m["id"] != "a/b" || m["q"] != "name=x+y" {
						t.Fatalf("output = %v", m)
					}
				}
				return
			}
			if f == nil {
				t.Fatalf("Invoke succeeded with %v, want %s", out, tc.wantCode)
			}
			if f.Code != tc.wantCode || f.Status != 422 || f.UpstreamStatus != tc.wantStatus {
				t.Fatalf("failure = %+v, want code %s upstream status %d", f, tc.wantCode, tc.wantStatus)
			}
			// Every failure here but refused input came from a sent call
			// (upstream metrics count exactly those).
			if wantSent := tc.wantCode != ErrInvalidInput; f.Sent != wantSent {
				t.Fatalf("failure.Sent = %v, want %v", f.Sent, wantSent)
			}
			// details.upstream_status is the upstream's status, left out
			// when none came back (a timeout), never 0.
			if tc.wantCode != ErrInvalidInput {
				st, has := f.Details["upstream_status"]
				if f.Details["upstream"] != "up" || has != (tc.wantStatus != 0) || (has && st != tc.wantStatus) {
					t.Fatalf("details = %v, want upstream up and upstream_status %d (absent when 0)", f.Details, tc.wantStatus)
				}
			}
		})
	}
}

func TestInvokeConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "GET", "/x", ""), newUpstream(t, "http://"+addr))
	_, f := ep.Invoke(context.Background(), map[string]any{})
	if f == nil || f.Code != ErrUpstreamConnection || !f.SideEffectFree || !f.Sent {
		t.Fatalf("failure = %+v, want a sent, side-effect-free %s", f, ErrUpstreamConnection)
	}
	// No upstream answered: details name the upstream, no status.
	if _, has := f.Details["upstream_status"]; has || f.Details["upstream"] == nil {
		t.Fatalf("details = %v, want upstream and no upstream_status", f.Details)
	}
}

func TestInvokeSendsOnlyConfiguredHeadersAndRenames(t *testing.T) {
	t.Setenv("RCNS_TEST_KEY", "s3cret")
	var got http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		body, _ = io.ReadAll(r.Body)
		fmt.Fprint(w, `{"ident":"g-1","other":true}`)
	}))
	t.Cleanup(srv.Close)
	extra := "  headers: {X-Api-Key: \"${RCNS_TEST_KEY}\"}\n  input_transform: {name: full_name}\n  output_transform: {ident: id}\n"
	ep := buildEndpoint(t, endpointDoc("CREATE", "/things/{id}", "POST", "/things/{id}", extra), newUpstream(t, srv.URL))
	out, f := ep.Invoke(context.Background(), map[string]any{"id": "g-1", "name": "Ada"})
	if f != nil {
		t.Fatal(f)
	}
	if got.Get("X-Api-Key") != "s3cret" {
		t.Errorf("X-Api-Key = %q", got.Get("X-Api-Key"))
	}
	for _, h := range []string{"Agent-Id", "Authority-Scope", "Authorization", "Allow-Rcns", "Contract-Synthesized"} {
		if _, ok := got[h]; ok {
			t.Errorf("upstream received %s", h)
		}
	}
	if string(body) != `{"full_name":"Ada"}` {
		t.Errorf("upstream body = %s, want path parameter removed and name renamed", body)
	}
	m := out.(map[string]any)
	if m["id"] != "g-1" || m["other"] != true {
		t.Errorf("output = %v, want ident renamed to id", m)
	}
}

// TestInvokeRequestHeaders: a GET without a Traceparent carries the
// configured headers and Accept (the header shared by such requests), a
// call with a Traceparent adds it, and neither leaks into the next plain
// call (the shared header is never written); a POST body carries
// Content-Type.
func TestInvokeRequestHeaders(t *testing.T) {
	t.Setenv("RCNS_TEST_KEY", "s3cret")
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Clone())
		fmt.Fprint(w, `{"id":"1"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	extra := "  headers: {X-Api-Key: \"${RCNS_TEST_KEY}\"}\n"
	get := buildEndpoint(t, endpointDoc("FETCH", "/things/{id}", "GET", "/things/{id}", extra), up)
	post := buildEndpoint(t, endpointDoc("CREATE", "/things/{id}", "POST", "/things/{id}", extra), up)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := map[string]any{"id": "1"}
	calls := []struct {
		ep          *Endpoint
		ctx         context.Context
		traceparent string
		contentType string
	}{
		{get, context.Background(), "", ""},
		{get, WithTraceParent(context.Background(), tp), tp, ""},
		{get, context.Background(), "", ""},
		{post, context.Background(), "", "application/json"},
		{get, context.Background(), "", ""},
	}
	for i, c := range calls {
		if _, f := c.ep.Invoke(c.ctx, in); f != nil {
			t.Fatalf("call %d: %v", i, f)
		}
		h := got[i]
		if h.Get("X-Api-Key") != "s3cret" || h.Get("Accept") != "application/json" {
			t.Errorf("call %d: X-Api-Key %q, Accept %q", i, h.Get("X-Api-Key"), h.Get("Accept"))
		}
		if h.Get("Traceparent") != c.traceparent {
			t.Errorf("call %d: Traceparent %q, want %q", i, h.Get("Traceparent"), c.traceparent)
		}
		if h.Get("Content-Type") != c.contentType {
			t.Errorf("call %d: Content-Type %q, want %q", i, h.Get("Content-Type"), c.contentType)
		}
	}
	if n := len(get.svc.plainHeader); n != 2 {
		t.Errorf("shared header has %d fields after the calls, want 2 (X-Api-Key, Accept): %v", n, get.svc.plainHeader)
	}
}

func TestBuildEndpointRefusals(t *testing.T) {
	up := newUpstream(t, "http://127.0.0.1:1")
	tests := []struct {
		name, src, want string
	}{
		{"reserved DISCOVER path", endpointDoc("DISCOVER", "/patterns-v2", "GET", "/x", ""), "reserved built-in"},
		{"reserved DISCOVER sub path", endpointDoc("DISCOVER", "/contracts/history", "GET", "/x", ""), "reserved built-in"},
		{"unset env var", endpointDoc("FETCH", "/things", "GET", "/x", "  headers: {X-K: \"${RCNS_SURELY_UNSET_VAR}\"}\n"), "RCNS_SURELY_UNSET_VAR"},
		{"error_map outside errors", endpointDoc("FETCH", "/things", "GET", "/x", "  error_map: {\"404\": gone}\n"), "not listed in errors"},
		{"unknown upstream", strings.Replace(endpointDoc("FETCH", "/things", "GET", "/x", ""), "upstream: up", "upstream: nope", 1), "unknown upstream"},
		{"method segment in path", endpointDoc("FETCH", "/book/x", "GET", "/x", ""), "BOOK"},
		{"template param not in input", endpointDoc("FETCH", "/things/{zzz}", "GET", "/x", ""), "not a property of input_schema"},
		{"upstream path param not in input", endpointDoc("FETCH", "/things", "GET", "/reservations/{nope}", ""),
			"at /external_service/path: endpoint FETCH /things: upstream path parameter {nope} is not a property of input_schema"},
		{"upstream path param not required", strings.Replace(endpointDoc("FETCH", "/things", "POST", "/things/{id}/{name}", ""), "required: [id, name]", "required: [id]", 1),
			"at /external_service/path: endpoint FETCH /things: upstream path parameter {name} must be listed in input_schema.required"},
		{"upstream path param with no properties", strings.Replace(endpointDoc("FETCH", "/things", "GET", "/things/{id}", ""),
			"properties: {id: {type: string}, name: {type: string}, n: {type: integer}}", "patternProperties: {'^id$': {type: string}}", 1),
			"upstream path parameter {id} is not a property of input_schema"},
		{"legacy verb", endpointDoc("GET", "/things", "GET", "/x", ""), "method GET"},
		{"missing upstream error", strings.Replace(endpointDoc("FETCH", "/things", "GET", "/x", ""), "upstream_error, ", "", 1), "upstream_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := schema.Parse("bad.yaml", []byte(tc.src), schema.KindEndpoint)
			if err == nil {
				_, err = BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "bad.yaml:") {
				t.Fatalf("err = %v, want it to name the file", err)
			}
		})
	}
}

// barrier answers only once n requests are in flight together, proving
// that steps run concurrently without any timing assumption.
type barrier struct {
	n       int
	mu      sync.Mutex
	waiting int
	release chan struct{}
	calls   atomic.Int32
}

func (b *barrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.calls.Add(1)
	b.mu.Lock()
	b.waiting++
	if b.waiting == b.n {
		close(b.release)
	}
	b.mu.Unlock()
	select {
	case <-b.release:
		fmt.Fprintf(w, `{"id":%q}`, strings.TrimPrefix(r.URL.Path, "/"))
	case <-time.After(5 * time.Second):
		w.WriteHeader(504)
	}
}

const recipeHead = `name: fan
version: "1"
description: fan out
required_scopes: [t:write]
pattern: {method: BOOK, path_exact: /trip}
endpoint:
  description: fan out
  semantic: {intent: Do it., actor: agent, outcome: Done., capability: retrieval, confidence: 1, impact: informational, is_idempotent: true}
  input_schema: {type: object, additionalProperties: false, properties: {id: {type: string}}}
  output_schema: {type: object}
  errors: [composition_failed]
`

func buildSet(t *testing.T, up *Upstream, recipe string, endpoints ...string) (*Recipe, map[string]*Endpoint) {
	t.Helper()
	eps := map[string]*Endpoint{}
	for i, src := range endpoints {
		doc, err := schema.Parse(fmt.Sprintf("ep%d.yaml", i), []byte(src), schema.KindEndpoint)
		if err != nil {
			t.Fatal(err)
		}
		e, err := BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
		if err != nil {
			t.Fatal(err)
		}
		eps[e.Method+" "+e.Path] = e
	}
	doc, err := schema.Parse("recipe.yaml", []byte(recipe), schema.KindRecipe)
	if err != nil {
		t.Fatal(err)
	}
	r, err := BuildRecipe(doc, methodPolicy(), func(m, p string) (*Endpoint, bool) { e, ok := eps[m+" "+p]; return e, ok })
	if err != nil {
		t.Fatal(err)
	}
	return r, eps
}

func TestExecuteRunsIndependentStepsConcurrently(t *testing.T) {
	b := &barrier{n: 3, release: make(chan struct{})}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: a, method: FETCH, path: /alpha, input: '{}'}
  - {name: b, method: FETCH, path: /beta, input: '{}'}
  - {name: c, method: FETCH, path: /gamma, input: '{}'}
output: '{a: $a.id, b: $b.id, c: $c.id}'
`
	r, _ := buildSet(t, up, recipe,
		endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
		endpointDoc("FETCH", "/beta", "GET", "/b", ""),
		endpointDoc("FETCH", "/gamma", "GET", "/c", ""))
	for _, s := range r.Steps {
		if len(s.Deps) != 0 {
			t.Fatalf("step %s deps = %v, want none", s.Name, s.Deps)
		}
	}
	out, _, cf := r.Execute(context.Background(), map[string]any{}, 10*time.Second)
	if cf != nil {
		t.Fatalf("Execute: %v (sequential execution cannot pass the barrier)", cf)
	}
	want := map[string]any{"a": "a", "b": "b", "c": "c"}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("output = %v, want %v", out, want)
	}
}

func TestExecuteFailureStopsLaterSteps(t *testing.T) {
	var calls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Store(r.URL.Path, true)
		if r.URL.Path == "/fail" {
			w.WriteHeader(500)
			return
		}
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: first, method: FETCH, path: /alpha, input: '{id: $input.id}'}
  - {name: second, method: FETCH, path: /beta, input: '{id: $first.id}'}
  - {name: third, method: FETCH, path: /gamma, input: '{id: $second.id}'}
output: '$third'
`
	r, _ := buildSet(t, up, recipe,
		endpointDoc("FETCH", "/alpha", "GET", "/ok", ""),
		endpointDoc("FETCH", "/beta", "GET", "/fail", ""),
		endpointDoc("FETCH", "/gamma", "GET", "/never", ""))
	if fmt.Sprint(r.Steps[1].Deps, r.Steps[2].Deps) != "[0] [1]" {
		t.Fatalf("deps = %v %v, want [0] [1]", r.Steps[1].Deps, r.Steps[2].Deps)
	}
	_, reports, cf := r.Execute(context.Background(), map[string]any{"id": "x"}, 10*time.Second)
	if cf == nil {
		t.Fatal("Execute succeeded, want composition failure")
	}
	if cf.FailedStep.Name != "second" || cf.Cause.Code != ErrUpstream || cf.Cause.UpstreamStatus != 500 {
		t.Fatalf("failure = step %s cause %+v", cf.FailedStep.Name, cf.Cause)
	}
	states := []string{reports[0].State, reports[1].State, reports[2].State}
	if fmt.Sprint(states) != "[succeeded failed not-started]" {
		t.Fatalf("states = %v", states)
	}
	// The succeeded and the failed step called their upstream; the one
	// never started did not (upstream metrics count exactly these).
	if called := []bool{reports[0].Called, reports[1].Called, reports[2].Called}; fmt.Sprint(called) != "[true true false]" {
		t.Fatalf("called = %v, want [true true false]", called)
	}
	if _, called := calls.Load("/never"); called {
		t.Fatal("a step after the failed one was called")
	}
	d := cf.Details()
	if d["failed_step"] != "second" || d["failed_step_method"] != "FETCH" || d["underlying_status"] != 500 {
		t.Fatalf("details = %v", d)
	}
	if capt := d["captured"].(map[string]any); capt["first"] == nil {
		t.Fatalf("captured = %v, want first's output", capt)
	}
}

// TestExecuteOneStepHonorsCompositionTimeout: the composition deadline
// bounds a one-step plan's mappings too, not only its upstream call (a
// runaway output expression ends at the deadline, with a failure).
func TestExecuteOneStepHonorsCompositionTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"id":"ok"}`) }))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{n: ([limit(80000000; repeat(1))] | length)}'
`
	// The step's own call timeout (0.1 s) is within the plan's (0.2 s):
	// the plan deadline must still bound the mappings around the call.
	r, _ := buildSet(t, up, recipe, endpointDoc("FETCH", "/alpha", "GET", "/a", "  timeout_seconds: 0.1\n"))
	done := make(chan *CompositionFailure, 1)
	go func() {
		_, _, cf := r.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
		done <- cf
	}()
	select {
	case cf := <-done:
		if cf == nil || !strings.Contains(cf.Cause.Explanation, "deadline") || cf.Cause.Code != ErrUpstreamTimeout {
			t.Fatalf("Execute = %+v, want an upstream_timeout naming the deadline", cf)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a one-step plan ran past its 200ms composition timeout for 20 s")
	}
}

// TestExecuteOneStepProjectionsWithoutTimer: a one-step plan whose
// mappings are plain projections and whose call timeout is within the
// composition timeout runs without a composition timer (untimedOne); its
// call's own timer still bounds the upstream exchange, and the
// composition deadline is still checked before the call and before the
// output mapping. Any other plan keeps the timer: a call timeout longer
// than the composition timeout is cut at the composition deadline.
func TestExecuteOneStepProjectionsWithoutTimer(t *testing.T) {
	delay := make(chan time.Duration, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case d := <-delay:
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		default:
		}
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	projection := recipeHead + `steps:
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{id: $only.id}'
`
	build := func(recipe, callTimeout string) *Recipe {
		r, _ := buildSet(t, up, recipe, endpointDoc("FETCH", "/alpha", "GET", "/a", "  timeout_seconds: "+callTimeout+"\n"))
		return r
	}
	fast := build(projection, "0.1")
	if !fast.untimedOne(200 * time.Millisecond) {
		t.Fatal("untimedOne = false for a projection plan whose call timeout is within the composition timeout")
	}
	if fast.untimedOne(50 * time.Millisecond) {
		t.Fatal("untimedOne = true for a composition timeout shorter than the call timeout")
	}
	jq := build(strings.Replace(projection, "'{id: $only.id}'", "'{id: ($only.id | ascii_upcase)}'", 1), "0.1")
	if jq.untimedOne(200 * time.Millisecond) {
		t.Fatal("untimedOne = true for an output mapping that is not a plain projection")
	}

	// Untimed and fast: the answer as before.
	out, _, cf := fast.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
	if cf != nil || fmt.Sprint(out) != "map[id:ok]" {
		t.Fatalf("Execute = %v, %+v; want map[id:ok]", out, cf)
	}
	// Untimed, slow upstream: the call's own 0.1 s timer ends it.
	delay <- 5 * time.Second
	start := time.Now()
	_, _, cf = fast.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || time.Since(start) > 3*time.Second {
		t.Fatalf("Execute = %+v after %v, want upstream_timeout from the 0.1 s call timeout", cf, time.Since(start))
	}
	// The composition deadline is checked before the call ...
	past := compositionContext{parent: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	_, reports, cf := fast.executeOne(past, map[string]any{})
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || !strings.Contains(cf.Cause.Explanation, "before the step started") || reports[0].Called {
		t.Fatalf("executeOne past its deadline = %+v (called %v), want upstream_timeout before the step started, no call", cf, reports[0].Called)
	}
	// ... and before the output mapping: a call that answers after the
	// composition deadline (here within its own timeout) fails.
	slow := build(projection, "2")
	delay <- 150 * time.Millisecond
	soon := compositionContext{parent: context.Background(), deadline: time.Now().Add(50 * time.Millisecond)}
	_, reports, cf = slow.executeOne(soon, map[string]any{})
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || !strings.Contains(cf.Cause.Explanation, "before the output mapping") || !reports[0].Called {
		t.Fatalf("executeOne whose call outlived the deadline = %+v, want upstream_timeout before the output mapping", cf)
	}
	// A call timeout (2 s) longer than the composition timeout (0.2 s):
	// the timer plan, cut at the composition deadline.
	if slow.untimedOne(200 * time.Millisecond) {
		t.Fatal("untimedOne = true for a 2 s call under a 0.2 s composition timeout")
	}
	delay <- 5 * time.Second
	start = time.Now()
	_, _, cf = slow.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("Execute = %+v after %v, want upstream_timeout at the 0.2 s composition deadline", cf, time.Since(start))
	}
}

// TestUpstreamTimeoutNamesWhatRanOut: a step's upstream call cut off by
// the composition deadline says so, not "did not answer within" the
// call's own (longer) timeout, whether the plan runs under a timer
// context or a compositionContext (untimedOne); a call cut by its own
// timeout, in a plan or a Tier B call, names that timeout. Both are
// upstream_timeout.
func TestUpstreamTimeoutNamesWhatRanOut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fast":
			fmt.Fprint(w, `{"id":"ok"}`)
			return
		case "/stall-body": // headers and part of the body, then nothing
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":`)
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	oneStep := recipeHead + `steps:
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{id: $only.id}'
`
	twoSteps := recipeHead + `steps:
  - {name: a, method: FETCH, path: /beta, input: '{}'}
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{id: $only.id}'
`
	beta := endpointDoc("FETCH", "/beta", "GET", "/fast", "")
	const (
		composition = "the composition deadline passed during the call to upstream up"
		reading     = "the composition deadline passed while upstream up was sending its response"
	)
	tests := []struct {
		name        string
		recipe      string
		upPath      string
		callTimeout string
		// timeout is the composition timeout of Execute; 0 runs
		// executeOne under a compositionContext whose deadline is
		// deadline from now.
		timeout  time.Duration
		deadline time.Duration
		untimed  bool
		extra    string // more endpoint lines
		want     string
	}{
		{name: "timer plan, cut by the composition deadline", recipe: oneStep, upPath: "/stall", callTimeout: "5", timeout: 200 * time.Millisecond, want: composition},
		{name: "timer plan of two steps, cut by the composition deadline", recipe: twoSteps, upPath: "/stall", callTimeout: "5", timeout: 200 * time.Millisecond, want: composition},
		{name: "timer plan, response cut by the composition deadline", recipe: oneStep, upPath: "/stall-body", callTimeout: "5", timeout: 200 * time.Millisecond, want: reading},
		{name: "compositionContext, its deadline passed during the call", recipe: oneStep, upPath: "/stall", callTimeout: "0.3", deadline: 50 * time.Millisecond, want: composition},
		{name: "compositionContext, response cut after its deadline", recipe: oneStep, upPath: "/stall-body", callTimeout: "0.3", deadline: 50 * time.Millisecond, want: reading},
		{name: "compositionContext, its deadline passed during a query mapping", recipe: oneStep, upPath: "/fast", callTimeout: "0.3", deadline: 50 * time.Millisecond,
			extra: "  query: {q: '" + runaway + "'}\n", want: "the composition deadline passed during the query mapping for upstream up"},
		{name: "untimed plan, cut by the call's own timeout", recipe: oneStep, upPath: "/stall", callTimeout: "0.1", timeout: 5 * time.Second, untimed: true, want: "upstream up did not answer within 100ms"},
		{name: "timer plan of two steps, cut by the call's own timeout", recipe: twoSteps, upPath: "/stall", callTimeout: "0.1", timeout: 5 * time.Second, want: "upstream up did not answer within 100ms"},
		{name: "timer plan, response cut by the call's own timeout", recipe: twoSteps, upPath: "/stall-body", callTimeout: "0.1", timeout: 5 * time.Second, want: "upstream up did not finish its response within 100ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := buildSet(t, up, tc.recipe, endpointDoc("FETCH", "/alpha", "GET", tc.upPath, "  timeout_seconds: "+tc.callTimeout+"\n"+tc.extra), beta)
			if tc.timeout > 0 && r.untimedOne(tc.timeout) != tc.untimed {
				t.Fatalf("untimedOne(%v) = %v, want %v", tc.timeout, !tc.untimed, tc.untimed)
			}
			var cf *CompositionFailure
			if tc.timeout > 0 {
				_, _, cf = r.Execute(context.Background(), map[string]any{}, tc.timeout)
			} else {
				_, _, cf = r.executeOne(compositionContext{parent: context.Background(), deadline: time.Now().Add(tc.deadline)}, map[string]any{})
			}
			if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || cf.Cause.Explanation != tc.want {
				t.Fatalf("Execute failure = %+v, want upstream_timeout %q", cf, tc.want)
			}
		})
	}

	// A Tier B call has no composition deadline: its own timeout.
	ep := buildEndpoint(t, endpointDoc("FETCH", "/alpha", "GET", "/stall", "  timeout_seconds: 0.1\n"), up)
	if _, f := ep.InvokeValidated(context.WithoutCancel(context.Background()), map[string]any{}); f == nil || f.Code != ErrUpstreamTimeout || f.Explanation != "upstream up did not answer within 100ms" {
		t.Fatalf("Tier B failure = %+v, want upstream_timeout naming the 100ms call timeout", f)
	}
}

func TestBuildRecipeRefusals(t *testing.T) {
	up := newUpstream(t, "http://127.0.0.1:1")
	ep := endpointDoc("FETCH", "/alpha", "GET", "/a", "")
	tests := []struct {
		name, recipe, want string
	}{
		{"unknown endpoint", recipeHead + "steps:\n  - {name: a, method: FETCH, path: /nope, input: '{}'}\noutput: '$a'\n", "not a registered Tier B endpoint"},
		{"forward reference", recipeHead + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '$b'}\n  - {name: b, method: FETCH, path: /alpha, input: '{}'}\noutput: '$a'\n", "earlier steps only"},
		{"missing composition_failed", strings.Replace(recipeHead, "errors: [composition_failed]", "errors: [other]", 1) + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{}'}\noutput: '$a'\n", "composition_failed"},
		{"bad jq", recipeHead + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{'}\noutput: '$a'\n", "jq expression"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := schema.Parse("recipe.yaml", []byte(ep), schema.KindEndpoint)
			if err != nil {
				t.Fatal(err)
			}
			e, err := BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
			if err != nil {
				t.Fatal(err)
			}
			rdoc, err := schema.Parse("recipe.yaml", []byte(tc.recipe), schema.KindRecipe)
			if err == nil {
				_, err = BuildRecipe(rdoc, methodPolicy(), func(m, p string) (*Endpoint, bool) {
					return e, m == e.Method && p == e.Path
				})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestContractHashIsJCSOfEndpointAndLineage(t *testing.T) {
	ep := map[string]any{"path": "/room", "method": "BOOK", "semantic": map[string]any{"confidence": 0.5, "actor": "agent"}}
	got, err := ContractHash(ep, &Lineage{RecipeName: "book-room", RecipeVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	// The RFC 8785 form written out by hand: keys sorted, no whitespace.
	canon := `{"endpoint":{"method":"BOOK","path":"/room","semantic":{"actor":"agent","confidence":0.5}},"recipe_lineage":{"recipe_name":"book-room","recipe_version":"1"}}`
	sum := sha256.Sum256([]byte(canon))
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("ContractHash = %s, want %s", got, want)
	}
	passthrough, _ := ContractHash(ep, nil)
	sum = sha256.Sum256([]byte(`{"endpoint":{"method":"BOOK","path":"/room","semantic":{"actor":"agent","confidence":0.5}},"recipe_lineage":null}`))
	if passthrough != hex.EncodeToString(sum[:]) {
		t.Fatalf("passthrough hash = %s", passthrough)
	}
}

func TestStoreLifecycle(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := NewStore(StoreLimits{MaxPerAgent: 2, TombstoneTTL: time.Hour}, clock)
	mk := func(agent string) *Contract {
		return &Contract{SynthesisID: NewSynthesisID(), Method: "BOOK", Path: "/room", OriginatingAgentID: agent, IssuedAt: now, ExpiresAt: now.Add(time.Minute)}
	}
	pending := mk("a")
	if err := s.Put(pending, StatePending); err != nil {
		t.Fatal(err)
	}
	if s.ActiveFor("a", "BOOK", "/room") != nil {
		t.Fatal("a pending contract resolved by pair")
	}
	if !s.Activate(pending) || s.ActiveFor("a", "BOOK", "/room") != pending {
		t.Fatal("accepted contract does not resolve by pair")
	}
	if s.ActiveFor("b", "BOOK", "/room") != nil {
		t.Fatal("another agent resolved a's contract")
	}
	second := mk("a")
	if err := s.Put(second, StateActive); err != nil {
		t.Fatal(err)
	}
	if s.ActiveFor("a", "BOOK", "/room") != second {
		t.Fatal("the most recent contract does not serve the pair")
	}
	var le *LimitError
	if err := s.Put(mk("a"), StateActive); !errors.As(err, &le) || !errors.Is(err, ErrAgentFull) || le.Held != 2 || le.Limit != 2 {
		t.Fatalf("third contract err = %v, want ErrAgentFull holding 2 of 2", err)
	}
	if err := s.Put(mk("b"), StateActive); err != nil {
		t.Fatalf("another agent refused: %v", err)
	}
	s.End(second.SynthesisID, StateReleased)
	if _, res := s.Lookup(second.SynthesisID); res != LookupUnknown {
		t.Fatalf("released lookup = %d, want unknown", res)
	}
	s.End(pending.SynthesisID, StateRevoked)
	if _, res := s.Lookup(pending.SynthesisID); res != LookupRevoked {
		t.Fatalf("revoked lookup = %d, want revoked", res)
	}
	late := mk("c")
	if err := s.Put(late, StateActive); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, res := s.Lookup(late.SynthesisID); res != LookupRevoked {
		t.Fatalf("expired lookup = %d, want revoked (464)", res)
	}
	now = now.Add(2 * time.Hour)
	if _, res := s.Lookup(late.SynthesisID); res != LookupUnknown {
		t.Fatalf("lookup after tombstone TTL = %d, want unknown (404)", res)
	}
	if _, res := s.Lookup("syn-never"); res != LookupUnknown {
		t.Fatal("unknown id found")
	}
}

func TestSynthesisIDs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewSynthesisID()
		if !ValidSynthesisID(id) || !strings.HasPrefix(id, "syn-") || len(id) != 26 {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "a b", "x/y", strings.Repeat("a", 129), "é"} {
		if ValidSynthesisID(bad) {
			t.Errorf("ValidSynthesisID(%q) = true", bad)
		}
	}
	_ = json.Valid
}

// TestStoreSweepEvictsInExpiryOrder: the sweep evicts exactly the expired
// contracts (from the expiry heap), leaves live ones, and an ended
// contract's heap entry is dropped without touching its tombstone.
func TestStoreSweepEvictsInExpiryOrder(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewStore(StoreLimits{TombstoneTTL: time.Hour}, func() time.Time { return now })
	var cs []*Contract
	for i, ttl := range []time.Duration{3 * time.Minute, time.Minute, 2 * time.Minute, 10 * time.Minute} {
		c := &Contract{SynthesisID: fmt.Sprintf("syn-%d", i), Method: "BOOK", Path: "/room", OriginatingAgentID: "a",
			IssuedAt: now, ExpiresAt: now.Add(ttl)}
		if err := s.Put(c, StateActive); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	s.End(cs[2].SynthesisID, StateReleased) // ended before it would expire
	now = now.Add(150 * time.Second)        // cs[1] expired; cs[2] was released
	var live []string
	for _, c := range s.List("") {
		live = append(live, c.SynthesisID)
	}
	if fmt.Sprint(live) != "[syn-0 syn-3]" {
		t.Fatalf("live after sweep = %v, want [syn-0 syn-3]", live)
	}
	if _, res := s.Lookup("syn-1"); res != LookupRevoked {
		t.Fatalf("expired contract lookup = %d, want revoked", res)
	}
	if _, res := s.Lookup("syn-2"); res != LookupUnknown {
		t.Fatalf("released contract lookup = %d, want unknown", res)
	}
}

// TestValidSynthesisIDMatchesPattern holds the byte loop equal to the
// grammar's regexp for every byte and for the length bounds.
func TestValidSynthesisIDMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)
	for c := 0; c < 256; c++ {
		s := "syn-" + string([]byte{byte(c)})
		if got, want := ValidSynthesisID(s), re.MatchString(s); got != want {
			t.Errorf("ValidSynthesisID(%q) = %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"", "a", strings.Repeat("a", 128), strings.Repeat("a", 129), "syn-UAnHZX7sOG7zkqfyKqWafw", "syn é"} {
		if got, want := ValidSynthesisID(s), re.MatchString(s); got != want {
			t.Errorf("ValidSynthesisID(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestUpstreamRequestURL: the base path joins the escaped endpoint path
// once (no double slash, escapes kept), the query follows.
func TestUpstreamRequestURL(t *testing.T) {
	for _, tc := range []struct{ base, path, query, want string }{
		{"http://127.0.0.1:8080", "/items/1", "", "http://127.0.0.1:8080/items/1"},
		{"http://127.0.0.1:8080/api/", "/items/a%2Fb", "q=x+y", "http://127.0.0.1:8080/api/items/a%2Fb?q=x+y"},
		{"https://svc.example/v1", "/r%C3%A9servations", "", "https://svc.example/v1/r%C3%A9servations"},
	} {
		up, err := NewUpstream("u", tc.base, UpstreamOptions{})
		if err != nil {
			t.Fatalf("NewUpstream(%s): %v", tc.base, err)
		}
		u, err := up.requestURL(tc.path, tc.query)
		if err != nil {
			t.Fatalf("requestURL(%s, %s): %v", tc.path, tc.query, err)
		}
		if got := u.String(); got != tc.want {
			t.Errorf("requestURL(%s + %s, %s) = %s, want %s", tc.base, tc.path, tc.query, got, tc.want)
		}
	}
}

// TestDecodeUpstream: upstream bodies read as encoding/json read them
// (duplicate keys keep the last value, invalid UTF-8 becomes U+FFFD), while
// bodies that are not one JSON value still fail.
func TestDecodeUpstream(t *testing.T) {
	v, err := decodeUpstream([]byte(`{"id":"1","id":"2","n":1.5}`))
	if err != nil {
		t.Fatalf("duplicate keys: %v", err)
	}
	if m := v.(map[string]any); m["id"] != "2" || m["n"] != 1.5 {
		t.Fatalf("duplicate keys decoded as %v, want the last id and n=1.5", m)
	}
	v, err = decodeUpstream([]byte("{\"name\":\"caf\xe9\"}"))
	if err != nil {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	if got := v.(map[string]any)["name"]; got != "caf\uFFFD" {
		t.Fatalf("invalid UTF-8 decoded as %q", got)
	}
	for _, bad := range []string{`{"a":1} {"b":2}`, `{"a":`, `nope`, `{"a":1e400}`} {
		if _, err := decodeUpstream([]byte(bad)); err == nil {
			t.Errorf("decodeUpstream(%s) = nil error, want one", bad)
		}
	}
}

// TestEndpointTimeoutBounds: timeout_seconds becomes the call's
// timeout within MinCallTimeout to MaxCallTimeout; outside it the load
// fails naming the endpoint and the field, by the schema or, for a
// document that skipped it, by BuildEndpoint before any conversion (1e12
// seconds overflowed time.Duration to a negative timeout; 1e-10 became 0).
func TestEndpointTimeoutBounds(t *testing.T) {
	up := newUpstream(t, "http://127.0.0.1:1")
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{{"0.001", time.Millisecond}, {"0.25", 250 * time.Millisecond}, {"3600", time.Hour}} {
		ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "GET", "/x", "  timeout_seconds: "+tc.value+"\n"), up)
		if ep.svc.timeout != tc.want {
			t.Errorf("timeout_seconds %s: timeout = %v, want %v", tc.value, ep.svc.timeout, tc.want)
		}
	}
	if ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "GET", "/x", ""), up); ep.svc.timeout != up.Timeout {
		t.Errorf("no timeout_seconds: timeout = %v, want the upstream's %v", ep.svc.timeout, up.Timeout)
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if d, err := timeoutFromSeconds(v); err == nil {
			t.Errorf("timeoutFromSeconds(%v) = %v, want an error", v, d)
		}
	}
	for _, v := range []float64{1e12, 3600.001, 1e-10, 0.0009, -1} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			src := endpointDoc("FETCH", "/things", "GET", "/x", fmt.Sprintf("  timeout_seconds: %g\n", v))
			_, err := schema.Parse("bad.yaml", []byte(src), schema.KindEndpoint)
			if err == nil || !strings.Contains(err.Error(), "bad.yaml:") || !strings.Contains(err.Error(), "/external_service/timeout_seconds") {
				t.Errorf("Parse err = %v, want it to name the file and /external_service/timeout_seconds", err)
			}
			// The same document with the schema check bypassed: BuildEndpoint
			// refuses it by itself.
			doc, err := schema.Parse("bad.yaml", []byte(endpointDoc("FETCH", "/things", "GET", "/x", "  timeout_seconds: 1\n")), schema.KindEndpoint)
			if err != nil {
				t.Fatal(err)
			}
			doc.Value.(map[string]any)["external_service"].(map[string]any)["timeout_seconds"] = v
			ep, err := BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
			if err == nil {
				t.Fatalf("BuildEndpoint accepted timeout_seconds %v (timeout %v)", v, ep.svc.timeout)
			}
			for _, want := range []string{"bad.yaml", "/external_service/timeout_seconds", "endpoint FETCH /things", "outside the allowed range 0.001 to 3600"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to mention %q", err, want)
				}
			}
		})
	}
}

// TestNewUpstreamTimeoutBounds: an upstream's default per-call timeout is
// held to the same MinCallTimeout to MaxCallTimeout range as
// timeout_seconds; zero means 30 s.
func TestNewUpstreamTimeoutBounds(t *testing.T) {
	if MinCallTimeout.Seconds() != schema.MinTimeoutSeconds || MaxCallTimeout.Seconds() != schema.MaxTimeoutSeconds {
		t.Fatalf("MinCallTimeout/MaxCallTimeout = %v/%v, want schema's %v s/%v s", MinCallTimeout, MaxCallTimeout, schema.MinTimeoutSeconds, schema.MaxTimeoutSeconds)
	}
	for _, tc := range []struct {
		timeout, want time.Duration
		ok            bool
	}{
		{0, 30 * time.Second, true},
		{time.Millisecond, time.Millisecond, true},
		{time.Hour, time.Hour, true},
		{time.Hour + time.Nanosecond, 0, false},
		{999 * time.Microsecond, 0, false},
	} {
		up, err := NewUpstream("u", "http://127.0.0.1:1", UpstreamOptions{Timeout: tc.timeout})
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), `upstream "u": timeout`) || !strings.Contains(err.Error(), "1ms to 1h0m0s") {
				t.Errorf("NewUpstream(timeout %v) err = %v, want the upstream, the knob and the range named", tc.timeout, err)
			}
			continue
		}
		if err != nil || up.Timeout != tc.want {
			t.Errorf("NewUpstream(timeout %v) = %v, %v, want timeout %v", tc.timeout, up, err, tc.want)
		}
	}
}

// TestInvokePathSegmentValues: a path parameter value that cannot be a
// segment is the caller's invalid-input, explained by the input field
// without revealing the upstream path.
func TestInvokePathSegmentValues(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "GET", "/secret-backend/{id}", ""), newUpstream(t, srv.URL))
	for _, id := range []string{"", ".", ".."} {
		_, f := ep.Invoke(context.Background(), map[string]any{"id": id})
		if f == nil || f.Code != ErrInvalidInput || !f.SideEffectFree || f.Sent || !strings.Contains(f.Explanation, `input field "id"`) || strings.Contains(f.Explanation, "secret-backend") {
			t.Errorf("id %q: failure = %+v, want a side-effect-free invalid-input naming the field, not the upstream path", id, f)
		}
	}
	if _, f := ep.Invoke(context.Background(), map[string]any{}); f == nil || f.Code != ErrInvalidInput || !strings.Contains(f.Explanation, "id") {
		t.Errorf("missing id: failure = %+v, want invalid-input from input_schema.required", f)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("upstream called %d times", n)
	}
}

// runaway is a jq expression that runs for hours unless its context
// stops it (constant memory: a reduction, not an array).
const runaway = `(reduce range(1e12) as $i (0; . + 1))`

// TestMappingDeadlineIsATimeout: a jq mapping stopped by the
// composition deadline (a step's input mapping, the output mapping) or
// by the call's timeout (an endpoint's query or body) fails as
// upstream_timeout, never as invalid-input, which blames the caller,
// and stops there: the upstream is not called.
func TestMappingDeadlineIsATimeout(t *testing.T) {
	var calls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Store(r.URL.Path, true)
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	eps := []string{
		endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
		endpointDoc("FETCH", "/beta", "GET", "/b", ""),
	}
	within := func(t *testing.T, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("a runaway mapping ran past its 200ms deadline for 15 s")
		}
	}
	plans := []struct {
		name, steps, output string
		failedStep          string // "": the output mapping
	}{
		{"one-step input mapping", "  - {name: only, method: FETCH, path: /beta, input: '" + runaway + " as $n | {}'}\n", "'$only'", "only"},
		{"parallel step input mapping", "  - {name: a, method: FETCH, path: /alpha, input: '{}'}\n  - {name: b, method: FETCH, path: /beta, input: '" + runaway + " as $n | {}'}\n", "'$a'", "b"},
		{"multi-step output mapping", "  - {name: a, method: FETCH, path: /alpha, input: '{}'}\n  - {name: b, method: FETCH, path: /alpha, input: '{}'}\n", "'{n: " + runaway + "}'", ""},
	}
	for _, tc := range plans {
		t.Run(tc.name, func(t *testing.T) {
			calls.Delete("/b")
			r, _ := buildSet(t, up, recipeHead+"steps:\n"+tc.steps+"output: "+tc.output+"\n", eps...)
			var reports []StepReport
			var cf *CompositionFailure
			within(t, func() { _, reports, cf = r.Execute(context.Background(), map[string]any{}, 200*time.Millisecond) })
			if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || !strings.Contains(cf.Cause.Explanation, "composition deadline passed during") {
				t.Fatalf("Execute failure = %+v, want upstream_timeout: composition deadline passed during …", cf)
			}
			if tc.failedStep == "" {
				if cf.FailedStep != nil || cf.Details()["underlying"] != ErrUpstreamTimeout {
					t.Fatalf("failed step %v, details %v, want the output mapping's upstream_timeout", cf.FailedStep, cf.Details())
				}
				return
			}
			if cf.FailedStep == nil || cf.FailedStep.Name != tc.failedStep {
				t.Fatalf("failed step = %v, want %s", cf.FailedStep, tc.failedStep)
			}
			rep := reports[cf.FailedStep.Index]
			if rep.State != StepFailed || rep.Error != ErrUpstreamTimeout || rep.Called {
				t.Fatalf("step report = %+v, want failed with upstream_timeout, not called", rep)
			}
			if _, called := calls.Load("/b"); called {
				t.Fatal("the step's upstream was called after its mapping ran out of time")
			}
		})
	}
	for _, field := range []string{"query: {q: '" + runaway + "'}", "body: '" + runaway + "'"} {
		t.Run("endpoint "+field[:strings.Index(field, ":")], func(t *testing.T) {
			calls.Delete("/slow-mapping")
			ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "POST", "/slow-mapping", "  timeout_seconds: 0.2\n  "+field+"\n"), up)
			var f *Failure
			within(t, func() { _, f = ep.Invoke(context.Background(), map[string]any{}) })
			if f == nil || f.Code != ErrUpstreamTimeout || !f.SideEffectFree || f.Sent || !strings.Contains(f.Explanation, "did not finish within 200ms") {
				t.Fatalf("Invoke failure = %+v, want a side-effect-free upstream_timeout naming the 200ms timeout", f)
			}
			if _, has := f.Details["upstream_status"]; has || f.Details["upstream"] != "up" {
				t.Fatalf("details = %v, want upstream up and no upstream_status", f.Details)
			}
			if _, called := calls.Load("/slow-mapping"); called {
				t.Fatal("the upstream was called after the mapping ran out of time")
			}
		})
	}
}

func TestObjectKeys(t *testing.T) {
	tests := []struct {
		src  string
		want []string // nil: not a static-key object
	}{
		{`{}`, []string{}},
		{`{a: 1, "b": $input.x, c, $input}`, []string{"a", "b", "c", "input"}},
		{`{id: ($input.id | tostring)}`, []string{"id"}},
		{`{$input: 1}`, nil},
		{`{(.k): 1}`, nil},
		{`{"\(.k)": 1}`, nil},
		{`{a: 1} | .`, nil},
		{`{a: 1} + {b: 2}`, nil},
		{`{a: {b: 1}}.a`, nil},
		{`$input`, nil},
		{`def f: {}; f`, nil},
	}
	for _, tc := range tests {
		got, ok := objectKeys(tc.src)
		if ok != (tc.want != nil) || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("objectKeys(%s) = %v, %v; want %v", tc.src, got, ok, tc.want)
		}
	}
}

// TestBuildRecipeChecksStepKeys: a step input mapping that builds an
// object with static keys is held to the step endpoint's input_schema
// at load; a key it does not declare, or a required key left out, would
// fail every call with an invalid-input that blames the agent.
func TestBuildRecipeChecksStepKeys(t *testing.T) {
	up := newUpstream(t, "http://127.0.0.1:1")
	eps := []string{
		endpointDoc("FETCH", "/alpha", "GET", "/a/{id}", ""), // requires id
		strings.Replace(endpointDoc("FETCH", "/beta", "GET", "/b", ""), "properties:", "patternProperties: {'^x_': {}}\n  properties:", 1),
	}
	tests := []struct {
		name, input, want string // want "": loads
	}{
		{"all keys declared, required given", `{id: $input.id, name: "n"}`, ""},
		{"unknown key", `{id: $input.id, bogus: 1}`, `at /steps/0/input: step "a": input key "bogus" is not a property of the input_schema of FETCH /alpha`},
		{"required key missing", `{name: $input.id}`, `at /steps/0/input: step "a": input has no key "id", which the input_schema of FETCH /alpha requires`},
		{"computed keys are checked at run time", `$input | {bogus: .id}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := recipeHead + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '" + tc.input + "'}\noutput: '$a'\n"
			err := tryBuildRecipe(t, up, src, eps...)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("BuildRecipe: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "recipe.yaml:") {
				t.Fatalf("err = %v, want it to name recipe.yaml and mention %q", err, tc.want)
			}
		})
	}
	// patternProperties admit keys the check cannot decide: not refused.
	src := recipeHead + "steps:\n  - {name: b, method: FETCH, path: /beta, input: '{x_any: 1}'}\noutput: '$b'\n"
	if err := tryBuildRecipe(t, up, src, eps...); err != nil {
		t.Fatalf("patternProperties endpoint: %v", err)
	}
}

// tryBuildRecipe builds the endpoints and returns BuildRecipe's error.
func tryBuildRecipe(t *testing.T, up *Upstream, recipe string, endpoints ...string) error {
	t.Helper()
	eps := map[string]*Endpoint{}
	for _, src := range endpoints {
		e := buildEndpoint(t, src, up)
		eps[e.Method+" "+e.Path] = e
	}
	doc, err := schema.Parse("recipe.yaml", []byte(recipe), schema.KindRecipe)
	if err != nil {
		return err
	}
	_, err = BuildRecipe(doc, methodPolicy(), func(m, p string) (*Endpoint, bool) { e, ok := eps[m+" "+p]; return e, ok })
	return err
}

// TestMappingErrorsKeepExpressionsInternal: a jq mapping that fails on
// the caller's input (an endpoint's query or body, a step's input, a
// recipe's output) is explained in the agent's terms — which mapping
// failed — never with the operator's expression or gojq's own text,
// which go to Failure.Internal for the logs. The message of an
// error("…") the expression raises is the operator's word to callers
// and is passed on.
func TestMappingErrorsKeepExpressionsInternal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	const secret = "SECRET_MARKER"
	raises := `if .name=="bad" then error("boom") else "` + secret + `" end`
	typeErr := `if .name=="bad" then (.name | .x) else "` + secret + `" end` // gojq: expected an object but got: string
	check := func(t *testing.T, f *Failure, code, want, raised string) {
		t.Helper()
		if f == nil || f.Code != code {
			t.Fatalf("failure = %+v, want %s", f, code)
		}
		for _, leak := range []string{secret, "jq", "expected an object", "if .name"} {
			if strings.Contains(f.Explanation, leak) {
				t.Errorf("explanation %q leaks %q", f.Explanation, leak)
			}
		}
		if !strings.Contains(f.Explanation, want) {
			t.Errorf("explanation %q does not say %q", f.Explanation, want)
		}
		if raised != "" && !strings.HasSuffix(f.Explanation, ": "+raised) {
			t.Errorf("explanation %q does not pass on the raised message %q", f.Explanation, raised)
		}
		if raised == "" && strings.Contains(f.Explanation, ": ") {
			t.Errorf("explanation %q carries more than which mapping failed", f.Explanation)
		}
		if f.Internal == nil || !strings.Contains(f.Internal.Error(), secret) {
			t.Errorf("Internal = %v, want the jq error with the expression, for the logs", f.Internal)
		}
	}
	for _, tc := range []struct{ name, extra, want string }{
		{"query", "  query: {x: '%s'}\n", "the query mapping for this endpoint failed on the given input"},
		{"body", "  body: '{x: (%s)}'\n", "the body mapping for this endpoint failed on the given input"},
	} {
		for _, expr := range []struct{ src, raised string }{{raises, "boom"}, {typeErr, ""}} {
			t.Run(tc.name+" "+expr.raised, func(t *testing.T) {
				ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "POST", "/x", fmt.Sprintf(tc.extra, expr.src)), up)
				if _, f := ep.Invoke(context.Background(), map[string]any{"name": "good"}); f != nil {
					t.Fatalf("good input: %+v", f)
				}
				_, f := ep.Invoke(context.Background(), map[string]any{"name": "bad"})
				check(t, f, ErrInvalidInput, tc.want, expr.raised)
				if !f.SideEffectFree || f.Sent {
					t.Errorf("failure = %+v, want side-effect-free and not sent", f)
				}
			})
		}
	}
	eps := []string{endpointDoc("FETCH", "/alpha", "GET", "/a", "")}
	for _, expr := range []struct{ src, raised string }{{raises, "boom"}, {typeErr, ""}} {
		t.Run("step input "+expr.raised, func(t *testing.T) {
			r, _ := buildSet(t, up, recipeHead+"steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{name: ($input | "+expr.src+")}'}\noutput: '$a'\n", eps...)
			_, _, cf := r.Execute(context.Background(), map[string]any{"name": "bad"}, 5*time.Second)
			if cf == nil {
				t.Fatal("Execute succeeded")
			}
			check(t, cf.Cause, ErrInvalidInput, "the input mapping for step a failed on the given input", expr.raised)
		})
		t.Run("output "+expr.raised, func(t *testing.T) {
			r, _ := buildSet(t, up, recipeHead+"steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{}'}\noutput: '{v: ($input | "+expr.src+")}'\n", eps...)
			_, _, cf := r.Execute(context.Background(), map[string]any{"name": "bad"}, 5*time.Second)
			if cf == nil {
				t.Fatal("Execute succeeded")
			}
			check(t, cf.Cause, ErrCompositionFailed, "the recipe's output mapping failed", expr.raised)
		})
	}
}

// TestNewUpstreamName: an upstream name must match the pattern of an
// endpoint's external_service.upstream, or no endpoint could name it.
func TestNewUpstreamName(t *testing.T) {
	for name, ok := range map[string]bool{"hotel": true, "hotel-api.v2_1": true, "": false, "a b": false, "a\tb": false, "{a}": false, "a}": false} {
		up, err := NewUpstream(name, "http://127.0.0.1:1", UpstreamOptions{})
		if ok != (err == nil) {
			t.Errorf("NewUpstream(%q) err = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "the name must match "+schema.UpstreamNamePattern()) {
			t.Errorf("NewUpstream(%q) err = %v, want it to give the pattern", name, err)
		}
		if up != nil {
			up.Close()
		}
		if _, perr := schema.Parse("ep.yaml", []byte(strings.Replace(endpointDoc("FETCH", "/x", "GET", "/x", ""), "upstream: up", "upstream: "+strconv.Quote(name), 1)), schema.KindEndpoint); ok != (perr == nil) {
			t.Errorf("an endpoint naming upstream %q: err = %v, want ok=%v (the same rule)", name, perr, ok)
		}
	}
}

// TestInvoke204ValidatedAsNull: a 204 No Content is null to the
// endpoint's output_schema (spec §7.1: output validation still runs). It
// used to pass whatever the schema said, so an agent got "result": null
// from an endpoint whose manifest promised an object.
func TestInvoke204ValidatedAsNull(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	for _, tc := range []struct {
		schema string
		ok     bool
	}{
		{"{type: object}", false},
		{"{type: object, required: [id]}", false},
		{"{type: [object, \"null\"]}", true},
		{"{}", true},
	} {
		doc := strings.Replace(endpointDoc("REMOVE", "/things", "DELETE", "/things", ""), "output_schema: {type: object}", "output_schema: "+tc.schema, 1)
		ep := buildEndpoint(t, doc, up)
		out, f := ep.Invoke(context.Background(), map[string]any{})
		if tc.ok {
			if f != nil || out != nil {
				t.Errorf("output_schema %s: Invoke = %v, %v; want nil output", tc.schema, out, f)
			}
			continue
		}
		if f == nil || f.Code != ErrUpstreamMalformed || !strings.Contains(f.Explanation, "204 No Content") {
			t.Errorf("output_schema %s: Invoke failure %+v; want %s naming the 204", tc.schema, f, ErrUpstreamMalformed)
		}
	}
}

// TestValidTraceParent follows W3C Trace Context §3.2: only a well-formed
// traceparent is forwarded upstream.
func TestValidTraceParent(t *testing.T) {
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		tp   string
		want bool
	}{
		{ok, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", true}, // a later version may extend (§3.2.4)
		{"", false},
		{"garbage value <script>", false},
		{ok + "-x", false}, // version 00 is exactly 55 bytes
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", MaxTraceParentBytes), false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a b", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false}, // lowercase hex only
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", false},
	} {
		if got := ValidTraceParent(tt.tp); got != tt.want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", tt.tp, got, tt.want)
		}
		if got := TraceParent(WithTraceParent(context.Background(), tt.tp)) != ""; got != tt.want {
			t.Errorf("WithTraceParent(%q) carried it: %v, want %v", tt.tp, got, tt.want)
		}
	}
}

// TestFailureState: after the plan was cancelled, a failure the
// upstream answered is the step's own; one without an answer is the
// cancellation's.
func TestFailureState(t *testing.T) {
	for _, tt := range []struct {
		afterCancel bool
		status      int
		want        string
	}{
		{false, 0, StepFailed},
		{false, 404, StepFailed},
		{true, 404, StepFailed},
		{true, 0, StepCancelled},
	} {
		if got := failureState(tt.afterCancel, &Failure{UpstreamStatus: tt.status}); got != tt.want {
			t.Errorf("failureState(%v, status %d) = %s, want %s", tt.afterCancel, tt.status, got, tt.want)
		}
	}
}

// TestExecuteSimultaneousFailures: two parallel steps whose upstream
// answers 404 at the same moment. Which answer the plan reads first is
// up to the scheduler, and the other call may be cut before its answer
// is read; whatever happens, the step reported is the first failed one
// in declared order, every failed step carries its upstream error, and
// a cancelled one was called and carries none.
func TestExecuteSimultaneousFailures(t *testing.T) {
	for run := range 10 {
		release := make(chan struct{})
		var mu sync.Mutex
		waiting := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if waiting++; waiting == 2 {
				close(release)
			}
			mu.Unlock()
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			w.WriteHeader(404)
		}))
		up := newUpstream(t, srv.URL)
		recipe := recipeHead + `steps:
  - {name: a, method: FETCH, path: /alpha, input: '{}'}
  - {name: b, method: FETCH, path: /beta, input: '{}'}
output: '{a: $a, b: $b}'
`
		r, _ := buildSet(t, up, recipe,
			endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
			endpointDoc("FETCH", "/beta", "GET", "/b", ""))
		_, reports, cf := r.Execute(context.Background(), map[string]any{}, 10*time.Second)
		srv.Close()
		if cf == nil || cf.FailedStep == nil {
			t.Fatalf("run %d: failure %v, want a failed step", run, cf)
		}
		firstFailed := ""
		for _, rep := range reports {
			switch {
			case rep.State == StepFailed && rep.Error == ErrUpstream && rep.Called:
				if firstFailed == "" {
					firstFailed = rep.Name
				}
			case rep.State == StepCancelled && rep.Error == "" && rep.Called:
			default:
				t.Fatalf("run %d: step %s state %s error %q called %v", run, rep.Name, rep.State, rep.Error, rep.Called)
			}
		}
		if cf.FailedStep.Name != firstFailed {
			t.Fatalf("run %d: failed step %s, want %s (the first failed in declared order; states %s %s)", run, cf.FailedStep.Name, firstFailed, reports[0].State, reports[1].State)
		}
	}
}
