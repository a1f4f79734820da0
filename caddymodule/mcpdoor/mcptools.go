package mcpdoor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/internal/plural"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// The MCP door's tools (docs/doors.md "MCP door"): one per
// agent-callable Tier B endpoint, one per recipe, and two read-only
// views of the DISCOVER built-ins. Each call is one AGTP request to the
// pair the tool names.

// mcpKind is what a tool calls.
type mcpKind int

const (
	// mcpTierB calls a Tier B endpoint: one upstream call.
	mcpTierB mcpKind = iota
	// mcpRecipe calls a recipe's pair: the agent's contract for it, or
	// a gate evaluation with Allow-RCNS: true.
	mcpRecipe
	// mcpContracts is DISCOVER /contracts: the caller's contracts.
	mcpContracts
	// mcpPatterns is DISCOVER /patterns: the recipes' patterns.
	mcpPatterns
)

// MCP argument and _meta names the door reads besides an endpoint's own
// input, and the _meta keys it writes (docs/agent-guide-mcp.md).
const (
	// mcpArgSynthesisID is a recipe tool's argument presenting a
	// contract (Contract-Synthesized): the confirmation of a preview.
	mcpArgSynthesisID = "synthesis_id"
	// mcpArgPath is the AGTP path of a recipe matched by path_regex.
	mcpArgPath = "path"
	// MCPMetaPrefix prefixes the gateway's _meta keys (MCP reserves
	// io.modelcontextprotocol/ for itself).
	MCPMetaPrefix = "io.github.caddy-rcns/"
	// MCPMetaIdempotencyKey is the request _meta key that carries an
	// Idempotency-Key, as the HTTP header of the same name does.
	MCPMetaIdempotencyKey = MCPMetaPrefix + "idempotency-key"
)

// mcpTool is one tool: the AGTP pair its calls go to and its listing.
type mcpTool struct {
	name      string // as clients see it
	generated string // before rename
	kind      mcpKind
	// method and path are the AGTP pair (path: the endpoint's
	// template, the recipe's path_exact or regex source).
	method, path string
	ep           *recipes.Endpoint // mcpTierB
	recipe       *recipes.Recipe   // mcpRecipe
	// regex: a recipe matched by path_regex, whose calls name the
	// path in the "path" argument.
	regex bool
	// params are the template's parameters (mcpTierB), in order.
	params []string
	// scopes are what an agent's grant must hold to see the tool.
	scopes []policy.Scope
	// idempotent is the semantic block's is_idempotent (built-ins:
	// true): a timed-out call may be repeated without a key.
	idempotent bool
	file       string // the document it came from ("" for built-ins)
	def        *mcp.Tool
	// args checks the arguments of a built-in listing against
	// def.InputSchema, which no endpoint schema checks (nil otherwise).
	args *recipes.InputValidator
	// paramHeaders: its input schema holds an x-mcp-header annotation
	// (or the text of one), so the go-sdk requires a 2026-07-28 call
	// of it to mirror those arguments in Mcp-Param-* header fields and
	// checks them (SEP-2243): the fast path leaves such calls to it.
	paramHeaders bool
}

