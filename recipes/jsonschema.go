package recipes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

var printer = message.NewPrinter(language.English)

// CompileSchema compiles an operator- or agent-supplied JSON Schema
// (draft 2020-12 unless the document says otherwise) held as a decoded
// JSON value. It never fetches remote references. Spec §7.1, §15.3 step 4.
func CompileSchema(doc map[string]any) (*jsonschema.Schema, error) {
	if doc == nil {
		return nil, errors.New("schema is missing")
	}
	// Round-trip through jsonschema's own decoder so numbers are json.Number.
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemoteLoader{})
	if err := c.AddResource(schemaResource, v); err != nil {
		return nil, err
	}
	return c.Compile(schemaResource)
}

// schemaResource is the name CompileSchema gives the schema it compiles.
const schemaResource = "mem:///schema.json"

// SchemaErrorText is err (a CompileSchema failure) as an answer quotes
// it to an agent: on one line (jsonschema/v6 reports a tree over
// several), without the internal resource name (a JSON pointer into the
// proposed schema stays, as "#/…"), cut to at most n bytes (Truncate):
// a proposed schema is the caller's, so the text about it may not grow
// with it.
func SchemaErrorText(err error, n int) string {
	s := strings.ReplaceAll(err.Error(), schemaResource, "")
	return textcut.Truncate(strings.Join(strings.Fields(s), " "), n)
}

// Limits on an agent-proposed JSON Schema (PROPOSE input_schema and
// output_schema), checked by CheckProposedSchema before the schema is
// compiled. jsonschema/v6's compiler costs roughly cubic time in the
// nesting depth of a schema ({"items":{"items":...}} 2,000 deep takes
// over 10 s of CPU), so a schema an agent sends is bounded in shape
// first. At the limits the compile takes a few milliseconds.
const (
	// MaxProposedSchemaDepth is the deepest JSON nesting a proposed
	// schema may have: the schema object itself is level 1 and every
	// object or array inside it adds a level.
	MaxProposedSchemaDepth = 32
	// MaxProposedSchemaNodes is the most JSON values (objects, arrays,
	// strings, numbers, booleans, nulls; object keys are not counted) a
	// proposed schema may hold.
	MaxProposedSchemaNodes = 1000
)

