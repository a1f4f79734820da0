package records

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unsafe"

	jose "github.com/go-jose/go-jose/v4"
	voied25519 "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// TypAttribution is the JWS "typ" header of an Attribution-Record
// (RCNS §4, §16).
const TypAttribution = "agtp-attribution+jwt"

// TypLifecycle is the JWS "typ" header of a lifecycle event envelope
// (RCNS §18). It differs from [TypAttribution] so that neither kind of
// record can be passed off as the other.
const TypLifecycle = "agtp-lifecycle+jwt"

// ZeroHash is 64 zeros: the previous_audit_id of an agent's first
// Attribution-Record (RCNS §16.2) and the prev of the first record of a
// negotiation chain (seed 002 §8.2).
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// ErrUnsigned is returned by [Verify] for a well-formed `alg: none`
// record: it carries no signature to check (RCNS §4: consumers requiring
// crypto must reject it).
var ErrUnsigned = errors.New("records: record is unsigned (alg none)")

// ErrUnknownKey is wrapped by the error [Verify] returns when the record's
// kid names no key of the given JWK set.
var ErrUnknownKey = errors.New("records: no key with the record's kid")

// b64 is unpadded base64url (RFC 7515 §2).
var b64 = base64.RawURLEncoding

// Signer produces Attribution-Records and lifecycle envelopes (RCNS §4,
// §16, §18). Its zero value and a nil *Signer sign nothing and produce the
// unsigned form. A Signer is immutable after [NewSigner] and safe for
// concurrent use.
type Signer struct {
	// priv signs; nil means unsigned.
	priv ed25519.PrivateKey
	// kid is the RFC 7638 thumbprint of priv's public key, base64url.
	kid string
	// attrHeader and lifeHeader are base64url(header) + ".", built once.
	attrHeader string
	lifeHeader string
	// jwks is the JSON of the public key set, built once.
	jwks []byte
}

// NewSigner returns a Signer for keys, each a 64-byte Ed25519 private key
// (crypto/ed25519 form): keys[0] signs, and the public keys of all of them
// are published by [Signer.JWKS] so records signed with a retired key stay
// verifiable (ARCHITECTURE.md "Records"). With no keys the Signer
// produces the unsigned `alg: none` form (RCNS §4); the caller should warn
// at start. It returns an error naming the index of a key of the wrong
// length, whose public half does not match its seed, or that repeats an
// earlier key.
func NewSigner(keys []ed25519.PrivateKey) (*Signer, error) {
	s := &Signer{}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	seen := map[string]int{}
	for i, k := range keys {
		if len(k) != ed25519.PrivateKeySize {
			return nil, fmt.Errorf("records: key %d: Ed25519 private key is %d bytes, want %d", i, len(k), ed25519.PrivateKeySize)
		}
		if !bytes.Equal(ed25519.NewKeyFromSeed(k.Seed()), k) {
			return nil, fmt.Errorf("records: key %d: public half does not match the seed", i)
		}
		pub := k.Public().(ed25519.PublicKey)
		kid, err := Thumbprint(pub)
		if err != nil {
			return nil, fmt.Errorf("records: key %d: %w", i, err)
		}
		if j, dup := seen[kid]; dup {
			return nil, fmt.Errorf("records: key %d repeats key %d (kid %s)", i, j, kid)
		}
		seen[kid] = i
		set.Keys = append(set.Keys, jose.JSONWebKey{
			Key:       pub,
			KeyID:     kid,
			Algorithm: string(jose.EdDSA),
			Use:       "sig",
		})
		if i == 0 {
			s.priv = k
			s.kid = kid
		}
	}
	js, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("records: encode key set: %w", err)
	}
	s.jwks = js
	s.attrHeader = s.header(TypAttribution)
	s.lifeHeader = s.header(TypLifecycle)
	return s, nil
}

// header returns base64url of the protected header for typ, plus ".".
func (s *Signer) header(typ string) string {
	var h []byte
	if s.priv != nil {
		h, _ = json.Marshal(struct {
			Alg string `json:"alg"`
			Kid string `json:"kid"`
			Typ string `json:"typ"`
		}{"EdDSA", s.kid, typ})
	} else {
		h, _ = json.Marshal(struct {
			Alg string `json:"alg"`
			Typ string `json:"typ"`
		}{"none", typ})
	}
	return b64.EncodeToString(h) + "."
}

// Thumbprint returns the RFC 7638 JWK SHA-256 thumbprint of pub,
// base64url without padding (43 characters): the kid of records signed
// with the matching private key. It fails only for a public key of the
// wrong length.
func Thumbprint(pub ed25519.PublicKey) (string, error) {
	tp, err := httpsig.Thumbprint(pub)
	if err != nil {
		return "", fmt.Errorf("records: %w", err)
	}
	return tp, nil
}

