// Package textcut cuts text quoted into messages (answers, logs, config
// errors) to a bounded length at a UTF-8 character boundary, so a cut
// never leaves part of a character behind.
package textcut

import "unicode/utf8"

// Ellipsis marks a cut.
const Ellipsis = "…"

// EchoBytes is how much of an input value (a header token, a body key
// or string, a property name) a message repeats: its first 64 bytes.
const EchoBytes = 64

// Clip is s as a message repeats it: whole when at most EchoBytes long,
// else its first EchoBytes (at a character boundary) and Ellipsis.
func Clip(s string) string {
	if p := Prefix(s, EchoBytes); len(p) < len(s) {
		return p + Ellipsis
	}
	return s
}

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
