package recipes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gowebpki/jcs"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// Recipe is an operator-written Tier C composition rule (spec §13.1):
// a pattern, the synthesized endpoint, and a plan of steps over Tier B
// endpoints. Built once at load, immutable, safe for concurrent use. A
// contract captures the recipe it was synthesized from (its version and
// steps, as the captured plan, Plan) and keeps running it across config
// reloads; each configuration binds that plan to its own upstreams
// (Restorer), so a step's upstream is the one the running configuration
// declares under its name.
type Recipe struct {
	// Name and Version identify the recipe; Version is opaque.
	Name, Version string
	// Description is the operator's description.
	Description string
	// Method is the pattern's AGTP method.
	Method string
	// PathExact is the byte-exact pattern path, or "".
	PathExact string
	// PathRegex is the whole-path RE2 pattern, or nil (spec OP-24).
	PathRegex *regexp.Regexp
	// Propose reports whether PROPOSE may synthesize this recipe.
	Propose bool
	// RequiredScopes is the effective scope set of a contract: recipe ∪
	// endpoint ∪ every step's required scopes (spec §13.3, OP-16).
	RequiredScopes []policy.Scope
	// Steps is the plan in declared order.
	Steps []*Step
	// File is the document the recipe came from.
	File string
	// ContentHash is the SHA-256 (hex) of the JCS form of the recipe
	// document; a reload with the same name and version but another
	// hash is refused (ARCHITECTURE.md "contract_hash").
	ContentHash string

	endpoint map[string]any // projection without method/path
	// doc is the recipe document as validated (schema.Document.Value):
	// with its steps' endpoint documents, the captured plan a contract
	// carries to other nodes (capture.go).
	doc any
	// plan is the captured plan, built once (Plan).
	planOnce sync.Once
	plan     []byte
	planHash string
	planErr  error

	// Canonical members of endpoint and lineage, built once.
	canonOnce    sync.Once
	canonMembers []canonMember
	canonLineage []byte
	canonErr     error
	input        *compiledSchema
	output       *compiledSchema
	outExpr      *Expr
	impact       string
	textTypes    textTypes // query and path value types (ConvertText)
	// missing lists the upstreams the steps name that the configuration
	// the recipe was built against does not declare (sorted, unique).
	missing []string
	// unavailable lists the step endpoints ("METHOD path") that the
	// configuration the recipe was built against does not declare with
	// the terms the plan captured (sorted, unique).
	unavailable []string
	// legacyHash is the hash of the version-1 captured plan a Restorer
	// rebuilt this recipe from (CapturedContract.Contract), or "".
	legacyHash string
}

// Step is one plan step: a Tier B endpoint called with the result of a
// jq mapping over $input and earlier steps' outputs.
type Step struct {
	// Name is the step's variable name ($name in later expressions).
	Name string
	// Index is the step's position in declared order.
	Index int
	// Endpoint is the Tier B primitive the step calls.
	Endpoint *Endpoint
	// Deps are the indexes of the steps this step reads.
	Deps []int

	input *Expr
}

// Lineage is recipe_lineage (spec §13.1).
type Lineage struct {
	RecipeName    string `json:"recipe_name"`
	RecipeVersion string `json:"recipe_version"`
}

// AppendJSON appends l as encoding/json.Marshal writes it
// ({"recipe_name":…,"recipe_version":…}, HTML-escaped).
func (l Lineage) AppendJSON(b []byte) []byte {
	b = append(b, `{"recipe_name":`...)
	b = jsonenc.AppendStringHTML(b, l.RecipeName)
	b = append(b, `,"recipe_version":`...)
	b = jsonenc.AppendStringHTML(b, l.RecipeVersion)
	return append(b, '}')
}

var impactRank = map[string]int{"informational": 0, "reversible": 1, "irreversible": 2}

// EndpointLookup finds a Tier B endpoint by method and declared path
// template.
type EndpointLookup func(method, path string) (*Endpoint, bool)

