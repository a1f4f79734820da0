package caddymodule

import (
	"net/http/httptest"
	"strconv"
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

// BenchmarkMCPRecipeCall is BenchmarkMCPToolCall for a synthesis: the
// bench's lookup-item recipe on a fresh path each call (optimistic,
// 263; the g-synthesis scenario of BenchmarkServe), on the HTTP door
// and as the recipe's MCP tool:
//
//	http-door     LOOKUP /item/… with Allow-RCNS: true
//	mcp-20251125  tools/call lookup-item {"item_id":"1","path":"/item/…"}
//	mcp-20260728  the same with the _meta the go-sdk client sends
func BenchmarkMCPRecipeCall(b *testing.B) {
	up := benchUpstream(b)
	h := benchHandlerWith(b, up.URL, false, "", "", func(h *Handler) { h.MCP = &mcpdoor.Config{} })
	negotiate := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true", "Content-Type": "application/json"}
	runs := 0
	b.Run("http-door", func(b *testing.B) {
		runs++
		prefix := "/item/bh-" + strconv.Itoa(runs) + "-"
		loop(b, func(i int) {
			serveOnce(b, h, notFound, "LOOKUP", prefix+strconv.Itoa(i), `{"parameters":{"item_id":"1"}}`, negotiate, 263)
		})
	})
	const client20260728 = `,"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"bench-client","version":"1.0.0"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	for _, c := range []struct{ name, version, meta string }{
		{"mcp-20251125", "2025-11-25", ""},
		{"mcp-20260728", "2026-07-28", client20260728},
	} {
		b.Run(c.name, func(b *testing.B) {
			runs++
			prefix := "/item/bm-" + strconv.Itoa(runs) + "-"
			hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Content-Type": "application/json",
				"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": c.version}
			if c.version >= "2026-07-28" {
				hdr["Mcp-Method"], hdr["Mcp-Name"] = "tools/call", "lookup-item"
			}
			body := func(i int) string {
				return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup-item","arguments":{"item_id":"1","path":"` +
					prefix + strconv.Itoa(i) + `"}` + c.meta + `}}`
			}
			rec := httptest.NewRecorder()
			if err := h.ServeHTTP(rec, benchRequest(rec, "POST", "/mcp", body(-1), hdr), notFound); err != nil || rec.Code != 200 ||
				!strings.Contains(rec.Body.String(), `"io.github.caddy-rcns/agtp-status":263`) {
				b.Fatalf("tools/call: %v %d %s", err, rec.Code, rec.Body)
			}
			loop(b, func(i int) { serveOnce(b, h, notFound, "POST", "/mcp", body(i), hdr, 200) })
		})
	}
}
