package recipes

import (
	"strconv"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// nestedItems is {"items":{"items":...{"type":"string"}}} whose JSON
// nesting is depth levels (the schema object itself is one).
func nestedItems(depth int) map[string]any {
	m := map[string]any{"type": "string"}
	for i := 1; i < depth; i++ {
		m = map[string]any{"items": m}
	}
	return m
}

// TestCheckProposedSchema: the depth and value-count limits hold exactly
// at MaxProposedSchemaDepth and MaxProposedSchemaNodes, arrays count as
// levels like objects, and the walk stops at the limit (a 100,000-deep
// document is refused without walking it all).
func TestCheckProposedSchema(t *testing.T) {
	if err := CheckProposedSchema(nestedItems(MaxProposedSchemaDepth)); err != nil {
		t.Errorf("depth %d: %v", MaxProposedSchemaDepth, err)
	}
	for _, d := range []int{MaxProposedSchemaDepth + 1, 100000} {
		if err := CheckProposedSchema(nestedItems(d)); err == nil || !strings.Contains(err.Error(), "nests deeper than 32 levels") {
			t.Errorf("depth %d: %v; want the depth refusal", d, err)
		}
	}
	arr := any(map[string]any{"type": "string"})
	for i := 1; i < MaxProposedSchemaDepth+1; i++ {
		arr = []any{arr}
	}
	if err := CheckProposedSchema(map[string]any{"prefixItems": arr}); err == nil {
		t.Error("arrays nested past the limit: accepted")
	}
	// Exactly MaxProposedSchemaNodes values: the schema object, its
	// properties object and the rest booleans.
	props := map[string]any{}
	for i := 0; i < MaxProposedSchemaNodes-2; i++ {
		props["p"+strconv.Itoa(i)] = true
	}
	if err := CheckProposedSchema(map[string]any{"properties": props}); err != nil {
		t.Errorf("%d values: %v", MaxProposedSchemaNodes, err)
	}
	props["one-more"] = true
	if err := CheckProposedSchema(map[string]any{"properties": props}); err == nil || !strings.Contains(err.Error(), "more than 1000 JSON values") {
		t.Errorf("%d values: %v; want the value-count refusal", MaxProposedSchemaNodes+1, err)
	}
}

// BenchmarkCompileProposedSchemaAtLimits measures what CompileSchema costs
// for the worst shapes CheckProposedSchema lets through: nesting exactly
// MaxProposedSchemaDepth deep, and MaxProposedSchemaNodes values in a
// $ref chain (each level a fresh subschema).
func BenchmarkCompileProposedSchemaAtLimits(b *testing.B) {
	defs := map[string]any{}
	n := (MaxProposedSchemaNodes - 4) / 4
	for i := 0; i < n; i++ {
		defs["d"+strconv.Itoa(i)] = map[string]any{"items": map[string]any{"$ref": "#/$defs/d" + strconv.Itoa(i+1)}}
	}
	defs["d"+strconv.Itoa(n)] = map[string]any{"type": "string"}
	chain := map[string]any{"$ref": "#/$defs/d0", "$defs": defs}
	for _, tc := range []struct {
		name string
		doc  map[string]any
	}{{"depth", nestedItems(MaxProposedSchemaDepth)}, {"ref-chain", chain}} {
		if err := CheckProposedSchema(tc.doc); err != nil {
			b.Fatalf("%s: %v", tc.name, err)
		}
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := CompileSchema(tc.doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestInvalidInputIsBounded: an invalid-input answer stays small however
// large and however wrong the input: the explanation names the first
// three violations and the count, details.violations holds at most 20
// with violation_count the total, each violation is at most 256 bytes,
// and an additionalProperties violation names five keys (sorted) and how
// many more. A 1 MB input of unknown keys made a 422 twice its size.
func TestInvalidInputIsBounded(t *testing.T) {
	s, err := compileSchema(map[string]any{
		"type": "object", "additionalProperties": false,
		"properties": map[string]any{
			"name": map[string]any{"type": "string", "pattern": "^[a-z]+$"},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		input       map[string]any
		count       int
		first, expl string
	}{
		{"one violation", map[string]any{"tags": []any{1}}, 1, "at /tags/0: got number, want string",
			"input does not match input_schema: at /tags/0: got number, want string"},
		{"three violations", map[string]any{"tags": []any{1, 2, 3}}, 3, "at /tags/0: got number, want string",
			"input does not match input_schema: at /tags/0: got number, want string; at /tags/1: got number, want string; at /tags/2: got number, want string"},
		{"four violations", map[string]any{"tags": []any{1, 2, 3, 4}}, 4, "at /tags/0: got number, want string",
			"input does not match input_schema: at /tags/0: got number, want string; at /tags/1: got number, want string; at /tags/2: got number, want string; and 1 more (4 violations in all)"},
		{"60000 unknown keys, 100 wrong items, a long value", func() map[string]any {
			in := map[string]any{"name": strings.Repeat("A", 100_000)}
			for i := range 60_000 {
				in["k"+strconv.Itoa(100_000+i)] = i
			}
			tags := make([]any, 100)
			for i := range tags {
				tags[i] = i
			}
			in["tags"] = tags
			return in
		}(), 102, "at /: additional properties 'k100000', 'k100001', 'k100002', 'k100003', 'k100004' and 59995 more not allowed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := validateInput(s, tc.input)
			if f == nil || f.Code != ErrInvalidInput {
				t.Fatalf("failure = %+v, want invalid-input", f)
			}
			vs, _ := f.Details["violations"].([]string)
			if n, _ := f.Details["violation_count"].(int); n != tc.count {
				t.Errorf("violation_count = %v, want %d", f.Details["violation_count"], tc.count)
			}
			if len(vs) != min(tc.count, 20) {
				t.Errorf("%d violations listed, want %d", len(vs), min(tc.count, 20))
			}
			if len(vs) > 0 && vs[0] != tc.first {
				t.Errorf("first violation = %q, want %q", vs[0], tc.first)
			}
			for _, v := range vs {
				if len(v) > 256 {
					t.Errorf("a violation of %d bytes: %.80q…", len(v), v)
				}
			}
			if tc.expl != "" && f.Explanation != tc.expl {
				t.Errorf("explanation = %q, want %q", f.Explanation, tc.expl)
			}
			if len(f.Explanation) > 1024 {
				t.Errorf("explanation of %d bytes", len(f.Explanation))
			}
			if tc.count > 3 && !strings.HasSuffix(f.Explanation, "; and "+strconv.Itoa(tc.count-3)+" more ("+strconv.Itoa(tc.count)+" violations in all)") {
				t.Errorf("explanation %q does not give the count", f.Explanation)
			}
		})
	}
}

// TestTruncate: Truncate cuts on a UTF-8 boundary and marks the cut.
func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcdef", 5, "ab…"},
		{"ééé", 5, "é…"}, // é is 2 bytes, … is 3
		{strings.Repeat("x", 300), 256, strings.Repeat("x", 253) + "…"},
	} {
		if got := textcut.Truncate(tc.s, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
