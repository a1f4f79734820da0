package mcpdoor

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestPortableTypes: a type array becomes an anyOf of single types,
// beside the other keywords, and an anyOf already there is kept under
// allOf; enum and const values are data and stay.
func TestPortableTypes(t *testing.T) {
	var s map[string]any
	if err := json.Unmarshal([]byte(`{"type":"object","properties":{
		"id":{"type":["integer","string"],"minimum":1},
		"one":{"type":["string"]},
		"both":{"type":["string","null"],"anyOf":[{"minLength":1},{"type":"null"}]},
		"data":{"const":{"type":["a","b"]}}}}`), &s); err != nil {
		t.Fatal(err)
	}
	embedSchema(s, "#/$defs/result")
	var want map[string]any
	if err := json.Unmarshal([]byte(`{"type":"object","properties":{
		"id":{"anyOf":[{"type":"integer"},{"type":"string"}],"minimum":1},
		"one":{"type":"string"},
		"both":{"allOf":[{"anyOf":[{"minLength":1},{"type":"null"}]},{"anyOf":[{"type":"string"},{"type":"null"}]}]},
		"data":{"const":{"type":["a","b"]}}}}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, want) {
		got, _ := json.Marshal(s)
		t.Fatalf("embedSchema = %s", got)
	}
	// No tool's output schema holds a type array.
	d, err := New(testEngine(t), &Config{Path: DefaultMCPPath})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range d.tools {
		raw, _ := json.Marshal(tl.def.OutputSchema)
		var v any
		_ = json.Unmarshal(raw, &v)
		if p := typeArray(v, ""); p != "" {
			t.Errorf("tool %s: a type array at %s", tl.name, p)
		}
	}
}

// typeArray is the JSON path of the first "type" array in schema v
// outside enum/const values, "" when none.
func typeArray(v any, at string) string {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["type"].([]any); ok {
			return at + "/type"
		}
		for k, c := range x {
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				continue
			}
			if p := typeArray(c, at+"/"+k); p != "" {
				return p
			}
		}
	case []any:
		for _, c := range x {
			if p := typeArray(c, at+"/[]"); p != "" {
				return p
			}
		}
	}
	return ""
}
