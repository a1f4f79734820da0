package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// Resp is one response as the test saw it on the wire.
type Resp struct {
	Method           string
	Path             string
	Status           int
	Header           http.Header
	Body             []byte
	TransferEncoding []string
	// Reason is the status line's reason phrase of a native AGTP/1.0
	// answer ("" over HTTP).
	Reason string
}

// Do sends one request to the gateway. hdr keys are sent exactly as
// spelled (Agent-ID, not Agent-Id). body: nil sends no body; a string or
// []byte is sent raw; anything else is JSON-encoded. A body without a
// Content-Type in hdr gets application/json.
func (g *Gateway) Do(t testing.TB, method, path string, hdr map[string]string, body any) *Resp {
	t.Helper()
	return g.do(t, method, path, hdr, body, g.AGTPAddr != "")
}

// DoHTTP is Do over the HTTP door whatever the suite's door: for what
// only HTTP carries (the MCP transport, HTTP's access log).
func (g *Gateway) DoHTTP(t testing.TB, method, path string, hdr map[string]string, body any) *Resp {
	t.Helper()
	return g.do(t, method, path, hdr, body, false)
}

func (g *Gateway) do(t testing.TB, method, path string, hdr map[string]string, body any, native bool) *Resp {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatalf("encode body: %v", err)
		}
	}
	if native && agtpRequest(method, hdr) {
		return g.doNative(t, method, path, hdr, raw)
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		t.Fatalf("new request %s %s: %v", method, path, err)
	}
	for k, v := range hdr {
		req.Header[k] = []string{v}
	}
	if raw != nil && req.Header.Get("Content-Type") == "" {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return &Resp{Method: method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: b,
		TransferEncoding: resp.TransferEncoding}
}

// ianaMethods are HTTP's registered methods: without Agent-ID such a
// request is legacy HTTP, which only the HTTP door carries (it passes
// through to the legacy API).
var ianaMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "CONNECT": true,
	"OPTIONS": true, "TRACE": true, "PATCH": true, "QUERY": true, "PROPFIND": true, "SEARCH": true, "PURGE": true}

// agtpRequest reports whether Do's request is an AGTP one (it carries
// Agent-ID, or its method is not HTTP's): only those go over the native
// door when the suite runs there.
func agtpRequest(method string, hdr map[string]string) bool {
	for k := range hdr {
		if strings.EqualFold(k, "Agent-ID") {
			return true
		}
	}
	return !ianaMethods[method]
}

// doNative is Do over the native AGTP/1.0 listener: the request line
// `AGTP/1.0 METHOD PATH`, the header fields as spelled, Host,
// Content-Type (application/json with a body, as Do) and Content-Length,
// written as given (no client-side check, so a test can send what a
// server must refuse), on a fresh connection; the answer read with the
// codec. A reason phrase is kept in Resp.Reason.
func (g *Gateway) doNative(t testing.TB, method, path string, hdr map[string]string, raw []byte) *Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("%s %s: dial %s: %v", method, path, g.AGTPAddr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	var b bytes.Buffer
	fmt.Fprintf(&b, "AGTP/1.0 %s %s\r\nHost: %s\r\n", method, path, g.AGTPAddr)
	hasCT := false
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		hasCT = hasCT || strings.EqualFold(k, "Content-Type")
	}
	if raw != nil && !hasCT {
		b.WriteString("Content-Type: application/json\r\n")
	}
	if raw != nil {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(raw))
	}
	b.WriteString("\r\n")
	b.Write(raw)
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatalf("%s %s: write: %v", method, path, err)
	}
	resp, err := wire.ReadResponse(bufio.NewReader(c), wire.Limits{MaxHeaderBytes: 1 << 20}, 64<<20)
	if err != nil {
		t.Fatalf("%s %s over agtp: %v", method, path, err)
	}
	return &Resp{Method: method, Path: path, Status: resp.Status, Header: resp.Header, Body: resp.Body, Reason: resp.Reason}
}

// Raw writes rawRequest (a complete HTTP/1.1 request, CRLF line ends) to a
// fresh connection and reads one response. Use it for request lines a Go
// client refuses to send (e.g. a '#' in the target).
func (g *Gateway) Raw(t testing.TB, rawRequest string) *Resp {
	t.Helper()
	r, _ := rawExchange(t, g.Addr, rawRequest)
	return r
}

// String renders the response for failure messages (body cut at 4 KiB).
func (r *Resp) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s -> %d\n", r.Method, r.Path, r.Status)
	for k, v := range r.Header {
		fmt.Fprintf(&sb, "  %s: %s\n", k, strings.Join(v, ", "))
	}
	body := string(r.Body)
	if len(body) > 4096 {
		body = body[:4096] + "…"
	}
	sb.WriteString(body)
	return sb.String()
}

// JSON decodes the body as a JSON object; nil when it is not one.
func (r *Resp) JSON() map[string]any {
	var m map[string]any
	if json.Unmarshal(r.Body, &m) != nil {
		return nil
	}
	return m
}

// JSONArray decodes the body as a JSON array; nil when it is not one.
func (r *Resp) JSONArray() []any {
	var a []any
	if json.Unmarshal(r.Body, &a) != nil {
		return nil
	}
	return a
}

// Object is JSON that fails the test when the body is not a JSON object.
func (r *Resp) Object(t testing.TB) map[string]any {
	t.Helper()
	m := r.JSON()
	if m == nil {
		t.Fatalf("body is not a JSON object:\n%s", r)
	}
	return m
}

// Array is JSONArray that fails the test when the body is not a JSON array.
func (r *Resp) Array(t testing.TB) []any {
	t.Helper()
	a := r.JSONArray()
	if a == nil {
		t.Fatalf("body is not a JSON array:\n%s", r)
	}
	return a
}
