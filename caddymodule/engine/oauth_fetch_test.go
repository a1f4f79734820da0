package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/oauthtest"
	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeIssuer is an authorization server the test steers: its RFC 8414
// metadata and JWKS, each answered after delay, or failing (fail: 500,
// hang: never answered until the test ends), with the fetches counted.
// Tokens are signed by its one key (kid fake-1).
type fakeIssuer struct {
	url  string
	priv jose.JSONWebKey
	pub  jose.JSONWebKey

	mu        sync.Mutex
	delay     time.Duration
	jwksFail  bool
	jwksHang  bool
	jwksBody  string         // when set, the JWKS answer instead of the key set
	meta      map[string]any // members set over the metadata's
	metaFetch atomic.Int64
	jwksFetch atomic.Int64
}

func newFakeIssuer(t *testing.T) *fakeIssuer {
	t.Helper()
	f := &fakeIssuer{}
	f.priv, f.pub = oauthtest.NewECKey("fake-1")
	done := make(chan struct{})
	mux := http.NewServeMux()
	wait := func() (fail, hang bool, body string) {
		f.mu.Lock()
		d := f.delay
		fail, hang, body = f.jwksFail, f.jwksHang, f.jwksBody
		f.mu.Unlock()
		select {
		case <-time.After(d):
		case <-done:
		}
		return fail, hang, body
	}
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		f.metaFetch.Add(1)
		wait()
		w.Header().Set("Content-Type", "application/json")
		m := map[string]any{"issuer": f.url, "jwks_uri": f.url + "/jwks",
			"token_endpoint": f.url + "/token", "response_types_supported": []string{"code"},
			"code_challenge_methods_supported": []string{"S256"}}
		f.mu.Lock()
		maps.Copy(m, f.meta)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(m)
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		f.jwksFetch.Add(1)
		fail, hang, body := wait()
		switch {
		case hang:
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		case fail:
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if body != "" {
			_, _ = w.Write([]byte(body))
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{f.pub}})
	})
	f.url = serveLoopback(t, mux)
	t.Cleanup(func() { close(done) })
	return f
}

