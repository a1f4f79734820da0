package agtp

import "testing"

func TestParseQuery(t *testing.T) {
	for _, ok := range []string{"", "a=1", "a=1&b=x+y", "k=%C3%A9", "a=&b", "a=1&A=2"} {
		if _, err := ParseQuery(ok); err != nil {
			t.Errorf("ParseQuery(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"x=%zz", "x=1;y=2", "doc=%ff", "%ff=1", "a=%"} {
		if _, err := ParseQuery(bad); err == nil {
			t.Errorf("ParseQuery(%q) accepted it", bad)
		}
	}
	// A key given more than once, in any spelling, keeps its values in
	// order: readers take the last one (spec §2.1).
	for raw, want := range map[string]string{"a=1&a=2": "2", "a=2&%61=1": "1", "%61=1&a=3": "3", "a&a&a=x": "x", "a=x&a": ""} {
		q, err := ParseQuery(raw)
		if err != nil {
			t.Fatalf("ParseQuery(%q) = %v, want nil", raw, err)
		}
		if v, ok := QueryValue(q, "a"); !ok || v != want {
			t.Errorf("QueryValue(ParseQuery(%q), a) = %q, %v; want %q (the last value)", raw, v, ok, want)
		}
	}
	if _, ok := QueryValue(nil, "a"); ok {
		t.Error("QueryValue of an empty query found a key")
	}
}
