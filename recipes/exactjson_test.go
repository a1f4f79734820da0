package recipes

import (
	"context"
	"encoding/json"
	"math/big"
	"reflect"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
)

func bigOf(t *testing.T, s string) *big.Int {
	t.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("bad integer %q", s)
	}
	return n
}

// TestDecodeUpstreamKeepsLargeIntegers: an upstream integer beyond
// ±2^53 is kept exactly (as *big.Int); it was decoded to float64, so a
// 64-bit id such as 12345678901234567891 reached the agent as
// 12345678901234567000. Everything else decodes as before, duplicate
// names included.
func TestDecodeUpstreamKeepsLargeIntegers(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want any
	}{
		{`{"id":12345678901234567891,"small":1,"f":1.5,"e":1e300,"neg":-9007199254740993,"edge":9007199254740992,` +
			`"arr":[9007199254740993,"x",null,true],"s":"12345678901234567891","o":{"deep":[18446744073709551616]}}`,
			map[string]any{"id": bigOf(t, "12345678901234567891"), "small": 1.0, "f": 1.5, "e": 1e300,
				"neg": bigOf(t, "-9007199254740993"), "edge": 9007199254740992.0,
				"arr": []any{bigOf(t, "9007199254740993"), "x", nil, true}, "s": "12345678901234567891",
				"o": map[string]any{"deep": []any{bigOf(t, "18446744073709551616")}}}},
		{`{"a":1,"a":12345678901234567891}`, map[string]any{"a": bigOf(t, "12345678901234567891")}},
		// Duplicate names merge as json/v2 merges them whether or not the
		// body has a large integer (a token walker of its own did not).
		{`{"a":{"x":1},"a":{"y":12345678901234567891}}`, map[string]any{"a": map[string]any{"x": 1.0, "y": bigOf(t, "12345678901234567891")}}},
		{`{"a":{"x":1},"a":{"y":2}}`, map[string]any{"a": map[string]any{"x": 1.0, "y": 2.0}}},
		{`[12345678901234567891, {}, []]`, []any{bigOf(t, "12345678901234567891"), map[string]any{}, []any{}}},
		{`{"n":1234567890123456.5}`, map[string]any{"n": 1234567890123456.5}},
		{`{"id":1}`, map[string]any{"id": 1.0}},
	} {
		got, err := decodeUpstream([]byte(tc.raw))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("decodeUpstream(%s) = %#v, %v; want %#v", tc.raw, got, err, tc.want)
		}
	}
	// The answer encoders write *big.Int as the number it is.
	v, _ := decodeUpstream([]byte(`{"id":12345678901234567891,"l":[-9007199254740993]}`))
	b, ok := jsonenc.AppendValue(nil, v, true)
	if want := `{"id":12345678901234567891,"l":[-9007199254740993]}`; !ok || string(b) != want {
		t.Errorf("AppendJSONValue = %s, %v; want %s", b, ok, want)
	}
	if std, _ := json.Marshal(v); string(std) != string(b) {
		t.Errorf("AppendJSONValue %s differs from encoding/json %s", b, std)
	}
}

// TestLargeIntegersThroughMappings: gojq mappings and projections carry
// a *big.Int unchanged (gojq computes on it); schema checks read it as
// an integer without modifying the value.
func TestLargeIntegersThroughMappings(t *testing.T) {
	id := bigOf(t, "12345678901234567891")
	in := map[string]any{"id": id, "tags": []any{id}}
	for _, src := range []string{"{id: .id}", `{id: .id, next: (.id + 1), s: (.id | tostring), tags: .tags}`} {
		e, err := CompileExpr(src, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.Eval(context.Background(), in)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		m := out.(map[string]any)
		if b, ok := m["id"].(*big.Int); !ok || b.Cmp(id) != 0 {
			t.Errorf("%s: id = %#v, want %s", src, m["id"], id)
		}
		if n, ok := m["next"]; ok {
			if b, isBig := n.(*big.Int); !isBig || b.String() != "12345678901234567892" {
				t.Errorf("%s: next = %#v, want 12345678901234567892", src, n)
			}
		}
		if s, ok := m["s"]; ok && s != "12345678901234567891" {
			t.Errorf("%s: s = %#v", src, s)
		}
	}
	s, err := compileSchema(map[string]any{"type": "object", "required": []any{"id"},
		"properties": map[string]any{"id": map[string]any{"type": "integer", "minimum": 1}, "tags": map[string]any{"type": "array", "items": map[string]any{"type": "integer"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := validateSchema(s, in); p != nil {
		t.Errorf("an integer beyond 2^53 failed an integer schema: %v", p)
	}
	if in["id"] != id || in["tags"].([]any)[0] != id {
		t.Errorf("validation changed its input: %#v", in)
	}
}