// buildTools builds the tool list of cfg: generated names, renames,
// collisions (an error naming both documents), then include and
// exclude; sorted by name.
func buildTools(h *engine.Engine, cfg *Config) ([]*mcpTool, error) {
	var all []*mcpTool
	for _, ep := range h.RecipeSet().Endpoints {
		if ep.Internal || h.Methods().Disallowed(ep.Method) {
			continue
		}
		t, err := endpointTool(h, ep)
		if err != nil {
			return nil, err
		}
		all = append(all, t)
	}
	if h.Enabled {
		for _, r := range h.RecipeSet().Recipes {
			if h.Methods().Disallowed(r.Method) {
				continue
			}
			if _, _, served := h.RecipeSet().Route(r.Method, r.PathExact); r.PathRegex == nil && served {
				// A Tier B endpoint answers the pair (spec §10 step 8
				// comes before the gate): a tool for the recipe would
				// call that endpoint.
				h.Logger().Warn("MCP door: no tool for the recipe, a Tier B endpoint serves its pair",
					zap.String("recipe", r.Name), zap.String("method", r.Method), zap.String("path", r.PathExact))
				continue
			}
			t, err := recipeTool(h, r)
			if err != nil {
				return nil, err
			}
			all = append(all, t)
		}
	}
	all = append(all, contractsTool(), patternsTool())
	for from := range cfg.Rename {
		if !slices.ContainsFunc(all, func(t *mcpTool) bool { return t.generated == from }) {
			return nil, fmt.Errorf("rcns: mcp rename %s: no tool has that generated name (the names are listed in docs/doors.md \"Tool names\")", from)
		}
	}
	byName := map[string]*mcpTool{}
	var out []*mcpTool
	for _, t := range all {
		if to, ok := cfg.Rename[t.generated]; ok {
			t.name = to
		}
		if prev, dup := byName[t.name]; dup {
			return nil, fmt.Errorf("rcns: mcp tool name %q is given to both %s and %s; rename one in the mcp block (rename %s <name>)",
				t.name, prev.origin(), t.origin(), t.generated)
		}
		byName[t.name] = t
		if !exposed(t.name, cfg.IncludeTools, cfg.ExcludeTools) {
			continue
		}
		t.def.Name = t.name
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// origin names where a tool comes from, for load errors.
func (t *mcpTool) origin() string {
	if t.file == "" {
		return fmt.Sprintf("the built-in %s %s", t.method, t.path)
	}
	return fmt.Sprintf("%s (%s %s)", t.file, t.method, t.path)
}

// exposed reports whether a tool named name is served: it matches an
// include glob (or there are none) and no exclude glob. The globs were
// checked at Validate (path.Match).
func exposed(name string, include, exclude []string) bool {
	ok := len(include) == 0
	for _, g := range include {
		if m, _ := path.Match(g, name); m {
			ok = true
		}
	}
	for _, g := range exclude {
		if m, _ := path.Match(g, name); m {
			return false
		}
	}
	return ok
}

// validToolName reports whether n is an MCP tool name: 1-128
// characters of A-Z a-z 0-9 _ - . (MCP 2025-11-25 "Tool names").
func validToolName(n string) bool {
	if n == "" || len(n) > 128 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// toolName is the generated name of the tool for (method, path): the
// method in lower case, then each literal path segment (percent-decoded,
// lower case, every run of characters other than a-z and 0-9 turned into
// "_"), a segment followed by a parameter segment made singular (it
// names one member of a collection); parameter segments are left out.
// FETCH /guests/{guest_id} is fetch_guest, BOOK /room book_room,
// RESERVE /reservations reserve_reservations. At most 128 characters.
func toolName(method, p string) string {
	words := []string{nameWord(method)}
	segs := strings.Split(strings.Trim(p, "/"), "/")
	for i, seg := range segs {
		if seg == "" || isParamSegment(seg) {
			continue
		}
		if dec, err := url.PathUnescape(seg); err == nil {
			seg = dec
		}
		w := nameWord(seg)
		if w == "" {
			continue
		}
		if i+1 < len(segs) && isParamSegment(segs[i+1]) {
			w = strings.TrimRight(singular(w), "_")
		}
		words = append(words, w)
	}
	n := strings.Join(words, "_")
	if len(n) > 128 {
		n = strings.TrimRight(n[:128], "_")
	}
	return n
}

// recipeToolName is the generated name of a recipe's tool: the
// recipe's own name (book-room, lend-book), which the recipe schema
// already spells as a tool name allows (^[a-z0-9][a-z0-9-]*$), cut to
// 128 characters. Recipe names are unique in a configuration and, with
// their "-", never equal a generated endpoint or built-in name (those
// join words with "_"); a recipe name without "-" may, and the load
// then fails naming both, as for any two tools of one name.
func recipeToolName(recipe string) string {
	if len(recipe) > 128 {
		return strings.TrimRight(recipe[:128], "-")
	}
	return recipe
}

func isParamSegment(seg string) bool {
	return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}")
}

// nameWord is s in lower case with every run of characters other than
// a-z and 0-9 turned into one "_", trimmed of "_".
func nameWord(s string) string {
	var b strings.Builder
	under := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' {
			if under && b.Len() > 0 {
				b.WriteByte('_')
			}
			under = false
			b.WriteByte(c)
			continue
		}
		under = true
	}
	return b.String()
}

