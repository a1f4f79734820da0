package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	mrand "math/rand/v2"
	"testing"
)

func TestAppendStringPlain(t *testing.T) {
	for _, s := range []string{"", "abc", "a\"b\\c", "\x00\x01\x1f\n\r\t\b\f", "é漢字🙂", "\u2028\u2029", "bad\xff\xfeutf8", "<>&/", "\x7f"} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%q: got %s want %s", s, got, want)
		}
	}
}

func TestCanonicalMatchesSlow(t *testing.T) {
	recs := []any{
		map[string]any{"kind": "gate", "outcome": "refused", "requested": map[string]any{"method": "LOOKUP", "path": "/nothing", "allow_rcns": true},
			"granted": nil, "seq": int64(7), "n": 3, "f": 2.0, "s": []string{"a", "b\n"}, "l": []any{1, "x", nil, false}, "ctl": "\x01\x1f\"\\/é\u2028"},
		map[string]any{},
		map[string]any{"a": map[string]any{"z": 1, "A": 2, "_": 3}},
	}
	for _, r := range recs {
		want, err := CanonicalSlow(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Canonical(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("got %s (%v)\nwant %s", got, err, want)
		}
	}
}

// TestAppendStringMatchesEncodingJSON: both string writers equal
// encoding/json, with and without HTML escaping, over every byte and
// the characters it treats specially.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	cases := []string{"", "plain", "<a href=\"x\">&</a>", "\u2028\u2029", "caf\xe9", "é😀", "\x00\x1f\x7f\\"}
	for c := 0; c < 256; c++ {
		cases = append(cases, string([]byte{'a', byte(c), 'b'}))
	}
	for _, s := range cases {
		html, _ := json.Marshal(s)
		var plain bytes.Buffer
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if got := AppendStringHTML(nil, s); !bytes.Equal(got, html) {
			t.Errorf("AppendStringHTML(%q) = %s, encoding/json %s", s, got, html)
		}
		if got := AppendString(nil, s); !bytes.Equal(got, bytes.TrimSuffix(plain.Bytes(), []byte("\n"))) {
			t.Errorf("AppendString(%q) = %s, encoding/json %s", s, got, plain.Bytes())
		}
	}
}

// TestAppendValueMatchesEncodingJSON: random decoded-JSON values
// (and the float edge cases) encode byte for byte as encoding/json
// writes them, with and without HTML escaping; other types decline.
func TestAppendValueMatchesEncodingJSON(t *testing.T) {
	r := mrand.New(mrand.NewPCG(5, 6))
	strs := []string{"", "a", "<b>&", "\u2028", "caf\xe9", "é😀", "\x00\"\\", "k"}
	floats := []float64{0, math.Copysign(0, -1), 1, -1.5, 12.5, 1e20, 1e21, 1e-6, 1e-7, 123456789012, 5e-324, math.MaxFloat64, 0.1, 2.5e-10}
	var gen func(depth int) any
	gen = func(depth int) any {
		switch n := r.IntN(9); {
		case n == 0:
			return nil
		case n == 1:
			return r.IntN(2) == 0
		case n == 2:
			return strs[r.IntN(len(strs))]
		case n == 3:
			return floats[r.IntN(len(floats))]
		case n == 4:
			return r.IntN(2000) - 1000
		case n == 5:
			return int64(r.Int64())
		case n == 6 && depth > 0:
			m := map[string]any{}
			for range r.IntN(4) {
				m[strs[r.IntN(len(strs))]] = gen(depth - 1)
			}
			return m
		case n == 7 && depth > 0:
			if r.IntN(5) == 0 {
				return []any(nil)
			}
			l := []any{}
			for range r.IntN(4) {
				l = append(l, gen(depth-1))
			}
			return l
		}
		return "leaf"
	}
	for i := 0; i < 3000; i++ {
		v := gen(3)
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := AppendValue(nil, v, true)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("AppendValue(%#v, html) = %s (%v)\nencoding/json          %s", v, got, ok, want)
		}
		var plain bytes.Buffer
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		if got, ok := AppendValue(nil, v, false); !ok || !bytes.Equal(got, bytes.TrimSuffix(plain.Bytes(), []byte("\n"))) {
			t.Fatalf("AppendValue(%#v) = %s (%v)\nencoding/json     %s", v, got, ok, plain.Bytes())
		}
	}
	for _, v := range []any{math.NaN(), math.Inf(1), map[string]any{"x": []string{"a"}}, struct{}{}, json.Number("1")} {
		if _, ok := AppendValue(nil, v, true); ok {
			t.Errorf("AppendValue(%#v) took a type it does not model", v)
		}
	}
}
