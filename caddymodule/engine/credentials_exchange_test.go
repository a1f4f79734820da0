package engine

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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

// withCallerToken gives every caller the OAuth access token token, as
// identity oauth would, before its policy resolves the credential.
type withCallerToken struct {
	upstreamauth.Policy
	token string
}

func (p withCallerToken) Resolve(ctx context.Context, c upstreamauth.Caller, scopes []string) (upstreamauth.Credential, *upstreamauth.Refusal) {
	c.Token = p.token
	return p.Policy.Resolve(ctx, c, scopes)
}

func (p withCallerToken) Close() { p.Policy.(interface{ Close() }).Close() }

// TestTokenExchangeMisconfiguredIsGatewayFault: the upstream's
// authorization server refusing the gateway's own client (a wrong
// client_secret: 401 invalid_client) is the gateway's fault, whoever
// calls: 502 token-exchange-misconfigured, not retryable, nothing run,
// and a WARN naming the server's answer, bounded for all agents
// together (at most LogBurst lines per LogWindow, however many agents
// meet it). It was 424 token-exchange-refused ("HTTP 401, error
// invalid_client"), blaming the caller, logged at INFO without a cause.
func TestTokenExchangeMisconfiguredIsGatewayFault(t *testing.T) {
	var ran atomic.Int32
	upstream := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		_, _ = io.WriteString(w, `{"id":"1"}`)
	}))
	as := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
	}))
	agents := t.TempDir()
	var ids []string
	for i := range 4 {
		name := fmt.Sprintf("rcns-exchange-caller-%d", i)
		ids = append(ids, srAgentID(name))
		srWriteDoc(t, agents, name+".json", map[string]any{"agent_id": srAgentID(name), "name": name, "owner_id": "test-ops",
			"trust_tier": 1, "status": "active", "scopes": []string{"rcns:negotiate", "bench:read"}})
	}
	const secret, callerToken = "wrong-exchange-secret", "the-callers-access-token"
	te := newTestEngine(t, func(c *Config) {
		c.Agents = []string{agents}
		c.Upstreams = map[string]*UpstreamConfig{"bench": {URL: upstream, Credentials: &CredentialsConfig{Policy: CredentialsTokenExchange,
			TokenExchange: &TokenExchangeCredentials{TokenEndpoint: as + "/token", ClientID: "rcns-gateway", ClientSecret: secret}}}}
	})
	te.credPolicies["bench"] = withCallerToken{te.credPolicies["bench"], callerToken}
	core, logs := observer.New(zap.DebugLevel)
	te.logger = zap.New(core)

	const rounds = 3
	for range rounds {
		for _, id := range ids {
			a := te.serve(t, "FETCH", "/items/1", http.Header{"Agent-Id": {id}, "Authority-Scope": {testScope}}, "")
			if a.Status != 502 || a.str("reason") != upstreamauth.ReasonExchangeMisconfigured || a.body["retryable"] != false ||
				!strings.Contains(a.str("explanation"), "invalid_client") || !strings.Contains(a.str("explanation"), "nothing was run") ||
				strings.Contains(string(a.Body), secret) || strings.Contains(string(a.Body), callerToken) || a.header("Retry-After") != "" {
				t.Fatalf("agent %s: %s", id[:8], a)
			}
		}
	}
	n := rounds * len(ids)
	if ran.Load() != 0 {
		t.Errorf("the upstream was called %d times", ran.Load())
	}
	if got := testutil.ToFloat64(te.metrics.credentialRefusals.WithLabelValues("bench", upstreamauth.ReasonExchangeMisconfigured)); got != float64(n) {
		t.Errorf("counted %v refusals, want %d", got, n)
	}
	warns := logs.FilterMessage("upstream credential unavailable").FilterLevelExact(zap.WarnLevel)
	if warns.Len() == 0 || warns.Len() > LogBurst {
		t.Fatalf("%d WARN lines for %d refusals of %d agents, want 1..%d (one bound for all agents)", warns.Len(), n, len(ids), LogBurst)
	}
	f := warns.All()[0].ContextMap()
	if cause, _ := f["cause"].(string); !strings.Contains(cause, "HTTP 401, error invalid_client") || !strings.Contains(cause, "client authentication failed") ||
		!strings.Contains(cause, as+"/token") || f["reason"] != upstreamauth.ReasonExchangeMisconfigured || f["upstream"] != "bench" {
		t.Errorf("WARN line fields: %v", f)
	}
	if l := logs.FilterMessage("upstream credential refused").Len(); l != 0 {
		t.Errorf("%d INFO lines blame the caller", l)
	}
	for _, e := range logs.All() {
		if s := fmt.Sprint(e.ContextMap()); strings.Contains(s, secret) || strings.Contains(s, callerToken) {
			t.Errorf("a log line names a secret: %v", e.ContextMap())
		}
	}
}