// BuildRecipe turns a validated recipe document into a Recipe: it
// checks the pattern against mp, compiles the schemas and jq
// expressions, resolves each step to a Tier B endpoint and computes the
// DAG (a step depends on the steps whose $name its input reads). Errors
// are located in doc. Spec §13, §24 item 85.
func BuildRecipe(doc *schema.Document, mp *policy.MethodPolicy, lookup EndpointLookup) (*Recipe, error) {
	var d schema.RecipeDoc
	if err := doc.Decode(&d); err != nil {
		return nil, doc.Errorf("", "%v", err)
	}
	r := &Recipe{Name: d.Name, Version: d.Version, Description: d.Description, Method: d.Pattern.Method,
		Propose: d.Propose == nil || *d.Propose, File: doc.File, impact: d.Endpoint.Semantic.Impact, doc: doc.Value}
	if !mp.IsMethod(r.Method) || policy.IsLegacyVerb(r.Method) {
		return nil, doc.Errorf("/pattern/method", "method %s is neither in the catalog nor a custom method (%s)", r.Method, policy.CatalogRule)
	}
	switch {
	case d.Pattern.PathExact != "" && d.Pattern.PathRegex != "":
		return nil, doc.Errorf("/pattern", "pattern must have exactly one of path_exact and path_regex")
	case d.Pattern.PathExact != "":
		if ref := mp.CheckPath(d.Pattern.PathExact); ref != nil {
			return nil, doc.Errorf("/pattern/path_exact", "%s", ref.Explanation)
		}
		r.PathExact = d.Pattern.PathExact
	case d.Pattern.PathRegex != "":
		re, err := regexp.Compile(`^(?:` + d.Pattern.PathRegex + `)$`)
		if err != nil {
			return nil, doc.Errorf("/pattern/path_regex", "invalid RE2 regular expression: %v", err)
		}
		r.PathRegex = re
	default:
		return nil, doc.Errorf("/pattern", "pattern must have path_exact or path_regex")
	}
	hasCF := false
	for _, e := range d.Endpoint.Errors {
		hasCF = hasCF || e == ErrCompositionFailed
	}
	if !hasCF {
		return nil, doc.Errorf("/endpoint/errors", "a composition endpoint must list %s in errors (spec §7.1)", ErrCompositionFailed)
	}
	if err := checkInputSchema(d.Endpoint.InputSchema); err != nil {
		return nil, doc.Errorf("/endpoint/input_schema", "%v", err)
	}
	var err error
	if r.input, err = compileSchema(d.Endpoint.InputSchema); err != nil {
		return nil, doc.Errorf("/endpoint/input_schema", "invalid JSON Schema: %v", err)
	}
	if r.output, err = compileSchema(d.Endpoint.OutputSchema); err != nil {
		return nil, doc.Errorf("/endpoint/output_schema", "invalid JSON Schema: %v", err)
	}
	r.textTypes = textTypesOf(d.Endpoint.InputSchema)
	scopes := map[string]policy.Scope{}
	addScopes := func(ptr string, list []string) error {
		for i, s := range list {
			sc, err := policy.ParseScope(s)
			if err != nil {
				return doc.Errorf(fmt.Sprintf("%s/%d", ptr, i), "%v", err)
			}
			scopes[sc.String()] = sc
		}
		return nil
	}
	if err := addScopes("/required_scopes", d.RequiredScopes); err != nil {
		return nil, err
	}
	if err := addScopes("/endpoint/required_scopes", d.Endpoint.RequiredScopes); err != nil {
		return nil, err
	}
	if len(d.Steps) == 0 {
		return nil, doc.Errorf("/steps", "a recipe needs at least one step")
	}
	seen := map[string]bool{"input": true}
	vars := []string{"$input"}
	for i, sd := range d.Steps {
		ptr := fmt.Sprintf("/steps/%d", i)
		if seen[sd.Name] {
			return nil, doc.Errorf(ptr+"/name", "step name %q is used twice or is reserved", sd.Name)
		}
		ep, ok := lookup(sd.Method, sd.Path)
		if !ok {
			return nil, doc.Errorf(ptr, "step %q names %s %s, which is not a registered Tier B endpoint", sd.Name, sd.Method, sd.Path)
		}
		x, err := CompileExpr(sd.Input, vars)
		if err != nil {
			return nil, doc.Errorf(ptr+"/input", "%v (a step may read $input and earlier steps only)", err)
		}
		if err := checkStepKeys(sd.Input, ep); err != nil {
			return nil, doc.Errorf(ptr+"/input", "step %q: %v", sd.Name, err)
		}
		used, err := uses(sd.Input, []string{"$input"}, vars[1:])
		if err != nil {
			return nil, doc.Errorf(ptr+"/input", "%v", err)
		}
		st := &Step{Name: sd.Name, Index: i, Endpoint: ep, input: x}
		for j, u := range used {
			if u {
				st.Deps = append(st.Deps, j)
			}
		}
		for _, sc := range ep.RequiredScopes {
			scopes[sc.String()] = sc
		}
		if impactRank[ep.Semantic.Impact] > impactRank[r.impact] {
			return nil, doc.Errorf("/endpoint/semantic/impact", "impact %q is lower than step %q's impact %q (spec §13.3)", r.impact, sd.Name, ep.Semantic.Impact)
		}
		r.Steps = append(r.Steps, st)
		if !ep.UpstreamConfigured() && !slices.Contains(r.missing, ep.UpstreamName()) {
			r.missing = append(r.missing, ep.UpstreamName())
		}
		if key := ep.Method + " " + ep.Path; ep.unavailable && !slices.Contains(r.unavailable, key) {
			r.unavailable = append(r.unavailable, key)
		}
		seen[sd.Name] = true
		vars = append(vars, "$"+sd.Name)
	}
	sort.Strings(r.missing)
	sort.Strings(r.unavailable)
	if r.outExpr, err = CompileExpr(d.Output, vars); err != nil {
		return nil, doc.Errorf("/output", "%v", err)
	}
	for _, sc := range scopes {
		r.RequiredScopes = append(r.RequiredScopes, sc)
	}
	sortScopes(r.RequiredScopes)
	scopeStrings := make([]string, len(r.RequiredScopes))
	for i, s := range r.RequiredScopes {
		scopeStrings[i] = s.String()
	}
	r.endpoint = map[string]any{
		"description":   d.Endpoint.Description,
		"semantic":      semanticMap(d.Endpoint.Semantic),
		"input_schema":  d.Endpoint.InputSchema,
		"output_schema": d.Endpoint.OutputSchema,
		"errors":        append([]string{}, d.Endpoint.Errors...),
		"handler":       map[string]any{"type": "composition"},
	}
	if len(scopeStrings) > 0 {
		r.endpoint["required_scopes"] = scopeStrings
	}
	raw, err := json.Marshal(doc.Value)
	if err != nil {
		return nil, doc.Errorf("", "%v", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, doc.Errorf("", "%v", err)
	}
	sum := sha256.Sum256(canon)
	r.ContentHash = hex.EncodeToString(sum[:])
	return r, nil
}

// checkStepKeys holds a step input mapping that builds an object with
// static keys (objectKeys) to the input_schema of the endpoint it calls:
// every key is one of its properties (unless it has patternProperties)
// and every property it requires is a key. A mapping that breaks either
// rule fails every call with invalid-input, which blames the agent for
// the recipe; other mapping shapes are checked only at run time.
func checkStepKeys(src string, ep *Endpoint) error {
	keys, ok := objectKeys(src)
	if !ok {
		return nil
	}
	in, _ := ep.projection["input_schema"].(map[string]any)
	props, _ := in["properties"].(map[string]any)
	_, patterned := in["patternProperties"]
	given := map[string]bool{}
	for _, k := range keys {
		given[k] = true
		if _, ok := props[k]; !ok && !patterned {
			return fmt.Errorf("input key %q is not a property of the input_schema of %s %s", k, ep.Method, ep.Path)
		}
	}
	if list, ok := in["required"].([]any); ok {
		for _, r := range list {
			if name, ok := r.(string); ok && !given[name] {
				return fmt.Errorf("input has no key %q, which the input_schema of %s %s requires", name, ep.Method, ep.Path)
			}
		}
	}
	return nil
}

func sortScopes(s []policy.Scope) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].String() < s[j-1].String(); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Matches reports whether the recipe's pattern matches (method, path)
// (spec §11.2 step 4: path_exact byte-exact, path_regex whole path).
func (r *Recipe) Matches(method, path string) bool {
	if method != r.Method {
		return false
	}
	if r.PathRegex != nil {
		return r.PathRegex.MatchString(path)
	}
	return path == r.PathExact
}

