package httpsig_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// TestThumbprintRFC8037 uses the RFC 8037 Appendix A.3 vector: the
// RFC 7638 SHA-256 thumbprint of the Appendix A.2 Ed25519 public key.
func TestThumbprintRFC8037(t *testing.T) {
	pub, err := httpsig.PublicKeyFromJWK(map[string]any{
		"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
	})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := httpsig.Thumbprint(pub)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"; tp != want {
		t.Fatalf("thumbprint %s, want %s", tp, want)
	}
}

// TestJWKRoundTrip: JWKFromPublic → PublicKeyFromJWK gives the same key
// and kid = thumbprint, for both key types.
func TestJWKRoundTrip(t *testing.T) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tc := range []struct {
		name string
		pub  interface{ Equal(x crypto.PublicKey) bool }
		kty  string
	}{
		{"ed25519", edPub, "OKP"},
		{"p256", &ec.PublicKey, "EC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jwk, err := httpsig.JWKFromPublic(tc.pub)
			if err != nil {
				t.Fatal(err)
			}
			tp, _ := httpsig.Thumbprint(tc.pub)
			if jwk["kty"] != tc.kty || jwk["kid"] != tp {
				t.Fatalf("jwk = %v", jwk)
			}
			if _, ok := jwk["d"]; ok {
				t.Fatal("private material in public JWK")
			}
			back, err := httpsig.PublicKeyFromJWK(jwk)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.pub.Equal(back) {
				t.Fatal("round trip changed the key")
			}
		})
	}
}

// TestPublicKeyFromJWKRefusals covers unusable JWKs.
func TestPublicKeyFromJWKRefusals(t *testing.T) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	good, _ := httpsig.JWKFromPublic(edPub)
	withKid := func(kid string) map[string]any {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		m["kid"] = kid
		return m
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for _, tc := range []struct {
		name string
		jwk  map[string]any
	}{
		{"kid not thumbprint", withKid("my-key")},
		{"private", map[string]any{"kty": "OKP", "crv": "Ed25519", "x": good["x"], "d": "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}},
		{"P-384", map[string]any{"kty": "EC", "crv": "P-384", "x": "x", "y": "y"}},
		{"RSA", map[string]any{"kty": "RSA", "n": "AQAB", "e": "AQAB"}},
		{"garbage", map[string]any{"kty": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := httpsig.PublicKeyFromJWK(tc.jwk); err == nil {
				t.Fatal("want error")
			}
		})
	}
	if _, err := httpsig.Thumbprint(&p384.PublicKey); err == nil {
		t.Fatal("P-384 thumbprint: want error")
	}
}

// TestLoadPrivateKey loads the RFC 9421 keys (PKCS#8 Ed25519, SEC 1
// P-256), PKCS#8 P-256, and refuses other keys.
func TestLoadPrivateKey(t *testing.T) {
	for _, name := range []string{"test-key-ed25519.pem", "test-key-ecc-p256.pem"} {
		if _, err := httpsig.LoadPrivateKey(filepath.Join("testdata", name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ec)
	k, err := httpsig.LoadPrivateKey(write("p256.pem", "PRIVATE KEY", der))
	if err != nil || !ec.PublicKey.Equal(k.Public()) {
		t.Fatalf("PKCS#8 P-256: %v", err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	der384, _ := x509.MarshalPKCS8PrivateKey(p384)
	rk, _ := rsa.GenerateKey(rand.Reader, 1024)
	derRSA, _ := x509.MarshalPKCS8PrivateKey(rk)
	for name, path := range map[string]string{
		"P-384":   write("p384.pem", "PRIVATE KEY", der384),
		"RSA":     write("rsa.pem", "PRIVATE KEY", derRSA),
		"not PEM": write("junk.pem", "JUNK", []byte("x")),
		"missing": filepath.Join(dir, "absent.pem"),
	} {
		if _, err := httpsig.LoadPrivateKey(path); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
}