// set changes the issuer's behaviour under its lock.
func (f *fakeIssuer) set(fn func(*fakeIssuer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// token is an access token for benchClient at oauthResource, typed typ
// ("" for no typ header).
func (f *fakeIssuer) token(t *testing.T, typ string) string {
	t.Helper()
	opts := &jose.SignerOptions{}
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: f.priv}, opts)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := josejwt.Signed(signer).Claims(map[string]any{
		"iss": f.url, "aud": oauthResource, "client_id": benchClient, "sub": benchClient,
		"scope": "rcns:negotiate bench:read", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeIssuerEngine is an engine under identity oauth trusting f, with
// adjust applied to its oauth settings.
func fakeIssuerEngine(t *testing.T, f *fakeIssuer, adjust ...func(*OAuthConfig)) *testEngine {
	t.Helper()
	hits := &atomic.Int64{}
	upstream := countingUpstream(t, hits)
	agents := oauthAgents(t)
	return newTestEngine(t, func(c *Config) {
		c.Identity = IdentityOAuth
		c.Agents = []string{agents}
		c.Upstreams["bench"].URL = upstream
		c.OAuth = &OAuthConfig{Issuer: f.url, Resource: oauthResource, Timeout: Duration(2 * time.Second)}
		for _, fn := range adjust {
			fn(c.OAuth)
		}
	})
}

// serveToken sends FETCH /items/1 with the bearer token under ctx.
func serveToken(t *testing.T, te *testEngine, ctx context.Context, tok string) *testAnswer {
	t.Helper()
	in := &agtp.Request{Binding: agtp.BindingHTTP, Method: "FETCH", Target: "/items/1", URL: &url.URL{Path: "/items/1"},
		Host: "127.0.0.1", Header: http.Header{"Authorization": {"Bearer " + tok}}, Loopback: true}
	resp := te.Serve(ctx, in)
	a := &testAnswer{Response: resp}
	_ = json.Unmarshal(resp.Body, &a.body)
	return a
}

// TestOAuthFetchOutlivesItsCaller: the issuer's metadata and keys are
// fetched once for every request waiting on them, and a caller that
// hangs up does not cancel that fetch for the others (found by review:
// the fetch ran under the first caller's context, so a client that
// disconnected at once failed every waiting request with 503, and the
// failed metadata read was remembered for 2 s).
func TestOAuthFetchOutlivesItsCaller(t *testing.T) {
	f := newFakeIssuer(t)
	f.set(func(f *fakeIssuer) { f.delay = 300 * time.Millisecond })
	te := fakeIssuerEngine(t, f)
	tok := f.token(t, "at+jwt")

	// The first caller gives up after 50 ms, while the metadata read it
	// started is still under way.
	gone, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	first := make(chan *testAnswer, 1)
	go func() { first <- serveToken(t, te, gone, tok) }()
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	if a := serveToken(t, te, t.Context(), tok); a.Status != 200 {
		t.Fatalf("a request waiting on the fetch the first caller started: %s, want 200", a)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("the second request took %s: it should have waited for the one fetch (two 300 ms reads)", took)
	}
	a := <-first
	if a.Status == 200 {
		t.Errorf("the caller that hung up after 50 ms got 200, want a refusal (its context ended first)")
	}
	if m, k := f.metaFetch.Load(), f.jwksFetch.Load(); m != 1 || k != 1 {
		t.Errorf("metadata fetched %d times, JWKS %d times, want 1 and 1 (one shared fetch)", m, k)
	}
}

// TestOAuthJWKSFailureBackoff: a JWKS fetch that fails is not tried
// again for issuerRetryAfter seconds, whatever asks, so a dead issuer
// costs neither it nor the requests a fetch each; with no keys held the
// answer is 503 at once.
func TestOAuthJWKSFailureBackoff(t *testing.T) {
	f := newFakeIssuer(t)
	f.set(func(f *fakeIssuer) { f.jwksFail = true })
	te := fakeIssuerEngine(t, f, func(c *OAuthConfig) { c.JWKSMinRefresh = Duration(time.Millisecond) })
	for i := range 10 {
		// Valid tokens and made-up kids alike.
		tok := f.token(t, "at+jwt")
		if i%2 == 1 {
			tok = "eyJhbGciOiJFUzI1NiIsImtpZCI6Im1hZGUtdXAifQ.eyJzdWIiOiJ4In0.c2ln"
		}
		a := serveToken(t, te, t.Context(), tok)
		if a.Status != 503 || a.str("reason") != "issuer-unavailable" {
			t.Fatalf("request %d, JWKS failing, no keys held: %s, want 503 issuer-unavailable", i, a)
		}
	}
	if n := f.jwksFetch.Load(); n != 1 {
		t.Errorf("10 requests within the retry window fetched the JWKS %d times, want 1", n)
	}
}

// TestOAuthStaleKeysRefreshInBackground: keys older than jwks_max_age
// keep verifying while a fresh fetch runs in the background: an issuer
// that hangs delays no request, and is asked again only after the retry
// window.
func TestOAuthStaleKeysRefreshInBackground(t *testing.T) {
	f := newFakeIssuer(t)
	te := fakeIssuerEngine(t, f, func(c *OAuthConfig) { c.JWKSMaxAge = Duration(time.Millisecond) })
	tok := f.token(t, "at+jwt")
	if a := serveToken(t, te, t.Context(), tok); a.Status != 200 {
		t.Fatalf("keys fetched: %s, want 200", a)
	}
	f.set(func(f *fakeIssuer) { f.jwksHang = true })
	time.Sleep(5 * time.Millisecond) // past jwks_max_age
	for i := range 20 {
		start := time.Now()
		// A new token each time: not a cache hit.
		a := serveToken(t, te, t.Context(), f.token(t, "at+jwt"))
		if a.Status != 200 {
			t.Fatalf("request %d with stale keys, issuer hanging: %s, want 200 from the keys held", i, a)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("request %d took %s: it waited for the hanging issuer (timeout 2 s)", i, took)
		}
	}
	// The background refresh runs on a goroutine of its own: on a busy
	// machine it may reach the issuer only after the loop.
	for deadline := time.Now().Add(2 * time.Second); f.jwksFetch.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := f.jwksFetch.Load(); n != 2 {
		t.Errorf("JWKS fetched %d times, want 2 (the first, then one background refresh still hanging)", n)
	}
}

// TestOAuthJWKSWithoutKeys: a JWKS answer without keys (no "keys"
// member, or an empty one) is a failed fetch, 503 issuer-unavailable,
// not a key set that refuses every token as signed by an unknown key
// (401, which makes MCP clients throw their token away).
func TestOAuthJWKSWithoutKeys(t *testing.T) {
	for _, body := range []string{`{"foo":1}`, `{"keys":[]}`} {
		t.Run(body, func(t *testing.T) {
			f := newFakeIssuer(t)
			f.set(func(f *fakeIssuer) { f.jwksBody = body })
			te := fakeIssuerEngine(t, f)
			a := serveToken(t, te, t.Context(), f.token(t, "at+jwt"))
			if a.Status != 503 || a.str("reason") != "issuer-unavailable" {
				t.Fatalf("JWKS %s: %s, want 503 issuer-unavailable", body, a)
			}
		})
	}
}

// TestOAuthTokenType: a JWT typed as another kind of token (a typ ending
// in +jwt but not at+jwt) is refused; JWT and no typ are accepted unless
// require_at_jwt (RFC 9068 §4), which accepts at+jwt alone.
func TestOAuthTokenType(t *testing.T) {
	f := newFakeIssuer(t)
	lenient := fakeIssuerEngine(t, f)
	strict := fakeIssuerEngine(t, f, func(c *OAuthConfig) { c.RequireATJWT = true })
	for _, tt := range []struct {
		typ             string
		lenient, strict int
	}{
		{"at+jwt", 200, 200},
		{"application/at+jwt", 200, 200},
		{"AT+JWT", 200, 200},
		{"JWT", 200, 401},
		{"", 200, 401},
		{"logout+jwt", 401, 401},
		{"rcns-assertion+jwt", 401, 401},
		{"dpop+jwt", 401, 401},
		// typ is a media type (RFC 7515 §4.1.9): whitespace, parameters,
		// case and the application/ prefix do not make another kind of
		// JWT pass (they were accepted when the typ did not end in +jwt).
		{"id_token+jwt", 401, 401},
		{"id_token+jwt ", 401, 401},
		{" Application/ID_Token+JWT", 401, 401},
		{"x+jwt;q=1", 401, 401},
		{"logout+jwt; charset=utf-8", 401, 401},
		{"at+jwt; x=1", 200, 200},
		{"application/at+jwt ", 200, 200},
		{"application/jwt", 200, 401},
		{"text/plain", 200, 401},
		{"at+jwt;", 200, 200}, // an empty parameter list (mime.ParseMediaType takes it)
		// Not a media type: refused.
		{"at +jwt", 401, 401},
		{"at+jwt/", 401, 401},
		{"id_token+jwt;q", 401, 401},
		{"a/b/c", 401, 401},
		{"é+jwt", 401, 401},
	} {
		tok := f.token(t, tt.typ)
		for _, c := range []struct {
			name string
			te   *testEngine
			want int
		}{{"lenient", lenient, tt.lenient}, {"require_at_jwt", strict, tt.strict}} {
			a := serveToken(t, c.te, t.Context(), tok)
			if a.Status != c.want || (c.want == 401 && a.str("reason") != "token-invalid") {
				t.Errorf("typ %q, %s: %s, want %d", tt.typ, c.name, a, c.want)
			}
		}
	}
}

// TestOAuthRequireATJWTRealIssuer: oidc-provider, the authorization
// server make demo and the tests run, types its JWT access tokens
// at+jwt, so require_at_jwt accepts them (docs/operator-guide.md says
// so).
func TestOAuthRequireATJWTRealIssuer(t *testing.T) {
	w := newOAuthWorld(t, func(c *OAuthConfig) { c.RequireATJWT = true })
	if a := w.fetch(t, w.token(t, benchClient, oauthResource, "bench:read")); a.Status != 200 {
		t.Fatalf("oidc-provider's token under require_at_jwt: %s, want 200", a)
	}
}

// TestOAuthDiscoveredURLsNeedTLS: a jwks_uri or introspection_endpoint
// the issuer's metadata names over http on a host that is not loopback
// is not used (the configured ones are refused at load: the same rule
// for discovered ones): no keys read from it, no client secret or token
// sent to it; 503 issuer-unavailable, the WARN naming the URL (found by
// helper-79: only the configured URLs were checked). The .invalid hosts resolve
// nowhere: had the gateway tried them, the answer would be the same 503
// with a resolution error in the WARN, which the test reads.
func TestOAuthDiscoveredURLsNeedTLS(t *testing.T) {
	f := newFakeIssuer(t)
	f.set(func(f *fakeIssuer) { f.meta = map[string]any{"jwks_uri": "http://as.invalid/jwks"} })
	te, logs := warnLogged(fakeIssuerEngine(t, f))
	a := serveToken(t, te, t.Context(), f.token(t, "at+jwt"))
	if a.Status != 503 || a.str("reason") != "issuer-unavailable" || f.jwksFetch.Load() != 0 {
		t.Fatalf("a JWT under a cleartext jwks_uri: %s", a)
	}
	if w := logs.FilterMessageSnippet("unavailable").All(); len(w) == 0 || !strings.Contains(fmt.Sprint(w[0].ContextMap()), "http://as.invalid/jwks") ||
		!strings.Contains(fmt.Sprint(w[0].ContextMap()), "no keys are read from it") {
		t.Fatalf("WARN lines: %v", logs.All())
	}

	g := newFakeIssuer(t)
	g.set(func(f *fakeIssuer) { f.meta = map[string]any{"introspection_endpoint": "http://as.invalid/introspect"} })
	ti := fakeIssuerEngine(t, g, func(c *OAuthConfig) { c.ClientID, c.ClientSecret = "rcns-gateway", "s3cret" })
	a = serveToken(t, ti, t.Context(), "an-opaque-token")
	if a.Status != 503 || a.str("reason") != "issuer-unavailable" || !strings.Contains(a.str("explanation"), "nothing was sent to it") {
		t.Fatalf("an opaque token under a cleartext introspection_endpoint: %s", a)
	}
}

// TestOAuthIssuerWithoutPKCE: an issuer whose metadata does not
// advertise PKCE (code_challenge_methods_supported: a client's concern,
// and a machine-to-machine issuer need not list it) still verifies
// tokens (found by helper-80: every request was 503 "the issuer's keys
// (JWKS) could not be read", the WARN saying the server "does not
// implement PKCE": the MCP SDK's client-side metadata reader was used);
// a metadata document naming another issuer is still refused, named.
func TestOAuthIssuerWithoutPKCE(t *testing.T) {
	f := newFakeIssuer(t)
	f.set(func(f *fakeIssuer) { f.meta = map[string]any{"code_challenge_methods_supported": nil} })
	te := fakeIssuerEngine(t, f)
	if a := serveToken(t, te, t.Context(), f.token(t, "at+jwt")); a.Status != 200 {
		t.Fatalf("a token of an issuer without PKCE in its metadata: %s", a)
	}

	g := newFakeIssuer(t)
	g.set(func(f *fakeIssuer) { f.meta = map[string]any{"issuer": "https://other.example"} })
	tg, logs := warnLogged(fakeIssuerEngine(t, g))
	if a := serveToken(t, tg, t.Context(), g.token(t, "at+jwt")); a.Status != 503 || a.str("reason") != "issuer-unavailable" {
		t.Fatalf("metadata naming another issuer: %s", a)
	}
	if w := logs.All(); len(w) == 0 || !strings.Contains(fmt.Sprint(w[0].ContextMap()), `names issuer "https://other.example"`) {
		t.Fatalf("WARN lines: %v", w)
	}
}

// warnLogged points te's logger, and its OAuth verifier's, at an
// observer of WARN and above, and returns te and what it records.
func warnLogged(te *testEngine) (*testEngine, *observer.ObservedLogs) {
	core, logs := observer.New(zap.WarnLevel)
	te.logger = zap.New(core)
	te.oauth.log = te.logger
	return te, logs
}