// TestCompositionTimeoutBoundsTokenExchange: a plan's composition
// deadline starts before its upstream credentials are resolved, so a
// token exchange slower than composition_timeout leaves no step to
// start: the caller waits for the exchange no longer than the plan's
// time, and the synthesis answers without calling the upstream (found by
// review: with composition_timeout 2s and a token endpoint answering
// after 2.5 s, the upstream call started at +2.65 s and the answer came
// at +2.74 s; with 6 s, at +6.1 s). A Tier B call keeps the policy's own
// timeout: its exchange is not cut.
func TestCompositionTimeoutBoundsTokenExchange(t *testing.T) {
	var ran atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":%q,"name":"bench item","price":12.5}`, r.PathValue("id"))
	})
	upstream := serveLoopback(t, mux)
	const slow = 600 * time.Millisecond
	as := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(slow):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"access_token":"exchanged","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer"}`)
	}))
	te := newTestEngine(t, func(c *Config) {
		c.CompositionTimeout = Duration(300 * time.Millisecond)
		c.Upstreams = map[string]*UpstreamConfig{"bench": {URL: upstream, Credentials: &CredentialsConfig{Policy: CredentialsTokenExchange,
			TokenExchange: &TokenExchangeCredentials{TokenEndpoint: as + "/token", ClientID: "rcns-gateway", ClientSecret: "s"}}}}
	})
	te.credPolicies["bench"] = withCallerToken{te.credPolicies["bench"], "the-callers-access-token"}
	body := map[string]any{"parameters": map[string]any{"item_id": "1"}}
	start := time.Now()
	a := te.do(t, "LOOKUP", "/item/slow-exchange", body, "Allow-RCNS", "true")
	// The exchange is cut where the plan's time ends: 503
	// issuer-unavailable (retryable), nothing run.
	if a.Status != 503 || a.str("reason") != upstreamauth.ReasonIssuerUnavailable || ran.Load() != 0 {
		t.Fatalf("a synthesis whose token exchange outlasted composition_timeout: %s after %v, upstream called %d times", a, time.Since(start), ran.Load())
	}
	// Tier B: the exchange's own timeout (10 s) bounds it, the call runs.
	if a := te.do(t, "FETCH", "/items/1", nil); a.Status != 200 || ran.Load() != 1 {
		t.Fatalf("a Tier B call behind the same slow exchange: %s (upstream called %d times)", a, ran.Load())
	}
}

// TestCallBound: a Tier B call's bound is its endpoint's call timeout,
// plus, behind credentials token_exchange, the exchange's own timeout
// (the MCP door's call-timeout retry_after_seconds counts from it).
func TestCallBound(t *testing.T) {
	plain := newTestEngine(t)
	ep, _, ok := plain.set.Route("FETCH", "/items/1")
	if !ok {
		t.Fatal("no FETCH /items/1 in the bench documents")
	}
	if got := plain.CallBound(ep); got != ep.Timeout() || got <= 0 {
		t.Errorf("static credentials: %s, want the endpoint's timeout %s", got, ep.Timeout())
	}
	exch := newTestEngine(t, func(c *Config) {
		c.Upstreams = map[string]*UpstreamConfig{"bench": {URL: "http://127.0.0.1:9", Credentials: &CredentialsConfig{Policy: CredentialsTokenExchange,
			TokenExchange: &TokenExchangeCredentials{TokenEndpoint: "http://127.0.0.1:9/token", ClientID: "rcns-gateway", ClientSecret: "s", Timeout: Duration(7 * time.Second)}}}}
	})
	ep, _, _ = exch.set.Route("FETCH", "/items/1")
	if got := exch.CallBound(ep); got != ep.Timeout()+7*time.Second {
		t.Errorf("token_exchange with timeout 7s: %s, want %s", got, ep.Timeout()+7*time.Second)
	}
}
