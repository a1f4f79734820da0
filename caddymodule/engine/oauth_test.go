package engine

import (
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// The OAuth world of these tests: one resource (this gateway), another
// resource (a token for it has the wrong audience), the agent's client,
// a client no agent lists, and the gateway's own client for
// introspection.
const (
	oauthResource      = "http://127.0.0.1:8443"
	oauthOtherResource = "http://other.test/"
	oauthOpaque        = "http://127.0.0.1:9443"
	benchClient        = "bench-client"
	otherAgentClient   = "other-client"
	strayClient        = "stray-client"
	clientSecret       = "client-secret-0123456789"
	otherAgentID       = "1111111111111111111111111111111111111111111111111111111111111111"
)

// oauthWorld starts the authorization server and an engine under
// identity oauth whose agents are the bench agent (client
// bench-client) and another agent (client other-client), upstream
// calls counted in hits.
type oauthWorld struct {
	as   *oauthtest.Server
	te   *testEngine
	hits *atomic.Int64
}

func newOAuthWorld(t testing.TB, adjust ...func(*OAuthConfig)) *oauthWorld {
	t.Helper()
	as := oauthtest.Start(t, oauthtest.Config{
		Resources: map[string]oauthtest.Resource{
			oauthResource:      {Scopes: []string{"rcns:negotiate", "bench:read"}, Format: "jwt"},
			oauthOtherResource: {Scopes: []string{"bench:read"}, Format: "jwt"},
			oauthOpaque:        {Scopes: []string{"rcns:negotiate", "bench:read"}, Format: "opaque"},
		},
		Clients: []oauthtest.Client{
			oauthtest.ConfidentialClient(benchClient, clientSecret),
			oauthtest.ConfidentialClient(otherAgentClient, clientSecret),
			oauthtest.ConfidentialClient(strayClient, clientSecret),
			oauthtest.ConfidentialClient("gateway", clientSecret),
		},
		IntrospectionClients: []string{"gateway"},
	})
	w := &oauthWorld{as: as, hits: &atomic.Int64{}}
	agents := oauthAgents(t)
	upstream := countingUpstream(t, w.hits)
	w.te = newTestEngine(t, func(c *Config) {
		c.Identity = IdentityOAuth
		c.Agents = []string{agents}
		c.Upstreams["bench"].URL = upstream
		c.OAuth = &OAuthConfig{Issuer: as.Issuer(), Resource: oauthResource, ClientID: "gateway", ClientSecret: clientSecret,
			JWKSMinRefresh: Duration(time.Millisecond)}
		for _, f := range adjust {
			f(c.OAuth)
		}
	})
	return w
}

// oauthAgents writes the agent documents of the OAuth tests: the bench
// agent, client benchClient, and another agent, client otherAgentClient.
func oauthAgents(t testing.TB) string {
	t.Helper()
	agents := t.TempDir()
	bench, err := os.ReadFile(filepath.Join("..", "..", "scripts", "bench", "docs", "agents", "bench-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The bench document lists loadcmp's client (scripts/bench/loadcmp);
	// here it is this test's client instead.
	bench = regexp.MustCompile(`(?m)^oauth_clients:.*\n`).ReplaceAll(bench, nil)
	writeFile(t, filepath.Join(agents, "bench.yaml"), string(bench)+"oauth_clients: ["+benchClient+"]\n")
	writeFile(t, filepath.Join(agents, "other.yaml"), "agent_id: \""+otherAgentID+"\"\nname: other\nowner_id: other-ops\ntrust_tier: 1\nscopes: [bench:read]\noauth_clients: ["+otherAgentClient+"]\n")
	return agents
}

func writeFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// countingUpstream is testUpstream counting its requests in hits.
func countingUpstream(t testing.TB, hits *atomic.Int64) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the upstream got an Authorization header: %q (tokens never travel upstream)", r.Header.Get("Authorization"))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"1","name":"item","price":1}`))
	})
	return serveLoopback(t, mux)
}