// LoadEd25519Key reads a PEM file holding one PKCS#8 "PRIVATE KEY" block
// with an Ed25519 key (what `openssl genpkey -algorithm ed25519` writes)
// and returns the key. Errors name the path and say what was found
// instead: no PEM block, another block type (an OpenSSH key, an
// encrypted PKCS#8 key, a certificate), a PKCS#8 parse failure, or a key
// of another algorithm.
func LoadEd25519Key(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("records: read signing key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("records: signing key %s: no PEM block found; want a PKCS#8 \"PRIVATE KEY\" block", path)
	}
	if block.Type != "PRIVATE KEY" {
		hint := ""
		switch block.Type {
		case "OPENSSH PRIVATE KEY":
			hint = " (convert with `ssh-keygen -p -m PKCS8 -f FILE` or create one with `openssl genpkey -algorithm ed25519`)"
		case "ENCRYPTED PRIVATE KEY":
			hint = " (encrypted keys are not supported; decrypt with `openssl pkey`)"
		}
		return nil, fmt.Errorf("records: signing key %s: PEM block is %q, want PKCS#8 \"PRIVATE KEY\"%s", path, block.Type, hint)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("records: signing key %s: parse PKCS#8: %w", path, err)
	}
	ed, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("records: signing key %s: key is %T, want Ed25519", path, key)
	}
	return ed, nil
}

// Signed reports whether s signs (at least one key was configured). A nil
// Signer is unsigned.
func (s *Signer) Signed() bool { return s != nil && s.priv != nil }

// KeyID returns the kid of the signing key, or "" when s is unsigned.
func (s *Signer) KeyID() string {
	if s == nil {
		return ""
	}
	return s.kid
}

// Sign returns the Attribution-Record for payload as a JWS Compact string
// (RCNS §4, §16) and its Audit-ID, the lowercase hex SHA-256 of that
// string (64 characters). The payload is encoded with encoding/json
// without HTML escaping (a nil map encodes as {}). The protected header is
// {"alg":"EdDSA","kid":KID,"typ":"agtp-attribution+jwt"}, or
// {"alg":"none","typ":"agtp-attribution+jwt"} with an empty signature part
// when s is unsigned. It fails only when payload cannot be encoded as JSON.
func (s *Signer) Sign(payload map[string]any) (compact, auditID string, err error) {
	return s.sign(payload, TypAttribution)
}

// SignJSON is Sign for a payload already encoded as one JSON object
// (callers that build the payload by hand skip encoding/json).
func (s *Signer) SignJSON(body []byte) (compact, auditID string) {
	var head string
	if s != nil {
		head = s.attrHeader
	}
	if head == "" {
		head = (&Signer{}).header(TypAttribution)
	}
	return s.finish(head, body)
}

func (s *Signer) finish(head string, body []byte) (compact, auditID string) {
	sigLen := 0
	if s.Signed() {
		sigLen = b64.EncodedLen(ed25519.SignatureSize)
	}
	buf := make([]byte, 0, len(head)+b64.EncodedLen(len(body))+1+sigLen)
	buf = append(buf, head...)
	buf = b64.AppendEncode(buf, body)
	buf = append(buf, '.')
	if s.Signed() {
		// curve25519-voi signs the same RFC 8032 bytes as crypto/ed25519
		// (Ed25519 is deterministic; TestSignMatchesStdlib) in about two
		// thirds of the time here: its fixed-base scalar multiplication
		// uses larger precomputed tables (BenchmarkEd25519Sign).
		sig := ed25519Sign(s.priv, buf[:len(buf)-1])
		buf = b64.AppendEncode(buf, sig)
	}
	sum := sha256.Sum256(buf)
	var hx [64]byte
	hex.Encode(hx[:], sum[:])
	// buf is never written again: the string shares its bytes instead of
	// copying them (about 1 KB per answer, as strings.Builder does).
	return unsafe.String(unsafe.SliceData(buf), len(buf)), string(hx[:])
}

// ed25519Sign is the Ed25519 signature (RFC 8032, pure Ed25519) of msg
// by priv, a 64-byte key NewSigner checked, made with curve25519-voi.
func ed25519Sign(priv ed25519.PrivateKey, msg []byte) []byte {
	return voied25519.Sign(voied25519.PrivateKey(priv), msg)
}

// sign is Sign with the header chosen by typ.
func (s *Signer) sign(payload map[string]any, typ string) (compact, auditID string, err error) {
	var head string
	switch {
	case s == nil || s.attrHeader == "":
		// Zero or nil Signer: unsigned, header built on the fly.
		head = (&Signer{}).header(typ)
	case typ == TypLifecycle:
		head = s.lifeHeader
	default:
		head = s.attrHeader
	}
	body, err := encodePayload(payload)
	if err != nil {
		return "", "", err
	}
	compact, auditID = s.finish(head, body)
	return compact, auditID, nil
}

