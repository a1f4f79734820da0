package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/closecache"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/dgraph-io/ristretto/v2"
	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// maxOAuthDocument bounds a metadata, JWKS or introspection answer read
// from the authorization server (bytes).
const maxOAuthDocument = 1 << 20

// issuerRetryAfter is the Retry-After (seconds) of 503
// issuer-unavailable, and how long a failed metadata fetch is
// remembered before the next request tries again.
const issuerRetryAfter = 2

// tokenInfo is what a verified access token says, whichever way it was
// verified (a JWT's claims, an introspection answer).
type tokenInfo struct {
	clientID string
	sub      string
	scopes   []string // OAuth scopes
	exp      time.Time
	// kid and alg name the key a JWT verified with: a cached JWT is
	// good only while the issuer's current key set still holds it.
	kid, alg string
}

// oauthVerifier is identity oauth (OAuthConfig): the bearer token of a
// request verified as a JWT against the issuer's JWKS, or introspected
// when opaque, then mapped to an agent.
type oauthVerifier struct {
	h      *Engine
	cfg    *OAuthConfig
	client *http.Client
	// metadataURL is ResourceMetadataURL, computed once.
	metadataURL string
	algs        []jose.SignatureAlgorithm
	now         func() time.Time
	log         *zap.Logger

	flight singleflight.Group
	// refreshing is set while a background refresh of a stale JWKS
	// runs (at most one at a time).
	refreshing atomic.Bool

	mu       sync.Mutex
	meta     *oauthex.AuthServerMeta // discovered; nil until read
	metaErr  error                   // the last discovery failure
	metaTry  time.Time               // when it failed
	keys     *jose.JSONWebKeySet
	keysAt   time.Time // when keys were fetched
	keysTry  time.Time // when a fetch was last started
	keysErr  error     // the last JWKS fetch's failure; nil after a success
	keysFail time.Time // when it failed
	introMem *closecache.Cache[string, *introspected]
}

// introspected is a cached introspection answer: info when active.
type introspected struct {
	active bool
	info   tokenInfo
}

// newOAuthVerifier builds the verifier of cfg (defaults set, validated).
func newOAuthVerifier(h *Engine, cfg *OAuthConfig, log *zap.Logger) (*oauthVerifier, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	v := &oauthVerifier{h: h, cfg: cfg, log: log, now: time.Now, metadataURL: metadataURL(cfg.Resource),
		client: &http.Client{Timeout: time.Duration(cfg.Timeout),
			// The issuer's documents are read where they are; a redirect
			// could lead the gateway anywhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for _, a := range cfg.Algorithms {
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, *introspected]{
		NumCounters: 10 * int64(cfg.IntrospectionCacheSize), MaxCost: int64(cfg.IntrospectionCacheSize),
		BufferItems: 64, IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("rcns: oauth introspection cache: %w", err)
	}
	v.introMem = closecache.New(c)
	return v, nil
}

// close releases the introspection cache: detached and closed once no
// call holds it (closecache), so that a request of the old
// configuration still running does not meet ristretto's Close.
func (v *oauthVerifier) close() { v.introMem.Close() }

func (*oauthVerifier) mode() string { return IdentityOAuth }

// bearer returns the request's bearer token: ok false when it carries
// no Bearer credentials (no Authorization, an empty one, another
// scheme: RFC 6750 §3.1, a 401 challenge without an error code); a
// refusal (400 invalid-authorization, RFC 6750 §3.1 invalid_request)
// when it carries a malformed Bearer credential or several
// Authorization headers. Well formed is "Bearer", 1*SP (RFC 7235 §2.1:
// a tab is no separator), a b64token (RFC 6750 §2.1), nothing after.
func bearer(in *agtp.Request) (string, bool, *agtp.Error) {
	vals := in.Header["Authorization"]
	if len(vals) == 0 {
		return "", false, nil
	}
	v := strings.Trim(vals[0], " \t") // a field value's OWS (RFC 9110 §5.5)
	scheme, rest := v, ""
	if i := strings.IndexAny(v, " \t"); i >= 0 {
		scheme, rest = v[:i], v[i:]
	}
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false, nil // no credentials or another scheme: not this verifier's
	}
	if len(vals) > 1 {
		return "", true, agtp.InvalidAuthorization.New("the Authorization header appears more than once; send one bearer token (RFC 6750 §3.1 invalid_request)")
	}
	tok := strings.TrimLeft(rest, " ")
	switch {
	case rest == "":
		return "", true, agtp.InvalidAuthorization.New("the Authorization header is \"Bearer\" without a token; send \"Bearer <token>\" (RFC 6750 §2.1)")
	case rest[0] != ' ':
		return "", true, agtp.InvalidAuthorization.New("the Authorization header separates Bearer from its token with a tab; use a space: \"Bearer <token>\" (RFC 6750 §2.1, RFC 7235 §2.1)")
	case !isB64Token(tok):
		return "", true, agtp.InvalidAuthorization.New("the Authorization header's bearer token is not a b64token (letters, digits, -._~+/ then optional = padding; one token, no spaces: RFC 6750 §2.1)")
	}
	return tok, true, nil
}

