package mcpdoor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fastCase is one request of the differential corpus: its body, the
// header fields it sends beside the base ones (a value "" removes a base
// field; several values send the field several times), and whether the
// fast path answers it (false: the SDK does).
type fastCase struct {
	name   string
	method string // "" is POST
	body   string
	hdr    map[string][]string
	fast   bool
}

// fastCorpus covers the protocol's cases around the fast path's one
// case: valid calls, bad arguments, unknown tools, missing params,
// wrong JSON-RPC versions, each id type, extra members, _meta, each
// protocol version header, Accept and Content-Type variants, bodies
// with whitespace and escapes, big numbers, batches, notifications,
// and what the envelope rules refuse (envelope.go; TestMCPEnvelopeRules
// has more).
func fastCorpus() []fastCase {
	call := func(id, args string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fetch_item","arguments":` + args + `}}`
	}
	v := func(version string) map[string][]string {
		return map[string][]string{"Mcp-Protocol-Version": {version}}
	}
	h := func(k string, vals ...string) map[string][]string { return map[string][]string{k: vals} }
	// A 2026-07-28 call: its header fields, and its body with the _meta
	// triple (clientInfo left out when "").
	h728 := map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"fetch_item"}}
	with := func(base map[string][]string, k string, vals ...string) map[string][]string {
		m := maps.Clone(base)
		m[k] = vals
		if len(vals) == 1 && vals[0] == "" {
			m[k] = []string{""}
		}
		return m
	}
	call728 := func(id, args, caps, info string) string {
		meta := `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` + caps
		if info != "" {
			meta += `,"io.modelcontextprotocol/clientInfo":` + info
		}
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fetch_item","arguments":` + args + `,"_meta":{` + meta + `}}}`
	}
	return []fastCase{
		{name: "valid call", body: call("1", `{"item_id":"1"}`), fast: true},
		{name: "valid call 2025-06-18", body: call("1", `{"item_id":"1"}`), hdr: v("2025-06-18"), fast: true},
		{name: "version 2025-03-26", body: call("1", `{"item_id":"1"}`), hdr: v("2025-03-26")},
		{name: "no version header", body: call("1", `{"item_id":"1"}`), hdr: v("")},
		{name: "version 2026-07-28 without _meta", body: call("1", `{"item_id":"1"}`), hdr: v("2026-07-28")},
		{name: "version 2026-07-28 with _meta", hdr: h728, body: call728("1", `{"item_id":"1"}`, `{}`, ""), fast: true},
		{name: "2026-07-28 clientInfo", hdr: h728, body: call728("1", `{"item_id":"1"}`, `{}`, `{"name":"c","version":"1.0","title":"C <&>"}`), fast: true},
		{name: "2026-07-28 capabilities declared", hdr: h728, fast: true,
			body: call728("1", `{"item_id":"1"}`, `{"elicitation":{"form":{}},"sampling":{},"roots":{"listChanged":true},"extensions":{"io.modelcontextprotocol/tasks":{}},"experimental":{"x":{}}}`, "")},
		{name: "2026-07-28 capabilities roots of the wrong type", hdr: h728, body: call728("1", `{"item_id":"1"}`, `{"roots":{"listChanged":"yes"}}`, "")},
		{name: "2026-07-28 capabilities null", hdr: h728, body: call728("1", `{"item_id":"1"}`, `null`, "")},
		{name: "2026-07-28 capabilities a string", hdr: h728, body: call728("1", `{"item_id":"1"}`, `"all"`, "")},
		{name: "2026-07-28 capabilities missing", hdr: h728,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`},
		{name: "2026-07-28 clientInfo null", hdr: h728, body: call728("1", `{"item_id":"1"}`, `{}`, `null`)},
		{name: "2026-07-28 clientInfo name a number", hdr: h728, body: call728("1", `{"item_id":"1"}`, `{}`, `{"name":5,"version":"1"}`)},
		{name: "2026-07-28 _meta version differs", hdr: h728,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}}}`},
		{name: "2026-07-28 _meta version a number", hdr: h728,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":20260728,"io.modelcontextprotocol/clientCapabilities":{}}}}`},
		{name: "2026-07-28 log level", hdr: h728,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}}}`},
		{name: "2026-07-28 idempotency key", hdr: h728, fast: true,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.github.caddy-rcns/idempotency-key":"k-fast-728"}}}`},
		{name: "2026-07-28 idempotency key replayed", hdr: h728, fast: true,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.github.caddy-rcns/idempotency-key":"k-fast-728"}}}`},
		{name: "2026-07-28 attribution record", hdr: h728, fast: true,
			body: `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.github.caddy-rcns/attribution-record":true}}}`},
		{name: "2026-07-28 argument missing", hdr: h728, body: call728("1", `{}`, `{}`, ""), fast: true},
		{name: "2026-07-28 argument a number", hdr: h728, body: call728("1", `{"item_id":42}`, `{}`, ""), fast: true},
		{name: "2026-07-28 arguments missing", hdr: h728, fast: true,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`},
		{name: "2026-07-28 unknown tool", hdr: with(h728, "Mcp-Name", "nope"),
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`},
		{name: "2026-07-28 recipe tool", hdr: with(h728, "Mcp-Name", "lookup-item"), fast: true, // more in recipeCorpus
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup-item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`},
		{name: "2026-07-28 no Mcp-Method", hdr: with(h728, "Mcp-Method", ""), body: call728("1", `{"item_id":"1"}`, `{}`, "")},
		{name: "2026-07-28 no Mcp-Name", hdr: with(h728, "Mcp-Name", ""), body: call728("1", `{"item_id":"1"}`, `{}`, "")},
		{name: "2026-07-28 Mcp-Method differs", hdr: with(h728, "Mcp-Method", "tools/list"), body: call728("1", `{"item_id":"1"}`, `{}`, "")},
		{name: "2026-07-28 Mcp-Name differs", hdr: with(h728, "Mcp-Name", "fetch_other"), body: call728("1", `{"item_id":"1"}`, `{}`, "")},
		{name: "2026-07-28 Mcp-Name case", hdr: with(h728, "Mcp-Name", "Fetch_Item"), body: call728("1", `{"item_id":"1"}`, `{}`, "")},
		{name: "2026-07-28 Mcp-Name twice", hdr: with(h728, "Mcp-Name", "fetch_item", "fetch_item"), body: call728("1", `{"item_id":"1"}`, `{}`, "")},
		{name: "2026-07-28 Mcp-Param header", hdr: with(h728, "Mcp-Param-Item", "1"), body: call728("1", `{"item_id":"1"}`, `{}`, ""), fast: true}, // a tool without x-mcp-header: ignored by both
		{name: "2026-07-28 Mcp-Param header differing", hdr: with(h728, "Mcp-Param-Item_id", "2"), body: call728("1", `{"item_id":"1"}`, `{}`, ""), fast: true},
		{name: "2026-07-28 without the header version", hdr: with(h728, "Mcp-Protocol-Version", ""), body: call728("1", `{"item_id":"1"}`, `{}`, "")},
		{name: "2026-07-28 notification", hdr: h728,
			body: `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`},
		{name: "2026-07-28 batch", hdr: h728, body: "[" + call728("1", `{"item_id":"1"}`, `{}`, "") + "]"},
		{name: "2025-11-25 with Mcp-Method", hdr: h("Mcp-Method", "tools/call"), body: call("1", `{"item_id":"1"}`)},
		{name: "unsupported version", body: call("1", `{"item_id":"1"}`), hdr: v("2024-01-01")},
		{name: "two version headers", body: call("1", `{"item_id":"1"}`), hdr: h("Mcp-Protocol-Version", "2025-11-25", "2025-06-18")},
		{name: "id string", body: call(`"abc"`, `{"item_id":"1"}`), fast: true},
		{name: "id string escapes", body: call(`"\u00e9\u003c>&\"\\ \u2028"`, `{"item_id":"1"}`), fast: true},
		{name: "id empty string", body: call(`""`, `{"item_id":"1"}`), fast: true},
		{name: "id zero", body: call("0", `{"item_id":"1"}`), fast: true},
		{name: "id negative", body: call("-7", `{"item_id":"1"}`), fast: true},
		{name: "id 15 digits", body: call("999999999999999", `{"item_id":"1"}`), fast: true},
		{name: "id big", body: call("12345678901234567890", `{"item_id":"1"}`)},
		{name: "id fraction", body: call("1.5", `{"item_id":"1"}`)},
		{name: "id exponent", body: call("1e3", `{"item_id":"1"}`)},
		{name: "id null", body: call("null", `{"item_id":"1"}`)},
		{name: "id -0", body: call("-0", `{"item_id":"1"}`)},
		{name: "id 2^53", body: call("9007199254740992", `{"item_id":"1"}`)},
		{name: "id 2^53+1", body: call("9007199254740993", `{"item_id":"1"}`)},
		{name: "id object", body: call(`{"a":1}`, `{"item_id":"1"}`)},
		{name: "notification", body: `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`},
		{name: "jsonrpc 1.0", body: `{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`},
		{name: "jsonrpc missing", body: `{"id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`},
		{name: "params missing", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`},
		{name: "params null", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`},
		{name: "params array", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`},
		{name: "name missing", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}`},
		{name: "name a number", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}`},
		{name: "unknown tool", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{}}}`},
		{name: "tool name escaped", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch\u005fitem","arguments":{"item_id":"1"}}}`, fast: true},
		{name: "recipe tool", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup-item","arguments":{"item_id":"1"}}}`, fast: true},
		{name: "arguments missing", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item"}}`, fast: true},
		{name: "arguments null", body: call("1", `null`)},
		{name: "arguments array", body: call("1", `[1]`)},
		{name: "arguments string", body: call("1", `"x"`)},
		{name: "argument missing", body: call("1", `{}`), fast: true},
		{name: "argument a number", body: call("1", `{"item_id":42}`), fast: true},
		{name: "argument a big number", body: call("1", `{"item_id":1e400}`), fast: true},
		{name: "argument a long integer", body: call("1", `{"item_id":123456789012345678901234567890}`), fast: true},
		{name: "argument a boolean", body: call("1", `{"item_id":true}`), fast: true},
		{name: "argument an object", body: call("1", `{"item_id":{"a":1}}`), fast: true},
		{name: "argument empty", body: call("1", `{"item_id":""}`), fast: true},
		{name: "extra argument", body: call("1", `{"item_id":"1","x":[1,{"y":null}]}`), fast: true},
		{name: "argument with HTML and unicode", body: call("1", `{"item_id":"<b>&amp;\u00e9\u2028é"}`), fast: true},
		{name: "argument with a slash", body: call("1", `{"item_id":"a/b"}`), fast: true},
		{name: "duplicate argument", body: call("1", `{"item_id":"1","item_id":"2"}`)}, // duplicate names anywhere: the SDK
		{name: "whitespace everywhere", body: " \n\t{ \"jsonrpc\" : \"2.0\" ,\r\n \"id\" : 3 , \"method\" : \"tools\\/call\" , \"params\" : { \"name\" : \"fetch_item\" , \"arguments\" : { \"item_id\" : \"\\u0031\" } } } \n", fast: true},
		{name: "members reordered", body: `{"params":{"arguments":{"item_id":"1"},"name":"fetch_item"},"method":"tools/call","id":1,"jsonrpc":"2.0"}`, fast: true},
		{name: "extra top-level member", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}},"foo":1}`},
		{name: "extra params member", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"task":{}}}`},
		{name: "duplicate method", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`},
		{name: "duplicate tool name", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","name":"fetch_item","arguments":{"item_id":"1"}}}`},
		{name: "duplicate id", body: `{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`},
		{name: "member case", body: `{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`},
		{name: "_meta idempotency key", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.github.caddy-rcns/idempotency-key":"k-fast-1"}}}`, fast: true},
		{name: "_meta idempotency key replayed", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.github.caddy-rcns/idempotency-key":"k-fast-1"}}}`, fast: true},
		{name: "_meta idempotency key a number", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.github.caddy-rcns/idempotency-key":5}}}`, fast: true},
		{name: "_meta attribution record", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.github.caddy-rcns/attribution-record":true}}}`, fast: true},
		{name: "_meta empty", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{}}}`, fast: true},
		{name: "_meta null", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":null}}`, fast: true},
		{name: "_meta progress token", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"progressToken":"p1"}}}`},
		{name: "_meta protocol version", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`},
		{name: "Idempotency-Key header", body: call("1", `{"item_id":"1"}`), hdr: h("Idempotency-Key", "k-fast-2"), fast: true},
		{name: "Idempotency-Key header replayed", body: call("1", `{"item_id":"1"}`), hdr: h("Idempotency-Key", "k-fast-2"), fast: true},
		{name: "Idempotency-Key header twice", body: call("1", `{"item_id":"1"}`), hdr: h("Idempotency-Key", "a", "b"), fast: true},
		{name: "Idempotency-Key header and _meta differ", hdr: h("Idempotency-Key", "k-fast-3"),
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.github.caddy-rcns/idempotency-key":"k-other"}}}`, fast: true},
		{name: "Request-ID header", body: call("1", `{"item_id":"1"}`), hdr: h("Request-ID", "req-fast-1"), fast: true},
		{name: "tools/list", body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		{name: "initialize", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`},
		{name: "batch of one call", body: `[` + call("1", `{"item_id":"1"}`) + `]`},
		{name: "batch under 2025-03-26", body: `[` + call("1", `{"item_id":"1"}`) + `,` + call("2", `{"item_id":"2"}`) + `]`, hdr: v("2025-03-26")},
		{name: "batch with a repeated id", body: `[` + call("2", `{"item_id":"1"}`) + `,` + call("2", `{"item_id":"2"}`) + `]`, hdr: v("2025-03-26")},
		{name: "batch with ids 1.5 and 1", body: `[` + call("1.5", `{"item_id":"1"}`) + `,` + call("1", `{"item_id":"2"}`) + `]`, hdr: v("2025-03-26")},
		{name: "trailing garbage", body: call("1", `{"item_id":"1"}`) + ` x`},
		{name: "trailing whitespace", body: call("1", `{"item_id":"1"}`) + " \r\n\t", fast: true},
		{name: "two messages", body: call("1", `{"item_id":"1"}`) + call("2", `{"item_id":"1"}`)},
		{name: "not JSON", body: `{"jsonrpc":`},
		{name: "invalid UTF-8", body: call(`"`+"\xff"+`"`, `{"item_id":"1"}`)},
		{name: "empty body", body: ``},
		{name: "Accept JSON only", body: call("1", `{"item_id":"1"}`), hdr: h("Accept", "application/json")},
		{name: "Accept reversed", body: call("1", `{"item_id":"1"}`), hdr: h("Accept", "text/event-stream, application/json"), fast: true},
		{name: "Accept wildcard", body: call("1", `{"item_id":"1"}`), hdr: h("Accept", "*/*")},
		{name: "Accept with q", body: call("1", `{"item_id":"1"}`), hdr: h("Accept", "application/json;q=0.9, text/event-stream")},
		{name: "Accept twice", body: call("1", `{"item_id":"1"}`), hdr: h("Accept", "application/json", "text/event-stream")},
		{name: "Accept missing", body: call("1", `{"item_id":"1"}`), hdr: h("Accept", "")},
		{name: "Content-Type with charset", body: call("1", `{"item_id":"1"}`), hdr: h("Content-Type", "application/json; charset=utf-8")},
		{name: "Content-Type charset latin1", body: call("1", `{"item_id":"1"}`), hdr: h("Content-Type", "application/json; charset=latin1")},
		{name: "Content-Type twice", body: call("1", `{"item_id":"1"}`), hdr: h("Content-Type", "application/json", "application/json")},
		{name: "initialize protocolVersion a number", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`},
		{name: "Content-Type text", body: call("1", `{"item_id":"1"}`), hdr: h("Content-Type", "text/plain")},
		{name: "Mcp-Session-Id", body: call("1", `{"item_id":"1"}`), hdr: h("Mcp-Session-Id", "s1")},
		{name: "Last-Event-ID", body: call("1", `{"item_id":"1"}`), hdr: h("Last-Event-ID", "x_1")},
		{name: "GET", method: http.MethodGet, hdr: h("Accept", "text/event-stream")},
		{name: "DELETE", method: http.MethodDelete},
	}
}

// volatile are the answer's values that differ between two gateways
// answering the same request (ids, records, times): replaced by their
// kind before comparing.
var volatile = []*regexp.Regexp{
	regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`),
	regexp.MustCompile(`\b[0-9a-f]{64}\b`),
	regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`),
	regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`),
}

// normalized is s with its volatile values replaced.
func normalized(s string) string {
	for _, re := range volatile {
		s = re.ReplaceAllString(s, "<volatile>")
	}
	return s
}

// diffDoors are two doors over their own engines and upstream state,
// one with the fast path and one without it (the go-sdk alone), and
// the number of requests their upstream got.
type diffDoors struct {
	fast, sdk *Door
	hits      atomic.Int64
}

// newDiffDoors starts the upstream and builds the two doors, their
// engines' configs passed through adjust.
func newDiffDoors(t *testing.T, adjust ...func(*engine.Config)) *diffDoors {
	dd := &diffDoors{}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dd.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"id": strings.TrimPrefix(r.URL.Path, "/items/"), "name": "item <&> é", "price": 12.5})
		_, _ = w.Write(b)
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up.Listener = l
	up.Start()
	t.Cleanup(up.Close)
	dd.fast = newTestDoor(t, testEngineWith(t, up.URL, adjust...), nil)
	dd.sdk = newTestDoor(t, testEngineWith(t, up.URL, adjust...), &Config{DisableFastPath: true})
	return dd
}

// diffBase are the header fields every request of the corpus sends.
var diffBase = map[string][]string{"Agent-Id": {"677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"},
	"Authority-Scope": {"bench:read"}, "Content-Type": {"application/json"},
	"Accept": {"application/json, text/event-stream"}, "Mcp-Protocol-Version": {"2025-11-25"}}

// serveCase is d's answer to c, from a loopback client.
func serveCase(d *Door, c fastCase) *httptest.ResponseRecorder {
	method := cmp.Or(c.method, http.MethodPost)
	r := httptest.NewRequest(method, DefaultMCPPath, strings.NewReader(c.body))
	r.Host, r.RemoteAddr = "127.0.0.1", "127.0.0.1:40000"
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}))
	for k, v := range diffBase {
		r.Header[k] = v
	}
	for k, v := range c.hdr {
		k = http.CanonicalHeaderKey(k)
		if len(v) == 1 && v[0] == "" {
			delete(r.Header, k)
		} else {
			r.Header[k] = v
		}
	}
	w := httptest.NewRecorder()
	d.Serve(w, r)
	return w
}

// serve sends c to both doors, holds that the fast path answered it
// exactly when c says so and that the two answers are the same
// (sameAnswer), and returns the fast door's.
func (dd *diffDoors) serve(t *testing.T, c fastCase) *httptest.ResponseRecorder {
	t.Helper()
	before := dd.fast.fastServed.Load()
	got, want := serveCase(dd.fast, c), serveCase(dd.sdk, c)
	if served := dd.fast.fastServed.Load() > before; served != c.fast {
		t.Errorf("fast path answered: %v, want %v", served, c.fast)
	}
	if dd.sdk.fastServed.Load() != 0 {
		t.Fatal("the door with fast_path off answered on the fast path")
	}
	sameAnswer(t, got, want)
	return got
}

// sameAnswer holds two answers identical: status, header fields and
// body bytes (volatile values aside).
func sameAnswer(t *testing.T, got, want *httptest.ResponseRecorder) {
	t.Helper()
	if got.Code != want.Code {
		t.Errorf("status %d, the SDK's %d", got.Code, want.Code)
	}
	keys := func(h http.Header) []string {
		var ks []string
		for k := range h {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if g, w := keys(got.Header()), keys(want.Header()); !slices.Equal(g, w) {
		t.Errorf("header fields %v, the SDK's %v", g, w)
	}
	for k, wv := range want.Header() {
		gv := got.Header()[k]
		if normalized(strings.Join(gv, "\n")) != normalized(strings.Join(wv, "\n")) {
			t.Errorf("%s: %q, the SDK's %q", k, gv, wv)
		}
	}
	if g, w := bodyOf(got.Body.Bytes()), bodyOf(want.Body.Bytes()); g != w {
		t.Errorf("body\n%s\nthe SDK's\n%s", g, w)
	}
}

// TestMCPFastPathDifferential sends every request of fastCorpus to a
// door with the fast path and to one without it (the go-sdk alone),
// each over its own engine and upstream state, and holds the two
// answers identical: status, header fields and body bytes (ids,
// records and times each gateway mints itself aside). It also holds
// that the fast path answered exactly the cases it claims.
func TestMCPFastPathDifferential(t *testing.T) {
	dd := newDiffDoors(t)
	for _, c := range fastCorpus() {
		t.Run(c.name, func(t *testing.T) { dd.serve(t, c) })
	}
}

// bodyOf is an answer's body, normalized; a batch's answers (which the
// SDK writes in the order the calls finish) sorted.
func bodyOf(b []byte) string {
	var batch []json.RawMessage
	if len(b) == 0 || b[0] != '[' || json.Unmarshal(b, &batch) != nil {
		return normalized(string(b))
	}
	parts := make([]string, len(batch))
	for i, m := range batch {
		parts[i] = normalized(string(m))
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, ",") + "]"
}

// TestErrorStatus: the HTTP status of a JSON-RPC error the fast path
// answers to a 2026-07-28 client is the SDK's (SEP-2575): 404 for
// -32601; 400 for -32602, -32022 and -32021; 200 (0) for any other
// code, for an error that is not a JSON-RPC one, and for none. No Tier B
// call answers those codes today (its argument faults are tool
// results), so the corpus cannot reach them.
func TestErrorStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{&jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound}, http.StatusNotFound},
		{&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams}, http.StatusBadRequest},
		{&jsonrpc.Error{Code: mcp.CodeUnsupportedProtocolVersion}, http.StatusBadRequest},
		{&jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities}, http.StatusBadRequest},
		{fmt.Errorf("wrapped: %w", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams}), http.StatusBadRequest},
		{&jsonrpc.Error{Code: jsonrpc.CodeInternalError}, 0},
		{errors.New("not JSON-RPC"), 0},
		{nil, 0},
	} {
		if got := errorStatus(c.err); got != c.want {
			t.Errorf("errorStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestWithResultTypeComplete: the member goes last, after a comma when
// the object has members.
func TestWithResultTypeComplete(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:            `{"resultType":"complete"}`,
		`{"a":1}`:       `{"a":1,"resultType":"complete"}`,
		"{\"a\":{}}\n ": `{"a":{},"resultType":"complete"}`,
	} {
		got, err := withResultTypeComplete(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("withResultTypeComplete(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{``, `[]`, `null`, `{`} {
		if _, err := withResultTypeComplete(json.RawMessage(in)); err == nil {
			t.Errorf("withResultTypeComplete(%q): no error", in)
		}
	}
}

// headedEndpoint is the bench's fetch-item endpoint at FETCH
// /headed/{item_id}, its path parameter carrying an x-mcp-header
// annotation: the go-sdk requires a 2026-07-28 call of its tool to send
// the argument again in Mcp-Param-Item.
func headedEndpoint(t *testing.T) []byte {
	raw, err := os.ReadFile(filepath.Join("..", "..", "scripts", "bench", "docs", "endpoints", "fetch-item.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, r := range [][2]string{
		{"\npath: /items/{item_id}\n", "\npath: /headed/{item_id}\n"},
		{"item_id: {type: string, minLength: 1}", "item_id: {type: string, minLength: 1, x-mcp-header: Item}"},
	} {
		if !strings.Contains(doc, r[0]) {
			t.Fatalf("fetch-item.yaml has no %q to replace", r[0])
		}
		doc = strings.Replace(doc, r[0], r[1], 1)
	}
	return []byte(doc)
}

// TestMCPFastPathParamHeaders: a tool whose schema binds an argument to
// a header (x-mcp-header) is left to the go-sdk at 2026-07-28, which
// requires and checks the Mcp-Param-* field: without it the call is
// refused (-32020) and reaches no upstream, on both doors alike; with
// it, it runs. Before 2026-07-28 the SDK checks no such field and the
// fast path serves the tool.
func TestMCPFastPathParamHeaders(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fetch-headed.yaml"), headedEndpoint(t), 0o644); err != nil {
		t.Fatal(err)
	}
	dd := newDiffDoors(t, func(c *engine.Config) { c.Endpoints = append(c.Endpoints, dir) })
	tool := ""
	for _, tl := range dd.fast.tools {
		if tl.path == "/headed/{item_id}" {
			tool = tl.name
		}
	}
	if tool == "" || !dd.fast.tools[slices.IndexFunc(dd.fast.tools, func(tl *mcpTool) bool { return tl.name == tool })].paramHeaders {
		t.Fatalf("no tool for the headed endpoint, or its x-mcp-header is not seen (%q)", tool)
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"item_id":"7"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	h728 := map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {tool}}
	before := dd.hits.Load()
	got := dd.serve(t, fastCase{name: "2026-07-28 without Mcp-Param-Item", hdr: h728, body: body})
	if got.Code != http.StatusBadRequest || !strings.Contains(got.Body.String(), "Mcp-Param-Item") || dd.hits.Load() != before {
		t.Errorf("without Mcp-Param-Item: %d %s, %d upstream calls; want the SDK's 400 and none", got.Code, got.Body, dd.hits.Load()-before)
	}
	with := maps.Clone(h728)
	with["Mcp-Param-Item"] = []string{"7"}
	if got := dd.serve(t, fastCase{name: "2026-07-28 with Mcp-Param-Item", hdr: with, body: body}); got.Code != http.StatusOK || !strings.Contains(got.Body.String(), `"outcome":"succeeded"`) {
		t.Errorf("with Mcp-Param-Item: %d %s", got.Code, got.Body)
	}
	old := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"item_id":"7"}}}`
	if got := dd.serve(t, fastCase{name: "2025-11-25", body: old, fast: true}); got.Code != http.StatusOK {
		t.Errorf("2025-11-25: %d %s", got.Code, got.Body)
	}
}
