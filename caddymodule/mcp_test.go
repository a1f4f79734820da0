package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// mcpGateway provisions the bench gateway with the MCP door (adjust
// changes the handler before Provision) and serves it on 127.0.0.1; it
// returns the handler and the door's URL.
func mcpGateway(t testing.TB, adjust ...func(*Handler)) (*Handler, string) {
	t.Helper()
	return mcpGatewayTo(t, benchUpstream(t).URL, adjust...)
}

// mcpGatewayTo is mcpGateway in front of the upstream at up.
func mcpGatewayTo(t testing.TB, up string, adjust ...func(*Handler)) (*Handler, string) {
	t.Helper()
	h := benchHandlerWith(t, up, false, "", "", append([]func(*Handler){func(h *Handler) { h.MCP = &mcpdoor.Config{} }}, adjust...)...)
	srv := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, benchServer)
		if err := h.ServeHTTP(w, r, notFound); err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	}))
	return h, srv.URL + "/mcp"
}

// headerTransport adds fixed header fields to every request.
type headerTransport struct {
	h    map[string]string
	base http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// mcpClient connects the SDK's client to url sending hdr on every
// request.
func mcpClient(t testing.TB, url string, hdr map[string]string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "rcns-test", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: headerTransport{h: hdr, base: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestMCPCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"two paths", "mcp /a /b", "at most one argument"},
		{"twice", "mcp\n\t\tmcp /x", "mcp is set twice"},
		{"unknown subdirective", "mcp {\n\t\t\tbogus\n\t\t}", `mcp: unknown subdirective "bogus"`},
		{"rename arity", "mcp {\n\t\t\trename a\n\t\t}", "rename: want <tool> <name>"},
		{"rename twice", "mcp {\n\t\t\trename a b\n\t\t\trename a c\n\t\t}", "rename a is given twice"},
		{"bad size", "mcp {\n\t\t\tmax_request_body lots\n\t\t}", "not a size"},
		{"bad depth", "mcp {\n\t\t\tmax_json_depth 0\n\t\t}", "not a positive integer"},
		{"bad batch", "mcp {\n\t\t\tmax_batch none\n\t\t}", "max_batch: \"none\" is not a positive integer"},
		{"negative timeout", "mcp {\n\t\t\ttimeout -1s\n\t\t}", "must be a positive duration"},
		{"negative task_after", "mcp {\n\t\t\ttask_after -1s\n\t\t}", "must be a positive duration"},
		{"task_after twice", "mcp {\n\t\t\ttask_after 1s\n\t\t\ttask_after 2s\n\t\t}", "task_after is set twice"},
		{"page_size twice", "mcp {\n\t\t\tpage_size 1\n\t\t\tpage_size 2\n\t\t}", "page_size is set twice"},
		{"test_agent arity", "mcp {\n\t\t\ttest_agent a b\n\t\t}", "exactly one argument"},
		{"bad bool", "mcp {\n\t\t\tdns_rebinding_protection maybe\n\t\t}", "not true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := ":8080 {\n\trcns {\n\t\t" + tc.body + "\n\t}\n}\n"
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestMCPCaddyfileTaskAfter: task_after reaches the mcp block's JSON.
func TestMCPCaddyfileTaskAfter(t *testing.T) {
	src := ":8080 {\n\trcns {\n\t\tmcp {\n\t\t\ttask_after 1500ms\n\t\t}\n\t}\n}\n"
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil || !strings.Contains(string(out), `"task_after":1500000000`) {
		t.Fatalf("adapted: %v\n%s", err, out)
	}
}

// mcpPost sends one raw MCP message to url.
func mcpPost(t testing.TB, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

const listMsg = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`

// TestMCPDoorRefusals: what the door refuses before the SDK reads the
// message, with the AGTP error body.
func TestMCPDoorRefusals(t *testing.T) {
	_, url := mcpGateway(t, func(h *Handler) {
		h.MCP.MaxRequestBody = 4096
		h.MCP.MaxJSONDepth = 8
		h.MCP.MaxBatch = 2
		h.MCP.AllowedOrigins = []string{"https://console.example"}
	})
	list := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{}}`, id)
	}
	agent := map[string]string{"Agent-ID": benchAgent}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"Agent-ID": benchAgent}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	deep := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"a":` + strings.Repeat("[", 10) + strings.Repeat("]", 10) + `}}}`
	for _, tc := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		reason string
	}{
		{"no Agent-ID", listMsg, nil, 401, "agent-unauthenticated"},
		{"unknown agent", listMsg, with("Agent-ID", strings.Repeat("a", 64)), 401, "agent-unauthenticated"},
		{"malformed Agent-ID", listMsg, with("Agent-ID", "nope"), 400, "invalid-canonical-id"},
		{"rebinding Host", listMsg, with("Host", "evil.example"), 403, "host-refused"},
		{"foreign Origin", listMsg, with("Origin", "https://evil.example"), 403, "origin-refused"},
		{"too large", `{"x":"` + strings.Repeat("a", 5000) + `"}`, agent, 413, "body-too-large"},
		{"too deep", deep, agent, 400, "invalid-json"},
		{"gzip Content-Encoding", listMsg, with("Content-Encoding", "gzip"), 415, "unsupported-content-encoding"},
		{"a coding after identity", listMsg, with("Content-Encoding", "identity, br"), 415, "unsupported-content-encoding"},
		{"identity Content-Encoding", listMsg, with("Content-Encoding", "identity"), 200, ""},
		{"batch over max_batch", "[" + list(1) + "," + list(2) + "," + list(3) + "]", with("Request-ID", "01a23ab6-50e5-70b5-8429-d5d84e7d6099", "Task-ID", "task-1"), 400, "batch-too-large"},
		{"batch over max_batch, duplicate keys first", ` [{"id":1,"id":2},` + list(2) + "," + list(3) + "]", agent, 400, "batch-too-large"},
		{"batch within max_batch", "[" + list(1) + "," + list(2) + "]", agent, 200, ""},
		{"allowed Origin", listMsg, with("Origin", "https://console.example"), 200, ""},
		{"own Origin", listMsg, with("Origin", strings.TrimSuffix(url, "/mcp")), 200, ""},
		{"localhost Host", listMsg, with("Host", "localhost:1"), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, hd, body := mcpPost(t, url, tc.body, tc.hdr)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if tc.reason == "" {
				if !strings.Contains(body, `"tools"`) {
					t.Fatalf("no tool list: %s", body)
				}
				return
			}
			var b map[string]any
			if err := json.Unmarshal([]byte(body), &b); err != nil || b["reason"] != tc.reason || b["path"] != "/mcp" {
				t.Fatalf("body %s, want reason %s", body, tc.reason)
			}
			if tc.reason == "unsupported-content-encoding" && hd.Get("Accept-Encoding") != "identity" {
				t.Errorf("415 without Accept-Encoding: identity: %v", hd)
			}
			if hd.Get("Server-ID") != "rcns-bench" {
				t.Errorf("Server-ID = %q", hd.Get("Server-ID"))
			}
			// A refusal after identity names the identified caller, as on
			// the other doors; one before it echoes a well-formed Agent-ID.
			if tc.name == "batch over max_batch" && (hd.Get("Request-ID") != "01a23ab6-50e5-70b5-8429-d5d84e7d6099" || hd.Get("Task-ID") != "task-1") {
				t.Errorf("batch refusal does not echo Request-ID and Task-ID: %v", hd)
			}
			if tc.reason == "batch-too-large" || tc.reason == "invalid-json" {
				if hd.Get("Agent-ID") != benchAgent || hd.Get("Trust-Tier") == "" || hd.Get("Verification-Path") != "header" || hd.Get("Owner-ID") != "bench-ops" {
					t.Errorf("refusal after identity without the caller's headers: %v", hd)
				}
			}
		})
	}
}

// TestMCPTestAgent: with test_agent, a loopback caller without
// Agent-ID acts as that agent.
func TestMCPTestAgent(t *testing.T) {
	_, url := mcpGateway(t, func(h *Handler) { h.MCP.TestAgent = "rcns-bench-agent" })
	status, _, body := mcpPost(t, url, listMsg, nil)
	if status != 200 || !strings.Contains(body, "fetch_item") {
		t.Fatalf("tools/list without Agent-ID under test_agent: %d %s", status, body)
	}
}

// TestMCPCalls: calls in process through the SDK's client: results,
// protocol faults and the contract of a regex recipe.
func TestMCPCalls(t *testing.T) {
	_, url := mcpGateway(t)
	s := mcpClient(t, url, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"})
	ctx := context.Background()
	call := func(name string, args map[string]any, meta mcp.Meta) (map[string]any, *mcp.CallToolResult, error) {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
		if err != nil {
			return nil, nil, err
		}
		var sc map[string]any
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &sc)
		return sc, res, nil
	}

	sc, res, err := call("fetch_item", map[string]any{"item_id": "7"}, nil)
	if err != nil || sc["outcome"] != "succeeded" || sc["result"].(map[string]any)["id"] != "7" || res.IsError {
		t.Fatalf("fetch_item: %v %v", err, sc)
	}
	if _, has := res.Meta[mcpdoor.MCPMetaAttributionRecord]; has || res.Meta[mcpdoor.MCPMetaAuditID] == nil {
		t.Errorf("fetch_item _meta = %v, want the Audit-ID and no Attribution-Record (meta_attribution_record off)", res.Meta)
	}
	// The text holds the result itself after the lead-in (clients that
	// hand only the text to the model show it the result).
	if txt := res.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(txt, "FETCH /items/7 answered 200; the result follows.\n") || !strings.Contains(txt, `"id":"7"`) {
		t.Errorf("text = %q", txt)
	}
	// Asked for in the call's _meta, the record comes.
	if _, res, err = call("fetch_item", map[string]any{"item_id": "8"}, mcp.Meta{mcpdoor.MCPMetaAttributionRecord: true}); err != nil || res.Meta[mcpdoor.MCPMetaAttributionRecord] == nil {
		t.Errorf("asked for the record: %v %v", err, res.Meta)
	}

	// Argument mistakes are tool errors the model reads (SEP-1303).
	argError := func(name string, args map[string]any, reason, want string) {
		t.Helper()
		sc, res, err := call(name, args, nil)
		e, _ := sc["error"].(map[string]any)
		if err != nil || res == nil || !res.IsError || e["code"] != reason || !strings.Contains(e["message"].(string), want) ||
			!strings.Contains(res.Content[0].(*mcp.TextContent).Text, "Fix the arguments") {
			t.Fatalf("%s %v: %v %v, want an isError result %s mentioning %q", name, args, err, sc, reason, want)
		}
	}
	argError("fetch_item", map[string]any{"item_id": "7", "colour": "red"}, "invalid-input", "")
	argError("fetch_item", map[string]any{}, "invalid-parameter", `missing argument "item_id"`)
	argError("fetch_item", map[string]any{"item_id": map[string]any{}}, "invalid-parameter", "must be a string (a number or boolean is taken as its text)")
	var je *jsonrpc.Error
	_, _, err = call("no_such_tool", nil, nil)
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("unknown tool: %v", err)
	}

	sc, _, err = call("lookup-item", map[string]any{"path": "/item/u-1", "item_id": "3"}, nil)
	if err != nil || sc["status"] != float64(263) || sc["synthesis_id"] == nil || sc["contract"] == nil {
		t.Fatalf("lookup-item synthesis: %v %v", err, sc)
	}
	sid := sc["synthesis_id"]
	sc, _, err = call("lookup-item", map[string]any{"path": "/item/u-1", "item_id": "3"}, nil)
	if err != nil || sc["status"] != float64(200) || sc["synthesis_id"] != sid {
		t.Fatalf("lookup-item by pair: %v %v", err, sc)
	}
	argError("lookup-item", map[string]any{"path": "/elsewhere", "item_id": "3"}, "invalid-parameter", "does not match the recipe's pattern")
	sc, _, err = call("discover_contracts", map[string]any{"limit": 1}, nil)
	if list, _ := sc["result"].([]any); err != nil || len(list) != 1 {
		t.Fatalf("discover_contracts: %v %v", err, sc)
	}
	// The listings' arguments meet the inputSchema they advertise.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"discover_contracts", map[string]any{"bogus": 1}},
		{"discover_contracts", map[string]any{"limit": 5000}},
		{"discover_contracts", map[string]any{"limit": 0}},
		{"discover_contracts", map[string]any{"cursor": ""}},
		{"discover_patterns", map[string]any{"x": 1}},
	} {
		argError(c.tool, c.args, "invalid-input", "input does not match input_schema")
	}

	meta := mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: "k-1"}
	sc, _, err = call("fetch_item", map[string]any{"item_id": "9"}, meta)
	if err != nil || sc["outcome"] != "succeeded" {
		t.Fatalf("keyed call: %v %v", err, sc)
	}
	_, res, err = call("fetch_item", map[string]any{"item_id": "9"}, meta)
	if err != nil || res.Meta[mcpdoor.MCPMetaIdempotentReplayed] != true {
		t.Fatalf("keyed repeat not replayed: %v %v", err, res.Meta)
	}
	sc, res, err = call("fetch_item", map[string]any{"item_id": "10"}, meta)
	if err != nil || !res.IsError || sc["error"].(map[string]any)["code"] != "idempotency-key-reused" {
		t.Fatalf("key reused with other arguments: %v %v", err, sc)
	}
	sc, res, err = call("fetch_item", map[string]any{"item_id": "9"}, mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: 7})
	if e, _ := sc["error"].(map[string]any); err != nil || !res.IsError || !strings.Contains(e["message"].(string), "must be a string") {
		t.Fatalf("non-string key: %v %v", err, sc)
	}
}

// TestMCPOldRevision: a client on 2025-03-26, which has no
// structuredContent, gets the structured result as its text.
func TestMCPOldRevision(t *testing.T) {
	_, url := mcpGateway(t)
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Mcp-Protocol-Version": "2025-03-26"}
	status, _, body := mcpPost(t, url, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"4"}}}`, hdr)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	var msg struct {
		Result mcp.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil {
		t.Fatal(err)
	}
	text := msg.Result.Content[0].(*mcp.TextContent).Text
	if !json.Valid([]byte(text)) || !bytes.Contains([]byte(text), []byte(`"outcome":"succeeded"`)) {
		t.Fatalf("text for 2025-03-26 = %q", text)
	}
}

