package upstreamauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"golang.org/x/sync/singleflight"

	"github.com/caddy-rcns/caddy-rcns/internal/closecache"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/internal/secureurl"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// RFC 8693 names.
const (
	// GrantTokenExchange is the token exchange grant type (RFC 8693 §2.1).
	GrantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	// TokenTypeAccessToken is the token type of an OAuth access token
	// (RFC 8693 §3): the subject token's type and the type asked for.
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
)

// Reasons and statuses of a token exchange that cannot be had.
const (
	// ReasonExchangeRefused: the upstream's authorization server refused
	// to exchange the caller's token (a 4xx answer: invalid_grant,
	// invalid_target, invalid_scope, ...). Nothing runs.
	ReasonExchangeRefused = "token-exchange-refused"
	// StatusExchangeRefused is the AGTP status of ReasonExchangeRefused:
	// 424, the call depends on a credential the gateway could not obtain.
	StatusExchangeRefused = 424
	// ReasonExchangeMisconfigured: the exchange failed on the gateway's
	// side, whatever the caller's token: the authorization server
	// refused the gateway's own client (HTTP 401, or error
	// invalid_client, unauthorized_client or unsupported_grant_type, or
	// invalid_request saying the grant type is not allowed for the
	// client, oidc-provider's wording),
	// issued a token the gateway cannot send (not Bearer) or with an
	// expires_in that is not a non-negative integer in range, its
	// metadata names a token endpoint without TLS (http on a host that
	// is not loopback) or another issuer, or a metadata URL or the token
	// endpoint answered a redirect (not followed). Nothing runs; the Refusal's Cause (the server's
	// answer) is for the operator's WARN.
	ReasonExchangeMisconfigured = "token-exchange-misconfigured"
	// StatusExchangeMisconfigured is the AGTP status of
	// ReasonExchangeMisconfigured: 502, the gateway got no usable answer
	// from the server it depends on.
	StatusExchangeMisconfigured = 502
	// ReasonIssuerUnavailable: the authorization server could not be
	// reached, timed out, or answered 5xx or nonsense. Retryable.
	ReasonIssuerUnavailable = "issuer-unavailable"
	// StatusIssuerUnavailable is the AGTP status of
	// ReasonIssuerUnavailable.
	StatusIssuerUnavailable = 503
)

// Defaults of TokenExchangeConfig.
const (
	// DefaultExchangeTimeout bounds one metadata fetch or token request.
	DefaultExchangeTimeout = 10 * time.Second
	// DefaultExchangeMargin is taken off an exchanged token's expires_in
	// before it is cached: a token is not used in its last seconds.
	DefaultExchangeMargin = 10 * time.Second
	// DefaultExchangeCacheSize is the number of exchanged tokens kept.
	DefaultExchangeCacheSize = 10000
	// DefaultExchangeRetryAfter is the Retry-After of issuer-unavailable,
	// and how long a failed metadata discovery is remembered.
	DefaultExchangeRetryAfter = 2 * time.Second
	// maxExchangeDocument bounds a metadata or token answer (bytes).
	maxExchangeDocument = 1 << 20
)

