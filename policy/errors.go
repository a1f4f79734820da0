package policy

import (
	"fmt"
	"unicode/utf8"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// AGTP status codes used by this package, named as RCNS §19 names them.
const (
	// StatusAuthorizationRequired is 262 Authorization Required: lock 3
	// closed, a claimed scope not granted (scope-claim-invalid) or a
	// granted scope left out of the claim (scope-required). RCNS §19.
	StatusAuthorizationRequired = 262
	// StatusProposalApproved is 263 Proposal Approved. RCNS §15.4.
	StatusProposalApproved = 263
	// StatusScopeViolation is 455 Scope Violation: a required scope the
	// agent was never granted (scope-exceeded). RCNS §11.5.
	StatusScopeViolation = 455
	// StatusMethodViolation is 459 Method Violation: method not in the
	// catalog, not custom and not an opted-in legacy verb. RCNS §5.2.
	StatusMethodViolation = 459
	// StatusEndpointViolation is 460 Endpoint Violation: path grammar
	// violation. RCNS §6.
	StatusEndpointViolation = 460
	// StatusContractAvailable is 461 RCNS Contract Available
	// (confirm-first preview). RCNS §13.4.
	StatusContractAvailable = 461
	// StatusProposalRejected is 463 Proposal Rejected. RCNS §15.5.
	StatusProposalRejected = 463
	// StatusNoContract is 464 RCNS No Contract. RCNS §11.1, §19.
	StatusNoContract = 464
)

// Refusal is a structured refusal destined for the wire: the uniform
// error body of RCNS §19 (OP-28) plus retryable. It implements error.
type Refusal struct {
	// Status is the HTTP/AGTP status code, e.g. 459.
	Status int
	// Reason is the reason token as the spec spells it, e.g.
	// "method-not-in-catalog".
	Reason string
	// Explanation is one human-readable sentence saying what was refused
	// and why.
	Explanation string
	// Retryable reports whether repeating the identical request may
	// succeed later without the caller changing anything.
	Retryable bool
	// Fields holds extra top-level body fields: "method",
	// "catalog_version", "segment", "path", "allowed_methods_for_path",
	// "redirects_for_path", "scope", "missing_scopes", "type". Nil when
	// there are none.
	Fields map[string]any
}

// Error returns "STATUS reason: explanation".
func (r *Refusal) Error() string {
	if r == nil {
		return "<nil refusal>"
	}
	return fmt.Sprintf("%d %s: %s", r.Status, r.Reason, r.Explanation)
}

// quote renders an agent-supplied value for an explanation sentence,
// quoted and cut as textcut.Clip cuts every echo.
func quote(s string) string {
	if p := textcut.Prefix(s, textcut.EchoBytes); len(p) < len(s) {
		return fmt.Sprintf("%q%s", p, textcut.Ellipsis)
	}
	return fmt.Sprintf("%q", s)
}

// DescribeChar names the character at byte offset i of an agent-supplied
// value for an explanation sentence: the whole UTF-8 character, quoted,
// plus its code point when it is not ASCII ("character 'é' (U+00E9)");
// or, when the byte at i does not start a valid UTF-8 sequence, that
// byte ("byte 0xC3 (not valid UTF-8)"). A byte of a multi-byte character
// is never shown as a character of its own.
func DescribeChar(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size <= 1:
		return fmt.Sprintf("byte 0x%02X (not valid UTF-8)", s[i])
	case r < utf8.RuneSelf:
		return fmt.Sprintf("character %q", r)
	}
	return fmt.Sprintf("character %q (U+%04X)", r, r)
}
