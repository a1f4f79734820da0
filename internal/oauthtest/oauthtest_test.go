package oauthtest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

const (
	jwtResource    = "http://api.test/mcp"
	opaqueResource = "http://opaque.test/"
	redirectURI    = "http://127.0.0.1/callback"
)

// verify checks token's signature against the JWKS named by the
// discovery document at wellKnown and returns its header and claims.
func verify(t *testing.T, issuer, wellKnown, token string) (jose.Header, map[string]any) {
	t.Helper()
	var meta struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := getJSON(issuer+wellKnown, &meta); err != nil {
		t.Fatalf("discovery %s: %v", wellKnown, err)
	}
	if meta.Issuer != issuer {
		t.Fatalf("metadata issuer %q, want %q", meta.Issuer, issuer)
	}
	var set jose.JSONWebKeySet
	if err := getJSON(meta.JWKSURI, &set); err != nil {
		t.Fatalf("jwks: %v", err)
	}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			t.Fatalf("JWKS publishes a private key (kid %s)", k.KeyID)
		}
	}
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		t.Fatalf("parse %q: %v", token, err)
	}
	h := jws.Signatures[0].Header
	keys := set.Key(h.KeyID)
	if len(keys) != 1 {
		t.Fatalf("kid %q: %d keys in the JWKS", h.KeyID, len(keys))
	}
	payload, err := jws.Verify(keys[0])
	if err != nil {
		t.Fatalf("signature: %v", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	return h, claims
}

func TestAuthorizationServer(t *testing.T) {
	priv1, _ := NewRSAKey("rsa-1")
	s := Start(t, Config{
		Keys: []jose.JSONWebKey{priv1},
		Resources: map[string]Resource{
			jwtResource:    {Scopes: []string{"tools:read", "tools:call"}, Format: "jwt", TTLSeconds: 300},
			opaqueResource: {Scopes: []string{"read"}, Format: "opaque", TTLSeconds: 120},
		},
		Clients: []Client{
			ConfidentialClient("svc", "svc-secret"),
			ConfidentialClient("gateway", "gateway-secret"),
			PublicClient("app", redirectURI),
		},
		Account:              "alice",
		Registration:         true,
		IntrospectionClients: []string{"gateway"},
	})
	iss := s.Issuer()
	if !strings.HasPrefix(iss, "http://127.0.0.1:") {
		t.Fatalf("issuer %q", iss)
	}

	// client_credentials, JWT resource.
	tok, err := s.ClientCredentials("svc", "svc-secret", jwtResource, "tools:read")
	if err != nil {
		t.Fatal(err)
	}
	h, c := verify(t, iss, "/.well-known/oauth-authorization-server", tok)
	if h.KeyID != "rsa-1" || h.Algorithm != "RS256" || h.ExtraHeaders["typ"] != "at+jwt" {
		t.Errorf("header kid %q alg %q typ %v", h.KeyID, h.Algorithm, h.ExtraHeaders["typ"])
	}
	now := float64(time.Now().Unix())
	exp, _ := c["exp"].(float64)
	if c["iss"] != iss || c["aud"] != jwtResource || c["client_id"] != "svc" || c["scope"] != "tools:read" ||
		c["jti"] == nil || exp < now+250 || exp > now+310 {
		t.Errorf("client_credentials claims %v", c)
	}
	t.Logf("client_credentials JWT header %+v claims %v", h.ExtraHeaders, c)

	// A scope the resource does not have is dropped (RFC 6749 §3.3: the
	// server may grant less); an unknown resource and a wrong secret are
	// refused.
	if tok, err := s.ClientCredentials("svc", "svc-secret", jwtResource, "tools:read", "admin"); err != nil {
		t.Error(err)
	} else if _, c := verify(t, iss, "/.well-known/openid-configuration", tok); c["scope"] != "tools:read" {
		t.Errorf("asked tools:read admin, claims %v", c)
	}
	if _, err := s.ClientCredentials("svc", "svc-secret", "http://unknown.test/", "read"); err == nil {
		t.Error("unknown resource granted")
	}
	if _, err := s.ClientCredentials("svc", "wrong", jwtResource, "tools:read"); err == nil {
		t.Error("wrong secret granted")
	}

	// Opaque resource: introspection by the gateway.
	opaque, err := s.ClientCredentials("svc", "svc-secret", opaqueResource, "read")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(opaque, ".") == 2 {
		t.Fatalf("opaque token looks like a JWT: %q", opaque)
	}
	in, err := s.Introspect("gateway", "gateway-secret", opaque)
	if err != nil {
		t.Fatal(err)
	}
	if in["active"] != true || in["scope"] != "read" || in["client_id"] != "svc" || in["aud"] != opaqueResource || in["iss"] != iss {
		t.Errorf("introspection %v", in)
	}
	t.Logf("introspection %v", in)
	// A client not in IntrospectionClients learns nothing.
	if in, err := s.Introspect("svc", "svc-secret", opaque); err != nil || in["active"] != false {
		t.Errorf("introspection by svc: %v %v", in, err)
	}

	// Authorization code + PKCE, public native client, loopback redirect
	// with a port the registration does not name (RFC 8252 §7.3).
	tr, err := s.AuthorizationCodeTokens("app", "", "http://127.0.0.1:49152/callback", jwtResource, "tools:read", "tools:call")
	if err != nil {
		t.Fatal(err)
	}
	_, c = verify(t, iss, "/.well-known/openid-configuration", tr.AccessToken)
	if c["sub"] != "alice" || c["client_id"] != "app" || c["aud"] != jwtResource || c["scope"] != "tools:read tools:call" {
		t.Errorf("authorization_code claims %v", c)
	}
	if tr.RefreshToken == "" {
		t.Error("no refresh token")
	} else {
		rt, err := s.Refresh("app", "", tr.RefreshToken, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, c := verify(t, iss, "/.well-known/openid-configuration", rt.AccessToken); c["sub"] != "alice" || c["aud"] != jwtResource {
			t.Errorf("refreshed claims %v", c)
		}
	}
	// The same flow for the opaque resource: introspection names alice.
	op, err := s.AuthorizationCode("app", redirectURI, opaqueResource, "read")
	if err != nil {
		t.Fatal(err)
	}
	if in, err := s.Introspect("gateway", "gateway-secret", op); err != nil || in["active"] != true || in["sub"] != "alice" || in["client_id"] != "app" || in["aud"] != opaqueResource {
		t.Errorf("introspection of the user's opaque token: %v %v", in, err)
	} else {
		t.Logf("introspection (authorization_code) %v", in)
	}

	// Without PKCE the authorization request is refused (OAuth 2.1).
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(iss + "/auth?response_type=code&client_id=app&state=s&scope=read" +
		"&redirect_uri=" + url.QueryEscape(redirectURI) + "&resource=" + url.QueryEscape(opaqueResource))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc, _ := resp.Location(); loc == nil || loc.Query().Get("error") != "invalid_request" || !strings.Contains(loc.Query().Get("error_description"), "PKCE") {
		t.Errorf("authorization request without PKCE: %s %v", resp.Status, loc)
	}

	// A redirect_uri not registered is refused.
	if _, err := s.AuthorizationCode("app", "http://127.0.0.1:49152/elsewhere", jwtResource, "tools:read"); err == nil {
		t.Error("unregistered redirect_uri accepted")
	}

	// Dynamic registration, then the flow with the registered client.
	reg, err := s.Register(map[string]any{
		"redirect_uris":              []string{"http://localhost:33418/oauth/callback"},
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"client_name":                "mcp-remote-like",
	})
	if err != nil {
		t.Fatal(err)
	}
	dynID, _ := reg["client_id"].(string)
	if dynID == "" {
		t.Fatalf("registration %v", reg)
	}
	if tok, err := s.AuthorizationCode(dynID, "http://localhost:33418/oauth/callback", jwtResource, "tools:read"); err != nil {
		t.Errorf("registered client: %v", err)
	} else if _, c := verify(t, iss, "/.well-known/openid-configuration", tok); c["client_id"] != dynID || c["sub"] != "alice" {
		t.Errorf("registered client claims %v", c)
	}

	// Key rotation on the same port.
	priv2, _ := NewECKey("ec-2")
	if err := s.Restart(priv2); err != nil {
		t.Fatal(err)
	}
	if s.Issuer() != iss {
		t.Fatalf("issuer after restart %q, want %q", s.Issuer(), iss)
	}
	tok2, err := s.ClientCredentials("svc", "svc-secret", jwtResource, "tools:call")
	if err != nil {
		t.Fatal(err)
	}
	h2, c2 := verify(t, iss, "/.well-known/oauth-authorization-server", tok2)
	if h2.KeyID != "ec-2" || h2.Algorithm != "ES256" || c2["scope"] != "tools:call" {
		t.Errorf("after rotation: kid %q alg %q claims %v", h2.KeyID, h2.Algorithm, c2)
	}
	set, err := s.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.KeyID)
	}
	if !slices.Equal(kids, []string{"ec-2"}) {
		t.Errorf("JWKS kids after rotation %v", kids)
	}

	// Down.
	s.Stop()
	resp, err = (&http.Client{Timeout: 2 * time.Second}).Get(iss + "/.well-known/openid-configuration")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("issuer still answers after Stop: %s", resp.Status)
	}
	s.Stop() // twice is fine
}

