package wire

import (
	"net/http"
	"strings"
)

// Singletons are the request header fields that may appear at most
// once, in their AGTP spelling. A second line of one (whatever its
// value, and whatever the case of its name) makes the request ambiguous
// and is refused with 400 duplicate-header: the gateway does not guess
// which was meant (the reference implementation keeps the last one).
//
// They are the framing fields (Content-Length, Content-Type,
// Content-Digest, Host: singletons in RFC 9110 §8.3, §8.6, §7.2 and
// RFC 9530), the credentials (Authorization, RFC 9110 §11.6.2; the RFC
// 9421 Signature-Input and Signature, which this gateway expects as one
// line each although RFC 9421 dictionaries may be split) and the AGTP
// request headers of spec §3 that carry one value.
var Singletons = []string{
	"Content-Length", "Content-Type", "Content-Digest", "Host", "Authorization",
	"Signature-Input", "Signature",
	"Agent-ID", "Owner-ID", "Request-ID", "Task-ID", "Session-ID",
	"Authority-Scope", "Allow-RCNS", "Contract-Synthesized", "Synthesis-Id",
	"Idempotency-Key", "RCNS-Idempotency-Key", "Negotiation-ID",
}

// singletonKeys holds Singletons in net/http's canonical form.
var singletonKeys = func() map[string]string {
	m := make(map[string]string, len(Singletons))
	for _, name := range Singletons {
		m[http.CanonicalHeaderKey(name)] = name
	}
	return m
}()

// spellings maps net/http's canonical form of the header names whose
// spelling differs from it ("Agent-Id") to their spelling ("Agent-ID"):
// the AGTP headers of spec §3 and §4, and the gateway's other answer
// headers (RateLimit, draft-ietf-httpapi-ratelimit-headers; ETag, RFC
// 9110 §8.8.3).
var spellings = func() map[string]string {
	names := []string{
		"Agent-ID", "Owner-ID", "Request-ID", "Task-ID", "Session-ID", "Negotiation-ID",
		"Allow-RCNS", "Server-ID", "Response-ID", "Audit-ID", "RCNS-Attempt-Id",
		"AGTP-API-Version", "AGTP-Catalog-Warning", "AGTP-Endpoint-Warning", "AGTP-Zone-ID",
		"RateLimit", "RateLimit-Policy", "ETag",
	}
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[http.CanonicalHeaderKey(n)] = n
	}
	return m
}()

// Spelling is the header name the writers put on the wire for the map
// key name: the AGTP spelling when name is net/http's canonical form of
// an AGTP header ("Agent-Id" → "Agent-ID", "Agtp-Api-Version" →
// "AGTP-API-Version", "Rcns-Attempt-Id" → "RCNS-Attempt-Id"), else name
// as given. Receivers compare names case-insensitively, so this only
// makes transcripts read as the spec does.
func Spelling(name string) string {
	if s, ok := spellings[name]; ok {
		return s
	}
	return name
}

// internedKeys are canonical header names looked up without an
// allocation (a map index with string(bytes) does not allocate).
var internedKeys = func() map[string]string {
	names := []string{
		"Accept", "Accept-Encoding", "Authorization", "Connection", "Content-Digest",
		"Content-Encoding", "Content-Length", "Content-Type", "Expect", "Host",
		"Signature", "Signature-Input", "Traceparent", "Tracestate", "Transfer-Encoding",
		"User-Agent", "X-Forwarded-For",
	}
	m := make(map[string]string, len(names)+len(Singletons))
	for _, n := range append(names, Singletons...) {
		k := http.CanonicalHeaderKey(n)
		m[k] = k
	}
	return m
}()

// canonicalKey returns the token name in net/http's canonical form
// (first letter and each letter after '-' upper case, the rest lower
// case), interned for common names. name is not modified.
func canonicalKey(name []byte) string {
	var arr [64]byte
	var b []byte
	if len(name) <= len(arr) {
		b = arr[:len(name)]
	} else {
		b = make([]byte, len(name))
	}
	copy(b, name)
	upper := true
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			b[i] = c - ('a' - 'A')
		case !upper && 'A' <= c && c <= 'Z':
			b[i] = c + ('a' - 'A')
		}
		upper = c == '-'
	}
	if k, ok := internedKeys[string(b)]; ok {
		return k
	}
	return string(b)
}

// isTchar reports whether c is an RFC 9110 §5.6.2 token character.
func isTchar(c byte) bool {
	return tchar[c]
}

var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validToken reports whether s is a non-empty RFC 9110 token.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return true
}

// ValidFieldValue reports whether v may be written as a header field
// value (invalidValueByte finds no byte RFC 9110 §5.5 refuses in it):
// Response.Write refuses one that may not, with an error and nothing
// written.
func ValidFieldValue(v string) bool {
	return invalidValueByte(v) < 0
}

// invalidValueByte returns the index of the first byte of v that RFC
// 9110 §5.5 does not allow in a field value (a control character other
// than HTAB, or DEL), or -1. obs-text (0x80–0xFF) is allowed, as
// net/http allows it.
func invalidValueByte[T string | []byte](v T) int {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return i
		}
	}
	return -1
}

// trimOWS removes leading and trailing SP and HTAB.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// framingKey reports whether the map key k names a field the writers
// own (Content-Length, Transfer-Encoding) and so never copy from a
// header map.
func framingKey(k string) bool {
	return len(k) == len("Content-Length") && strings.EqualFold(k, "Content-Length") ||
		len(k) == len("Transfer-Encoding") && strings.EqualFold(k, "Transfer-Encoding")
}