// TestMCPHeaderModeOffLoopback: under identity header the door serves
// only requests that arrived on a loopback address, test_agent or not.
func TestMCPHeaderModeOffLoopback(t *testing.T) {
	h, _ := mcpGateway(t, func(h *Handler) { h.MCP.TestAgent = "rcns-bench-agent" })
	for _, agent := range []string{benchAgent, ""} {
		rec := httptest.NewRecorder()
		hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
		if agent != "" {
			hdr["Agent-ID"] = agent
		}
		r := benchRequest(rec, "POST", "/mcp", listMsg, hdr)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8080}))
		r.Host = "gw.example"
		if err := h.ServeHTTP(rec, r, notFound); err != nil {
			t.Fatal(err)
		}
		if rec.Code != 401 || !strings.Contains(rec.Body.String(), `"reason":"identity-mode-refused"`) {
			t.Fatalf("Agent-ID %q on a non-loopback listener: %d %s", agent, rec.Code, rec.Body)
		}
	}
}

// TestMCPHeaderSpelling: every header field the MCP door answers with is
// spelled as the AGTP wire spells it ("Owner-ID", not "Owner-Id"), on a
// tools/list and on a tools/call.
func TestMCPHeaderSpelling(t *testing.T) {
	h, _ := mcpGateway(t)
	for _, msg := range []string{listMsg, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"7"}}}`} {
		rec := httptest.NewRecorder()
		r := benchRequest(rec, "POST", "/mcp", msg, map[string]string{"Content-Type": "application/json",
			"Accept": "application/json, text/event-stream", "Agent-ID": benchAgent, "Authority-Scope": "bench:read"})
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}))
		if err := h.ServeHTTP(rec, r, notFound); err != nil {
			t.Fatal(err)
		}
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", msg, rec.Code, rec.Body)
		}
		for _, k := range []string{"Owner-ID", "Trust-Tier", "Verification-Path"} {
			if _, ok := rec.Header()[k]; !ok {
				t.Errorf("%s: no %s field as spelled; fields %v", msg, k, slices.Sorted(maps.Keys(rec.Header())))
			}
		}
		for k := range rec.Header() {
			if want := wire.Spelling(k); want != k {
				t.Errorf("%s: field %q, want it spelled %q", msg, k, want)
			}
		}
	}
}

// TestMCPDeclaredCapabilities: the door declares tools and resources
// (and the tasks extension, whose methods it answers: mcpdoor
// TestTasksMethods) and serves exactly those: the four resources (three
// DISCOVER, one INSPECT) list and read as
// the caller's DISCOVER, and the methods of undeclared capabilities are
// -32601 method not found, not empty listings.
func TestMCPDeclaredCapabilities(t *testing.T) {
	_, url := mcpGateway(t)
	s := mcpClient(t, url, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"})
	ctx := context.Background()
	init := s.InitializeResult()
	caps, _ := json.Marshal(init.Capabilities)
	var declared map[string]any
	if err := json.Unmarshal(caps, &declared); err != nil || len(declared) != 3 || declared["tools"] == nil || declared["resources"] == nil ||
		mustJSON(declared["extensions"]) != `{"io.modelcontextprotocol/tasks":{}}` {
		t.Fatalf("capabilities = %s, want tools, resources and the tasks extension only", caps)
	}
	list, err := s.ListResources(ctx, nil)
	if err != nil || len(list.Resources) != 4 {
		t.Fatalf("resources/list: %v %+v", err, list)
	}
	for _, r := range list.Resources {
		res, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: r.URI})
		if err != nil || len(res.Contents) != 1 || !json.Valid([]byte(res.Contents[0].Text)) {
			t.Fatalf("resources/read %s: %v %+v", r.URI, err, res)
		}
		if r.URI == "rcns://manifest" && !strings.Contains(res.Contents[0].Text, `"server_id"`) {
			t.Errorf("the manifest resource is not the manifest: %s", res.Contents[0].Text)
		}
	}
	if _, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "rcns://nope"}); err == nil {
		t.Error("reading an unknown resource succeeded")
	}
	// Undeclared capabilities, and methods the SDK does not know (the
	// tasks methods the extension removed, client-side methods, none at
	// all), under the protocol versions before 2026-07-28 and none: the
	// SDK's own answer to the latter is a text/plain HTTP 400. The door's
	// answer echoes the id as sent: 2^53, the largest integer id the
	// door takes (its envelope rules refuse 2^53+1, which the SDK would
	// answer as another number).
	for _, version := range []string{"", "2025-06-18", "2025-11-25", "2026-07-28"} {
		for _, m := range []string{"prompts/list", "completion/complete", "logging/setLevel", "resources/subscribe",
			"tasks/list", "tasks/result", "roots/list", "sampling/createMessage", "tools/List", "frob/nicate", ""} {
			_, sdk := map[string]bool{"prompts/list": true, "completion/complete": true, "logging/setLevel": true, "resources/subscribe": true}[m]
			if sdk && version == "2026-07-28" {
				continue // a known method needs the request's _meta under 2026-07-28 (TestMCPConformanceNext)
			}
			h := map[string]string{"Agent-ID": benchAgent}
			if version != "" {
				h["MCP-Protocol-Version"] = version
			}
			status, header, body := mcpPost(t, url, `{"jsonrpc":"2.0","id":9007199254740992,"method":"`+m+`","params":{"level":"info","uri":"rcns://manifest"}}`, h)
			var msg struct {
				ID    json.RawMessage `json:"id"`
				Error *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			want := 200
			if version == "2026-07-28" && !sdk {
				want = 404 // the SDK's own -32601 under 2026-07-28 (its transport's rule)
			}
			if err := json.Unmarshal([]byte(body), &msg); status != want || err != nil || msg.Error == nil || msg.Error.Code != -32601 ||
				!strings.HasPrefix(header.Get("Content-Type"), "application/json") {
				t.Errorf("%s (version %q): %d %s %s, want JSON-RPC -32601", m, version, status, header.Get("Content-Type"), body)
			}
			if m != "" && msg.Error != nil && !strings.Contains(msg.Error.Message, m) {
				t.Errorf("%s: the error does not name the method: %s", m, body)
			}
			if string(msg.ID) != "9007199254740992" {
				t.Errorf("%s: id %s, want the request's 9007199254740992", m, msg.ID)
			}
		}
	}
	// The message is read as the SDK reads it: member names matched
	// exactly (helper-66). Data after the message is the envelope
	// rules' -32700 (mcpdoor/envelope.go), before any method is looked up.
	for msg, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"Id":2,"method":"frob"}`:                  `1`,
		`{"jsonrpc":"2.0","id":"a","method":"frob","METHOD":"tools/list"}`: `"a"`,
	} {
		status, _, body := mcpPost(t, url, msg, map[string]string{"Agent-ID": benchAgent})
		var ans struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &ans); err != nil || status != 200 || string(ans.ID) != want || ans.Error.Code != -32601 || !strings.Contains(ans.Error.Message, `"frob"`) {
			t.Errorf("%s: %d %s, want -32601 for frob with id %s", msg, status, body, want)
		}
	}
	if status, _, body := mcpPost(t, url, `{"jsonrpc":"2.0","id":3,"method":"frob"} trailing`, map[string]string{"Agent-ID": benchAgent}); status != 400 ||
		!strings.Contains(body, `"id":null`) || !strings.Contains(body, `"code":-32700`) {
		t.Errorf("a message with trailing data: %d %s, want -32700 with id null at 400", status, body)
	}
	// A notification of an unknown method (an id the SDK does not read
	// is none) and a batch holding an unknown call keep the SDK's 400:
	// there is no single id to answer.
	for _, msg := range []string{`{"jsonrpc":"2.0","method":"notifications/frob"}`, `{"jsonrpc":"2.0","ID":5,"method":"frob"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"frob/nicate"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`} {
		if status, _, body := mcpPost(t, url, msg, map[string]string{"Agent-ID": benchAgent, "MCP-Protocol-Version": "2025-03-26"}); status != 400 {
			t.Errorf("%s: %d %s, want the SDK's 400", msg, status, body)
		}
	}
}

