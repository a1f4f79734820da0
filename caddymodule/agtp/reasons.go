package agtp

import "fmt"

// Retry says whether an error with a reason may be retried unchanged
// (the body's retryable field, spec §19 OP-28).
type Retry int8

const (
	// NotRetryable: the same request fails the same way until the
	// caller changes something.
	NotRetryable Retry = iota
	// Retryable: the same request may succeed later unchanged.
	Retryable
	// RetryDepends: the answer decides (an upstream failure is
	// retryable when it was transient and no write ran).
	RetryDepends
)

// Reason is one reason token of the gateway's error bodies (spec §19)
// with the status it is sent with and whether it is retryable. Every
// token the gateway sends is one of the package's Reason variables,
// listed by Catalog and documented in docs/troubleshooting.md (a test
// holds the two equal). A token the spec uses with two statuses
// (composition-impossible: 463 from PROPOSE, 464 from the gate) has
// one variable per status.
type Reason struct {
	// Token is the reason as the spec spells it ("scope-required").
	Token string
	// Status is the AGTP status code the reason is sent with.
	Status int
	// Retry is the retryable field's value (RetryDepends: set by the
	// caller).
	Retry Retry
}

// New returns the error for r with explanation, its status and
// retryable from the catalog (RetryDepends starts not retryable).
func (r Reason) New(explanation string) *Error {
	return &Error{Status: r.Status, Reason: r.Token, Explanation: explanation, Retryable: r.Retry == Retryable}
}

// Newf is New with a formatted explanation.
func (r Reason) Newf(format string, args ...any) *Error {
	return r.New(fmt.Sprintf(format, args...))
}

var catalog []Reason

func def(token string, status int, retry Retry) Reason {
	r := Reason{Token: token, Status: status, Retry: retry}
	catalog = append(catalog, r)
	return r
}

// Catalog returns every reason the gateway sends, in declaration order
// (a copy).
func Catalog() []Reason { return append([]Reason(nil), catalog...) }

// Lookup returns the catalog entries with token (two for
// composition-impossible), nil when the token is not the gateway's (an
// operator's error_map name).
func Lookup(token string) []Reason {
	var out []Reason
	for _, r := range catalog {
		if r.Token == token {
			out = append(out, r)
		}
	}
	return out
}

// Framing and body (spec §2.1, §10 step 1).
var (
	InvalidRequestLine         = def("invalid-request-line", 400, NotRetryable)
	ContentLengthRequired      = def("content-length-required", 400, NotRetryable)
	BodyTooLarge               = def("body-too-large", 413, NotRetryable)
	InvalidBody                = def("invalid-body", 400, NotRetryable)
	UnsupportedContentType     = def("unsupported-content-type", 400, NotRetryable)
	UnsupportedContentEncoding = def("unsupported-content-encoding", 415, NotRetryable)
	InvalidJSON                = def("invalid-json", 400, NotRetryable)
	DuplicateKey               = def("duplicate-key", 400, NotRetryable)
	InvalidQuery               = def("invalid-query", 400, NotRetryable)
	InvalidTaskID              = def("invalid-task-id", 400, NotRetryable)
	DuplicateHeader            = def("duplicate-header", 400, NotRetryable)
	InvalidContentLength       = def("invalid-content-length", 400, NotRetryable)
	InvalidHeader              = def("invalid-header", 400, NotRetryable)
	UnsupportedVersion         = def("unsupported-version", 400, NotRetryable)
	HeaderTooLarge             = def("header-too-large", 431, NotRetryable)
	TooManyHeaders             = def("too-many-headers", 431, NotRetryable)
	IncompleteRequest          = def("incomplete-request", 400, NotRetryable)
	RequestTimeout             = def("request-timeout", 408, NotRetryable)
	InvalidEnvelope            = def("invalid-envelope", 400, NotRetryable)
	MethodMismatch             = def("method-mismatch", 400, NotRetryable)
	ParameterConflict          = def("parameter-conflict", 400, NotRetryable)
)

// Method and path (spec §5, §6, §10 steps 2–5).
var (
	LegacyMethodNotEnabled = def("legacy-method-not-enabled", 459, NotRetryable)
	InvalidMethodToken     = def("invalid-method-token", 459, NotRetryable)
	MethodNotInCatalog     = def("method-not-in-catalog", 459, NotRetryable)
	InvalidPathEncoding    = def("invalid-path-encoding", 400, NotRetryable)
	PathGrammarViolation   = def("path-grammar-violation", 460, NotRetryable)
	MethodNotAllowed       = def("method-not-allowed", 405, NotRetryable)
	NotFound               = def("not-found", 404, NotRetryable)
)

