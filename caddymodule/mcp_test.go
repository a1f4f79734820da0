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
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// mcpGateway provisions the bench gateway with the MCP door (adjust
// changes the handler before Provision) and serves it on 127.0.0.1; it
// returns the handler and the door's URL.
func mcpGateway(t testing.TB, adjust ...func(*Handler)) (*Handler, string) {
	t.Helper()
	up := benchUpstream(t)
	h := benchHandlerWith(t, up.URL, false, "", "", append([]func(*Handler){func(h *Handler) { h.MCP = &MCPConfig{} }}, adjust...)...)
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

func TestToolName(t *testing.T) {
	for _, tc := range []struct{ name, method, path, want string }{
		{"parameter makes the collection singular", "FETCH", "/guests/{guest_id}", "fetch_guest"},
		{"-ies", "FETCH", "/properties/{property_id}", "fetch_property"},
		{"a collection stays plural", "RESERVE", "/reservations", "reserve_reservations"},
		{"one literal", "BOOK", "/room", "book_room"},
		{"root", "QUERY", "/", "query"},
		{"hyphens and dots", "FETCH", "/price-list/v1.2/{id}", "fetch_price_list_v1_2"},
		{"percent-encoding decoded", "FETCH", "/caf%C3%A9s/{id}", "fetch_caf"},
		{"-ches", "FETCH", "/branches/{id}/accounts", "fetch_branch_accounts"},
		{"-ss stays", "FETCH", "/access/{id}", "fetch_access"},
		{"-us stays", "FETCH", "/status/{id}", "fetch_status"},
		{"nested parameters", "FETCH", "/hotels/{h}/rooms/{r}", "fetch_hotel_room"},
		{"upper case literal", "FETCH", "/Guests/{id}", "fetch_guest"},
		{"cut at 128", "FETCH", "/" + strings.Repeat("a", 200), "fetch_" + strings.Repeat("a", 122)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toolName(tc.method, tc.path); got != tc.want {
				t.Fatalf("toolName(%s, %s) = %q, want %q", tc.method, tc.path, got, tc.want)
			}
			if !validToolName(toolName(tc.method, tc.path)) {
				t.Fatalf("%q is not a valid tool name", toolName(tc.method, tc.path))
			}
		})
	}
}

func TestRecipeToolName(t *testing.T) {
	long := strings.Repeat("a", 127) + "-b"
	for _, tc := range []struct{ name, recipe, want string }{
		{"the recipe's name", "lend-book", "lend-book"},
		{"one word", "lookup", "lookup"},
		{"cut to 128, no trailing dash", long, strings.Repeat("a", 127)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := recipeToolName(tc.recipe)
			if got != tc.want || !validToolName(got) {
				t.Fatalf("recipeToolName(%s) = %q, want %q (a valid tool name)", tc.recipe, got, tc.want)
			}
		})
	}
}

func TestExposed(t *testing.T) {
	for _, tc := range []struct {
		name             string
		tool             string
		include, exclude []string
		want             bool
	}{
		{"no globs", "fetch_guest", nil, nil, true},
		{"included", "fetch_guest", []string{"fetch_*"}, nil, true},
		{"not included", "book_room", []string{"fetch_*"}, nil, false},
		{"excluded", "fetch_guest", nil, []string{"*_guest"}, false},
		{"exclude wins", "fetch_guest", []string{"fetch_*"}, []string{"fetch_g*"}, false},
		{"character class", "fetch_guest", []string{"fetch_[a-h]*"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exposed(tc.tool, tc.include, tc.exclude); got != tc.want {
				t.Fatalf("exposed(%s, %v, %v) = %v, want %v", tc.tool, tc.include, tc.exclude, got, tc.want)
			}
		})
	}
}