// mustJSON is v as compact JSON ("" when it does not marshal).
func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestMCPKeyedRepeatRedis: over the MCP door on the Redis store, a keyed
// tools/call's answer is stored beside it (SettleLater) and a repeat of
// the key sent as soon as the result arrived replays it, for every key.
func TestMCPKeyedRepeatRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	_, url := mcpGateway(t, func(h *Handler) {
		h.Store = StoreRedis
		h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "mcp:"}
	})
	s := mcpClient(t, url, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"})
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		meta := mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: "mcp-redis-" + strconv.Itoa(i)}
		args := map[string]any{"item_id": strconv.Itoa(i)}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "fetch_item", Arguments: args, Meta: meta})
		if err != nil || res.IsError || res.Meta[mcpdoor.MCPMetaIdempotentReplayed] == true {
			t.Fatalf("keyed call %d: %v %+v", i, err, res)
		}
		res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "fetch_item", Arguments: args, Meta: meta})
		if err != nil || res.IsError || res.Meta[mcpdoor.MCPMetaIdempotentReplayed] != true {
			t.Fatalf("keyed repeat %d as soon as its result arrived: %v %+v", i, err, res)
		}
	}
}

// TestMCPKeyedAnswerBesideStall: over the MCP door on the Redis store,
// a keyed tools/call whose upstream answers while Redis holds every
// byte (after the claim) gets its result without waiting for its answer
// to be stored (the read timeout); once Redis answers again, its repeat
// replays it, and the upstream ran once.
func TestMCPKeyedAnswerBesideStall(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	up, hits, arrived, release := heldUpstream(t)
	const readTimeout = 4 * time.Second
	_, url := mcpGatewayTo(t, up, func(h *Handler) {
		h.Store = StoreRedis
		h.Redis = &RedisConfig{Addresses: []string{proxy.Addr()}, KeyPrefix: "mcp:",
			ReadTimeout: caddy.Duration(readTimeout), WriteTimeout: caddy.Duration(readTimeout)}
	})
	s := mcpClient(t, url, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"})
	ctx := context.Background()
	call := func() (*mcp.CallToolResult, error) {
		return s.CallTool(ctx, &mcp.CallToolParams{Name: "fetch_item", Arguments: map[string]any{"item_id": "held"},
			Meta: mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: "mcp-stall"}})
	}
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() { res, err := call(); done <- result{res, err} }()
	<-arrived // claimed: the plan runs
	proxy.Hold(true, true)
	start := time.Now()
	close(release)
	got := <-done
	waited := time.Since(start)
	proxy.Release()
	if got.err != nil || got.res.IsError || got.res.Meta[mcpdoor.MCPMetaIdempotentReplayed] == true {
		t.Fatalf("keyed tools/call while Redis holds: %v %+v", got.err, got.res)
	}
	if waited >= readTimeout/2 {
		t.Fatalf("the result waited %v with Redis holding its bytes: it waited for its answer to be stored (read timeout %v)", waited, readTimeout)
	}
	res, err := call()
	if err != nil || res.IsError || res.Meta[mcpdoor.MCPMetaIdempotentReplayed] != true {
		t.Fatalf("repeat once Redis answers: %v %+v", err, res)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
}

// TestMCPRedisPoolOutlivesRunningCalls is TestRedisPoolOutlivesRunningRequests
// over the MCP door: a keyed tools/call still running when its
// configuration is cleaned up (a reload that changed the store
// settings) keeps its Redis client until it has exited, stores its
// answer beside its result (SettleLater), and a repeat on the next
// configuration replays it, the upstream called once.
func TestMCPRedisPoolOutlivesRunningCalls(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free() // a failure below must not leave the upstream's handler blocked
	onRedis := func(poolSize int) func(*Handler) {
		return func(h *Handler) {
			h.Store = StoreRedis
			h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "mcp:", PoolSize: poolSize}
		}
	}
	old, url := mcpGatewayTo(t, up, onRedis(0))
	pool := old.redis
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"}
	params := &mcp.CallToolParams{Name: "fetch_item", Arguments: map[string]any{"item_id": "held"},
		Meta: mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: "mcp-overtaken"}}
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	s := mcpClient(t, url, hdr)
	go func() { res, err := s.CallTool(context.Background(), params); done <- result{res, err} }()
	<-arrived

	cleanupUnderRequest(t, old, pool)
	free()
	if got := <-done; got.err != nil || got.res.IsError || got.res.Meta[mcpdoor.MCPMetaIdempotentReplayed] == true {
		t.Fatalf("the tools/call the reload overtook: %v %+v", got.err, got.res)
	}

	next, nextURL := mcpGatewayTo(t, up, onRedis(7))
	if next.redis == pool {
		t.Fatal("the next configuration shares the old client")
	}
	s2 := mcpClient(t, nextURL, hdr)
	var res *mcp.CallToolResult
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// Until the answer is stored beside the result, the key reads
		// in flight (a tool error).
		res, err = s2.CallTool(context.Background(), params)
		if err != nil || !res.IsError || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || res.IsError || res.Meta[mcpdoor.MCPMetaIdempotentReplayed] != true || hits.Load() != 1 {
		t.Fatalf("a repeat of the overtaken call's key on the next configuration: %v %+v (%d upstream calls), want its answer replayed", err, res, hits.Load())
	}
	waitPoolClosed(t, pool)
}

