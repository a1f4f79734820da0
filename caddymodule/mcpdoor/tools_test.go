package mcpdoor

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
		cfg      Config
		identity string
		want     string
	}{
		{"relative path", Config{Path: "mcp"}, engine.IdentityHeader, "must be an absolute path"},
		{"path with query", Config{Path: "/mcp?x=1"}, engine.IdentityHeader, "without query"},
		{"path not in normal form", Config{Path: "/m%63p"}, engine.IdentityHeader, "normal form"},
		{"bad glob", Config{Path: "/mcp", IncludeTools: []string{"fetch_["}}, engine.IdentityHeader, "include_tools[0]"},
		{"empty glob", Config{Path: "/mcp", ExcludeTools: []string{""}}, engine.IdentityHeader, "exclude_tools[0]"},
		{"bad rename", Config{Path: "/mcp", Rename: map[string]string{"fetch_item": "get item"}}, engine.IdentityHeader, "is not a tool name"},
		{"origin with a path", Config{Path: "/mcp", AllowedOrigins: []string{"https://a.example/x"}}, engine.IdentityHeader, "scheme://host[:port] only"},
		{"origin with a slash", Config{Path: "/mcp", AllowedOrigins: []string{"https://a.example/"}}, engine.IdentityHeader, "scheme://host[:port] only"},
		{"origin not lower case", Config{Path: "/mcp", AllowedOrigins: []string{"https://A.example"}}, engine.IdentityHeader, "lower case"},
		{"origin scheme", Config{Path: "/mcp", AllowedOrigins: []string{"ftp://a.example"}}, engine.IdentityHeader, "http:// or https://"},
		{"negative depth", Config{Path: "/mcp", MaxJSONDepth: -1}, engine.IdentityHeader, "max_json_depth must not be negative"},
		{"depth above the SDK's", Config{Path: "/mcp", MaxJSONDepth: 1001}, engine.IdentityHeader, "above 1000"},
		{"negative batch", Config{Path: "/mcp", MaxBatch: -1}, engine.IdentityHeader, "max_batch must not be negative"},
		{"batch above 1000", Config{Path: "/mcp", MaxBatch: 1001}, engine.IdentityHeader, "max_batch 1001 is above 1000"},
		{"test agent under signature", Config{Path: "/mcp", TestAgent: "a"}, engine.IdentitySignature, "only with identity header"},
		{"valid", Config{Path: "/mcp", AllowedOrigins: []string{"http://localhost:6274"}, TestAgent: "a"}, engine.IdentityHeader, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate(tc.identity)
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

// TestMCPTools: the bench documents' tools, as listed: names, schemas,
// annotations; renames, collisions and include/exclude at load.
func TestMCPTools(t *testing.T) {
	e := testEngine(t)
	d, err := New(e, &Config{Path: DefaultMCPPath})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcpTool{}
	var names []string
	for _, tl := range d.tools {
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
	for _, tl := range d.tools {
		if _, err := recipes.CompileSchema(tl.def.OutputSchema.(map[string]any)); err != nil {
			t.Errorf("%s: outputSchema does not compile: %v", tl.name, err)
		}
		if _, err := recipes.CompileSchema(tl.def.InputSchema.(map[string]any)); err != nil {
			t.Errorf("%s: inputSchema does not compile: %v", tl.name, err)
		}
	}

	for _, tc := range []struct {
		name  string
		cfg   Config
		tools string
		err   string
	}{
		{name: "rename", cfg: Config{Rename: map[string]string{"fetch_item": "get_item"}, IncludeTools: []string{"get_*", "fetch_*"}}, tools: "fetch_slow get_item"},
		{name: "exclude", cfg: Config{ExcludeTools: []string{"*slow*", "discover_*"}}, tools: "fetch_item lookup-item"},
		{name: "rename a recipe's tool", cfg: Config{Rename: map[string]string{"lookup-item": "find_item"}, IncludeTools: []string{"find_*", "lookup*"}}, tools: "find_item"},
		{name: "rename a recipe onto an endpoint's name", cfg: Config{Rename: map[string]string{"slow-one": "fetch_item"}}, err: `"fetch_item" is given to both`},
		{name: "rename onto another tool", cfg: Config{Rename: map[string]string{"fetch_slow": "fetch_item"}}, err: `"fetch_item" is given to both`},
		{name: "rename of no tool", cfg: Config{Rename: map[string]string{"fetch_nothing": "x"}}, err: "mcp rename fetch_nothing: no tool has that generated name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.SetDefaults(e.Config)
			tools, err := buildTools(e, &cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("buildTools = %v, want it to mention %q", err, tc.err)
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
		{name: "_meta not a string", meta: mcp.Meta{MCPMetaIdempotencyKey: 12.0}, err: "invalid-idempotency-key: _meta"},
		{name: "other _meta keys ignored", meta: mcp.Meta{"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
		{name: "alias", alias: []string{"k5"}, key: "k5", keyed: true},
		{name: "alias and header, one key", header: []string{"k6"}, alias: []string{`"k6"`}, key: "k6", keyed: true},
		{name: "alias and header differ", header: []string{"k6"}, alias: []string{"k7"}, err: "ambiguous-idempotency-key: the Idempotency-Key header and the RCNS-Idempotency-Key header differ"},
		{name: "alias and _meta differ", alias: []string{"k8"}, meta: mcp.Meta{MCPMetaIdempotencyKey: "k9"}, err: `the RCNS-Idempotency-Key header and _meta["io.github.caddy-rcns/idempotency-key"] differ`},
		{name: "alias twice", alias: []string{"a", "b"}, err: "duplicate-header: the RCNS-Idempotency-Key header appears more than once"},
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

// TestBatchLen: the messages of a JSON-RPC batch are counted whatever
// they hold; a single message is 0.
func TestBatchLen(t *testing.T) {
	for in, want := range map[string]int{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`: 0,
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

// TestRetryAfterTimeout: a timed-out recipe call's retry_after_seconds
// is composition_timeout less the door's timeout, rounded up; at least
// 1 when the door waits as long or longer (the default timeout); a
// listing's is 1 (a Tier B call's: TestMCPFailures, engine.TestCallBound).
func TestRetryAfterTimeout(t *testing.T) {
	for _, c := range []struct {
		composition, timeout time.Duration
		want                 int
	}{
		{60 * time.Second, 5 * time.Second, 55},
		{60 * time.Second, 4500 * time.Millisecond, 56},
		{60 * time.Second, 62 * time.Second, 1},
		{60 * time.Second, 60 * time.Second, 1},
	} {
		ec := &engine.Config{}
		ec.CompositionTimeout = engine.Duration(c.composition)
		d := &Door{cfg: &Config{Timeout: engine.Duration(c.timeout)}, e: &engine.Engine{Config: ec}}
		if got := d.retryAfterTimeout(&mcpTool{kind: mcpRecipe}); got != c.want {
			t.Errorf("composition %s, timeout %s: %d, want %d", c.composition, c.timeout, got, c.want)
		}
		if got := d.retryAfterTimeout(&mcpTool{kind: mcpContracts}); got != 1 {
			t.Errorf("a listing (no upstream call), timeout %s: %d, want 1", c.timeout, got)
		}
	}
}
