package engine

import "testing"

// TestNamedPlural: the 464 of an unbound contract names one upstream or
// endpoint in the singular and several in the plural (found by review:
// "endpoint A, B, which …").
func TestNamedPlural(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"FETCH /a"}, "endpoint FETCH /a"},
		{[]string{"FETCH /a", "BOOK /b"}, "endpoints FETCH /a, BOOK /b"},
	} {
		if got := named("endpoint", c.names); got != c.want {
			t.Errorf("named(%q) = %q, want %q", c.names, got, c.want)
		}
	}
}
