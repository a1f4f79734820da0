package upstreamauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

func writeKey(t *testing.T, dir, name string, k any) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// upstreamCheck is what an upstream does with an assertion: fetch the
// published JWKS, verify the signature and typ, then iss, aud and time.
func upstreamCheck(jwksURL, token, issuer, audience string, at time.Time) (*AssertionClaims, error) {
	resp, err := http.Get(jwksURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		return nil, err
	}
	tok, err := josejwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256})
	if err != nil {
		return nil, err
	}
	h := tok.Headers[0]
	if h.ExtraHeaders["typ"] != AssertionType {
		return nil, errTyp
	}
	keys := set.Key(h.KeyID)
	if len(keys) != 1 {
		return nil, errKid
	}
	var c AssertionClaims
	if err := tok.Claims(keys[0], &c); err != nil {
		return nil, err
	}
	if err := c.ValidateWithLeeway(josejwt.Expected{Issuer: issuer, AnyAudience: josejwt.Audience{audience}, Time: at}, 0); err != nil {
		return nil, err
	}
	return &c, nil
}

type testErr string

func (e testErr) Error() string { return string(e) }

const (
	errTyp = testErr("wrong typ")
	errKid = testErr("unknown kid")
)

// TestAssertion: an assertion verifies against the published JWKS with
// the claims of the caller; another upstream's check (another audience)
// refuses it, as does any check after exp; keys load from Ed25519 and
// P-256 files, the second published beside the first.
func TestAssertion(t *testing.T) {
	dir := t.TempDir()
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keys, err := LoadAssertionKeys([]string{writeKey(t, dir, "ed.pem", edKey), writeKey(t, dir, "ec.pem", ecKey)})
	if err != nil {
		t.Fatal(err)
	}
	ecOnly, err := LoadAssertionKeys([]string{writeKey(t, dir, "ec2.pem", ecKey)})
	if err != nil {
		t.Fatal(err)
	}
	set := JWKS(keys, ecOnly)
	if len(set.Keys) != 2 || set.Keys[0].KeyID != keys.KeyID() || set.Keys[0].Algorithm != "EdDSA" || set.Keys[1].Algorithm != "ES256" {
		t.Fatalf("JWKS %+v", set.Keys)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ServeJWKS(w, r, set) }))
	defer srv.Close()
	raw, _ := http.Get(srv.URL)
	body, _ := io.ReadAll(raw.Body)
	raw.Body.Close()
	if raw.Header.Get("Content-Type") != "application/jwk-set+json" || strings.Contains(string(body), `"d"`) {
		t.Errorf("published JWKS %s: %s", raw.Header.Get("Content-Type"), body)
	}

	for method, want := range map[string]int{http.MethodHead: 200, http.MethodPost: 405} {
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (method == http.MethodHead && n != 0) {
			t.Errorf("%s JWKS: %d, %d bytes", method, resp.StatusCode, n)
		}
	}

	orders, err := NewAssertion(AssertionConfig{Upstream: "orders", Issuer: "https://gw.example", Audience: "https://orders.example/", Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	c := Caller{AgentID: strings.Repeat("b", 64), OwnerID: "alice", ContractID: "syn-1", RequestID: "req-1", Token: "caller-token"}
	cred, r := orders.Resolve(context.Background(), c, nil)
	if r != nil {
		t.Fatal(r)
	}
	tok, ok := strings.CutPrefix(cred.Header.Get("Authorization"), "Bearer ")
	if !ok || cred.Kind != KindAssertion || strings.Contains(tok, "caller-token") {
		t.Fatalf("credential %v", cred)
	}
	got, err := upstreamCheck(srv.URL, tok, "https://gw.example", "https://orders.example/", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != c.AgentID || got.AgentID != c.AgentID || got.OwnerID != "alice" || got.ContractID != "syn-1" || got.RequestID != "req-1" ||
		got.ID == "" || got.Expiry.Time().Sub(got.IssuedAt.Time()) != DefaultAssertionTTL {
		t.Errorf("claims %+v", got)
	}
	// A second assertion has another jti.
	cred2, _ := orders.Resolve(context.Background(), c, nil)
	if cred2.Header.Get("Authorization") == cred.Header.Get("Authorization") {
		t.Error("two assertions are equal")
	}
	// Replayed at another upstream: its check (its audience) refuses it.
	if _, err := upstreamCheck(srv.URL, tok, "https://gw.example", "https://billing.example/", time.Now()); err == nil {
		t.Error("an assertion for orders verified at billing")
	}
	// After exp: refused.
	if _, err := upstreamCheck(srv.URL, tok, "https://gw.example", "https://orders.example/", time.Now().Add(DefaultAssertionTTL+time.Second)); err == nil {
		t.Error("an expired assertion verified")
	}
	// Another header, a Tier B call without owner: the JWT alone, no empty claims.
	plain, err := NewAssertion(AssertionConfig{Upstream: "orders", Issuer: "https://gw.example", Audience: "orders", Keys: ecOnly, Header: "x-rcns-assertion", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cred, _ = plain.Resolve(context.Background(), Caller{AgentID: c.AgentID}, nil)
	got, err = upstreamCheck(srv.URL, cred.Header.Get("X-Rcns-Assertion"), "https://gw.example", "orders", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.OwnerID != "" || got.ContractID != "" || got.Expiry.Time().Sub(got.IssuedAt.Time()) != 5*time.Second {
		t.Errorf("claims %+v", got)
	}
	tokPart := strings.Split(cred.Header.Get("X-Rcns-Assertion"), ".")[1]
	if p, _ := jose.ParseSignedCompact(cred.Header.Get("X-Rcns-Assertion"), []jose.SignatureAlgorithm{jose.ES256}); p == nil || strings.Contains(string(p.UnsafePayloadWithoutVerification()), "owner_id") {
		t.Errorf("payload %s", tokPart)
	}
	// No agent: refused.
	if _, r := orders.Resolve(context.Background(), Caller{}, nil); r == nil || r.Reason != ReasonCredentialMissing {
		t.Errorf("no agent: %v", r)
	}

	// Refused keys and configs.
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, p := range map[string]string{"rsa": writeKey(t, dir, "rsa.pem", rsaKey), "p384": writeKey(t, dir, "p384.pem", p384), "missing": filepath.Join(dir, "none.pem")} {
		if _, err := LoadAssertionKeys([]string{p}); err == nil {
			t.Errorf("%s key accepted", name)
		}
	}
	for name, cfg := range map[string]AssertionConfig{
		"no issuer":   {Audience: "a", Keys: keys},
		"no audience": {Issuer: "i", Keys: keys},
		"no key":      {Issuer: "i", Audience: "a"},
		"long ttl":    {Issuer: "i", Audience: "a", Keys: keys, TTL: time.Hour},
	} {
		if _, err := NewAssertion(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The generated key is one per process.
	g1, err := GeneratedAssertionKeys()
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := GeneratedAssertionKeys()
	if g1 != g2 || g1.KeyID() == "" {
		t.Error("generated keys differ")
	}
}
