package records

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// RFC 8037 Appendix A.1 key and A.3 thumbprint.
const (
	rfc8037D   = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"
	rfc8037X   = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
	rfc8037Kid = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
)

func rfc8037Key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	seed, err := base64.RawURLEncoding.DecodeString(rfc8037D)
	if err != nil {
		t.Fatal(err)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustSigner(t testing.TB, keys ...ed25519.PrivateKey) *Signer {
	t.Helper()
	s, err := NewSigner(keys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestThumbprintRFC8037(t *testing.T) {
	k := rfc8037Key(t)
	if got := base64.RawURLEncoding.EncodeToString(k.Public().(ed25519.PublicKey)); got != rfc8037X {
		t.Fatalf("public key x = %s, want %s", got, rfc8037X)
	}
	kid, err := Thumbprint(k.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if kid != rfc8037Kid {
		t.Errorf("Thumbprint = %s, want %s (RFC 8037 A.3)", kid, rfc8037Kid)
	}
	s := mustSigner(t, k)
	if s.KeyID() != rfc8037Kid {
		t.Errorf("KeyID = %s, want %s", s.KeyID(), rfc8037Kid)
	}
	want := map[string]any{"keys": []any{map[string]any{
		"kty": "OKP", "crv": "Ed25519", "x": rfc8037X,
		"kid": rfc8037Kid, "alg": "EdDSA", "use": "sig",
	}}}
	if got := s.JWKS(); !reflect.DeepEqual(got, want) {
		t.Errorf("JWKS = %v, want %v", got, want)
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	k := rfc8037Key(t)
	s := mustSigner(t, k)
	if !s.Signed() {
		t.Fatal("Signed() = false with a key")
	}
	payload := map[string]any{
		"agent_id":             strings.Repeat("a", 64),
		"previous_audit_id":    ZeroHash,
		"audit_record_version": "1",
		"status":               263,
		"path":                 "/room?a=1&b=<2>",
	}
	compact, auditID, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(compact))
	if auditID != hex.EncodeToString(sum[:]) || auditID != AuditID(compact) {
		t.Errorf("auditID = %s, want sha256 hex of the compact string", auditID)
	}

	parts := strings.Split(compact, ".")
	if len(parts) != 3 || parts[2] == "" {
		t.Fatalf("compact = %q, want three parts with a signature", compact)
	}
	header, _ := base64.RawURLEncoding.DecodeString(parts[0])
	wantHeader := `{"alg":"EdDSA","kid":"` + rfc8037Kid + `","typ":"agtp-attribution+jwt"}`
	if string(header) != wantHeader {
		t.Errorf("header = %s, want %s", header, wantHeader)
	}

	// go-jose verifies what Sign produced.
	jws, err := jose.ParseSignedCompact(compact, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	body, err := jws.Verify(k.Public())
	if err != nil {
		t.Fatalf("go-jose Verify: %v", err)
	}
	if jws.Signatures[0].Header.KeyID != rfc8037Kid {
		t.Errorf("go-jose kid = %q", jws.Signatures[0].Header.KeyID)
	}
	if typ := jws.Signatures[0].Header.ExtraHeaders["typ"]; typ != TypAttribution {
		t.Errorf("go-jose typ = %v", typ)
	}
	if !strings.Contains(string(body), `"path":"/room?a=1&b=<2>"`) {
		t.Errorf("payload %s: HTML characters were escaped", body)
	}

	got, err := Verify(compact, s.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	js, _ := json.Marshal(payload)
	_ = json.Unmarshal(js, &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Verify payload = %v, want %v", got, want)
	}

	// The JWKS also works after a JSON round trip (as read from a manifest).
	var set map[string]any
	js, _ = json.Marshal(s.JWKS())
	_ = json.Unmarshal(js, &set)
	if _, err := Verify(compact, set); err != nil {
		t.Errorf("Verify with JSON-decoded JWKS: %v", err)
	}
}

func TestUnsignedForm(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	want := enc([]byte(`{"alg":"none","typ":"agtp-attribution+jwt"}`)) + "." + enc([]byte(`{"a":1,"b":"x"}`)) + "."
	tests := []struct {
		name   string
		signer *Signer
	}{
		{name: "no keys", signer: mustSigner(t)},
		{name: "empty slice", signer: mustSigner(t, []ed25519.PrivateKey{}...)},
		{name: "zero value", signer: &Signer{}},
		{name: "nil signer", signer: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.signer.Signed() {
				t.Error("Signed() = true without keys")
			}
			compact, auditID, err := tt.signer.Sign(map[string]any{"b": "x", "a": 1})
			if err != nil {
				t.Fatal(err)
			}
			if compact != want {
				t.Errorf("compact = %q, want %q", compact, want)
			}
			if auditID != AuditID(want) {
				t.Errorf("auditID = %s, want %s", auditID, AuditID(want))
			}
			if _, err := Verify(compact, tt.signer.JWKS()); !errors.Is(err, ErrUnsigned) {
				t.Errorf("Verify err = %v, want ErrUnsigned", err)
			}
			if got := tt.signer.JWKS(); !reflect.DeepEqual(got, map[string]any{"keys": []any{}}) {
				t.Errorf("JWKS = %v, want empty set", got)
			}
		})
	}
}

func TestSignNilPayload(t *testing.T) {
	compact, _, err := mustSigner(t, newKey(t)).Sign(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Split(compact, ".")[1]; p != base64.RawURLEncoding.EncodeToString([]byte("{}")) {
		t.Errorf("payload part = %q, want base64url of {}", p)
	}
}

func TestSignEncodeError(t *testing.T) {
	_, _, err := mustSigner(t, newKey(t)).Sign(map[string]any{"c": make(chan int)})
	if err == nil || !strings.Contains(err.Error(), "encode payload") {
		t.Errorf("err = %v, want an encode error", err)
	}
}

func TestKeyRotation(t *testing.T) {
	oldKey, newK := newKey(t), newKey(t)
	before := mustSigner(t, oldKey)
	after := mustSigner(t, newK, oldKey)
	compact, _, err := before.Sign(map[string]any{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(compact, after.JWKS()); err != nil {
		t.Errorf("record signed with the retired key: %v", err)
	}
	keys := after.JWKS()["keys"].([]any)
	if len(keys) != 2 || keys[0].(map[string]any)["kid"] != after.KeyID() {
		t.Errorf("JWKS keys = %v, want the signing key first of two", keys)
	}
	fresh, _, _ := after.Sign(map[string]any{"n": 2})
	if _, err := Verify(fresh, before.JWKS()); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("new record against the old set: err = %v, want ErrUnknownKey", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	k := newKey(t)
	s := mustSigner(t, k)
	good, _, err := s.Sign(map[string]any{"status": 200})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, ".")
	enc := base64.RawURLEncoding.EncodeToString
	otherPayload := enc([]byte(`{"status":500}`))
	tests := []struct {
		name    string
		compact string
		jwks    map[string]any
		wantErr error
		wantMsg string
	}{
		{name: "payload swapped", compact: parts[0] + "." + otherPayload + "." + parts[2], jwks: s.JWKS(), wantMsg: "verify"},
		{name: "signature dropped", compact: parts[0] + "." + parts[1] + ".", jwks: s.JWKS(), wantMsg: "JWS"},
		{name: "other key set", compact: good, jwks: mustSigner(t, newKey(t)).JWKS(), wantErr: ErrUnknownKey},
		{name: "empty key set", compact: good, jwks: map[string]any{"keys": []any{}}, wantErr: ErrUnknownKey},
		{name: "two parts", compact: parts[0] + "." + parts[1], jwks: s.JWKS(), wantMsg: "3"},
		{name: "header not base64", compact: "!!." + parts[1] + "." + parts[2], jwks: s.JWKS(), wantMsg: "header"},
		{name: "alg HS256", compact: enc([]byte(`{"alg":"HS256","kid":"`+s.KeyID()+`"}`)) + "." + parts[1] + "." + parts[2], jwks: s.JWKS(), wantMsg: "HS256"},
		{name: "alg none with signature", compact: enc([]byte(`{"alg":"none"}`)) + "." + parts[1] + "." + parts[2], jwks: s.JWKS(), wantMsg: "signature"},
		{name: "alg none payload not object", compact: enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(`[1]`)) + ".", jwks: s.JWKS(), wantMsg: "payload"},
		{name: "alg none", compact: enc([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".", jwks: s.JWKS(), wantErr: ErrUnsigned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Verify(tt.compact, tt.jwks)
			if err == nil {
				t.Fatalf("Verify = %v, want an error", p)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %v, want it to mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestNewSignerErrors(t *testing.T) {
	k := newKey(t)
	bad := append(ed25519.PrivateKey{}, k...)
	bad[63] ^= 1 // public half no longer matches the seed
	tests := []struct {
		name string
		keys []ed25519.PrivateKey
		want string
	}{
		{name: "short key", keys: []ed25519.PrivateKey{k[:32]}, want: "key 0: Ed25519 private key is 32 bytes"},
		{name: "mismatched public half", keys: []ed25519.PrivateKey{k, bad}, want: "key 1: public half"},
		{name: "duplicate", keys: []ed25519.PrivateKey{k, newKey(t), k}, want: "key 2 repeats key 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSigner(tt.keys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadEd25519Key(t *testing.T) {
	dir := t.TempDir()
	k := rfc8037Key(t)
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pemOf := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{name: "pkcs8 ed25519", path: write("good.pem", pemOf("PRIVATE KEY", der))},
		{name: "missing file", path: filepath.Join(dir, "nope.pem"), wantErr: "read signing key"},
		{name: "not pem", path: write("raw.key", []byte("hello")), wantErr: "no PEM block"},
		{name: "openssh", path: write("ssh.pem", pemOf("OPENSSH PRIVATE KEY", []byte("x"))), wantErr: `"OPENSSH PRIVATE KEY", want PKCS#8`},
		{name: "encrypted", path: write("enc.pem", pemOf("ENCRYPTED PRIVATE KEY", []byte("x"))), wantErr: "encrypted keys are not supported"},
		{name: "garbage pkcs8", path: write("bad.pem", pemOf("PRIVATE KEY", []byte("x"))), wantErr: "parse PKCS#8"},
		{name: "ecdsa key", path: write("ec.pem", pemOf("PRIVATE KEY", ecDER)), wantErr: "want Ed25519"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadEd25519Key(tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(k) {
				t.Error("loaded key differs from the one written")
			}
		})
	}
}

func TestJWKSIsACopy(t *testing.T) {
	s := mustSigner(t, newKey(t))
	s.JWKS()["keys"] = nil
	if keys, _ := s.JWKS()["keys"].([]any); len(keys) != 1 {
		t.Errorf("JWKS keys = %v after a caller modified an earlier result", keys)
	}
}

// TestAppendStringMapMatchesEncodingJSON holds the string-map fast path
// of encodePayload byte-equal to encoding/json (SetEscapeHTML(false)).
func TestAppendStringMapMatchesEncodingJSON(t *testing.T) {
	for _, m := range []map[string]any{
		{},
		{"b": "2", "a": "1", "A": "0", "é": "x", "": "empty"},
		{"html": "<a href=\"x\">&</a>", "ctl": "\x00\x01\t\n\r\x1f\x7f", "sep": "\u2028\u2029", "bad": "caf\xe9", "bad\xffkey": "v", "quote\"key": "\\"},
		{"event_type": "rcns_propose_accepted", "agent_id": strings.Repeat("a", 64), "path": "/x\"y/é"},
	} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		got, ok := appendStringMap(m)
		if !ok || !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("appendStringMap = %s (%v)\nencoding/json   %s", got, ok, want.Bytes())
		}
	}
	if _, ok := appendStringMap(map[string]any{"n": 1}); ok {
		t.Error("a non-string value took the fast path")
	}
}

// rfc8032Vectors are RFC 8032 §7.1 TEST 1, TEST 2 and TEST 3 (Ed25519):
// secret key (the 32-byte seed), public key, message and signature, hex.
var rfc8032Vectors = []struct{ seed, pub, msg, sig string }{
	{
		"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
		"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
		"",
		"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
	},
	{
		"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
		"3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
		"72",
		"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
	},
	{
		"c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
		"fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
		"af82",
		"6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
	},
}

// signatureOf returns the decoded signature part of a compact record and
// its signing input (header "." payload).
func signatureOf(t *testing.T, compact string) (input, sig []byte) {
	t.Helper()
	i := strings.LastIndexByte(compact, '.')
	if i < 0 {
		t.Fatalf("%q is not a compact JWS", compact)
	}
	sig, err := base64.RawURLEncoding.DecodeString(compact[i+1:])
	if err != nil {
		t.Fatalf("signature part of %q: %v", compact, err)
	}
	return []byte(compact[:i]), sig
}

// TestSignRFC8032 checks the signing primitive the Signer uses against
// RFC 8032's own vectors, and the vectors' keys through the Signer: its
// signature over a record is the one crypto/ed25519 gives for the same
// signing input (Ed25519 is deterministic), so swapping the
// implementation cannot change a single record byte.
func TestSignRFC8032(t *testing.T) {
	for i, v := range rfc8032Vectors {
		seed, _ := hex.DecodeString(v.seed)
		msg, _ := hex.DecodeString(v.msg)
		want, _ := hex.DecodeString(v.sig)
		priv := ed25519.NewKeyFromSeed(seed)
		if got := hex.EncodeToString(priv.Public().(ed25519.PublicKey)); got != v.pub {
			t.Fatalf("TEST %d: public key %s, want %s", i+1, got, v.pub)
		}
		if got := ed25519Sign(priv, msg); !bytes.Equal(got, want) {
			t.Errorf("TEST %d: signature %x, want %x", i+1, got, want)
		}
		s := mustSigner(t, priv)
		compact, _, err := s.Sign(map[string]any{"vector": i + 1, "msg": v.msg})
		if err != nil {
			t.Fatal(err)
		}
		input, sig := signatureOf(t, compact)
		if std := ed25519.Sign(priv, input); !bytes.Equal(sig, std) {
			t.Errorf("TEST %d key: record signature %x, crypto/ed25519 gives %x", i+1, sig, std)
		}
	}
}

// TestSignMatchesStdlib compares the Signer's signatures with
// crypto/ed25519's for random keys and records of random content and
// length (both forms: Sign and SignJSON), and verifies each with
// crypto/ed25519.Verify.
func TestSignMatchesStdlib(t *testing.T) {
	r := mrand.New(mrand.NewPCG(7, 8))
	for i := range 200 {
		priv := newKey(t)
		s := mustSigner(t, priv)
		raw := make([]byte, r.IntN(3000))
		for j := range raw {
			raw[j] = byte(0x20 + r.IntN(0x5f))
		}
		var compact string
		if i%2 == 0 {
			var err error
			if compact, _, err = s.Sign(map[string]any{"n": i, "text": string(raw)}); err != nil {
				t.Fatal(err)
			}
		} else {
			body, _ := json.Marshal(map[string]any{"n": i, "text": string(raw)})
			compact, _ = s.SignJSON(body)
		}
		input, sig := signatureOf(t, compact)
		if std := ed25519.Sign(priv, input); !bytes.Equal(sig, std) {
			t.Fatalf("record %d (%d bytes): signature differs from crypto/ed25519", i, len(input))
		}
		if !ed25519.Verify(priv.Public().(ed25519.PublicKey), input, sig) {
			t.Fatalf("record %d: crypto/ed25519 rejects the signature", i)
		}
	}
}