// TokenExchangeConfig configures a TokenExchange policy. Issuer or
// TokenEndpoint, ClientID, ClientSecret, and Resource or Audience are
// required.
type TokenExchangeConfig struct {
	// Upstream is the upstream's name, for refusals.
	Upstream string
	// Issuer is the upstream's authorization server: its token endpoint
	// is discovered from its metadata (RFC 8414
	// /.well-known/oauth-authorization-server, then OpenID Connect
	// discovery) on first use, unless TokenEndpoint is set.
	Issuer string
	// TokenEndpoint is the token endpoint URL; it skips discovery.
	TokenEndpoint string
	// ClientID and ClientSecret are the gateway's own client credentials
	// at that server (client_secret_basic, RFC 6749 §2.3.1). The secret
	// is the resolved value (placeholders already replaced).
	ClientID, ClientSecret string
	// Resource is sent as the resource parameter (RFC 8707; an absolute
	// URI naming the upstream); Audience as the audience parameter
	// (RFC 8693 §2.1, a logical name). At least one.
	Resource, Audience string
	// Scopes, when set, are the scopes asked for every call, instead of
	// the scopes the engine passes to Resolve.
	Scopes []string
	// Header is the request header that carries the exchanged token;
	// default Authorization, with the value "Bearer <token>". Another
	// header carries the token alone.
	Header string
	// Timeout bounds one metadata fetch or token request; default
	// DefaultExchangeTimeout.
	Timeout time.Duration
	// Margin is taken off expires_in before an exchanged token is cached;
	// default DefaultExchangeMargin. A token whose answer has no
	// expires_in, or expires_in at most Margin, is used once and not
	// cached.
	Margin time.Duration
	// CacheSize is the number of exchanged tokens kept; default
	// DefaultExchangeCacheSize.
	CacheSize int
	// RetryAfter is the Retry-After of issuer-unavailable; default
	// DefaultExchangeRetryAfter.
	RetryAfter time.Duration
	// Client, when set, sends the requests (tests); default a client
	// with Timeout that follows no redirect.
	Client *http.Client
}

// TokenExchange is the token exchange policy (RFC 8693): the caller's
// verified OAuth access token is exchanged, with the gateway's own
// client credentials, at the upstream's authorization server for a token
// whose audience is the upstream and whose scopes are the call's. The
// caller's own token is never sent upstream. Exchanged tokens are cached
// per (caller's token, resource, audience, scopes) for their lifetime
// less Margin; concurrent misses for one key share one exchange.
type TokenExchange struct {
	cfg    TokenExchangeConfig
	client *http.Client
	flight singleflight.Group
	cache  *closecache.Cache[string, *exchanged]
	now    func() time.Time

	mu       sync.Mutex
	endpoint string    // discovered token endpoint
	metaErr  error     // the last discovery failure
	metaTry  time.Time // when it failed
}

// exchanged is a cached exchanged token.
type exchanged struct {
	token string
	until time.Time // expiry less Margin
}

// NewTokenExchange validates cfg, sets its defaults and builds the
// policy. Close releases its cache.
func NewTokenExchange(cfg TokenExchangeConfig) (*TokenExchange, error) {
	if cfg.Issuer == "" && cfg.TokenEndpoint == "" {
		return nil, fmt.Errorf("upstream %s: token exchange needs issuer or token_endpoint", cfg.Upstream)
	}
	// The gateway sends its client secret and the caller's token to the
	// token endpoint, and takes the endpoint from the issuer's
	// metadata: both over TLS (RFC 6749 §3.2, RFC 8414 §2), as the oauth
	// block's URLs.
	// An issuer has no query (RFC 8414 §2); neither has userinfo or a
	// fragment (secureurl).
	for _, k := range []struct {
		name, v string
		check   func(string) error
	}{{"issuer", cfg.Issuer, secureurl.CheckIssuer}, {"token_endpoint", cfg.TokenEndpoint, secureurl.Check}} {
		if k.v == "" {
			continue
		}
		if err := k.check(k.v); err != nil {
			return nil, fmt.Errorf("upstream %s: credentials token_exchange: %s %q %v: the gateway sends its client_secret and the caller's token there", cfg.Upstream, k.name, secureurl.Redacted(k.v), err)
		}
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, fmt.Errorf("upstream %s: token exchange needs client_id and client_secret (the gateway's own client at the authorization server)", cfg.Upstream)
	}
	if cfg.Resource == "" && cfg.Audience == "" {
		return nil, fmt.Errorf("upstream %s: token exchange needs resource or audience (the upstream, as the authorization server names it)", cfg.Upstream)
	}
	if cfg.Header == "" {
		cfg.Header = "Authorization"
	}
	cfg.Header = http.CanonicalHeaderKey(cfg.Header)
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultExchangeTimeout
	}
	if cfg.Margin < 0 {
		return nil, fmt.Errorf("upstream %s: token exchange margin must not be negative", cfg.Upstream)
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultExchangeMargin
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultExchangeCacheSize
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultExchangeRetryAfter
	}
	cfg.Scopes = slices.Clone(cfg.Scopes)
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: cfg.Timeout,
			// The authorization server is asked where it is configured; a
			// redirect could lead the gateway's secret anywhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	cache, err := ristretto.NewCache(&ristretto.Config[string, *exchanged]{
		NumCounters: 10 * int64(cfg.CacheSize), MaxCost: int64(cfg.CacheSize),
		BufferItems: 64, IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("upstream %s: token exchange cache: %w", cfg.Upstream, err)
	}
	return &TokenExchange{cfg: cfg, client: client, cache: closecache.New(cache), now: time.Now, endpoint: cfg.TokenEndpoint}, nil
}