// TestMCPReloadMovingKeysRefuses: over the MCP door, a reload that
// moves the Idempotency-Keys (memory to Redis) while a keyed tools/call
// runs answers a repeat of its key with a tool error naming the store
// change (503 store-unavailable) instead of running it again; once the
// call has ended, keyed calls run (docs/cluster.md, Failure modes).
func TestMCPReloadMovingKeysRefuses(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	_, url := mcpGatewayTo(t, up)
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"}
	call := func(id, key string) *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "fetch_item", Arguments: map[string]any{"item_id": id}, Meta: mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: key}}
	}
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	s := mcpClient(t, url, hdr)
	go func() {
		res, err := s.CallTool(context.Background(), call("held", "mcp-moved"))
		done <- result{res, err}
	}()
	<-arrived

	_, nextURL := mcpGatewayTo(t, up, func(h *Handler) {
		h.Store = StoreRedis
		h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "mcp-moved:"}
	})
	s2 := mcpClient(t, nextURL, hdr)
	res, err := s2.CallTool(context.Background(), call("held", "mcp-moved"))
	if err != nil || !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "Idempotency-Key store changed") {
		t.Fatalf("a repeat of the running call's key after the keys moved: %v %+v, want a tool error naming the store change", err, res)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want the running call's only", n)
	}
	free()
	if got := <-done; got.err != nil || got.res.IsError {
		t.Fatalf("the running call: %v %+v", got.err, got.res)
	}
	if res, err := s2.CallTool(context.Background(), call("1", "mcp-after")); err != nil || res.IsError {
		t.Fatalf("a keyed call once the running one ended: %v %+v", err, res)
	}
}