// CheckProposedSchema reports whether doc, an agent-proposed schema
// held as a decoded JSON value, is within MaxProposedSchemaDepth and
// MaxProposedSchemaNodes. It stops walking as soon as a limit is passed,
// so its own cost is bounded by the limits.
func CheckProposedSchema(doc any) error {
	nodes := 0
	var walk func(v any, depth int) error
	walk = func(v any, depth int) error {
		nodes++
		if nodes > MaxProposedSchemaNodes {
			return fmt.Errorf("it holds more than %d JSON values; a proposed schema may hold at most %d", MaxProposedSchemaNodes, MaxProposedSchemaNodes)
		}
		switch t := v.(type) {
		case map[string]any:
			if depth > MaxProposedSchemaDepth {
				return fmt.Errorf("it nests deeper than %d levels of JSON objects and arrays; a proposed schema may nest at most %d", MaxProposedSchemaDepth, MaxProposedSchemaDepth)
			}
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys) // the same document always reports the same limit
			for _, k := range keys {
				if err := walk(t[k], depth+1); err != nil {
					return err
				}
			}
		case []any:
			if depth > MaxProposedSchemaDepth {
				return fmt.Errorf("it nests deeper than %d levels of JSON objects and arrays; a proposed schema may nest at most %d", MaxProposedSchemaDepth, MaxProposedSchemaDepth)
			}
			for _, e := range t {
				if err := walk(e, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(doc, 1)
}

type noRemoteLoader struct{}

func (noRemoteLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("remote schema references are not allowed: %s", url)
}

// validate checks v against s and returns human-readable violations,
// each "at /pointer: message", sorted; nil when v is valid.
func validate(s *jsonschema.Schema, v any) []string {
	if s == nil {
		return nil
	}
	err := s.Validate(forSchemaLibrary(v))
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{err.Error()}
	}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			msg := ""
			if ap, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
				msg = additionalProperties(ap.Properties)
			} else {
				msg = e.ErrorKind.LocalizedString(printer)
			}
			out = append(out, textcut.Truncate(fmt.Sprintf("at %s: %s", loc, msg), maxViolationBytes))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(out)
	return out
}

// Bounds of the violations an answer carries: the input is the caller's
// (up to max_request_body) and an upstream's output up to
// max_upstream_response, so neither the number of violations nor the
// size of one (a value or key it quotes) may grow with it.
const (
	// maxViolationBytes bounds one violation's text.
	maxViolationBytes = 256
	// maxListedProperties bounds the properties an "additional
	// properties" violation names.
	maxListedProperties = 5
	// maxListedViolations bounds the violations listed in error.details.
	maxListedViolations = 20
	// maxExplainedViolations bounds the violations quoted in an
	// explanation.
	maxExplainedViolations = 3
)

// additionalProperties words an additionalProperties violation: the
// first maxListedProperties names in sorted order (jsonschema/v6 lists
// them all, in map order), then how many more there are.
func additionalProperties(props []string) string {
	props = slices.Clone(props)
	sort.Strings(props)
	n := len(props)
	if n > maxListedProperties {
		props = props[:maxListedProperties]
	}
	q := make([]string, len(props))
	for i, p := range props {
		q[i] = "'" + textcut.Clip(p) + "'"
	}
	msg := "additional properties " + strings.Join(q, ", ")
	if n > len(props) {
		msg += fmt.Sprintf(" and %d more", n-len(props))
	}
	return msg + " not allowed"
}

// describeViolations is a schema check's failure as an answer words it: what
// does not match ("input does not match input_schema"), then the first
// few violations and how many there are in all. Details are the first
// maxListedViolations violations under "violations" and their total under
// "violation_count". probs is validate's sorted list, each entry already
// bounded in size.
func describeViolations(what string, probs []string) (explanation string, details map[string]any) {
	shown := probs[:min(len(probs), maxExplainedViolations)]
	explanation = what + ": " + strings.Join(shown, "; ")
	if more := len(probs) - len(shown); more > 0 {
		explanation += fmt.Sprintf("; and %d more (%d violations in all)", more, len(probs))
	}
	listed := slices.Clone(probs[:min(len(probs), maxListedViolations)])
	return explanation, map[string]any{"violations": listed, "violation_count": len(probs)}
}

// checkObjectSchema enforces spec §7.1 on an input schema: `"type":
// "object"` and `"additionalProperties": false`.
func checkInputSchema(doc map[string]any) error {
	if t, _ := doc["type"].(string); t != "object" {
		return errors.New(`input_schema must have "type": "object"`)
	}
	if ap, ok := doc["additionalProperties"].(bool); !ok || ap {
		return errors.New(`input_schema must have "additionalProperties": false`)
	}
	return nil
}

// compiledSchema is a JSON Schema compiled twice: jsonschema/v6's, which is the
// authority, plus fast, an allocation-free check for schemas that use
// only the keywords operators' input and output schemas mostly use
// (see compileFast). fast decides only "valid": an instance it does not
// accept — invalid, or a value it does not model — goes to jsonschema/v6,
// which decides and words the violations. TestFastSchemaAgreesWithJSONSchema
// holds the two to the same verdicts.
type compiledSchema struct {
	lib  *jsonschema.Schema
	fast *fastSchema // nil: the schema uses a keyword outside the subset
}

// compileSchema compiles doc with CompileSchema and, when it can, the
// fast check.
func compileSchema(doc map[string]any) (*compiledSchema, error) {
	lib, err := CompileSchema(doc)
	if err != nil {
		return nil, err
	}
	return &compiledSchema{lib: lib, fast: compileFast(doc)}, nil
}

// validateSchema is validate for a compiled schema (nil: no schema).
func validateSchema(s *compiledSchema, v any) []string {
	if s == nil {
		return nil
	}
	if s.fast != nil && s.fast.valid(v) {
		return nil
	}
	return validate(s.lib, v)
}

// JSON types as a bit set; an integral number is both number and integer.
const (
	tNull uint8 = 1 << iota
	tBoolean
	tString
	tNumber
	tInteger
	tObject
	tArray
)

var typeBits = map[string]uint8{"null": tNull, "boolean": tBoolean, "string": tString, "number": tNumber,
	"integer": tInteger, "object": tObject, "array": tArray}

// fastSchema is the subset of JSON Schema (draft 2020-12) compileFast
// accepts: boolean schemas; type (a name or a list); properties;
// required; additionalProperties (a boolean or a subset schema);
// minLength and maxLength (in code points); items (one schema); and the
// annotations title, description, examples, default, $comment.
type fastSchema struct {
	accept, reject bool // boolean schemas
	types          uint8
	props          map[string]*fastSchema
	required       []string
	additional     *fastSchema // nil: any additional property
	minLen, maxLen int         // -1: unset
	items          *fastSchema
}

// compileFast returns the fast check of doc, or nil when doc uses
// anything outside the subset.
func compileFast(doc any) *fastSchema {
	switch d := doc.(type) {
	case bool:
		return &fastSchema{accept: d, reject: !d}
	case map[string]any:
		s := &fastSchema{minLen: -1, maxLen: -1}
		for k, v := range d {
			switch k {
			case "title", "description", "examples", "default", "$comment":
			case "type":
				switch t := v.(type) {
				case string:
					if s.types = typeBits[t]; s.types == 0 {
						return nil
					}
				case []any:
					for _, e := range t {
						name, _ := e.(string)
						b := typeBits[name]
						if b == 0 {
							return nil
						}
						s.types |= b
					}
				default:
					return nil
				}
			case "properties":
				m, ok := v.(map[string]any)
				if !ok {
					return nil
				}
				s.props = make(map[string]*fastSchema, len(m))
				for name, sub := range m {
					if !utf8.ValidString(name) {
						return nil // CompileSchema's JSON round trip would rename it
					}
					if s.props[name] = compileFast(sub); s.props[name] == nil {
						return nil
					}
				}
			case "required":
				l, ok := v.([]any)
				if !ok {
					return nil
				}
				for _, e := range l {
					name, ok := e.(string)
					if !ok || !utf8.ValidString(name) {
						return nil
					}
					s.required = append(s.required, name)
				}
			case "additionalProperties":
				if s.additional = compileFast(v); s.additional == nil {
					return nil
				}
			case "items":
				if s.items = compileFast(v); s.items == nil {
					return nil
				}
			case "minLength", "maxLength":
				n, ok := nonNegativeInt(v)
				if !ok {
					return nil
				}
				if k == "minLength" {
					s.minLen = n
				} else {
					s.maxLen = n
				}
			default:
				return nil
			}
		}
		return s
	}
	return nil
}

func nonNegativeInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, n >= 0
	case int64:
		return int(n), n >= 0 && n <= math.MaxInt32
	case uint64:
		return int(n), n <= math.MaxInt32
	case float64:
		return int(n), n >= 0 && n <= math.MaxInt32 && n == math.Trunc(n)
	case json.Number:
		i, err := n.Int64()
		return int(i), err == nil && i >= 0 && i <= math.MaxInt32
	}
	return 0, false
}