// MaxWait is the longest a Resolve waits for its exchange (Waiting):
// the policy's Timeout, which bounds the metadata fetch and the token
// request together, also for a caller that joins one under way.
func (x *TokenExchange) MaxWait() time.Duration { return x.cfg.Timeout }

// Close releases the cache of exchanged tokens: detached (a call from
// then on exchanges afresh) and closed once no call holds it
// (closecache), so that a call of the old configuration still running
// does not meet ristretto's Close.
func (x *TokenExchange) Close() { x.cache.Close() }

// Kind is KindExchanged.
func (*TokenExchange) Kind() Kind { return KindExchanged }

// Resolve returns the exchanged token for c's verified OAuth token in
// Header, from the cache when one lives, else from the authorization
// server. A caller without an OAuth token is refused
// (upstream-credential-missing, 424); a 4xx from the server is
// token-exchange-refused (424) naming its error code, unless it refuses
// the gateway's own client (401, invalid_client, unauthorized_client,
// unsupported_grant_type, invalid_request "grant type is not allowed":
// token-exchange-misconfigured, 502, as is a
// token that is not Bearer); an unreachable server, a timeout, a 5xx or
// an unreadable answer is issuer-unavailable (503, RetryAfter).
func (x *TokenExchange) Resolve(ctx context.Context, c Caller, scopes []string) (Credential, *Refusal) {
	if c.Token == "" {
		return Credential{}, &Refusal{Upstream: x.cfg.Upstream, Reason: ReasonCredentialMissing, Status: StatusCredentialMissing,
			Explanation: fmt.Sprintf("upstream %s takes a token exchanged for the caller's OAuth access token, and this request carries none: call with identity oauth (Authorization: Bearer)", x.cfg.Upstream)}
	}
	if len(x.cfg.Scopes) > 0 {
		scopes = x.cfg.Scopes
	}
	scopes = normalScopes(scopes)
	key := x.cacheKey(c.Token, scopes)
	if e, ok := x.cache.Get(key); ok && x.now().Before(e.until) {
		return x.credential(e.token), nil
	}
	ch := x.flight.DoChan(key, func() (val any, err error) {
		defer recovered.Into(&err) // DoChan re-panics where nothing recovers it
		if e, ok := x.cache.Get(key); ok && x.now().Before(e.until) {
			return e.token, nil
		}
		// One exchange serves every waiter: it does not end with the
		// first caller's context.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.cfg.Timeout)
		defer cancel()
		tok, life, r := x.exchange(ctx, c.Token, scopes)
		if r != nil {
			return nil, r
		}
		if life > x.cfg.Margin {
			x.cache.SetWithTTL(key, &exchanged{token: tok, until: x.now().Add(life - x.cfg.Margin)}, 1, life-x.cfg.Margin)
			x.cache.Wait()
		}
		return tok, nil
	})
	// The exchange goes on for the other waiters (and fills the cache);
	// this caller waits no longer than its context (a plan's composition
	// deadline: docs/configuration.md composition_timeout).
	var v any
	var err error
	select {
	case res := <-ch:
		v, err = res.Val, res.Err
	case <-ctx.Done():
		return Credential{}, x.unavailable("it did not answer before the request's deadline (composition_timeout): " + context.Cause(ctx).Error())
	}
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return Credential{}, r
		}
		return Credential{}, x.unavailable(err.Error())
	}
	return x.credential(v.(string)), nil
}

