package jsonenc

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MaxExactInteger is 2^53: every integer up to it in magnitude is a
// float64 exactly, the form a decoded JSON number takes here; a larger
// integer literal would be rounded (RFC 7493 §2.2).
const MaxExactInteger = 1 << 53

// HasLongDigitRun reports whether raw holds 16 or more consecutive ASCII
// digits, the least an integer beyond ±2^53 needs: a body without such a
// run is decoded to float64 without loss; only one with it needs
// ExactIntegers (or, in a request, the refusal of such integers).
func HasLongDigitRun(raw []byte) bool {
	run := 0
	for _, c := range raw {
		if c >= '0' && c <= '9' {
			if run++; run >= 16 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// InexactInteger reports whether lit, a JSON number literal, is an
// integer (no fraction, no exponent) beyond ±2^53, which a float64 would
// round. Numbers written with a fraction or an exponent are floats by
// their sender's choice.
func InexactInteger(lit string) bool {
	if strings.ContainsAny(lit, ".eE") {
		return false
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(lit, "-"), 10, 64)
	return err != nil || n > MaxExactInteger
}

// numbers makes json/v2, decoding into any, read each number literal
// itself: an integer beyond ±2^53 goes to inexact (which returns the
// value to keep, or an error), every other number decodes as float64,
// as json/v2 decodes it. Other values are json/v2's own decoding.
func numbers(inexact func(lit string) (any, error)) jsonv2.Options {
	return jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *any) error {
		if dec.PeekKind() != '0' {
			return errors.ErrUnsupported // not a number: json/v2's own decoding
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if lit := tok.String(); InexactInteger(lit) {
			n, err := inexact(lit)
			if err != nil {
				return err
			}
			if n != nil {
				*v = n
				return nil
			}
		}
		f, err := tok.Float()
		*v = f
		return err
	}))
}

// ExactIntegers makes json/v2, decoding into any, keep an integer
// literal beyond ±2^53 exactly as a *big.Int instead of rounding it to
// float64 (every other value decodes as before: duplicate names merge as
// json/v2 merges them). gojq computes on *big.Int, the answer encoders
// write it as a number, and schema checks read it as an integer
// (forSchemaLibrary). recipes adds it to an upstream body only for a body with a
// 16-digit run (HasLongDigitRun).
var ExactIntegers = numbers(func(lit string) (any, error) {
	if n, ok := new(big.Int).SetString(lit, 10); ok {
		return n, nil
	}
	return nil, nil // not a plain integer after all: decoded as a float
})

// InexactIntegerError is what RefuseInexactIntegers fails with, wrapped
// by json/v2 in a *jsonv2.SemanticError that names where the integer is.
type InexactIntegerError struct {
	Digits int // digits of the integer, sign left out
}

// Error names the integer's size: "an integer of N digits is beyond ±2^53".
func (e *InexactIntegerError) Error() string {
	return fmt.Sprintf("an integer of %d digits is beyond ±2^53", e.Digits)
}

// RefuseInexactIntegers makes json/v2, decoding into any, fail on an
// integer literal beyond ±2^53 instead of rounding it to float64: a
// request body's integer must not reach the upstream as another number
// (RFC 7493 §2.2). Use it only for a body with a 16-digit run.
var RefuseInexactIntegers = numbers(func(lit string) (any, error) {
	return nil, &InexactIntegerError{Digits: len(strings.TrimPrefix(lit, "-"))}
})