// jsonType returns the JSON type bits of a decoded value, 0 for a Go
// value the fast check does not model (NaN, ±Inf, others). A *big.Int
// is an integer beyond ±2^53 (decodeExact, or gojq arithmetic).
func jsonType(v any) uint8 {
	switch x := v.(type) {
	case nil:
		return tNull
	case bool:
		return tBoolean
	case string:
		return tString
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0
		}
		if x == math.Trunc(x) {
			return tNumber | tInteger
		}
		return tNumber
	case int, int64, *big.Int:
		return tNumber | tInteger
	case map[string]any:
		return tObject
	case []any:
		return tArray
	}
	return 0
}

// valid reports whether v certainly satisfies s; false means "not
// decided here" (the caller asks jsonschema/v6).
func (s *fastSchema) valid(v any) bool {
	if s.reject {
		return false
	}
	t := jsonType(v)
	if t == 0 {
		return false
	}
	if s.accept {
		return true
	}
	if s.types != 0 && s.types&t == 0 {
		return false
	}
	switch x := v.(type) {
	case string:
		if s.minLen >= 0 || s.maxLen >= 0 {
			n := utf8.RuneCountInString(x)
			if s.minLen >= 0 && n < s.minLen || s.maxLen >= 0 && n > s.maxLen {
				return false
			}
		}
	case map[string]any:
		for _, name := range s.required {
			if _, ok := x[name]; !ok {
				return false
			}
		}
		for k, val := range x {
			if sub, ok := s.props[k]; ok {
				if !sub.valid(val) {
					return false
				}
			} else if s.additional != nil && !s.additional.valid(val) {
				return false
			}
		}
	case []any:
		if s.items != nil {
			for _, e := range x {
				if !s.items.valid(e) {
					return false
				}
			}
		}
	}
	return true
}
