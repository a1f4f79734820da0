package recipes

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

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
		{"unknown upstream", strings.Replace(endpointDoc("FETCH", "/things", "GET", "/x", ""), "upstream: up", "upstream: nope", 1), `unknown upstream "nope" (declared in the Caddyfile: up)`},
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
	// No upstream declared at all: the error says so rather than
	// listing none.
	t.Run("no upstream declared", func(t *testing.T) {
		doc, err := schema.Parse("bad.yaml", []byte(endpointDoc("FETCH", "/things", "GET", "/x", "")), schema.KindEndpoint)
		if err == nil {
			_, err = BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{})
		}
		if want := `unknown upstream "up" (the Caddyfile declares no upstream)`; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to say %q", err, want)
		}
	})
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

// TestEndpointHeaderValueRefused: a configured upstream header whose
// value (literal, or once ${VAR} is resolved) carries CR, LF or another
// control character fails the load naming the file, the endpoint and
// the header, without quoting the value (it may be a secret); every
// call would otherwise fail at the transport. A tab is allowed.
func TestEndpointHeaderValueRefused(t *testing.T) {
	up := newUpstream(t, "http://127.0.0.1:1")
	t.Setenv("RCNS_TEST_BAD", "k1\r\nX-Evil: 1")
	t.Setenv("RCNS_TEST_CTL", "k\x01")
	for _, tc := range []struct{ value, from string }{
		{`"${RCNS_TEST_BAD}"`, " once its ${VAR} references are resolved"},
		{`"pre-${RCNS_TEST_CTL}"`, " once its ${VAR} references are resolved"},
		{`"a\r\nX-Evil: 1"`, ""},
		{`"bell\u0007"`, ""},
		{`"del\u007f"`, ""},
	} {
		doc, err := schema.Parse("bad.yaml", []byte(endpointDoc("FETCH", "/things", "GET", "/x", "  headers: {X-Key: "+tc.value+"}\n")), schema.KindEndpoint)
		if err != nil {
			t.Fatal(err)
		}
		_, err = BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
		if err == nil {
			t.Fatalf("header value %s accepted", tc.value)
		}
		for _, want := range []string{"bad.yaml", "/external_service/headers/X-Key", "the value of header X-Key" + tc.from + " carries a control character"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("value %s: err = %v, want it to mention %q", tc.value, err, want)
			}
		}
		if strings.Contains(err.Error(), "Evil") || strings.Contains(err.Error(), "k1") {
			t.Errorf("err = %v quotes the value", err)
		}
	}
	ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "GET", "/x", "  headers: {X-Key: \"a\\tb c\"}\n"), up)
	if ep.svc.headers.Get("X-Key") != "a\tb c" {
		t.Errorf("a tab and a space: header %q", ep.svc.headers.Get("X-Key"))
	}
}

// TestInvokeCredentials: a credential in the context (WithCredentials)
// is set over the endpoint's static headers of the same name, only on
// the endpoint it is for, and never leaks into the next plain call (the
// shared header is not written); its kind is what CredentialKind says.
func TestInvokeCredentials(t *testing.T) {
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
	other := buildEndpoint(t, endpointDoc("FETCH", "/others/{id}", "GET", "/others/{id}", extra), up)
	creds := Credentials{get: {Header: http.Header{"Authorization": {"Bearer agent-a"}, "X-Api-Key": {"per-agent"}}, Kind: "per_agent"}}
	ctx := WithCredentials(context.Background(), creds)
	in := map[string]any{"id": "1"}
	for i, c := range []struct {
		ep        *Endpoint
		ctx       context.Context
		auth, key string
	}{
		{get, ctx, "Bearer agent-a", "per-agent"},
		{other, ctx, "", "s3cret"}, // no credential for this endpoint: its static headers
		{get, context.Background(), "", "s3cret"},
	} {
		if _, f := c.ep.Invoke(c.ctx, in); f != nil {
			t.Fatalf("call %d: %v", i, f)
		}
		if h := got[i]; h.Get("Authorization") != c.auth || h.Get("X-Api-Key") != c.key || len(h.Values("X-Api-Key")) != 1 {
			t.Errorf("call %d: Authorization %q, X-Api-Key %q, want %q, %q", i, h.Get("Authorization"), h.Values("X-Api-Key"), c.auth, c.key)
		}
	}
	if n := len(get.svc.plainHeader); n != 2 {
		t.Errorf("shared header has %d fields after the calls, want 2: %v", n, get.svc.plainHeader)
	}
	if CredentialKind(ctx, get) != "per_agent" || CredentialKind(ctx, other) != "" || CredentialKind(context.Background(), get) != "" {
		t.Error("CredentialKind does not name the endpoint's credential")
	}
}

// TestClosedBeforeAnswerNotUnreachable: an upstream that read the
// request and closed the connection without answering is not called
// unreachable: the explanation says the request may have reached it
// (helper-77: a POST the upstream acted on read "cannot reach upstream").
func TestClosedBeforeAnswerNotUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf) // the request head
			c.Close()
		}
	}()
	up := newUpstream(t, "http://"+l.Addr().String())
	write := strings.Replace(endpointDoc("FETCH", "/beta", "POST", "/loans", ""), "is_idempotent: true", "is_idempotent: false", 1)
	ep := buildEndpoint(t, write, up)
	_, f := ep.InvokeValidated(context.Background(), map[string]any{})
	if f == nil || f.Code != ErrUpstreamConnection || f.SideEffectFree || !f.Sent ||
		!strings.Contains(f.Explanation, "closed the connection before answering") || strings.Contains(f.Explanation, "cannot reach") {
		t.Fatalf("%+v", f)
	}
}