// PatternPath is the pattern's path_exact, or the regex source for
// path_regex patterns.
func (r *Recipe) PatternPath() string {
	if r.PathRegex != nil {
		s := r.PathRegex.String()
		return strings.TrimSuffix(strings.TrimPrefix(s, "^(?:"), ")$")
	}
	return r.PathExact
}

// MissingUpstreams returns the names of the upstreams the recipe's steps
// call that the configuration it was built against does not declare,
// sorted; nil when every step is bound. Only a recipe a Restorer rebuilt
// from a captured plan after an upstream was removed has any: such a
// recipe must not run (every call of such a step fails), and the
// contract that captured it is refused naming them.
func (r *Recipe) MissingUpstreams() []string { return r.missing }

// UnavailableEndpoints returns the step endpoints ("METHOD path") of a
// recipe a Restorer rebuilt from a captured plan that the configuration
// it was built against no longer declares with the terms the plan
// captured (removed, or changed in anything but its call settings:
// stepTerms), sorted; nil when every step is bound to a current
// endpoint. Such a recipe must not run: a step's headers (its upstream
// credential) and timeout come only from the running configuration's
// endpoint, and there is none. The contract is refused naming them.
func (r *Recipe) UnavailableEndpoints() []string { return r.unavailable }

// Depth is the number of leaf steps of the plan (spec §13.2, OP-16).
func (r *Recipe) Depth() int { return len(r.Steps) }

