package recipes

import (
	"encoding/json"
	"math/big"
)

// forSchemaLibrary returns v with every *big.Int written as the
// json.Number jsonschema/v6 reads (it refuses *big.Int as "invalid
// jsonType"); v itself is never modified, and containers holding no
// *big.Int are shared, not copied.
func forSchemaLibrary(v any) any {
	out, _ := withNumbers(v)
	return out
}

// withNumbers is forSchemaLibrary, also reporting whether it changed v.
func withNumbers(v any) (any, bool) {
	switch x := v.(type) {
	case *big.Int:
		return json.Number(x.String()), true
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			c, changed := withNumbers(e)
			if !changed {
				continue
			}
			if out == nil {
				out = make(map[string]any, len(x))
				for k2, e2 := range x {
					out[k2] = e2
				}
			}
			out[k] = c
		}
		if out != nil {
			return out, true
		}
	case []any:
		var out []any
		for i, e := range x {
			c, changed := withNumbers(e)
			if !changed {
				continue
			}
			if out == nil {
				out = append([]any(nil), x...)
			}
			out[i] = c
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}
