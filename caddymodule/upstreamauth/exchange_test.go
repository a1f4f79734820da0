package upstreamauth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/oauthtest"
	jose "github.com/go-jose/go-jose/v4"
)

const (
	gatewayResource = "http://gateway.test/"
	legacyResource  = "http://legacy.test/api"
	callbackURI     = "http://127.0.0.1/callback"
)

// startAS runs the real authorization server with token exchange for
// the gateway client.
func startAS(t testing.TB, account string) *oauthtest.Server {
	t.Helper()
	return oauthtest.Start(t, oauthtest.Config{
		Resources: map[string]oauthtest.Resource{
			gatewayResource: {Scopes: []string{"orders:read", "orders:write"}, TTLSeconds: 300},
			legacyResource:  {Scopes: []string{"orders:read", "orders:write"}, TTLSeconds: 120},
		},
		Clients: []oauthtest.Client{
			oauthtest.ConfidentialClient("gateway", "gateway-secret", oauthtest.GrantTokenExchange),
			// A gateway client the operator registered without the grant.
			oauthtest.ConfidentialClient("no-exchange", "no-exchange-secret"),
			oauthtest.PublicClient("app", callbackURI),
		},
		Account: account,
	})
}

// claimsOf verifies tok against the server's JWKS and returns its claims.
func claimsOf(t *testing.T, as *oauthtest.Server, tok string) map[string]any {
	t.Helper()
	set, err := as.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	jws, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	keys := set.Key(jws.Signatures[0].Header.KeyID)
	if len(keys) != 1 {
		t.Fatalf("kid %q not in the JWKS", jws.Signatures[0].Header.KeyID)
	}
	payload, err := jws.Verify(keys[0])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func bearerOf(t *testing.T, cred Credential) string {
	t.Helper()
	v := cred.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(v, "Bearer ")
	if !ok || tok == "" || cred.Kind != KindExchanged {
		t.Fatalf("credential %v", cred)
	}
	return tok
}

func issued(t *testing.T, as *oauthtest.Server) int {
	t.Helper()
	st, err := as.ExchangeStats()
	if err != nil {
		t.Fatal(err)
	}
	return st.Issued
}

// TestTokenExchange exchanges a user's token at the real authorization
// server: the upstream's audience, the user's sub, the gateway as actor;
// reused from the cache within its life and exchanged again after it;
// one exchange for concurrent callers; refusals named by the server's
// error code; 503 with Retry-After when the server is down.
func TestTokenExchange(t *testing.T) {
	as := startAS(t, "alice")
	user, err := as.AuthorizationCode("app", callbackURI, gatewayResource, "orders:read")
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewTokenExchange(TokenExchangeConfig{Upstream: "legacy", Issuer: as.Issuer(), ClientID: "gateway", ClientSecret: "gateway-secret",
		Resource: legacyResource})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	now := time.Now()
	var clockMu sync.Mutex
	x.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	caller := Caller{AgentID: strings.Repeat("a", 64), Token: user, Subject: "alice", OwnerID: "alice"}

	cred, r := x.Resolve(context.Background(), caller, []string{"orders:read"})
	if r != nil {
		t.Fatal(r)
	}
	tok := bearerOf(t, cred)
	if tok == user {
		t.Fatal("the caller's own token was returned")
	}
	c := claimsOf(t, as, tok)
	act, _ := c["act"].(map[string]any)
	if c["aud"] != legacyResource || c["sub"] != "alice" || c["scope"] != "orders:read" || act["sub"] != "gateway" {
		t.Errorf("exchanged claims %v", c)
	}
	if n := issued(t, as); n != 1 {
		t.Fatalf("%d exchanges", n)
	}

	// Within its life: the same token, no exchange; concurrent callers too.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cred, r := x.Resolve(context.Background(), caller, []string{"orders:read", "orders:read"})
			if r != nil || cred.Header.Get("Authorization") != "Bearer "+tok {
				t.Errorf("cached: %v %v", cred, r)
			}
		}()
	}
	wg.Wait()
	if n := issued(t, as); n != 1 {
		t.Fatalf("%d exchanges after cached calls, want 1", n)
	}
	// Other scopes: another exchange, and eight concurrent misses share it.
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, r := x.Resolve(context.Background(), caller, nil); r != nil {
				t.Error(r)
			}
		}()
	}
	wg.Wait()
	if n := issued(t, as); n != 2 {
		t.Fatalf("%d exchanges after eight concurrent misses of one key, want 2", n)
	}

	// After its life (120 s less the 10 s margin): exchanged again.
	clockMu.Lock()
	now = now.Add(111 * time.Second)
	clockMu.Unlock()
	cred, r = x.Resolve(context.Background(), caller, []string{"orders:read"})
	if r != nil {
		t.Fatal(r)
	}
	if bearerOf(t, cred) == tok || issued(t, as) != 3 {
		t.Errorf("after its life: same token %v, %d exchanges", bearerOf(t, cred) == tok, issued(t, as))
	}

	// Refusals: named by the server's error code, never a token. The
	// caller's token refused is 424 token-exchange-refused; the
	// gateway's own client refused (a wrong client_secret) is the
	// gateway's fault, 502
	// token-exchange-misconfigured with the server's answer in the
	// Cause for the operator's WARN (it was 424 token-exchange-refused,
	// blaming the caller).
	for _, tc := range []struct {
		name   string
		cfg    TokenExchangeConfig
		caller Caller
		scopes []string
		reason string
		status int
		want   string
	}{
		{"unknown audience", TokenExchangeConfig{Resource: "http://unknown.test/"}, caller, nil, ReasonExchangeRefused, 424, "error invalid_target"},
		{"scope the caller lacks", TokenExchangeConfig{Resource: legacyResource}, caller, []string{"orders:write"}, ReasonExchangeRefused, 424, "error invalid_scope"},
		{"forged subject", TokenExchangeConfig{Resource: legacyResource}, Caller{AgentID: caller.AgentID, Token: user[:len(user)-4] + "AAAA"}, nil, ReasonExchangeRefused, 424, "error invalid_grant"},
		{"wrong gateway secret", TokenExchangeConfig{Resource: legacyResource, ClientSecret: "wrong"}, caller, nil, ReasonExchangeMisconfigured, 502, "HTTP 401, error invalid_client"},
		{"no OAuth token", TokenExchangeConfig{Resource: legacyResource}, Caller{AgentID: caller.AgentID}, nil, ReasonCredentialMissing, 424, "identity oauth"},
		// oidc-provider answers a client not allowed the grant with
		// invalid_request (not RFC 6749's unauthorized_client): still the
		// gateway's fault (it was 424, blaming the caller).
		{"gateway client not allowed the grant", TokenExchangeConfig{Resource: legacyResource, ClientID: "no-exchange", ClientSecret: "no-exchange-secret"}, caller, nil, ReasonExchangeMisconfigured, 502, "HTTP 400, error invalid_request"},
	} {
		cfg := tc.cfg
		cfg.Upstream, cfg.Issuer = "legacy", as.Issuer()
		if cfg.ClientID == "" {
			cfg.ClientID = "gateway"
		}
		if cfg.ClientSecret == "" {
			cfg.ClientSecret = "gateway-secret"
		}
		y, err := NewTokenExchange(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, r := y.Resolve(context.Background(), tc.caller, tc.scopes)
		y.Close()
		if r == nil || r.Reason != tc.reason || r.Upstream != "legacy" || !strings.Contains(r.Explanation, tc.want) ||
			(tc.caller.Token != "" && strings.Contains(r.Explanation, tc.caller.Token[:20])) || r.Status != tc.status {
			t.Errorf("%s: %+v", tc.name, r)
			continue
		}
		if tc.status == 502 && (!strings.Contains(r.Cause, tc.want[strings.Index(tc.want, "error "):]) || !strings.Contains(r.Cause, "token endpoint http://127.0.0.1") ||
			strings.Contains(r.Cause, cfg.ClientSecret) || strings.Contains(r.Cause, user) || !strings.Contains(r.Explanation, "not in the caller's token")) {
			t.Errorf("%s: the gateway's fault: %+v", tc.name, r)
		}
	}

	// The configured token endpoint skips discovery.
	meta, err := as.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	y, err := NewTokenExchange(TokenExchangeConfig{Upstream: "legacy", TokenEndpoint: meta["token_endpoint"].(string), ClientID: "gateway",
		ClientSecret: "gateway-secret", Audience: legacyResource, Header: "X-Upstream-Token"})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if cred, r := y.Resolve(context.Background(), caller, nil); r != nil || cred.Header.Get("X-Upstream-Token") == "" || cred.Header.Get("Authorization") != "" {
		t.Errorf("token_endpoint, audience, header: %v %v", cred, r)
	} else if c := claimsOf(t, as, cred.Header.Get("X-Upstream-Token")); c["aud"] != legacyResource {
		t.Errorf("audience parameter: claims %v", c)
	}

	// Down: 503 issuer-unavailable with Retry-After; a cached token still
	// serves. The explanation names the upstream, not the server's
	// address or the dial error: those are the Cause, for the log.
	as.Stop()
	fresh := Caller{AgentID: caller.AgentID, Token: user}
	asHost := strings.TrimPrefix(strings.TrimPrefix(as.Issuer(), "http://"), "https://")
	if _, r := x.Resolve(context.Background(), fresh, []string{"orders:write", "orders:read"}); r == nil || r.Reason != ReasonIssuerUnavailable ||
		r.Status != 503 || r.RetryAfter != DefaultExchangeRetryAfter || !strings.Contains(r.Explanation, "legacy") ||
		strings.Contains(r.Explanation, asHost) || strings.Contains(r.Explanation, "dial") || strings.Contains(r.Explanation, "nothing was") ||
		!strings.Contains(r.Cause, asHost) || strings.Contains(r.Cause, "gateway-secret") || strings.Contains(r.Cause, user) {
		t.Errorf("server down: %+v", r)
	}
	if _, r := x.Resolve(context.Background(), caller, []string{"orders:read"}); r != nil {
		t.Errorf("cached token while the server is down: %v", r)
	}
	z, _ := NewTokenExchange(TokenExchangeConfig{Upstream: "legacy", Issuer: as.Issuer(), ClientID: "gateway", ClientSecret: "s", Resource: legacyResource})
	defer z.Close()
	if _, r := z.Resolve(context.Background(), caller, nil); r == nil || r.Reason != ReasonIssuerUnavailable || !strings.Contains(r.Cause, "metadata") || strings.Contains(r.Explanation, asHost) {
		t.Errorf("discovery with the server down: %+v", r)
	}
}

