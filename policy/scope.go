package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Scope is one scope token, e.g. "rcns:negotiate" or "booking:*":
// scope-segment 1*(":" scope-segment), each segment lowercase
// 1*(ALPHA / DIGIT / "-" / "_") or "*" (agtp-09 App. D, RCNS §3). Scopes
// are comparable; the zero Scope is not a valid token.
type Scope struct {
	tok string
}

// ParseScope parses one scope token. It returns an error when s has fewer
// than two segments, an empty segment, a character outside lowercase
// ALPHA / DIGIT / "-" / "_", or a "*" that is not a whole segment;
// uppercase letters are refused (tokens are lowercase ASCII). RCNS §3.
func ParseScope(s string) (Scope, error) {
	if s == "" {
		return Scope{}, errors.New("scope: empty token")
	}
	// Characters are checked before the segment count, so that a token
	// like "é" is told which character is wrong, not only that it has
	// one segment.
	segments := 0
	for rest, more := s, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, ":")
		segments++
		if seg == "" {
			return Scope{}, fmt.Errorf("scope %s: empty segment", quote(s))
		}
		if seg == "*" {
			continue
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			case 'A' <= c && c <= 'Z':
				return Scope{}, fmt.Errorf("scope %s: uppercase letters are not allowed (scope tokens are lowercase ASCII)", quote(s))
			case c == '*':
				return Scope{}, fmt.Errorf("scope %s: '*' must be a whole segment", quote(s))
			default:
				return Scope{}, fmt.Errorf("scope %s: %s is not allowed", quote(s), DescribeChar(seg, i))
			}
		}
	}
	if segments < 2 {
		return Scope{}, fmt.Errorf("scope %s: needs at least two ':'-separated segments", quote(s))
	}
	return Scope{tok: s}, nil
}

// MustParseScope is ParseScope that panics on error; for constants and
// tests.
func MustParseScope(s string) Scope {
	sc, err := ParseScope(s)
	if err != nil {
		panic(err)
	}
	return sc
}

// String returns the token, "" for the zero Scope.
func (s Scope) String() string { return s.tok }

// IsZero reports whether s is the zero Scope.
func (s Scope) IsZero() bool { return s.tok == "" }

// Covers reports whether s covers the required token r (RCNS §11.4,
// OP-10): segment by segment each segment of s equals that of r or is
// "*", and a trailing "*" in s also covers one or more remaining segments
// of r. "*:*" has no special meaning beyond that rule. The zero Scope
// covers nothing and is covered by nothing.
func (s Scope) Covers(r Scope) bool {
	if s.tok == "" || r.tok == "" {
		return false
	}
	if s.tok == r.tok {
		return true
	}
	// Segment by segment, as strings.Split(tok, ":") would give them,
	// without allocating: "*" matches any one segment, and as the last
	// segment of s, everything from there on.
	ts, rs := s.tok, r.tok
	rDone := false
	for {
		t, tRest, tMore := strings.Cut(ts, ":")
		if rDone {
			return false // s has more segments than r
		}
		rseg, rRest, rMore := strings.Cut(rs, ":")
		if t == "*" && !tMore {
			return true
		}
		if t != "*" && t != rseg {
			return false
		}
		if !tMore {
			return !rMore
		}
		ts = tRest
		if rMore {
			rs = rRest
		} else {
			rDone = true
		}
	}
}

// ParseAuthorityScope parses an Authority-Scope header value:
// scope-token *( OWS "," OWS scope-token ), OWS = spaces and tabs, so
// "a:b,c:d" and "a:b, c:d" are identical. Duplicates are collapsed
// keeping the first occurrence's order. An empty list, an empty element
// or an invalid token is an error (400 invalid-authority-scope at the
// caller). agtp-09 App. D, RCNS §3.
func ParseAuthorityScope(header string) ([]Scope, error) {
	if strings.Trim(header, " \t") == "" {
		return nil, errors.New("authority-scope: empty list")
	}
	out := make([]Scope, 0, strings.Count(header, ",")+1)
	// Duplicates are found by a scan of out while it is short (a header
	// names a few scopes), by a set past dedupeScanMax.
	var seen map[Scope]bool
	for i, rest, more := 0, header, true; more; i++ {
		var part string
		part, rest, more = strings.Cut(rest, ",")
		tok := strings.Trim(part, " \t")
		if tok == "" {
			return nil, fmt.Errorf("authority-scope: element %d is empty", i+1)
		}
		sc, err := ParseScope(tok)
		if err != nil {
			return nil, fmt.Errorf("authority-scope: element %d: %w", i+1, err)
		}
		if seen == nil && len(out) == dedupeScanMax {
			seen = make(map[Scope]bool, cap(out))
			for _, o := range out {
				seen[o] = true
			}
		}
		dup := false
		if seen != nil {
			dup = seen[sc]
			seen[sc] = true
		} else {
			dup = slices.Contains(out, sc)
		}
		if !dup {
			out = append(out, sc)
		}
	}
	return out, nil
}

// dedupeScanMax is how many distinct scopes ParseAuthorityScope
// compares a new one with by a scan before it keeps a set instead.
const dedupeScanMax = 16

// ParseScopes parses a list of scope tokens (e.g. an agent document's
// granted scopes), collapsing duplicates; the error names the offending
// token.
func ParseScopes(tokens []string) (ScopeSet, error) {
	out := make(ScopeSet, 0, len(tokens))
	seen := make(map[Scope]bool, len(tokens))
	for _, t := range tokens {
		sc, err := ParseScope(t)
		if err != nil {
			return nil, err
		}
		if !seen[sc] {
			seen[sc] = true
			out = append(out, sc)
		}
	}
	return out, nil
}

// ScopeSet is a set of scope tokens: an agent's granted scopes or a
// request's claimed ones.
type ScopeSet []Scope

// Covers reports whether some token of s covers r (RCNS §11.4).
func (s ScopeSet) Covers(r Scope) bool {
	for _, t := range s {
		if t.Covers(r) {
			return true
		}
	}
	return false
}

// Missing returns the required tokens that s does not cover, in the order
// given, without duplicates; nil when s covers them all.
func (s ScopeSet) Missing(required []Scope) []Scope {
	var out []Scope
	for _, r := range required {
		if s.Covers(r) {
			continue
		}
		dup := false
		for _, m := range out {
			if m == r {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, r)
		}
	}
	return out
}

// Strings returns the tokens as strings, in order (empty, never nil).
func (s ScopeSet) Strings() []string {
	out := make([]string, len(s))
	for i, sc := range s {
		out[i] = sc.tok
	}
	return out
}

// String returns the tokens joined with ", " (an Authority-Scope value).
func (s ScopeSet) String() string { return strings.Join(s.Strings(), ", ") }

// scopeStrings renders scopes for a refusal's missing_scopes field.
func scopeStrings(s []Scope) []string { return ScopeSet(s).Strings() }
