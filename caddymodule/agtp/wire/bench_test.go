package wire

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// benchHead is a signed agent request as rcns-agent sends it.
const benchHead = "Agent-ID: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n" +
	"Authority-Scope: rcns:negotiate, hotel:read, hotel:book\r\nAllow-RCNS: true\r\n" +
	"Content-Type: application/json\r\nContent-Digest: sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:\r\n" +
	"Host: 127.0.0.1:4480\r\nIdempotency-Key: 5f0c6c1e2a3b4c5d\r\n" +
	"Signature: sig1=:MEUCIQDXrwtkKbHFkHSyrwlDW71IO9WXvTnT2ZzRyxR7JJtK7wIgd5Hb4VZ9c1SoB3vZ8wZ0C7uHwrAyd7m5sZyZbW0vpl8=:\r\n" +
	"Signature-Input: sig1=(\"@method\" \"@authority\" \"@path\" \"agent-id\" \"content-type\" \"content-digest\");created=1800000000;expires=1800000060;nonce=\"n\";keyid=\"k\"\r\n" +
	"Content-Length: 18\r\n\r\n{\"guest_id\":\"g-1\"}"

// BenchmarkReadRequest parses one request head and reads its body;
// BenchmarkHTTPReadRequest does the same with net/http for the HTTP
// door's framing of the same request.
func BenchmarkReadRequest(b *testing.B) {
	in := "AGTP/1.0 BOOK /room?dry=1\r\n" + benchHead
	benchRead(b, in, func(br *bufio.Reader) (io.Reader, error) {
		req, err := ReadRequest(br, Limits{})
		if err != nil {
			return nil, err
		}
		return req.Body, nil
	})
}

func BenchmarkHTTPReadRequest(b *testing.B) {
	in := "BOOK /room?dry=1 HTTP/1.1\r\n" + benchHead
	benchRead(b, in, func(br *bufio.Reader) (io.Reader, error) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return nil, err
		}
		return req.Body, nil
	})
}

func benchRead(b *testing.B, in string, read func(*bufio.Reader) (io.Reader, error)) {
	rd := strings.NewReader(in)
	br := bufio.NewReader(rd)
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(in)
		br.Reset(rd)
		body, err := read(br)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := io.ReadFull(body, buf[:18]); n != 18 {
			b.Fatal("short body")
		}
	}
}

// BenchmarkResponseWrite writes a 263 with the AGTP response headers.
func BenchmarkResponseWrite(b *testing.B) {
	resp := &Response{Status: 263, Header: http.Header{
		"Server-ID": {"gw"}, "Response-ID": {"0190a4b2-7c3d-7e5f-8a9b-0c1d2e3f4a5b"}, "AGTP-API-Version": {"3"},
		"Attribution-Record": {strings.Repeat("x", 600)}, "Audit-ID": {strings.Repeat("a", 64)},
		"Agent-ID": {strings.Repeat("0", 64)}, "Contract-Synthesized": {"syn-1"}, "Content-Type": {"application/vnd.agtp+json"},
	}, Body: bytes.Repeat([]byte("x"), 300)}
	b.ReportAllocs()
	for b.Loop() {
		if err := resp.Write(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
