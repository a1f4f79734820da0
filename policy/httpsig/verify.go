package httpsig

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"fmt"
	"net/http"
	"time"

	"github.com/dunglas/httpsfv"
)

// Reasons carried by [Error], as the gateway puts them on the wire.
const (
	// ReasonSignatureMissing: no Signature-Input or Signature field, or
	// no signature under the expected label.
	ReasonSignatureMissing = "signature-missing"
	// ReasonSignatureInvalid: the signature fields or parameters are
	// malformed or out of policy, or the cryptographic check fails.
	ReasonSignatureInvalid = "signature-invalid"
	// ReasonKeyUnknown: the keyid does not resolve, or resolves to a key
	// registered to another agent.
	ReasonKeyUnknown = "key-unknown"
	// ReasonSignatureExpired: the verifier's clock is past expires.
	ReasonSignatureExpired = "signature-expired"
	// ReasonComponentNotCovered: a required component is not covered.
	ReasonComponentNotCovered = "component-not-covered"
	// ReasonAuthorityMismatch: the request's @authority (the host the
	// signature was made for) is not one of [VerifyOptions.Authorities].
	ReasonAuthorityMismatch = "authority-mismatch"
	// ReasonDigestMismatch: Content-Digest is missing, has no sha-256
	// member, or does not match the body.
	ReasonDigestMismatch = "digest-mismatch"
	// ReasonSignatureReplayed: the same signature was already accepted
	// within its validity window ([ReplayCache]).
	ReasonSignatureReplayed = "signature-replayed"
)

// Default verification policy (ARCHITECTURE.md "Identity").
const (
	// DefaultMaxAge bounds expires-created.
	DefaultMaxAge = 300 * time.Second
	// DefaultSkew bounds |created-now|.
	DefaultSkew = 60 * time.Second
)

// Error is a verification refusal: Reason is one of the Reason*
// constants, Detail a human-readable explanation (never key material).
type Error struct {
	Reason string
	Detail string
}

// Error returns "httpsig: <reason>: <detail>".
func (e *Error) Error() string { return "httpsig: " + e.Reason + ": " + e.Detail }