// credential is the header carrying tok.
func (x *TokenExchange) credential(tok string) Credential {
	v := tok
	if x.cfg.Header == "Authorization" {
		v = "Bearer " + tok
	}
	return Credential{Header: http.Header{x.cfg.Header: {v}}, Kind: KindExchanged}
}

// cacheKey identifies an exchange: the SHA-256 of the caller's token (so
// the cache holds no caller token), and what is asked for it.
func (x *TokenExchange) cacheKey(token string, scopes []string) string {
	h := sha256.New()
	h.Write([]byte(token))
	for _, s := range append([]string{x.cfg.Resource, x.cfg.Audience}, scopes...) {
		h.Write([]byte{0})
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// normalScopes sorts and deduplicates scopes (a copy): one cache entry
// per set.
func normalScopes(scopes []string) []string {
	out := slices.Clone(scopes)
	slices.Sort(out)
	return slices.Compact(out)
}

// tokenAnswer is a token endpoint answer (RFC 6749 §5.1, RFC 8693 §2.2)
// or error (RFC 6749 §5.2).
type tokenAnswer struct {
	AccessToken      string          `json:"access_token"`
	IssuedTokenType  string          `json:"issued_token_type"`
	TokenType        string          `json:"token_type"`
	ExpiresIn        json.RawMessage `json:"expires_in"`
	Error            string          `json:"error"`
	ErrorDescription string          `json:"error_description"`
}

// clientErrors are the RFC 6749 §5.2 error codes that say the
// gateway's own client, not the caller's token, was refused:
// token-exchange-misconfigured (as is any 401, RFC 6749 §5.2's status
// of a failed client authentication).
var clientErrors = []string{"invalid_client", "unauthorized_client", "unsupported_grant_type"}

// grantNotAllowed reports whether an error answer refuses the gateway's
// client the grant, as oidc-provider (the project's own authorization
// server) words it: error invalid_request, error_description
// "requested grant type is not allowed for this client", where RFC 6749
// §5.2 says unauthorized_client. invalid_request alone is no gateway
// fault (RFC 8693 §2.2.2 answers a bad subject token with it), and the
// issuer's metadata cannot tell (grant_types_supported is the server's,
// not the client's), so the description decides: a concession to
// oidc-provider.
func grantNotAllowed(code, description string) bool {
	return code == "invalid_request" && strings.Contains(strings.ToLower(description), "grant type is not allowed")
}

// exchange asks the authorization server; it returns the token and its
// lifetime (0 when the answer has none).
func (x *TokenExchange) exchange(ctx context.Context, subject string, scopes []string) (string, time.Duration, *Refusal) {
	endpoint, err := x.tokenEndpoint(ctx)
	var insecure *insecureEndpoint
	var fault *metadataFault
	switch {
	case errors.As(err, &insecure):
		return "", 0, x.misconfigured(insecure.endpoint, "names a token endpoint without TLS (http), where the gateway sends no secret or token",
			"http on a host that is not loopback, named by the metadata at "+insecure.metadata)
	case errors.As(err, &fault):
		return "", 0, x.misconfiguredMetadata(fault.metadata, fault.what, fault.cause)
	case err != nil:
		return "", 0, x.unavailable("its metadata could not be read: " + err.Error())
	}
	form := url.Values{
		"grant_type":           {GrantTokenExchange},
		"subject_token":        {subject},
		"subject_token_type":   {TokenTypeAccessToken},
		"requested_token_type": {TokenTypeAccessToken},
	}
	if x.cfg.Resource != "" {
		form.Set("resource", x.cfg.Resource)
	}
	if x.cfg.Audience != "" {
		form.Set("audience", x.cfg.Audience)
	}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, x.unavailable(err.Error())
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 §2.3.1: both parts form-urlencoded before Basic.
	req.SetBasicAuth(url.QueryEscape(x.cfg.ClientID), url.QueryEscape(x.cfg.ClientSecret))
	resp, err := x.client.Do(req)
	if err != nil {
		return "", 0, x.unavailable("the token request failed: " + redactURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExchangeDocument+1))
	if err != nil {
		return "", 0, x.unavailable("reading the token answer: " + err.Error())
	}
	var ans tokenAnswer
	jsonErr := json.Unmarshal(body, &ans)
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		code := ans.Error
		if jsonErr != nil || code == "" || !isErrorCode(code) {
			code = "(none)"
		}
		answer := fmt.Sprintf("HTTP %d, error %s", resp.StatusCode, code)
		if resp.StatusCode == http.StatusUnauthorized || slices.Contains(clientErrors, code) ||
			(jsonErr == nil && grantNotAllowed(code, ans.ErrorDescription)) {
			cause := answer
			if jsonErr == nil && ans.ErrorDescription != "" {
				cause += ", error_description " + strconv.Quote(textcut.Clip(ans.ErrorDescription))
			}
			return "", 0, x.misconfigured(endpoint, "refused the gateway's own client ("+answer+")", cause)
		}
		return "", 0, &Refusal{Upstream: x.cfg.Upstream, Reason: ReasonExchangeRefused, Status: StatusExchangeRefused,
			Explanation: fmt.Sprintf("the authorization server of upstream %s refused the token exchange: %s", x.cfg.Upstream, answer)}
	case isRedirect(resp.StatusCode):
		// Not followed: the gateway's secret goes where it is configured.
		return "", 0, x.misconfigured(endpoint, fmt.Sprintf("answered with a redirect (HTTP %d), which the gateway does not follow", resp.StatusCode),
			redirectCause(resp))
	case resp.StatusCode != http.StatusOK:
		return "", 0, x.unavailable(fmt.Sprintf("the token endpoint answered HTTP %d", resp.StatusCode))
	case len(body) > maxExchangeDocument:
		return "", 0, x.unavailable(fmt.Sprintf("the token endpoint's answer is longer than %d bytes", maxExchangeDocument))
	case jsonErr != nil:
		return "", 0, x.unavailable("the token endpoint's answer is not a JSON token response: " + textcut.Clip(jsonErr.Error()))
	case ans.AccessToken == "":
		return "", 0, x.unavailable("the token endpoint's answer has no access_token")
	case ans.TokenType != "" && !strings.EqualFold(ans.TokenType, "Bearer") && !strings.EqualFold(ans.TokenType, "N_A"):
		what := fmt.Sprintf("issued a %q token, and the gateway sends bearer tokens only", clip(ans.TokenType))
		return "", 0, x.misconfigured(endpoint, what, "token_type "+strconv.Quote(clip(ans.TokenType)))
	}
	life, ok := lifetime(ans.ExpiresIn)
	if !ok {
		return "", 0, x.misconfigured(endpoint, "issued a token with an expires_in that is not a number of seconds",
			fmt.Sprintf("expires_in %s is not a non-negative integer of at most %d seconds (RFC 6749 §5.1)", clip(string(ans.ExpiresIn)), maxExpiresIn))
	}
	return ans.AccessToken, life, nil
}

// maxExpiresIn is the largest expires_in taken (seconds): the largest
// time.Duration.
const maxExpiresIn = math.MaxInt64 / int64(time.Second)

// lifetime is a token answer's expires_in (RFC 6749 §5.1: a number of
// seconds): 0 when absent or null; false when it is not a JSON number
// (a string, 1.5, -1) or overflows (1e308). An integral number written
// as a float (60.0, 6e1) is taken.
func lifetime(raw json.RawMessage) (time.Duration, bool) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return 0, true
	}
	if s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return 0, false // a string, a bool, an object
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f > float64(maxExpiresIn) {
		return 0, false
	}
	return time.Duration(int64(f)) * time.Second, true
}

