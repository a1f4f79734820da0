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

// TestStatusText: the spec's phrases for AGTP codes, net/http's for
// HTTP codes.
func TestStatusText(t *testing.T) {
	for code, want := range map[int]string{
		200: "OK", 400: "Bad Request", 422: "Unprocessable Entity", 429: "Too Many Requests", 503: "Service Unavailable",
		261: "Negotiation In Progress", 262: "Authorization Required", 263: "Proposal Approved",
		455: "Scope Violation", 459: "Method Violation", 460: "Endpoint Violation",
		461: "RCNS Contract Available", 463: "Proposal Rejected", 464: "RCNS No Contract",
		550: "Delegation Failure", 551: "Authority Chain Broken",
		465: "", 599: "",
	} {
		if got := StatusText(code); got != want {
			t.Errorf("StatusText(%d) = %q, want %q", code, got, want)
		}
	}
}

// TestResponseWrite: the status line carries the AGTP phrase, names go
// out in AGTP spelling sorted by map key, Content-Length is always there and the
// writer's own.
func TestResponseWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp Response
		want string
	}{
		{"263 with a body", Response{Status: 263, Header: http.Header{
			"Agent-Id": {agentHex}, "Contract-Synthesized": {"syn-1"}, "Content-Type": {"application/vnd.agtp+json"},
			"Agtp-Api-Version": {"3"}, "Rcns-Attempt-Id": {"att-1"}, "Server-ID": {"gw"}, "Content-Length": {"1"}, "Transfer-Encoding": {"chunked"},
		}, Body: []byte(`{"status":263}`)},
			"AGTP/1.0 263 Proposal Approved\r\nAgent-ID: " + agentHex + "\r\nAGTP-API-Version: 3\r\nContent-Type: application/vnd.agtp+json\r\nContract-Synthesized: syn-1\r\nRCNS-Attempt-Id: att-1\r\nServer-ID: gw\r\nContent-Length: 14\r\n\r\n{\"status\":263}"},
		{"no body: Content-Length 0", Response{Status: 461, Header: http.Header{"X-A": {"1", "2"}}},
			"AGTP/1.0 461 RCNS Contract Available\r\nX-A: 1\r\nX-A: 2\r\nContent-Length: 0\r\n\r\n"},
		{"own reason phrase", Response{Status: 200, Reason: "Fine"}, "AGTP/1.0 200 Fine\r\nContent-Length: 0\r\n\r\n"},
		{"unknown code: empty phrase", Response{Status: 299}, "AGTP/1.0 299 \r\nContent-Length: 0\r\n\r\n"},
		{"HTTP refusal", Response{Proto: "HTTP/1.1", Status: 400, Header: http.Header{"Connection": {"close"}}, Body: []byte("{}")},
			"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.resp.Write(&buf); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want {
				t.Fatalf("wrote\n%q\nwant\n%q", buf.String(), tc.want)
			}
		})
	}
}

// TestResponseWriteRefuses: nothing is written for a response that
// would break the framing.
func TestResponseWriteRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp Response
	}{
		{"CRLF in a value", Response{Status: 200, Header: http.Header{"X-A": {"a\r\nX-Evil: 1"}}}},
		{"NUL in a value", Response{Status: 200, Header: http.Header{"X-A": {"a\x00"}}}},
		{"name not a token", Response{Status: 200, Header: http.Header{"X A": {"a"}}}},
		{"CRLF in the reason", Response{Status: 200, Reason: "OK\r\nX-Evil: 1"}},
		{"two-digit status", Response{Status: 99}},
		{"four-digit status", Response{Status: 1000}},
		{"other protocol", Response{Proto: "HTTP/2", Status: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.resp.Write(&buf); err == nil || buf.Len() != 0 {
				t.Fatalf("Write = %v, wrote %q", err, buf.String())
			}
		})
	}
}