// TestEmbedSchema: an operator output schema with local references
// still validates once embedded in a tool's outputSchema.
func TestEmbedSchema(t *testing.T) {
	op := map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"type":    "object", "additionalProperties": false, "required": []any{"guest"},
		"$defs": map[string]any{
			"guest": map[string]any{"type": "object", "required": []any{"id"}, "properties": map[string]any{"id": map[string]any{"type": "string"}}},
			"self":  map[string]any{"$ref": "#"},
		},
		"properties": map[string]any{
			"guest": map[string]any{"$ref": "#/$defs/guest"},
			"enum":  map[string]any{"$ref": "#/$defs/guest"}, // a property named enum is a schema
			"kind":  map[string]any{"const": map[string]any{"$ref": "#/not-a-ref"}},
			"tag":   map[string]any{"$ref": "#tagged"},
		},
	}
	fresh, err := copySchema(op)
	if err != nil {
		t.Fatal(err)
	}
	got := embedSchema(op, "#/$defs/result")
	props := got["properties"].(map[string]any)
	for _, c := range []struct{ what, got, want any }{
		{"$schema dropped", got["$schema"], nil},
		{"pointer rewritten", props["guest"].(map[string]any)["$ref"], "#/$defs/result/$defs/guest"},
		{"under a property named enum", props["enum"].(map[string]any)["$ref"], "#/$defs/result/$defs/guest"},
		{"root reference", got["$defs"].(map[string]any)["self"].(map[string]any)["$ref"], "#/$defs/result"},
		{"const is data", props["kind"].(map[string]any)["const"].(map[string]any)["$ref"], "#/not-a-ref"},
		{"anchor kept", props["tag"].(map[string]any)["$ref"], "#tagged"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	delete(fresh["properties"].(map[string]any), "tag") // no such anchor: the compiler would refuse it
	schema, err := recipes.CompileSchema(toolOutputSchema(fresh, false, false, false))
	if err != nil {
		t.Fatalf("the tool's outputSchema does not compile: %v", err)
	}
	for _, c := range []struct {
		name  string
		value string
		valid bool
	}{
		{"success", `{"outcome":"succeeded","status":200,"result":{"guest":{"id":"g-1"}}}`, true},
		{"success violating the operator schema", `{"outcome":"succeeded","status":200,"result":{"guest":{}}}`, false},
		{"failure", `{"outcome":"failed","error":{"code":"rate-limited","message":"m","retryable":true,"retry_after_seconds":3,"status":429}}`, true},
		{"failure without retry_after_seconds", `{"outcome":"failed","error":{"code":"x","message":"m","retryable":false,"status":422}}`, false},
		{"preview where none is served", `{"outcome":"preview","status":461,"synthesis_id":"s","contract":{"synthesis_id":"s","endpoint":{}}}`, false},
	} {
		var v any
		if err := json.Unmarshal([]byte(c.value), &v); err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(v); (err == nil) != c.valid {
			t.Errorf("%s: Validate = %v, want valid=%v", c.name, err, c.valid)
		}
	}
	withID := map[string]any{"$id": "https://example.com/s", "$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": "#/$defs/x"}
	if e := embedSchema(withID, "#/$defs/result"); e["$ref"] != "#/$defs/x" || e["$schema"] == nil {
		t.Errorf("a schema with its own $id was changed: %v", e)
	}
}

func TestMCPConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      MCPConfig
		identity string
		want     string
	}{
		{"relative path", MCPConfig{Path: "mcp"}, IdentityHeader, "must be an absolute path"},
		{"path with query", MCPConfig{Path: "/mcp?x=1"}, IdentityHeader, "without query"},
		{"path not in normal form", MCPConfig{Path: "/m%63p"}, IdentityHeader, "normal form"},
		{"bad glob", MCPConfig{Path: "/mcp", IncludeTools: []string{"fetch_["}}, IdentityHeader, "include_tools[0]"},
		{"empty glob", MCPConfig{Path: "/mcp", ExcludeTools: []string{""}}, IdentityHeader, "exclude_tools[0]"},
		{"bad rename", MCPConfig{Path: "/mcp", Rename: map[string]string{"fetch_item": "get item"}}, IdentityHeader, "is not a tool name"},
		{"origin with a path", MCPConfig{Path: "/mcp", AllowedOrigins: []string{"https://a.example/x"}}, IdentityHeader, "scheme://host[:port] only"},
		{"origin with a slash", MCPConfig{Path: "/mcp", AllowedOrigins: []string{"https://a.example/"}}, IdentityHeader, "scheme://host[:port] only"},
		{"origin not lower case", MCPConfig{Path: "/mcp", AllowedOrigins: []string{"https://A.example"}}, IdentityHeader, "lower case"},
		{"origin scheme", MCPConfig{Path: "/mcp", AllowedOrigins: []string{"ftp://a.example"}}, IdentityHeader, "http:// or https://"},
		{"negative depth", MCPConfig{Path: "/mcp", MaxJSONDepth: -1}, IdentityHeader, "max_json_depth must not be negative"},
		{"depth above the SDK's", MCPConfig{Path: "/mcp", MaxJSONDepth: 1001}, IdentityHeader, "above 1000"},
		{"negative batch", MCPConfig{Path: "/mcp", MaxBatch: -1}, IdentityHeader, "max_batch must not be negative"},
		{"batch above 1000", MCPConfig{Path: "/mcp", MaxBatch: 1001}, IdentityHeader, "max_batch 1001 is above 1000"},
		{"test agent under signature", MCPConfig{Path: "/mcp", TestAgent: "a"}, IdentitySignature, "only with identity header"},
		{"valid", MCPConfig{Path: "/mcp", AllowedOrigins: []string{"http://localhost:6274"}, TestAgent: "a"}, IdentityHeader, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.validate(tc.identity)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate = %v, want it to mention %q", err, tc.want)
			}
		})
	}
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

