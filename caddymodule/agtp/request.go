// Package agtp is the protocol every door of the gateway shares, with
// no Caddy in it: the request model a door fills in (Request), the
// response value the engine returns (Response), the wire error and the
// catalog of reason tokens (Error, Reason, Catalog), and the parsers of
// agent input that do not depend on configuration: identifiers,
// durations, bodies and queries, and the envelope encoders (spec §2,
// §3, §19). Every parser here has a fuzz target.
package agtp

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Doors (bindings) a request can arrive through; the bounded binding
// label of metrics and the binding field of negotiation records.
const (
	// BindingHTTP is the HTTP binding of spec §2.3 (the rcns handler).
	BindingHTTP = "http"
	// BindingNative is the native AGTP/1.0 wire (spec §2.1).
	BindingNative = "agtp"
	// BindingMCP is the MCP door (Streamable HTTP tools/call).
	BindingMCP = "mcp"
)

// Request is one AGTP request as a door hands it to the engine. The
// door frames; the engine reads everything else, in the order of spec
// §10.
type Request struct {
	// Binding is the door (BindingHTTP, BindingNative, BindingMCP).
	Binding string
	// Method is the method token as sent.
	Method string
	// Target is the request-target as sent: path and optional query,
	// still percent-encoded (HTTP's RequestURI).
	Target string
	// URL is Target parsed (url.ParseRequestURI); nil when it does not
	// parse, which the engine refuses as invalid-request-line.
	URL *url.URL
	// Host is the Host header (or HTTP/2 :authority): @authority of a
	// signature, never identity or routing (spec §2.3).
	Host string
	// Header holds the request's header fields under Go's canonical
	// keys (http.CanonicalHeaderKey), repeated fields in order.
	Header http.Header
	// ContentLength is the declared body length in bytes: 0 for none,
	// -1 when the body is not framed by Content-Length (then Chunked or
	// unframed, refused as content-length-required).
	ContentLength int64
	// Chunked: the body was sent with Transfer-Encoding.
	Chunked bool
	// Body reads the declared body (at most ContentLength bytes); nil
	// when ContentLength is 0. The engine reads it once, bounded by
	// max_request_body.
	Body io.Reader
	// TLS is the connection's TLS state (mTLS identity); nil in plain
	// text.
	TLS *tls.ConnectionState
	// Loopback: the connection's local address is loopback (identity
	// header serves only such requests).
	Loopback bool
	// Context is the request's context: its deadline bounds upstream
	// calls that are not detached from the caller.
	Context context.Context
	// Verified, when not nil, is an identity the door has already
	// verified on the transport (the MCP door verifies the HTTP request
	// that carries the call); the engine then checks only that the
	// request names the same Agent-ID.
	Verified *Identity
}

// Identity is who the engine took the caller to be (spec §4 Owner-ID,
// Trust-Tier, Verification-Path response headers).
type Identity struct {
	// AgentID is the verified canonical Agent-ID (64 lowercase hex).
	AgentID string
	// VerificationPath names how it was established: "header"
	// (unverified, loopback only), "mtls", "signature" or "oauth".
	VerificationPath string
	// OwnerID, when not empty, is the principal the credential acts for
	// (an OAuth token's sub): the request's Owner-ID instead of the
	// agent document's owner_id.
	OwnerID string
	// Bounded reports that the credential bounds the agent's grants to
	// Scopes (an OAuth token's scopes mapped to AGTP scope tokens); when
	// false the agent's registry grants apply unbounded.
	Bounded bool
	// Scopes are the AGTP scope tokens the credential grants (Bounded).
	Scopes []string
	// Issuer is the OAuth issuer that vouched for the credential ("" for
	// the other modes); ClientID the token's OAuth client.
	Issuer, ClientID string
	// Subject is the OAuth token's sub ("" for the other modes).
	Subject string
	// Token is the verified OAuth access token ("" for the other modes):
	// the input of an upstream's token exchange only; never logged,
	// recorded or sent upstream.
	Token string
}

// Get returns the first value of header name ("Agent-ID"; any
// spelling), "" when absent.
func (r *Request) Get(name string) string {
	if v := r.Header[CanonicalKey(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Only returns the value of header name when it has exactly one line;
// "" when it is absent or repeated (a repeated single-valued header is
// refused, 400 duplicate-header, and neither of its values is echoed).
func (r *Request) Only(name string) string {
	if v := r.Header[CanonicalKey(name)]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// Value returns header name's values joined with ", " and whether the
// header was present at all.
func (r *Request) Value(name string) (string, bool) {
	vals, ok := r.Header[CanonicalKey(name)]
	if !ok {
		return "", false
	}
	if len(vals) == 1 {
		return vals[0], true
	}
	return strings.Join(vals, ", "), true
}

// Has reports whether header name is present.
func (r *Request) Has(name string) bool {
	_, ok := r.Header[CanonicalKey(name)]
	return ok
}

// SingleValued are the AGTP request headers that must appear at most
// once, in their AGTP spelling; a repeated one makes the request
// ambiguous (400 duplicate-header).
// Authority-Scope is one of them although its value is a list: a
// second line is refused, not joined, on every door (the native door's
// wire.Singletons has it too).
var SingleValued = []string{"Agent-ID", "Owner-ID", "Request-ID", "Task-ID", "Session-ID", "Allow-RCNS",
	"Authority-Scope", "Contract-Synthesized", "Synthesis-Id", "Idempotency-Key", "RCNS-Idempotency-Key", "Negotiation-ID"}

// singleValuedKeys holds SingleValued in Go's canonical form.
var singleValuedKeys = func() map[string]bool {
	m := make(map[string]bool, len(SingleValued))
	for _, name := range SingleValued {
		m[http.CanonicalHeaderKey(name)] = true
	}
	return m
}()

// RepeatedSingleton returns the first of SingleValued (in its order)
// that h carries more than once, "" when none.
func RepeatedSingleton(h http.Header) string {
	for k, v := range h {
		if len(v) > 1 && singleValuedKeys[k] {
			for _, name := range SingleValued {
				if len(h[CanonicalKey(name)]) > 1 {
					return name
				}
			}
		}
	}
	return ""
}

// canonicalKeys maps the AGTP spelling of the request headers the
// engine reads ("Agent-ID") to Go's canonical form ("Agent-Id"), so the
// hot path does not canonicalize (and allocate) the same names per
// request.
var canonicalKeys = func() map[string]string {
	m := map[string]string{}
	for _, n := range append([]string{"Authority-Scope", "Traceparent", "Signature", "Signature-Input", "Content-Digest", "Content-Type", "Content-Encoding"}, SingleValued...) {
		m[n] = http.CanonicalHeaderKey(n)
	}
	return m
}()

// CanonicalKey returns name in Go's canonical header form.
func CanonicalKey(name string) string {
	if k, ok := canonicalKeys[name]; ok {
		return k
	}
	return http.CanonicalHeaderKey(name)
}
