package agtp

import (
	"fmt"
	"regexp"

	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// ulidPattern: 26 Crockford base32 characters, in either case (the
// ULID spec reads them case-insensitively), holding 128 bits, so the
// first is 0-7 (the largest ULID is 7ZZZZZZZZZZZZZZZZZZZZZZZZZ).
var ulidPattern = regexp.MustCompile(`^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$`)
var uuidV7Pattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// ValidRequestID reports whether s is a UUIDv7 (lowercase 8-4-4-4-12)
// or a ULID (26 Crockford base32 characters in either case, at most 128
// bits: the first is 0-7) (ids-02 §9.2, spec OP-7).
func ValidRequestID(s string) bool {
	return uuidV7Pattern.MatchString(s) || ulidPattern.MatchString(s)
}

// Session-ID lengths this gateway accepts. 22 base64url characters
// carry 128 bits, the least a Session-ID must hold (spec §3, agtp-09
// §11.4); anything shorter cannot be one.
const (
	MinSessionIDLen = 22
	MaxSessionIDLen = 256
)

// SessionIDForm describes the accepted Session-ID form in refusals.
const SessionIDForm = "22-256 characters of A-Z a-z 0-9 - . _ ~ + / = : holding at least 128 random bits (e.g. 16 random bytes in base64url: 22 characters)"

// ValidSessionID reports whether s has the form of a Session-ID:
// MinSessionIDLen to MaxSessionIDLen characters of base64 (either
// alphabet), token and URI-safe punctuation (`^[A-Za-z0-9._~+/=:-]{22,256}$`,
// checked byte by byte: it runs on every request that carries one).
func ValidSessionID(s string) bool {
	if len(s) < MinSessionIDLen || len(s) > MaxSessionIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '~', c == '+', c == '/', c == '=', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// SessionValue reads a session id sent in the body (what names it: the
// envelope session_id, PROPOSE's parameters.session_id): a string of
// the Session-ID form, else 400 invalid-session-id, as for the header.
func SessionValue(v any, what string) (string, *Error) {
	s, ok := v.(string)
	if !ok {
		return "", InvalidSessionID.New(fmt.Sprintf("%s must be a string, not %s", what, schema.JSONTypeName(v)))
	}
	if !ValidSessionID(s) {
		return "", InvalidSessionID.New(what + " must be a Session-ID: " + SessionIDForm)
	}
	return s, nil
}

// MaxTaskIDLen is the longest task id accepted, in bytes (= characters:
// a task id is ASCII), as for Session-ID and Owner-ID.
const MaxTaskIDLen = 256

// TaskIDForm describes the accepted task id form in refusals.
const TaskIDForm = "1-256 visible ASCII characters (! to ~: no space, no control or non-ASCII character), e.g. task-0042 or a UUID"

// ValidTaskID reports whether s has the form of a task id, sent as the
// Task-ID header or the envelope task_id (one rule for both): 1 to
// MaxTaskIDLen visible ASCII characters (RFC 5234 VCHAR, 0x21-0x7E, as
// Idempotency-Key). A task id is opaque (spec §3) and echoed unchanged
// in the Task-ID header, the body's task_id and the
// Attribution-Record, so it must be a header value that no hop
// rewrites: no space (an HTTP field value loses its leading and
// trailing ones), no control character, nothing outside ASCII. An
// empty one is not "no task id": a request without one omits it (or
// sends task_id null).
func ValidTaskID(s string) bool { return VisibleASCII(s, MaxTaskIDLen) }

// VisibleASCII reports whether s is 1 to max visible ASCII characters
// (RFC 9110 VCHAR, 0x21-0x7E): a header value no hop rewrites.
func VisibleASCII(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}
