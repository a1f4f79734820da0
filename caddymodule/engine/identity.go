package engine

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"go.uber.org/zap"
)

// Verified identity modes (ARCHITECTURE.md "Identity").
const (
	// IdentityMTLS binds Agent-ID to the SHA-256 of the client
	// certificate's SubjectPublicKeyInfo.
	IdentityMTLS = "mtls"
	// IdentitySignature verifies RFC 9421 HTTP Message Signatures.
	IdentitySignature = "signature"
)

type keyEntry struct {
	alg   string
	pub   crypto.PublicKey
	owner string
}

// identities holds what the verified modes check against, built from
// the agent documents in New.
type identities struct {
	spki    map[string]string   // SPKI SHA-256 hex → Agent-ID
	keys    map[string]keyEntry // RFC 7638 thumbprint → key
	clients map[string]string   // OAuth client_id → Agent-ID
	unnamed string              // the Agent-ID of clients no document lists ("" refuses them)
}

// buildIdentities indexes the agents' certificates and keys and, for a
// verified mode, refuses agents that lack what the mode needs.
func buildIdentities(modes string, oauth *OAuthConfig, docs []*schema.Document, ads []schema.AgentDoc) (*identities, error) {
	id := &identities{spki: map[string]string{}, keys: map[string]keyEntry{}, clients: map[string]string{}}
	for i, a := range ads {
		d := docs[i]
		for j, c := range a.OAuthClients {
			if prev, dup := id.clients[c]; dup && prev != a.AgentID {
				return nil, d.Errorf(fmt.Sprintf("/oauth_clients/%d", j), "OAuth client %q is already listed by agent %s", c, prev)
			}
			id.clients[c] = a.AgentID
		}
		if oauth != nil && oauth.UnnamedClients != "" && (a.Name == oauth.UnnamedClients || a.AgentID == oauth.UnnamedClients) {
			id.unnamed = a.AgentID
		}
		for j, c := range a.Certificates {
			if prev, dup := id.spki[c]; dup && prev != a.AgentID {
				return nil, d.Errorf(fmt.Sprintf("/certificates/%d", j), "certificate key is already bound to agent %s", prev)
			}
			id.spki[c] = a.AgentID
		}
		for j, k := range a.Keys {
			pub, err := httpsig.PublicKeyFromJWK(k)
			if err != nil {
				return nil, d.Errorf(fmt.Sprintf("/keys/%d", j), "%v", err)
			}
			alg, err := httpsig.Algorithm(pub)
			if err != nil {
				return nil, d.Errorf(fmt.Sprintf("/keys/%d", j), "%v", err)
			}
			tp, err := httpsig.Thumbprint(pub)
			if err != nil {
				return nil, d.Errorf(fmt.Sprintf("/keys/%d", j), "%v", err)
			}
			if prev, dup := id.keys[tp]; dup && prev.owner != a.AgentID {
				return nil, d.Errorf(fmt.Sprintf("/keys/%d", j), "key %s is already registered to agent %s", tp, prev.owner)
			}
			id.keys[tp] = keyEntry{alg: alg, pub: pub, owner: a.AgentID}
		}
		// A one-mode configuration needs every agent to carry that
		// mode's credential; in a list, each agent carries one of them.
		switch {
		case modes == IdentityMTLS && len(a.Certificates) == 0:
			return nil, d.Errorf("", "identity mtls needs certificates (SPKI SHA-256) for agent %s", a.Name)
		case modes == IdentitySignature && len(a.Keys) == 0:
			return nil, d.Errorf("", "identity signature needs keys (public JWKs) for agent %s", a.Name)
		}
	}
	if oauth != nil && oauth.UnnamedClients != "" && id.unnamed == "" {
		return nil, fmt.Errorf("oauth.unnamed_clients names %q, which no agent document names (by name or agent_id)", oauth.UnnamedClients)
	}
	return id, nil
}

