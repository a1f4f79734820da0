package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/caddy-rcns/caddy-rcns/internal/closecache"
	"github.com/caddy-rcns/caddy-rcns/internal/secureurl"
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

// close releases the introspection cache: detached at once, closed a
// moment later (closecache), so that a request of the old configuration
// still running does not meet ristretto's Close.
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
	scopes := v.cfg.agtpScopes(info.scopes).Strings()
	return verifiedAs, &agtp.Identity{AgentID: agentID, VerificationPath: IdentityOAuth, OwnerID: owner,
		Bounded: true, Scopes: scopes, Issuer: v.cfg.Issuer, ClientID: info.clientID, Subject: info.sub, Token: tok}, nil
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
	if c, ok := v.introMem.Load().Get(key); ok && v.keyKept(c.info.kid, c.info.alg) {
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
		v.introMem.Load().SetWithTTL(key, &introspected{active: true, info: info}, 1, ttl)
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

// key finds the JWKS key kid (alg alg) in the held set. With no set
// held, the request waits for a fetch; a set older than JWKSMaxAge is
// refreshed in the background while the held one still verifies (a slow
// or unreachable issuer delays no request that way); an unknown kid
// fetches the set again, waiting, when the last fetch started at least
// JWKSMinRefresh ago. A failed fetch is not tried again for
// issuerRetryAfter seconds, whatever asks (a dead issuer costs a request
// no timeout then). With no set held and none readable, the answer is
// 503 issuer-unavailable.
func (v *oauthVerifier) key(ctx context.Context, kid, alg string) (*jose.JSONWebKey, *agtp.Error) {
	v.mu.Lock()
	set, at, tried, ferr, failed := v.keys, v.keysAt, v.keysTry, v.keysErr, v.keysFail
	v.mu.Unlock()
	now := v.now()
	backoff := ferr != nil && now.Sub(failed) < issuerRetryAfter*time.Second
	switch {
	case set == nil && backoff:
		return nil, v.unavailable("the issuer's keys (JWKS) could not be read", ferr)
	case set == nil:
		fresh, err := v.fetchKeys(ctx)
		if err != nil {
			return nil, v.unavailable("the issuer's keys (JWKS) could not be read", err)
		}
		set = fresh
	case now.Sub(at) > time.Duration(v.cfg.JWKSMaxAge) && !backoff:
		v.refreshKeys(ctx)
	}
	if k := pick(set, kid, alg); k != nil {
		return k, nil
	}
	if now.Sub(tried) >= time.Duration(v.cfg.JWKSMinRefresh) && !backoff {
		// An unknown kid: the issuer may have rotated its keys.
		if fresh, err := v.fetchKeys(ctx); err == nil {
			if k := pick(fresh, kid, alg); k != nil {
				return k, nil
			}
		} else {
			v.log.Warn("oauth: fetching the issuer's JWKS for an unknown kid failed", zap.String("kid", textcut.Clip(kid)), zap.Error(err))
		}
	}
	if kid == "" {
		return nil, agtp.TokenInvalid.New("the access token names no key (kid), and the issuer does not publish exactly one key for its algorithm " + textcut.Clip(alg))
	}
	return nil, agtp.TokenInvalid.New("the access token is signed by a key (kid " + textcut.Clip(kid) + ") the issuer does not publish")
}

// pick is the key of set named kid, usable with alg: with no kid, the
// set's only such key.
func pick(set *jose.JSONWebKeySet, kid, alg string) *jose.JSONWebKey {
	if set == nil {
		return nil
	}
	var found *jose.JSONWebKey
	n := 0
	for i := range set.Keys {
		k := &set.Keys[i]
		if (kid != "" && k.KeyID != kid) || (k.Algorithm != "" && k.Algorithm != alg) || (k.Use != "" && k.Use != "sig") {
			continue
		}
		found, n = k, n+1
	}
	if n != 1 && kid == "" {
		return nil
	}
	return found
}

// refreshKeys starts a background fetch of the JWKS unless one runs
// already: the held set keeps verifying meanwhile. The fetch keeps ctx's
// values, not its cancellation, and ends within the client's timeout.
func (v *oauthVerifier) refreshKeys(ctx context.Context) {
	if !v.refreshing.CompareAndSwap(false, true) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer v.refreshing.Store(false)
		if _, err := v.fetchKeys(ctx); err != nil && v.log != nil {
			v.log.Warn("oauth: refreshing the issuer's JWKS failed; the keys fetched before still verify", zap.String("issuer", v.cfg.Issuer), zap.Error(err))
		}
	}()
}

