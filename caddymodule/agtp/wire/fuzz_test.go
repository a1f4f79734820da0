package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// FuzzReadRequest checks ReadRequest's invariants on any input: it
// never panics; it consumes no byte past the head limit; a refusal is
// one of the documented statuses with a bounded explanation; a parsed
// request is well formed, its body yields at most Content-Length
// bytes, and written back with Write it parses to the same request.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		"AGTP/1.0 DISCOVER\r\n\r\n",
		"AGTP/1.0 QUERY /rooms?city=Paris\r\nHost: gw\r\nAgent-ID: a\r\n\r\n",
		"AGTP/1.0 BOOK /room\r\nAccept: application/json\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"AGTP/1.0 BOOK /r\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
		"AGTP/1.0 BOOK /r\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"AGTP/1.0 Q /x\r\nX-A: a\r\n b\r\n\r\n",
		"AGTP/1.0 Q /x\nHost: a\n\n",
		"AGTP/1.0 Q /x#f\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"AGTP/2.0 Q /\r\n\r\n",
		"AGTP/1.0 Q /a%zz?b=%20\r\nX-E:\r\nx-e: \t2\t\r\n\r\n",
		"AGTP/1.0 Q /\r\nContent-Length: 5\r\n\r\nab",
		"\x16\x03\x01\x00",
	} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxHeaderBytes: 512, MaxHeaderLines: 16}
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := bytes.NewReader(data)
		br := bufio.NewReaderSize(rd, 16) // small: the head spans refills
		consumed := func() int { return len(data) - rd.Len() - br.Buffered() }
		req, err := ReadRequest(br, lim)
		if consumed() > lim.MaxHeaderBytes {
			t.Fatalf("consumed %d bytes, over the %d-byte limit", consumed(), lim.MaxHeaderBytes)
		}
		if err != nil {
			var e *Error
			switch {
			case errors.As(err, &e):
				if e.Status != 400 && e.Status != 431 || e.Reason == "" || e.Proto != Version && e.Proto != "HTTP/1.1" {
					t.Fatalf("refusal %d %q %q", e.Status, e.Reason, e.Proto)
				}
				if len(e.Explanation) > 400 {
					t.Fatalf("explanation of %d bytes", len(e.Explanation))
				}
			case err == io.EOF && len(data) == 0:
			default:
				t.Fatalf("error %v (%T) is neither a refusal nor a clean EOF", err, err)
			}
			return
		}
		if req.HeadBytes != consumed() || !validToken(req.Method) || req.Target == "" || req.Target[0] != '/' ||
			strings.Contains(req.Target, "#") || req.ContentLength < 0 || req.Header["Transfer-Encoding"] != nil {
			t.Fatalf("parsed %+v after %d bytes", req, consumed())
		}
		body, berr := io.ReadAll(req.Body)
		if int64(len(body)) > req.ContentLength || consumed() != req.HeadBytes+len(body) {
			t.Fatalf("body of %d bytes for Content-Length %d, %d consumed", len(body), req.ContentLength, consumed())
		}
		if berr != nil {
			if berr != io.ErrUnexpectedEOF || int64(len(body)) == req.ContentLength {
				t.Fatalf("body error %v after %d of %d bytes", berr, len(body), req.ContentLength)
			}
			return
		}

		// Written back, it parses to the same request.
		out := &Request{Method: req.Method, Target: req.Target, Header: req.Header, ContentLength: req.ContentLength, Body: bytes.NewReader(body)}
		var buf bytes.Buffer
		if err := out.Write(&buf); err != nil {
			t.Fatalf("Write of a parsed request: %v", err)
		}
		again, err := ReadRequest(bufio.NewReader(&buf), Limits{MaxHeaderBytes: 2 * buf.Len(), MaxHeaderLines: lim.MaxHeaderLines + 1})
		if err != nil {
			t.Fatalf("re-read of\n%q: %v", buf.String(), err)
		}
		body2, err := io.ReadAll(again.Body)
		want := maps.Clone(req.Header)
		want["Content-Length"] = []string{strconv.FormatInt(req.ContentLength, 10)}
		if err != nil || again.Method != req.Method || again.Target != req.Target || again.ContentLength != req.ContentLength ||
			!bytes.Equal(body, body2) || !headersEqual(again.Header, want) {
			t.Fatalf("re-read differs:\n%+v\n%+v", req, again)
		}
	})
}

func headersEqual(a, b http.Header) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool {
		return strings.Join(x, "\x00") == strings.Join(y, "\x00") && len(x) == len(y)
	})
}
