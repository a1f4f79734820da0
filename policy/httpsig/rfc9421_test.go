package httpsig

import (
	"bufio"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// RFC 9421 Appendix B.2.6 and B.2.4 published values.
const (
	b26Input     = `sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`
	b26Signature = `sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:`
	b24Params    = `("@status" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-ecc-p256"`
	b24SigB64    = `wNmSUAhwb5LxtOtOpNa6W5xj067m5hFrj0XQ4fvpaCLx0NKocgPquLgyahnzDnDAUy5eCdlYUEkLIj+32oiasw==`
)

// readTestdata returns testdata/name.
func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rfcRequest parses the RFC 9421 Appendix B.2 test-request as a server
// would receive it.
func rfcRequest(t testing.TB) *http.Request {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "test-request.http"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	req, err := http.ReadRequest(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// rfcPublicKey parses testdata/name as a PKIX public key.
func rfcPublicKey(t testing.TB, name string) any {
	t.Helper()
	block, _ := pem.Decode(readTestdata(t, name))
	if block == nil {
		t.Fatalf("%s: no PEM", name)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestRFC9421B26 reproduces Appendix B.2.6 (ed25519, test-key-ed25519):
// the signature base exactly and, Ed25519 being deterministic, the
// Signature-Input and Signature fields byte for byte.
func TestRFC9421B26(t *testing.T) {
	components := []string{"date", "@method", "@path", "@authority", "content-type", "content-length"}
	params := `("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`
	want := string(readTestdata(t, "b26-signature-base.txt"))

	req := rfcRequest(t)
	base, err := SignatureBase(req, components, params)
	if err != nil {
		t.Fatal(err)
	}
	if base != want {
		t.Fatalf("signature base:\n%s\nwant:\n%s", base, want)
	}

	key, err := LoadPrivateKey(filepath.Join("testdata", "test-key-ed25519.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if pub := rfcPublicKey(t, "test-key-ed25519.pub.pem").(ed25519.PublicKey); !pub.Equal(key.Public()) {
		t.Fatal("B.1.4 private and public keys differ")
	}
	s := &Signer{KeyID: "test-key-ed25519", Key: key}
	if err := s.Sign(req, SignOptions{Label: "sig-b26", Created: time.Unix(1618884473, 0), Components: components}); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Signature-Input"); got != b26Input {
		t.Errorf("Signature-Input:\n%s\nwant:\n%s", got, b26Input)
	}
	if got := req.Header.Get("Signature"); got != b26Signature {
		t.Errorf("Signature:\n%s\nwant:\n%s", got, b26Signature)
	}

	// The published signature verifies over our base with the B.1.4
	// public key.
	raw, _ := base64.StdEncoding.DecodeString("wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==")
	if !verifyRaw(key.Public(), AlgEd25519, []byte(base), raw) {
		t.Error("B.2.6 signature does not verify over the base")
	}
}

// TestRFC9421B26Verify runs Verify over the published B.2.6 message:
// the RFC gives no expires, so Verify refuses it as signature-invalid
// (the AGTP profile requires expires) and nothing else.
func TestRFC9421B26Verify(t *testing.T) {
	req := rfcRequest(t)
	req.Header.Set("Signature-Input", b26Input)
	req.Header.Set("Signature", b26Signature)
	pub := rfcPublicKey(t, "test-key-ed25519.pub.pem")
	keys := func(id string) (string, crypto.PublicKey, string, bool) {
		return AlgEd25519, pub, "owner", id == "test-key-ed25519"
	}
	_, err := Verify(req, keys, VerifyOptions{Label: "sig-b26", Now: time.Unix(1618884473, 0)})
	if e, ok := err.(*Error); !ok || e.Reason != ReasonSignatureInvalid {
		t.Fatalf("err = %v, want signature-invalid (no expires)", err)
	}
}

// TestRFC9421B24 checks Appendix B.2.4 (ecdsa-p256-sha256,
// test-key-ecc-p256, a response): the signature base matches exactly
// and the published (non-deterministic) signature verifies over it with
// the B.1.3 public key.
func TestRFC9421B24(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "test-response.http"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resp, err := http.ReadResponse(bufio.NewReader(f), nil)
	if err != nil {
		t.Fatal(err)
	}
	base, err := responseSignatureBase(resp, b24Params)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(readTestdata(t, "b24-signature-base.txt")); base != want {
		t.Fatalf("signature base:\n%s\nwant:\n%s", base, want)
	}
	pub := rfcPublicKey(t, "test-key-ecc-p256.pub.pem").(*ecdsa.PublicKey)
	sig, err := base64.StdEncoding.DecodeString(b24SigB64)
	if err != nil {
		t.Fatal(err)
	}
	if !verifyRaw(pub, AlgECDSAP256SHA256, []byte(base), sig) {
		t.Fatal("B.2.4 signature does not verify over the base")
	}
	if verifyRaw(pub, AlgECDSAP256SHA256, []byte(base+" "), sig) {
		t.Fatal("B.2.4 signature verifies over a changed base")
	}

	// Our signer's output over the same base verifies with the B.1.3 key.
	key, err := LoadPrivateKey(filepath.Join("testdata", "test-key-ecc-p256.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(key.Public()) {
		t.Fatal("B.1.3 private and public keys differ")
	}
	mine, err := signRaw(key, AlgECDSAP256SHA256, []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 64 || !verifyRaw(pub, AlgECDSAP256SHA256, []byte(base), mine) {
		t.Fatal("own ECDSA signature does not verify")
	}
}

// TestFieldValues follows RFC 9421 §2.1: trimmed field line values
// joined by ", ", inner whitespace kept, empty fields allowed, absent
// fields refused.
func TestFieldValues(t *testing.T) {
	h := http.Header{}
	h["X-Ows-Header"] = []string{"   Leading and trailing whitespace.   "}
	h["Cache-Control"] = []string{"max-age=60", "   must-revalidate"}
	h["Example-Dict"] = []string{" a=1,    b=2;x=1;y=2,   c=(a   b   c)"}
	h["X-Empty-Header"] = []string{""}
	m := message{req: httptest.NewRequest("GET", "/", nil), header: h}
	for _, tc := range []struct{ name, want string }{
		{"x-ows-header", "Leading and trailing whitespace."},
		{"cache-control", "max-age=60, must-revalidate"},
		{"example-dict", "a=1,    b=2;x=1;y=2,   c=(a   b   c)"},
		{"x-empty-header", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := componentValue(m, tc.name)
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := componentValue(m, "x-absent"); err == nil {
		t.Fatal("absent field: want error")
	}
}

// TestDerivedComponents follows RFC 9421 §2.2 for client-built and
// server-received requests.
func TestDerivedComponents(t *testing.T) {
	client, _ := http.NewRequest("POST", "https://WWW.Example.com:443/path?param=value", nil)
	server := httptest.NewRequest("POST", "/path?param=value", nil)
	server.Host = "www.example.com:8080"
	noQuery, _ := http.NewRequest("GET", "http://example.com:80", nil)
	emptyQuery, _ := http.NewRequest("GET", "http://example.com/a%2Fb?", nil)
	custom, _ := http.NewRequest("fetch", "http://127.0.0.1:9000/x", nil)
	agtps, _ := http.NewRequest("QUERY", "agtps://GW.example:4480/x?y=1", nil)
	agtp, _ := http.NewRequest("QUERY", "agtp://127.0.0.1:9000/x", nil)
	for _, tc := range []struct {
		name, component, want string
		req                   *http.Request
	}{
		{"method", "@method", "POST", client},
		{"method as sent", "@method", "fetch", custom},
		{"authority default port", "@authority", "www.example.com", client},
		{"authority other port", "@authority", "www.example.com:8080", server},
		{"authority http default port", "@authority", "example.com", noQuery},
		{"authority loopback", "@authority", "127.0.0.1:9000", custom},
		{"authority agtps default port", "@authority", "gw.example", agtps},
		{"authority agtp other port", "@authority", "127.0.0.1:9000", agtp},
		{"scheme agtps", "@scheme", "agtps", agtps},
		{"target-uri agtps", "@target-uri", "agtps://gw.example/x?y=1", agtps},
		{"scheme client", "@scheme", "https", client},
		{"scheme server", "@scheme", "http", server},
		{"target-uri", "@target-uri", "https://www.example.com/path?param=value", client},
		{"target-uri server", "@target-uri", "http://www.example.com:8080/path?param=value", server},
		{"request-target client", "@request-target", "/path?param=value", client},
		{"request-target server", "@request-target", "/path?param=value", server},
		{"path", "@path", "/path", client},
		{"path empty", "@path", "/", noQuery},
		{"path escaped", "@path", "/a%2Fb", emptyQuery},
		{"query", "@query", "?param=value", client},
		{"query absent", "@query", "?", noQuery},
		{"query empty", "@query", "?", emptyQuery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := componentValue(message{req: tc.req, header: tc.req.Header}, tc.component)
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"@status", "@query-param", "@nope"} {
		if _, err := componentValue(message{req: client, header: client.Header}, bad); err == nil {
			t.Errorf("%s: want error", bad)
		}
	}
}

// TestSignatureBaseRefusals covers the §2.5 failure cases.
func TestSignatureBaseRefusals(t *testing.T) {
	req := rfcRequest(t)
	for _, tc := range []struct {
		name       string
		components []string
		params     string
	}{
		{"duplicate", []string{"@method", "@method"}, `("@method" "@method");created=1`},
		{"parameters", []string{"date"}, `("date";sf);created=1`},
		{"uppercase field", []string{"Date"}, `("Date");created=1`},
		{"absent field", []string{"x-absent"}, `("x-absent");created=1`},
		{"signature-params covered", []string{"@signature-params"}, `("@signature-params");created=1`},
		{"params mismatch", []string{"@method"}, `("@path");created=1`},
		{"params not a list", []string{"@method"}, `"@method"`},
		{"params garbage", []string{"@method"}, `("@method"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if base, err := SignatureBase(req, tc.components, tc.params); err == nil {
				t.Fatalf("want error, got base %q", base)
			}
		})
	}
}