// CheckAuthority refuses a signature_authorities entry that is not an
// RFC 9110 authority as a request's Host carries it: a host name or
// IPv4 address (letters, digits, "-", ".", "_", "~") or a bracketed
// IPv6 literal, then an optional ":port" (1-65535). A URL, a path, user
// information or a wildcard never equals a request's @authority.
func CheckAuthority(a string) error {
	if strings.ContainsAny(a, "/?#@") {
		return errors.New("is not host[:port]: give the Host a request carries, without scheme, user information or path")
	}
	host, port := a, ""
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return errors.New("is not host[:port]: the IPv6 literal has no closing ]")
		}
		if lit := a[1:end]; !strings.Contains(lit, ":") || net.ParseIP(lit) == nil {
			return errors.New("is not host[:port]: the bracketed host is not an IPv6 address")
		}
		host, port = a[:end+1], a[end+1:]
		if port != "" && port[0] != ':' {
			return errors.New("is not host[:port]: text after the IPv6 literal")
		}
	} else if strings.Count(a, ":") > 1 {
		return errors.New("is not host[:port]: write an IPv6 address in brackets ([::1] or [::1]:8080)")
	} else if i := strings.LastIndexByte(a, ':'); i >= 0 {
		host, port = a[:i], a[i:]
	}
	if port != "" {
		digits := port[1:]
		n, err := strconv.Atoi(digits)
		if err != nil || strings.Trim(digits, "0123456789") != "" || n < 1 || n > 65535 {
			return errors.New("is not host[:port]: the port must be 1-65535")
		}
	}
	if host == "" {
		return errors.New("is not host[:port]: the host is empty")
	}
	if host[0] != '[' {
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
				if c == '*' {
					return errors.New("is not host[:port]: wildcards are not supported; list each host name")
				}
				// Named as the whole UTF-8 character, or as a byte when
				// it starts none (string(c) would read it as Latin-1).
				return fmt.Errorf("is not host[:port]: the %s is not allowed in a host name", policy.DescribeChar(host, i))
			}
		}
	}
	return nil
}

// VerificationPath is the Verification-Path response header of an
// identified caller: how the identity mode established it (spec §4).
func VerificationPath(mode string) string {
	switch mode {
	case IdentityMTLS, IdentitySignature, IdentityOAuth:
		return mode
	}
	return IdentityHeader
}

// assurance is the identity_assurance recorded for requests verified by
// mode.
func assurance(mode string) string {
	switch mode {
	case IdentityMTLS, IdentitySignature, IdentityOAuth:
		return mode
	}
	return "unverified"
}

// verdict is what one identity verifier answers for a request.
type verdict int

const (
	// notMine: the request carries no credential of this verifier's
	// kind; another verifier may verify it.
	notMine verdict = iota
	// verifiedAs: the credential proves the claimed Agent-ID.
	verifiedAs
	// refused: the request carries this verifier's kind of credential
	// and it fails; no other verifier is asked.
	refused
)

// verifier is one identity mode of the engine's identity step (spec
// §10 step 6, ARCHITECTURE.md "Identity"): header (on loopback), mtls,
// signature or oauth, each proving an agent its own way. A refusal is a
// wire error with a distinct reason (401; 503 store-unavailable when the
// signature replay cache, 503 issuer-unavailable when the authorization
// server cannot be reached).
type verifier interface {
	// mode names the verifier: IdentityHeader, IdentityMTLS,
	// IdentitySignature or IdentityOAuth (Verification-Path,
	// identity_assurance).
	mode() string
	// verify answers for agentID ("" when the request names none),
	// claimed by in (its body read to the end): verifiedAs and the
	// identity; refused and why; or notMine and the refusal to give if
	// no other verifier claims the request.
	verify(in *agtp.Request, body []byte, agentID string) (verdict, *agtp.Identity, *agtp.Error)
}

// verifiers builds the identity step of the configured modes, in the
// order ParseIdentityModes gives them (credential-bearing first,
// header last).
func (h *Engine) verifiers() []verifier {
	modes, err := ParseIdentityModes(h.Identity)
	if err != nil { // refused by Validate
		return nil
	}
	h.trustsHeader = slices.Contains(modes, IdentityHeader)
	out := make([]verifier, 0, len(modes))
	for _, m := range modes {
		switch m {
		case IdentityOAuth:
			out = append(out, h.oauth)
		case IdentitySignature:
			out = append(out, claimedOnly{signatureVerifier{h: h}})
		case IdentityMTLS:
			out = append(out, claimedOnly{mtlsVerifier{spki: h.idents.spki}})
		default:
			out = append(out, claimedOnly{headerVerifier{}})
		}
	}
	return out
}

