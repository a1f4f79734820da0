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
	spki map[string]string   // SPKI SHA-256 hex → Agent-ID
	keys map[string]keyEntry // RFC 7638 thumbprint → key
}

// buildIdentities indexes the agents' certificates and keys and, for a
// verified mode, refuses agents that lack what the mode needs.
func buildIdentities(mode string, docs []*schema.Document, ads []schema.AgentDoc) (*identities, error) {
	id := &identities{spki: map[string]string{}, keys: map[string]keyEntry{}}
	for i, a := range ads {
		d := docs[i]
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
		switch {
		case mode == IdentityMTLS && len(a.Certificates) == 0:
			return nil, d.Errorf("", "identity mtls needs certificates (SPKI SHA-256) for agent %s", a.Name)
		case mode == IdentitySignature && len(a.Keys) == 0:
			return nil, d.Errorf("", "identity signature needs keys (public JWKs) for agent %s", a.Name)
		}
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
	if mode == IdentityMTLS || mode == IdentitySignature {
		return mode
	}
	return IdentityHeader
}

// assurance is the identity_assurance recorded for requests in mode.
func assurance(mode string) string {
	switch mode {
	case IdentityMTLS, IdentitySignature:
		return mode
	}
	return "unverified"
}

// verifyIdentity proves the request's Agent-ID in the configured mode
// before the registry lookup (spec §3, §21 item 4). It returns a 401
// wire error with a distinct reason, or nil.
func (h *Engine) verifyIdentity(x *exchange, req *request) *agtp.Error {
	return h.VerifyTransport(x.in, req.raw, x.agentID)
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
// §10 step 6, ARCHITECTURE.md "Identity"): header (on loopback), mtls
// or signature, each proving an Agent-ID its own way. A refusal is a
// wire error with a distinct reason (401, or 503 store-unavailable when
// the signature replay cache cannot be reached).
type verifier interface {
	// mode names the verifier: IdentityHeader, IdentityMTLS or
	// IdentitySignature (Verification-Path, identity_assurance).
	mode() string
	// verify answers for agentID, claimed by in (its body read to the
	// end): verifiedAs and nil; refused and why; or notMine and the
	// refusal to give if no other verifier claims the request.
	verify(in *agtp.Request, body []byte, agentID string) (verdict, *agtp.Error)
}

// verifiers builds the identity step of mode (one mode a configuration
// today; the step runs a list so that more modes, OAuth among them, add
// a verifier, not a branch in every door).
func (h *Engine) verifiers() []verifier {
	switch h.Identity {
	case IdentityMTLS:
		return []verifier{mtlsVerifier{spki: h.idents.spki}}
	case IdentitySignature:
		return []verifier{signatureVerifier{h: h}}
	}
	return []verifier{headerVerifier{}}
}

// VerifyTransport proves agentID on the request in (read through
// httpView: method, target, Host, header fields, TLS state, whether it
// reached a loopback address) with body, its body read to the end: the
// one identity step every door shares (the HTTP binding and the native
// door per AGTP request, the MCP door per HTTP request to its path). The
// verifiers are asked in order: the first that verifies or refuses
// decides; when none claims the request, the first one's refusal is
// the answer. An engine with no verifier (not provisioned) verifies
// nobody.
func (h *Engine) VerifyTransport(in *agtp.Request, body []byte, agentID string) *agtp.Error {
	var first *agtp.Error
	for i, v := range h.idSteps {
		switch vd, e := v.verify(in, body, agentID); vd {
		case verifiedAs:
			return nil
		case refused:
			return e
		default:
			if i == 0 {
				first = e
			}
		}
	}
	if first == nil {
		first = agtp.AgentUnauthenticated.New("no identity mode verified the Agent-ID")
	}
	return first
}

// headerVerifier is identity header: the Agent-ID header is the
// identity, on a loopback address only.
type headerVerifier struct{}

func (headerVerifier) mode() string { return IdentityHeader }

func (headerVerifier) verify(in *agtp.Request, _ []byte, _ string) (verdict, *agtp.Error) {
	if in.Loopback {
		return verifiedAs, nil
	}
	return notMine, agtp.IdentityModeRefused.New("this gateway trusts the Agent-ID header only on loopback; configure a verified identity mode")
}

// mtlsVerifier is identity mtls: the SHA-256 of the client
// certificate's SubjectPublicKeyInfo, bound to one agent (spki: hex →
// Agent-ID).
type mtlsVerifier struct{ spki map[string]string }

func (mtlsVerifier) mode() string { return IdentityMTLS }

func (v mtlsVerifier) verify(in *agtp.Request, _ []byte, agentID string) (verdict, *agtp.Error) {
	if in.TLS == nil || len(in.TLS.PeerCertificates) == 0 {
		return notMine, agtp.CertificateRequired.New("identity mtls: an AGTP request must present a client certificate")
	}
	sum := sha256.Sum256(in.TLS.PeerCertificates[0].RawSubjectPublicKeyInfo)
	owner, ok := v.spki[hex.EncodeToString(sum[:])]
	if !ok {
		return refused, agtp.CertificateUnknown.New("identity mtls: the client certificate's key is not bound to any agent")
	}
	if owner != agentID {
		return refused, agtp.CertificateMismatch.New("identity mtls: the client certificate is bound to another Agent-ID")
	}
	return verifiedAs, nil
}

// signatureVerifier is identity signature: RFC 9421 with the agents'
// registered keys, each signature accepted once on every node (the
// store's replay cache).
type signatureVerifier struct{ h *Engine }

func (signatureVerifier) mode() string { return IdentitySignature }

func (v signatureVerifier) verify(in *agtp.Request, body []byte, agentID string) (verdict, *agtp.Error) {
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
			return outcome, &agtp.Error{Status: 401, Reason: se.Reason, Explanation: "identity signature: " + se.Detail}
		}
		return outcome, agtp.SignatureInvalid.New("identity signature: " + err.Error())
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
		return refused, storeUnavailable()
	}
	if seen {
		return refused, &agtp.Error{Status: 401, Reason: httpsig.ReasonSignatureReplayed, Explanation: "identity signature: the signature was already used"}
	}
	// The key's owner was checked against Agent-ID (ExpectOwner).
	return verifiedAs, nil
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