// Identity (spec §3, §10 step 6; ARCHITECTURE.md "Identity").
var (
	IdentityModeRefused  = def("identity-mode-refused", 401, NotRetryable)
	AgentUnauthenticated = def("agent-unauthenticated", 401, NotRetryable)
	InvalidCanonicalID   = def("invalid-canonical-id", 400, NotRetryable)
	InvalidOwnerID       = def("invalid-owner-id", 400, NotRetryable)
	OwnerMismatch        = def("owner-mismatch", 401, NotRetryable)
	OwnerIDRequired      = def("owner-id-required", 400, NotRetryable)
	RequestIDRequired    = def("request-id-required", 400, NotRetryable)
	InvalidRequestID     = def("invalid-request-id", 400, NotRetryable)
	InvalidSessionID     = def("invalid-session-id", 400, NotRetryable)
	AgentSuspended       = def("agent-suspended", 503, Retryable)
	AgentRetired         = def("agent-retired", 410, NotRetryable)
	CertificateRequired  = def("certificate-required", 401, NotRetryable)
	CertificateUnknown   = def("certificate-unknown", 401, NotRetryable)
	CertificateMismatch  = def("certificate-mismatch", 401, NotRetryable)
	// The OAuth 2.1 bearer token of identity oauth (RFC 6750, RFC 9068,
	// RFC 7662; docs/operator-guide.md "OAuth").
	TokenInvalid         = def("token-invalid", 401, NotRetryable)
	InvalidAuthorization = def("invalid-authorization", 400, NotRetryable) // Authorization: Bearer sent twice or malformed (RFC 6750 §3.1 invalid_request)
	TokenExpired         = def("token-expired", 401, NotRetryable)
	TokenAudience        = def("token-audience-mismatch", 401, NotRetryable)
	TokenInactive        = def("token-inactive", 401, NotRetryable)
	OAuthClientUnknown   = def("oauth-client-unknown", 401, NotRetryable)
	IdentityConflict     = def("identity-conflict", 401, NotRetryable)
	InsufficientScope    = def("insufficient-scope", 403, NotRetryable)
	IssuerUnavailable    = def("issuer-unavailable", 503, Retryable)
	SignatureMissing     = def("signature-missing", 401, NotRetryable)
	SignatureInvalid     = def("signature-invalid", 401, NotRetryable)
	KeyUnknown           = def("key-unknown", 401, NotRetryable)
	SignatureExpired     = def("signature-expired", 401, NotRetryable)
	ComponentNotCovered  = def("component-not-covered", 401, NotRetryable)
	AuthorityMismatch    = def("authority-mismatch", 401, NotRetryable)
	DigestMismatch       = def("digest-mismatch", 401, NotRetryable)
	SignatureReplayed    = def("signature-replayed", 401, NotRetryable)
)

// Scope and authority (spec §11.3–§11.5, §13.3).
var (
	InvalidAuthorityScope      = def("invalid-authority-scope", 400, NotRetryable)
	ScopeClaimInvalid          = def("scope-claim-invalid", 262, NotRetryable)
	ScopeRequired              = def("scope-required", 262, NotRetryable)
	ScopeExceeded              = def("scope-exceeded", 455, NotRetryable)
	AnonymousDiscoveryDisabled = def("anonymous-discovery-disabled", 262, NotRetryable)
	Forbidden                  = def("forbidden", 403, NotRetryable)
)

// RCNS gate and contracts (spec §11, §13, §14).
var (
	RCNSDisabled           = def("rcns-disabled", 464, NotRetryable)
	TrustTierInsufficient  = def("trust-tier-insufficient", 464, NotRetryable)
	CompositionImpossible  = def("composition-impossible", 464, NotRetryable)
	SynthesisError         = def("synthesis-error", 464, NotRetryable)
	ContractNotYours       = def("contract-not-yours", 464, NotRetryable)
	ContractRevoked        = def("contract-revoked", 464, NotRetryable)
	ContractNotFound       = def("contract-not-found", 404, NotRetryable)
	InvalidSynthesisID     = def("invalid-synthesis-id", 400, NotRetryable)
	AmbiguousContract      = def("ambiguous-contract", 400, NotRetryable)
	InvalidInput           = def("invalid-input", 422, NotRetryable)
	UpstreamTimeout        = def("upstream_timeout", 422, RetryDepends)
	UpstreamConnection     = def("upstream_connection_error", 422, RetryDepends)
	UpstreamMalformed      = def("upstream_malformed_response", 422, RetryDepends)
	UpstreamAuthentication = def("upstream_authentication_failed", 422, RetryDepends)
	UpstreamError          = def("upstream_error", 422, RetryDepends)
	CompositionFailed      = def("composition_failed", 422, RetryDepends)
)

