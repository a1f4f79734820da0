package recipes

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Query-string and path values are text: ?available=true is the string
// "true". Before an invocation's input is validated, each value that
// came from the query or the path is converted to the scalar type its
// property declares in the input schema (spec OP-32 gives the query
// and path as input; RCNS §7.1 validates it), so an endpoint imported
// from OpenAPI with a boolean or integer query parameter accepts
// ?available=true&limit=10 on the HTTP and AGTP doors alike. Values in
// the JSON body are never converted: they already carry their type.

// textTypes are the scalar types a top-level property of an input
// schema declares, in the order a text value is tried against them:
// property name → subset of "integer", "number", "boolean". A property
// that admits "string" (or declares no type) is absent: its text value
// stays a string.
type textTypes map[string][]string

// textTypesOf reads the top-level properties of inputSchema: a "type"
// that is one of boolean, integer, number, or an array of types without
// "string" (its boolean, integer and number members, "null" ignored).
// Types given only through $ref, allOf, anyOf or oneOf are not read.
func textTypesOf(inputSchema map[string]any) textTypes {
	props, _ := inputSchema["properties"].(map[string]any)
	var out textTypes
	for name, p := range props {
		pm, _ := p.(map[string]any)
		var declared []string
		switch t := pm["type"].(type) {
		case string:
			declared = []string{t}
		case []any:
			for _, x := range t {
				if s, ok := x.(string); ok {
					declared = append(declared, s)
				}
			}
		}
		if conv := convertible(declared); conv != nil {
			if out == nil {
				out = textTypes{}
			}
			out[name] = conv
		}
	}
	return out
}

// convertible returns the members of declared a text value is converted
// to, in the order tried (integer, number, boolean); nil when declared
// admits strings or has none of them.
func convertible(declared []string) []string {
	var conv []string
	for _, want := range []string{"integer", "number", "boolean"} {
		for _, d := range declared {
			if d == "string" {
				return nil
			}
			if d == want {
				conv = append(conv, want)
			}
		}
	}
	return conv
}

var (
	jsonInteger = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)$`)
	jsonNumber  = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$`)
)

// maxExactInteger is 2^53: the integers a float64 (the type JSON body
// numbers decode to) holds exactly.
const maxExactInteger = 1 << 53

// convert converts the text values of in named by keys (the ones that
// came from the query string or the path) to the type their property
// declares in t, in place. A value that converts to none of them is a
// 422 invalid-input naming the parameter, the value and the type wanted
// (details: parameter, expected). Accepted forms: integer, JSON integer
// syntax within ±2^53 ("10", "-3"); number, JSON number syntax ("2.5",
// "1e3"); boolean, "true" or "false".
func (t textTypes) convert(in map[string]any, keys []string) *Failure {
	if len(t) == 0 {
		return nil
	}
	for _, k := range keys {
		types, ok := t[k]
		if !ok {
			continue
		}
		s, ok := in[k].(string)
		if !ok {
			continue
		}
		v, ok := convertText(s, types)
		if !ok {
			want := strings.Join(types, " or ")
			return &Failure{Status: 422, Code: ErrInvalidInput, SideEffectFree: true,
				Explanation: fmt.Sprintf("query or path parameter %q is %q, which is not a%s %s as input_schema declares (%s)",
					textcut.Clip(k), textcut.Clip(s), article(want), want, textForms(types)),
				Details: map[string]any{"parameter": k, "expected": want}}
		}
		in[k] = v
	}
	return nil
}

// convertText returns s as the first of types it parses as.
func convertText(s string, types []string) (any, bool) {
	for _, ty := range types {
		switch ty {
		case "boolean":
			if s == "true" || s == "false" {
				return s == "true", true
			}
		case "integer":
			if jsonInteger.MatchString(s) {
				if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= -maxExactInteger && n <= maxExactInteger {
					return float64(n), true
				}
			}
		case "number":
			if jsonNumber.MatchString(s) {
				if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) {
					return f, true
				}
			}
		}
	}
	return nil, false
}

func article(s string) string {
	if strings.HasPrefix(s, "integer") {
		return "n"
	}
	return ""
}

// textForms says what text each type accepts, for the explanation.
func textForms(types []string) string {
	forms := make([]string, len(types))
	for i, ty := range types {
		switch ty {
		case "boolean":
			forms[i] = "true or false"
		case "integer":
			forms[i] = "a JSON integer: digits without a leading zero, optionally after -, at most 2^53"
		case "number":
			forms[i] = "a JSON number such as 2.5"
		}
	}
	return strings.Join(forms, "; ")
}

// ConvertText converts the values of in named by textKeys (those taken
// from the query string or the path, always strings) to the boolean,
// integer or number type the endpoint's input_schema declares for them,
// in place, before ValidateInput (spec OP-32, §7.1). It returns a 422
// invalid-input Failure naming the first parameter whose text does not
// convert, or nil. Keys whose property admits strings, or that the
// schema does not declare, are left as they are.
func (e *Endpoint) ConvertText(in map[string]any, textKeys []string) *Failure {
	return e.textTypes.convert(in, textKeys)
}

// ConvertText is Endpoint.ConvertText for the synthesized endpoint's
// input_schema (a contract's or the gate's input).
func (r *Recipe) ConvertText(in map[string]any, textKeys []string) *Failure {
	return r.textTypes.convert(in, textKeys)
}
