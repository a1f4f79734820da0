package agtp

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
)

func TestDecodeBody(t *testing.T) {
	tests := []struct {
		name, body, reason, explanation string
	}{
		{name: "none", body: `{"a":1,"b":{"a":2},"c":[{"a":1},{"a":1}]}`},
		{name: "string values equal to keys", body: `{"a":"a","b":"a"}`},
		{name: "top level", body: `{"a":1,"a":2}`, reason: "duplicate-key", explanation: `the key "a" twice in one object (at /)`},
		{name: "in parameters", body: `{"parameters":{"guest_id":"g-1","guest_id":"g-2"}}`, reason: "duplicate-key", explanation: `"guest_id" twice in one object (at /parameters)`},
		{name: "escaped spelling", body: `{"a":1,"\u0061":2}`, reason: "duplicate-key", explanation: `"a" twice`},
		{name: "after nested value", body: `{"x":{"y":1},"z":[1,2],"x":3}`, reason: "duplicate-key", explanation: `"x" twice`},
		{name: "in array element", body: `{"l":[{"k":1,"k":2}]}`, reason: "duplicate-key", explanation: `"k" twice in one object (at /l/0)`},
		{name: "trailing value", body: `{"a":1} {"b":2}`, reason: "invalid-json", explanation: "syntax error at byte"},
		{name: "truncated", body: `{"a":`, reason: "invalid-json", explanation: "truncated"},
		{name: "invalid UTF-8", body: "{\"a\":\"\xff\"}", reason: "invalid-json", explanation: "invalid UTF-8 or an unpaired surrogate escape at byte 6"},
		{name: "number out of range", body: `{"a":1e400}`, reason: "invalid-json", explanation: "value not representable"},
		{name: "a byte order mark", body: "\ufeff{\"a\":1}", reason: "invalid-json", explanation: "byte order mark (EF BB BF)"},
		{name: "syntax", body: `{"a" 1}`, reason: "invalid-json", explanation: "syntax error at byte 5"},
		{name: "unpaired surrogate", body: `{"a":"\ud800"}`, reason: "invalid-json", explanation: "unpaired surrogate"},
		{name: "too deep", body: strings.Repeat("[", 10001) + strings.Repeat("]", 10001), reason: "invalid-json", explanation: "nesting deeper than 10000 levels"},
		{name: "long duplicate key clipped", body: `{"` + strings.Repeat("k", 5000) + `":1,"` + strings.Repeat("k", 5000) + `":2}`, reason: "duplicate-key", explanation: `"` + strings.Repeat("k", 64) + `…"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, e := DecodeBody([]byte(tc.body))
			if tc.reason == "" {
				if e != nil || v == nil {
					t.Fatalf("DecodeBody(%s) = %v, %+v; want a value", tc.body, v, e)
				}
				return
			}
			if e == nil {
				t.Fatalf("DecodeBody(%s) = %v, nil; want %s", tc.body, v, tc.reason)
			}
			if e.Status != 400 || e.Reason != tc.reason || !strings.Contains(e.Explanation, tc.explanation) || len(e.Explanation) > 300 {
				t.Fatalf("DecodeBody(%s) = %d %s %q; want 400 %s containing %q", tc.body, e.Status, e.Reason, e.Explanation, tc.reason, tc.explanation)
			}
		})
	}
}

// TestEnvelopeEncodingMatchesEncodingJSON holds success envelopes
// (encodeEnvelope: by hand, json/v2 for other types) byte-equal to
// encoding/json.Marshal for the values a result can hold.
func TestEnvelopeEncodingMatchesEncodingJSON(t *testing.T) {
	bi, _ := new(big.Int).SetString("123456789012345678901234567890", 10)
	vals := []any{
		map[string]any{"é": 1, "\U0001F600": 2, "ｚ": 3, "a": 4, "B": 5, "": 6, "<k>": map[string]any{"z": 1, "y": []any{2.5, "x"}}},
		math.Copysign(0, -1), 1e21, 1e-7, 123456789.0, 0.1, 1e20, 5e-324, math.MaxFloat64, -1.5, 12.5,
		"<a href=\"x\">&</a>\u2028\u2029\x00\x1f\x7f\t\n", "caf\xe9", []any{nil, true, false, []any{}, map[string]any{}},
		7, int64(-9), nil, []any(nil),
		// Not modeled by hand: the json/v2 fallback.
		bi, []string(nil), []string{"a"}, map[string]string(nil), map[string]any{"n": bi},
	}
	for _, v := range vals {
		for _, task := range []string{"", "t-<1>"} {
			e := Envelope{Status: 200, TaskID: task, Result: v}
			want, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Encode()
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("encodeEnvelope %s (%v)\nencoding/json  %s", got, err, want)
			}
		}
	}
}

// TestContractAnswerEncoding: the spliced contract body is the JSON
// encoding/json writes for the same members (the endpoint bytes kept
// as they are: RFC 8785 form, where encoding/json would also escape
// <, > and & inside them), for every set of members the handlers send.
func TestContractAnswerEncoding(t *testing.T) {
	endpoint := []byte(`{"description":"a <b> & c","input_schema":{"type":"object"},"method":"LOOKUP","path":"/item/x"}`)
	for _, extra := range []map[string]any{
		{},
		{"status": 461},
		{"status": 263, "result": map[string]any{"item": map[string]any{"id": "1"}}, "task_id": "t-1"},
		{"status": 263, "result": nil},
		{"status": 263, "persistent": true, "negotiation_id": "n-1", "granted_duration": "1h", "result": []any{1.5, "<"}},
	} {
		a := &ContractAnswer{Endpoint: endpoint, Members: map[string]any{
			"synthesis_id": "syn-1", "method": "LOOKUP", "path": "/item/x", "recipe_lineage": lineage{"r <x>", "1"},
			"contract_hash": "ab", "negotiation_origin": "rcns-gate", "issued_at": "2026-11-29T00:00:00Z", "expires_at": "2026-11-29T01:00:00Z",
		}}
		want := map[string]any{"endpoint": json.RawMessage(endpoint)}
		for k, v := range a.Members {
			want[k] = v
		}
		for k, v := range extra {
			a.Members[k] = v
			want[k] = v
		}
		got, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		wantRaw, _ := json.Marshal(want)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("encode gave invalid JSON %s: %v", got, err)
		}
		_ = json.Unmarshal(wantRaw, &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("encode = %s\nencoding/json = %s", got, wantRaw)
		}
		// Byte for byte the same, once encoding/json's HTML escapes inside
		// the endpoint are undone.
		escaped, _ := json.Marshal(json.RawMessage(endpoint))
		if wantBytes := bytes.Replace(wantRaw, escaped, endpoint, 1); !bytes.Equal(got, wantBytes) {
			t.Fatalf("encode = %s\nwant     %s", got, wantBytes)
		}
	}
}

// BenchmarkDecodeBody is the request-body decode of a contract
// presentation: json/v2 is DecodeBody (one pass, duplicate keys refused
// by the decoder); v1+token-scan is the path it replaced, encoding/json's
// Decoder plus a second Token-by-Token pass looking for duplicate keys
// (kept here, as v1DecodeWithDuplicateScan, only as the baseline).
func BenchmarkDecodeBody(b *testing.B) {
	raw := []byte(`{"parameters":{"item_id":"1"}}`)
	b.Run("json-v2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, e := DecodeBody(raw); e != nil {
				b.Fatal(e.Explanation)
			}
		}
	})
	b.Run("v1+token-scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, dup, err := v1DecodeWithDuplicateScan(raw); err != nil || dup {
				b.Fatal(err)
			}
		}
	})
}

// v1DecodeWithDuplicateScan is the former request-body decode, the
// baseline of BenchmarkDecodeBody.
func v1DecodeWithDuplicateScan(raw []byte) (any, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false, err
	}
	dec = json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		keys   map[string]bool
		object bool
		expect bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return v, false, nil
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				if top != nil && top.object {
					top.expect = true
				}
				stack = append(stack, &frame{keys: map[string]bool{}, object: t == '{', expect: t == '{'})
			} else {
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.object && top.expect {
				if top.keys[t] {
					return v, true, nil
				}
				top.keys[t] = true
				top.expect = false
				continue
			}
		}
		if top != nil && top.object {
			top.expect = true
		}
	}
}

// lineage stands in for recipes.Lineage: a member that writes its own
// JSON.
type lineage struct{ Name, Version string }

func (l lineage) AppendJSON(b []byte) []byte {
	b = append(b, `{"recipe_name":`...)
	b = jsonenc.AppendStringHTML(b, l.Name)
	b = append(b, `,"recipe_version":`...)
	b = jsonenc.AppendStringHTML(b, l.Version)
	return append(b, '}')
}

func (l lineage) MarshalJSON() ([]byte, error) { return l.AppendJSON(nil), nil }