// isB64Token: s is a b64token (RFC 6750 §2.1): 1*( ALPHA / DIGIT / "-"
// / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	t := strings.TrimRight(s, "=")
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return false
		}
	}
	return true
}

// verify verifies the bearer token of in and maps it to an agent; a
// claimed Agent-ID must name the same agent.
func (v *oauthVerifier) verify(in *agtp.Request, _ []byte, claimed string) (verdict, *agtp.Identity, *agtp.Error) {
	tok, has, e := bearer(in)
	if e != nil {
		return refused, nil, e
	}
	if !has {
		return notMine, nil, agtp.AgentUnauthenticated.New("identity oauth: send an OAuth access token as Authorization: Bearer <token> (RFC 6750)")
	}
	ctx := in.Context
	if ctx == nil {
		ctx = context.Background()
	}
	info, e := v.token(ctx, tok)
	if e != nil {
		return refused, nil, e
	}
	agentID, e := v.agentOf(info.clientID)
	if e != nil {
		return refused, nil, e
	}
	if claimed != "" && claimed != agentID {
		return refused, nil, agtp.IdentityConflict.New("the Agent-ID header names another agent than the access token's client; send the token alone, or the Agent-ID its client is registered to")
	}
	owner := info.sub
	if owner == info.clientID {
		owner = "" // a client acting for itself: the document's owner
	}
	if owner != "" && !ownerFromToken(owner) {
		// It becomes the answer's Owner-ID field and the records'
		// owner_id (helper-149: a sub holding CR LF broke the native
		// door's answer after the request had run).
		return refused, nil, agtp.TokenInvalid.New("the access token's sub is not usable as the Owner-ID of the person the call is for: it must be 1 to 256 visible ASCII characters")
	}
	scopes := v.cfg.agtpScopes(info.scopes).Strings()
	return verifiedAs, &agtp.Identity{AgentID: agentID, VerificationPath: IdentityOAuth, OwnerID: owner,
		Bounded: true, Scopes: scopes, Issuer: v.cfg.Issuer, ClientID: info.clientID, Subject: info.sub, Token: tok}, nil
}

