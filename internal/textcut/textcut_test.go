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

// TestClip: every echo is cut after EchoBytes (64) at a character
// boundary and marked; up to 64 bytes it is whole. The scope list of a
// 262 used a 67-byte budget and kept 65-67-byte tokens whole.
func TestClip(t *testing.T) {
	a64, a66 := strings.Repeat("a", 64), strings.Repeat("a", 66)
	for in, want := range map[string]string{
		"": "", "short": "short", a64: a64, a66: a64 + Ellipsis,
		strings.Repeat("a", 63) + "é": strings.Repeat("a", 63) + Ellipsis,
	} {
		if got := Clip(in); got != want {
			t.Errorf("Clip(%q) = %q, want %q", in, got, want)
		}
	}
}