// TestReadResponse: the client side reads what Write sends, and what
// the reference implementation sends.
func TestReadResponse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		maxBody int64
		status  int
		reason  string
		header  http.Header
		body    string
		err     string // part of the error; "" for none
		is      error  // errors.Is target
	}{
		{name: "AGTP answer", in: "AGTP/1.0 464 RCNS No Contract\r\nRCNS-Attempt-Id: a1\r\nContent-Length: 2\r\n\r\n{}", maxBody: 10,
			status: 464, reason: "RCNS No Contract", header: http.Header{"Rcns-Attempt-Id": {"a1"}, "Content-Length": {"2"}}, body: "{}"},
		{name: "no reason phrase", in: "AGTP/1.0 200\r\nContent-Length: 0\r\n\r\n", maxBody: 10, status: 200, header: http.Header{"Content-Length": {"0"}}},
		{name: "empty reason phrase", in: "AGTP/1.0 200 \r\nContent-Length: 0\r\n\r\n", maxBody: 10, status: 200, header: http.Header{"Content-Length": {"0"}}},
		{name: "no Content-Length: no body (the reference's bodiless answers)", in: "AGTP/1.0 204 No Content\r\nServer-ID: s\r\n\r\nAGTP/1.0", maxBody: 10,
			status: 204, reason: "No Content", header: http.Header{"Server-Id": {"s"}}},
		{name: "body at the limit", in: "AGTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc", maxBody: 3, status: 200, reason: "OK", header: http.Header{"Content-Length": {"3"}}, body: "abc"},
		{name: "body over the limit", in: "AGTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nabcd", maxBody: 3, err: "Content-Length 4, limit 3", is: ErrBodyTooLarge},
		{name: "body cut short", in: "AGTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nab", maxBody: 10, err: "after 2 of its 4 bytes", is: io.ErrUnexpectedEOF},
		{name: "closed before an answer", in: "", maxBody: 10, err: "closed before a response", is: io.ErrUnexpectedEOF},
		{name: "head cut short", in: "AGTP/1.0 200 OK\r\nX-A", maxBody: 10, err: "stopped after", is: io.ErrUnexpectedEOF},
		{name: "HTTP answer", in: "HTTP/1.1 400 Bad Request\r\n\r\n", maxBody: 10, err: "this is an HTTP port"},
		{name: "other protocol", in: "SSH-2.0-OpenSSH\r\n", maxBody: 10, err: "does not start with AGTP/1.0"},
		{name: "no code", in: "AGTP/1.0 OK\r\n\r\n", maxBody: 10, err: "no three-digit code"},
		{name: "four-digit code", in: "AGTP/1.0 2000 OK\r\n\r\n", maxBody: 10, err: "no three-digit code"},
		{name: "duplicate Content-Length", in: "AGTP/1.0 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na", maxBody: 10, err: "duplicate-header"},
		{name: "chunked", in: "AGTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", maxBody: 10, err: "Transfer-Encoding"},
		{name: "bad Content-Length", in: "AGTP/1.0 200 OK\r\nContent-Length: x\r\n\r\n", maxBody: 10, err: "not a decimal"},
		{name: "bare LF", in: "AGTP/1.0 200 OK\n\n", maxBody: 10, err: "bare LF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ReadResponse(bufio.NewReader(strings.NewReader(tc.in)), Limits{}, tc.maxBody)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want errors.Is %v", err, tc.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Proto != Version || resp.Status != tc.status || resp.Reason != tc.reason || string(resp.Body) != tc.body || !reflect.DeepEqual(resp.Header, tc.header) {
				t.Fatalf("got %+v", resp)
			}
		})
	}
}

// TestResponseRoundTrip: Write then ReadResponse gives back status,
// phrase, fields and body.
func TestResponseRoundTrip(t *testing.T) {
	in := &Response{Status: 262, Header: http.Header{"Agent-Id": {agentHex}, "Content-Type": {"application/json"}}, Body: []byte(`{"reason":"scope-required"}`)}
	var buf bytes.Buffer
	if err := in.Write(&buf); err != nil {
		t.Fatal(err)
	}
	out, err := ReadResponse(bufio.NewReader(&buf), Limits{}, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != 262 || out.Reason != "Authorization Required" || out.Header.Get("Agent-ID") != agentHex || string(out.Body) != string(in.Body) {
		t.Fatalf("read back %+v", out)
	}
}

// FuzzReadResponse: the client side never panics on what a server
// sends, never returns a body over its limit, and what it parsed
// writes back to the same response.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"AGTP/1.0 263 Proposal Approved\r\nAgent-ID: a\r\nContent-Length: 2\r\n\r\n{}",
		"AGTP/1.0 200\r\n\r\n",
		"AGTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\nab",
		"HTTP/1.1 400 Bad Request\r\n\r\n",
		"AGTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxBody = 64
		resp, err := ReadResponse(bufio.NewReaderSize(bytes.NewReader(data), 16), Limits{MaxHeaderBytes: 512, MaxHeaderLines: 16}, maxBody)
		if err != nil {
			return
		}
		if len(resp.Body) > maxBody || resp.Status < 100 || resp.Status > 999 {
			t.Fatalf("parsed %+v", resp)
		}
		var buf bytes.Buffer
		if err := resp.Write(&buf); err != nil {
			t.Fatalf("Write of a parsed response: %v", err)
		}
		written := buf.String()
		again, err := ReadResponse(bufio.NewReader(&buf), Limits{MaxHeaderBytes: 2 * len(written), MaxHeaderLines: 17}, maxBody)
		reason := resp.Reason
		if reason == "" {
			reason = StatusText(resp.Status) // Write's default
		}
		if err != nil || again.Status != resp.Status || again.Reason != reason || !bytes.Equal(again.Body, resp.Body) {
			t.Fatalf("re-read of %q: %+v %v", written, again, err)
		}
	})
}