// singular is the English singular of a plural word by its ending:
// -ies → -y, -sses/-shes/-ches/-xes/-zes → without -es, -s (not -ss,
// -us, -is) → without -s; other words are unchanged.
func singular(w string) string {
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"), strings.HasSuffix(w, "shes"), strings.HasSuffix(w, "ches"), strings.HasSuffix(w, "xes"), strings.HasSuffix(w, "zes"):
		return w[:len(w)-2]
	case strings.HasSuffix(w, "ss"), strings.HasSuffix(w, "us"), strings.HasSuffix(w, "is"), len(w) < 3:
		return w
	case strings.HasSuffix(w, "s"):
		return w[:len(w)-1]
	}
	return w
}

// endpointTool is the tool of Tier B endpoint ep.
func endpointTool(h *engine.Engine, ep *recipes.Endpoint) (*mcpTool, error) {
	proj := ep.Projection()
	in, err := copySchema(proj["input_schema"])
	if err != nil {
		return nil, fmt.Errorf("rcns: mcp tool for %s: input_schema: %v", ep.File, err)
	}
	params := ep.Template.Params()
	in["required"] = withRequired(in["required"], params...)
	out, err := copySchema(proj["output_schema"])
	if err != nil {
		return nil, fmt.Errorf("rcns: mcp tool for %s: output_schema: %v", ep.File, err)
	}
	t := &mcpTool{generated: toolName(ep.Method, ep.Path), kind: mcpTierB, method: ep.Method, path: ep.Path, ep: ep,
		params: params, scopes: ep.RequiredScopes, idempotent: ep.Semantic.IsIdempotent, file: ep.File}
	t.name = t.generated
	sem, _ := proj["semantic"].(map[string]any)
	desc := toolDescription(ep.Description, sem) + fmt.Sprintf(" AGTP %s %s (Tier B: one call to the %s API)%s.",
		ep.Method, ep.Path, ep.UpstreamName(), scopeSentence(ep.RequiredScopes))
	if ep.Deprecated != nil {
		desc = "Deprecated (" + engine.EndpointWarning(ep) + "). " + desc
	}
	t.def = &mcp.Tool{Title: toolTitle(sem), Description: desc, InputSchema: in,
		OutputSchema: toolOutputSchema(out, false, false, false), Annotations: toolAnnotations(toolTitle(sem), sem),
		Meta: mcp.Meta{MCPMetaPrefix + "agtp": map[string]any{"method": ep.Method, "path": ep.Path, "tier": "B", "required_scopes": scopeStrs(ep.RequiredScopes)}}}
	t.paramHeaders = namesParamHeader(in)
	return t, nil
}

// namesParamHeader reports whether schema (an input schema as the tool
// lists it) holds the text "x-mcp-header" anywhere: a key the go-sdk
// reads as a parameter's header binding (extractParamHeaderAnnotations,
// at any depth of properties), or that text elsewhere, which costs only
// the fast path. A schema that does not encode is taken to hold it.
func namesParamHeader(schema map[string]any) bool {
	raw, err := json.Marshal(schema)
	return err != nil || bytes.Contains(raw, []byte("x-mcp-header"))
}