// TrustsHeader reports whether the identity modes name header: a door
// then tells the engine whether each request reached a loopback address
// (agtp.Request.Loopback), which is what header trusts.
func (h *Engine) TrustsHeader() bool { return h.trustsHeader }

// claimedOnly is a verifier that proves a claimed Agent-ID (header,
// mtls, signature): a request that names none is not its to verify.
type claimedOnly struct{ verifier }

func (c claimedOnly) verify(in *agtp.Request, body []byte, agentID string) (verdict, *agtp.Identity, *agtp.Error) {
	if agentID == "" {
		return notMine, nil, agtp.AgentUnauthenticated.New("this request needs an Agent-ID header")
	}
	return c.verifier.verify(in, body, agentID)
}

// VerifyTransport proves who sent the request in (read through
// httpView: method, target, Host, header fields, TLS state, whether it
// reached a loopback address) with body, its body read to the end: the
// one identity step every door shares (the HTTP binding and the native
// door per AGTP request, the MCP door per HTTP request to its path).
// agentID is the Agent-ID the request claims ("" when none: only a
// bearer token then names the agent). Every verifier is asked: a
// refusal decides; two that verify different agents are refused
// (identity-conflict); else the first that verified gives the identity.
// When none claims the request, the first one's refusal is the answer.
// An engine with no verifier (not provisioned) verifies nobody.
func (h *Engine) VerifyTransport(in *agtp.Request, body []byte, agentID string) (*agtp.Identity, *agtp.Error) {
	var first *agtp.Error
	var got *agtp.Identity
	for i, v := range h.idSteps {
		vd, id, e := v.verify(in, body, agentID)
		switch vd {
		case verifiedAs:
			if got == nil {
				got = id
			} else if got.AgentID != id.AgentID {
				return nil, agtp.IdentityConflict.New("the request carries credentials of two different agents (" + got.VerificationPath + " and " + id.VerificationPath + "); send one")
			}
		case refused:
			return nil, e
		default:
			if i == 0 {
				first = e
			}
		}
	}
	if got != nil {
		return got, nil
	}
	if first == nil {
		first = agtp.AgentUnauthenticated.New("no identity mode verified the Agent-ID")
	}
	return nil, first
}

// headerVerifier is identity header: the Agent-ID header is the
// identity, on a loopback address only.
type headerVerifier struct{}

func (headerVerifier) mode() string { return IdentityHeader }

func (headerVerifier) verify(in *agtp.Request, _ []byte, agentID string) (verdict, *agtp.Identity, *agtp.Error) {
	if in.Loopback {
		return verifiedAs, &agtp.Identity{AgentID: agentID, VerificationPath: IdentityHeader}, nil
	}
	return notMine, nil, agtp.IdentityModeRefused.New("this gateway trusts the Agent-ID header only on loopback; configure a verified identity mode")
}

// mtlsVerifier is identity mtls: the SHA-256 of the client
// certificate's SubjectPublicKeyInfo, bound to one agent (spki: hex →
// Agent-ID).
type mtlsVerifier struct{ spki map[string]string }

func (mtlsVerifier) mode() string { return IdentityMTLS }

func (v mtlsVerifier) verify(in *agtp.Request, _ []byte, agentID string) (verdict, *agtp.Identity, *agtp.Error) {
	if in.TLS == nil || len(in.TLS.PeerCertificates) == 0 {
		return notMine, nil, agtp.CertificateRequired.New("identity mtls: an AGTP request must present a client certificate")
	}
	sum := sha256.Sum256(in.TLS.PeerCertificates[0].RawSubjectPublicKeyInfo)
	owner, ok := v.spki[hex.EncodeToString(sum[:])]
	if !ok {
		return refused, nil, agtp.CertificateUnknown.New("identity mtls: the client certificate's key is not bound to any agent")
	}
	if owner != agentID {
		return refused, nil, agtp.CertificateMismatch.New("identity mtls: the client certificate is bound to another Agent-ID")
	}
	return verifiedAs, &agtp.Identity{AgentID: agentID, VerificationPath: IdentityMTLS}, nil
}

