package agtp

import (
	"io"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestDeeperThan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		raw    string
		limit  int
		over   bool
		offset int
	}{
		{name: "scalar", raw: `1`, limit: 0},
		{name: "flat object at its limit", raw: `{"a":1}`, limit: 1},
		{name: "flat object over zero", raw: `{"a":1}`, limit: 0, over: true, offset: 0},
		{name: "nested at its limit", raw: `{"a":[{"b":[]}]}`, limit: 4},
		{name: "nested over", raw: `{"a":[{"b":[]}]}`, limit: 3, over: true, offset: 11},
		{name: "brackets in strings do not count", raw: `{"a":"[[[{{{"}`, limit: 1},
		{name: "escaped quote keeps the string open", raw: `{"a":"\"[[["}`, limit: 1},
		{name: "escaped backslash closes the string", raw: `{"a":"\\","b":[[1]]}`, limit: 2, over: true, offset: 15},
		{name: "siblings do not add up", raw: `[[1],[2],[3]]`, limit: 2},
		{name: "empty", raw: ``, limit: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over, off := DeeperThan([]byte(tc.raw), tc.limit)
			if over != tc.over || off != tc.offset {
				t.Fatalf("DeeperThan(%s, %d) = %v, %d; want %v, %d", tc.raw, tc.limit, over, off, tc.over, tc.offset)
			}
		})
	}
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	if over, off := DeeperThan([]byte(deep), MaxJSONDepth); !over || off != MaxJSONDepth {
		t.Fatalf("10001 nested arrays against MaxJSONDepth: %v at %d, want true at %d", over, off, MaxJSONDepth)
	}
}

// FuzzDeeperThan holds DeeperThan to the nesting jsontext reports for
// every valid JSON text.
func FuzzDeeperThan(f *testing.F) {
	for _, s := range []string{`{}`, `[[["a]"]]]`, `{"k":"\\\"{"}`, `[1,[2,[3]]]`, `"[["`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		dec := jsontext.NewDecoder(strings.NewReader(string(raw)))
		maxDepth := 0
		for {
			tok, err := dec.ReadToken()
			if err == io.EOF {
				break
			}
			if err != nil {
				return // not valid JSON: DeeperThan's answer is not defined
			}
			if k := tok.Kind(); k == '[' || k == '{' {
				maxDepth = max(maxDepth, dec.StackDepth())
			}
		}
		if over, _ := DeeperThan(raw, maxDepth); over {
			t.Fatalf("DeeperThan(%q, %d) = over, but jsontext nests %d deep", raw, maxDepth, maxDepth)
		}
		if maxDepth > 0 {
			if over, _ := DeeperThan(raw, maxDepth-1); !over {
				t.Fatalf("DeeperThan(%q, %d) = not over, but jsontext nests %d deep", raw, maxDepth-1, maxDepth)
			}
		}
	})
}