// recipeTool is the tool of recipe r: its synthesized endpoint's schemas
// plus synthesis_id (and path, for a path_regex recipe).
func recipeTool(h *engine.Engine, r *recipes.Recipe) (*mcpTool, error) {
	pair := r.PathExact
	if r.PathRegex != nil {
		pair = "/"
	}
	proj := r.EndpointFor(r.Method, pair)
	in, err := copySchema(proj["input_schema"])
	if err != nil {
		return nil, fmt.Errorf("rcns: mcp tool for %s: input_schema: %v", r.File, err)
	}
	props, _ := in["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		in["properties"] = props
	}
	if _, taken := props[mcpArgSynthesisID]; taken {
		return nil, fmt.Errorf("rcns: mcp tool for %s: the recipe's input_schema has a property %q, which the MCP door uses to present a contract; rename the property", r.File, mcpArgSynthesisID)
	}
	props[mcpArgSynthesisID] = map[string]any{"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._~-]+$",
		"description": "Presents this contract (Contract-Synthesized): give the synthesis_id of a preview to confirm and run it, or of a contract you hold to run it. Leave it out otherwise."}
	t := &mcpTool{kind: mcpRecipe, method: r.Method, path: r.PatternPath(), recipe: r,
		scopes: append(append([]policy.Scope{}, r.RequiredScopes...), policy.ScopeNegotiate), file: r.File}
	if r.PathRegex != nil {
		if _, taken := props[mcpArgPath]; taken {
			return nil, fmt.Errorf("rcns: mcp tool for %s: the recipe matches paths by path_regex and its input_schema has a property %q, which the MCP door uses for the path; rename the property", r.File, mcpArgPath)
		}
		props[mcpArgPath] = map[string]any{"type": "string", "minLength": 1,
			"description": "The AGTP path to call, which must match the recipe's pattern " + r.PatternPath() + " (RE2, the whole path)."}
		in["required"] = withRequired(in["required"], mcpArgPath)
		t.regex = true
	}
	t.generated = recipeToolName(r.Name)
	t.name = t.generated
	out, err := copySchema(proj["output_schema"])
	if err != nil {
		return nil, fmt.Errorf("rcns: mcp tool for %s: output_schema: %v", r.File, err)
	}
	sem := r.Semantic()
	t.idempotent, _ = sem["is_idempotent"].(bool)
	var how string
	if h.Mode == engine.ModeConfirmFirst {
		how = " The first call runs nothing: it returns a preview of the contract (outcome \"preview\") with its synthesis_id; call this tool again with the same arguments and that synthesis_id to confirm and run it."
	} else {
		how = " The first call synthesizes the contract and runs it at once (optimistic)."
	}
	desc, _ := proj["description"].(string)
	t.def = &mcp.Tool{Title: toolTitle(sem),
		Description: toolDescription(desc, sem) + fmt.Sprintf(" AGTP %s %s (Tier C: recipe %s v%s composes %s into one contract for you, made by the RCNS gate and kept for later calls).%s%s",
			r.Method, r.PatternPath(), r.Name, r.Version, plural.Count(r.Depth(), "call", "calls"), how, scopeSentence(t.scopes)),
		InputSchema: in, OutputSchema: toolOutputSchema(out, true, h.Mode == engine.ModeConfirmFirst, false),
		Annotations: toolAnnotations(toolTitle(sem), sem),
		Meta: mcp.Meta{MCPMetaPrefix + "agtp": map[string]any{"method": r.Method, "path": r.PatternPath(), "tier": "C",
			"recipe": r.Name, "recipe_version": r.Version, "required_scopes": scopeStrs(t.scopes)}}}
	t.paramHeaders = namesParamHeader(in)
	return t, nil
}

