package caddymodule

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
)

// BenchmarkMCPToolCall compares, in one run against one handler and the
// same in-process upstream, a Tier B call on the HTTP door with the same
// endpoint called as an MCP tool (one tools/call per HTTP request, as
// MCP clients send them), under the revision the SDK's client speaks
// (2026-07-28) and the one most other clients speak (2025-11-25):
//
//	http-door     FETCH /items/1 (the c-tierB scenario of BenchmarkServe)
//	mcp-20251125  tools/call fetch_item {"item_id":"1"}, MCP-Protocol-Version 2025-11-25
//	mcp-20260728  the same call with the 2026-07-28 per-request _meta
//	mcp-20260728-client  the same with the _meta the go-sdk client sends
//	              (its clientInfo, and capabilities it declares)
//
// cpu-ns/op is the process's CPU time per request (getrusage), the
// number to compare on a shared machine; the MCP door's share is the
// difference between the rows.
func BenchmarkMCPToolCall(b *testing.B) {
	up := benchUpstream(b)
	h := benchHandlerWith(b, up.URL, false, "", "", func(h *Handler) { h.MCP = &mcpdoor.Config{} })
	read := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"}
	mcpHdr := func(version string) map[string]string {
		return map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json",
			"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": version}
	}
	const call20251125 = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`
	const call20260728 = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	const call20260728Client = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},` +
		`"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"extensions":{"io.modelcontextprotocol/tasks":{}}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"bench-client","version":"1.0.0"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`

	b.Run("http-door", func(b *testing.B) {
		loop(b, func(int) { serveOnce(b, h, notFound, "FETCH", "/items/1", "", read, 200) })
	})
	for _, c := range []struct{ name, version, body string }{
		{"mcp-20251125", "2025-11-25", call20251125},
		{"mcp-20260728", "2026-07-28", call20260728},
		{"mcp-20260728-client", "2026-07-28", call20260728Client},
	} {
		b.Run(c.name, func(b *testing.B) {
			hdr := mcpHdr(c.version)
			if c.version >= "2026-07-28" { // the revision's mirrored headers
				hdr["Mcp-Method"], hdr["Mcp-Name"] = "tools/call", "fetch_item"
			}
			rec := httptest.NewRecorder()
			if err := h.ServeHTTP(rec, benchRequest(rec, "POST", "/mcp", c.body, hdr), notFound); err != nil || rec.Code != 200 ||
				!strings.Contains(rec.Body.String(), `"outcome":"succeeded"`) {
				b.Fatalf("tools/call: %v %d %s", err, rec.Code, rec.Body)
			}
			loop(b, func(int) { serveOnce(b, h, notFound, "POST", "/mcp", c.body, hdr, 200) })
		})
	}
}
