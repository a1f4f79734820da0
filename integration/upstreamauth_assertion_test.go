package integration

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 31: the hotel upstream takes an identity assertion, a JWT the
// gateway signs per call naming agent, owner, contract and request, and
// checks it as its own API would, against the key set the gateway
// publishes at /.well-known/rcns/upstream-jwks.json.

// assertionType is the assertion's typ header (upstreamauth.AssertionType).
const assertionType = "rcns-assertion+jwt"

// upstreamJWKSPath is the gateway's published assertion key set
// (upstreamauth.JWKSPath).
const upstreamJWKSPath = "/.well-known/rcns/upstream-jwks.json"

// assertionWorld is an oauthWorld whose hotel upstream is behind a
// checker of assertions (iss the gateway's resource, aud the hotel, the
// gateway's published keys), with credentials assertion signed by an
// Ed25519 key file.
func assertionWorld(t *testing.T) (*oauthWorld, *credentialChecker) {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "assertion.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	var w *oauthWorld
	var check *credentialChecker
	o := credentialOpts()
	o.hotel = func(hotelURL string) string {
		check = startCredentialChecker(t, hotelURL, func() string { return w.GW.URL + upstreamJWKSPath },
			func() string { return w.Resource }, legacyHotel, assertionType, "")
		return check.URL + ` {
			credentials assertion {
				audience ` + legacyHotel + `
				keys ` + keyFile + `
			}
		}`
	}
	w = startOAuthWorld(t, o)
	return w, check
}

// wantAssertions checks what the hotel saw for one call of c: n
// requests, each with an assertion naming c's agent and owner, a
// request id, a contract id exactly when contract, distinct jti, never
// c's token; it returns the assertions.
func wantAssertions(t *testing.T, check *credentialChecker, c exchangeCaller, what string, n int, contract bool) []string {
	t.Helper()
	seen := check.Seen()
	if len(seen) != n || len(check.Refused()) != 0 {
		t.Fatalf("%s, %s: the hotel accepted %d requests (want %d), refused %v", c.name, what, len(seen), n, check.Refused())
	}
	jtis := map[any]bool{}
	var out []string
	for _, s := range seen {
		cl := s.Claims
		if cl["sub"] != c.agent || cl["agent_id"] != c.agent || cl["owner_id"] != c.owner || cl["request_id"] == nil ||
			(cl["contract_id"] != nil) != contract || jtis[cl["jti"]] {
			t.Errorf("%s, %s: %s %s carried claims %v, want agent %s, owner %s, contract %v", c.name, what, s.Method, s.Path, cl, c.agent, c.owner, contract)
		}
		jtis[cl["jti"]] = true
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

// TestUpstreamAssertion: two agents, and two people behind one agent,
// call the same Tier B endpoint and the same three-step recipe over the
// door under test and over MCP: every step reaches the hotel with an
// assertion its own check verifies against the gateway's published
// JWKS, naming that caller; records say "assertion". An assertion
// replayed at another API (another audience) is refused by that API's
// same check.
func TestUpstreamAssertion(t *testing.T) {
	w, check := assertionWorld(t)
	// The published key set: public keys only, served by the gateway.
	r := w.GW.DoHTTP(t, "GET", upstreamJWKSPath, nil, nil)
	wantStatus(t, r, 200)
	if ct := r.Header.Get("Content-Type"); ct != "application/jwk-set+json" || strings.Contains(string(r.Body), `"d"`) || !strings.Contains(string(r.Body), `"EdDSA"`) {
		t.Errorf("GET %s: %s %s", upstreamJWKSPath, ct, r.Body)
	}
	// Another method: 405 method-not-allowed in the error body with
	// Allow, as the other well-known paths (docs/doors.md), for a plain
	// request and for one carrying an Agent-ID.
	for _, hdr := range []map[string]string{nil, {"Agent-ID": strings.Repeat("ab", 32)}} {
		r := w.GW.DoHTTP(t, "POST", upstreamJWKSPath, hdr, map[string]any{})
		assertErrorBody(t, r, 405, "method-not-allowed")
		if allow := r.Header.Get("Allow"); allow != "GET, HEAD" {
			t.Errorf("POST %s (%v): Allow %q, want GET, HEAD", upstreamJWKSPath, hdr, allow)
		}
	}

	var one string
	for _, c := range exchangeCallers(t, w) {
		r := w.GW.Do(t, "FETCH", "/guests/g-1", bearer(c.token), nil)
		wantStatus(t, r, 200)
		wantOAuthAnswer(t, r, c.agent, c.owner)
		wantCredentialKind(t, attribution(t, r), "assertion")
		one = wantAssertions(t, check, c, "FETCH over the door", 1, false)[0]

		r = w.GW.Do(t, "BOOK", "/room", bearer(c.token, "Allow-RCNS", "true"), bookBody())
		if r.Status != 200 && r.Status != 263 {
			t.Fatalf("%s: BOOK /room:\n%s", c.name, r)
		}
		wantAssertions(t, check, c, "BOOK over the door", 3, true)

		m := mcpConnectWith(t, w.GW.URL+"/mcp", &mcpTransport{hdr: map[string]string{"Authorization": "Bearer " + c.token}, base: http.DefaultTransport})
		m.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantSuccess(t, 200)
		wantAssertions(t, check, c, "fetch_guest over MCP", 1, false)
		if mr := m.call(t, "book-room", bookArgs(), nil); mr.outcome() != "succeeded" {
			t.Fatalf("%s: book-room over MCP: %v", c.name, mr.structured)
		}
		wantAssertions(t, check, c, "book-room over MCP", 3, true)
	}

	// Replayed at another API: the billing API runs the same check with
	// its own audience, and refuses the hotel's assertion.
	billing := startCredentialChecker(t, w.Hotel.URL, func() string { return w.GW.URL + upstreamJWKSPath },
		func() string { return w.Resource }, "http://billing.legacy.test/", assertionType, "")
	req, _ := http.NewRequest("GET", billing.URL+"/guests/g-1", nil)
	req.Header.Set("Authorization", one)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ref := billing.Refused(); resp.StatusCode != 401 || len(ref) != 1 || !strings.Contains(ref[0], "aud") || len(billing.Seen()) != 0 {
		t.Errorf("the hotel's assertion replayed at billing: %d, refusals %v", resp.StatusCode, ref)
	}
	// The same assertion at the hotel's own check still verifies (it is
	// the audience that refused it, not the signature).
	req, _ = http.NewRequest("GET", check.URL+"/guests/g-1", nil)
	req.Header.Set("Authorization", one)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("the assertion at its own audience: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
