package recipes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxExactInteger is 2^53: every integer up to it in magnitude is a
// float64 exactly, the form a decoded JSON number takes here; a larger
// integer literal would be rounded (RFC 7493 §2.2).
const MaxExactInteger = 1 << 53

// HasLongDigitRun reports whether raw holds 16 or more consecutive ASCII
// digits, the least an integer beyond ±2^53 needs: a body without such a
// run is decoded to float64 without loss, and only one with it is
// tokenized again (InexactInteger, decodeExact).
func HasLongDigitRun(raw []byte) bool {
	run := 0
	for _, c := range raw {
		if c >= '0' && c <= '9' {
			if run++; run >= 16 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// InexactInteger reports whether lit, a JSON number literal, is an
// integer (no fraction, no exponent) beyond ±2^53, which a float64 would
// round. Numbers written with a fraction or an exponent are floats by
// their sender's choice.
func InexactInteger(lit string) bool {
	if strings.ContainsAny(lit, ".eE") {
		return false
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(lit, "-"), 10, 64)
	return err != nil || n > MaxExactInteger
}

// decodeExact decodes one JSON value (raw, already known to decode
// without error under opts) as json/v2 decodes into any, except that an
// integer literal beyond ±2^53 becomes a *big.Int holding it exactly:
// a legacy service's 64-bit ids reach the agent as sent. gojq computes
// on *big.Int, the answer encoders write it as a number, and schema
// checks read it as an integer (forSchemaLibrary).
func decodeExact(raw []byte, opts ...jsontext.Options) (any, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), opts...)
	return exactValue(dec)
}

func exactValue(dec *jsontext.Decoder) (any, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 't', 'f':
		return tok.Bool(), nil
	case '"':
		return tok.String(), nil
	case '0':
		if lit := tok.String(); InexactInteger(lit) {
			if n, ok := new(big.Int).SetString(lit, 10); ok {
				return n, nil
			}
		}
		return tok.Float()
	case '{':
		m := map[string]any{}
		for dec.PeekKind() != '}' {
			k, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			name := k.String() // before the next read voids the token
			v, err := exactValue(dec)
			if err != nil {
				return nil, err
			}
			m[name] = v // a duplicate name keeps its last value
		}
		_, err := dec.ReadToken()
		return m, err
	case '[':
		a := []any{}
		for dec.PeekKind() != ']' {
			v, err := exactValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.ReadToken()
		return a, err
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok.Kind())
}

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
