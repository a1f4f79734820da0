package caddymodule

import "testing"

func TestDuplicateKey(t *testing.T) {
	tests := []struct {
		name, body, key string
		dup             bool
	}{
		{name: "none", body: `{"a":1,"b":{"a":2},"c":[{"a":1},{"a":1}]}`},
		{name: "top level", body: `{"a":1,"a":2}`, key: "a", dup: true},
		{name: "in parameters", body: `{"parameters":{"guest_id":"g-1","guest_id":"g-2"}}`, key: "guest_id", dup: true},
		{name: "after nested value", body: `{"x":{"y":1},"z":[1,2],"x":3}`, key: "x", dup: true},
		{name: "in array element", body: `{"l":[{"k":1,"k":2}]}`, key: "k", dup: true},
		{name: "string values equal to keys", body: `{"a":"a","b":"a"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, dup := duplicateKey([]byte(tc.body))
			if dup != tc.dup || key != tc.key {
				t.Fatalf("duplicateKey(%s) = %q, %v; want %q, %v", tc.body, key, dup, tc.key, tc.dup)
			}
		})
	}
}