// TestTokenExchangeWhoseFault: which answers of a token endpoint are
// the gateway's own fault (502 token-exchange-misconfigured, the
// server's answer in the Cause for the operator's WARN, never in the
// explanation beyond its error code) and which refuse the caller's
// token (424 token-exchange-refused, as before).
func TestTokenExchangeWhoseFault(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		reason string
		want   string // in the explanation
		cause  string // in the Cause ("" for none)
	}{
		{"wrong client secret", 401, `{"error":"invalid_client","error_description":"client authentication failed"}`, ReasonExchangeMisconfigured, "HTTP 401, error invalid_client", `error_description "client authentication failed"`},
		{"invalid_client as 400", 400, `{"error":"invalid_client"}`, ReasonExchangeMisconfigured, "HTTP 400, error invalid_client", "HTTP 400, error invalid_client"},
		{"401 without a body", 401, ``, ReasonExchangeMisconfigured, "HTTP 401, error (none)", "HTTP 401, error (none)"},
		{"client not allowed the grant", 400, `{"error":"unauthorized_client"}`, ReasonExchangeMisconfigured, "error unauthorized_client", "error unauthorized_client"},
		{"server without token exchange", 400, `{"error":"unsupported_grant_type"}`, ReasonExchangeMisconfigured, "error unsupported_grant_type", "error unsupported_grant_type"},
		{"not a bearer token", 200, `{"access_token":"t","token_type":"DPoP","expires_in":60}`, ReasonExchangeMisconfigured, `a "DPoP" token`, `token_type "DPoP"`},
		{"caller's token refused", 400, `{"error":"invalid_grant"}`, ReasonExchangeRefused, "HTTP 400, error invalid_grant", ""},
		{"caller's token invalid (RFC 8693 §2.2.2)", 400, `{"error":"invalid_request"}`, ReasonExchangeRefused, "error invalid_request", ""},
		{"caller's token invalid, described", 400, `{"error":"invalid_request","error_description":"subject_token is malformed"}`, ReasonExchangeRefused, "error invalid_request", ""},
		{"client not allowed the grant, oidc-provider's words", 400, `{"error":"invalid_request","error_description":"requested grant type is not allowed for this client"}`, ReasonExchangeMisconfigured, "HTTP 400, error invalid_request", `error_description "requested grant type is not allowed for this client"`},
		{"scope the caller lacks", 400, `{"error":"invalid_scope"}`, ReasonExchangeRefused, "error invalid_scope", ""},
		{"forbidden", 403, `{"error":"access_denied"}`, ReasonExchangeRefused, "HTTP 403, error access_denied", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			x, err := NewTokenExchange(TokenExchangeConfig{Upstream: "legacy", TokenEndpoint: srv.URL + "/token", ClientID: "gateway",
				ClientSecret: "gateway-secret", Resource: legacyResource})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			_, r := x.Resolve(context.Background(), Caller{AgentID: strings.Repeat("a", 64), Token: "callers-token"}, nil)
			if r == nil || r.Reason != tc.reason || !strings.Contains(r.Explanation, tc.want) || strings.Contains(r.Explanation, "client authentication failed") {
				t.Fatalf("%+v", r)
			}
			if tc.reason == ReasonExchangeRefused {
				if r.Status != StatusExchangeRefused || r.Cause != "" {
					t.Fatalf("the caller's fault: %+v", r)
				}
				return
			}
			if r.Status != StatusExchangeMisconfigured || r.RetryAfter != 0 || !strings.Contains(r.Cause, tc.cause) ||
				!strings.Contains(r.Cause, srv.URL+"/token") || strings.Contains(r.Cause, "gateway-secret") || strings.Contains(r.Cause, "callers-token") {
				t.Fatalf("the gateway's fault: %+v", r)
			}
		})
	}
}

