package caddymodule

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
)

// TestRepeatedQueryKeys: a query key given twice keeps its last value
// (spec §2.1, api-01 §5.5) for every reader: Tier B input, DISCOVER
// limit and cursor, anonymous DISCOVER included; "a" and "%61" are one
// key. It was 400 invalid-query for a while, against the spec.
func TestRepeatedQueryKeys(t *testing.T) {
	g := newTestGateway(t)
	for _, p := range []string{"/item/a", "/item/b", "/item/c"} {
		g.propose(t, p)
	}
	// Tier B input: the last item_id agrees with the path, the first
	// one does not.
	for _, target := range []string{"/items/1?item_id=2&item_id=1", "/items/1?item_id=2&item_%69d=1", "/items/1?%69tem_id=2&item_id=1"} {
		if a := g.do(t, "FETCH", target, nil); a.status != 200 || field(a.body, "result", "id") != "1" {
			t.Errorf("FETCH %s: %s; want 200 with the last item_id (1)", target, a)
		}
	}
	for _, target := range []string{"/items/1?item_id=1&item_id=2", "/items/1?item_id=1&item_%69d=2"} {
		wantError(t, g.do(t, "FETCH", target, nil), 400, "parameter-conflict", `"item_id" is given by the path as "1"`)
	}
	count := func(a *answer) int {
		t.Helper()
		var list []any
		if a.status != 200 || json.Unmarshal([]byte(a.raw), &list) != nil {
			t.Fatalf("answer %s; want a 200 listing", a)
		}
		return len(list)
	}
	// DISCOVER limit: the last value is read, and only it is checked.
	for target, want := range map[string]int{"/contracts?limit=5&limit=1": 1, "/contracts?limit=0&limit=2": 2, "/contracts?%6cimit=1&limit=3": 3} {
		if n := count(g.do(t, "DISCOVER", target, nil)); n != want {
			t.Errorf("DISCOVER %s listed %d; want %d", target, n, want)
		}
	}
	wantError(t, g.do(t, "DISCOVER", "/contracts?limit=2&limit=0", nil), 400, "invalid-limit", "positive integer")
	// The last query value is the one compared with the body's.
	if n := count(g.do(t, "DISCOVER", "/contracts?limit=1&limit=2", map[string]any{"parameters": map[string]any{"limit": 2}})); n != 2 {
		t.Errorf("query limit=1&limit=2 with body limit 2 listed %d; want 2", n)
	}
	wantError(t, g.do(t, "DISCOVER", "/contracts?limit=2&limit=1", map[string]any{"parameters": map[string]any{"limit": 2}}), 400, "parameter-conflict", `"limit"`)
	// DISCOVER cursor: a bad first cursor is not read.
	a := g.do(t, "DISCOVER", "/contracts?limit=2", nil)
	next := strings.TrimPrefix(strings.Split(a.header.Get("Link"), ">")[0], "<")
	cursor := next[strings.Index(next, "cursor=")+len("cursor="):]
	if n := count(g.do(t, "DISCOVER", "/contracts?cursor=bogus&cursor="+cursor, nil)); n != 1 {
		t.Errorf("cursor=bogus&cursor=<next> listed %d; want the last page (1)", n)
	}
	wantError(t, g.do(t, "DISCOVER", "/contracts?cursor="+cursor+"&cursor=bogus", nil), 400, "invalid-cursor", "not one this server issued")
	// Anonymous DISCOVER is AGTP too.
	if n := count(g.serve(t, "DISCOVER", "/methods?limit=9&limit=1", nil, nil, 0)); n != 1 {
		t.Errorf("anonymous DISCOVER /methods?limit=9&limit=1 listed %d; want 1", n)
	}
	// A malformed query is still refused.
	wantError(t, g.do(t, "DISCOVER", "/contracts?limit=1&limit=%zz", nil), 400, "invalid-query", "malformed")
	// Legacy HTTP (no Agent-ID, an IANA method) is not the gateway's.
	before := g.passed
	a = g.serve(t, "GET", "/items/1?x=1&x=2", nil, nil, 0)
	if a.status != http.StatusTeapot || g.passed != before+1 {
		t.Fatalf("legacy GET with a repeated key was not passed on: %s", a)
	}
}