// ownerFromToken reports whether a token's sub may stand as an Owner-ID:
// 1 to 256 visible ASCII characters (RFC 9110 VCHAR), so that it is a
// valid field value and one log line. It is wider than the Owner-ID
// header's grammar (RCNS §3: letters, digits, '-', '_', ':', '.'),
// which common subs ("auth0|abc123") do not meet; the owner is the
// token's, and an agent that sends no Owner-ID beside it is served.
func ownerFromToken(s string) bool {
	if len(s) < 1 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// agentOf is the agent a token's client acts as: the document that
// lists it in oauth_clients, else UnnamedClients, else a refusal.
func (v *oauthVerifier) agentOf(clientID string) (string, *agtp.Error) {
	if clientID == "" {
		return "", agtp.TokenInvalid.New("the access token names no client (client_id or azp)")
	}
	if id, ok := v.h.idents.clients[clientID]; ok {
		return id, nil
	}
	if id := v.h.idents.unnamed; id != "" {
		return id, nil
	}
	return "", agtp.OAuthClientUnknown.WithFields(fmt.Sprintf("the access token's client %q is not listed in any agent document's oauth_clients, and this gateway does not admit unnamed clients", textcut.Clip(clientID)),
		map[string]any{"client_id": textcut.Clip(clientID)})
}

// token verifies tok: a JWT (three dot-separated parts) against the
// JWKS, anything else by introspection.
//
// A JWT that verified is remembered, by its SHA-256, for
// IntrospectionCacheTTL at most and never past its exp: a repeat costs a
// hash and a lookup, not a signature check (its lifetime is checked
// again on each use).
func (v *oauthVerifier) token(ctx context.Context, tok string) (tokenInfo, *agtp.Error) {
	if strings.Count(tok, ".") != 2 {
		return v.introspect(ctx, tok)
	}
	key := tokenKey("jwt:", tok)
	if c, ok := v.introMem.Get(key); ok && v.keyKept(c.info.kid, c.info.alg) {
		return v.fromCache(c)
	}
	info, e := v.jwt(ctx, tok)
	if e != nil {
		return info, e
	}
	v.remember(key, info)
	return info, nil
}

// tokenKey is the cache key of tok: its SHA-256 under prefix (the
// token itself is never kept).
func tokenKey(prefix, tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return prefix + string(sum[:])
}

// fromCache answers a token from its cached verdict: inactive, or its
// info with the lifetime checked again (a cached token may have
// expired since).
func (v *oauthVerifier) fromCache(c *introspected) (tokenInfo, *agtp.Error) {
	if !c.active {
		return tokenInfo{}, agtp.TokenInactive.New("the authorization server reports the access token inactive (revoked, expired or unknown)")
	}
	if e := v.lifetime(c.info.exp.IsZero(), c.info.exp, nil, nil); e != nil {
		return tokenInfo{}, e
	}
	return c.info, nil
}

// remember caches a verified token's info under key for
// IntrospectionCacheTTL at most and never past its exp.
func (v *oauthVerifier) remember(key string, info tokenInfo) {
	ttl := time.Duration(v.cfg.IntrospectionCacheTTL)
	if !info.exp.IsZero() {
		ttl = min(ttl, info.exp.Sub(v.now()))
	}
	if ttl > 0 {
		v.introMem.SetWithTTL(key, &introspected{active: true, info: info}, 1, ttl)
	}
}

// keyKept reports whether the key set last fetched still holds key kid
// for alg (a rotation that dropped it ends the cached tokens it signed).
func (v *oauthVerifier) keyKept(kid, alg string) bool {
	v.mu.Lock()
	set := v.keys
	v.mu.Unlock()
	return pick(set, kid, alg) != nil
}

// jwtClaims are the access-token claims beyond RFC 7519's (RFC 9068
// §2.2, RFC 8693 §4.3): the client and the scopes, as a space-separated
// string or (Okta, Entra ID) a list.
type jwtClaims struct {
	ClientID string          `json:"client_id"`
	Azp      string          `json:"azp"`
	Scope    json.RawMessage `json:"scope"`
	Scp      json.RawMessage `json:"scp"`
}

// scopeList reads a scope claim: a space-separated string or a list of
// strings.
func scopeList(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.Fields(s)
	}
	var l []string
	if json.Unmarshal(raw, &l) == nil {
		return l
	}
	return nil
}

// jwt verifies a JWT access token: an allowed algorithm, a key of the
// issuer's JWKS, the issuer, the audience, the lifetime.
func (v *oauthVerifier) jwt(ctx context.Context, tok string) (tokenInfo, *agtp.Error) {
	parsed, err := josejwt.ParseSigned(tok, v.algs)
	if err != nil {
		return tokenInfo{}, agtp.TokenInvalid.New("the access token is not a JWT signed with an accepted algorithm (" + strings.Join(v.cfg.Algorithms, ", ") + "): " + textcut.Clip(err.Error()))
	}
	hdr := parsed.Headers[0]
	if e := v.accessTokenType(hdr.ExtraHeaders[jose.HeaderType]); e != nil {
		return tokenInfo{}, e
	}
	key, e := v.key(ctx, hdr.KeyID, hdr.Algorithm)
	if e != nil {
		return tokenInfo{}, e
	}
	var std josejwt.Claims
	var ext jwtClaims
	if err := parsed.Claims(key.Key, &std, &ext); err != nil {
		if errors.Is(err, jose.ErrCryptoFailure) {
			kid := "(the token names no kid)"
			if hdr.KeyID != "" {
				kid = textcut.Clip(hdr.KeyID)
			}
			return tokenInfo{}, agtp.TokenInvalid.New("the access token's signature does not verify with the issuer's key " + kid)
		}
		return tokenInfo{}, agtp.TokenInvalid.New("the access token's claims are malformed (RFC 7519 types: aud a string or list, exp, nbf and iat numbers): " + textcut.Clip(err.Error()))
	}
	if std.Issuer != v.cfg.Issuer {
		if std.Issuer == "" {
			return tokenInfo{}, agtp.TokenInvalid.New("the access token names no issuer (iss); this gateway accepts tokens of " + v.cfg.Issuer)
		}
		return tokenInfo{}, agtp.TokenInvalid.New("the access token was issued by " + textcut.Clip(std.Issuer) + ", not by this gateway's issuer " + v.cfg.Issuer)
	}
	if !oauthex.MatchesResource(std.Audience, v.cfg.Resource) {
		return tokenInfo{}, agtp.TokenAudience.WithFields("the access token is for another resource: its audience does not include this gateway's resource "+v.cfg.Resource+" (RFC 8707); request the token with resource="+v.cfg.Resource,
			map[string]any{"resource": v.cfg.Resource})
	}
	info := tokenInfo{clientID: ext.ClientID, sub: std.Subject, scopes: scopeList(ext.Scope), kid: hdr.KeyID, alg: hdr.Algorithm}
	if info.clientID == "" {
		info.clientID = ext.Azp
	}
	if len(info.scopes) == 0 {
		info.scopes = scopeList(ext.Scp)
	}
	if std.Expiry != nil {
		info.exp = std.Expiry.Time()
	}
	if e := v.lifetime(std.Expiry == nil, info.exp, std.NotBefore, std.IssuedAt); e != nil {
		return tokenInfo{}, e
	}
	return info, nil
}

