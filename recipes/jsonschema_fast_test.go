package recipes

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// randSchema returns a random schema document inside compileFast's
// subset, depth levels deep at most.
func randSchema(r *rand.Rand, depth int) any {
	if depth == 0 || r.IntN(8) == 0 {
		if r.IntN(3) == 0 {
			return r.IntN(2) == 0 // boolean schema
		}
	}
	s := map[string]any{}
	types := []string{"null", "boolean", "string", "number", "integer", "object", "array"}
	switch r.IntN(4) {
	case 0:
	case 1, 2:
		s["type"] = types[r.IntN(len(types))]
	case 3:
		i := r.IntN(len(types))
		s["type"] = []any{types[i], types[(i+1+r.IntN(len(types)-1))%len(types)]}
	}
	if r.IntN(2) == 0 {
		s["minLength"] = r.IntN(3)
	}
	if r.IntN(3) == 0 {
		s["maxLength"] = r.IntN(4)
	}
	if depth > 0 {
		if r.IntN(2) == 0 {
			props := map[string]any{}
			for _, k := range []string{"a", "b", "type"} {
				if r.IntN(2) == 0 {
					props[k] = randSchema(r, depth-1)
				}
			}
			s["properties"] = props
		}
		if r.IntN(2) == 0 {
			var req []any
			for _, k := range []string{"a", "b", "c"} {
				if r.IntN(3) == 0 {
					req = append(req, k)
				}
			}
			if req != nil {
				s["required"] = req
			}
		}
		if r.IntN(3) == 0 {
			if r.IntN(2) == 0 {
				s["additionalProperties"] = r.IntN(2) == 0
			} else {
				s["additionalProperties"] = randSchema(r, depth-1)
			}
		}
		if r.IntN(3) == 0 {
			s["items"] = randSchema(r, depth-1)
		}
	}
	if r.IntN(4) == 0 {
		s["description"] = "annotation"
	}
	return s
}

// randValue returns a random decoded JSON value of the Go types the
// plan produces (float64 and int numbers).
func randValue(r *rand.Rand, depth int) any {
	n := 9
	if depth == 0 {
		n = 7
	}
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return []string{"", "x", "é", "😀", "ab", "😀😀😀", "abcd"}[r.IntN(7)]
	case 3:
		return []float64{0, 1, -2, 1.5, 3.0, 1e21, -0.25}[r.IntN(7)]
	case 4:
		return r.IntN(5) - 2
	case 5:
		return "abc"
	case 6:
		return 2.0
	case 7:
		m := map[string]any{}
		for _, k := range []string{"a", "b", "c", "type"} {
			if r.IntN(2) == 0 {
				m[k] = randValue(r, depth-1)
			}
		}
		return m
	default:
		l := []any{}
		for range r.IntN(3) {
			l = append(l, randValue(r, depth-1))
		}
		return l
	}
}

// TestFastSchemaAgreesWithJSONSchema: on random schemas of the fast
// subset and random values, the fast check accepts exactly the values
// jsonschema/v6 accepts (so it never lets an invalid value through, and
// it does take the work off jsonschema/v6 for valid ones).
func TestFastSchemaAgreesWithJSONSchema(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	checked, accepted := 0, 0
	for i := 0; i < 600; i++ {
		doc := randSchema(r, 3)
		m, ok := doc.(map[string]any)
		if !ok {
			m = map[string]any{"properties": map[string]any{"a": doc}}
		}
		lib, err := CompileSchema(m)
		if err != nil {
			t.Fatalf("CompileSchema(%v): %v", m, err)
		}
		fast := compileFast(m)
		if fast == nil {
			t.Fatalf("compileFast(%v) = nil for a schema inside the subset", m)
		}
		for j := 0; j < 40; j++ {
			v := randValue(r, 3)
			want := lib.Validate(v) == nil
			if got := fast.valid(v); got != want {
				t.Fatalf("schema %v, value %#v: fast %v, jsonschema/v6 %v", m, v, got, want)
			}
			checked++
			if want {
				accepted++
			}
		}
	}
	if accepted < checked/10 || accepted > checked*9/10 {
		t.Fatalf("%d of %d random cases valid: the generator does not exercise both verdicts", accepted, checked)
	}
}

// TestFastSchemaFallsBack: values the fast check does not model, and
// schemas outside its subset, go to jsonschema/v6.
func TestFastSchemaFallsBack(t *testing.T) {
	s, err := compileSchema(map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{map[string]any{"n": math.NaN()}, map[string]any{"n": int32(1)}} {
		if s.fast.valid(v) {
			t.Errorf("fast check accepted %#v, which it does not model", v)
		}
	}
	// A *big.Int (an integer beyond ±2^53 kept exactly) is an integer
	// to both checks; jsonschema/v6 reads it through forSchemaLibrary.
	big1, _ := new(big.Int).SetString("123456789012345678901234567890", 10)
	if !s.fast.valid(map[string]any{"n": big1}) || validate(s.lib, map[string]any{"n": big1}) != nil {
		t.Errorf("an integer beyond 2^53 failed an integer schema: fast %v, jsonschema/v6 %v",
			s.fast.valid(map[string]any{"n": big1}), validate(s.lib, map[string]any{"n": big1}))
	}
	str, err := compileSchema(map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "string", "minLength": 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := validateSchema(str, map[string]any{"n": big1}); len(p) == 0 {
		t.Error("an integer beyond 2^53 passed a string schema")
	}
	if p := validateSchema(s, map[string]any{"n": 1.5}); len(p) == 0 {
		t.Error("1.5 passed an integer schema")
	}
	for _, doc := range []map[string]any{
		{"type": "string", "pattern": "^a"},
		{"type": "number", "minimum": 1},
		{"enum": []any{"a"}},
		{"$ref": "#/$defs/x", "$defs": map[string]any{"x": true}},
		{"properties": map[string]any{"a": map[string]any{"format": "email"}}},
	} {
		if compileFast(doc) != nil {
			t.Errorf("compileFast(%v) != nil for a keyword outside the subset", doc)
		}
	}
}

// TestFastSchemaRefusesInvalidUTF8Names: CompileSchema's JSON round trip
// turns invalid UTF-8 in names into U+FFFD, so such schemas stay with
// jsonschema/v6.
func TestFastSchemaRefusesInvalidUTF8Names(t *testing.T) {
	for _, doc := range []map[string]any{
		{"properties": map[string]any{"\xff": map[string]any{"type": "number"}}, "additionalProperties": false},
		{"required": []any{"\xff"}},
	} {
		if compileFast(doc) != nil {
			t.Errorf("compileFast(%q) != nil", doc)
		}
	}
}
