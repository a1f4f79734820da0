package engine

import (
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
)

// TestExchangeAndAssertionPolicies: what the token_exchange and
// assertion policies take from an upstream's config, their defaults
// (resource and audience the upstream's URL, iss the oauth resource),
// and the knobs of another policy refused.
func TestExchangeAndAssertionPolicies(t *testing.T) {
	up := func(cc *CredentialsConfig) *UpstreamConfig {
		return &UpstreamConfig{URL: "https://legacy.example", Credentials: cc}
	}
	te := &TokenExchangeCredentials{Issuer: "https://as.example", ClientID: "gw", ClientSecret: "s"}
	p, err := newCredentialPolicyFor("legacy", up(&CredentialsConfig{Policy: CredentialsTokenExchange, TokenExchange: te}), "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind() != upstreamauth.KindExchanged {
		t.Errorf("kind %s", p.Kind())
	}
	closeCredentialPolicies(map[string]upstreamauth.Policy{"legacy": p})

	a, err := newCredentialPolicyFor("legacy", up(&CredentialsConfig{Policy: CredentialsAssertion}), "https://gw.example")
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind() != upstreamauth.KindAssertion {
		t.Errorf("kind %s", a.Kind())
	}
	h := &Engine{credPolicies: map[string]upstreamauth.Policy{"legacy": a, "other": upstreamauth.Static{}}}
	if set, ok := h.UpstreamJWKS(); !ok || len(set.Keys) != 1 {
		t.Errorf("UpstreamJWKS %v %v", set, ok)
	}
	if _, ok := (&Engine{credPolicies: map[string]upstreamauth.Policy{"other": upstreamauth.Static{}}}).UpstreamJWKS(); ok {
		t.Error("a JWKS without any assertion policy")
	}

	for _, tc := range []struct {
		name  string
		cc    *CredentialsConfig
		oauth string
		want  string
	}{
		{"exchange without a block", &CredentialsConfig{Policy: CredentialsTokenExchange}, "", "needs its block"},
		{"exchange without a secret", &CredentialsConfig{Policy: CredentialsTokenExchange, TokenExchange: &TokenExchangeCredentials{Issuer: "https://as.example", ClientID: "gw"}}, "", "client_secret"},
		{"exchange with a dir", &CredentialsConfig{Policy: CredentialsTokenExchange, Dir: "/x", TokenExchange: te}, "", "takes no header, dir or file"},
		{"exchange with an assertion block", &CredentialsConfig{Policy: CredentialsTokenExchange, TokenExchange: te, Assertion: &AssertionCredentials{}}, "", "an assertion block is given too"},
		{"assertion without an issuer", &CredentialsConfig{Policy: CredentialsAssertion}, "", "needs issuer"},
		{"assertion with a bad header", &CredentialsConfig{Policy: CredentialsAssertion, Assertion: &AssertionCredentials{Header: "a b"}}, "https://gw", "not a header name"},
		{"assertion key missing", &CredentialsConfig{Policy: CredentialsAssertion, Assertion: &AssertionCredentials{Keys: []string{"/nonexistent.pem"}}}, "https://gw", "nonexistent.pem"},
		{"static with an exchange block", &CredentialsConfig{Policy: CredentialsStatic, TokenExchange: te}, "", "takes no token_exchange or assertion block"},
		{"unknown policy", &CredentialsConfig{Policy: "magic"}, "", "token_exchange, assertion"},
	} {
		_, err := newCredentialPolicyFor("legacy", up(tc.cc), tc.oauth)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "legacy") {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