// accessTokenType checks a JWT's typ header (typ, nil when absent) for
// an access token (RFC 9068 §4, RFC 8725 §3.11). typ is a media type
// (RFC 7515 §4.1.9), read as one (typMediaType): case, surrounding
// whitespace, parameters and the "application/" prefix do not change
// it, and a typ that is not a media type is refused. at+jwt is taken;
// under RequireATJWT nothing else, else also none, or any type whose
// subtype does not end in +jwt (JWT); a type ending in +jwt but not
// at+jwt names another kind of JWT and is refused.
func (v *oauthVerifier) accessTokenType(typ any) *agtp.Error {
	if typ == nil && !v.cfg.RequireATJWT {
		return nil
	}
	s, ok := typ.(string)
	if !ok {
		if typ == nil {
			return agtp.TokenInvalid.New("the access token has no typ header, and this gateway accepts only JWTs typed at+jwt (RFC 9068 §4)")
		}
		return agtp.TokenInvalid.New("the access token's typ header is not a string")
	}
	t, ok := typMediaType(s)
	if !ok {
		return agtp.TokenInvalid.New("the access token's typ header " + strconv.Quote(textcut.Clip(s)) + " is not a media type (RFC 7515 §4.1.9)")
	}
	if t == "at+jwt" {
		return nil
	}
	if v.cfg.RequireATJWT {
		return agtp.TokenInvalid.New("the access token is typed " + textcut.Clip(s) + ", and this gateway accepts only JWTs typed at+jwt (RFC 9068 §4)")
	}
	if strings.HasSuffix(t, "+jwt") {
		return agtp.TokenInvalid.New("the JWT is typed " + textcut.Clip(s) + ", another kind of token than an access token (at+jwt, RFC 9068 §4)")
	}
	return nil
}

// typMediaType is a typ header read as a media type (RFC 7515 §4.1.9,
// RFC 2045): lower case, without parameters or surrounding whitespace,
// without the "application/" prefix that typ may omit; ok false when s
// does not parse as one (mime.ParseMediaType), so that "id_token+jwt ",
// "x+jwt;q=1" or "id_token+jwt\t" are id_token+jwt and x+jwt, not
// some other type.
func typMediaType(s string) (string, bool) {
	mt, _, err := mime.ParseMediaType(s)
	if err != nil {
		return "", false
	}
	return strings.TrimPrefix(mt, "application/"), true
}

// lifetime checks exp (required unless AllowNoExpiry), nbf and iat
// against the clock with ClockSkew.
func (v *oauthVerifier) lifetime(noExp bool, exp time.Time, nbf, iat *josejwt.NumericDate) *agtp.Error {
	now, skew := v.now(), time.Duration(v.cfg.ClockSkew)
	if noExp {
		if !v.cfg.AllowNoExpiry {
			return agtp.TokenInvalid.New("the access token has no expiry (exp), and this gateway accepts none without one")
		}
	} else if now.After(exp.Add(skew)) {
		return agtp.TokenExpired.New(fmt.Sprintf("the access token expired at %s; get a new one", exp.UTC().Format(time.RFC3339)))
	}
	if nbf != nil && now.Add(skew).Before(nbf.Time()) {
		return agtp.TokenInvalid.New("the access token is not valid yet (nbf)")
	}
	if iat != nil && now.Add(skew).Before(iat.Time()) {
		return agtp.TokenInvalid.New("the access token was issued in the future (iat): check the clocks")
	}
	return nil
}
