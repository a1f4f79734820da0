// Package jsonenc writes JSON by hand where the gateway's hot paths need
// it: strings and plain decoded-JSON values exactly as encoding/json
// writes them (AppendString, AppendStringHTML, AppendValue), and RFC
// 8785 canonical JSON (AppendJCS, AppendJCSString, Canonical) for record
// hashes and contract_hash. Every writer is tested byte for byte against
// encoding/json or github.com/gowebpki/jcs.
package jsonenc

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// AppendString appends s as a JSON string exactly as encoding/json
// does with SetEscapeHTML(false).
func AppendString(b []byte, s string) []byte { return appendString(b, s, false) }

// AppendStringHTML appends s as a JSON string exactly as
// encoding/json.Marshal does (<, > and & escaped as \u003c, \u003e, \u0026).
func AppendStringHTML(b []byte, s string) []byte { return appendString(b, s, true) }

// jsonSafe and jsonHTMLSafe mark the bytes appendString copies as
// they are (ASCII from 0x20, but '"' and '\\'; the HTML table also not
// '<', '>' and '&'), as encoding/json's safeSet and htmlSafeSet do:
// one table load per byte on the common run of plain characters.
var jsonSafe, jsonHTMLSafe = func() (plain, html [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
		html[c] = plain[c] && c != '<' && c != '>' && c != '&'
	}
	return plain, html
}()

func appendString(b []byte, s string, html bool) []byte {
	const hexd = "0123456789abcdef"
	safe := &jsonSafe
	if html {
		safe = &jsonHTMLSafe
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if safe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = appendEscapedByte(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexd[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendValue appends v as encoding/json.Marshal writes it (html:
// <, > and & escaped, as Marshal does; false: as an Encoder with
// SetEscapeHTML(false)) for the plain decoded-JSON types: nil, bool,
// string, float64 (encoding/json's float format), int, int64, *big.Int
// (its decimal digits, as encoding/json writes it), map[string]any (keys
// sorted) and []any. It reports false, having
// appended an unspecified prefix, for any other type or a NaN/±Inf; the
// caller then encodes with encoding/json.
func AppendValue(b []byte, v any, html bool) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case string:
		return appendString(b, x, html), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return b, false
		}
		// encoding/json's floatEncoder (bits 64): ES6 number formatting.
		format := byte('f')
		if abs := math.Abs(x); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
			format = 'e'
		}
		b = strconv.AppendFloat(b, x, format, -1, 64)
		if format == 'e' {
			if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
				b[n-2] = b[n-1]
				b = b[:n-1]
			}
		}
		return b, true
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case *big.Int: // an integer beyond ±2^53, kept exactly (recipes.decodeExact)
		if x == nil {
			return append(b, "null"...), true
		}
		return x.Append(b, 10), true
	case []any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = AppendValue(b, e, html); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		if x == nil {
			return append(b, "null"...), true
		}
		var small [16]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k, html)
			b = append(b, ':')
			var ok bool
			if b, ok = AppendValue(b, x[k], html); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// Canonical is JCS(json(v)) (RFC 8785): one pass (AppendJCS) for the
// plain value types records hold; anything else falls back to
// json.Marshal + jcs.Transform. The error is json.Marshal's or the
// canonicalizer's.
func Canonical(v any) ([]byte, error) { return AppendCanonical(make([]byte, 0, 512), v) }

// AppendCanonical is Canonical appending to dst (returned unchanged on
// error), so a caller can encode into a buffer it reuses.
func AppendCanonical(dst []byte, v any) ([]byte, error) {
	if b, ok := AppendJCS(dst, v); ok {
		return b, nil
	}
	out, err := CanonicalSlow(v)
	if err != nil {
		return dst, err
	}
	return append(dst, out...), nil
}

// AppendJCS appends v in RFC 8785 canonical form for the types records
// hold (nil, bool, string, int, int64, integral float64 within ±2^53,
// []string, []any and map[string]any with ASCII keys) and reports true;
// for any other value it reports false, having appended an unspecified
// prefix (Canonical then takes the slow path).
func AppendJCS(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case string:
		return AppendJCSString(b, x)
	case int:
		return appendJCSInt(b, int64(x))
	case int64:
		return appendJCSInt(b, x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return appendJCSInt(b, int64(x))
		}
		return b, false
	case []string:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = AppendJCSString(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = AppendJCS(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		var arr [16]string
		keys := arr[:0]
		for k := range x {
			for i := 0; i < len(k); i++ {
				if k[i] >= utf8.RuneSelf {
					return b, false // UTF-16 key order: leave it to jcs
				}
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			b, _ = AppendJCSString(b, k)
			b = append(b, ':')
			if b, ok = AppendJCS(b, x[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

func appendJCSInt(b []byte, i int64) ([]byte, bool) {
	if i > 1<<53 || i < -(1<<53) {
		return b, false
	}
	return strconv.AppendInt(b, i, 10), true
}

// AppendJCSString appends s as an RFC 8785 string (§3.2.2.2, ECMAScript
// JSON.stringify: only '"', '\\' and controls escaped) and reports true;
// for invalid UTF-8 it appends nothing and reports false (the caller
// falls back to json.Marshal + jcs.Transform, which replace it).
func AppendJCSString(b []byte, s string) ([]byte, bool) {
	if !utf8.ValidString(s) {
		return b, false
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = appendEscapedByte(append(b, s[start:i]...), c)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// appendEscapedByte appends the JSON escape of an ASCII byte both RFC
// 8785 and encoding/json write the same way: '"' and '\\' backslashed,
// \b \t \n \f \r short, any other byte as \u00XX.
func appendEscapedByte(b []byte, c byte) []byte {
	const hexd = "0123456789abcdef"
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\t':
		return append(b, '\\', 't')
	case '\n':
		return append(b, '\\', 'n')
	case '\f':
		return append(b, '\\', 'f')
	case '\r':
		return append(b, '\\', 'r')
	}
	return append(b, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
}

// CanonicalSlow is Canonical through json.Marshal and jcs.Transform
// only (the reference the one-pass form is tested against).
func CanonicalSlow(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalize: %v", err)
	}
	return out, nil
}