// fetchKeys reads the JWKS and keeps it: one fetch at a time, shared by
// every request that waits for it (shared). A set that holds no key
// (RFC 7517 §5: "keys" is required; an issuer that publishes none has
// signed no token) is a failure, as an unreadable one is: the set held
// before stays, and the failure is remembered for issuerRetryAfter
// seconds (key).
func (v *oauthVerifier) fetchKeys(ctx context.Context) (*jose.JSONWebKeySet, error) {
	r, err := v.shared(ctx, "jwks", func(ctx context.Context) (any, error) {
		v.mu.Lock()
		v.keysTry = v.now()
		v.mu.Unlock()
		set, err := v.readKeys(ctx)
		v.mu.Lock()
		defer v.mu.Unlock()
		if err != nil {
			v.keysErr, v.keysFail = err, v.now()
			return nil, err
		}
		v.keys, v.keysAt, v.keysErr = set, v.now(), nil
		return set, nil
	})
	if err != nil {
		return nil, err
	}
	return r.(*jose.JSONWebKeySet), nil
}

// readKeys reads the JWKS at JWKSURI, else at the metadata's jwks_uri,
// keeping only the public part of each key.
func (v *oauthVerifier) readKeys(ctx context.Context) (*jose.JSONWebKeySet, error) {
	uri := v.cfg.JWKSURI
	if uri == "" {
		meta, e := v.metadata(ctx)
		if e != nil {
			return nil, e
		}
		if meta.JWKSURI == "" {
			return nil, errors.New("the issuer's metadata has no jwks_uri")
		}
		// The keys every token is verified with: never over cleartext
		// to another host, as the configured jwks_uri (oauthconfig.go).
		if err := secureurl.Check(meta.JWKSURI); err != nil {
			return nil, fmt.Errorf("the issuer's metadata names jwks_uri %q, which %v: no keys are read from it", textcut.Clip(secureurl.Redacted(meta.JWKSURI)), err)
		}
		uri = meta.JWKSURI
	}
	var set jose.JSONWebKeySet
	if err := v.getJSON(ctx, uri, &set); err != nil {
		return nil, err
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("the JWKS at %s holds no keys (RFC 7517 §5)", textcut.Clip(uri))
	}
	for i := range set.Keys {
		set.Keys[i] = set.Keys[i].Public()
	}
	return &set, nil
}

// shared runs fn once for all the concurrent callers of key
// (singleflight), under ctx's values but not its cancellation: a
// caller that hangs up does not cancel the fetch the others wait for
// (the client's timeout bounds it). Each caller waits at most until its
// own ctx ends.
func (v *oauthVerifier) shared(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	detached := context.WithoutCancel(ctx)
	ch := v.flight.DoChan(key, func() (any, error) { return fn(detached) })
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// metadata is the issuer's RFC 8414 metadata, read on first use (the
// RFC 8414 path, then OpenID Connect's); a failure is remembered for
// issuerRetryAfter seconds.
func (v *oauthVerifier) metadata(ctx context.Context) (*oauthex.AuthServerMeta, error) {
	v.mu.Lock()
	meta, merr, mtry := v.meta, v.metaErr, v.metaTry
	v.mu.Unlock()
	if meta != nil {
		return meta, nil
	}
	if merr != nil && v.now().Sub(mtry) < issuerRetryAfter*time.Second {
		return nil, merr
	}
	r, err := v.shared(ctx, "meta", func(ctx context.Context) (any, error) {
		// Read here, not with oauthex.GetAuthServerMeta: that is an
		// OAuth client's reader, which refuses an issuer that does not
		// advertise PKCE (a client's concern, not a resource server's:
		// a machine-to-machine issuer need not) and endpoints on private
		// addresses. The URLs this verifier uses are checked where they
		// are used (readKeys, introspect).
		var last, mismatch error
		for _, u := range upstreamauth.MetadataURLs(v.cfg.Issuer) {
			var m oauthex.AuthServerMeta
			if err := v.getJSON(ctx, u, &m); err != nil {
				last = err
				continue
			}
			// RFC 8414 §3.3: the issuer named must be the one asked for
			// (a trailing slash aside, as the MCP SDK compares them).
			if strings.TrimSuffix(m.Issuer, "/") != strings.TrimSuffix(v.cfg.Issuer, "/") {
				mismatch = fmt.Errorf("the metadata at %s names issuer %q, not %q", u, textcut.Clip(m.Issuer), v.cfg.Issuer)
				continue
			}
			v.mu.Lock()
			v.meta, v.metaErr = &m, nil
			v.mu.Unlock()
			return &m, nil
		}
		if mismatch != nil {
			last = mismatch // the fault to name, whatever the other URL said
		}
		if last == nil {
			last = errors.New("the issuer publishes no RFC 8414 or OpenID Connect metadata")
		}
		v.mu.Lock()
		v.metaErr, v.metaTry = last, v.now()
		v.mu.Unlock()
		return nil, last
	})
	if err != nil {
		return nil, err
	}
	return r.(*oauthex.AuthServerMeta), nil
}

// getJSON reads the JSON document at uri into out (200 only, at most
// maxOAuthDocument bytes).
func (v *oauthVerifier) getJSON(ctx context.Context, uri string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	return v.do(req, out)
}

// do sends req and decodes a 200 JSON answer into out.
func (v *oauthVerifier) do(req *http.Request, out any) error {
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxOAuthDocument+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s answered %d", req.Method, req.URL.Redacted(), resp.StatusCode)
	}
	if len(body) > maxOAuthDocument {
		return fmt.Errorf("%s answered more than %d bytes", req.URL.Redacted(), maxOAuthDocument)
	}
	return json.Unmarshal(body, out)
}