// TestMCPTools: the bench documents' tools, as listed: names, schemas,
// annotations; renames, collisions and include/exclude at load.
func TestMCPTools(t *testing.T) {
	h, _ := mcpGateway(t)
	byName := map[string]*mcpTool{}
	var names []string
	for _, tl := range h.mcp.tools {
		byName[tl.name] = tl
		names = append(names, tl.name)
	}
	if got := strings.Join(names, " "); got != "discover_contracts discover_patterns fetch_item fetch_slow lookup-item slow-one slow-three" {
		t.Fatalf("tools = %s", got)
	}
	fi := byName["fetch_item"].def
	in := fi.InputSchema.(map[string]any)
	if in["additionalProperties"] != false || len(in["required"].([]any)) != 1 || in["required"].([]any)[0] != "item_id" {
		t.Errorf("fetch_item inputSchema = %v", in)
	}
	a := fi.Annotations
	if !a.ReadOnlyHint || !a.IdempotentHint || *a.DestructiveHint || *a.OpenWorldHint || fi.Title != "Fetch one item record by its id" {
		t.Errorf("fetch_item title %q, annotations %+v", fi.Title, a)
	}
	li := byName["lookup-item"].def.InputSchema.(map[string]any)
	props := li["properties"].(map[string]any)
	if props["synthesis_id"] == nil || props["path"] == nil || !strings.Contains(mustMarshal(t, li["required"]), `"path"`) {
		t.Errorf("lookup-item inputSchema lacks synthesis_id or a required path: %v", li)
	}
	if !strings.Contains(byName["lookup-item"].def.Description, "optimistic") {
		t.Errorf("lookup-item description does not say how it delivers: %s", byName["lookup-item"].def.Description)
	}
	for _, tl := range h.mcp.tools {
		if _, err := recipes.CompileSchema(tl.def.OutputSchema.(map[string]any)); err != nil {
			t.Errorf("%s: outputSchema does not compile: %v", tl.name, err)
		}
		if _, err := recipes.CompileSchema(tl.def.InputSchema.(map[string]any)); err != nil {
			t.Errorf("%s: inputSchema does not compile: %v", tl.name, err)
		}
	}

	for _, tc := range []struct {
		name  string
		cfg   MCPConfig
		tools string
		err   string
	}{
		{name: "rename", cfg: MCPConfig{Rename: map[string]string{"fetch_item": "get_item"}, IncludeTools: []string{"get_*", "fetch_*"}}, tools: "fetch_slow get_item"},
		{name: "exclude", cfg: MCPConfig{ExcludeTools: []string{"*slow*", "discover_*"}}, tools: "fetch_item lookup-item"},
		{name: "rename a recipe's tool", cfg: MCPConfig{Rename: map[string]string{"lookup-item": "find_item"}, IncludeTools: []string{"find_*", "lookup*"}}, tools: "find_item"},
		{name: "rename a recipe onto an endpoint's name", cfg: MCPConfig{Rename: map[string]string{"slow-one": "fetch_item"}}, err: `"fetch_item" is given to both`},
		{name: "rename onto another tool", cfg: MCPConfig{Rename: map[string]string{"fetch_slow": "fetch_item"}}, err: `"fetch_item" is given to both`},
		{name: "rename of no tool", cfg: MCPConfig{Rename: map[string]string{"fetch_nothing": "x"}}, err: "mcp rename fetch_nothing: no tool has that generated name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.setDefaults(&h.Config)
			tools, err := h.eng.buildMCPTools(&cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("buildMCPTools = %v, want it to mention %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tl := range tools {
				got = append(got, tl.name)
			}
			if strings.Join(got, " ") != tc.tools {
				t.Fatalf("tools = %v, want %s", got, tc.tools)
			}
		})
	}
}

func mustMarshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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
	if res.Meta[MCPMetaAttributionRecord] == "" || res.Meta[MCPMetaAuditID] == "" {
		t.Errorf("fetch_item _meta lacks the Attribution-Record: %v", res.Meta)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; txt != "FETCH /items/7 answered 200; the result is in structuredContent." {
		t.Errorf("text = %q", txt)
	}

	_, _, err = call("fetch_item", map[string]any{"item_id": "7", "colour": "red"}, nil)
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, "invalid-input") {
		t.Fatalf("unknown field: %v, want invalid params naming invalid-input", err)
	}
	_, _, err = call("fetch_item", map[string]any{}, nil)
	if !errors.As(err, &je) || !strings.Contains(je.Message, `missing argument "item_id"`) {
		t.Fatalf("missing path parameter: %v", err)
	}
	_, _, err = call("fetch_item", map[string]any{"item_id": map[string]any{}}, nil)
	if !errors.As(err, &je) || !strings.Contains(je.Message, "must be a string, number or boolean") {
		t.Fatalf("object path parameter: %v", err)
	}
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
	_, _, err = call("lookup-item", map[string]any{"path": "/elsewhere", "item_id": "3"}, nil)
	if !errors.As(err, &je) || !strings.Contains(je.Message, "does not match the recipe's pattern") {
		t.Fatalf("path off the pattern: %v", err)
	}
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
		_, _, err = call(c.tool, c.args, nil)
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, "invalid-input: input does not match input_schema") {
			t.Errorf("%s %v: %v, want invalid params naming invalid-input", c.tool, c.args, err)
		}
	}

	meta := mcp.Meta{MCPMetaIdempotencyKey: "k-1"}
	sc, _, err = call("fetch_item", map[string]any{"item_id": "9"}, meta)
	if err != nil || sc["outcome"] != "succeeded" {
		t.Fatalf("keyed call: %v %v", err, sc)
	}
	_, res, err = call("fetch_item", map[string]any{"item_id": "9"}, meta)
	if err != nil || res.Meta[MCPMetaIdempotentReplayed] != true {
		t.Fatalf("keyed repeat not replayed: %v %v", err, res.Meta)
	}
	sc, res, err = call("fetch_item", map[string]any{"item_id": "10"}, meta)
	if err != nil || !res.IsError || sc["error"].(map[string]any)["code"] != "idempotency-key-reused" {
		t.Fatalf("key reused with other arguments: %v %v", err, sc)
	}
	_, _, err = call("fetch_item", map[string]any{"item_id": "9"}, mcp.Meta{MCPMetaIdempotencyKey: 7})
	if !errors.As(err, &je) || !strings.Contains(je.Message, "must be a string") {
		t.Fatalf("non-string key: %v", err)
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

// TestIdempotencyKeyOfCall: the MCP door takes the key from the
// Idempotency-Key header, its alias RCNS-Idempotency-Key (the reference
// client's, cases/04) or _meta; given twice, the same key (a token and
// its quoted string are one), else invalid params naming both sources.
func TestIdempotencyKeyOfCall(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header []string
		alias  []string
		meta   mcp.Meta
		key    string
		keyed  bool
		err    string
	}{
		{name: "none"},
		{name: "header", header: []string{"k1"}, key: "k1", keyed: true},
		{name: "_meta", meta: mcp.Meta{MCPMetaIdempotencyKey: "k2"}, key: "k2", keyed: true},
		{name: "both equal", header: []string{"k3"}, meta: mcp.Meta{MCPMetaIdempotencyKey: "k3"}, key: "k3", keyed: true},
		{name: "both differ", header: []string{"k3"}, meta: mcp.Meta{MCPMetaIdempotencyKey: "k4"}, err: "differ"},
		{name: "header twice", header: []string{"a", "b"}, err: "more than once"},
		{name: "_meta not a string", meta: mcp.Meta{MCPMetaIdempotencyKey: 12.0}, err: "must be a string"},
		{name: "other _meta keys ignored", meta: mcp.Meta{"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
		{name: "alias", alias: []string{"k5"}, key: "k5", keyed: true},
		{name: "alias and header, one key", header: []string{"k6"}, alias: []string{`"k6"`}, key: "k6", keyed: true},
		{name: "alias and header differ", header: []string{"k6"}, alias: []string{"k7"}, err: "the Idempotency-Key header and the RCNS-Idempotency-Key header differ"},
		{name: "alias and _meta differ", alias: []string{"k8"}, meta: mcp.Meta{MCPMetaIdempotencyKey: "k9"}, err: `the RCNS-Idempotency-Key header and _meta["io.github.caddy-rcns/idempotency-key"] differ`},
		{name: "alias twice", alias: []string{"a", "b"}, err: "the RCNS-Idempotency-Key header appears more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.header != nil {
				h["Idempotency-Key"] = tc.header
			}
			if tc.alias != nil {
				h["Rcns-Idempotency-Key"] = tc.alias
			}
			key, keyed, err := idempotencyKey(h, tc.meta)
			switch {
			case tc.err != "":
				if err == nil || err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Message, tc.err) {
					t.Fatalf("err = %v, want invalid params mentioning %q", err, tc.err)
				}
			case err != nil || key != tc.key || keyed != tc.keyed:
				t.Fatalf("idempotencyKey = %q, %v, %v; want %q, %v", key, keyed, err, tc.key, tc.keyed)
			}
		})
	}
}