// isRedirect: a 3xx that names somewhere else (not 304).
func isRedirect(status int) bool {
	return status >= 300 && status < 400 && status != http.StatusNotModified
}

// redirectCause names a redirect answer and its Location (redacted,
// clipped) for the operator's WARN.
func redirectCause(resp *http.Response) string {
	loc := resp.Header.Get("Location")
	if u, err := url.Parse(loc); err == nil {
		loc = u.Redacted()
	}
	if loc == "" {
		return fmt.Sprintf("HTTP %d without a Location; redirects are not followed", resp.StatusCode)
	}
	return fmt.Sprintf("HTTP %d to %s; redirects are not followed: configure that address", resp.StatusCode, strconv.Quote(textcut.Clip(loc)))
}

// isErrorCode: an RFC 6749 §5.2 error code (NQSCHAR, short), safe to
// repeat in an answer.
func isErrorCode(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// redactURLError is err's text without its URL's query (a url.Error
// names the endpoint, which holds no secret; the form is in the body).
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			return ue.Op + " " + u.Redacted() + ": " + ue.Err.Error()
		}
	}
	return err.Error()
}

// unavailable is 503 issuer-unavailable for the upstream's server. The
// explanation names the upstream only; the server's address and what
// failed (a dial error, a status) are the Cause, for the operator's log.
func (x *TokenExchange) unavailable(what string) *Refusal {
	server := x.cfg.Issuer
	if server == "" {
		server = x.cfg.TokenEndpoint
	}
	return &Refusal{Upstream: x.cfg.Upstream, Reason: ReasonIssuerUnavailable, Status: StatusIssuerUnavailable, RetryAfter: x.cfg.RetryAfter,
		Cause:       fmt.Sprintf("authorization server %s: %s", server, what),
		Explanation: fmt.Sprintf("the authorization server of upstream %s cannot be reached at the moment; retry after Retry-After seconds", x.cfg.Upstream)}
}