// Upstream credentials: a credential policy (per_agent, per_owner) that
// holds no credential for the caller, answered before any step runs
// (caddymodule/upstreamauth; docs/configuration.md "Upstream
// credentials").
var (
	UpstreamCredentialMissing = def("upstream-credential-missing", 424, NotRetryable)
	// UpstreamCredentialUnavailable: the policy's credential source
	// cannot be read (a per_agent / per_owner dir missing or unreadable
	// at call time, an id's file unreadable, empty or oversized): the
	// operator's fault, logged at WARN with the cause; Retry-After.
	UpstreamCredentialUnavailable = def("upstream-credential-unavailable", 503, Retryable)
	// TokenExchangeRefused: the upstream's authorization server refused
	// the token exchange (RFC 8693) for the caller's token; its error
	// code is named. An unreachable server is issuer-unavailable (503).
	TokenExchangeRefused = def("token-exchange-refused", 424, NotRetryable)
	// TokenExchangeMisconfigured: the token exchange failed on the
	// gateway's side, whatever the caller's token (the server refused
	// the gateway's own client: 401, invalid_client,
	// unauthorized_client, unsupported_grant_type; a token that is not
	// Bearer): the operator's
	// fault, logged at WARN with the server's answer. Not retryable: it
	// fails the same way until the configuration is fixed.
	TokenExchangeMisconfigured = def("token-exchange-misconfigured", 502, NotRetryable)
)

// MCP confirm-first as input_required (SEP-2322, MCP 2026-07-28;
// caddymodule/mcpdoor inputreq.go, docs/agent-guide-mcp.md), answered as
// isError tool results.
var (
	// RequestStateInvalid: the retry's requestState was not sealed by
	// this gateway for this agent, tool and arguments, has expired, or
	// carries no answer to the approval; nothing was presented or run.
	RequestStateInvalid = def("request-state-invalid", 400, NotRetryable)
	// ConfirmationDeclined: the user declined or cancelled the approval;
	// nothing ran, and the call may be made again.
	ConfirmationDeclined = def("confirmation-declined", 409, Retryable)
)

// Rate limits, idempotency and shared state (spec §12).
var (
	RateLimited             = def("rate-limited", 429, Retryable)
	InvalidIdempotencyKey   = def("invalid-idempotency-key", 400, NotRetryable)
	AmbiguousIdempotencyKey = def("ambiguous-idempotency-key", 400, NotRetryable)
	IdempotencyKeyReused    = def("idempotency-key-reused", 422, NotRetryable)
	IdempotencyKeyInFlight  = def("idempotency-key-in-flight", 409, Retryable)
	OutcomeUnknown          = def("outcome-unknown", 409, NotRetryable)
	SynthesisInFlight       = def("synthesis-in-flight", 409, Retryable)
	KeyNotSettleable        = def("idempotency-key-not-settleable", 409, NotRetryable)
	IdempotencyStoreFull    = def("idempotency-store-full", 503, Retryable)
	StoreUnavailable        = def("store-unavailable", 503, Retryable)
	InvalidLimit            = def("invalid-limit", 400, NotRetryable)
	InvalidCursor           = def("invalid-cursor", 400, NotRetryable)
	InvalidParameter        = def("invalid-parameter", 400, NotRetryable)
	ParameterRequired       = def("parameter-required", 400, NotRetryable)
	UnknownTarget           = def("unknown-target", 400, NotRetryable)
	TargetConflict          = def("target-conflict", 400, NotRetryable)
	AttemptNotFound         = def("attempt-not-found", 404, NotRetryable)
	RecordNotFound          = def("record-not-found", 404, NotRetryable)
	InvalidMode             = def("invalid-mode", 400, NotRetryable)
	InternalError           = def("internal-error", 500, Retryable)
	ProposalSynthesisOff    = def("synthesis-disabled", 463, NotRetryable)
	ProposalPolicyRefused   = def("policy-refused", 463, NotRetryable)
	ProposalNotComposable   = def("composition-impossible", 463, NotRetryable)
	AmbiguousBody           = def("ambiguous-body", 400, NotRetryable)
	InvalidProposal         = def("invalid-proposal", 400, NotRetryable)
	InvalidSemantic         = def("invalid-semantic", 400, NotRetryable)
	InvalidSchema           = def("invalid-schema", 400, NotRetryable)
	InvalidDuration         = def("invalid-duration", 400, NotRetryable)
)

// The MCP door's refusals of an HTTP request before any MCP message is
// read (MCP transport security), and of a tool call that outlived the
// door's timeout (docs/doors.md "MCP door").
var (
	HostRefused   = def("host-refused", 403, NotRetryable)
	OriginRefused = def("origin-refused", 403, NotRetryable)
	BatchTooLarge = def("batch-too-large", 400, NotRetryable)
	CallTimeout   = def("call-timeout", 504, RetryDepends)
	// ResultTooLarge is a tool result whose (non-array) result is over
	// the door's max_result_bytes: the call ran, its answer is not
	// relayed.
	ResultTooLarge = def("result-too-large", 502, NotRetryable)
	// NoAuthorizationServer answers the OAuth authorization-server
	// discovery paths (RFC 8414, OpenID Connect Discovery) the MCP door
	// owns: the gateway runs no authorization server. 501 and not 404,
	// because MCP clients read a 404 there as "look elsewhere" and guess
	// next at POST /register on the legacy API (docs/doors.md
	// "Well-known paths").
	NoAuthorizationServer = def("no-authorization-server", 501, NotRetryable)
)
