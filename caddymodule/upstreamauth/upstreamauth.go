// Package upstreamauth resolves the credential a composition step adds
// to its upstream request: one Policy per named upstream, chosen by the
// operator, resolved for the verified caller when the step runs
// (docs/configuration.md "Upstream credentials", docs/operator-guide.md
// "What the legacy API sees").
//
// A credential never comes from the agent's request: the caller's own
// token is an input to token exchange only and is never sent upstream.
// A Refusal names the upstream and the reason, never a secret. The
// package imports no caddy, engine or recipes code.
package upstreamauth

import (
	"context"
	"net/http"
	"time"
)

// Caller is whom an upstream step acts for; every field comes from
// verified identity (spec §3, §4; the engine's identity verifiers).
type Caller struct {
	// AgentID is the verified Agent-ID (64 lowercase hex).
	AgentID string
	// OwnerID is the principal the agent acts for: the OAuth token's sub,
	// the agent document's owner, or an Owner-ID header covered by the
	// request's signature; "" if none.
	OwnerID string
	// Token is the caller's verified OAuth access token ("" if none):
	// input to token exchange only, never sent upstream.
	Token string
	// Subject is the token's sub ("" if none).
	Subject string
	// Issuer is the token's issuer ("" if none).
	Issuer string
	// ContractID is the presented or minted contract's synthesis id; ""
	// for a Tier B call.
	ContractID string
	// RequestID is the request's Request-ID ("" if none was sent).
	RequestID string
}

// Kind names the credential a step used, for records and step reports
// ("static", "per_agent", "per_owner", "exchanged", "assertion"); never
// the credential's value.
type Kind string

// The kinds of credential a step can use.
const (
	// KindStatic is the endpoint's or step's configured headers (and
	// the upstream's static headers, if any): the same for every caller.
	KindStatic Kind = "static"
	// KindPerAgent is a secret the operator keeps per (upstream, agent).
	KindPerAgent Kind = "per_agent"
	// KindPerOwner is a secret the operator keeps per (upstream, owner).
	KindPerOwner Kind = "per_owner"
	// KindExchanged is a token obtained by RFC 8693 token exchange for
	// the caller's verified OAuth token.
	KindExchanged Kind = "exchanged"
	// KindAssertion is a short-lived JWT signed by the gateway naming
	// agent, owner, contract and request.
	KindAssertion Kind = "assertion"
)

// Credential is what a step adds to its upstream request: Header is set
// over the step's static headers (a name here replaces the static
// value). Kind is what records say.
type Credential struct {
	Header http.Header
	Kind   Kind
}

// Policy resolves an upstream's credential for a caller at execution
// time. scopes are the upstream scopes the call needs (the endpoint's
// required scopes; docs/configuration.md). Implementations are safe for
// concurrent use; a nil Refusal means the Credential is usable.
type Policy interface {
	Kind() Kind
	Resolve(ctx context.Context, c Caller, scopes []string) (Credential, *Refusal)
}

// Waiting is a Policy whose Resolve may wait on a server (a token
// exchange at an authorization server): MaxWait is the longest one
// Resolve waits before it answers, a credential or a refusal. A Policy
// that does not implement it answers without waiting on anything.
type Waiting interface {
	MaxWait() time.Duration
}

// Refusal is a credential that cannot be had: it names the upstream,
// never the secret. The engine answers it in the spec's error body
// (§19) with Status and Reason, naming the step.
type Refusal struct {
	// Upstream is the upstream's configured name.
	Upstream string
	// Reason is the AGTP reason token, e.g. "upstream-credential-missing",
	// "token-exchange-refused", "issuer-unavailable".
	Reason string
	// Status is the AGTP status to answer (e.g. 403, 424, 502, 503).
	Status int
	// RetryAfter is the Retry-After to send with a 503; 0 for none.
	RetryAfter time.Duration
	// Explanation is a human sentence for the error body; it never
	// contains a secret, and for a fault of the gateway's own (a broken
	// credential source, an unreachable authorization server) no path
	// or internal address either.
	Explanation string
	// Cause is the operator's detail of a fault ("" for none): the
	// path, URL and error that made the credential unavailable, for the
	// gateway's log only, never in the answer. It never contains a
	// secret.
	Cause string
}

// Error implements error: the reason and explanation.
func (r *Refusal) Error() string { return r.Reason + ": " + r.Explanation }

// ReasonCredentialMissing is the reason token of a (upstream, agent) or
// (upstream, owner) pair the operator keeps no credential for, or for
// which the caller has no verified id (no owner).
const ReasonCredentialMissing = "upstream-credential-missing"

// StatusCredentialMissing is the AGTP status of ReasonCredentialMissing:
// 424, the call depends on a credential the gateway does not hold.
const StatusCredentialMissing = 424

// ReasonCredentialUnavailable is the reason token of a credential
// source the gateway cannot read: a per_agent / per_owner dir missing or
// unreadable at call time, a secret file that cannot be read, is empty
// or is larger than MaxSecretFileBytes. It is the operator's fault, not
// the agent's: the Refusal's Cause names the path and error.
const ReasonCredentialUnavailable = "upstream-credential-unavailable"

// StatusCredentialUnavailable is the AGTP status of
// ReasonCredentialUnavailable: 503, retryable once the operator has
// fixed the source.
const StatusCredentialUnavailable = 503

// CredentialUnavailableRetryAfter is the Retry-After of
// ReasonCredentialUnavailable.
const CredentialUnavailableRetryAfter = 30 * time.Second

// Static is today's behaviour: the endpoint's and steps' own headers,
// plus Header (may be nil) set for every caller.
type Static struct {
	// Header is set on every request to the upstream, over the step's
	// own headers; nil adds nothing.
	Header http.Header
}

// Kind is KindStatic.
func (Static) Kind() Kind { return KindStatic }

// Resolve returns Header (a copy) for every caller; it never refuses.
func (s Static) Resolve(context.Context, Caller, []string) (Credential, *Refusal) {
	return Credential{Header: s.Header.Clone(), Kind: KindStatic}, nil
}

var _ Policy = Static{}
