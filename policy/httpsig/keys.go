package httpsig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/go-jose/go-jose/v4"
)

// Algorithm names (RFC 9421 §3.3, HTTP Signature Algorithms registry).
const (
	// AlgEd25519 is EdDSA over edwards25519 (RFC 9421 §3.3.6): 64-byte
	// signatures over the unhashed signature base.
	AlgEd25519 = "ed25519"
	// AlgECDSAP256SHA256 is ECDSA over P-256 with SHA-256 (RFC 9421
	// §3.3.4): signatures are raw r||s, 32 bytes each, big-endian.
	AlgECDSAP256SHA256 = "ecdsa-p256-sha256"
)

// Algorithm returns the algorithm name for pub: AlgEd25519 for an
// ed25519.PublicKey, AlgECDSAP256SHA256 for a P-256 *ecdsa.PublicKey.
// Any other key is an error.
func Algorithm(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return "", errors.New("httpsig: malformed Ed25519 public key")
		}
		return AlgEd25519, nil
	case *ecdsa.PublicKey:
		if k == nil || k.Curve != elliptic.P256() {
			return "", errors.New("httpsig: ECDSA key is not on P-256")
		}
		return AlgECDSAP256SHA256, nil
	}
	return "", fmt.Errorf("httpsig: unsupported public key type %T", pub)
}

// Thumbprint returns the RFC 7638 JWK thumbprint of pub (SHA-256,
// base64url without padding, 43 characters): the keyid agents sign
// with. pub is an ed25519.PublicKey or a P-256 *ecdsa.PublicKey; other
// keys are an error.
func Thumbprint(pub crypto.PublicKey) (string, error) {
	if _, err := Algorithm(pub); err != nil {
		return "", err
	}
	tp, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("httpsig: thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// JWKFromPublic returns the public JWK (RFC 7517) of pub as a JSON
// object: "kty", "crv", "x" (and "y" for P-256) and "kid" set to
// [Thumbprint]. pub is an ed25519.PublicKey or a P-256
// *ecdsa.PublicKey.
func JWKFromPublic(pub crypto.PublicKey) (map[string]any, error) {
	kid, err := Thumbprint(pub)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(&jose.JSONWebKey{Key: pub, KeyID: kid})
	if err != nil {
		return nil, fmt.Errorf("httpsig: jwk: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("httpsig: jwk: %w", err)
	}
	return m, nil
}

// PublicKeyFromJWK parses a public JWK given as a decoded JSON object
// (an OKP Ed25519 or EC P-256 key) and returns an ed25519.PublicKey or
// *ecdsa.PublicKey. It fails on private key material ("d"), other key
// types or curves, points not on the curve, and a "kid" that is not the
// key's RFC 7638 thumbprint (ARCHITECTURE.md "Identity": keyid =
// thumbprint).
func PublicKeyFromJWK(m map[string]any) (crypto.PublicKey, error) {
	if _, ok := m["d"]; ok {
		return nil, errors.New("httpsig: jwk carries private key material")
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("httpsig: jwk: %w", err)
	}
	var k jose.JSONWebKey
	if err := k.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("httpsig: jwk: %w", err)
	}
	pub := k.Key
	if _, err := Algorithm(pub); err != nil {
		return nil, err
	}
	if k.KeyID != "" {
		tp, err := Thumbprint(pub)
		if err != nil {
			return nil, err
		}
		if k.KeyID != tp {
			return nil, fmt.Errorf("httpsig: jwk kid %q is not its thumbprint %q", k.KeyID, tp)
		}
	}
	return pub, nil
}

// LoadPrivateKey reads a PEM private key from path: PKCS#8 ("PRIVATE
// KEY") holding an Ed25519 or P-256 key, or SEC 1 ("EC PRIVATE KEY",
// the form of RFC 9421 Appendix B.1.3) holding a P-256 key. It returns
// an ed25519.PrivateKey or *ecdsa.PrivateKey; anything else (other
// curves, RSA, encrypted PEM, trailing garbage) is an error.
func LoadPrivateKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("httpsig: %w", err)
	}
	return ParsePrivateKey(data)
}

// ParsePrivateKey is [LoadPrivateKey] over PEM bytes.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("httpsig: no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("httpsig: unsupported PEM block %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("httpsig: private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("httpsig: unsupported private key type %T", key)
	}
	if _, err := Algorithm(signer.Public()); err != nil {
		return nil, err
	}
	return signer, nil
}