// unavailable is 503 issuer-unavailable: the authorization server could
// not be reached, so no token can be verified and nothing runs. Its
// WARN line is written within the engine's log bound (LogBurst lines
// per LogWindow for each what, with the count held back in
// "suppressed"): during an outage every request with a token meets it,
// and the agents' requests must not set the log volume.
func (v *oauthVerifier) unavailable(what string, err error) *agtp.Error {
	l := v.log
	if v.h != nil && v.h.logBudget != nil {
		l = v.h.logBudget.logFor(v.log, "oauth-issuer", what)
	}
	// A caller that hung up while waiting for a shared fetch (shared)
	// says nothing of the issuer.
	if l != nil && !errors.Is(err, context.Canceled) {
		l.Warn("oauth: the authorization server is unavailable", zap.String("issuer", v.cfg.Issuer), zap.String("what", what), zap.Error(err))
	}
	return agtp.IssuerUnavailable.WithFields(what+" from "+v.cfg.Issuer+"; nothing was executed; retry after Retry-After seconds",
		map[string]any{"retry_after_seconds": issuerRetryAfter, "issuer": v.cfg.Issuer})
}

// introspectionAnswer is an RFC 7662 §2.2 answer.
type introspectionAnswer struct {
	Active   bool            `json:"active"`
	Scope    json.RawMessage `json:"scope"`
	ClientID string          `json:"client_id"`
	Sub      string          `json:"sub"`
	Aud      json.RawMessage `json:"aud"`
	Iss      string          `json:"iss"`
	Exp      *int64          `json:"exp"`
	Nbf      *int64          `json:"nbf"`
	Iat      *int64          `json:"iat"`
}

// introspect verifies an opaque token at the introspection endpoint
// (RFC 7662), reusing an answer for IntrospectionCacheTTL at most and
// never past the token's exp; the cache is keyed by the token's
// SHA-256, never the token.
func (v *oauthVerifier) introspect(ctx context.Context, tok string) (tokenInfo, *agtp.Error) {
	key := tokenKey("", tok)
	if c, ok := v.introMem.Load().Get(key); ok {
		return v.fromCache(c)
	}
	endpoint := v.cfg.IntrospectionEndpoint
	if endpoint == "" {
		meta, err := v.metadata(ctx)
		if err != nil {
			return tokenInfo{}, v.unavailable("the issuer's metadata could not be read", err)
		}
		endpoint = meta.IntrospectionEndpoint
		if endpoint != "" {
			// The gateway sends its client secret and the caller's token
			// there: never over cleartext to another host.
			if err := secureurl.Check(endpoint); err != nil {
				return tokenInfo{}, v.unavailable("no usable introspection endpoint (the metadata's is refused; nothing was sent to it)",
					fmt.Errorf("introspection_endpoint %q %v", textcut.Clip(secureurl.Redacted(endpoint)), err))
			}
		}
	}
	if endpoint == "" || v.cfg.ClientID == "" {
		return tokenInfo{}, agtp.TokenInvalid.New("the access token is not a JWT, and this gateway introspects no opaque tokens (no introspection endpoint or client credentials configured)")
	}
	form := url.Values{"token": {tok}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return tokenInfo{}, v.unavailable("the introspection request could not be made", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(v.cfg.ClientID), url.QueryEscape(v.cfg.ClientSecret))
	var a introspectionAnswer
	if err := v.do(req, &a); err != nil {
		return tokenInfo{}, v.unavailable("the token could not be introspected", err)
	}
	if !a.Active {
		c := &introspected{}
		v.introMem.Load().SetWithTTL(key, c, 1, time.Duration(v.cfg.IntrospectionCacheTTL))
		return v.fromCache(c)
	}
	var aud []string
	if len(a.Aud) > 0 {
		var one string
		if json.Unmarshal(a.Aud, &one) == nil {
			aud = []string{one}
		} else {
			_ = json.Unmarshal(a.Aud, &aud)
		}
	}
	if a.Iss != "" && a.Iss != v.cfg.Issuer {
		return tokenInfo{}, agtp.TokenInvalid.New("the introspected token was issued by " + textcut.Clip(a.Iss) + ", not by this gateway's issuer")
	}
	if !oauthex.MatchesResource(aud, v.cfg.Resource) {
		return tokenInfo{}, agtp.TokenAudience.WithFields("the access token is for another resource: its audience does not include this gateway's resource "+v.cfg.Resource+" (RFC 8707)",
			map[string]any{"resource": v.cfg.Resource})
	}
	info := tokenInfo{clientID: a.ClientID, sub: a.Sub, scopes: scopeList(a.Scope)}
	var nbf, iat *josejwt.NumericDate
	if a.Exp != nil {
		info.exp = time.Unix(*a.Exp, 0)
	}
	if a.Nbf != nil {
		nbf = josejwt.NewNumericDate(time.Unix(*a.Nbf, 0))
	}
	if a.Iat != nil {
		iat = josejwt.NewNumericDate(time.Unix(*a.Iat, 0))
	}
	if e := v.lifetime(a.Exp == nil, info.exp, nbf, iat); e != nil {
		return tokenInfo{}, e
	}
	v.remember(key, info)
	return info, nil
}

// ResourceMetadataURL is the URL of this gateway's RFC 9728
// protected-resource metadata under identity oauth: the well-known path
// inserted before the resource identifier's path (RFC 9728 §3.1). ""
// when identity oauth is off.
func (h *Engine) ResourceMetadataURL() string {
	if h.oauth == nil {
		return ""
	}
	return h.oauth.metadataURL
}

// metadataURL is the RFC 9728 §3.1 metadata URL of resource ("" when
// it does not parse; validate refused that).
func metadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
}