// contractsTool lists the caller's contracts (DISCOVER /contracts),
// a page at a time.
func contractsTool() *mcpTool {
	t := &mcpTool{generated: "discover_contracts", kind: mcpContracts, method: "DISCOVER", path: "/contracts", idempotent: true}
	t.name = t.generated
	t.def = &mcp.Tool{Title: "List my contracts",
		Description: "Lists the contracts this agent holds (synthesized from recipes), oldest first, a page at a time: pass next_cursor from one page as cursor to get the next. Read-only. AGTP DISCOVER /contracts.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"limit":  map[string]any{"type": "integer", "minimum": 1, "maximum": engine.MaxPageLimit, "description": fmt.Sprintf("Contracts per page (default %d).", engine.DefaultPageLimit)},
			"cursor": map[string]any{"type": "string", "minLength": 1, "description": "next_cursor of the previous page."},
		}},
		OutputSchema: toolOutputSchema(map[string]any{"type": "array", "items": map[string]any{"type": "object"}}, false, false, true),
		Annotations:  readOnlyAnnotations("List my contracts"),
	}
	t.args = builtinArgs(t.def.InputSchema.(map[string]any))
	return t
}

// builtinArgs compiles a built-in tool's input schema (a constant of
// this file: one that does not compile is a bug).
func builtinArgs(s map[string]any) *recipes.InputValidator {
	c, err := recipes.NewInputValidator(s)
	if err != nil {
		panic("rcns: a built-in MCP tool's input schema does not compile: " + err.Error())
	}
	return c
}

// patternsTool lists the recipes' patterns (DISCOVER /patterns): which
// pairs a recipe tool can synthesize.
func patternsTool() *mcpTool {
	t := &mcpTool{generated: "discover_patterns", kind: mcpPatterns, method: "DISCOVER", path: "/patterns", idempotent: true}
	t.name = t.generated
	t.def = &mcp.Tool{Title: "List the synthesis patterns",
		Description:  "Lists the recipes this gateway can synthesize contracts from: each pattern's method, path, semantic block and required scopes, and whether synthesis is on. Read-only. AGTP DISCOVER /patterns.",
		InputSchema:  map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{}},
		OutputSchema: toolOutputSchema(map[string]any{"type": "object"}, false, false, false),
		Annotations:  readOnlyAnnotations("List the synthesis patterns"),
	}
	t.args = builtinArgs(t.def.InputSchema.(map[string]any))
	return t
}

// copySchema deep-copies an operator schema (decoded YAML or JSON) into
// plain JSON values, numbers exact (json.Number).
func copySchema(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}

// withRequired is a schema's required list with names added (in order,
// once each).
func withRequired(required any, names ...string) []any {
	list, _ := required.([]any)
	out := append([]any{}, list...)
	for _, n := range names {
		found := false
		for _, r := range out {
			found = found || r == n
		}
		if !found {
			out = append(out, n)
		}
	}
	return out
}

// toolTitle is a tool's title: its semantic intent, without the final
// period.
func toolTitle(sem map[string]any) string {
	intent, _ := sem["intent"].(string)
	return strings.TrimSuffix(strings.TrimSpace(intent), ".")
}

// toolDescription says when to pick a tool: the operator's description,
// then the semantic intent, outcome, impact and idempotency.
func toolDescription(desc string, sem map[string]any) string {
	intent, _ := sem["intent"].(string)
	outcome, _ := sem["outcome"].(string)
	impact, _ := sem["impact"].(string)
	idem, _ := sem["is_idempotent"].(bool)
	var b strings.Builder
	if desc = strings.TrimSpace(desc); desc != "" {
		b.WriteString(sentence(desc) + " ")
	}
	if intent != "" {
		b.WriteString("Pick it to " + lowerFirst(strings.TrimSuffix(strings.TrimSpace(intent), ".")) + ". ")
	}
	if outcome != "" {
		b.WriteString("Outcome: " + sentence(outcome) + " ")
	}
	switch impact {
	case schema.Impacts[0]:
		b.WriteString("Read-only.")
	case "irreversible":
		b.WriteString("Changes state irreversibly.")
	default:
		b.WriteString("Changes state (reversible).")
	}
	if idem {
		b.WriteString(" Idempotent: a repeat has no further effect.")
	} else {
		b.WriteString(" Not idempotent: a repeat acts again unless it carries the same Idempotency-Key.")
	}
	return b.String()
}