// misconfigured is 502 token-exchange-misconfigured: the authorization
// server at endpoint did something (what, for the caller) that no
// caller's token causes and that only the operator can fix. The
// explanation names the upstream and says so; cause (the server's
// answer) and the endpoint are the Cause, for the operator's WARN.
func (x *TokenExchange) misconfigured(endpoint, what, cause string) *Refusal {
	return x.misconfiguredAt("token endpoint", endpoint, what, cause)
}

// misconfiguredMetadata is misconfigured for a fault of the issuer's
// metadata at metadata (a redirect, another issuer).
func (x *TokenExchange) misconfiguredMetadata(metadata, what, cause string) *Refusal {
	return x.misconfiguredAt("authorization server metadata", metadata, what, cause)
}

// misconfiguredAt is the 502 of a fault at the URL at (password
// redacted), named kind in the Cause.
func (x *TokenExchange) misconfiguredAt(kind, at, what, cause string) *Refusal {
	return &Refusal{Upstream: x.cfg.Upstream, Reason: ReasonExchangeMisconfigured, Status: StatusExchangeMisconfigured,
		Cause: fmt.Sprintf("%s %s: %s", kind, secureurl.Redacted(at), cause),
		Explanation: fmt.Sprintf("the authorization server of upstream %s %s: a fault in this gateway's configuration, not in the caller's token; the operator's log has the cause",
			x.cfg.Upstream, what)}
}

// metadataFault is a metadata document that no retry mends: it names
// another issuer, or its URL answers a redirect.
type metadataFault struct{ metadata, what, cause string }

func (e *metadataFault) Error() string { return "the metadata at " + e.metadata + ": " + e.cause }

// insecureEndpoint is a token endpoint the issuer's metadata (at
// metadata) names with http on a host that is not loopback: the gateway
// sends it nothing.
type insecureEndpoint struct{ metadata, endpoint string }

func (e *insecureEndpoint) Error() string {
	return fmt.Sprintf("the metadata at %s names the token endpoint %s, http on a host that is not loopback", e.metadata, e.endpoint)
}