// ProtectedResourceMetadata is the RFC 9728 §2 document of this gateway
// under identity oauth (nil when off): the resource identifier, the one
// authorization server, the scopes the scope map names, bearer tokens
// in the Authorization header only.
func (h *Engine) ProtectedResourceMetadata() *oauthex.ProtectedResourceMetadata {
	if h.oauth == nil {
		return nil
	}
	return &oauthex.ProtectedResourceMetadata{
		Resource:               h.OAuth.Resource,
		AuthorizationServers:   []string{h.OAuth.Issuer},
		ScopesSupported:        h.OAuth.ScopesSupported(),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           h.ServerID + " (caddy-rcns AGTP gateway)",
	}
}

// BearerChallenge is the WWW-Authenticate value (RFC 6750 §3, RFC 9728
// §5.1) of the refusal e under identity oauth, "" when oauth is off or
// e needs none: every 401 gets a Bearer challenge naming the metadata
// and the supported scopes (error="invalid_token" when a token was
// refused); 400 invalid-authorization (a malformed Authorization
// header) gets error="invalid_request" (RFC 6750 §3.1); 403
// insufficient-scope gets error="insufficient_scope" and scope naming
// every OAuth scope the operation needs.
func (h *Engine) BearerChallenge(e *agtp.Error) string {
	if h.oauth == nil || e == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("Bearer realm=" + quote(h.ServerID))
	param := func(k, v string) { b.WriteString(", " + k + "=" + quote(v)) }
	switch {
	case e.Reason == agtp.InvalidAuthorization.Token:
		param("error", "invalid_request")
		param("error_description", textcut.Clip(e.Reason))
	case e.Reason == agtp.InsufficientScope.Token:
		param("error", "insufficient_scope")
		var need []string
		if l, ok := e.Fields["required_scopes"].([]string); ok {
			need = h.OAuth.oauthScopesFor(l)
		}
		if len(need) > 0 {
			param("scope", strings.Join(need, " "))
		}
	case e.Status == http.StatusUnauthorized:
		switch e.Reason {
		case agtp.TokenInvalid.Token, agtp.TokenExpired.Token, agtp.TokenAudience.Token, agtp.TokenInactive.Token,
			agtp.OAuthClientUnknown.Token, agtp.IdentityConflict.Token:
			param("error", "invalid_token")
			param("error_description", textcut.Clip(e.Reason))
		}
		if s := h.OAuth.ScopesSupported(); len(s) > 0 {
			param("scope", strings.Join(s, " "))
		}
	default:
		return ""
	}
	param("resource_metadata", h.ResourceMetadataURL())
	return b.String()
}

// quote is s as an HTTP quoted-string (RFC 9110 §5.6.4).
func quote(s string) string {
	if !strings.ContainsAny(s, "\"\\") {
		return "\"" + s + "\""
	}
	return "\"" + strings.NewReplacer("\\", "\\\\", "\"", "\\\"").Replace(s) + "\""
}