// fail builds an *Error.
func fail(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// KeyResolver looks up a keyid: alg is AlgEd25519 or
// AlgECDSAP256SHA256, pub the matching public key, owner the Agent-ID
// the key is registered to. ok is false for an unknown keyid.
type KeyResolver func(keyID string) (alg string, pub crypto.PublicKey, owner string, ok bool)

// VerifyOptions is the verification policy.
type VerifyOptions struct {
	// Label is the signature label to verify; "" means DefaultLabel.
	Label string
	// Now is the verifier's clock; zero means time.Now().
	Now time.Time
	// MaxAge bounds expires-created; 0 means DefaultMaxAge (300 s).
	MaxAge time.Duration
	// Skew bounds how far created may lie before or after Now; 0 means
	// DefaultSkew (60 s).
	Skew time.Duration
	// Required returns the components that must be covered; nil means
	// DefaultComponents.
	Required func(req *http.Request) []string
	// Authorities, when not empty, are the authorities (RFC 9110
	// host[:port]) the verifier serves: the request's @authority (RFC
	// 9421 §2.2.3, the value the signature covers) must equal one of them,
	// compared case-insensitively and with the request scheme's default
	// port (80 for http, 443 for https, 4480 for agtp and agtps) removed
	// from both, else
	// authority-mismatch. It stops a signature made for another server
	// that trusts the same key from being accepted here. Empty accepts any
	// authority.
	Authorities []string
	// Body is the request content. When non-nil and non-empty, or when
	// "content-digest" is covered, Content-Digest must carry a sha-256
	// member equal to SHA-256(Body). When nil the body is not compared
	// (but a covered Content-Digest must still have a sha-256 member).
	Body []byte
	// ExpectOwner, when set, is the Agent-ID the key must be registered
	// to; a key owned by another agent is key-unknown.
	ExpectOwner string
	// Replay, when set, refuses a signature it has already seen
	// (signature-replayed); the signature is recorded only once every
	// other check has passed.
	Replay *ReplayCache
}

// Result describes a verified signature.
type Result struct {
	// KeyID is the keyid parameter.
	KeyID string
	// Owner is the Agent-ID the resolver returned for the key.
	Owner string
	// Alg is the algorithm the signature was checked with.
	Alg string
	// Created and Expires are the signature parameters.
	Created, Expires time.Time
	// Covered are the covered component identifiers, in order.
	Covered []string
	// Signature is the raw signature (64 bytes), the key for replay
	// caches.
	Signature []byte
}

// Verify checks the signature labelled opt.Label on req (RFC 9421
// §3.2) against the AGTP profile. It returns a *Result, or an *Error
// whose Reason is the first failure in this fixed order:
//
//  1. signature-missing: no Signature-Input or no Signature field, or
//     either lacks the label.
//  2. signature-invalid: a field does not parse as a Dictionary (RFC
//     8941), the Signature-Input member is not an Inner List of String
//     identifiers, a covered identifier is duplicated or carries
//     parameters, the Signature member is not a Byte Sequence of 64
//     bytes, keyid is missing, an alg parameter is present but neither
//     "ed25519" nor "ecdsa-p256-sha256", created or expires is missing
//     or not an Integer, expires is before created, expires-created
//     exceeds MaxAge, or created lies more than Skew before or after
//     Now.
//  3. key-unknown: the resolver does not know keyid, or ExpectOwner is
//     set and the key's owner differs.
//  4. signature-expired: Now is after expires.
//  5. component-not-covered: a component of Required(req) is not in the
//     covered list.
//  6. authority-mismatch: Authorities is not empty and the request's
//     @authority is none of them.
//  7. digest-mismatch: Content-Digest is checked when Body is non-empty
//     or "content-digest" is covered; it is absent, does not parse,
//     has no sha-256 Byte Sequence member, or (when Body is non-nil)
//     that member differs from SHA-256(Body).
//  8. signature-invalid: the alg parameter differs from the resolver's
//     algorithm, the key does not fit the algorithm, the signature base
//     cannot be built (a covered field is absent, an identifier is
//     unsupported), or the cryptographic check fails.
//  9. signature-replayed: opt.Replay is set and has seen the signature.
func Verify(req *http.Request, keys KeyResolver, opt VerifyOptions) (*Result, error) {
	label := opt.Label
	if label == "" {
		label = DefaultLabel
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	maxAge := opt.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	skew := opt.Skew
	if skew <= 0 {
		skew = DefaultSkew
	}

	// 1. presence
	inVals, sigVals := req.Header.Values("Signature-Input"), req.Header.Values("Signature")
	if len(inVals) == 0 || len(sigVals) == 0 {
		return nil, fail(ReasonSignatureMissing, "the request has no Signature-Input or Signature field")
	}
	inputs, err := httpsfv.UnmarshalDictionary(inVals)
	if err != nil {
		return nil, fail(ReasonSignatureInvalid, "Signature-Input is not a structured dictionary: %v", err)
	}
	sigs, err := httpsfv.UnmarshalDictionary(sigVals)
	if err != nil {
		return nil, fail(ReasonSignatureInvalid, "Signature is not a structured dictionary: %v", err)
	}
	inM, ok1 := inputs.Get(label)
	sigM, ok2 := sigs.Get(label)
	if !ok1 || !ok2 {
		return nil, fail(ReasonSignatureMissing, "no signature labelled %q", label)
	}

	// 2. syntax and time policy
	il, ok := inM.(httpsfv.InnerList)
	if !ok {
		return nil, fail(ReasonSignatureInvalid, "Signature-Input %q is not an inner list", label)
	}
	covered := make([]string, 0, len(il.Items))
	seen := map[string]bool{}
	for _, it := range il.Items {
		name, err := componentName(it)
		if err != nil {
			return nil, fail(ReasonSignatureInvalid, "%v", err)
		}
		if seen[name] {
			return nil, fail(ReasonSignatureInvalid, "component %q is covered twice", name)
		}
		seen[name] = true
		covered = append(covered, name)
	}
	sigItem, ok := sigM.(httpsfv.Item)
	if !ok {
		return nil, fail(ReasonSignatureInvalid, "Signature %q is not a byte sequence", label)
	}
	sig, ok := sigItem.Value.([]byte)
	if !ok {
		return nil, fail(ReasonSignatureInvalid, "Signature %q is not a byte sequence", label)
	}
	if len(sig) != 64 {
		return nil, fail(ReasonSignatureInvalid, "signature is %d bytes, want 64", len(sig))
	}
	keyID, ok := stringParam(il.Params, "keyid")
	if !ok || keyID == "" {
		return nil, fail(ReasonSignatureInvalid, "keyid parameter missing or not a string")
	}
	algParam, hasAlg := stringParam(il.Params, "alg")
	if _, present := il.Params.Get("alg"); present && !hasAlg {
		return nil, fail(ReasonSignatureInvalid, "alg parameter is not a string")
	}
	if hasAlg && algParam != AlgEd25519 && algParam != AlgECDSAP256SHA256 {
		return nil, fail(ReasonSignatureInvalid, "alg %q is not supported", algParam)
	}
	createdS, ok := intParam(il.Params, "created")
	if !ok {
		return nil, fail(ReasonSignatureInvalid, "created parameter missing or not an integer")
	}
	expiresS, ok := intParam(il.Params, "expires")
	if !ok {
		return nil, fail(ReasonSignatureInvalid, "expires parameter missing or not an integer")
	}
	if expiresS < createdS {
		return nil, fail(ReasonSignatureInvalid, "expires is before created")
	}
	if expiresS-createdS > int64(maxAge/time.Second) {
		return nil, fail(ReasonSignatureInvalid, "validity window %ds exceeds %ds", expiresS-createdS, int64(maxAge/time.Second))
	}
	created, expires := time.Unix(createdS, 0), time.Unix(expiresS, 0)
	if d := now.Sub(created); d > skew || d < -skew {
		return nil, fail(ReasonSignatureInvalid, "created is %ds away from the verifier's clock (allowed ±%ds)", int64(d/time.Second), int64(skew/time.Second))
	}

	// 3. key
	if keys == nil {
		return nil, fail(ReasonKeyUnknown, "no key resolver")
	}
	alg, pub, owner, ok := keys(keyID)
	if !ok {
		return nil, fail(ReasonKeyUnknown, "keyid %q is not registered", keyID)
	}
	if opt.ExpectOwner != "" && owner != opt.ExpectOwner {
		return nil, fail(ReasonKeyUnknown, "keyid %q is not registered to this agent", keyID)
	}

	// 4. expiry
	if now.After(expires) {
		return nil, fail(ReasonSignatureExpired, "the signature expired %ds ago", int64(now.Sub(expires)/time.Second))
	}

	// 5. coverage
	required := opt.Required
	if required == nil {
		required = DefaultComponents
	}
	for _, c := range required(req) {
		if !seen[c] {
			return nil, fail(ReasonComponentNotCovered, "component %q is not covered", c)
		}
	}

	// 6. authority
	if len(opt.Authorities) > 0 {
		if a := authority(req); !acceptsAuthority(opt.Authorities, a, scheme(req)) {
			return nil, fail(ReasonAuthorityMismatch, "the request's @authority %q is not one this server answers to", a)
		}
	}

	// 7. digest
	if len(opt.Body) > 0 || seen["content-digest"] {
		if err := checkDigest(req.Header, opt.Body); err != nil {
			return nil, err
		}
	}

	// 8. cryptography
	if hasAlg && algParam != alg {
		return nil, fail(ReasonSignatureInvalid, "alg %q does not match the key's %q", algParam, alg)
	}
	if keyAlg, err := Algorithm(pub); err != nil || keyAlg != alg {
		return nil, fail(ReasonSignatureInvalid, "key %q does not fit alg %q", keyID, alg)
	}
	base, err := signatureBase(message{req: req, header: req.Header}, il)
	if err != nil {
		return nil, fail(ReasonSignatureInvalid, "%v", err)
	}
	if !verifyRaw(pub, alg, []byte(base), sig) {
		return nil, fail(ReasonSignatureInvalid, "the signature does not verify")
	}

	// 9. replay
	if opt.Replay != nil && opt.Replay.Seen(sig, expires) {
		return nil, fail(ReasonSignatureReplayed, "the signature was already used")
	}
	return &Result{KeyID: keyID, Owner: owner, Alg: alg, Created: created, Expires: expires,
		Covered: covered, Signature: bytes.Clone(sig)}, nil
}

// acceptsAuthority reports whether the request authority a (already
// normalized by authority) equals one of list, each normalized the same
// way for scheme.
func acceptsAuthority(list []string, a, scheme string) bool {
	for _, l := range list {
		if normalizeAuthority(l, scheme) == a {
			return true
		}
	}
	return false
}

// checkDigest checks Content-Digest (RFC 9530 §2) against body: a
// sha-256 Byte Sequence member must exist and, when body is non-nil,
// equal SHA-256(body).
func checkDigest(h http.Header, body []byte) error {
	vals := h.Values("Content-Digest")
	if len(vals) == 0 {
		return fail(ReasonDigestMismatch, "Content-Digest is missing")
	}
	d, err := httpsfv.UnmarshalDictionary(vals)
	if err != nil {
		return fail(ReasonDigestMismatch, "Content-Digest does not parse: %v", err)
	}
	m, ok := d.Get("sha-256")
	if !ok {
		return fail(ReasonDigestMismatch, "Content-Digest has no sha-256 member")
	}
	it, ok := m.(httpsfv.Item)
	if !ok {
		return fail(ReasonDigestMismatch, "Content-Digest sha-256 is not a byte sequence")
	}
	got, ok := it.Value.([]byte)
	if !ok || len(got) != sha256.Size {
		return fail(ReasonDigestMismatch, "Content-Digest sha-256 is not a 32-byte sequence")
	}
	if body != nil {
		sum := sha256.Sum256(body)
		if !bytes.Equal(got, sum[:]) {
			return fail(ReasonDigestMismatch, "Content-Digest does not match the body")
		}
	}
	return nil
}

// stringParam returns parameter name of p when it is a String.
func stringParam(p *httpsfv.Params, name string) (string, bool) {
	if p == nil {
		return "", false
	}
	v, ok := p.Get(name)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

// intParam returns parameter name of p when it is an Integer.
func intParam(p *httpsfv.Params, name string) (int64, bool) {
	if p == nil {
		return 0, false
	}
	v, ok := p.Get(name)
	if !ok {
		return 0, false
	}
	i, ok := v.(int64)
	return i, ok
}
