package caddymodule

import (
	"strings"
	"testing"
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
		{name: "invalid UTF-8", body: "{\"a\":\"\xff\"}", reason: "invalid-json", explanation: "invalid UTF-8 at byte"},
		{name: "number out of range", body: `{"a":1e400}`, reason: "invalid-json", explanation: "value not representable"},
		{name: "syntax", body: `{"a" 1}`, reason: "invalid-json", explanation: "syntax error at byte 5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, e := decodeBody([]byte(tc.body))
			if tc.reason == "" {
				if e != nil || v == nil {
					t.Fatalf("decodeBody(%s) = %v, %+v; want a value", tc.body, v, e)
				}
				return
			}
			if e == nil {
				t.Fatalf("decodeBody(%s) = %v, nil; want %s", tc.body, v, tc.reason)
			}
			if e.Status != 400 || e.Reason != tc.reason || !strings.Contains(e.Explanation, tc.explanation) {
				t.Fatalf("decodeBody(%s) = %d %s %q; want 400 %s containing %q", tc.body, e.Status, e.Reason, e.Explanation, tc.reason, tc.explanation)
			}
		})
	}
}
