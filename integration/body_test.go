package integration

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContentEncodingRefused: an AGTP body sent compressed is 415
// unsupported-content-encoding naming the coding, with
// Accept-Encoding: identity (RFC 9110 §15.5.16, §12.5.3), before any
// upstream call; it was 400 invalid-json "syntax error at byte 0".
func TestContentEncodingRefused(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(mustJSON(t, bookBody()))
	_ = zw.Close()
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
	}{
		{"gate", "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true")},
		{"Tier B", "FETCH", "/guests/g-1", hdr(agentA1, scopeAll)},
		{"anonymous DISCOVER", "DISCOVER", "/", hdr("", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.hdr["Content-Encoding"] = "gzip"
			r := w.GW.Do(t, tc.method, tc.path, tc.hdr, zipped.Bytes())
			b := assertErrorBody(t, r, 415, "unsupported-content-encoding")
			if e := str(b, "explanation"); !strings.Contains(e, `"gzip"`) {
				t.Errorf("explanation %q does not name gzip", e)
			}
			if got := r.Header.Get("Accept-Encoding"); got != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", got)
			}
		})
	}
	if w.Legacy.Count() != 0 || w.Hotel.Count() != 0 {
		t.Errorf("a compressed body reached an upstream (legacy %d, hotel %d)", w.Legacy.Count(), w.Hotel.Count())
	}
	w.assertReservations(t, 0)
}

// TestTaskIDForm: one rule for the Task-ID header and the envelope
// task_id, 1-256 visible ASCII characters; anything else, empty
// included, is 400 invalid-task-id and is not echoed (the header was
// echoed raw with spaces and non-ASCII bytes, the envelope took "a b"
// and dropped ""). A well-formed one is echoed unchanged (§24 item 4).
func TestTaskIDForm(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	for _, v := range []string{"", "a b", "caf\xc3\xa9", strings.Repeat("t", 257)} {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Task-ID", v), nil)
		b := assertErrorBody(t, r, 400, "invalid-task-id")
		if _, echoed := r.Header["Task-Id"]; echoed || b["task_id"] != nil {
			t.Errorf("Task-ID %q echoed: header %q, body task_id %v", v, r.Header.Get("Task-ID"), b["task_id"])
		}
		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), map[string]any{"task_id": v})
		b = assertErrorBody(t, r, 400, "invalid-task-id")
		if _, echoed := r.Header["Task-Id"]; echoed || b["task_id"] != nil {
			t.Errorf("task_id %q echoed: header %q, body task_id %v", v, r.Header.Get("Task-ID"), b["task_id"])
		}
	}
	assertErrorBody(t, g.Do(t, "DISCOVER", "/", hdr("", "", "Task-ID", "a b"), nil), 400, "invalid-task-id")
	if n := w.Hotel.Count(); n != 0 {
		t.Errorf("refused requests made %d hotel calls", n)
	}
	for _, v := range []string{"task-0042", `a"b\c`} {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Task-ID", v), nil)
		wantStatus(t, r, 200)
		if r.Header.Get("Task-ID") != v || str(r.Object(t), "task_id") != v {
			t.Errorf("Task-ID %q: echoed %q, body task_id %q", v, r.Header.Get("Task-ID"), str(r.Object(t), "task_id"))
		}
		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), map[string]any{"task_id": v})
		wantStatus(t, r, 200)
		if r.Header.Get("Task-ID") != v || str(r.Object(t), "task_id") != v {
			t.Errorf("task_id %q: echoed %q, body task_id %q", v, r.Header.Get("Task-ID"), str(r.Object(t), "task_id"))
		}
	}
}

