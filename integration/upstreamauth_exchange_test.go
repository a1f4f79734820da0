package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/oauthtest"
)

// Issue 31: the hotel upstream takes a token exchanged (RFC 8693) for
// the caller's verified OAuth token at the real authorization server
// (oidc-provider with its registerGrantType extension,
// internal/oauthtest), and checks it as its own API would: signed by the
// server's JWKS, iss the server, aud the hotel, a live exp.

// legacyHotel is the hotel API's resource identifier at the
// authorization server: the audience of the exchanged tokens.
const legacyHotel = "http://hotel.legacy.test/"

// appRedirect is the public client's loopback redirect URI.
const appRedirect = "http://127.0.0.1/callback"

// exchangeCaller is one caller of the exchange tests: its token, the
// agent and owner the gateway verifies, and the sub the exchanged token
// must carry.
type exchangeCaller struct {
	name, agent, owner, sub, token string
}

// exchangeWorld is an oauthWorld whose hotel upstream is behind a
// checker of exchanged tokens, with credentials token_exchange; the
// server exchanges for every client but svc-a2 (its policy), tokens
// live 6 s, the gateway caches them 3 s (margin 3s).
//
// identity is the rcns identity line's modes ("" is oauth).
func exchangeWorld(t *testing.T, identity string) (*oauthWorld, *credentialChecker) {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "gateway-secret")
	if err := os.WriteFile(secret, []byte("gateway-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	var w *oauthWorld
	var check *credentialChecker
	o := credentialOpts()
	o.identity = identity
	o.exchangeTTL = 6 * time.Second
	o.exchangeSubjects = []string{cidA1, "svc-b", "app"}
	o.hotel = func(hotelURL string) string {
		check = startCredentialChecker(t, hotelURL,
			func() string {
				m, err := w.AS.Metadata()
				if err != nil {
					return ""
				}
				u, _ := m["jwks_uri"].(string)
				return u
			},
			func() string { return w.AS.Issuer() }, legacyHotel, "at+jwt", "")
		return check.URL + ` {
			credentials token_exchange {
				issuer @@ISSUER@@
				client_id gateway
				client_secret {file.` + secret + `}
				resource ` + legacyHotel + `
				margin 3s
			}
		}`
	}
	w = startOAuthWorld(t, o)
	return w, check
}

// credentialOpts are the agents and clients of the issue 31 worlds:
// rcns-demo-agent (client_credentials svc-a1, and the public client app
// its users alice and bob log in with), rcns-demo-other (svc-b),
// rcns-demo-refused (svc-a2); the gateway's own client may exchange
// tokens; the hotel API is a resource of the authorization server.
func credentialOpts() oauthOpts {
	return oauthOpts{
		agents: []oauthAgent{
			{name: "rcns-demo-agent", scopes: demoScopes, clients: []string{cidA1, "app"}},
			{name: "rcns-demo-other", scopes: demoScopes, clients: []string{"svc-b"}},
			{name: "rcns-demo-refused", scopes: demoScopes, clients: []string{cidA2}},
		},
		clients: []oauthtest.Client{
			oauthtest.ConfidentialClient(cidA1, oauthSecret),
			oauthtest.ConfidentialClient(cidA2, oauthSecret),
			oauthtest.ConfidentialClient("svc-b", oauthSecret),
			oauthtest.ConfidentialClient("gateway", "gateway-secret", "client_credentials", oauthtest.GrantTokenExchange),
			oauthtest.PublicClient("app", appRedirect),
		},
		others: map[string]oauthtest.Resource{legacyHotel: {Scopes: demoScopes}},
	}
}

// exchangeCallers are two agents, and two people (alice, bob) behind
// one agent: client_credentials tokens name the document's owner, the
// authorization-code tokens their user.
func exchangeCallers(t *testing.T, w *oauthWorld) []exchangeCaller {
	t.Helper()
	user := func(name string) string {
		tr, err := w.AS.AuthorizationCodeAs(name, "app", "", appRedirect, w.Resource, demoScopes...)
		if err != nil {
			t.Fatalf("authorization code for %s: %v", name, err)
		}
		return tr.AccessToken
	}
	a, other := agentID("rcns-demo-agent"), agentID("rcns-demo-other")
	return []exchangeCaller{
		{name: "agent a1", agent: a, owner: "hotel-ops", sub: cidA1, token: w.token(t, cidA1, "", demoScopes...)},
		{name: "agent b", agent: other, owner: "hotel-ops", sub: "svc-b", token: w.token(t, "svc-b", "", demoScopes...)},
		{name: "alice behind a", agent: a, owner: "alice", sub: "alice", token: user("alice")},
		{name: "bob behind a", agent: a, owner: "bob", sub: "bob", token: user("bob")},
	}
}

// wantExchanged checks what the hotel saw for one call of c: n requests,
// each with a token exchanged for c (sub, the gateway as actor, the
// hotel as audience, the step's scope), never c's own token anywhere;
// it returns the exchanged tokens.
func wantExchanged(t *testing.T, check *credentialChecker, c exchangeCaller, what string, n int) []string {
	t.Helper()
	seen := check.Seen()
	if len(seen) != n || len(check.Refused()) != 0 {
		t.Fatalf("%s, %s: the hotel accepted %d requests (want %d), refused %v", c.name, what, len(seen), n, check.Refused())
	}
	var out []string
	for _, s := range seen {
		act, _ := s.Claims["act"].(map[string]any)
		want := "hotel:read"
		if s.Method == "POST" {
			want = "hotel:book"
		}
		if s.Claims["sub"] != c.sub || act["sub"] != "gateway" || s.Claims["aud"] != legacyHotel || s.Claims["scope"] != want {
			t.Errorf("%s, %s: %s %s carried claims %v, want sub %s, act.sub gateway, aud %s, scope %s", c.name, what, s.Method, s.Path, s.Claims, c.sub, legacyHotel, want)
		}
		for k, vs := range s.Header {
			for _, v := range vs {
				if strings.Contains(v, c.token) {
					t.Errorf("%s, %s: the caller's own token reached the hotel in %s", c.name, what, k)
				}
			}
		}
		out = append(out, s.Raw)
	}
	check.Reset()
	return out
}

// TestUpstreamTokenExchangeDistinct: two agents, and two people behind
// one agent, call the same Tier B endpoint and the same three-step
// recipe over the door under test and over MCP: every step of every
// call reaches the hotel with a token exchanged for that caller (its
// sub, the hotel's audience, the step's scope), never the caller's
// token, and the records say "exchanged".
func TestUpstreamTokenExchangeDistinct(t *testing.T) {
	w, check := exchangeWorld(t, "")
	callers := exchangeCallers(t, w)
	bySub := map[string][]string{}
	for _, c := range callers {
		r := w.GW.Do(t, "FETCH", "/guests/g-1", bearer(c.token), nil)
		wantStatus(t, r, 200)
		wantOAuthAnswer(t, r, c.agent, c.owner)
		bySub[c.sub] = append(bySub[c.sub], wantExchanged(t, check, c, "FETCH over the door", 1)...)
		wantCredentialKind(t, attribution(t, r), "exchanged")

		r = w.GW.Do(t, "BOOK", "/room", bearer(c.token, "Allow-RCNS", "true"), bookBody())
		if r.Status != 200 && r.Status != 263 {
			t.Fatalf("%s: BOOK /room:\n%s", c.name, r)
		}
		bySub[c.sub] = append(bySub[c.sub], wantExchanged(t, check, c, "BOOK over the door", 3)...)

		m := mcpConnectWith(t, w.GW.URL+"/mcp", &mcpTransport{hdr: map[string]string{"Authorization": "Bearer " + c.token}, base: http.DefaultTransport})
		m.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantSuccess(t, 200)
		bySub[c.sub] = append(bySub[c.sub], wantExchanged(t, check, c, "fetch_guest over MCP", 1)...)
		if mr := m.call(t, "book-room", bookArgs(), nil); mr.outcome() != "succeeded" {
			t.Fatalf("%s: book-room over MCP: %v", c.name, mr.structured)
		}
		bySub[c.sub] = append(bySub[c.sub], wantExchanged(t, check, c, "book-room over MCP", 3)...)
	}
	// No exchanged token served two callers.
	owner := map[string]string{}
	for sub, toks := range bySub {
		for _, tok := range toks {
			if o, ok := owner[tok]; ok && o != sub {
				t.Errorf("one exchanged token reached the hotel for %s and for %s", o, sub)
			}
			owner[tok] = sub
		}
	}
}

// TestUpstreamTokenExchangeFailures: an exchanged token is reused
// within its life (one exchange at the server for several calls) and
// exchanged again after it; the server refusing the exchange is a 424
// token-exchange-refused naming the hotel and the server's error code,
// over the door and MCP, with nothing executed; the server down is 503
// issuer-unavailable with Retry-After, nothing executed. A caller that
// is verified without an OAuth token (identity header here) has nothing
// to exchange: 424 upstream-credential-missing, nothing executed.
func TestUpstreamTokenExchangeFailures(t *testing.T) {
	w, check := exchangeWorld(t, "oauth header")
	issued := func() int {
		t.Helper()
		st, err := w.AS.ExchangeStats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Issued
	}

	// Reuse within the cache life (6 s token less the 3 s margin).
	tok := w.token(t, "svc-b", "", demoScopes...)
	c := exchangeCaller{name: "agent b", sub: "svc-b", token: tok}
	before := issued()
	start := time.Now()
	var first []string
	for range 3 {
		wantStatus(t, w.GW.Do(t, "FETCH", "/guests/g-1", bearer(tok), nil), 200)
		first = append(first, wantExchanged(t, check, c, "FETCH", 1)...)
	}
	if time.Since(start) > 2500*time.Millisecond {
		t.Logf("three calls took %v: the reuse check may see the cache life end", time.Since(start))
	}
	if n := issued() - before; n != 1 || first[0] != first[1] || first[1] != first[2] {
		t.Errorf("three calls within the token's cached life: %d exchanges (want 1), same token %v", n, first[0] == first[2])
	}
	// After it: exchanged again.
	time.Sleep(time.Until(start.Add(3500 * time.Millisecond)))
	wantStatus(t, w.GW.Do(t, "FETCH", "/guests/g-1", bearer(tok), nil), 200)
	after := wantExchanged(t, check, c, "FETCH after the cached life", 1)
	if n := issued() - before; n != 2 || after[0] == first[0] {
		t.Errorf("a call after the cached life: %d exchanges in all (want 2), new token %v", n, after[0] != first[0])
	}

	// The server refuses: its policy does not exchange svc-a2's tokens.
	hotelBefore := w.Hotel.Count()
	refused := w.token(t, cidA2, "", demoScopes...)
	for _, call := range []struct {
		method, path string
		body         any
	}{{"FETCH", "/guests/g-1", nil}, {"BOOK", "/room", bookBody()}} {
		r := w.GW.Do(t, call.method, call.path, bearer(refused, "Allow-RCNS", "true"), call.body)
		b := assertErrorBody(t, r, 424, "token-exchange-refused")
		expl, _ := b["explanation"].(string)
		if !strings.Contains(expl, "upstream hotel") || !strings.Contains(expl, "invalid_grant") || strings.Contains(expl, refused[:24]) ||
			strings.Count(expl, "nothing was") != 1 {
			t.Errorf("%s %s: explanation %q, want the upstream and the server's error code once, no token, \"nothing was run\" once", call.method, call.path, expl)
		}
		if b["upstream"] != "hotel" || b["step"] == nil || b["step"] == "" {
			t.Errorf("%s %s: body %v, want upstream hotel and the step", call.method, call.path, b)
		}
	}
	m := mcpConnectWith(t, w.GW.URL+"/mcp", &mcpTransport{hdr: map[string]string{"Authorization": "Bearer " + refused}, base: http.DefaultTransport})
	m.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantError(t, "token-exchange-refused", 424, false)
	if len(check.Seen())+len(check.Refused()) != 0 || w.Hotel.Count() != hotelBefore {
		t.Errorf("a refused exchange reached the hotel: %d accepted, %v refused, %d at the counter", len(check.Seen()), check.Refused(), w.Hotel.Count()-hotelBefore)
	}

	// No OAuth token: the agent identified by Agent-ID alone.
	r0 := w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentID("rcns-demo-other"), "hotel:read"), nil)
	b0 := assertErrorBody(t, r0, 424, "upstream-credential-missing")
	if expl, _ := b0["explanation"].(string); !strings.Contains(expl, "identity oauth") || b0["upstream"] != "hotel" {
		t.Errorf("a caller without an OAuth token: %v", b0)
	}
	if len(check.Seen())+len(check.Refused()) != 0 || w.Hotel.Count() != hotelBefore {
		t.Errorf("a caller without an OAuth token reached the hotel")
	}

	// The server down: a token not exchanged yet gets 503 with Retry-After.
	fresh := w.token(t, cidA1, "", demoScopes...)
	w.AS.Stop()
	r := w.GW.Do(t, "FETCH", "/guests/g-1", bearer(fresh), nil)
	b := assertErrorBody(t, r, 503, "issuer-unavailable")
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("503 Retry-After = %q, want a positive number of seconds", r.Header.Get("Retry-After"))
	}
	if b["retryable"] != true || b["upstream"] != "hotel" {
		t.Errorf("503 body %v", b)
	}
	// The agent is told the upstream, not the gateway's internal token
	// endpoint or its dial error (those are the operator's log line), and
	// "nothing was run" once.
	if ex, _ := b["explanation"].(string); strings.Contains(ex, "127.0.0.1") || strings.Contains(ex, "dial") ||
		strings.Contains(ex, "/token") || strings.Count(ex, "nothing was") != 1 {
		t.Errorf("503 explanation %q names an internal address or error, or repeats itself", ex)
	}
	if len(check.Seen())+len(check.Refused()) != 0 || w.Hotel.Count() != hotelBefore {
		t.Errorf("with the server down, a call reached the hotel")
	}
}

// wantCredentialKind checks a record's upstream_credentials: every step
// names kind, and no value.
func wantCredentialKind(t *testing.T, rec map[string]any, kind string) {
	t.Helper()
	creds, _ := rec["upstream_credentials"].([]any)
	if len(creds) == 0 {
		t.Errorf("the record has no upstream_credentials: %v", rec)
	}
	for _, c := range creds {
		m, _ := c.(map[string]any)
		if m["kind"] != kind || m["upstream"] != "hotel" || len(m) != 3 {
			t.Errorf("record upstream_credentials %v, want kind %s for upstream hotel, nothing else", creds, kind)
		}
	}
}
