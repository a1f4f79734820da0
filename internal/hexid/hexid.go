// Package hexid checks and decodes the 64-character lowercase hex ids
// of RCNS: canonical Agent-IDs (RCNS §3), Audit-IDs (§16) and the
// SHA-256 digests the negotiation log chains.
package hexid

import "encoding/hex"

// Valid reports whether s is exactly 64 lowercase hex characters.
// Uppercase is not valid: an id has one spelling.
func Valid(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Decode returns the 32 bytes s spells, when Valid(s); ok is false
// otherwise.
func Decode(s string) (id [32]byte, ok bool) {
	if !Valid(s) {
		return id, false
	}
	_, err := hex.Decode(id[:], []byte(s))
	return id, err == nil
}
