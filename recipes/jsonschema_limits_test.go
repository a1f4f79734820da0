package recipes

import (
	"strconv"
	"strings"
	"testing"
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