// field returns the member of a decoded JSON object at the given path
// of keys (nil when absent).
func field(v any, path ...string) any {
	for _, k := range path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func TestValidName(t *testing.T) {
	for n, want := range map[string]bool{"default": true, "hotel-1.v2_x": true, "": false, ".": false, "..": false, "../../escaped": false, "a/b": false, "a b": false, strings.Repeat("a", 65): false} {
		if got := engine.ValidName(n); got != want {
			t.Errorf("engine.ValidName(%q) = %v, want %v", n, got, want)
		}
	}
}

// errAfter is a request body that yields data, then fails with err.
type errAfter struct {
	data string
	err  error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if e.data == "" {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

// TestBodyReadErrorsNameNoAddress: a body that ends early, times out or
// fails on the socket is 400 invalid-body whose explanation says which,
// never the error text: net.OpError names both socket addresses ("read
// tcp 127.0.0.1:8080->127.0.0.1:40790: i/o timeout").
func TestBodyReadErrorsNameNoAddress(t *testing.T) {
	g := newTestGateway(t)
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40790}
	opErr := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Source: local, Addr: remote, Err: err}
	}
	for _, tc := range []struct {
		name        string
		err         error
		status      int
		reason      string
		explanation string
	}{
		{"timeout", opErr(os.ErrDeadlineExceeded), 400, "invalid-body", "timed out: 14 of the 40 bytes"},
		{"ended early", io.ErrUnexpectedEOF, 400, "invalid-body", "ended early: 14 of the 40 bytes"},
		{"reset", opErr(syscall.ECONNRESET), 400, "invalid-body", "the connection failed after 14 of the 40 bytes"},
		{"request_body max_size", &http.MaxBytesError{Limit: 10}, 413, "body-too-large", "exceeds 10 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": testScope}
			a := g.serve(t, "DISCOVER", "/contracts", hdr, &errAfter{data: `{"parameters":`, err: tc.err}, 40)
			wantError(t, a, tc.status, tc.reason, tc.explanation)
			if strings.Contains(a.raw, "127.0.0.1") || strings.Contains(a.raw, "tcp") || strings.Contains(a.raw, "40790") {
				t.Fatalf("the answer carries the network error: %s", a)
			}
		})
	}

	// The same over a real socket: a server with a read timeout, a
	// client that announces 40 bytes and sends 14, then waits (timeout)
	// or closes its side (ended early).
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, benchServer)
		_ = g.h.ServeHTTP(w, r, notFound)
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	defer srv.Close()
	for _, closeWrite := range []bool{false, true} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "DISCOVER /contracts HTTP/1.1\r\nHost: 127.0.0.1\r\nAgent-ID: "+benchAgent+
			"\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"parameters\":")
		if closeWrite {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("closeWrite %v: %v", closeWrite, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = c.Close()
		want := "timed out: 14 of the 40 bytes"
		if closeWrite {
			want = "ended early: 14 of the 40 bytes"
		}
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"invalid-body"`) || !strings.Contains(string(body), want) {
			t.Fatalf("closeWrite %v: %d %s; want 400 invalid-body %q", closeWrite, resp.StatusCode, body, want)
		}
		if strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "tcp") {
			t.Fatalf("closeWrite %v: the answer names the socket: %s", closeWrite, body)
		}
	}
}

// TestSessionIDForm: a Session-ID must be able to hold 128 random bits
// (spec §3): 22-256 characters of A-Z a-z 0-9 - . _ ~ + / = :.
// Anything else is 400 invalid-session-id before it groups contracts.
func TestSessionIDForm(t *testing.T) {
	g := newTestGateway(t)
	for _, ok := range []string{
		"0123456789abcdefABCDEF",               // 22 base64url characters: 128 bits
		"7c9e6679-7425-40de-944b-e07fc1f90ae7", // a UUID
		"q83vEjRWeJ-rze8SNFZ4mg==", "urn:x:" + strings.Repeat("a", 16), "a.b_c~d+e/f=g:h-ijklmnop",
		strings.Repeat("s", 256),
	} {
		if a := g.do(t, "DISCOVER", "/contracts", nil, "Session-ID", ok); a.status != 200 {
			t.Errorf("Session-ID %q refused: %s", ok, a)
		}
	}
	for _, bad := range []string{"", "S", "sess-a1b2c3d4", strings.Repeat("s", 21), strings.Repeat("s", 257),
		"0123456789abcdef ABCDEF", "0123456789abcdef\tABCDEF", "0123456789abcdefABCDEé", "0123456789abcdef,ABCDEF", "0123456789abcdef\"ABCDEF"} {
		a := g.do(t, "DISCOVER", "/contracts", nil, "Session-ID", bad)
		wantError(t, a, 400, "invalid-session-id", "22-256 characters")
	}
}

// attributionPayload decodes the payload of an answer's
// Attribution-Record (a compact JWS).
func attributionPayload(t *testing.T, a *answer) map[string]any {
	t.Helper()
	return recordPayload(t, a.hdr("Attribution-Record"))
}

// TestAnonymousIdentifiers: a request without Agent-ID (anonymous
// DISCOVER) has its Request-ID, Session-ID and Owner-ID checked like
// any other (spec §24 item 94): it answered 200, echoed Request-ID: bad
// and put the values in its Attribution-Record. strict_identifiers
// still asks Owner-ID and Request-ID only of requests with Agent-ID.
func TestAnonymousIdentifiers(t *testing.T) {
	g := newTestGateway(t)
	for _, tc := range []struct {
		hdr          map[string]string
		reason, expl string
	}{
		{map[string]string{"Request-ID": "bad"}, "invalid-request-id", "UUIDv7 or a ULID"},
		{map[string]string{"Session-ID": "x"}, "invalid-session-id", "22-256 characters"},
		{map[string]string{"Request-ID": "bad", "Session-ID": "x"}, "invalid-request-id", ""},
		{map[string]string{"Owner-ID": "org acme"}, "invalid-owner-id", "Owner-ID is not 1 to 256"},
		{map[string]string{"Owner-ID": ""}, "invalid-owner-id", "Owner-ID is not 1 to 256"},
		// With Agent-ID too: present means checked, empty included.
		{map[string]string{"Agent-ID": benchAgent, "Owner-ID": ""}, "invalid-owner-id", "Owner-ID is not 1 to 256"},
	} {
		for _, target := range []string{"/", "/methods"} {
			a := g.serve(t, "DISCOVER", target, tc.hdr, nil, 0)
			wantError(t, a, 400, tc.reason, tc.expl)
			noMalformedIdentifiers(t, a)
		}
	}
	// Refused before the identifiers are checked (a malformed Task-ID):
	// the malformed Request-ID is still neither echoed nor recorded.
	a := g.serve(t, "DISCOVER", "/", map[string]string{"Task-ID": " ", "Request-ID": "bad", "Owner-ID": "org acme", "Session-ID": "x"}, nil, 0)
	wantError(t, a, 400, "invalid-task-id", "")
	noMalformedIdentifiers(t, a)
	// Without Agent-ID a catalog method other than DISCOVER is checked
	// the same way before it is refused for the missing Agent-ID.
	wantError(t, g.serve(t, "FETCH", "/items/1", map[string]string{"Request-ID": "bad"}, nil, 0), 400, "invalid-request-id", "")
	// Well-formed identifiers are served and recorded.
	rid, sid := "01890a5d-ac96-774b-bcce-b302099a8057", "anon-0123456789abcdefABCDEF"
	a = g.serve(t, "DISCOVER", "/methods", map[string]string{"Request-ID": rid, "Session-ID": sid, "Owner-ID": "org:acme"}, nil, 0)
	if a.status != 200 || a.hdr("Request-ID") != rid {
		t.Fatalf("anonymous DISCOVER with good identifiers: %s (Request-ID %q)", a, a.hdr("Request-ID"))
	}
	if p := attributionPayload(t, a); p["request_id"] != rid || p["session_id"] != sid || p["owner_id"] != "org:acme" {
		t.Fatalf("Attribution-Record %v; want request_id %s, session_id %s, owner_id org:acme", p, rid, sid)
	}
	// strict_identifiers: anonymous DISCOVER needs neither; a request
	// with Agent-ID needs both.
	g.h.StrictIdentifiers = true
	if a := g.serve(t, "DISCOVER", "/", nil, nil, 0); a.status != 200 {
		t.Fatalf("strict_identifiers refused anonymous DISCOVER: %s", a)
	}
	wantError(t, g.serve(t, "DISCOVER", "/", map[string]string{"Request-ID": "bad"}, nil, 0), 400, "invalid-request-id", "")
	wantError(t, g.do(t, "DISCOVER", "/methods", nil), 400, "owner-id-required", "")
}

// TestHeaderCharactersNamed: a character outside ASCII in
// Authority-Scope is named as the UTF-8 character it is ('é', U+00E9),
// never byte by byte as Latin-1 ('Ã'); a byte that is not UTF-8 is named
// as a byte.
func TestHeaderCharactersNamed(t *testing.T) {
	g := newTestGateway(t)
	for _, tc := range []struct{ scope, want string }{
		{"hotel:réad", "character 'é' (U+00E9) is not allowed"},
		{"bench:read, hotel:€", "character '€' (U+20AC) is not allowed"},
		{"hotel:r\xc3ad", "byte 0xC3 (not valid UTF-8) is not allowed"},
	} {
		a := g.do(t, "DISCOVER", "/methods", nil, "Authority-Scope", tc.scope)
		wantError(t, a, 400, "invalid-authority-scope", tc.want)
		if e := a.str("explanation"); strings.ContainsAny(e, "Ãâ") {
			t.Errorf("Authority-Scope %q: explanation %q reads a byte as a Latin-1 character", tc.scope, e)
		}
	}
}

// noMalformedIdentifiers checks that an answer to a request with a
// malformed Request-ID, Owner-ID or Session-ID does not echo it and
// that its Attribution-Record names a request id the gateway minted and
// no owner or session: the gateway signs only identifiers it accepted.
func noMalformedIdentifiers(t *testing.T, a *answer) {
	t.Helper()
	if v := a.hdr("Request-ID"); v != "" && !agtp.ValidRequestID(v) {
		t.Errorf("malformed Request-ID %q echoed: %s", v, a)
	}
	p := attributionPayload(t, a)
	if rid, _ := p["request_id"].(string); !agtp.ValidRequestID(rid) {
		t.Errorf("Attribution-Record request_id %q is not a UUIDv7 or ULID", rid)
	}
	if v, ok := p["session_id"]; ok {
		t.Errorf("Attribution-Record carries the malformed session_id %v", v)
	}
	// The owner stated, if any, is the registry owner of the recorded
	// agent (ids-02 §8.2), never the Owner-ID the request sent.
	if v, ok := p["owner_id"]; ok && (v != "bench-ops" || p["agent_id"] != benchAgent) {
		t.Errorf("Attribution-Record carries owner_id %v (agent_id %v), want none or the registry owner bench-ops of %s", v, p["agent_id"], benchAgent)
	}
	if strings.Contains(a.raw, "org acme") {
		t.Errorf("the malformed Owner-ID is echoed: %s", a)
	}
}

// TestTraceParentForwarding: a Tier B call and a contract presentation
// forward the agent's traceparent upstream only when the request has
// exactly one and it is valid (W3C Trace Context §3.2); an invalid one,
// or two, reach the upstream as none.
func TestTraceParentForwarding(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, strings.Join(r.Header.Values("Traceparent"), "|"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"name":"bench item","price":12.5}`, r.PathValue("id"))
	})
	up := loopbackServer(t, mux)
	h := benchHandler(t, up.URL, false)
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	negotiate := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true", "Content-Type": "application/json"}
	const one = `{"parameters":{"item_id":"1"}}`
	w := &discardWriter{hdr: http.Header{}}
	if err := h.ServeHTTP(w, benchRequest(w, "LOOKUP", "/item/tp-1", one, negotiate), notFound); err != nil || w.status != 263 {
		t.Fatalf("synthesis: %v, status %d: %s", err, w.status, w.head)
	}
	syn := w.hdr.Get("Contract-Synthesized")
	for _, tt := range []struct {
		name   string
		values []string
		want   string
	}{
		{"valid", []string{valid}, valid},
		{"none", nil, ""},
		{"invalid", []string{"garbage value <script>"}, ""},
		{"too long", []string{valid + "-" + strings.Repeat("a", 6000)}, ""},
		{"two", []string{valid, valid}, ""},
	} {
		for _, call := range []struct {
			method, path, body string
			hdr                map[string]string
		}{
			{"FETCH", "/items/1", "", map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"}},
			{"LOOKUP", "/item/tp-1", one, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json", "Contract-Synthesized": syn}},
		} {
			mu.Lock()
			seen = nil
			mu.Unlock()
			w := &discardWriter{hdr: http.Header{}}
			r := benchRequest(w, call.method, call.path, call.body, call.hdr)
			for _, v := range tt.values {
				r.Header.Add("Traceparent", v)
			}
			if err := h.ServeHTTP(w, r, notFound); err != nil || w.status != 200 {
				t.Fatalf("%s %s %s: %v, status %d: %s", tt.name, call.method, call.path, err, w.status, w.head)
			}
			mu.Lock()
			got := seen
			mu.Unlock()
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("%s %s %s: upstream saw traceparent %q, want [%q]", tt.name, call.method, call.path, got, tt.want)
			}
		}
	}
}