// Lineage returns the recipe's lineage.
func (r *Recipe) Lineage() Lineage { return Lineage{RecipeName: r.Name, RecipeVersion: r.Version} }

// EndpointFor returns the synthesized endpoint in manifest-projection
// form for a concrete path (spec §16.3: handler {"type":"composition"},
// no recipe reference). A fresh map each call.
func (r *Recipe) EndpointFor(method, path string) map[string]any {
	out := make(map[string]any, len(r.endpoint)+2)
	for k, v := range r.endpoint {
		out[k] = v
	}
	out["method"] = method
	out["path"] = path
	return out
}

// ValidateInput checks a contract invocation's input against the
// synthesized endpoint's input_schema (422 invalid-input).
func (r *Recipe) ValidateInput(input map[string]any) *Failure {
	return validateInput(r.input, input)
}

// StateChanging reports whether the synthesized endpoint's
// semantic.impact is above informational ([schema.StateChanging]).
func (r *Recipe) StateChanging() bool { return schema.StateChanging(r.impact) }

// Semantic returns the synthesized endpoint's semantic block.
func (r *Recipe) Semantic() map[string]any { return r.endpoint["semantic"].(map[string]any) }

type canonMember struct {
	key string
	raw []byte // "key":value in RFC 8785 form
}

// ContractHashFor is ContractHash(r.EndpointFor(method, path), lineage)
// without re-canonicalizing the endpoint on every call: the
// members of the projection are put in RFC 8785 form once, and method and
// path are spliced in at their sorted places. It also returns the
// endpoint's canonical JSON, for the 263/461 body.
func (r *Recipe) ContractHashFor(method, path string) (hash string, endpointJSON []byte, err error) {
	r.canonOnce.Do(func() {
		for k, v := range r.endpoint {
			raw, err := json.Marshal(map[string]any{k: v})
			if err != nil {
				r.canonErr = err
				return
			}
			c, err := jcs.Transform(raw)
			if err != nil {
				r.canonErr = err
				return
			}
			r.canonMembers = append(r.canonMembers, canonMember{k, c[1 : len(c)-1]})
		}
		lin := r.Lineage()
		raw, err := json.Marshal(&lin)
		if err != nil {
			r.canonErr = err
			return
		}
		r.canonLineage, r.canonErr = jcs.Transform(raw)
		sort.Slice(r.canonMembers, func(i, j int) bool { return r.canonMembers[i].key < r.canonMembers[j].key })
	})
	if r.canonErr != nil {
		return "", nil, r.canonErr
	}
	dyn := [2]canonMember{{key: "method"}, {key: "path"}} // sorted: "method" < "path"
	size := len(r.canonLineage) + 64
	for i, v := range [2]string{method, path} {
		c, ok := jsonenc.AppendJCSString([]byte(`"`+dyn[i].key+`":`), v)
		if !ok { // invalid UTF-8: let json.Marshal + JCS replace it
			raw, err := json.Marshal(map[string]string{dyn[i].key: v})
			if err != nil {
				return "", nil, err
			}
			if c, err = jcs.Transform(raw); err != nil {
				return "", nil, err
			}
			c = c[1 : len(c)-1]
		}
		dyn[i].raw = c
		size += len(c) + 1
	}
	for _, m := range r.canonMembers {
		size += len(m.raw) + 1
	}
	// One buffer: {"endpoint":<endpoint>,"recipe_lineage":<lineage>},
	// the endpoint's members in RFC 8785 order (canonMembers is sorted at
	// load; ASCII keys, so byte order is the UTF-16 order JCS uses).
	buf := make([]byte, 0, size)
	buf = append(buf, `{"endpoint":{`...)
	start := len(buf) - 1
	next := 0
	for _, m := range r.canonMembers {
		for next < len(dyn) && dyn[next].key < m.key {
			buf = append(append(buf, dyn[next].raw...), ',')
			next++
		}
		buf = append(append(buf, m.raw...), ',')
	}
	for ; next < len(dyn); next++ {
		buf = append(append(buf, dyn[next].raw...), ',')
	}
	buf[len(buf)-1] = '}'
	end := len(buf)
	buf = append(buf, `,"recipe_lineage":`...)
	buf = append(buf, r.canonLineage...)
	buf = append(buf, '}')
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:]), buf[start:end:end], nil
}

// ContractHash computes contract_hash per spec §16.3 (OP-23):
// lowercase hex SHA-256 over the RFC 8785 JCS form of
// {"endpoint": endpoint, "recipe_lineage": lineage}; lineage nil for a
// passthrough contract.
func ContractHash(endpoint map[string]any, lineage *Lineage) (string, error) {
	var l any
	if lineage != nil {
		l = lineage
	}
	raw, err := json.Marshal(map[string]any{"endpoint": endpoint, "recipe_lineage": l})
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}
