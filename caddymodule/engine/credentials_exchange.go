package engine

import (
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/net/http/httpguts"
)

// The credential policies of RFC 8693 token exchange and of identity
// assertions (CredentialsConfig.Policy).
const (
	// CredentialsTokenExchange: a token exchanged for the caller's
	// verified OAuth access token at the upstream's authorization server
	// (RFC 8693), with the upstream as audience.
	CredentialsTokenExchange = "token_exchange"
	// CredentialsAssertion: a short-lived JWT the gateway signs, naming
	// agent, owner, contract and request, with the upstream as audience.
	CredentialsAssertion = "assertion"
)

// TokenExchangeCredentials configures the token_exchange policy
// (docs/configuration.md "Upstream credentials").
type TokenExchangeCredentials struct {
	// Issuer is the upstream's authorization server; its token endpoint
	// is read from its metadata (RFC 8414, then OpenID Connect
	// discovery) on first use, unless TokenEndpoint is set.
	Issuer string `json:"issuer,omitempty"`
	// TokenEndpoint is the token endpoint URL (skips discovery).
	TokenEndpoint string `json:"token_endpoint,omitempty"`
	// ClientID and ClientSecret are the gateway's own client at that
	// server (client_secret_basic). The secret may be a Caddy
	// placeholder ({env.NAME}, {file.PATH}), replaced at load.
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	// Resource is the resource parameter (RFC 8707), Audience the
	// audience parameter (RFC 8693 §2.1). Neither set: resource is the
	// upstream's URL.
	Resource string `json:"resource,omitempty"`
	Audience string `json:"audience,omitempty"`
	// Scopes, when set, are asked for every call; otherwise the scopes
	// asked are the step endpoint's required_scopes.
	Scopes []string `json:"scopes,omitempty"`
	// Header carries the exchanged token: Authorization (default, as
	// "Bearer <token>"), or another header with the token alone.
	Header string `json:"header,omitempty"`
	// Margin is taken off the token's expires_in before it is cached
	// (default 10s).
	Margin Duration `json:"margin,omitempty"`
	// Timeout bounds one request to the authorization server (default
	// 10s).
	Timeout Duration `json:"timeout,omitempty"`
	// CacheSize is the number of exchanged tokens kept (default 10000).
	CacheSize int `json:"cache_size,omitempty"`
}

// AssertionCredentials configures the assertion policy
// (docs/configuration.md "Upstream credentials").
type AssertionCredentials struct {
	// Issuer is the iss claim, the gateway's identifier as the upstream
	// knows it (e.g. https://gateway.example); default the oauth
	// block's resource, else required.
	Issuer string `json:"issuer,omitempty"`
	// Audience is the aud claim (default the upstream's URL).
	Audience string `json:"audience,omitempty"`
	// TTL is the assertion's lifetime (default 60s, at most 10m).
	TTL Duration `json:"ttl,omitempty"`
	// Header carries the assertion: Authorization (default, as
	// "Bearer <jwt>"), or another header with the JWT alone.
	Header string `json:"header,omitempty"`
	// Keys are PKCS#8 PEM files of Ed25519 (EdDSA) or P-256 (ES256)
	// private keys: the first signs, all are published at
	// /.well-known/rcns/upstream-jwks.json. None: one Ed25519 key made
	// when the process starts (one node only: each node would make its
	// own).
	Keys []string `json:"keys,omitempty"`
}

// newCredentialPolicyFor builds upstream name's policy: token_exchange
// and assertion here, the others by newCredentialPolicy. A knob of
// another policy is refused.
func newCredentialPolicyFor(name string, uc *UpstreamConfig, oauthResource string) (upstreamauth.Policy, error) {
	cc := uc.Credentials
	if cc == nil {
		return newCredentialPolicy(name, cc)
	}
	switch cc.Policy {
	case CredentialsTokenExchange, CredentialsAssertion:
		if len(cc.Header) > 0 || cc.Dir != "" || cc.File != "" {
			return nil, fmt.Errorf("upstream %s: credentials %s takes no header, dir or file (its own block's header names the header it sets)", name, cc.Policy)
		}
		if cc.Policy == CredentialsTokenExchange {
			if cc.Assertion != nil {
				return nil, fmt.Errorf("upstream %s: credentials token_exchange: an assertion block is given too", name)
			}
			return newExchangePolicy(name, uc.URL, cc.TokenExchange)
		}
		if cc.TokenExchange != nil {
			return nil, fmt.Errorf("upstream %s: credentials assertion: a token_exchange block is given too", name)
		}
		return newAssertionPolicy(name, uc.URL, oauthResource, cc.Assertion)
	}
	if cc.TokenExchange != nil || cc.Assertion != nil {
		return nil, fmt.Errorf("upstream %s: credentials %s takes no token_exchange or assertion block", name, cc.Policy)
	}
	return newCredentialPolicy(name, cc)
}

