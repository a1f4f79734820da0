package records

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestProtoAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "abc", "a\"b\\c", "\x00\x01\x1f\n\r\t\b\f", "é漢字🙂", "\u2028\u2029", "bad\xff\xfeutf8", "<>&/", "\x7f"} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%q: got %s want %s", s, got, want)
		}
	}
}

func TestProtoCanonical(t *testing.T) {
	recs := []any{
		map[string]any{"kind": "gate", "outcome": "refused", "requested": map[string]any{"method": "LOOKUP", "path": "/nothing", "allow_rcns": true},
			"granted": nil, "seq": int64(7), "n": 3, "f": 2.0, "s": []string{"a", "b\n"}, "l": []any{1, "x", nil, false}, "ctl": "\x01\x1f\"\\/é\u2028"},
		map[string]any{},
		map[string]any{"a": map[string]any{"z": 1, "A": 2, "_": 3}},
	}
	for _, r := range recs {
		want, err := canonicalSlow(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := canonical(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("got %s (%v)\nwant %s", got, err, want)
		}
	}
}
