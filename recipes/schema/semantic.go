package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Capabilities are the values of semantic.capability (RCNS §7.2).
var Capabilities = []string{
	"discovery", "retrieval", "analysis", "transaction", "modification",
	"creation", "notification", "mechanics", "domain_spanning",
}

// Impacts are the values of semantic.impact, lowest first (RCNS §7.2,
// §13.3: informational < reversible < irreversible).
var Impacts = []string{"informational", "reversible", "irreversible"}

// StateChanging reports whether impact, a semantic.impact value, is
// above informational (reversible or irreversible): an answer that ran
// such an endpoint carries an action_id (RCNS §16.2).
func StateChanging(impact string) bool { return impact != "" && impact != Impacts[0] }

// semanticFields are the seven required fields, in spec order.
var semanticFields = []string{
	"intent", "actor", "outcome", "capability", "confidence", "impact", "is_idempotent",
}

// ValidateSemantic checks a semantic block given as a decoded JSON value
// (normally map[string]any; numbers as float64, json.Number or any Go
// integer or float type) and returns its problems, one phrase each (e.g.
// "missing field 'impact'", "confidence 1.5 is outside [0, 1]"), or nil
// when it is valid. It checks RCNS §7.2 / §15.3 step 3: all seven fields
// present; intent, actor and outcome non-empty strings; capability and
// impact from Capabilities and Impacts; confidence a number in [0, 1];
// is_idempotent a boolean. Unknown extra fields are not reported (the
// operator-document schema refuses them; PROPOSE bodies may carry them).
func ValidateSemantic(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("semantic block is %s, want an object", JSONTypeName(v))}
	}
	var problems []string
	for _, f := range semanticFields {
		val, present := m[f]
		if !present {
			problems = append(problems, fmt.Sprintf("missing field %s", quote(f)))
			continue
		}
		switch f {
		case "intent", "actor", "outcome":
			s, ok := val.(string)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s is %s, want a string", f, JSONTypeName(val)))
			case s == "":
				problems = append(problems, fmt.Sprintf("%s is empty", f))
			}
		case "capability", "impact":
			allowed := Capabilities
			if f == "impact" {
				allowed = Impacts
			}
			s, ok := val.(string)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s is %s, want a string", f, JSONTypeName(val)))
			case !slices.Contains(allowed, s):
				problems = append(problems, fmt.Sprintf("unknown %s %s, want one of %s", f, quote(s), quoteAll(allowed)))
			}
		case "confidence":
			x, ok := number(val)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("confidence is %s, want a number", JSONTypeName(val)))
			case math.IsNaN(x) || x < 0 || x > 1:
				problems = append(problems, fmt.Sprintf("confidence %v is outside [0, 1]", x))
			}
		case "is_idempotent":
			if _, ok := val.(bool); !ok {
				problems = append(problems, fmt.Sprintf("is_idempotent is %s, want a boolean", JSONTypeName(val)))
			}
		}
	}
	return problems
}

// number converts the numeric shapes a JSON decoder may produce.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

// JSONTypeName names the JSON type of a decoded value (JSON, YAML or
// jq) for messages: "null", "a string", "a boolean", "an object",
// "an array", "a number" (any Go numeric type), else "a <Go type>".
func JSONTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	if _, ok := number(v); ok {
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}
