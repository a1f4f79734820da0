// Package schema loads and validates the operator documents of
// caddy-rcns: agents, Tier B endpoints and Tier C recipes
// (docs/configuration.md, "Operator documents").
//
// A document is YAML (JSON is YAML), one per file. Parse decodes it
// strictly (no anchors, aliases, merge keys, custom tags, duplicate or
// non-string keys; timestamps stay strings), validates it against the
// embedded JSON Schema (draft 2020-12) of its Kind, and reports every
// problem as an *Error naming the file, the line and column, and the
// JSON pointer. The typed structs (AgentDoc, EndpointDoc, RecipeDoc)
// mirror the schemas; fill them with Document.Decode once Parse has
// succeeded. Cross-document checks (a step naming an unknown endpoint,
// an error_map value missing from errors, path grammar against the
// method catalog, compiling input_schema and jq) belong to other
// packages, which report them with Document.Errorf.
//
// This package is a leaf: it imports only the standard library,
// santhosh-tekuri/jsonschema/v6 and go.yaml.in/yaml/v3.
package schema

import (
	"bytes"
	"embed"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Kind names the kind of an operator document and selects its schema.
type Kind string

// The three kinds of operator documents (docs/configuration.md).
const (
	// KindAgent is an agent registry entry (agent.schema.json).
	KindAgent Kind = "agent"
	// KindEndpoint is a Tier B endpoint bound to an upstream
	// (endpoint.schema.json; RCNS §7).
	KindEndpoint Kind = "endpoint"
	// KindRecipe is a Tier C recipe (recipe.schema.json; RCNS §13.1).
	KindRecipe Kind = "recipe"
)

// schemaBase is the URL prefix of the embedded schemas' $id.
const schemaBase = "https://github.com/caddy-rcns/caddy-rcns/recipes/schema/"

//go:embed defs.schema.json agent.schema.json endpoint.schema.json recipe.schema.json
var schemaFS embed.FS

// schemaFiles maps each Kind to its schema file.
var schemaFiles = map[Kind]string{
	KindAgent:    "agent.schema.json",
	KindEndpoint: "endpoint.schema.json",
	KindRecipe:   "recipe.schema.json",
}

// compiled holds the compiled schemas and the raw schema documents (by
// $id URL) used to phrase error messages.
type compiled struct {
	schemas map[Kind]*jsonschema.Schema
	raw     map[string]any
}

// loadSchemas compiles the embedded schemas once; it is safe for
// concurrent use. An error here is a bug in the embedded files.
var loadSchemas = sync.OnceValues(func() (*compiled, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	out := &compiled{schemas: make(map[Kind]*jsonschema.Schema), raw: make(map[string]any)}
	entries, err := schemaFS.ReadDir(".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := schemaFS.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema: embedded %s: %w", e.Name(), err)
		}
		u := schemaBase + e.Name()
		if err := c.AddResource(u, doc); err != nil {
			return nil, fmt.Errorf("schema: embedded %s: %w", e.Name(), err)
		}
		out.raw[u] = doc
	}
	for k, name := range schemaFiles {
		s, err := c.Compile(schemaBase + name)
		if err != nil {
			return nil, fmt.Errorf("schema: embedded %s: %w", name, err)
		}
		out.schemas[k] = s
	}
	return out, nil
})

// lookup returns the raw schema value at an absolute schema location
// ("https://…/defs.schema.json#/$defs/scope") followed by extra tokens,
// or nil when it cannot be found.
func (c *compiled) lookup(loc string, extra ...string) any {
	base, frag, _ := strings.Cut(loc, "#")
	v, ok := c.raw[base]
	if !ok {
		return nil
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	var tokens []string
	if frag != "" {
		for _, t := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
			t = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
			tokens = append(tokens, t)
		}
	}
	tokens = append(tokens, extra...)
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			v, ok = x[t]
		case []any:
			i, err := strconv.Atoi(t)
			ok = err == nil && i >= 0 && i < len(x)
			if ok {
				v = x[i]
			}
		default:
			ok = false
		}
		if !ok {
			return nil
		}
	}
	return v
}

// upstreamNameLoc is where endpoint.schema.json gives the pattern of
// external_service.upstream, the one definition of an upstream name.
const upstreamNameLoc = schemaBase + "endpoint.schema.json#/properties/external_service/properties/upstream"

// upstreamName is the compiled upstream-name pattern (Go's regexp, the
// engine the schema validator uses).
var upstreamName = sync.OnceValue(func() *regexp.Regexp {
	c, err := loadSchemas()
	if err != nil {
		panic(err) // a bug in the embedded files
	}
	p, ok := c.lookup(upstreamNameLoc, "pattern").(string)
	if !ok {
		panic("schema: endpoint.schema.json gives external_service.upstream no pattern")
	}
	return regexp.MustCompile(p)
})

// UpstreamNamePattern returns the regular expression an upstream name
// must match: the pattern endpoint.schema.json gives
// external_service.upstream, so an upstream declared with any other
// name could never be used by an endpoint.
func UpstreamNamePattern() string { return upstreamName().String() }

// ValidUpstreamName reports whether name matches UpstreamNamePattern.
func ValidUpstreamName(name string) bool { return upstreamName().MatchString(name) }
