package policy

import "fmt"

// Lock is one of the four locks of the RCNS dispatcher gate (RCNS §11.1).
type Lock int

const (
	// LockServerPolicy is lock 1: the operator enabled RCNS.
	LockServerPolicy Lock = 1
	// LockCallerOptIn is lock 2: the request carries Allow-RCNS: true.
	LockCallerOptIn Lock = 2
	// LockCallerScope is lock 3: the request carries rcns:negotiate.
	LockCallerScope Lock = 3
	// LockTrustTier is lock 4: the agent's trust tier passes
	// min_trust_tier.
	LockTrustTier Lock = 4
)

// String returns the lock's record name: "server_policy",
// "caller_opt_in", "caller_scope" or "trust_tier" ("lock(N)" otherwise).
func (l Lock) String() string {
	switch l {
	case LockServerPolicy:
		return "server_policy"
	case LockCallerOptIn:
		return "caller_opt_in"
	case LockCallerScope:
		return "caller_scope"
	case LockTrustTier:
		return "trust_tier"
	}
	return fmt.Sprintf("lock(%d)", int(l))
}

// LockState is the outcome of one lock in a gate evaluation.
type LockState string

const (
	// LockOpen means the lock passed.
	LockOpen LockState = "open"
	// LockClosed means the lock refused.
	LockClosed LockState = "closed"
	// LockNotEvaluated means evaluation stopped before the lock.
	LockNotEvaluated LockState = "not-evaluated"
)

// LockStates holds the four lock outcomes; index = Lock-1.
type LockStates [4]LockState

// Map returns lock name → state for records and INSPECT target=rcns-attempt
// (an unset state reads "not-evaluated").
func (s LockStates) Map() map[string]string {
	out := make(map[string]string, len(s))
	for i, st := range s {
		if st == "" {
			st = LockNotEvaluated
		}
		out[Lock(i+1).String()] = string(st)
	}
	return out
}

// ScopeNegotiate is rcns:negotiate, the scope that opens lock 3 (RCNS
// §11.3).
var ScopeNegotiate = MustParseScope("rcns:negotiate")

// AllowRCNS reports whether an Allow-RCNS header value opens lock 2: only
// exactly "true" does (case-sensitive); absent, "false", "TRUE", "1",
// "optimistic" and everything else do not. RCNS §3, §11.1.
func AllowRCNS(headerValue string) bool { return headerValue == "true" }

// AllowRCNSValues are the Allow-RCNS values the gateway understands,
// case-sensitive: "true" opens lock 2 and "false" keeps it closed, as an
// absent header does (RCNS §3, §11.1). Any other value ("optimistic",
// "TRUE", "1", "") also keeps it closed and gets the absent header's
// answer, the same 404/405 (§24 item 18), whose explanation names these
// values: a caller that meant to opt in learns that it did not
// (cases/04).
var AllowRCNSValues = []string{"true", "false"}

// KnownAllowRCNS reports whether an Allow-RCNS header value is one of
// AllowRCNSValues.
func KnownAllowRCNS(headerValue string) bool {
	return headerValue == "true" || headerValue == "false"
}

// Gate is the server side of the four-lock gate (RCNS §11, §20).
type Gate struct {
	// Enabled is lock 1, [policies.rcns].enabled (default false).
	Enabled bool
	// MinTrustTier is min_trust_tier for lock 4; 0 means 1, the
	// strictest (RCNS §20, OP-2).
	MinTrustTier TrustTier
}

// Locks12 evaluates locks 1 and 2 with lock 2 first in effect (OP-1).
// optIn is AllowRCNS of the request's header. Without opt-in, states are
// {not-evaluated, closed, not-evaluated, not-evaluated}, proceed is false
// and refusal nil: the caller answers its ordinary 404/405 with no RCNS
// signalling. With opt-in and RCNS disabled, lock 1 is closed and the
// refusal is 464 "rcns-disabled". Otherwise locks 1 and 2 are open and
// proceed is true.
func (g Gate) Locks12(optIn bool) (states LockStates, proceed bool, refusal *Refusal) {
	states = LockStates{LockNotEvaluated, LockNotEvaluated, LockNotEvaluated, LockNotEvaluated}
	if !optIn {
		states[LockCallerOptIn-1] = LockClosed
		return states, false, nil
	}
	states[LockCallerOptIn-1] = LockOpen
	if !g.Enabled {
		states[LockServerPolicy-1] = LockClosed
		return states, false, &Refusal{Status: StatusNoContract, Reason: "rcns-disabled",
			Explanation: "Runtime contract negotiation is disabled on this server; no contract can be synthesized."}
	}
	states[LockServerPolicy-1] = LockOpen
	return states, true, nil
}

// Locks34 evaluates locks 3 and 4 (after the RCNS rate limit, RCNS
// §11.2) and records them in states (nil allowed). Lock 3: c.Effective()
// must cover rcns:negotiate, else 262 "scope-required" with Fields
// {"type": "scope-required", "scope": "rcns:negotiate"} (always 262,
// OP-11). Lock 4: the agent's tier (0 counts as 2) must be <=
// MinTrustTier (0 counts as 1), else 464 "trust-tier-insufficient"
// (OP-2). It returns nil when both are open.
func (g Gate) Locks34(c *Caller, states *LockStates) *Refusal {
	var local LockStates
	if states == nil {
		states = &local
	}
	if !c.Effective().Covers(ScopeNegotiate) {
		states[LockCallerScope-1] = LockClosed
		states[LockTrustTier-1] = LockNotEvaluated
		if c != nil && c.Bounded && !c.granted().Covers(ScopeNegotiate) && c.Agent != nil && c.Agent.Scopes.Covers(ScopeNegotiate) {
			// The agent holds it; its access token does not carry it.
			return insufficientScope([]Scope{ScopeNegotiate}, []Scope{ScopeNegotiate})
		}
		return &Refusal{Status: StatusAuthorizationRequired, Reason: "scope-required",
			Explanation: "The request does not carry the rcns:negotiate scope required for runtime contract negotiation.",
			Fields:      map[string]any{"type": "scope-required", "scope": ScopeNegotiate.String()}}
	}
	states[LockCallerScope-1] = LockOpen
	var tier TrustTier
	if c != nil && c.Agent != nil {
		tier = c.Agent.TrustTier
	}
	tier = tier.resolved()
	minTier := g.MinTrustTier
	if minTier == 0 {
		minTier = TrustTierVerified
	}
	if tier > minTier {
		states[LockTrustTier-1] = LockClosed
		return &Refusal{Status: StatusNoContract, Reason: "trust-tier-insufficient",
			Explanation: fmt.Sprintf("The agent's trust tier %d does not meet this server's minimum trust tier %d for runtime contract negotiation.", tier, minTier)}
	}
	states[LockTrustTier-1] = LockOpen
	return nil
}
