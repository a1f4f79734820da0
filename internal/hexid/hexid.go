// Package hexid checks and decodes the 64-character lowercase hex ids
// of RCNS: canonical Agent-IDs (RCNS §3), Audit-IDs (§16) and the
// SHA-256 digests the negotiation log chains.
package hexid

// nibble is the value of each lowercase hex digit, and 0xff for every
// other byte (uppercase included: an id has one spelling). A table and
// an OR of every lookup, tested once at the end, instead of a range
// check per character: the ids are random digits and letters, on which
// the per-character branch was mispredicted about every other time
// (Valid took 230 ns of a memory-store Retain's 1 µs).
var nibble = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()

// Valid reports whether s is exactly 64 lowercase hex characters.
// Uppercase is not valid: an id has one spelling.
func Valid(s string) bool {
	if len(s) != 64 {
		return false
	}
	var bad byte
	for i := 0; i < 64; i++ {
		bad |= nibble[s[i]]
	}
	return bad&0xf0 == 0
}

// Decode returns the 32 bytes s spells, when Valid(s); ok is false
// otherwise (and id is then zero).
func Decode(s string) (id [32]byte, ok bool) {
	if len(s) != 64 {
		return id, false
	}
	var bad byte
	for i := range id {
		hi, lo := nibble[s[2*i]], nibble[s[2*i+1]]
		bad |= hi | lo
		id[i] = hi<<4 | lo
	}
	if bad&0xf0 != 0 {
		return [32]byte{}, false
	}
	return id, true
}
