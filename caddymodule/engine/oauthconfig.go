package engine

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/secureurl"
	"github.com/caddy-rcns/caddy-rcns/policy"
)

// IdentityOAuth verifies an OAuth 2.1 bearer access token (RFC 6750,
// RFC 9068 JWTs against the issuer's JWKS, RFC 7662 introspection for
// opaque tokens) and maps its client to an agent (OAuthConfig).
const IdentityOAuth = "oauth"

// identityModes are the modes an identity list may name, in the order
// their verifiers are asked: the credential-bearing ones first, header
// (which claims every loopback request) last.
var identityModes = []string{IdentityOAuth, IdentitySignature, IdentityMTLS, IdentityHeader}

// ParseIdentityModes splits an identity setting ("signature oauth",
// "signature, oauth" or one mode) into its modes, in the order their
// verifiers are asked (identityModes), and refuses an unknown or
// repeated mode. "" is header.
func ParseIdentityModes(s string) ([]string, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' })
	if len(fields) == 0 {
		return []string{IdentityHeader}, nil
	}
	seen := map[string]bool{}
	for _, f := range fields {
		if !slices.Contains(identityModes, f) {
			return nil, fmt.Errorf("identity mode %q is not supported (header, mtls, signature, oauth)", f)
		}
		if seen[f] {
			return nil, fmt.Errorf("identity mode %q is named twice", f)
		}
		seen[f] = true
	}
	out := make([]string, 0, len(fields))
	for _, m := range identityModes {
		if seen[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

// HasIdentityMode reports whether the identity setting s names mode.
func HasIdentityMode(s, mode string) bool {
	modes, err := ParseIdentityModes(s)
	return err == nil && slices.Contains(modes, mode)
}

// OAuthConfig is identity oauth: this gateway as an OAuth 2.1 resource
// server (RFC 6750, RFC 8707, RFC 9068, RFC 9728; the MCP 2026-07-28
// authorization rules) trusting one authorization server. A token's
// client (client_id, else azp) names the agent whose document lists it
// in oauth_clients; its sub is the request's Owner-ID; its scopes,
// mapped by Scopes, bound the agent's grants (docs/operator-guide.md
// "OAuth").
type OAuthConfig struct {
	// Issuer is the authorization server's issuer identifier (an https
	// URL, or http on a loopback host). Its metadata is read by RFC 8414
	// discovery (/.well-known/oauth-authorization-server, then OpenID
	// Connect's /.well-known/openid-configuration) on first use.
	// Required.
	Issuer string `json:"issuer"`

	// Resource is this gateway's resource identifier (RFC 8707, RFC 9728
	// §2): the audience every token must carry, and the resource of the
	// protected-resource metadata. Name the origin the agents reach
	// ("https://gateway.example.com"), so one token serves the HTTP
	// binding, the native door and MCP. Required.
	Resource string `json:"resource"`

	// JWKSURI overrides the discovered jwks_uri (for an issuer whose
	// metadata cannot be read). Optional.
	JWKSURI string `json:"jwks_uri,omitempty"`

	// IntrospectionEndpoint overrides the discovered
	// introspection_endpoint (RFC 7662). Opaque (non-JWT) tokens are
	// introspected there, with ClientID and ClientSecret as HTTP Basic
	// credentials; with neither an endpoint nor credentials, opaque
	// tokens are refused (token-invalid).
	IntrospectionEndpoint string `json:"introspection_endpoint,omitempty"`

	// ClientID and ClientSecret are the gateway's own credentials at the
	// authorization server, for introspection. Optional.
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`

	// Algorithms are the JWS algorithms accepted on JWT access tokens.
	// Default RS256, PS256, ES256, EdDSA. Only asymmetric algorithms are
	// allowed: "none" and HMAC (HS256…) are refused at load.
	Algorithms []string `json:"algorithms,omitempty"`

	// ClockSkew is the leeway on exp, nbf and iat. Default 60s; at most
	// 5m.
	ClockSkew Duration `json:"clock_skew,omitempty"`

	// AllowNoExpiry accepts tokens without exp. Default false: such a
	// token is refused (token-invalid).
	AllowNoExpiry bool `json:"allow_no_expiry,omitempty"`

	// RequireATJWT accepts only JWTs typed as access tokens: a typ
	// header of at+jwt or application/at+jwt (RFC 9068 §4). Default
	// false, for issuers that type their access tokens JWT or not at all
	// (Keycloak, Entra ID): then a JWT explicitly typed as another kind
	// (a typ ending in +jwt but not in at+jwt: logout+jwt, secevent+jwt,
	// dpop+jwt, this gateway's own rcns-assertion+jwt) is still refused
	// (RFC 8725 §3.11), and a typ that is not a string always is.
	RequireATJWT bool `json:"require_at_jwt,omitempty"`

	// Scopes maps an OAuth scope to the AGTP scope tokens it grants
	// ("hotel.book": ["hotel:book"]). An OAuth scope the map does not
	// name grants itself when it is an AGTP scope token ("hotel:book"),
	// and nothing otherwise. The map's keys are the protected-resource
	// metadata's scopes_supported.
	Scopes map[string][]string `json:"scopes,omitempty"`

	// UnnamedClients names the agent (by name or Agent-ID) that a token
	// from a client no agent document lists acts as: dynamically
	// registered and metadata-document clients. Give it a low trust
	// tier and few scopes. Default "": such tokens are refused
	// (oauth-client-unknown).
	UnnamedClients string `json:"unnamed_clients,omitempty"`

	// JWKSMaxAge is how long a fetched JWKS is used before it is fetched
	// again. Default 1h.
	JWKSMaxAge Duration `json:"jwks_max_age,omitempty"`

	// JWKSMinRefresh bounds how often a token signed by an unknown key
	// (kid) makes the gateway fetch the JWKS again: once per this
	// interval at most, so a flood of made-up kids costs the issuer one
	// fetch per interval. Default 10s.
	JWKSMinRefresh Duration `json:"jwks_min_refresh,omitempty"`

	// IntrospectionCacheTTL bounds how long an introspection answer is
	// reused (never past the token's exp). Default 60s; 0 after defaults
	// is not possible: set a small value (1ms) to almost disable it.
	IntrospectionCacheTTL Duration `json:"introspection_cache_ttl,omitempty"`

	// IntrospectionCacheSize bounds the cached introspection answers
	// (entries). Default 100000.
	IntrospectionCacheSize int `json:"introspection_cache_size,omitempty"`

	// Timeout bounds each call to the authorization server (metadata,
	// JWKS, introspection). Default 5s.
	Timeout Duration `json:"timeout,omitempty"`

	// scopeMap is Scopes parsed (Validate).
	scopeMap map[string]policy.ScopeSet
}

// OAuth defaults and bounds.
const (
	defaultOAuthSkew        = Duration(60 * time.Second)
	maxOAuthSkew            = Duration(5 * time.Minute)
	defaultJWKSMaxAge       = Duration(time.Hour)
	defaultJWKSMinRefresh   = Duration(10 * time.Second)
	defaultIntrospectionTTL = Duration(60 * time.Second)
	defaultIntrospectionMax = 100000
	defaultOAuthTimeout     = Duration(5 * time.Second)
)

// defaultOAuthAlgorithms are the JWS algorithms accepted by default.
var defaultOAuthAlgorithms = []string{"RS256", "PS256", "ES256", "EdDSA"}

// asymmetricAlgorithms are the algorithms Algorithms may name.
var asymmetricAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// setDefaults fills the unset knobs.
func (c *OAuthConfig) setDefaults() {
	if len(c.Algorithms) == 0 {
		c.Algorithms = defaultOAuthAlgorithms
	}
	c.ClockSkew = cmp.Or(c.ClockSkew, defaultOAuthSkew)
	c.JWKSMaxAge = cmp.Or(c.JWKSMaxAge, defaultJWKSMaxAge)
	c.JWKSMinRefresh = cmp.Or(c.JWKSMinRefresh, defaultJWKSMinRefresh)
	c.IntrospectionCacheTTL = cmp.Or(c.IntrospectionCacheTTL, defaultIntrospectionTTL)
	c.IntrospectionCacheSize = cmp.Or(c.IntrospectionCacheSize, defaultIntrospectionMax)
	c.Timeout = cmp.Or(c.Timeout, defaultOAuthTimeout)
}

// validate checks the configuration after setDefaults; errors name the
// knob (rcns: oauth.…).
func (c *OAuthConfig) validate() error {
	if c.Issuer == "" {
		return errors.New("rcns: identity oauth needs oauth.issuer (the authorization server's issuer URL)")
	}
	if err := secureurl.CheckIssuer(c.Issuer); err != nil {
		return fmt.Errorf("rcns: oauth.issuer %q %v", secureurl.Redacted(c.Issuer), err)
	}
	if c.Resource == "" {
		return errors.New("rcns: identity oauth needs oauth.resource (this gateway's resource identifier, the audience its tokens carry, such as https://gateway.example.com)")
	}
	if u, err := url.Parse(c.Resource); err != nil || u.Scheme == "" || u.Host == "" || u.Fragment != "" {
		return fmt.Errorf("rcns: oauth.resource %q must be an absolute URL without a fragment (RFC 8707 §2)", c.Resource)
	}
	for _, k := range []struct{ name, v string }{{"jwks_uri", c.JWKSURI}, {"introspection_endpoint", c.IntrospectionEndpoint}} {
		if k.v == "" {
			continue
		}
		if err := secureurl.Check(k.v); err != nil {
			return fmt.Errorf("rcns: oauth.%s %q %v", k.name, secureurl.Redacted(k.v), err)
		}
	}
	if (c.ClientID == "") != (c.ClientSecret == "") {
		return errors.New("rcns: oauth.client_id and oauth.client_secret go together (the gateway's credentials for introspection)")
	}
	for _, a := range c.Algorithms {
		if !slices.Contains(asymmetricAlgorithms, a) {
			return fmt.Errorf("rcns: oauth.algorithms: %q is not accepted (%s; never none or HMAC)", a, strings.Join(asymmetricAlgorithms, ", "))
		}
	}
	if c.ClockSkew < 0 || c.ClockSkew > maxOAuthSkew {
		return fmt.Errorf("rcns: oauth.clock_skew must be between 0 and %s, not %s", time.Duration(maxOAuthSkew), time.Duration(c.ClockSkew))
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"jwks_max_age", c.JWKSMaxAge}, {"jwks_min_refresh", c.JWKSMinRefresh}, {"introspection_cache_ttl", c.IntrospectionCacheTTL}, {"timeout", c.Timeout}} {
		if d.v <= 0 {
			return fmt.Errorf("rcns: oauth.%s must be positive, not %s", d.name, time.Duration(d.v))
		}
	}
	if c.IntrospectionCacheSize < 0 {
		return fmt.Errorf("rcns: oauth.introspection_cache_size must be positive, not %d", c.IntrospectionCacheSize)
	}
	c.scopeMap = make(map[string]policy.ScopeSet, len(c.Scopes))
	for k, v := range c.Scopes {
		if k == "" || strings.ContainsAny(k, " \"\\") {
			return fmt.Errorf("rcns: oauth.scopes: %q is not an OAuth scope token (RFC 6749 §3.3: no spaces, quotes or backslashes)", k)
		}
		set, err := policy.ParseScopes(v)
		if err != nil {
			return fmt.Errorf("rcns: oauth.scopes[%q]: %v", k, err)
		}
		c.scopeMap[k] = set
	}
	return nil
}

// agtpScopes maps the OAuth scopes of a token to AGTP scope tokens
// (Scopes; unmapped AGTP-shaped scopes grant themselves).
func (c *OAuthConfig) agtpScopes(oauth []string) policy.ScopeSet {
	var out policy.ScopeSet
	for _, s := range oauth {
		if set, ok := c.scopeMap[s]; ok {
			out = append(out, set...)
			continue
		}
		if sc, err := policy.ParseScope(s); err == nil {
			out = append(out, sc)
		}
	}
	return out
}

// oauthScopesFor names, for each AGTP scope in required, an OAuth scope
// that grants it (the map's first, sorted, else the token itself): the
// scope parameter of an insufficient_scope challenge.
func (c *OAuthConfig) oauthScopesFor(required []string) []string {
	keys := make([]string, 0, len(c.scopeMap))
	for k := range c.scopeMap {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, r := range required {
		sc, err := policy.ParseScope(r)
		if err != nil {
			continue
		}
		name := r
		for _, k := range keys {
			if c.scopeMap[k].Covers(sc) {
				name = k
				break
			}
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// ScopesSupported is the protected-resource metadata's scopes_supported
// (RFC 9728 §2): the OAuth scopes Scopes maps, sorted.
func (c *OAuthConfig) ScopesSupported() []string {
	keys := make([]string, 0, len(c.Scopes))
	for k := range c.Scopes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