// encodePayload is json.Marshal without HTML escaping and without the
// trailing newline; nil encodes as {}.
func encodePayload(payload map[string]any) ([]byte, error) {
	if payload == nil {
		return []byte("{}"), nil
	}
	if b, ok := appendStringMap(payload); ok {
		return b, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(payload); err != nil {
		return nil, fmt.Errorf("records: encode payload: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// appendStringMap is encodePayload for the common payload whose values
// are all strings (lifecycle events): keys sorted as encoding/json sorts
// them, keys and values written by jsonenc.AppendString; false when a value
// is not a string.
func appendStringMap(m map[string]any) ([]byte, bool) {
	keys := make([]string, 0, len(m))
	size := 2
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		keys = append(keys, k)
		size += len(k) + len(s) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, size+size/8)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, k)
		b = append(b, ':')
		b = jsonenc.AppendString(b, m[k].(string))
	}
	return append(b, '}'), true
}

// AuditID returns the Audit-ID of a JWS Compact string: lowercase hex
// SHA-256 of its bytes, 64 characters (RCNS §4).
func AuditID(compact string) string {
	sum := sha256.Sum256([]byte(compact))
	return hex.EncodeToString(sum[:])
}

// JWKS returns the public key set to publish as the manifest's
// server.record_keys (ARCHITECTURE.md "Records"):
// {"keys":[{"kty":"OKP","crv":"Ed25519","x":...,"kid":...,"alg":"EdDSA","use":"sig"},...]},
// signing key first; {"keys":[]} when s is unsigned. Each call returns a
// fresh value the caller may modify.
func (s *Signer) JWKS() map[string]any {
	out := map[string]any{"keys": []any{}}
	if s == nil || s.jwks == nil {
		return out
	}
	if err := json.Unmarshal(s.jwks, &out); err != nil {
		// s.jwks was produced by json.Marshal in NewSigner.
		panic("records: corrupt key set: " + err.Error())
	}
	return out
}

// Verify checks a JWS Compact record (Attribution-Record or lifecycle
// envelope) against jwks, a JWK set in the shape [Signer.JWKS] returns
// (or its JSON decoded into a map), and returns the decoded payload
// (numbers as float64). Only EdDSA is accepted, with the key whose kid
// the header names. A well-formed `alg: none` record returns
// [ErrUnsigned]; an unknown kid an error wrapping [ErrUnknownKey]; a
// malformed record, a bad signature or a payload that is not a JSON
// object another error. It is meant for tests and tools, not the request
// path.
func Verify(compact string, jwks map[string]any) (payload map[string]any, err error) {
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("records: JWS compact form has %d parts, want 3", len(parts))
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, fmt.Errorf("records: decode JWS header: %w", err)
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return nil, fmt.Errorf("records: parse JWS header: %w", err)
	}
	if hdr.Alg == "none" {
		if parts[2] != "" {
			return nil, errors.New("records: alg none record carries a signature")
		}
		if _, err := decodeObject(parts[1]); err != nil {
			return nil, err
		}
		return nil, ErrUnsigned
	}
	if hdr.Alg != string(jose.EdDSA) {
		return nil, fmt.Errorf("records: JWS alg %q, want EdDSA", hdr.Alg)
	}
	setJSON, err := json.Marshal(jwks)
	if err != nil {
		return nil, fmt.Errorf("records: encode key set: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(setJSON, &set); err != nil {
		return nil, fmt.Errorf("records: parse key set: %w", err)
	}
	keys := set.Key(hdr.Kid)
	if hdr.Kid == "" || len(keys) == 0 {
		return nil, fmt.Errorf("%w: kid %q", ErrUnknownKey, hdr.Kid)
	}
	jws, err := jose.ParseSignedCompact(compact, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, fmt.Errorf("records: parse JWS: %w", err)
	}
	var lastErr error
	for _, k := range keys {
		pub, ok := k.Key.(ed25519.PublicKey)
		if !ok {
			lastErr = fmt.Errorf("records: key %q is %T, want Ed25519 public key", hdr.Kid, k.Key)
			continue
		}
		body, err := jws.Verify(pub)
		if err != nil {
			lastErr = fmt.Errorf("records: verify JWS: %w", err)
			continue
		}
		return parseObject(body)
	}
	return nil, lastErr
}

// decodeObject decodes a base64url JSON object.
func decodeObject(part string) (map[string]any, error) {
	body, err := b64.DecodeString(part)
	if err != nil {
		return nil, fmt.Errorf("records: decode JWS payload: %w", err)
	}
	return parseObject(body)
}

// parseObject decodes a JSON object.
func parseObject(body []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("records: parse JWS payload: %w", err)
	}
	if m == nil {
		return nil, errors.New("records: JWS payload is not a JSON object")
	}
	return m, nil
}
