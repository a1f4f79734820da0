package caddymodule

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
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
// the agent documents at Provision.
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

// checkAuthority refuses a signature_authorities entry that is not an
// RFC 9110 authority as a request's Host carries it: a host name or
// IPv4 address (letters, digits, "-", ".", "_", "~") or a bracketed
// IPv6 literal, then an optional ":port" (1-65535). A URL, a path, user
// information or a wildcard never equals a request's @authority.
func checkAuthority(a string) error {
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

// verificationPath is the Verification-Path response header of an
// identified caller: how the identity mode established it (spec §4).
func verificationPath(mode string) string {
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
func (h *engine) verifyIdentity(x *exchange, req *request) *agtp.Error {
	return h.verifyTransport(x.in, req.raw, x.agentID)
}

// verifyTransport proves agentID on the request in (read through
// httpView: method, target, Host, header fields, TLS state) with body,
// its body read to the end, in the configured verified mode: the one
// verification every door shares (the HTTP binding per AGTP request,
// the MCP door per HTTP request to its path). It returns a 401 wire
// error with a distinct reason, or nil; in identity header mode it
// checks nothing.
func (h *engine) verifyTransport(in *agtp.Request, body []byte, agentID string) *agtp.Error {
	switch h.Identity {
	case IdentityMTLS:
		if in.TLS == nil || len(in.TLS.PeerCertificates) == 0 {
			return agtp.CertificateRequired.New("identity mtls: an AGTP request must present a client certificate")
		}
		sum := sha256.Sum256(in.TLS.PeerCertificates[0].RawSubjectPublicKeyInfo)
		owner, ok := h.idents.spki[hex.EncodeToString(sum[:])]
		if !ok {
			return agtp.CertificateUnknown.New("identity mtls: the client certificate's key is not bound to any agent")
		}
		if owner != agentID {
			return agtp.CertificateMismatch.New("identity mtls: the client certificate is bound to another Agent-ID")
		}
	case IdentitySignature:
		res, err := httpsig.Verify(httpView(in), func(keyID string) (string, crypto.PublicKey, string, bool) {
			k, ok := h.idents.keys[keyID]
			return k.alg, k.pub, k.owner, ok
		}, httpsig.VerifyOptions{
			MaxAge: time.Duration(h.SignatureMaxAge), Skew: time.Duration(h.SignatureSkew),
			Authorities: h.SignatureAuthorities,
			Body:        body, ExpectOwner: agentID,
		})
		if err != nil {
			var se *httpsig.Error
			if errors.As(err, &se) {
				return &agtp.Error{Status: 401, Reason: se.Reason, Explanation: "identity signature: " + se.Detail}
			}
			return agtp.SignatureInvalid.New("identity signature: " + err.Error())
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
			return storeUnavailable()
		}
		if seen {
			return &agtp.Error{Status: 401, Reason: httpsig.ReasonSignatureReplayed, Explanation: "identity signature: the signature was already used"}
		}
		// The key's owner was checked against Agent-ID (ExpectOwner).
	}
	return nil
}