// TestMCPPlanDeadlineAnswersItself: under the default MCP timeout, a
// recipe tool whose plan is cut by composition_timeout answers its own
// upstream_timeout (which step ran, retryable or not), not call-timeout
// saying the call "goes on at the gateway" when it has ended (found by
// helper-77: the default timeout was composition_timeout itself, so the
// door's timer and the plan's deadline raced).
func TestMCPPlanDeadlineAnswersItself(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"name":"bench item","price":1}`, r.PathValue("id"))
	})
	h, url := mcpGatewayTo(t, loopbackServer(t, mux).URL, func(h *Handler) { h.CompositionTimeout = engine.Duration(300 * time.Millisecond) })
	if got, want := time.Duration(h.MCP.Timeout), 300*time.Millisecond+mcpdoor.TimeoutGrace; got != want {
		t.Fatalf("default MCP timeout %v, want composition_timeout + %v = %v", got, mcpdoor.TimeoutGrace, want)
	}
	s := mcpClient(t, url, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"})
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "lookup-item", Arguments: map[string]any{"path": "/item/dl-1", "item_id": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !res.IsError || !strings.Contains(string(raw), "upstream_timeout") || strings.Contains(string(raw), "call-timeout") {
		t.Fatalf("a plan cut by its deadline: %s", raw)
	}
}

// TestMCPIdempotencyKeyFaultsNamed: a call whose Idempotency-Key
// sources disagree, or whose header is repeated, is the tool error the
// other doors' reason names (ambiguous-idempotency-key,
// duplicate-header), telling the model to fix the key, not the
// arguments (helper-81: both were invalid-parameter, "fix the
// arguments"). Nothing runs. X-Idempotency-Key is held to the engine's
// rule (engine.LegacyIdempotencyKey), as on the other doors: refused
// alone or beside another key, whether the call's key came from a
// header or _meta, and fine beside the same key (those calls run).
func TestMCPIdempotencyKeyFaultsNamed(t *testing.T) {
	up, calls := countingUpstream(t)
	_, url := mcpGatewayTo(t, up)
	ran := 0
	for _, tc := range []struct {
		name, reason string // reason "": the call runs
		hdr          http.Header
		meta         mcp.Meta
	}{
		{"X-Idempotency-Key beside another key", "ambiguous-idempotency-key", http.Header{"Idempotency-Key": {"m-1"}, "X-Idempotency-Key": {"m-2"}}, nil},
		{"X-Idempotency-Key beside _meta's other key", "ambiguous-idempotency-key", http.Header{"X-Idempotency-Key": {"m-2"}}, mcp.Meta{"io.github.caddy-rcns/idempotency-key": "m-1"}},
		{"the alias beside another key", "ambiguous-idempotency-key", http.Header{"Idempotency-Key": {"m-1"}, "Rcns-Idempotency-Key": {"m-2"}}, nil},
		{"Idempotency-Key twice", "duplicate-header", http.Header{"Idempotency-Key": {"m-3", "m-3"}}, nil},
		{"the alias twice", "duplicate-header", http.Header{"Rcns-Idempotency-Key": {"m-3", "m-3"}}, nil},
		{"X-Idempotency-Key alone", "invalid-idempotency-key", http.Header{"X-Idempotency-Key": {"m-4"}}, nil},
		{"X-Idempotency-Key beside the same key", "", http.Header{"Idempotency-Key": {"m-5"}, "X-Idempotency-Key": {"m-5"}}, nil},
		{"X-Idempotency-Key beside _meta's key", "", http.Header{"X-Idempotency-Key": {`"m-6"`}}, mcp.Meta{"io.github.caddy-rcns/idempotency-key": "m-6"}},
		// Another header sent twice is not the key's fault (helper-91:
		// the tool error told the model to fix its Idempotency-Key).
		{"Task-ID twice", "duplicate-header", http.Header{"Task-Id": {"t-1", "t-2"}}, nil},
		{"Authority-Scope twice", "duplicate-header", http.Header{"Authority-Scope": {"bench:read", "bench:read"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"}
			c := mcp.NewClient(&mcp.Implementation{Name: "rcns-test", Version: "1"}, nil)
			s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
				HTTPClient: &http.Client{Transport: headerTransport{h: hdr, base: addHeaders{tc.hdr, http.DefaultTransport}}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "fetch_item", Arguments: map[string]any{"item_id": "1"}, Meta: tc.meta})
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(res.StructuredContent)
			if tc.reason == "" {
				ran++
				if res.IsError {
					t.Fatalf("a call with one key refused: %s", raw)
				}
				return
			}
			var sc struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			_ = json.Unmarshal(raw, &sc)
			fix, other := "Fix the call's Idempotency-Key", map[string]bool{"Task-ID twice": true, "Authority-Scope twice": true}[tc.name]
			if other {
				fix = "Send each of the call's headers once"
			}
			if !res.IsError || sc.Error.Code != tc.reason || !strings.Contains(sc.Error.Message, fix) ||
				other && strings.Contains(sc.Error.Message, "Idempotency-Key") {
				t.Fatalf("%s, want %s with %q", raw, tc.reason, fix)
			}
		})
	}
	if n := calls.Load(); n != int64(ran) {
		t.Fatalf("the upstream was called %d times, want %d (the calls with one key; refused calls run nothing)", n, ran)
	}
}

// addHeaders adds h's fields (all their values) to every request.
type addHeaders struct {
	h    http.Header
	base http.RoundTripper
}

func (a addHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range a.h {
		r.Header[k] = append([]string(nil), vs...)
	}
	return a.base.RoundTrip(r)
}

// TestMCPToolPanicAnswered: a panic in a tool call's handler (a defect,
// injected by mcpdoor.TestHookToolCall) is answered JSON-RPC -32603
// and logged at ERROR with its stack, on the SDK's path (a recipe tool)
// and the fast path (a Tier B tool) alike; the process goes on and the
// next call is served. The SDK runs the handler on a goroutine that
// recovers nothing: before, one call ended the whole process.
func TestMCPToolPanicAnswered(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	_, url := mcpGateway(t, func(h *Handler) { h.logger = zap.New(core) })
	s := mcpClient(t, url, map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"})
	hook := func(tool string) { panic("tool defect in " + tool) }
	mcpdoor.TestHookToolCall.Store(&hook)
	t.Cleanup(func() { mcpdoor.TestHookToolCall.Store(nil) })
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"lookup-item", map[string]any{"path": "/item/panics", "item_id": "3"}},
		{"fetch_item", map[string]any{"item_id": "7"}},
	} {
		_, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInternalError {
			t.Fatalf("%s panicking: %v, want JSON-RPC %d", c.tool, err, jsonrpc.CodeInternalError)
		}
		lines := logs.FilterMessage("panic in an MCP tool call").FilterField(zap.String("tool", c.tool)).All()
		if len(lines) != 1 || lines[0].ContextMap()["panic"] != "tool defect in "+c.tool || !strings.Contains(lines[0].ContextMap()["stack"].(string), "TestMCPToolPanicAnswered") {
			t.Fatalf("%s: logged %v, want one ERROR line with the panic and its stack", c.tool, lines)
		}
	}
	mcpdoor.TestHookToolCall.Store(nil)
	if res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "fetch_item", Arguments: map[string]any{"item_id": "8"}}); err != nil || res.IsError {
		t.Fatalf("the call after the panics: %v %v", res, err)
	}
}