// TestTokenExchange: the RFC 8693 grant added through registerGrantType
// issues a token for another resource with the subject's sub, the
// exchanging client as act.sub and the scopes both have; it refuses a
// forged or foreign subject token (invalid_grant), an unknown resource
// (invalid_target), a scope the subject token lacks (invalid_scope), and a
// client not allowed the grant.
func TestTokenExchange(t *testing.T) {
	const upstream = "http://legacy.test/api"
	priv, _ := NewRSAKey("rsa-x")
	s := Start(t, Config{
		Keys: []jose.JSONWebKey{priv},
		Resources: map[string]Resource{
			jwtResource:    {Scopes: []string{"tools:call", "orders:read", "orders:write"}, TTLSeconds: 300},
			upstream:       {Scopes: []string{"orders:read", "orders:write"}, TTLSeconds: 600},
			opaqueResource: {Scopes: []string{"orders:read"}, Format: "opaque"},
		},
		Clients: []Client{
			ConfidentialClient("gateway", "gateway-secret", GrantTokenExchange),
			ConfidentialClient("svc", "svc-secret"),
			PublicClient("app", redirectURI),
		},
		Account:                     "bob",
		TokenExchangeTTL:            42 * time.Second,
		TokenExchangeSubjectClients: []string{"app", "gateway"},
	})
	iss := s.Issuer()
	user, err := s.AuthorizationCode("app", redirectURI, jwtResource, "tools:call", "orders:read")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.ExchangeToken("gateway", "gateway-secret", user, upstream, "orders:read")
	if err != nil {
		t.Fatal(err)
	}
	_, c := verify(t, iss, "/.well-known/oauth-authorization-server", tr.AccessToken)
	act, _ := c["act"].(map[string]any)
	exp, _ := c["exp"].(float64)
	iat, _ := c["iat"].(float64)
	if c["sub"] != "bob" || c["aud"] != upstream || c["scope"] != "orders:read" || c["client_id"] != "gateway" ||
		act["sub"] != "gateway" || exp-iat != 42 || tr.ExpiresIn != 42 {
		t.Errorf("exchanged token claims %v, expires_in %d", c, tr.ExpiresIn)
	}
	// No scope asked: the subject's scopes the resource has.
	if tr, err := s.ExchangeToken("gateway", "gateway-secret", user, upstream); err != nil {
		t.Error(err)
	} else if _, c := verify(t, iss, "/.well-known/openid-configuration", tr.AccessToken); c["scope"] != "orders:read" {
		t.Errorf("exchange without scope: claims %v", c)
	}
	// An opaque target resource: the exchanged token is introspectable.
	if tr, err := s.ExchangeToken("gateway", "gateway-secret", user, opaqueResource, "orders:read"); err != nil || strings.Count(tr.AccessToken, ".") == 2 {
		t.Errorf("opaque exchange: %v %v", tr, err)
	}

	// Carol logs in (login_hint): her sub is exchanged.
	carol, err := s.AuthorizationCodeAs("carol", "app", "", redirectURI, jwtResource, "orders:read")
	if err != nil {
		t.Fatal(err)
	}
	if tr, err := s.ExchangeToken("gateway", "gateway-secret", carol.AccessToken, upstream); err != nil {
		t.Error(err)
	} else if _, c := verify(t, iss, "/.well-known/openid-configuration", tr.AccessToken); c["sub"] != "carol" {
		t.Errorf("carol's exchanged token: %v", c)
	}
	// The server's policy: svc's tokens may not be exchanged.
	svcToken, err := s.ClientCredentials("svc", "svc-secret", jwtResource, "orders:read")
	if err != nil {
		t.Fatal(err)
	}
	refusals := []struct {
		name, client, secret, subject, resource, scope, want string
	}{
		{"scope the subject lacks", "gateway", "gateway-secret", user, upstream, "orders:write", "invalid_scope"},
		{"unknown resource", "gateway", "gateway-secret", user, "http://unknown.test/", "orders:read", "invalid_target"},
		{"tampered subject", "gateway", "gateway-secret", user[:len(user)-4] + "AAAA", upstream, "orders:read", "invalid_grant"},
		{"unknown opaque subject", "gateway", "gateway-secret", "not-a-token", upstream, "orders:read", "invalid_grant"},
		{"client without the grant", "svc", "svc-secret", user, upstream, "orders:read", "grant type is not allowed"},
		{"subject client not allowed", "gateway", "gateway-secret", svcToken, upstream, "orders:read", "invalid_grant"},
		{"wrong secret", "gateway", "wrong", user, upstream, "orders:read", "invalid_client"},
	}
	for _, r := range refusals {
		if _, err := s.ExchangeToken(r.client, r.secret, r.subject, r.resource, r.scope); err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: %v, want %s", r.name, err, r.want)
		}
	}
	// A token from another issuer (same kid, another key) is invalid_grant.
	other := Start(t, Config{Keys: []jose.JSONWebKey{mustRSA("rsa-x")}, Resources: map[string]Resource{jwtResource: {Scopes: []string{"orders:read"}}},
		Clients: []Client{ConfidentialClient("svc", "svc-secret")}})
	foreign, err := other.ClientCredentials("svc", "svc-secret", jwtResource, "orders:read")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ExchangeToken("gateway", "gateway-secret", foreign, upstream, "orders:read"); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Errorf("foreign subject token: %v", err)
	}
	st, err := s.ExchangeStats()
	if err != nil {
		t.Fatal(err)
	}
	// "client without the grant" and "wrong secret" fail before the handler.
	if st.Issued != 4 || st.Refused != 6 {
		t.Errorf("stats %+v, want 4 issued, 6 refused", st)
	}
}

func mustRSA(kid string) jose.JSONWebKey {
	k, _ := NewRSAKey(kid)
	return k
}