func TestNextCursor(t *testing.T) {
	for _, tc := range []struct{ name, link, want string }{
		{"next", `</contracts?limit=2&cursor=MDAx>; rel="next"`, "MDAx"},
		{"none", "", ""},
		{"not next", `</contracts?cursor=MDAx>; rel="prev"`, ""},
		{"no cursor", `</contracts?limit=2>; rel="next"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextCursor(tc.link); got != tc.want {
				t.Fatalf("nextCursor(%q) = %q, want %q", tc.link, got, tc.want)
			}
		})
	}
}

func TestSegmentValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
		ok   bool
	}{
		{"string", "g-1", "g-1", true},
		{"integer", 42.0, "42", true},
		{"fraction", 1.5, "1.5", true},
		{"large integer", 1e15, "1000000000000000", true},
		{"boolean", true, "true", true},
		{"null", nil, "", false},
		{"object", map[string]any{}, "", false},
		{"array", []any{"a"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := segmentValue(tc.v)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("segmentValue(%v) = %q, %v; want %q, %v", tc.v, got, ok, tc.want, tc.ok)
			}
		})
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

// TestBatchLen: the messages of a JSON-RPC batch are counted whatever
// they hold; a single message is 0.
func TestBatchLen(t *testing.T) {
	for in, want := range map[string]int{
		listMsg:                     0,
		"":                          0,
		"[]":                        0,
		" \r\n\t[1, {}, \"x\"]":     3,
		`[{"a":1,"a":2},[[]],null]`: 3,
		"[{\"s\":\"\xff\"}, 2]":     2,
		"[1, 2, oops]":              2,
		"[1, 2":                     2,
	} {
		if got := batchLen([]byte(in)); got != want {
			t.Errorf("batchLen(%q) = %d, want %d", in, got, want)
		}
	}
}
