package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateAndPrefix(t *testing.T) {
	for _, tc := range []struct {
		s         string
		n         int
		trunc, pr string
	}{
		{"short", 10, "short", "short"},
		{"abcdef", 5, "ab…", "abcde"},
		{"éééé", 5, "é…", "éé"},
		{"aéb", 3, "…", "aé"},
		{"", 3, "", ""},
	} {
		if got := Truncate(tc.s, tc.n); got != tc.trunc {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.trunc)
		}
		if got := Prefix(tc.s, tc.n); got != tc.pr {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.pr)
		}
	}
	s := strings.Repeat("日本", 100)
	for n := 3; n < 40; n++ {
		if got := Truncate(s, n); len(got) > n || !utf8.ValidString(got) {
			t.Fatalf("Truncate(…, %d) = %q: longer than %d bytes or not UTF-8", n, got, n)
		}
	}
}