func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s != "" && !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

func lowerFirst(s string) string {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return s
	}
	if len(s) > 1 && s[1] >= 'A' && s[1] <= 'Z' { // an acronym
		return s
	}
	return string(s[0]+'a'-'A') + s[1:]
}

// scopeSentence names the scopes a call claims in Authority-Scope.
func scopeSentence(scopes []policy.Scope) string {
	if len(scopes) == 0 {
		return ""
	}
	return "; claim " + strings.Join(scopeStrs(scopes), ", ") + " in the Authority-Scope header"
}

func scopeStrs(scopes []policy.Scope) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = s.String()
	}
	return out
}

// toolAnnotations are the hints that follow from a semantic block:
// read-only for informational impact, destructive for irreversible,
// idempotent from is_idempotent; never open-world (a tool reaches only
// the operator's configured upstreams).
func toolAnnotations(title string, sem map[string]any) *mcp.ToolAnnotations {
	impact, _ := sem["impact"].(string)
	idem, _ := sem["is_idempotent"].(bool)
	destructive, open := impact == "irreversible", false
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: impact == schema.Impacts[0], DestructiveHint: &destructive,
		IdempotentHint: idem, OpenWorldHint: &open}
}

func readOnlyAnnotations(title string) *mcp.ToolAnnotations {
	f := false
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, DestructiveHint: &f, IdempotentHint: true, OpenWorldHint: &f}
}

// mcpErrorSchema is the structured tool error every tool may return
// (outcome "failed"): the AGTP reason as code, its explanation as
// message, retryable, retry_after_seconds (null when the gateway names
// no delay), the AGTP status and the reason's other fields as details.
var mcpErrorSchema = map[string]any{
	"type": "object", "additionalProperties": false,
	"required": []any{"code", "message", "retryable", "retry_after_seconds", "status"},
	"properties": map[string]any{
		"code":                map[string]any{"type": "string", "description": "The stable reason token (docs/troubleshooting.md) or the endpoint's error code."},
		"message":             map[string]any{"type": "string"},
		"retryable":           map[string]any{"type": "boolean", "description": "The same call may succeed later unchanged."},
		"retry_after_seconds": map[string]any{"anyOf": []any{map[string]any{"type": "integer", "minimum": 0}, map[string]any{"type": "null"}}},
		"status":              map[string]any{"type": "integer", "description": "The AGTP status code."},
		"details":             map[string]any{"type": "object"},
	},
}

// toolOutputSchema is a tool's outputSchema: one object whose outcome
// tells its variants apart. "succeeded" carries the AGTP status and
// result (result validates against the endpoint's output schema, held
// in $defs/result); a recipe's carries the synthesis_id it ran under
// and, when it was just synthesized, the contract; a listing's carries
// next_cursor. "preview" (confirm-first recipes) carries the contract
// and its synthesis_id. "failed" carries the error (mcpErrorSchema).
func toolOutputSchema(result map[string]any, recipe, preview, listing bool) map[string]any {
	success := map[string]any{
		"outcome": map[string]any{"const": "succeeded"},
		"status":  map[string]any{"type": "integer"},
		"result":  map[string]any{"$ref": "#/$defs/result"},
	}
	required := []any{"outcome", "status", "result"}
	if recipe {
		success["synthesis_id"] = map[string]any{"type": "string"}
		success["contract"] = map[string]any{"type": "object", "required": []any{"synthesis_id"}}
		required = append(required, "synthesis_id")
	}
	if listing {
		success["next_cursor"] = map[string]any{"type": "string"}
	}
	// A result cut at max_result_bytes (boundedResult).
	success["truncated"] = map[string]any{"const": true}
	success["total_items"] = map[string]any{"type": "integer", "minimum": 0}
	success["returned_items"] = map[string]any{"type": "integer", "minimum": 0}
	success["note"] = map[string]any{"type": "string"}
	variants := []any{
		map[string]any{"type": "object", "additionalProperties": false, "required": required, "properties": success},
	}
	if preview {
		variants = append(variants, map[string]any{"type": "object", "additionalProperties": false,
			"required": []any{"outcome", "status", "synthesis_id", "contract"},
			"properties": map[string]any{
				"outcome":      map[string]any{"const": "preview"},
				"status":       map[string]any{"const": policy.StatusContractAvailable},
				"synthesis_id": map[string]any{"type": "string"},
				"contract":     map[string]any{"type": "object", "required": []any{"synthesis_id", "endpoint"}},
			}})
	}
	variants = append(variants, map[string]any{"type": "object", "additionalProperties": false,
		"required": []any{"outcome", "error"},
		"properties": map[string]any{
			"outcome": map[string]any{"const": "failed"},
			"error":   mcpErrorSchema,
		}})
	return map[string]any{
		"$schema":  "https://json-schema.org/draft/2020-12/schema",
		"type":     "object",
		"required": []any{"outcome"},
		"oneOf":    variants,
		"$defs":    map[string]any{"result": embedSchema(result, "#/$defs/result")},
	}
}

