package httpsig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"time"

	"github.com/dunglas/httpsfv"
)

// DefaultLabel is the signature label used when none is given (RFC
// 9421 §4: the Signature-Input and Signature dictionary key).
const DefaultLabel = "sig1"

// optionalHeaders are the AGTP request headers covered whenever present
// (ARCHITECTURE.md "Identity"), and rcns-idempotency-key, the reference
// client's name for Idempotency-Key that the gateway takes as its alias:
// it keys the request as Idempotency-Key does, so it is covered as that
// one is. owner-id decides whom upstream calls act for (a per_owner
// credential); request-id, session-id and task-id are echoed, recorded
// and named in upstream identity assertions: none may be added or
// changed by a relay.
var optionalHeaders = []string{"idempotency-key", "rcns-idempotency-key", "authority-scope", "allow-rcns", "contract-synthesized", "synthesis-id",
	"owner-id", "request-id", "session-id", "task-id"}

// DefaultComponents returns the components an AGTP request signature
// must cover, in this order: "@method" "@authority" "@path", "@query"
// when the URL has a query (even an empty one), "agent-id",
// "content-type" and "content-digest" when the request has a body, then
// each of "idempotency-key" "rcns-idempotency-key" "authority-scope"
// "allow-rcns" "contract-synthesized" "synthesis-id" "owner-id"
// "request-id" "session-id" "task-id" present on req.
//
// A request has a body when req.Body is neither nil nor http.NoBody and
// req.ContentLength is not 0 (a positive length, or -1 for unknown).
func DefaultComponents(req *http.Request) []string {
	c := []string{"@method", "@authority", "@path"}
	if req.URL != nil && (req.URL.RawQuery != "" || req.URL.ForceQuery) {
		c = append(c, "@query")
	}
	c = append(c, "agent-id")
	if hasBody(req) {
		c = append(c, "content-type", "content-digest")
	}
	for _, h := range optionalHeaders {
		if _, ok := req.Header[http.CanonicalHeaderKey(h)]; ok {
			c = append(c, h)
		}
	}
	return c
}

// hasBody reports whether req carries content (see DefaultComponents).
func hasBody(req *http.Request) bool {
	return req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
}

// SetContentDigest sets h's Content-Digest to the SHA-256 digest of
// body, `sha-256=:<base64>:` (RFC 9530 §2), replacing any previous
// value. An empty or nil body gets the digest of zero bytes.
func SetContentDigest(h http.Header, body []byte) {
	sum := sha256.Sum256(body)
	h.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
}

// Signer signs requests with one key.
type Signer struct {
	// KeyID is the keyid signature parameter (RFC 9421 §2.3); for AGTP
	// the key's [Thumbprint]. Required.
	KeyID string
	// Alg is AlgEd25519 or AlgECDSAP256SHA256. When set it must match
	// Key and is sent as the alg parameter; when empty the algorithm is
	// derived from Key and no alg parameter is sent (RFC 9421 §2.3
	// makes it optional; verifiers take the algorithm from the key).
	Alg string
	// Key is an ed25519.PrivateKey or a P-256 *ecdsa.PrivateKey, or any
	// crypto.Signer whose Public() is one of those keys.
	Key crypto.Signer
}

// SignOptions are the per-request signature parameters.
type SignOptions struct {
	// Label is the dictionary key of the signature; "" means
	// DefaultLabel ("sig1").
	Label string
	// Created is the created parameter (Unix seconds); zero means now.
	Created time.Time
	// Expires is the expires parameter (Unix seconds); zero omits it.
	// [Verify] requires it.
	Expires time.Time
	// Nonce is the nonce parameter; "" omits it.
	Nonce string
	// Components are the covered component identifiers, in order; nil
	// means DefaultComponents(req).
	Components []string
}