// TestRawPathCharactersRefused: a request line with a raw character
// outside the AGTP path grammar is 460 naming the segment, before any
// endpoint runs (url.URL would have handed the handler it re-escaped).
func TestRawPathCharactersRefused(t *testing.T) {
	calls := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"1","name":"bench item","price":12.5}`)
	})
	h := benchHandler(t, loopbackServer(t, mux).URL, false)
	for _, target := range []string{"/items/{id}", "/items/a|b", "/items/a^b", "/items/a%60b"} {
		w := &discardWriter{hdr: http.Header{}}
		r := benchRequest(w, "FETCH", target, "", map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"})
		if err := h.ServeHTTP(w, r, notFound); err != nil {
			t.Fatal(err)
		}
		if target == "/items/a%60b" { // the same character percent-encoded is a value
			if w.status != 200 {
				t.Errorf("%s: status %d, want 200: %s", target, w.status, w.head)
			}
			continue
		}
		var body map[string]any
		_ = json.Unmarshal(w.head, &body)
		if w.status != 460 || body["reason"] != "path-grammar-violation" || body["segment"] != strings.TrimPrefix(target, "/items/") {
			t.Errorf("%s: status %d %v, want 460 path-grammar-violation naming the segment", target, w.status, body)
		}
	}
	if calls != 1 {
		t.Errorf("upstream called %d times, want 1 (only the percent-encoded request)", calls)
	}
}