// signatureVerifier is identity signature: RFC 9421 with the agents'
// registered keys, each signature accepted once on every node (the
// store's replay cache).
type signatureVerifier struct{ h *Engine }

func (signatureVerifier) mode() string { return IdentitySignature }

func (v signatureVerifier) verify(in *agtp.Request, body []byte, agentID string) (verdict, *agtp.Identity, *agtp.Error) {
	h := v.h
	res, err := httpsig.Verify(httpView(in), func(keyID string) (string, crypto.PublicKey, string, bool) {
		k, ok := h.idents.keys[keyID]
		return k.alg, k.pub, k.owner, ok
	}, httpsig.VerifyOptions{
		MaxAge: time.Duration(h.SignatureMaxAge), Skew: time.Duration(h.SignatureSkew),
		Authorities: h.SignatureAuthorities,
		Body:        body, ExpectOwner: agentID,
	})
	if err != nil {
		outcome := refused
		if len(in.Header["Signature"]) == 0 && len(in.Header["Signature-Input"]) == 0 {
			outcome = notMine // no signature at all: another verifier may claim it
		}
		var se *httpsig.Error
		if errors.As(err, &se) {
			return outcome, nil, &agtp.Error{Status: 401, Reason: se.Reason, Explanation: "identity signature: " + se.Detail}
		}
		return outcome, nil, agtp.SignatureInvalid.New("identity signature: " + err.Error())
	}
	// The replay check, last as in httpsig.Verify, on the shared
	// cache: a signature is accepted once on every node.
	ctx := in.Context
	if ctx == nil {
		ctx = context.Background()
	}
	seen, err := h.sto.Replay.Seen(ctx, agentID, res.Signature, res.Expires)
	if err != nil {
		h.logger.Debug("store unavailable: answering 503 store-unavailable", zap.String("agent_id", agentID), zap.Error(err)) // as storeFailed
		return refused, nil, storeUnavailable()
	}
	if seen {
		return refused, nil, &agtp.Error{Status: 401, Reason: httpsig.ReasonSignatureReplayed, Explanation: "identity signature: the signature was already used"}
	}
	// The key's owner was checked against Agent-ID (ExpectOwner).
	return verifiedAs, &agtp.Identity{AgentID: agentID, VerificationPath: IdentitySignature}, nil
}

// httpView is the request as policy/httpsig reads it for RFC 9421
// derived components: @method, @authority (Host), @path and @query from
// the target, the header fields, and whether it has a body (then
// content-type and content-digest must be covered; the body's bytes go
// to httpsig.VerifyOptions.Body). Every door's request has one.
func httpView(in *agtp.Request) *http.Request {
	r := &http.Request{Method: in.Method, Host: in.Host, Header: in.Header, RequestURI: in.Target, URL: in.URL, TLS: in.TLS,
		ContentLength: in.ContentLength, Body: http.NoBody}
	if in.ContentLength != 0 {
		r.Body = io.NopCloser(strings.NewReader(""))
	}
	if r.URL == nil {
		r.URL = &url.URL{}
	}
	if in.Binding == agtp.BindingNative {
		// @authority drops the scheme's default port: 4480 for agtp and
		// agtps (policy/httpsig), as 80 and 443 for http and https.
		u := *r.URL
		u.Scheme = "agtp"
		if in.TLS != nil {
			u.Scheme = "agtps"
		}
		r.URL = &u
	}
	return r
}

// verificationPath is the Verification-Path of x's answer: the mode
// that verified it (the configured one before the identity step).
func (x *exchange) verificationPath() string {
	if x.ident != nil {
		return VerificationPath(x.ident.VerificationPath)
	}
	return VerificationPath(x.h.Identity)
}

// identityFields are a record's identity members for x: the
// identity_assurance, and for OAuth the issuer and client that vouched
// for the caller (ARCHITECTURE.md "Records").
func (x *exchange) identityFields(rec map[string]any) {
	mode := x.h.Identity
	if x.ident != nil {
		mode = x.ident.VerificationPath
		if x.ident.Issuer != "" {
			rec["identity_issuer"] = x.ident.Issuer
			rec["oauth_client_id"] = x.ident.ClientID
		}
	}
	rec["identity_assurance"] = assurance(mode)
}
