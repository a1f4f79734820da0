package caddymodule

import (
	"bytes"
	"compress/gzip"
	"testing"
)

// TestContentEncodingRefused: a body sent with a content coding is 415
// unsupported-content-encoding naming the coding, with Accept-Encoding:
// identity (RFC 9110 §15.5.16, §12.5.3); it was read as JSON and
// refused as 400 invalid-json "syntax error at byte 0".
func TestContentEncodingRefused(t *testing.T) {
	g := newTestGateway(t)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write([]byte(`{"parameters":{}}`))
	_ = zw.Close()
	plain := []byte(`{"parameters":{}}`)
	tests := []struct {
		name, encoding, method, target string
		agent                          bool
		body                           []byte
		coding                         string // named in the refusal; "" when served
	}{
		{name: "gzip", encoding: "gzip", method: "DISCOVER", target: "/methods", agent: true, body: zipped.Bytes(), coding: `"gzip"`},
		{name: "gzip anonymous", encoding: "gzip", method: "DISCOVER", target: "/", body: zipped.Bytes(), coding: `"gzip"`},
		{name: "gzip Tier B", encoding: "gzip", method: "FETCH", target: "/items/1", agent: true, body: zipped.Bytes(), coding: `"gzip"`},
		{name: "br on a plain body", encoding: "br", method: "DISCOVER", target: "/methods", agent: true, body: plain, coding: `"br"`},
		{name: "list", encoding: "identity, GZIP", method: "DISCOVER", target: "/methods", agent: true, body: zipped.Bytes(), coding: `"GZIP"`},
		{name: "identity", encoding: "identity", method: "DISCOVER", target: "/methods", agent: true, body: plain},
		{name: "no body", encoding: "gzip", method: "DISCOVER", target: "/methods", agent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Content-Encoding": tc.encoding, "Content-Type": "application/json"}
			if tc.agent {
				hdr["Agent-ID"], hdr["Authority-Scope"] = benchAgent, testScope
			}
			a := g.serve(t, tc.method, tc.target, hdr, bytes.NewReader(tc.body), int64(len(tc.body)))
			if tc.coding == "" {
				if a.status != 200 {
					t.Fatalf("answer %s; want 200", a)
				}
				return
			}
			wantError(t, a, 415, "unsupported-content-encoding", "Content-Encoding "+tc.coding+" is not supported")
			wantAGTPAnswer(t, a)
			if got := a.hdr("Accept-Encoding"); got != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", got)
			}
		})
	}
	if a := g.do(t, "DISCOVER", "/methods", map[string]any{"parameters": map[string]any{}}); a.hdr("Accept-Encoding") != "" {
		t.Errorf("an answer to a plain body carries Accept-Encoding %q", a.hdr("Accept-Encoding"))
	}
}