// TestTokenExchangeConfig: what NewTokenExchange refuses.
func TestTokenExchangeConfig(t *testing.T) {
	ok := TokenExchangeConfig{Upstream: "u", Issuer: "https://as.example", ClientID: "g", ClientSecret: "s", Resource: "https://api.example/"}
	for name, mut := range map[string]func(*TokenExchangeConfig){
		"no issuer":     func(c *TokenExchangeConfig) { c.Issuer = "" },
		"bad issuer":    func(c *TokenExchangeConfig) { c.Issuer = "ftp://x" },
		"no client":     func(c *TokenExchangeConfig) { c.ClientID = "" },
		"no secret":     func(c *TokenExchangeConfig) { c.ClientSecret = "" },
		"no audience":   func(c *TokenExchangeConfig) { c.Resource = "" },
		"neg. margin":   func(c *TokenExchangeConfig) { c.Margin = -time.Second },
		"bad endpoint":  func(c *TokenExchangeConfig) { c.TokenEndpoint = "/token" },
		"http issuer":   func(c *TokenExchangeConfig) { c.Issuer = "http://as.example" },
		"http endpoint": func(c *TokenExchangeConfig) { c.TokenEndpoint = "http://10.0.0.5/token" },
	} {
		c := ok
		mut(&c)
		if x, err := NewTokenExchange(c); err == nil {
			x.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	x, err := NewTokenExchange(ok)
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
}

// TestTokenExchangeDiscoveredCleartext: an issuer (on loopback, so
// allowed) whose metadata names an http token endpoint on another host
// is 502 token-exchange-misconfigured, the metadata's URL in the Cause,
// and the gateway sends that endpoint nothing: not its client secret,
// not the caller's token (found by review: the discovered endpoint was
// not checked as the configured one is).
func TestTokenExchangeDiscoveredCleartext(t *testing.T) {
	// The cleartext endpoint is named by a host that is not loopback and
	// resolves nowhere (.invalid, RFC 6761): had the gateway tried it,
	// the refusal would be issuer-unavailable.
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"issuer":%q,"token_endpoint":"http://as.invalid/token"}`, srv.URL)
	}))
	defer srv.Close()
	x, err := NewTokenExchange(TokenExchangeConfig{Upstream: "legacy", Issuer: srv.URL, ClientID: "gateway",
		ClientSecret: "gateway-secret", Resource: legacyResource})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	_, r := x.Resolve(context.Background(), Caller{AgentID: strings.Repeat("a", 64), Token: "callers-token"}, nil)
	if r == nil || r.Reason != ReasonExchangeMisconfigured || r.Status != StatusExchangeMisconfigured || r.RetryAfter != 0 ||
		!strings.Contains(r.Explanation, "without TLS") || !strings.Contains(r.Cause, srv.URL) || !strings.Contains(r.Cause, "http://as.invalid/token") {
		t.Fatalf("%+v", r)
	}
}

// TestTokenExchangeServerFaults: answers of the authorization server
// that no retry mends are 502 token-exchange-misconfigured, their real
// cause in the Cause (they were 503 issuer-unavailable, which agents
// retry, and the WARN named another cause): metadata naming another
// issuer (reported rather than the other metadata URL's 404, whichever
// order), a redirect from a metadata URL or the token endpoint (not
// followed; the Location named), an expires_in that is not a
// non-negative integer in range (the WARN said "no access_token").
func TestTokenExchangeServerFaults(t *testing.T) {
	type answer struct {
		status   int
		location string
		body     string // %[1]s: the server's URL
	}
	for _, tc := range []struct {
		name      string
		discover  bool
		rfc8414   answer // /.well-known/oauth-authorization-server
		oidc      answer // /.well-known/openid-configuration
		token     answer
		reason    string
		want      string // in the explanation
		cause     []string
		causeNot  string
		wantToken string
	}{
		{name: "other issuer, then 404", discover: true,
			rfc8414: answer{200, "", `{"issuer":"https://other.example","token_endpoint":"%[1]s/token"}`}, oidc: answer{404, "", ``},
			reason: ReasonExchangeMisconfigured, want: "metadata for another issuer", cause: []string{`names issuer "https://other.example"`, "/.well-known/oauth-authorization-server", "RFC 8414"}, causeNot: "404"},
		{name: "404, then other issuer", discover: true,
			rfc8414: answer{404, "", ``}, oidc: answer{200, "", `{"issuer":"%[1]s/","token_endpoint":"%[1]s/token"}`},
			reason: ReasonExchangeMisconfigured, want: "metadata for another issuer", cause: []string{`names issuer "%[1]s/"`, "/.well-known/openid-configuration"}, causeNot: "404"},
		{name: "other issuer, then the right one", discover: true,
			rfc8414: answer{200, "", `{"issuer":"https://other.example","token_endpoint":"%[1]s/token"}`}, oidc: answer{200, "", `{"issuer":"%[1]s","token_endpoint":"%[1]s/token"}`},
			token: answer{200, "", `{"access_token":"ok","token_type":"Bearer","expires_in":60}`}, wantToken: "ok"},
		{name: "metadata redirect", discover: true,
			rfc8414: answer{302, "https://login.example/.well-known/oauth-authorization-server", ``}, oidc: answer{404, "", ``},
			reason: ReasonExchangeMisconfigured, want: "redirect (HTTP 302)", cause: []string{`HTTP 302 to "https://login.example/.well-known/oauth-authorization-server"`}},
		{name: "metadata redirect, then a document", discover: true,
			rfc8414: answer{301, "https://login.example/", ``}, oidc: answer{200, "", `{"issuer":"%[1]s","token_endpoint":"%[1]s/token"}`},
			token: answer{200, "", `{"access_token":"ok","expires_in":60}`}, wantToken: "ok"},
		{name: "discovered token endpoint with a fragment", discover: true,
			rfc8414: answer{200, "", `{"issuer":"%[1]s","token_endpoint":"%[1]s/token#x"}`}, oidc: answer{404, "", ``},
			reason: ReasonExchangeMisconfigured, want: "token endpoint the gateway does not use", cause: []string{`token_endpoint "%[1]s/token#x" must not have a fragment`}},
		{name: "discovered token endpoint with userinfo", discover: true,
			rfc8414: answer{200, "", `{"issuer":"%[1]s","token_endpoint":"https://gw:pw@as.example/token"}`}, oidc: answer{404, "", ``},
			reason: ReasonExchangeMisconfigured, want: "token endpoint the gateway does not use", cause: []string{`token_endpoint "https://gw:xxxxx@as.example/token" must not carry userinfo`}, causeNot: "pw@"},
		{name: "token endpoint redirect", token: answer{307, "https://user:pw@login.example/token", ``},
			reason: ReasonExchangeMisconfigured, want: "redirect (HTTP 307)", cause: []string{`HTTP 307 to "https://user:xxxxx@login.example/token"`, "/token:"}, causeNot: "pw@"},
		{name: "expires_in 1e308", token: answer{200, "", `{"access_token":"t","token_type":"Bearer","expires_in":1e308}`},
			reason: ReasonExchangeMisconfigured, want: "expires_in", cause: []string{"expires_in 1e308 is not a non-negative integer"}, causeNot: "no access_token"},
		{name: "expires_in 1.5", token: answer{200, "", `{"access_token":"t","expires_in":1.5}`},
			reason: ReasonExchangeMisconfigured, want: "expires_in", cause: []string{"expires_in 1.5 is not"}},
		{name: "expires_in negative", token: answer{200, "", `{"access_token":"t","expires_in":-5}`},
			reason: ReasonExchangeMisconfigured, want: "expires_in", cause: []string{"expires_in -5 is not"}},
		{name: "expires_in a string", token: answer{200, "", `{"access_token":"t","expires_in":"60"}`},
			reason: ReasonExchangeMisconfigured, want: "expires_in", cause: []string{`expires_in "60" is not`}},
		{name: "expires_in beyond a Duration", token: answer{200, "", `{"access_token":"t","expires_in":9300000000}`},
			reason: ReasonExchangeMisconfigured, want: "expires_in", cause: []string{"expires_in 9300000000 is not"}},
		{name: "expires_in 60.0", token: answer{200, "", `{"access_token":"ok","expires_in":60.0}`}, wantToken: "ok"},
		{name: "expires_in null", token: answer{200, "", `{"access_token":"ok","expires_in":null}`}, wantToken: "ok"},
		{name: "access_token a number", token: answer{200, "", `{"access_token":5,"expires_in":60}`},
			reason: ReasonIssuerUnavailable, cause: []string{"not a JSON token response"}, causeNot: "no access_token"},
		{name: "no access_token", token: answer{200, "", `{"expires_in":60}`},
			reason: ReasonIssuerUnavailable, cause: []string{"has no access_token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				a := answer{404, "", ``}
				switch r.URL.Path {
				case "/.well-known/oauth-authorization-server":
					a = tc.rfc8414
				case "/.well-known/openid-configuration":
					a = tc.oidc
				case "/token":
					a = tc.token
				}
				if a.location != "" {
					w.Header().Set("Location", a.location)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(a.status)
				_, _ = io.WriteString(w, strings.ReplaceAll(a.body, "%[1]s", srv.URL))
			}))
			defer srv.Close()
			cfg := TokenExchangeConfig{Upstream: "legacy", ClientID: "gateway", ClientSecret: "gateway-secret", Resource: legacyResource}
			if tc.discover {
				cfg.Issuer = srv.URL
			} else {
				cfg.TokenEndpoint = srv.URL + "/token"
			}
			x, err := NewTokenExchange(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			cred, r := x.Resolve(context.Background(), Caller{AgentID: strings.Repeat("a", 64), Token: "callers-token"}, nil)
			if tc.wantToken != "" {
				if r != nil || bearerOf(t, cred) != tc.wantToken {
					t.Fatalf("%v %+v", cred, r)
				}
				return
			}
			if r == nil || r.Reason != tc.reason || !strings.Contains(r.Explanation, tc.want) || strings.Contains(r.Explanation, srv.URL) ||
				// The server's address is taken out before causeNot is
				// looked for: its random port may hold "404" (helper-93).
				(tc.causeNot != "" && strings.Contains(strings.ReplaceAll(r.Cause, srv.URL, "<server>"), tc.causeNot)) || strings.Contains(r.Cause, "gateway-secret") {
				t.Fatalf("%+v", r)
			}
			for _, c := range tc.cause {
				if c = strings.ReplaceAll(c, "%[1]s", srv.URL); !strings.Contains(r.Cause, c) {
					t.Errorf("cause lacks %q: %+v", c, r)
				}
			}
			if wantStatus := map[string]int{ReasonExchangeMisconfigured: 502, ReasonIssuerUnavailable: 503}[tc.reason]; r.Status != wantStatus ||
				(tc.reason == ReasonExchangeMisconfigured && r.RetryAfter != 0) {
				t.Fatalf("status: %+v", r)
			}
		})
	}
}
