package recipes

import (
	"reflect"
	"testing"
)

func TestTextTypesOf(t *testing.T) {
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"available": map[string]any{"type": "boolean"},
		"limit":     map[string]any{"type": "integer"},
		"price":     map[string]any{"type": "number"},
		"maybe":     map[string]any{"type": []any{"integer", "null"}},
		"either":    map[string]any{"type": []any{"boolean", "number"}},
		"text":      map[string]any{"type": []any{"integer", "string"}},
		"name":      map[string]any{"type": "string"},
		"untyped":   map[string]any{"minimum": 1},
	}}
	want := textTypes{"available": {"boolean"}, "limit": {"integer"}, "price": {"number"},
		"maybe": {"integer"}, "either": {"number", "boolean"}}
	if got := textTypesOf(schema); !reflect.DeepEqual(got, want) {
		t.Fatalf("textTypesOf = %v, want %v", got, want)
	}
	if got := textTypesOf(map[string]any{"type": "object"}); got != nil {
		t.Fatalf("no properties: %v, want nil", got)
	}
}

func TestConvertText(t *testing.T) {
	types := textTypes{"available": {"boolean"}, "limit": {"integer"}, "price": {"number"}, "either": {"number", "boolean"}}
	tests := []struct {
		name    string
		in      map[string]any
		keys    []string
		want    map[string]any
		badName string // the parameter a refusal names, "" for none
	}{
		{"boolean true", map[string]any{"available": "true"}, []string{"available"}, map[string]any{"available": true}, ""},
		{"boolean false", map[string]any{"available": "false"}, []string{"available"}, map[string]any{"available": false}, ""},
		{"integer", map[string]any{"limit": "10"}, []string{"limit"}, map[string]any{"limit": float64(10)}, ""},
		{"negative integer", map[string]any{"limit": "-3"}, []string{"limit"}, map[string]any{"limit": float64(-3)}, ""},
		{"number", map[string]any{"price": "2.5e1"}, []string{"price"}, map[string]any{"price": 25.0}, ""},
		{"either: number first", map[string]any{"either": "1"}, []string{"either"}, map[string]any{"either": 1.0}, ""},
		{"either: boolean", map[string]any{"either": "true"}, []string{"either"}, map[string]any{"either": true}, ""},
		{"string property untouched", map[string]any{"name": "10"}, []string{"name"}, map[string]any{"name": "10"}, ""},
		{"body value not in keys untouched", map[string]any{"limit": "10"}, nil, map[string]any{"limit": "10"}, ""},
		{"typed value untouched", map[string]any{"limit": 7.0}, []string{"limit"}, map[string]any{"limit": 7.0}, ""},
		{"boolean yes refused", map[string]any{"available": "yes"}, []string{"available"}, nil, "available"},
		{"boolean True refused", map[string]any{"available": "True"}, []string{"available"}, nil, "available"},
		{"integer with fraction refused", map[string]any{"limit": "1.5"}, []string{"limit"}, nil, "limit"},
		{"integer hex refused", map[string]any{"limit": "0x10"}, []string{"limit"}, nil, "limit"},
		{"integer beyond 2^53 refused", map[string]any{"limit": "9007199254740993"}, []string{"limit"}, nil, "limit"},
		{"number Inf refused", map[string]any{"price": "Inf"}, []string{"price"}, nil, "price"},
		{"number overflow refused", map[string]any{"price": "1e999"}, []string{"price"}, nil, "price"},
		{"empty refused", map[string]any{"limit": ""}, []string{"limit"}, nil, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := types.convert(tt.in, tt.keys)
			if tt.badName != "" {
				if f == nil || f.Code != ErrInvalidInput || f.Status != 422 || f.Details["parameter"] != tt.badName {
					t.Fatalf("convert = %+v, want 422 invalid-input naming %q", f, tt.badName)
				}
				return
			}
			if f != nil {
				t.Fatalf("convert refused: %v", f)
			}
			if !reflect.DeepEqual(tt.in, tt.want) {
				t.Fatalf("input = %#v, want %#v", tt.in, tt.want)
			}
		})
	}
}