// tokenEndpoint is TokenEndpoint, or the one the issuer's metadata
// names (discovered once; a failure is remembered for RetryAfter).
func (x *TokenExchange) tokenEndpoint(ctx context.Context) (string, error) {
	x.mu.Lock()
	if x.endpoint != "" {
		defer x.mu.Unlock()
		return x.endpoint, nil
	}
	if x.metaErr != nil && x.now().Sub(x.metaTry) < x.cfg.RetryAfter {
		defer x.mu.Unlock()
		return "", x.metaErr
	}
	x.mu.Unlock()
	v, err, _ := x.flight.Do("\x00metadata", func() (any, error) {
		var last error
		var insecure *insecureEndpoint
		var fault *metadataFault // the first, in the order tried
		for _, u := range MetadataURLs(x.cfg.Issuer) {
			var m struct {
				Issuer        string `json:"issuer"`
				TokenEndpoint string `json:"token_endpoint"`
			}
			if err := x.getJSON(ctx, u, &m); err != nil {
				var f *metadataFault
				if errors.As(err, &f) && fault == nil {
					fault = f
				}
				last = err
				continue
			}
			if m.Issuer != x.cfg.Issuer {
				// RFC 8414 §3.3: a document naming another issuer is not
				// used; no retry mends it.
				if fault == nil {
					fault = &metadataFault{metadata: u, what: "publishes metadata for another issuer",
						cause: fmt.Sprintf("names issuer %s, and the configured issuer is %s (RFC 8414 §3.3: they must be identical)",
							strconv.Quote(clip(m.Issuer)), strconv.Quote(x.cfg.Issuer))}
				}
				continue
			}
			switch err := secureurl.Check(m.TokenEndpoint); {
			case errors.Is(err, secureurl.ErrCleartext) && strings.HasPrefix(strings.ToLower(m.TokenEndpoint), "http:"):
				// Never sent the secret or a token: fail closed.
				insecure = &insecureEndpoint{metadata: u, endpoint: m.TokenEndpoint}
				continue
			case errors.Is(err, secureurl.ErrUserinfo) || errors.Is(err, secureurl.ErrFragment):
				// Not a token endpoint any retry mends.
				if fault == nil {
					fault = &metadataFault{metadata: u, what: "names a token endpoint the gateway does not use",
						cause: fmt.Sprintf("token_endpoint %s %v", strconv.Quote(clip(secureurl.Redacted(m.TokenEndpoint))), err)}
				}
				continue
			case err != nil:
				last = fmt.Errorf("the metadata at %s has no usable token_endpoint", u)
				continue
			}
			return m.TokenEndpoint, nil
		}
		switch {
		case insecure != nil:
			return nil, insecure // the fault to report, whatever the other document said
		case fault != nil:
			return nil, fault // rather than the other URL's 404
		}
		return nil, last
	})
	x.mu.Lock()
	defer x.mu.Unlock()
	if err != nil {
		x.metaErr, x.metaTry = err, x.now()
		return "", err
	}
	x.endpoint, x.metaErr = v.(string), nil
	return x.endpoint, nil
}

// MetadataURLs are the authorization server metadata URLs of issuer,
// in the order to try them: RFC 8414 §3.1 (the well-known path inserted
// before the issuer's path), then OpenID Connect Discovery §4
// (appended). An issuer that does not parse has none.
func MetadataURLs(issuer string) []string {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil
	}
	p := strings.TrimSuffix(u.Path, "/")
	origin := u.Scheme + "://" + u.Host
	return []string{origin + "/.well-known/oauth-authorization-server" + p, origin + p + "/.well-known/openid-configuration"}
}

// getJSON reads the JSON document at u (200 only, bounded).
func (x *TokenExchange) getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := x.client.Do(req)
	if err != nil {
		return errors.New(redactURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExchangeDocument+1))
	if err != nil {
		return err
	}
	if isRedirect(resp.StatusCode) {
		return &metadataFault{metadata: u, what: fmt.Sprintf("answered its metadata request with a redirect (HTTP %d), which the gateway does not follow", resp.StatusCode),
			cause: redirectCause(resp)}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %d", u, resp.StatusCode)
	}
	if len(body) > maxExchangeDocument {
		return fmt.Errorf("GET %s answered more than %d bytes", u, maxExchangeDocument)
	}
	return json.Unmarshal(body, out)
}

var _ Policy = (*TokenExchange)(nil)