// fetch sends FETCH /items/1 with the bearer token and kv header pairs.
func (w *oauthWorld) fetch(t *testing.T, token string, kv ...string) *testAnswer {
	t.Helper()
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		hdr.Add(kv[i], kv[i+1])
	}
	return w.te.serve(t, "FETCH", "/items/1", hdr, "")
}

func (w *oauthWorld) token(t testing.TB, client, resource string, scopes ...string) string {
	t.Helper()
	tok, err := w.as.ClientCredentials(client, clientSecret, resource, scopes...)
	if err != nil {
		t.Fatalf("token for %s: %v", client, err)
	}
	return tok
}

// TestOAuthTokenNamesTheAgent: a JWT access token alone identifies the
// agent its client is registered to, with its grants bounded by the
// token's scopes, and tells nothing upstream.
func TestOAuthTokenNamesTheAgent(t *testing.T) {
	w := newOAuthWorld(t)
	a := w.fetch(t, w.token(t, benchClient, oauthResource, "rcns:negotiate", "bench:read"))
	if a.Status != 200 {
		t.Fatalf("answer %s, want 200", a)
	}
	for k, want := range map[string]string{"Agent-ID": testAgent, "Verification-Path": "oauth", "Owner-ID": "bench-ops"} {
		if got := a.header(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if w.hits.Load() != 1 {
		t.Fatalf("upstream hits = %d, want 1", w.hits.Load())
	}
	// The same token with the Agent-ID header of its own agent is fine.
	if a := w.fetch(t, w.token(t, benchClient, oauthResource, "bench:read"), "Agent-ID", testAgent); a.Status != 200 {
		t.Fatalf("token + own Agent-ID: %s, want 200", a)
	}
}

// TestOAuthBadTokens: each bad token is refused in the identity step with
// its reason and a Bearer challenge, and nothing runs upstream.
func TestOAuthBadTokens(t *testing.T) {
	w := newOAuthWorld(t)
	good := w.token(t, benchClient, oauthResource, "rcns:negotiate", "bench:read")
	stranger, _ := oauthtest.NewRSAKey("not-published")
	tests := []struct {
		name, token   string
		kv            []string
		status        int
		reason, error string
	}{
		{"no credential", "", nil, 401, "agent-unauthenticated", ""},
		{"another resource's token", w.token(t, benchClient, oauthOtherResource, "bench:read"), nil, 401, "token-audience-mismatch", "invalid_token"},
		{"a key the issuer does not publish", forge(t, stranger, jose.RS256, good), nil, 401, "token-invalid", "invalid_token"},
		{"alg none", unsigned(t, good), nil, 401, "token-invalid", "invalid_token"},
		{"HS256 under the issuer's public key", hmacForge(t, w.as, good), nil, 401, "token-invalid", "invalid_token"},
		{"too few scopes", w.token(t, benchClient, oauthResource, "rcns:negotiate"), nil, 403, "insufficient-scope", "insufficient_scope"},
		{"an opaque token the issuer reports inactive", "opaque-" + strings.Repeat("x", 40), nil, 401, "token-inactive", "invalid_token"},
		{"a client no agent lists", w.token(t, strayClient, oauthResource, "bench:read"), nil, 401, "oauth-client-unknown", "invalid_token"},
		{"bearer plus another agent's Agent-ID", good, []string{"Agent-ID", otherAgentID}, 401, "identity-conflict", "invalid_token"},
		{"two Authorization headers", good, []string{"Authorization", "Bearer " + good}, 400, "invalid-authorization", "invalid_request"},
		{"Bearer with two tokens", good + " " + good, nil, 400, "invalid-authorization", "invalid_request"},
		// RFC 6750 §3.1: no Bearer credentials (another scheme, an empty
		// header) is 401 with a challenge and no error code; a malformed
		// Bearer credential (not "Bearer" 1*SP b64token, §2.1) is 400
		// invalid_request (a tab, "=====" and a non-ASCII token were 401).
		{"another scheme", "", []string{"Authorization", "Basic Zm9vOmJhcg=="}, 401, "agent-unauthenticated", ""},
		{"a made-up scheme", "", []string{"Authorization", "Token " + good}, 401, "agent-unauthenticated", ""},
		{"an empty Authorization", "", []string{"Authorization", ""}, 401, "agent-unauthenticated", ""},
		{"Bearer alone", "", []string{"Authorization", "Bearer"}, 400, "invalid-authorization", "invalid_request"},
		{"Bearer and spaces", "", []string{"Authorization", "Bearer   "}, 400, "invalid-authorization", "invalid_request"},
		{"Bearer, a tab, the token", "", []string{"Authorization", "Bearer\t" + good}, 400, "invalid-authorization", "invalid_request"},
		{"Bearer, a space and a tab", "", []string{"Authorization", "Bearer \t" + good}, 400, "invalid-authorization", "invalid_request"},
		{"padding alone", "=====", nil, 400, "invalid-authorization", "invalid_request"},
		{"padding inside", "abc=def", nil, 400, "invalid-authorization", "invalid_request"},
		{"a non-ASCII token", "é", nil, 400, "invalid-authorization", "invalid_request"},
		{"a comma", good + ",", nil, 400, "invalid-authorization", "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := w.hits.Load()
			a := w.fetch(t, tt.token, tt.kv...)
			if a.Status != tt.status || a.str("reason") != tt.reason {
				t.Fatalf("answer %s, want %d %s", a, tt.status, tt.reason)
			}
			ch := a.header("WWW-Authenticate")
			if !strings.HasPrefix(ch, "Bearer ") || !strings.Contains(ch, `resource_metadata="`+oauthResource+`/.well-known/oauth-protected-resource"`) {
				t.Errorf("WWW-Authenticate = %q, want a Bearer challenge naming the metadata", ch)
			}
			if tt.error != "" && !strings.Contains(ch, `error="`+tt.error+`"`) {
				t.Errorf("WWW-Authenticate = %q, want error=%q", ch, tt.error)
			}
			if tt.reason == "insufficient-scope" && !strings.Contains(ch, `scope="bench:read"`) {
				t.Errorf("WWW-Authenticate = %q, want scope=\"bench:read\" (every scope the operation needs)", ch)
			}
			if n := w.hits.Load() - before; n != 0 {
				t.Errorf("upstream hits = %d, want none", n)
			}
		})
	}
}

// TestOAuthExpiry: an expired token is refused past the skew; a token
// without exp is refused unless allowed.
func TestOAuthExpiry(t *testing.T) {
	w := newOAuthWorld(t, func(c *OAuthConfig) { c.ClockSkew = Duration(time.Second) })
	tok := w.token(t, benchClient, oauthResource, "bench:read")
	w.te.oauth.now = func() time.Time { return time.Now().Add(24 * time.Hour) }
	if a := w.fetch(t, tok); a.Status != 401 || a.str("reason") != "token-expired" {
		t.Fatalf("a day later: %s, want 401 token-expired", a)
	}
	w.te.oauth.now = time.Now
	if err := w.te.oauth.lifetime(true, time.Time{}, nil, nil); err == nil || err.Reason != "token-invalid" {
		t.Fatalf("no exp: %v, want token-invalid", err)
	}
	w.te.oauth.cfg.AllowNoExpiry = true
	if err := w.te.oauth.lifetime(true, time.Time{}, nil, nil); err != nil {
		t.Fatalf("no exp, allowed: %v", err)
	}
}

// TestOAuthKeyRotation: the issuer rotates its key; the gateway fetches
// the JWKS again on the unknown kid and accepts the new tokens.
func TestOAuthKeyRotation(t *testing.T) {
	w := newOAuthWorld(t)
	if a := w.fetch(t, w.token(t, benchClient, oauthResource, "bench:read")); a.Status != 200 {
		t.Fatalf("before rotation: %s", a)
	}
	priv, _ := oauthtest.NewECKey("rotated-2")
	if err := w.as.Restart(priv); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past jwks_min_refresh
	if a := w.fetch(t, w.token(t, benchClient, oauthResource, "bench:read")); a.Status != 200 {
		t.Fatalf("after rotation: %s, want 200", a)
	}
}

// TestOAuthIntrospection: an opaque token is introspected (RFC 7662)
// and the answer reused from the cache: the issuer down, the cached
// token still works and a new one gets 503 issuer-unavailable.
func TestOAuthIntrospection(t *testing.T) {
	w := newOAuthWorld(t, func(c *OAuthConfig) { c.Resource = oauthOpaque })
	tok := w.token(t, benchClient, oauthOpaque, "bench:read")
	if strings.Count(tok, ".") == 2 {
		t.Fatalf("want an opaque token, got a JWT")
	}
	if a := w.fetch(t, tok); a.Status != 200 || a.header("Verification-Path") != "oauth" {
		t.Fatalf("opaque token: %s, want 200", a)
	}
	fresh := w.token(t, benchClient, oauthOpaque, "bench:read")
	w.as.Stop()
	w.te.oauth.introMem.Wait()
	if a := w.fetch(t, tok); a.Status != 200 {
		t.Fatalf("cached opaque token, issuer down: %s, want 200", a)
	}
	before := w.hits.Load()
	a := w.fetch(t, fresh)
	if a.Status != 503 || a.str("reason") != "issuer-unavailable" || a.header("Retry-After") == "" {
		t.Fatalf("issuer down: %s (Retry-After %q), want 503 issuer-unavailable with Retry-After", a, a.header("Retry-After"))
	}
	if w.hits.Load() != before {
		t.Fatal("a request ran upstream while the issuer was down")
	}
}

// TestOAuthIssuerDownBeforeKeys: an engine that never read the issuer's
// keys answers 503 issuer-unavailable while the issuer is down, and
// logs the outage within the log bound (LogBurst WARN lines however
// many requests meet it).
func TestOAuthIssuerDownBeforeKeys(t *testing.T) {
	w := newOAuthWorld(t)
	core, logs := observer.New(zap.DebugLevel)
	w.te.oauth.log = zap.New(core)
	tok := w.token(t, benchClient, oauthResource, "bench:read")
	w.as.Stop()
	const n = 3 * LogBurst
	for range n {
		a := w.fetch(t, tok)
		if a.Status != 503 || a.str("reason") != "issuer-unavailable" || a.header("Retry-After") == "" {
			t.Fatalf("issuer down: %s, want 503 issuer-unavailable with Retry-After", a)
		}
	}
	if w.hits.Load() != 0 {
		t.Fatal("a request ran upstream while the issuer was down")
	}
	if got := logs.FilterMessage("oauth: the authorization server is unavailable").FilterLevelExact(zap.WarnLevel).Len(); got == 0 || got > LogBurst {
		t.Errorf("%d WARN lines for %d requests meeting the outage, want 1..%d", got, n, LogBurst)
	}
}

// forge re-signs the claims of tok with key (kid key.KeyID), as an
// attacker with their own key would.
func forge(t *testing.T, key jose.JSONWebKey, alg jose.SignatureAlgorithm, tok string) string {
	t.Helper()
	return resign(t, jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("at+jwt"), tok)
}

// resign signs the claims of tok with key and opts.
func resign(t *testing.T, key jose.SigningKey, opts *jose.SignerOptions, tok string) string {
	t.Helper()
	signer, err := jose.NewSigner(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := josejwt.Signed(signer).Claims(claimsOf(t, tok)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// payload is the decoded claims of a compact JWS.
func payload(t *testing.T, tok string) []byte {
	t.Helper()
	parts := strings.Split(tok, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// claimsOf is the claims of tok as a JSON object.
func claimsOf(t *testing.T, tok string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(payload(t, tok), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// unsigned is tok's claims under {"alg":"none"} with no signature.
func unsigned(t *testing.T, tok string) string {
	t.Helper()
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"at+jwt"}`))
	return hdr + "." + base64.RawURLEncoding.EncodeToString(payload(t, tok)) + "."
}

// hmacForge signs tok's claims with HS256 using the issuer's public RSA
// key's modulus as the secret, naming its kid: the key-confusion attack.
func hmacForge(t *testing.T, as *oauthtest.Server, tok string) string {
	t.Helper()
	set, err := as.JWKS()
	if err != nil || len(set.Keys) == 0 {
		t.Fatalf("JWKS: %v", err)
	}
	pub, ok := set.Keys[0].Key.(*rsa.PublicKey)
	if !ok {
		t.Fatalf("the issuer's key is %T, want RSA", set.Keys[0].Key)
	}
	return resign(t, jose.SigningKey{Algorithm: jose.HS256, Key: pub.N.Bytes()},
		(&jose.SignerOptions{}).WithHeader("kid", set.Keys[0].KeyID), tok)
}

// BenchmarkIdentityStep: a Tier B FETCH identified by a verified JWT
// access token (identity oauth, the JWKS cached) and by the Agent-ID
// header (identity header): the gap is what a token costs per request
// (issue target: at most 30 µs).
func BenchmarkIdentityStep(b *testing.B) {
	w := newOAuthWorld(b)
	tok := w.token(b, benchClient, oauthResource, "rcns:negotiate", "bench:read")
	header := newTestEngine(b)
	for _, c := range []struct {
		name string
		te   *testEngine
		hdr  func() http.Header
	}{
		{"header", header, func() http.Header { return agentHeader() }},
		{"oauth", w.te, func() http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			if a := c.te.serve(b, "FETCH", "/items/1", c.hdr(), ""); a.Status != 200 {
				b.Fatalf("answer %s", a)
			}
			b.ReportAllocs()
			for b.Loop() {
				c.te.serve(b, "FETCH", "/items/1", c.hdr(), "")
			}
		})
	}
}

// TestOAuthIssuerStalled: an issuer that accepts connections and never
// answers costs a request at most oauth.timeout, then 503
// issuer-unavailable with Retry-After; nothing runs, and the failure is
// remembered (the next request is refused without waiting again) until
// the retry window passes.
func TestOAuthIssuerStalled(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { <-stop; c.Close() }() // read nothing, answer nothing
		}
	}()
	hits := &atomic.Int64{}
	upstream := countingUpstream(t, hits)
	te := newTestEngine(t, func(c *Config) {
		c.Identity = IdentityOAuth
		c.Upstreams["bench"].URL = upstream
		c.OAuth = &OAuthConfig{Issuer: "http://" + l.Addr().String(), Resource: oauthResource, Timeout: Duration(300 * time.Millisecond)}
	})
	tok := "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJ4In0.c2ln" // JWT-shaped: needs the JWKS
	for i := range 2 {
		start := time.Now()
		a := te.serve(t, "FETCH", "/items/1", http.Header{"Authorization": {"Bearer " + tok}}, "")
		if a.Status != 503 || a.str("reason") != "issuer-unavailable" || a.header("Retry-After") == "" {
			t.Fatalf("request %d: %s, want 503 issuer-unavailable with Retry-After", i, a)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("request %d took %s: the stalled issuer was not bounded by oauth.timeout", i, took)
		}
	}
	if hits.Load() != 0 {
		t.Fatal("a request ran upstream while the issuer stalled")
	}
}

// TestBearerSyntax: what bearer takes as a token, what it leaves to
// other verifiers (no Bearer credentials: 401 without an error code) and
// what it refuses as a malformed Bearer credential (400
// invalid-authorization, RFC 6750 §3.1 invalid_request).
func TestBearerSyntax(t *testing.T) {
	for _, tc := range []struct {
		value string
		tok   string // the token taken
		mine  bool
		bad   bool
	}{
		{"Bearer abc.DEF-_~+/==", "abc.DEF-_~+/==", true, false},
		{"bearer abc", "abc", true, false},
		{"BEARER  abc ", "abc", true, false},
		{" Bearer abc\t", "abc", true, false},
		{"", "", false, false},
		{"   ", "", false, false},
		{"Basic Zm9vOmJhcg==", "", false, false},
		{"Token abc", "", false, false},
		{"Bearerabc", "", false, false},
		{"Bearer", "", true, true},
		{"Bearer\tabc", "", true, true},
		{"Bearer \tabc", "", true, true},
		{"Bearer =====", "", true, true},
		{"Bearer a=b", "", true, true},
		{"Bearer é", "", true, true},
		{"Bearer a b", "", true, true},
		{"Bearer a\tb", "", true, true},
		{"Bearer a,b", "", true, true},
	} {
		tok, mine, e := bearer(&agtp.Request{Header: http.Header{"Authorization": {tc.value}}})
		if tok != tc.tok || mine != tc.mine || (e != nil) != tc.bad || (e != nil && e.Reason != agtp.InvalidAuthorization.Token) {
			t.Errorf("bearer(%q) = %q, %v, %v; want %q, %v, refused %v", tc.value, tok, mine, e, tc.tok, tc.mine, tc.bad)
		}
	}
}

// TestOAuthSubjectUsableAsOwner: a token's sub becomes the answer's
// Owner-ID and the records' owner_id, so one that is not 1 to 256
// visible ASCII characters is refused 401 token-invalid before anything
// runs (helper-149: a sub holding CR LF broke the native door's answer
// after the request had run); a sub outside the Owner-ID header's
// narrower grammar, as identity providers issue ("auth0|abc123"), is
// served and named as it is.
func TestOAuthSubjectUsableAsOwner(t *testing.T) {
	w := newOAuthWorld(t)
	priv, _ := oauthtest.NewECKey("subject-test")
	if err := w.as.Restart(priv); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past jwks_min_refresh
	good := w.token(t, benchClient, oauthResource, "rcns:negotiate", "bench:read")
	withSub := func(sub string) string {
		c := claimsOf(t, good)
		c["sub"] = sub
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return forge(t, priv, jose.ES256, "x."+base64.RawURLEncoding.EncodeToString(b)+".")
	}
	for _, sub := range []string{"a\r\nX-Evil: 1", "a b", "aé", strings.Repeat("a", 257), "a\x00"} {
		before := w.hits.Load()
		if a := w.fetch(t, withSub(sub)); a.Status != 401 || a.str("reason") != "token-invalid" || !strings.Contains(a.str("explanation"), "sub") {
			t.Errorf("sub %q: %s, want 401 token-invalid naming the sub", sub, a)
		}
		if n := w.hits.Load() - before; n != 0 {
			t.Errorf("sub %q: upstream hits = %d, want none", sub, n)
		}
	}
	a := w.fetch(t, withSub("auth0|abc123"))
	if a.Status != 200 || a.header("Owner-ID") != "auth0|abc123" {
		t.Fatalf("sub auth0|abc123: %s Owner-ID %q, want 200 and the sub as Owner-ID", a, a.header("Owner-ID"))
	}
}

// TestOAuthUnknownKeyWhileIssuerDown: a token signed by a key the
// gateway does not hold, while the issuer's JWKS cannot be read, is 503
// issuer-unavailable (retryable: the issuer may have rotated the key in
// during its outage), not 401 token-invalid (helper-149); tokens of the
// keys held are served meanwhile. (With the issuer up, an unknown key
// is 401: TestOAuthBadTokens.)
func TestOAuthUnknownKeyWhileIssuerDown(t *testing.T) {
	w := newOAuthWorld(t)
	good := w.token(t, benchClient, oauthResource, "rcns:negotiate", "bench:read")
	if a := w.fetch(t, good); a.Status != 200 {
		t.Fatalf("before: %s, want 200", a)
	}
	stranger, _ := oauthtest.NewRSAKey("rotated-in")
	unknown := forge(t, stranger, jose.RS256, good)
	w.as.Stop()
	time.Sleep(5 * time.Millisecond) // past jwks_min_refresh
	if a := w.fetch(t, unknown); a.Status != 503 || a.str("reason") != "issuer-unavailable" || a.header("Retry-After") == "" {
		t.Fatalf("unknown kid, issuer down: %s, want 503 issuer-unavailable with Retry-After", a)
	}
	// Within the back-off too (the fetch is not tried again).
	if a := w.fetch(t, unknown); a.Status != 503 || a.str("reason") != "issuer-unavailable" {
		t.Fatalf("unknown kid, issuer down, again: %s, want 503 issuer-unavailable", a)
	}
	if a := w.fetch(t, good); a.Status != 200 {
		t.Fatalf("a held key's token, issuer down: %s, want 200", a)
	}
}