// Sign adds the signature labelled opt.Label to req's Signature-Input
// and Signature fields (RFC 9421 §3.1, §4), keeping signatures under
// other labels and replacing one under the same label. The parameters
// are serialized in the order created, expires, nonce, alg, keyid.
//
// The body must already be set; Sign reads nothing of it, so when
// "content-digest" is covered the Content-Digest field must already be
// on req ([SetContentDigest]). It fails when KeyID or Key is missing,
// Alg does not match Key, a covered component cannot be derived (an
// absent header field, an unsupported identifier), an existing
// Signature-Input or Signature field does not parse, or the key fails
// to sign.
func (s *Signer) Sign(req *http.Request, opt SignOptions) error {
	if s == nil || s.Key == nil {
		return errors.New("httpsig: signer has no key")
	}
	if s.KeyID == "" {
		return errors.New("httpsig: signer has no keyid")
	}
	alg, err := Algorithm(s.Key.Public())
	if err != nil {
		return err
	}
	if s.Alg != "" && s.Alg != alg {
		return fmt.Errorf("httpsig: alg %q does not match a %s key", s.Alg, alg)
	}
	label := opt.Label
	if label == "" {
		label = DefaultLabel
	}
	components := opt.Components
	if components == nil {
		components = DefaultComponents(req)
	}
	created := opt.Created
	if created.IsZero() {
		created = time.Now()
	}

	il := httpsfv.InnerList{Params: httpsfv.NewParams()}
	for _, c := range components {
		il.Items = append(il.Items, httpsfv.NewItem(c))
	}
	il.Params.Add("created", created.Unix())
	if !opt.Expires.IsZero() {
		il.Params.Add("expires", opt.Expires.Unix())
	}
	if opt.Nonce != "" {
		il.Params.Add("nonce", opt.Nonce)
	}
	if s.Alg != "" {
		il.Params.Add("alg", s.Alg)
	}
	il.Params.Add("keyid", s.KeyID)

	base, err := signatureBase(message{req: req, header: req.Header}, il)
	if err != nil {
		return err
	}
	sig, err := signRaw(s.Key, alg, []byte(base))
	if err != nil {
		return err
	}

	inputs, err := parseDict(req.Header, "Signature-Input")
	if err != nil {
		return err
	}
	sigs, err := parseDict(req.Header, "Signature")
	if err != nil {
		return err
	}
	inputs.Add(label, il)
	sigs.Add(label, httpsfv.NewItem(sig))
	in, err := httpsfv.Marshal(inputs)
	if err != nil {
		return fmt.Errorf("httpsig: Signature-Input: %w", err)
	}
	out, err := httpsfv.Marshal(sigs)
	if err != nil {
		return fmt.Errorf("httpsig: Signature: %w", err)
	}
	req.Header.Set("Signature-Input", in)
	req.Header.Set("Signature", out)
	return nil
}

// parseDict parses header field name of h as a Dictionary; an absent
// field is an empty Dictionary.
func parseDict(h http.Header, name string) (*httpsfv.Dictionary, error) {
	v := h.Values(name)
	if len(v) == 0 {
		return httpsfv.NewDictionary(), nil
	}
	d, err := httpsfv.UnmarshalDictionary(v)
	if err != nil {
		return nil, fmt.Errorf("httpsig: %s: %w", name, err)
	}
	return d, nil
}

// signRaw signs base with key under alg, returning the RFC 9421 §3.3
// signature bytes (64 bytes for both algorithms).
func signRaw(key crypto.Signer, alg string, base []byte) ([]byte, error) {
	switch alg {
	case AlgEd25519:
		sig, err := key.Sign(rand.Reader, base, crypto.Hash(0))
		if err != nil {
			return nil, fmt.Errorf("httpsig: sign: %w", err)
		}
		return sig, nil
	case AlgECDSAP256SHA256:
		digest := sha256.Sum256(base)
		der, err := key.Sign(rand.Reader, digest[:], crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("httpsig: sign: %w", err)
		}
		var rs struct{ R, S *big.Int }
		rest, err := asn1.Unmarshal(der, &rs)
		if err != nil || len(rest) != 0 || rs.R == nil || rs.S == nil ||
			rs.R.Sign() <= 0 || rs.S.Sign() <= 0 || rs.R.BitLen() > 256 || rs.S.BitLen() > 256 {
			return nil, errors.New("httpsig: sign: malformed ECDSA signature")
		}
		out := make([]byte, 64)
		rs.R.FillBytes(out[:32])
		rs.S.FillBytes(out[32:])
		return out, nil
	}
	return nil, fmt.Errorf("httpsig: unsupported alg %q", alg)
}

// verifyRaw checks sig over base with pub under alg (RFC 9421 §3.3.4,
// §3.3.6).
func verifyRaw(pub crypto.PublicKey, alg string, base, sig []byte) bool {
	switch alg {
	case AlgEd25519:
		k, ok := pub.(ed25519.PublicKey)
		return ok && len(k) == ed25519.PublicKeySize && len(sig) == ed25519.SignatureSize && ed25519.Verify(k, base, sig)
	case AlgECDSAP256SHA256:
		k, ok := pub.(*ecdsa.PublicKey)
		if !ok || k == nil || len(sig) != 64 {
			return false
		}
		if a, err := Algorithm(k); err != nil || a != AlgECDSAP256SHA256 {
			return false
		}
		digest := sha256.Sum256(base)
		r := new(big.Int).SetBytes(sig[:32])
		s := new(big.Int).SetBytes(sig[32:])
		return ecdsa.Verify(k, digest[:], r, s)
	}
	return false
}
