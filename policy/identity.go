package policy

import (
	"fmt"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Caller is the resolved identity of a request (RCNS §3, §10 step 6).
type Caller struct {
	// Agent is the registry entry of the Agent-ID.
	Agent *Agent
	// Claimed is the parsed Authority-Scope; nil when the header was
	// absent.
	Claimed ScopeSet
	// ScopeHeader reports whether the Authority-Scope header was present.
	ScopeHeader bool
	// Bounded reports that the request's credential bounds the agent's
	// grants (an OAuth access token, ARCHITECTURE.md "Identity"): the
	// request holds a grant only where both the agent's registry grants
	// and Ceiling cover it. An empty Ceiling then grants nothing.
	Bounded bool
	// Ceiling is what the credential grants when Bounded: the token's
	// scopes mapped to AGTP scope tokens.
	Ceiling ScopeSet
}

// Effective returns the scopes the request carries: Claimed when the
// Authority-Scope header was present, else the agent's granted set
// (RCNS §3). Nil for a nil Caller.
func (c *Caller) Effective() ScopeSet {
	switch {
	case c == nil:
		return nil
	case c.ScopeHeader:
		return c.Claimed
	}
	return c.granted()
}

// Scoped reports whether the request states its scopes: with the
// Authority-Scope header, or with a credential that bounds them (an
// OAuth access token's scopes stand for the header's claim; spec OP-9's
// scope_required_for_invocation is then met).
func (c *Caller) Scoped() bool { return c != nil && (c.ScopeHeader || c.Bounded) }

// granted returns the scopes the request may hold: the agent's
// registry grants, bounded by the credential's Ceiling when Bounded.
func (c *Caller) granted() ScopeSet {
	if c == nil || c.Agent == nil {
		return nil
	}
	if c.Bounded {
		return Intersect(c.Agent.Scopes, c.Ceiling)
	}
	return c.Agent.Scopes
}

// Intersect returns the scopes both a and b cover (RCNS §11.4
// covering, "*" segments included): each token of a that b covers and
// each token of b that a covers, without duplicates, a's first. A
// grant of "hotel:*" and a ceiling of "hotel:read" intersect to
// "hotel:read".
func Intersect(a, b ScopeSet) ScopeSet {
	out := ScopeSet{}
	add := func(s Scope) {
		for _, t := range out {
			if t == s {
				return
			}
		}
		out = append(out, s)
	}
	for _, s := range a {
		if b.Covers(s) {
			add(s)
		}
	}
	for _, s := range b {
		if a.Covers(s) {
			add(s)
		}
	}
	return out
}

// BoundRefusal checks a Bounded caller's Authority-Scope claim against
// its Ceiling, after ResolveCaller checked it against the registry: a
// claimed token the registry grants but the credential does not is 403
// "insufficient-scope" (insufficientScope). Nil when the caller is not
// Bounded, claims nothing, or the ceiling covers the claim.
func (c *Caller) BoundRefusal() *Refusal {
	if c == nil || !c.Bounded || !c.ScopeHeader {
		return nil
	}
	if missing := c.granted().Missing(c.Claimed); len(missing) > 0 {
		// The claim, not the operation, asks for them (helper-149: the
		// answer said the operation required a scope it did not).
		r := insufficientScope(missing, c.Claimed)
		r.Explanation = fmt.Sprintf("The access token does not grant %s, which the request claims in Authority-Scope and the agent holds: claim only what the token grants, or get a token with %s.", ScopeSet(missing), map[bool]string{true: "that scope", false: "those scopes"}[len(missing) == 1])
		return r
	}
	return nil
}

// StatusForbidden is 403 Forbidden: here, a credential that does not
// carry a scope the agent holds (RFC 6750 §3.1 insufficient_scope).
const StatusForbidden = 403

// insufficientScope is 403 "insufficient-scope": the request's
// credential (an OAuth access token) lacks missing, scopes its agent is
// granted; required is every scope the operation needs. Fields
// {"type": "insufficient-scope", "missing_scopes": ..., "required_scopes": ...}.
// A door turns it into RFC 6750's WWW-Authenticate: Bearer
// error="insufficient_scope".
func insufficientScope(missing, required []Scope) *Refusal {
	return &Refusal{Status: StatusForbidden, Reason: "insufficient-scope",
		Explanation: fmt.Sprintf("The access token does not grant %s, which this operation requires and the agent holds: get a token with %s.", ScopeSet(missing), map[bool]string{true: "that scope", false: "those scopes"}[len(missing) == 1]),
		Fields:      map[string]any{"type": "insufficient-scope", "missing_scopes": scopeStrings(missing), "required_scopes": scopeStrings(required)}}
}

// ResolveCaller resolves the identity headers of a request: agentID is the
// Agent-ID value, ownerID the Owner-ID value ("" = absent),
// authorityScope the Authority-Scope value and scopePresent whether that
// header was present. Syntax is checked before the registry. Refusals
// (RCNS §3, §10 step 6, OP-6):
//
//   - Agent-ID not 64 lowercase hex → 400 "invalid-canonical-id"
//   - Owner-ID syntax invalid → 400 "invalid-owner-id"
//   - Authority-Scope unparsable → 400 "invalid-authority-scope"
//   - unknown Agent-ID → 401 "agent-unauthenticated"
//   - Owner-ID differs from the registry's → 401 "owner-mismatch"
//   - suspended → 503 "agent-suspended"; retired → 410 "agent-retired"
//   - a claimed token not covered by the granted set → 262
//     "scope-claim-invalid", Fields {"type": "scope-claim-invalid",
//     "missing_scopes": [the first 8 such tokens, each cut to 64 bytes]},
//     plus "missing_scope_count" (all of them) when there are more
//
// Deprecated agents are served. The Caller is nil with every refusal
// but scope-claim-invalid: there the agent is identified and only its
// claim is refused, so the Caller is returned with the refusal (the
// answer names who the gateway took the caller to be, spec §4).
func ResolveCaller(reg *Registry, agentID, ownerID, authorityScope string, scopePresent bool) (*Caller, *Refusal) {
	if !ValidAgentID(agentID) {
		return nil, &Refusal{Status: 400, Reason: "invalid-canonical-id",
			Explanation: "Agent-ID is not a canonical Agent-ID (64 lowercase hexadecimal characters)."}
	}
	if ownerID != "" && !ValidOwnerID(ownerID) {
		return nil, &Refusal{Status: 400, Reason: "invalid-owner-id",
			Explanation: "Owner-ID is not 1 to 256 characters of letters, digits, '-', '_', ':' and '.'."}
	}
	var claimed ScopeSet
	if scopePresent {
		sc, err := ParseAuthorityScope(authorityScope)
		if err != nil {
			return nil, &Refusal{Status: 400, Reason: "invalid-authority-scope",
				Explanation: fmt.Sprintf("The Authority-Scope header is malformed: %v.", err)}
		}
		claimed = sc
	}
	agent, ok := reg.Lookup(agentID)
	if !ok {
		return nil, &Refusal{Status: 401, Reason: "agent-unauthenticated",
			Explanation: "The Agent-ID does not resolve to an agent registered with this server."}
	}
	if ownerID != "" && ownerID != agent.OwnerID {
		return nil, &Refusal{Status: 401, Reason: "owner-mismatch",
			Explanation: "The Owner-ID does not match the owner registered for this Agent-ID."}
	}
	switch agent.Status {
	case AgentSuspended:
		return nil, &Refusal{Status: 503, Reason: "agent-suspended", Retryable: true,
			Explanation: "The agent is suspended; requests are refused until it is reinstated."}
	case AgentRetired:
		return nil, &Refusal{Status: 410, Reason: "agent-retired",
			Explanation: "The agent is retired and can no longer make requests."}
	}
	c := &Caller{Agent: agent, Claimed: claimed, ScopeHeader: scopePresent}
	if missing := agent.Scopes.Missing(claimed); len(missing) > 0 {
		words, listed := echoScopes(missing)
		fields := map[string]any{"type": "scope-claim-invalid", "missing_scopes": listed}
		if len(listed) < len(missing) {
			fields["missing_scope_count"] = len(missing)
		}
		return c, &Refusal{Status: StatusAuthorizationRequired, Reason: "scope-claim-invalid",
			Explanation: fmt.Sprintf("Authority-Scope claims %s, which the agent has not been granted.", words),
			Fields:      fields}
	}
	return c, nil
}

// maxEchoedScopes bounds how many claimed scope tokens a refusal echoes:
// an Authority-Scope header can carry as many as the header limit lets
// through (about 20 KiB), and the answer would list them all.
const maxEchoedScopes = 8

// echoScopes renders scope tokens taken from the request for a refusal:
// the first maxEchoedScopes, each cut as textcut.Clip cuts, as words for
// the explanation ("a:b, c:d and 3 more") and as the list for
// missing_scopes.
func echoScopes(s []Scope) (words string, listed []string) {
	listed = make([]string, min(len(s), maxEchoedScopes))
	for i := range listed {
		listed[i] = textcut.Clip(s[i].tok)
	}
	words = strings.Join(listed, ", ")
	if more := len(s) - len(listed); more > 0 {
		words += fmt.Sprintf(" and %d more", more)
	}
	return words, listed
}

// CheckRequiredScopes checks required scopes against the request (RCNS
// §11.5, OP-11): nil when Effective covers every required token. Else,
// when the agent's granted set covers every missing token (granted but
// not claimed), 262 "scope-required" with Fields {"type":
// "scope-required", "missing_scopes": the tokens the request lacks};
// otherwise 455 "scope-exceeded" with Fields {"missing_scopes": the
// tokens the agent was never granted}. For a Bounded caller, tokens the
// agent is granted but its credential does not carry are 403
// "insufficient-scope" (an OAuth token with too few scopes).
func CheckRequiredScopes(c *Caller, required []Scope) *Refusal {
	missing := c.Effective().Missing(required)
	if len(missing) == 0 {
		return nil
	}
	var registry ScopeSet
	if c != nil && c.Agent != nil {
		registry = c.Agent.Scopes
	}
	if ungranted := registry.Missing(missing); len(ungranted) > 0 {
		return &Refusal{Status: StatusScopeViolation, Reason: "scope-exceeded",
			Explanation: fmt.Sprintf("The agent has not been granted %s, which this operation requires.", ScopeSet(ungranted)),
			Fields:      map[string]any{"missing_scopes": scopeStrings(ungranted)}}
	}
	if capped := c.granted().Missing(missing); len(capped) > 0 {
		return insufficientScope(capped, required)
	}
	return &Refusal{Status: StatusAuthorizationRequired, Reason: "scope-required",
		Explanation: fmt.Sprintf("The request's Authority-Scope does not include %s; the agent holds it and must claim it.", ScopeSet(missing)),
		Fields:      map[string]any{"type": "scope-required", "missing_scopes": scopeStrings(missing)}}
}