// TestEarlyRefusalUnreadBody: a request refused before its declared body
// is read (Content-Length or chunked, the body never sent) is answered at
// once with Connection: close.
// Without it Go's net/http tried to discard the unread body before
// finishing the answer and the refusal left only at the read_body
// timeout (10s in Caddyfile.example): `curl --expect100-timeout 30`
// with a 5 MB body got its 413 after 10.0s, having uploaded nothing.
// Answers to requests whose body was read keep the connection.
func TestEarlyRefusalUnreadBody(t *testing.T) {
	site := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	g := startGatewayFile(t, filepath.Join(repoRoot, "Caddyfile.example"), site, []string{
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		"RCNS_PORT=" + strings.TrimPrefix(site, "127.0.0.1:"),
		fmt.Sprintf("HOTEL_ADDR=127.0.0.1:%d", freePort(t)), // no upstream: every answer here is the gateway's own
	})
	if !strings.Contains(g.Caddyfile, "read_body 10s") {
		t.Fatalf("Caddyfile.example no longer sets read_body 10s; this test needs a read timeout well above its bound")
	}
	// A hang check, not a performance bound: the read timeout is 10s.
	const bound = 3 * time.Second
	head := "Host: " + site + "\r\nAgent-ID: " + agentA1 + "\r\nAuthority-Scope: hotel:read\r\nContent-Type: application/json\r\n"
	for _, tc := range []struct {
		name, target, extra string
		status              int
		reason              string
	}{
		{"413 too large", "/guests/g-1", "Content-Length: 5000000\r\n", 413, "body-too-large"},
		{"413 too large, Expect 100-continue", "/guests/g-1", "Content-Length: 5000000\r\nExpect: 100-continue\r\n", 413, "body-too-large"},
		{"malformed Task-ID", "/guests/g-1", "Content-Length: 100000\r\nTask-ID: a b\r\n", 400, "invalid-task-id"},
		{"fragment in target", "/guests/g-1#x", "Content-Length: 100000\r\n", 400, "invalid-request-line"},
		{"content coding", "/guests/g-1", "Content-Length: 100000\r\nContent-Encoding: gzip\r\n", 415, "unsupported-content-encoding"},
		{"chunked", "/guests/g-1", "Transfer-Encoding: chunked\r\n", 400, "content-length-required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r, closed := rawExchange(t, g.Addr, "FETCH "+tc.target+" HTTP/1.1\r\n"+head+tc.extra+"\r\n")
			if d := time.Since(start); d > bound {
				t.Errorf("refusal took %s (read_body is 10s); want it well under %s", d.Round(time.Millisecond), bound)
			}
			assertErrorBody(t, r, tc.status, tc.reason)
			if !closed {
				t.Errorf("the answer does not carry Connection: close:\n%s", r)
			}
		})
	}
	// The body was read: the connection stays open for the next request.
	t.Run("body read keeps the connection", func(t *testing.T) {
		body := `{"method":"DISCOVER"}`
		r, closed := rawExchange(t, g.Addr, fmt.Sprintf("DISCOVER / HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s", head, len(body), body))
		wantStatus(t, r, 200)
		if closed {
			t.Errorf("an answer to a request whose body was read closed the connection:\n%s", r)
		}
		r, closed = rawExchange(t, g.Addr, fmt.Sprintf("GET /guests/g-1 HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s", head, len(body), body))
		wantStatus(t, r, 459)
		if closed {
			t.Errorf("a refusal after the body was read closed the connection:\n%s", r)
		}
	})
}

// rawExchange writes rawRequest on a fresh connection, reads one
// response, and reports whether it said Connection: close
// (http.ReadResponse moves that into Response.Close). The server may
// hold its end open a while longer: after a refusal it reads what
// arrives of the declared body (refused_body_drain), after the answer
// left, until this side closes.
func rawExchange(t testing.TB, addr, rawRequest string) (*Resp, bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := io.WriteString(conn, rawRequest); err != nil {
		t.Fatalf("write raw request: %v", err)
	}
	method := strings.SplitN(rawRequest, " ", 2)[0]
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read raw response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read raw response body: %v", err)
	}
	return &Resp{Method: method, Status: resp.StatusCode, Header: resp.Header, Body: b,
		TransferEncoding: resp.TransferEncoding}, resp.Close
}
