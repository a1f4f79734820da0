package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/dunglas/httpsfv"
)

// MaxKeyLen is the longest Idempotency-Key accepted, in bytes (RCNS §12.2,
// OP-15).
const MaxKeyLen = 255

// ErrMalformedKey is wrapped by every error ParseKey returns; the caller
// answers 400 (ARCHITECTURE.md "Idempotency").
var ErrMalformedKey = errors.New("malformed Idempotency-Key")

// ParseKey returns the idempotency key carried by one Idempotency-Key
// field value (RCNS §12.2, OP-15). Two forms are accepted:
//
//   - an RFC 8941 String without parameters, e.g. `"order-42"`: the quotes
//     are stripped and escapes undone (parsed with httpsfv);
//   - a bare key, e.g. `order-42`, taken as is.
//
// Either way the key must be 1–255 visible ASCII characters (0x21–0x7E):
// an empty key, a longer one, spaces, tabs, control characters and
// non-ASCII bytes are errors, and so is a value with leading or trailing
// whitespace, a value starting with `"` that is not exactly one sf-string,
// and a list of several keys. Every error wraps ErrMalformedKey.
func ParseKey(header string) (string, error) {
	if header == "" {
		return "", fmt.Errorf("%w: empty", ErrMalformedKey)
	}
	// A quoted key of 255 characters is at most 2*255+2 bytes with escapes.
	if len(header) > 2*MaxKeyLen+2 {
		return "", fmt.Errorf("%w: %d bytes, want at most %d characters", ErrMalformedKey, len(header), MaxKeyLen)
	}
	key := header
	if header[0] == '"' {
		// The last byte must close the string: this refuses parameters
		// and surrounding whitespace, which httpsfv would accept.
		if len(header) < 2 || header[len(header)-1] != '"' {
			return "", fmt.Errorf("%w: unterminated or parameterized sf-string", ErrMalformedKey)
		}
		item, err := httpsfv.UnmarshalItem([]string{header})
		if err != nil {
			return "", fmt.Errorf("%w: not an RFC 8941 sf-string: %v", ErrMalformedKey, err)
		}
		s, ok := item.Value.(string)
		if !ok || (item.Params != nil && len(item.Params.Names()) > 0) {
			return "", fmt.Errorf("%w: not an RFC 8941 sf-string", ErrMalformedKey)
		}
		key = s
	}
	if key == "" {
		return "", fmt.Errorf("%w: empty", ErrMalformedKey)
	}
	if len(key) > MaxKeyLen {
		return "", fmt.Errorf("%w: %d characters, want at most %d", ErrMalformedKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("%w: byte 0x%02x at offset %d is not visible ASCII", ErrMalformedKey, c, i)
		}
	}
	return key, nil
}

// Fingerprint identifies what a request asks for, so that a key reused for
// a different request is told apart (RCNS §12.2, OP-15: "(method, path,
// body digest)"; ARCHITECTURE.md "Idempotency"). It hashes, with SHA-256,
// the method, the request target and the SHA-256 of the body, each
// length-prefixed so no two inputs collide by concatenation, and returns
// 64 lowercase hex characters. target is compared as given: the caller
// passes it in the canonical form it routes by (the gateway: the path in
// RFC 3986 normal form plus "?" and a canonical query when the query
// holds a key), so that two spellings of one request are one target.
// Agent-ID and key are not part of it: the Store already scopes records
// by (Agent-ID, key).
//
// The parts are framed in a stack buffer: a request whose method and
// target take under about 200 bytes is hashed with no allocation but the
// returned string (it runs on every answer: the Attribution-Record's
// request_hash has this framing too).
func Fingerprint(method, target string, body []byte) string {
	bodySum := sha256.Sum256(body)
	var small [256]byte
	b := small[:0]
	b = binary.BigEndian.AppendUint64(b, uint64(len(method)))
	b = append(b, method...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(target)))
	b = append(b, target...)
	b = binary.BigEndian.AppendUint64(b, sha256.Size)
	b = append(b, bodySum[:]...)
	sum := sha256.Sum256(b)
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], sum[:])
	return string(hx[:])
}

// OwnedFingerprint is fingerprint (a Fingerprint) bound to owner, the
// person a request acts for when that is not its agent's own owner (an
// OAuth token's sub): SHA-256 over the length-prefixed fingerprint and
// owner, 64 lowercase hex. The gateway claims such a request's key with
// it, so that one person's repeat of another person's key behind the
// same agent is a different request (idempotency-key-reused), never a
// replay of the other person's answer.
func OwnedFingerprint(fingerprint, owner string) string {
	var small [256]byte
	b := small[:0]
	b = binary.BigEndian.AppendUint64(b, uint64(len(fingerprint)))
	b = append(b, fingerprint...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(owner)))
	b = append(b, owner...)
	sum := sha256.Sum256(b)
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], sum[:])
	return string(hx[:])
}