// newExchangePolicy builds upstream name's token_exchange policy.
func newExchangePolicy(name, upstreamURL string, c *TokenExchangeCredentials) (upstreamauth.Policy, error) {
	if c == nil {
		return nil, fmt.Errorf("upstream %s: credentials token_exchange needs its block (issuer, client_id, client_secret)", name)
	}
	if c.Header != "" && !httpguts.ValidHeaderFieldName(c.Header) {
		return nil, fmt.Errorf("upstream %s: credentials token_exchange: header %q is not a header name", name, c.Header)
	}
	res := c.Resource
	if res == "" && c.Audience == "" {
		res = upstreamURL
	}
	return upstreamauth.NewTokenExchange(upstreamauth.TokenExchangeConfig{
		Upstream: name, Issuer: c.Issuer, TokenEndpoint: c.TokenEndpoint,
		ClientID: c.ClientID, ClientSecret: c.ClientSecret,
		Resource: res, Audience: c.Audience, Scopes: c.Scopes, Header: c.Header,
		Margin: time.Duration(c.Margin), Timeout: time.Duration(c.Timeout), CacheSize: c.CacheSize,
	})
}

// newAssertionPolicy builds upstream name's assertion policy;
// defaultIssuer is the oauth block's resource ("" without one).
func newAssertionPolicy(name, upstreamURL, defaultIssuer string, c *AssertionCredentials) (upstreamauth.Policy, error) {
	if c == nil {
		c = &AssertionCredentials{}
	}
	if c.Header != "" && !httpguts.ValidHeaderFieldName(c.Header) {
		return nil, fmt.Errorf("upstream %s: credentials assertion: header %q is not a header name", name, c.Header)
	}
	var keys *upstreamauth.AssertionKeys
	var err error
	if len(c.Keys) > 0 {
		keys, err = upstreamauth.LoadAssertionKeys(c.Keys)
	} else {
		keys, err = upstreamauth.GeneratedAssertionKeys()
	}
	if err != nil {
		return nil, fmt.Errorf("upstream %s: credentials assertion: %v", name, err)
	}
	iss := c.Issuer
	if iss == "" {
		iss = defaultIssuer
	}
	aud := c.Audience
	if aud == "" {
		aud = upstreamURL
	}
	return upstreamauth.NewAssertion(upstreamauth.AssertionConfig{Upstream: name, Issuer: iss, Audience: aud,
		TTL: time.Duration(c.TTL), Header: c.Header, Keys: keys})
}

// UpstreamJWKS is the key set published at upstreamauth.JWKSPath: the
// public keys of every upstream's assertion policy; ok false when no
// upstream uses assertions (the route is then not served).
func (h *Engine) UpstreamJWKS() (jose.JSONWebKeySet, bool) {
	names := make([]string, 0, len(h.credPolicies))
	for n := range h.credPolicies {
		names = append(names, n)
	}
	sort.Strings(names)
	var sets []*upstreamauth.AssertionKeys
	for _, n := range names {
		if a, ok := h.credPolicies[n].(*upstreamauth.Assertion); ok {
			sets = append(sets, a.Keys())
		}
	}
	if len(sets) == 0 {
		return jose.JSONWebKeySet{}, false
	}
	return upstreamauth.JWKS(sets...), true
}

// ServeUpstreamJWKS answers upstreamauth.JWKSPath; false when no
// upstream uses assertions (the caller passes the request on).
func (h *Engine) ServeUpstreamJWKS(w http.ResponseWriter, r *http.Request) bool {
	set, ok := h.UpstreamJWKS()
	if !ok {
		return false
	}
	upstreamauth.ServeJWKS(w, r, set)
	return true
}

// closeCredentialPolicies releases what policies hold (token exchange
// caches).
func closeCredentialPolicies(ps map[string]upstreamauth.Policy) {
	for _, p := range ps {
		if c, ok := p.(interface{ Close() }); ok {
			c.Close()
		}
	}
}
