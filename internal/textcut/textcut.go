// Package textcut cuts text quoted into messages (answers, logs, config
// errors) to a bounded length at a UTF-8 character boundary, so a cut
// never leaves part of a character behind.
package textcut

import "unicode/utf8"

// Ellipsis marks a cut.
const Ellipsis = "…"

// Truncate cuts s to at most n bytes (n ≥ 3), the Ellipsis that marks a
// cut counted in n; s is returned as is when it fits.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n-len(Ellipsis)) + Ellipsis
}

// Prefix returns the longest prefix of s of at most n bytes (n ≥ 0) that
// ends on a character boundary.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
