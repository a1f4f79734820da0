package agtp

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseRequestedDuration: any input parses or is refused without a
// panic; a parsed duration is never negative, and its FormatDuration
// form parses back to it.
func FuzzParseRequestedDuration(f *testing.F) {
	for _, s := range []string{"1h", "30m", "1.5h", "7d", "P2W", "P1DT2H", "PT90M", "PT1.5S", "P0,5D", "PT", "P", "", "-1h", "999999999999999999999d", "PT0.9999999999999999999999S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseRequestedDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseRequestedDuration(%q) = %v: negative", s, d)
		}
		back, err := ParseRequestedDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Fatalf("FormatDuration(%v) = %q reads back as %v, %v", d, FormatDuration(d), back, err)
		}
	})
}

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9._~+/=:-]{22,256}$`)

// FuzzValidSessionID: the byte-by-byte check agrees with the pattern it
// documents.
func FuzzValidSessionID(f *testing.F) {
	for _, s := range []string{"", "abc", strings.Repeat("a", 22), strings.Repeat("a", 257), "AAAAAAAAAAAAAAAAAAAAA é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidSessionID(s), sessionIDPattern.MatchString(s); got != want {
			t.Fatalf("ValidSessionID(%q) = %v, pattern %v", s, got, want)
		}
	})
}

// FuzzDecodeBody: any body decodes to one JSON value or is refused with
// a bounded 400 naming a reason of the catalog; a decoded value
// encodes with encoding/json and decodes back to itself.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{`{"parameters":{"a":1}}`, `{"a":1,"a":2}`, `[1,2`, `{"n":12345678901234567890}`, "\"\xff\"", `{"a":"\ud800"}`, `1 2`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, e := DecodeBody(raw)
		if e != nil {
			if e.Status != 400 || (e.Reason != InvalidJSON.Token && e.Reason != DuplicateKey.Token) || len(e.Explanation) > 512 {
				t.Fatalf("DecodeBody refusal %+v", e)
			}
			return
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", v, err)
		}
		var back any
		if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(back, v) {
			t.Fatalf("%s decodes to %#v, re-encoded %s decodes to %#v (%v)", raw, v, out, back, err)
		}
	})
}

// FuzzParseQuery: a query parses to UTF-8 keys and values or is refused;
// the canonical form is a query that parses to itself.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"a=1&b=2", "a=1&a=2", "%61=1", "a=%zz", "a=1;b=2", "a=%ff", "&", "=", "a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := ParseQuery(raw)
		if err != nil {
			return
		}
		for k, vs := range q {
			if !utf8.ValidString(k) {
				t.Fatalf("key %q is not UTF-8", k)
			}
			for _, v := range vs {
				if !utf8.ValidString(v) {
					t.Fatalf("value %q is not UTF-8", v)
				}
			}
		}
		c := CanonicalQuery(q)
		q2, err := ParseQuery(c)
		if err != nil || CanonicalQuery(q2) != c {
			t.Fatalf("canonical form %q of %q does not parse to itself: %q, %v", c, raw, CanonicalQuery(q2), err)
		}
	})
}
