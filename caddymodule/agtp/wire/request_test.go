package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// reqWant is what a parsed request must be.
type reqWant struct {
	method, target, path, rawQuery string
	forceQuery                     bool
	header                         http.Header // the whole map
	contentLength                  int64
	body                           string
}

// refusal is what a refused request must be.
type refusal struct {
	status int
	reason string
	proto  string // "" means Version
	// explains is a part the explanation must contain.
	explains string
}

// TestReadRequest: one row per framing case of the issue ("Must show")
// and per refusal of the package documentation.
func TestReadRequest(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, tc := range []struct {
		name string
		in   string
		lim  Limits
		want *reqWant
		err  *refusal
	}{
		{name: "two-token form means /", in: "AGTP/1.0 DISCOVER\r\n\r\n",
			want: &reqWant{method: "DISCOVER", target: "/", path: "/", header: http.Header{}}},
		{name: "query in the target", in: "AGTP/1.0 QUERY /rooms?city=Paris&n=2\r\nHost: gw.example\r\n\r\n",
			want: &reqWant{method: "QUERY", target: "/rooms?city=Paris&n=2", path: "/rooms", rawQuery: "city=Paris&n=2",
				header: http.Header{"Host": {"gw.example"}}}},
		{name: "empty query kept", in: "AGTP/1.0 QUERY /rooms?\r\n\r\n",
			want: &reqWant{method: "QUERY", target: "/rooms?", path: "/rooms", forceQuery: true, header: http.Header{}}},
		{name: "percent-encoded path", in: "AGTP/1.0 FETCH /a%2Fb/c\r\n\r\n",
			want: &reqWant{method: "FETCH", target: "/a%2Fb/c", path: "/a/b/c", header: http.Header{}}},
		{name: "bytes above 0x7F pass to the engine", in: "AGTP/1.0 FETCH /caf\xc3\xa9\r\n\r\n",
			want: &reqWant{method: "FETCH", target: "/caf\xc3\xa9", path: "/caf\xc3\xa9", header: http.Header{}}},
		{name: "reference client with a body",
			in: "AGTP/1.0 BOOK /room\r\nAccept: application/json\r\nHost: 127.0.0.1\r\nAgent-ID: " + agentHex + "\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"guest\": \"g-1\"}",
			want: &reqWant{method: "BOOK", target: "/room", path: "/room", contentLength: 16, body: `{"guest": "g-1"}`,
				header: http.Header{"Accept": {"application/json"}, "Host": {"127.0.0.1"}, "Agent-Id": {agentHex},
					"Content-Type": {"application/json"}, "Content-Length": {"16"}}}},
		{name: "no Content-Length means no body", in: "AGTP/1.0 DISCOVER\r\nAccept: application/json\r\n\r\nAGTP/1.0 NEXT",
			want: &reqWant{method: "DISCOVER", target: "/", path: "/", header: http.Header{"Accept": {"application/json"}}}},
		{name: "Content-Length 0", in: "AGTP/1.0 DISCOVER\r\nContent-Length: 0\r\n\r\n",
			want: &reqWant{method: "DISCOVER", target: "/", path: "/", header: http.Header{"Content-Length": {"0"}}}},
		{name: "names case-insensitive, values trimmed, repeats kept in order",
			in: "AGTP/1.0 QUERY /x\r\nagent-id:  a \r\nX-Tag:\tone\r\nx-tag: two\r\nX-Empty:\r\n\r\n",
			want: &reqWant{method: "QUERY", target: "/x", path: "/x",
				header: http.Header{"Agent-Id": {"a"}, "X-Tag": {"one", "two"}, "X-Empty": {""}}}},
		{name: "obs-text in a value passes", in: "AGTP/1.0 QUERY /x\r\nX-Name: caf\xc3\xa9\r\n\r\n",
			want: &reqWant{method: "QUERY", target: "/x", path: "/x", header: http.Header{"X-Name": {"caf\xc3\xa9"}}}},
		{name: "head exactly at the byte limit", in: "AGTP/1.0 Q /\r\nA: " + long + "\r\n\r\n", lim: Limits{MaxHeaderBytes: len("AGTP/1.0 Q /\r\nA: " + long + "\r\n\r\n")},
			want: &reqWant{method: "Q", target: "/", path: "/", header: http.Header{"A": {long}}}},
		{name: "header lines at the count limit", in: "AGTP/1.0 Q /\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", lim: Limits{MaxHeaderLines: 3},
			want: &reqWant{method: "Q", target: "/", path: "/", header: http.Header{"A": {"1"}, "B": {"2"}, "C": {"3"}}}},

		// Content-Length and Transfer-Encoding.
		{name: "duplicate Content-Length, same value", in: "AGTP/1.0 BOOK /r\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
			err: &refusal{400, "duplicate-header", "", "Content-Length"}},
		{name: "duplicate Content-Length, other case", in: "AGTP/1.0 BOOK /r\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\n{}",
			err: &refusal{400, "duplicate-header", "", "Content-Length header appears more than once"}},
		{name: "chunked", in: "AGTP/1.0 BOOK /r\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
			err: &refusal{400, "content-length-required", "", "Transfer-Encoding"}},
		{name: "Transfer-Encoding with Content-Length", in: "AGTP/1.0 BOOK /r\r\nContent-Length: 2\r\nTransfer-Encoding: identity\r\n\r\n{}",
			err: &refusal{400, "content-length-required", "", "chunked"}},
		{name: "Content-Length with a sign", in: "AGTP/1.0 BOOK /r\r\nContent-Length: +2\r\n\r\n{}", err: &refusal{400, "invalid-content-length", "", `"+2"`}},
		{name: "Content-Length list", in: "AGTP/1.0 BOOK /r\r\nContent-Length: 2, 2\r\n\r\n{}", err: &refusal{400, "invalid-content-length", "", "decimal"}},
		{name: "Content-Length negative", in: "AGTP/1.0 BOOK /r\r\nContent-Length: -1\r\n\r\n", err: &refusal{400, "invalid-content-length", "", "decimal"}},
		{name: "Content-Length empty", in: "AGTP/1.0 BOOK /r\r\nContent-Length:\r\n\r\n", err: &refusal{400, "invalid-content-length", "", "empty"}},
		{name: "Content-Length beyond int64", in: "AGTP/1.0 BOOK /r\r\nContent-Length: 99999999999999999999\r\n\r\n", err: &refusal{400, "invalid-content-length", "", "2^63-1"}},

		// Singletons.
		{name: "duplicate Agent-ID", in: "AGTP/1.0 QUERY /x\r\nAgent-ID: a\r\nAGENT-ID: b\r\n\r\n", err: &refusal{400, "duplicate-header", "", "the Agent-ID header"}},
		{name: "duplicate Authority-Scope", in: "AGTP/1.0 QUERY /x\r\nAuthority-Scope: a:b\r\nAuthority-Scope: c:d\r\n\r\n", err: &refusal{400, "duplicate-header", "", "Authority-Scope"}},
		{name: "duplicate Contract-Synthesized", in: "AGTP/1.0 QUERY /x\r\nContract-Synthesized: s1\r\nContract-Synthesized: s1\r\n\r\n", err: &refusal{400, "duplicate-header", "", "Contract-Synthesized"}},
		{name: "duplicate Idempotency-Key", in: "AGTP/1.0 QUERY /x\r\nIdempotency-Key: k\r\nidempotency-key: k\r\n\r\n", err: &refusal{400, "duplicate-header", "", "Idempotency-Key"}},
		{name: "duplicate Signature-Input", in: "AGTP/1.0 QUERY /x\r\nSignature-Input: a=()\r\nSignature-Input: b=()\r\n\r\n", err: &refusal{400, "duplicate-header", "", "Signature-Input"}},
		{name: "duplicate Host", in: "AGTP/1.0 QUERY /x\r\nHost: a\r\nhost: b\r\n\r\n", err: &refusal{400, "duplicate-header", "", "Host"}},
		{name: "duplicate Allow-RCNS", in: "AGTP/1.0 QUERY /x\r\nAllow-RCNS: true\r\nAllow-Rcns: true\r\n\r\n", err: &refusal{400, "duplicate-header", "", "Allow-RCNS"}},

		// Header lines.
		{name: "header line without colon", in: "AGTP/1.0 QUERY /x\r\nAgent-ID a\r\n\r\n", err: &refusal{400, "invalid-header", "", "has no colon"}},
		{name: "obs-fold", in: "AGTP/1.0 QUERY /x\r\nX-A: one\r\n two\r\n\r\n", err: &refusal{400, "invalid-header", "", "obs-fold"}},
		{name: "whitespace before the colon", in: "AGTP/1.0 QUERY /x\r\nAgent-ID : a\r\n\r\n", err: &refusal{400, "invalid-header", "", "between a header name and its colon"}},
		{name: "empty name", in: "AGTP/1.0 QUERY /x\r\n: a\r\n\r\n", err: &refusal{400, "invalid-header", "", "empty name"}},
		{name: "name not a token", in: "AGTP/1.0 QUERY /x\r\nAgent(ID): a\r\n\r\n", err: &refusal{400, "invalid-header", "", "is a token"}},
		{name: "NUL in a value", in: "AGTP/1.0 QUERY /x\r\nX-A: a\x00b\r\n\r\n", err: &refusal{400, "invalid-header", "", `'\x00'`}},
		{name: "DEL in a value", in: "AGTP/1.0 QUERY /x\r\nX-A: a\x7fb\r\n\r\n", err: &refusal{400, "invalid-header", "", `'\x7f'`}},
		{name: "bare CR in a value", in: "AGTP/1.0 QUERY /x\r\nX-A: a\rb\r\n\r\n", err: &refusal{400, "invalid-header", "", `'\r'`}},
		{name: "bare LF ends a header line", in: "AGTP/1.0 QUERY /x\r\nX-A: a\nX-B: b\r\n\r\n", err: &refusal{400, "invalid-header", "", "bare LF"}},
		{name: "bare LF ends the head", in: "AGTP/1.0 QUERY /x\r\nX-A: a\r\n\n", err: &refusal{400, "invalid-header", "", "bare LF"}},

		// Request line.
		{name: "bare LF ends the request line", in: "AGTP/1.0 QUERY /x\nHost: a\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "bare LF"}},
		{name: "fragment", in: "AGTP/1.0 QUERY /x#frag\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "'#'"}},
		{name: "fragment in the query", in: "AGTP/1.0 QUERY /x?a=1#f\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "'#'"}},
		{name: "asterisk-form", in: "AGTP/1.0 DISCOVER *\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "origin-form"}},
		{name: "absolute-form", in: "AGTP/1.0 QUERY agtp://gw.example/x\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "origin-form"}},
		{name: "authority-form", in: "AGTP/1.0 QUERY gw.example:4480\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "origin-form"}},
		{name: "invalid percent-encoding", in: "AGTP/1.0 QUERY /a%zz\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "percent-encoding"}},
		{name: "two spaces", in: "AGTP/1.0  QUERY /x\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "single spaces"}},
		{name: "trailing space", in: "AGTP/1.0 QUERY \r\n\r\n", err: &refusal{400, "invalid-request-line", "", "single spaces"}},
		{name: "four tokens", in: "AGTP/1.0 QUERY /x y\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "single spaces"}},
		{name: "version alone", in: "AGTP/1.0\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "single spaces"}},
		{name: "empty request line", in: "\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "does not start with AGTP/1.0"}},
		{name: "method not a token", in: "AGTP/1.0 QU(ERY /x\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "not a token"}},
		{name: "tab in the request line", in: "AGTP/1.0\tQUERY /x\r\n\r\n", err: &refusal{400, "invalid-request-line", "", `'\t'`}},
		{name: "control character in the target", in: "AGTP/1.0 QUERY /a\x01b\r\n\r\n", err: &refusal{400, "invalid-request-line", "", `'\x01' at byte 17`}},
		{name: "TLS handshake on the plain-text port", in: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", err: &refusal{400, "invalid-request-line", "", "TLS handshake"}},
		{name: "lowercase version", in: "agtp/1.0 QUERY /x\r\n\r\n", err: &refusal{400, "invalid-request-line", "", "does not start with AGTP/1.0"}},
		{name: "AGTP/2.0", in: "AGTP/2.0 QUERY /x\r\n\r\n", err: &refusal{400, "unsupported-version", "", `not "AGTP/2.0"`}},
		{name: "HTTP/1.1 request line", in: "GET /x HTTP/1.1\r\nHost: gw\r\n\r\n", err: &refusal{400, "unsupported-version", "HTTP/1.1", "not HTTP"}},
		{name: "HTTP/2 preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", err: &refusal{400, "unsupported-version", "HTTP/1.1", "not HTTP"}},

		// Limits.
		{name: "header block over the byte limit", in: "AGTP/1.0 Q /\r\nA: " + long + "\r\n\r\n", lim: Limits{MaxHeaderBytes: len("AGTP/1.0 Q /\r\nA: "+long+"\r\n\r\n") - 1},
			err: &refusal{431, "header-too-large", "", "request line and header lines exceed"}},
		{name: "request line over the byte limit", in: "AGTP/1.0 QUERY /" + long + "\r\n\r\n", lim: Limits{MaxHeaderBytes: 100},
			err: &refusal{431, "header-too-large", "", "request line exceeds 100 bytes"}},
		{name: "too many header lines", in: "AGTP/1.0 Q /\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", lim: Limits{MaxHeaderLines: 3},
			err: &refusal{431, "too-many-headers", "", "more than 3 header lines"}},

		// Truncation.
		{name: "connection ends inside the request line", in: "AGTP/1.0 QUE", err: &refusal{400, "incomplete-request", "", "after 12 bytes"}},
		{name: "connection ends inside the header block", in: "AGTP/1.0 QUERY /x\r\nHost: a\r\n", err: &refusal{400, "incomplete-request", "", "after 28 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tc.in))
			req, err := ReadRequest(br, tc.lim)
			if tc.err != nil {
				checkRefusal(t, err, tc.err)
				return
			}
			if err != nil {
				t.Fatalf("ReadRequest: %v", err)
			}
			w := tc.want
			if req.Method != w.method || req.Target != w.target || req.URL.Path != w.path || req.URL.RawQuery != w.rawQuery || req.URL.ForceQuery != w.forceQuery {
				t.Fatalf("got %s %q path %q query %q force %v; want %s %q path %q query %q force %v", req.Method, req.Target, req.URL.Path, req.URL.RawQuery, req.URL.ForceQuery,
					w.method, w.target, w.path, w.rawQuery, w.forceQuery)
			}
			if !reflect.DeepEqual(req.Header, w.header) {
				t.Fatalf("header %v, want %v", req.Header, w.header)
			}
			if req.ContentLength != w.contentLength {
				t.Fatalf("ContentLength %d, want %d", req.ContentLength, w.contentLength)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil || string(body) != w.body {
				t.Fatalf("body %q, %v; want %q", body, err, w.body)
			}
			// The head and the body were consumed, nothing more.
			if got, want := req.HeadBytes+len(body), len(tc.in)-br.Buffered(); got != want {
				t.Fatalf("consumed %d bytes, the reader moved %d", got, want)
			}
		})
	}
}

// checkRefusal asserts err is the refusal want.
func checkRefusal(t *testing.T, err error, want *refusal) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want *Error %d %s", err, err, want.status, want.reason)
	}
	proto := want.proto
	if proto == "" {
		proto = Version
	}
	if e.Status != want.status || e.Reason != want.reason || e.Proto != proto {
		t.Fatalf("got %d %s (%s), want %d %s (%s): %s", e.Status, e.Reason, e.Proto, want.status, want.reason, proto, e.Explanation)
	}
	if !strings.Contains(e.Explanation, want.explains) {
		t.Fatalf("explanation %q lacks %q", e.Explanation, want.explains)
	}
}

const agentHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestReadRequestEOF: a connection closed before a request starts is
// io.EOF itself, not a refusal: there is nothing to answer.
func TestReadRequestEOF(t *testing.T) {
	_, err := ReadRequest(bufio.NewReader(strings.NewReader("")), Limits{})
	if err != io.EOF {
		t.Fatalf("err = %v, want io.EOF", err)
	}
	// Inside a head it is a 400 that wraps io.ErrUnexpectedEOF.
	_, err = ReadRequest(bufio.NewReader(strings.NewReader("AGTP/1.0 Q /\r\n")), Limits{})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestReadRequestLimitNotExceeded: an oversized head is refused having
// consumed no byte past the limit, whatever the bufio buffer holds.
func TestReadRequestLimitNotExceeded(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		max  int
	}{
		{"long request line", "AGTP/1.0 QUERY /" + strings.Repeat("x", 9000) + "\r\n\r\n", 4096},
		{"long header value", "AGTP/1.0 QUERY /\r\nX-A: " + strings.Repeat("x", 9000) + "\r\n\r\n", 1000},
		{"no LF at all", strings.Repeat("A", 20000), 16 << 10},
		{"many short lines", "AGTP/1.0 Q /\r\n" + strings.Repeat("A: b\r\n", 5000), 16 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 64<<10)
			_, err := ReadRequest(br, Limits{MaxHeaderBytes: tc.max, MaxHeaderLines: 10000})
			checkRefusal(t, err, &refusal{431, "header-too-large", "", "exceed"})
			if consumed := len(tc.in) - br.Buffered(); consumed > tc.max {
				t.Fatalf("consumed %d bytes, limit %d", consumed, tc.max)
			}
		})
	}
}

// TestSingletons: every listed singleton is refused when repeated, and
// repeated fields not listed are kept.
func TestSingletons(t *testing.T) {
	for _, name := range Singletons {
		in := "AGTP/1.0 QUERY /x\r\n" + name + ": 1\r\n" + strings.ToLower(name) + ": 1\r\n\r\n"
		_, err := ReadRequest(bufio.NewReader(strings.NewReader(in)), Limits{})
		checkRefusal(t, err, &refusal{400, "duplicate-header", "", "the " + name + " header appears more than once"})
	}
	req, err := ReadRequest(bufio.NewReader(strings.NewReader("AGTP/1.0 QUERY /x\r\nAccept: a\r\nAccept: b\r\nTraceparent: t\r\n\r\n")), Limits{})
	if err != nil || !reflect.DeepEqual(req.Header["Accept"], []string{"a", "b"}) {
		t.Fatalf("repeated Accept: %v %v", req, err)
	}
}

// TestExplanationClipped: a refusal quotes at most a clipped part of
// what the peer sent.
func TestExplanationClipped(t *testing.T) {
	huge := strings.Repeat("Z", 4000)
	for _, in := range []string{
		"AGTP/1.0 QUERY " + huge + "\r\n\r\n",
		"AGTP/1.0 QUERY /x\r\n" + huge + "\r\n\r\n",
		"AGTP/1.0 QUERY /x\r\nContent-Length: " + huge + "\r\n\r\n",
		"AGTP/1.0 Q" + huge + "( /x\r\n\r\n",
		"FOO " + huge + "\r\n\r\n",
		"AGTP/9" + huge + " Q /\r\n\r\n",
	} {
		_, err := ReadRequest(bufio.NewReader(strings.NewReader(in)), Limits{})
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("err = %v", err)
		}
		if len(e.Explanation) > 300 || strings.Contains(e.Explanation, strings.Repeat("Z", 65)) {
			t.Fatalf("explanation of %d bytes echoes the input: %.200s…", len(e.Explanation), e.Explanation)
		}
	}
}

// TestDiscardBody: the rest of a body is drained so the next request
// can be read, unless it is over the drain limit or cut short.
func TestDiscardBody(t *testing.T) {
	two := "AGTP/1.0 BOOK /r\r\nContent-Length: 10\r\n\r\n0123456789AGTP/1.0 NEXT /n\r\n\r\n"
	t.Run("drained, next request read", func(t *testing.T) {
		br := bufio.NewReader(strings.NewReader(two))
		req, err := ReadRequest(br, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 3)
		if n, _ := io.ReadFull(req.Body, p); n != 3 || req.BodyRemaining() != 7 {
			t.Fatalf("read %d, remaining %d", n, req.BodyRemaining())
		}
		if err := req.DiscardBody(7); err != nil {
			t.Fatalf("DiscardBody: %v", err)
		}
		next, err := ReadRequest(br, Limits{})
		if err != nil || next.Method != "NEXT" || next.Target != "/n" {
			t.Fatalf("next: %+v %v", next, err)
		}
	})
	t.Run("over the drain limit", func(t *testing.T) {
		br := bufio.NewReader(strings.NewReader(two))
		req, _ := ReadRequest(br, Limits{})
		if err := req.DiscardBody(9); err != ErrBodyNotDrained {
			t.Fatalf("err = %v, want ErrBodyNotDrained", err)
		}
		if req.BodyRemaining() != 10 {
			t.Fatalf("DiscardBody read %d bytes over its limit", 10-req.BodyRemaining())
		}
	})
	t.Run("connection ends inside the body", func(t *testing.T) {
		br := bufio.NewReader(strings.NewReader("AGTP/1.0 BOOK /r\r\nContent-Length: 10\r\n\r\n0123"))
		req, _ := ReadRequest(br, Limits{})
		b, err := io.ReadAll(req.Body)
		if string(b) != "0123" || err != io.ErrUnexpectedEOF {
			t.Fatalf("body %q, %v; want 0123, io.ErrUnexpectedEOF", b, err)
		}
		if err := req.DiscardBody(DefaultMaxDrain); err != io.ErrUnexpectedEOF {
			t.Fatalf("DiscardBody = %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("body read to its end", func(t *testing.T) {
		br := bufio.NewReader(strings.NewReader(two))
		req, _ := ReadRequest(br, Limits{})
		if b, err := io.ReadAll(req.Body); string(b) != "0123456789" || err != nil {
			t.Fatalf("body %q %v", b, err)
		}
		if err := req.DiscardBody(0); err != nil {
			t.Fatalf("DiscardBody after the end = %v", err)
		}
	})
}

// TestRequestWriteRoundTrip: what NewRequest and Write send,
// ReadRequest reads back the same; the names go out in AGTP spelling.
func TestRequestWriteRoundTrip(t *testing.T) {
	req, err := NewRequest("BOOK", "/room?dry=1", []byte(`{"guest_id":"g-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Host", "127.0.0.1:4480")
	req.Header.Set("Agent-ID", agentHex)
	req.Header["Allow-RCNS"] = []string{"true"}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Length", "999") // the writer's own wins
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatal(err)
	}
	want := "AGTP/1.0 BOOK /room?dry=1\r\nAgent-ID: " + agentHex + "\r\nAllow-RCNS: true\r\nContent-Type: application/json\r\nHost: 127.0.0.1:4480\r\nContent-Length: 18\r\n\r\n{\"guest_id\":\"g-1\"}"
	if buf.String() != want {
		t.Fatalf("wrote\n%q\nwant\n%q", buf.String(), want)
	}
	got, err := ReadRequest(bufio.NewReader(&buf), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(got.Body)
	if got.Method != "BOOK" || got.Target != "/room?dry=1" || string(b) != `{"guest_id":"g-1"}` || got.Header.Get("Allow-RCNS") != "true" {
		t.Fatalf("read back %+v %q", got, b)
	}
}

// TestNewRequestRefuses: a client cannot build what a server refuses,
// nor inject a header line.
func TestNewRequestRefuses(t *testing.T) {
	for _, tc := range []struct{ name, method, target string }{
		{"fragment", "QUERY", "/x#f"},
		{"absolute-form", "QUERY", "agtp://h/x"},
		{"space in target", "QUERY", "/a b"},
		{"CRLF in target", "QUERY", "/a\r\nX-Evil: 1"},
		{"method not a token", "QUE RY", "/x"},
		{"empty method", "", "/x"},
		{"empty target", "QUERY", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewRequest(tc.method, tc.target, nil); err == nil {
				t.Fatalf("NewRequest(%q, %q) accepted", tc.method, tc.target)
			}
		})
	}
	for _, tc := range []struct {
		name string
		h    http.Header
	}{
		{"CRLF in a value", http.Header{"X-A": {"a\r\nX-Evil: 1"}}},
		{"LF in a value", http.Header{"X-A": {"a\nb"}}},
		{"name not a token", http.Header{"X A": {"a"}}},
		{"colon in a name", http.Header{"X:A": {"a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := NewRequest("QUERY", "/x", nil)
			req.Header = tc.h
			var buf bytes.Buffer
			if err := req.Write(&buf); err == nil || buf.Len() != 0 {
				t.Fatalf("Write = %v, wrote %q", err, buf.String())
			}
		})
	}
	req, _ := NewRequest("BOOK", "/x", []byte("{}"))
	req.Body = strings.NewReader("{")
	if err := req.Write(io.Discard); err == nil || !strings.Contains(err.Error(), "1 of its 2 bytes") {
		t.Fatalf("short body: %v", err)
	}
}

// TestRefusalKeepsHead: a refusal whose head could still be read carries
// the method and the header fields (for the answer's echo of Agent-ID,
// Request-ID and Task-ID); one whose head could not be read carries
// neither.
func TestRefusalKeepsHead(t *testing.T) {
	const fields = "Agent-ID: a1\r\nTask-ID: t-1\r\n"
	for _, tc := range []struct {
		name, in, method, reason string
		head                     bool
		path                     string // the refusal's URL.Path ("": no URL)
	}{
		{"asterisk target", "AGTP/1.0 OPTIONS *\r\n" + fields + "\r\n", "OPTIONS", "invalid-request-line", true, "*"},
		// As net/http reads them (helper-148: the HTTP door's answer
		// named a path the native door's did not).
		{"fragment", "AGTP/1.0 FETCH /a#b\r\n" + fields + "\r\n", "FETCH", "invalid-request-line", true, "/a#b"},
		{"absolute-form", "AGTP/1.0 FETCH agtp://h/a\r\n" + fields + "\r\n", "FETCH", "invalid-request-line", true, "/a"},
		{"no URI path", "AGTP/1.0 FETCH /a/%ZZ\r\n" + fields + "\r\n", "FETCH", "invalid-request-line", true, ""},
		{"chunked", "AGTP/1.0 BOOK /a\r\n" + fields + "Transfer-Encoding: chunked\r\n\r\n", "BOOK", "content-length-required", true, "/a"},
		{"bad Content-Length", "AGTP/1.0 BOOK /a?x=1\r\n" + fields + "Content-Length: -1\r\n\r\n", "BOOK", "invalid-content-length", true, "/a"},
		{"bad target, bad header line", "AGTP/1.0 OPTIONS *\r\n" + fields + "no colon\r\n\r\n", "OPTIONS", "invalid-request-line", true, "*"},
		{"duplicate Content-Length", "AGTP/1.0 BOOK /a\r\n" + fields + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", "BOOK", "duplicate-header", true, "/a"},
		{"line without a colon", "AGTP/1.0 FETCH /a\r\nBadHeader\r\n" + fields + "\r\n", "FETCH", "invalid-header", true, "/a"},
		{"control character in a value, then a fold", "AGTP/1.0 FETCH /a\r\n" + fields + "X-A: a\x01\r\n folded\r\n\r\n", "FETCH", "invalid-header", true, "/a"},
		{"bad line, head cut", "AGTP/1.0 FETCH /a\r\n" + fields + "no colon\r\n", "", "invalid-header", false, ""},
		{"bad target, head cut", "AGTP/1.0 OPTIONS *\r\n" + fields, "OPTIONS", "invalid-request-line", false, "*"},
		{"not AGTP/1.0", "HELLO /a\r\n" + fields + "\r\n", "", "invalid-request-line", false, ""},
		{"method not a token", "AGTP/1.0 FE(CH /a\r\n" + fields + "\r\n", "", "invalid-request-line", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadRequest(bufio.NewReader(strings.NewReader(tc.in)), Limits{})
			var we *Error
			if !errors.As(err, &we) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if we.Reason != tc.reason || we.Method != tc.method {
				t.Errorf("reason %q method %q, want %q %q", we.Reason, we.Method, tc.reason, tc.method)
			}
			if tc.head {
				if we.Header.Get("Agent-ID") != "a1" || we.Header.Get("Task-ID") != "t-1" {
					t.Errorf("header %v, want the fields sent", we.Header)
				}
			} else if we.Header != nil {
				t.Errorf("header %v, want nil: the head was not read", we.Header)
			}
			if got := we.URL; (got == nil) != (tc.path == "") || got != nil && got.Path != tc.path {
				t.Errorf("URL %v, want path %q", got, tc.path)
			}
		})
	}
	// A repeated singleton is dropped altogether: neither value is the
	// one to echo. The first refused line names the refusal.
	_, err := ReadRequest(bufio.NewReader(strings.NewReader("AGTP/1.0 FETCH /a\r\n"+fields+"Agent-ID: a2\r\nno colon\r\n\r\n")), Limits{})
	var we *Error
	if !errors.As(err, &we) || we.Reason != "duplicate-header" || we.Method != "FETCH" || we.Header == nil ||
		we.Header.Get("Agent-ID") != "" || we.Header.Get("Task-ID") != "t-1" {
		t.Fatalf("duplicate Agent-ID: %+v, want duplicate-header with the head minus Agent-ID", err)
	}
}