// embedSchema prepares an operator schema to sit at pointer at inside
// another schema: without an $id of its own, its $schema is dropped (a
// subschema may not declare one) and its JSON-pointer references ("#"
// and "#/…") are rewritten to point under at. Anchors ("#name") are
// schema-wide and stay, as do the values of enum, const, default and
// examples, which are data. Every "type" array becomes an anyOf of
// single types (portableType), with or without an $id.
func embedSchema(s map[string]any, at string) map[string]any {
	if _, own := s["$id"]; own {
		portableTypes(s)
		return s
	}
	delete(s, "$schema")
	rewriteSchema(s, at)
	return s
}

// portableTypes rewrites the type arrays of schema v in place
// (portableType), in every subschema.
func portableTypes(v any) {
	switch x := v.(type) {
	case map[string]any:
		portableType(x)
		for k, c := range x {
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				continue
			}
			portableTypes(c)
		}
	case []any:
		for _, c := range x {
			portableTypes(c)
		}
	}
}

// portableType rewrites a "type" array ({"type": ["integer", "null"]})
// into an anyOf of single-type schemas, the same set of instances:
// MCP clients that translate tool schemas for model APIs (the
// Inspector's --strict check names it) refuse type arrays. The other
// keywords stay beside it (each applies only to its type); an anyOf
// already there is kept by moving both under allOf.
func portableType(m map[string]any) {
	types, ok := m["type"].([]any)
	if !ok {
		return
	}
	delete(m, "type")
	alts := make([]any, len(types))
	for i, t := range types {
		alts[i] = map[string]any{"type": t}
	}
	if len(alts) == 1 {
		m["type"] = types[0]
		return
	}
	if prev, has := m["anyOf"]; has {
		delete(m, "anyOf")
		all, _ := m["allOf"].([]any)
		m["allOf"] = append(all, map[string]any{"anyOf": prev}, map[string]any{"anyOf": alts})
		return
	}
	m["anyOf"] = alts
}

// rewriteSchema rewrites the local references of schema v (see
// embedSchema) in place.
func rewriteSchema(v any, at string) {
	m, ok := v.(map[string]any)
	if !ok {
		return // a boolean schema
	}
	portableType(m)
	for k, c := range m {
		switch k {
		case "$ref", "$dynamicRef":
			if s, ok := c.(string); ok && (s == "#" || strings.HasPrefix(s, "#/")) {
				m[k] = at + s[1:]
			}
		case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
			if named, ok := c.(map[string]any); ok {
				for _, sub := range named {
					rewriteSchema(sub, at)
				}
			}
		case "enum", "const", "default", "examples":
		default:
			switch x := c.(type) {
			case map[string]any:
				rewriteSchema(x, at)
			case []any: // allOf, anyOf, oneOf, prefixItems…
				for _, sub := range x {
					rewriteSchema(sub, at)
				}
			}
		}
	}
}
