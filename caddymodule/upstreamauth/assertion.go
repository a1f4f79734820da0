package upstreamauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

// JWKSPath is the route on which the gateway publishes the public keys
// that verify its identity assertions (a JWKS, RFC 7517 §5), on every
// site the rcns handler serves.
const JWKSPath = "/.well-known/rcns/upstream-jwks.json"

// AssertionType is the typ header of an identity assertion (RFC 8725
// §3.11 explicit typing): a verifier that checks it cannot take another
// JWT of the gateway's for an assertion.
const AssertionType = "rcns-assertion+jwt"

// DefaultAssertionTTL is an assertion's lifetime (exp − iat).
const DefaultAssertionTTL = 60 * time.Second

// MaxAssertionTTL bounds the configurable lifetime: an assertion is a
// bearer credential, short-lived by design.
const MaxAssertionTTL = 10 * time.Minute

// AssertionKeys are the gateway's assertion keys: the first signs, all
// are published at JWKSPath (the others: keys being rotated out, or the
// keys of the cluster's other nodes).
type AssertionKeys struct {
	signer jose.Signer
	kid    string
	public []jose.JSONWebKey
}

// LoadAssertionKeys reads PKCS#8 PEM private keys (Ed25519, signing
// EdDSA, or ECDSA P-256, signing ES256) from paths: the first signs, all
// are published. A key's kid is its RFC 7638 thumbprint (SHA-256,
// base64url), so every node loading the same file publishes the same
// kid.
func LoadAssertionKeys(paths []string) (*AssertionKeys, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("assertion keys: no key file")
	}
	keys := make([]crypto.Signer, 0, len(paths))
	for _, p := range paths {
		k, err := readPrivateKey(p)
		if err != nil {
			return nil, fmt.Errorf("assertion key %s: %w", p, err)
		}
		keys = append(keys, k)
	}
	return newAssertionKeys(keys)
}

var (
	generatedOnce sync.Once
	generated     *AssertionKeys
	generatedErr  error
)

// GeneratedAssertionKeys returns one Ed25519 key made when first asked
// and kept for the life of the process (config reloads keep it). It
// suits one node only: every node of a cluster makes its own, so an
// upstream fetching the JWKS of one node cannot verify another's
// assertions. Clusters configure a key file (LoadAssertionKeys).
func GeneratedAssertionKeys() (*AssertionKeys, error) {
	generatedOnce.Do(func() {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			generatedErr = err
			return
		}
		generated, generatedErr = newAssertionKeys([]crypto.Signer{k})
	})
	return generated, generatedErr
}

func readPrivateKey(path string) (crypto.Signer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("not a PKCS#8 PEM private key (a PEM block of type \"PRIVATE KEY\", as openssl genpkey writes)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	switch k := k.(type) {
	case ed25519.PrivateKey:
		return k, nil
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("an ECDSA key must be on P-256 (ES256)")
		}
		return k, nil
	default:
		return nil, fmt.Errorf("a %T: use Ed25519 (EdDSA) or ECDSA P-256 (ES256)", k)
	}
}

func algOf(k crypto.Signer) jose.SignatureAlgorithm {
	if _, ok := k.(ed25519.PrivateKey); ok {
		return jose.EdDSA
	}
	return jose.ES256
}

func newAssertionKeys(keys []crypto.Signer) (*AssertionKeys, error) {
	out := &AssertionKeys{}
	seen := map[string]bool{}
	for i, k := range keys {
		pub := jose.JSONWebKey{Key: k.Public(), Algorithm: string(algOf(k)), Use: "sig"}
		tp, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, err
		}
		pub.KeyID = base64.RawURLEncoding.EncodeToString(tp)
		if i == 0 {
			s, err := jose.NewSigner(jose.SigningKey{Algorithm: algOf(k), Key: jose.JSONWebKey{Key: k, KeyID: pub.KeyID}},
				(&jose.SignerOptions{}).WithType(AssertionType))
			if err != nil {
				return nil, err
			}
			out.signer, out.kid = s, pub.KeyID
		}
		if !seen[pub.KeyID] {
			seen[pub.KeyID] = true
			out.public = append(out.public, pub)
		}
	}
	return out, nil
}

// KeyID is the kid of the signing key.
func (k *AssertionKeys) KeyID() string { return k.kid }

// Public returns the published keys (public halves, signing key first).
func (k *AssertionKeys) Public() []jose.JSONWebKey {
	return append([]jose.JSONWebKey(nil), k.public...)
}

// JWKS is the key set published at JWKSPath: the public keys of every
// set given, each kid once, in order.
func JWKS(sets ...*AssertionKeys) jose.JSONWebKeySet {
	out := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	seen := map[string]bool{}
	for _, s := range sets {
		if s == nil {
			continue
		}
		for _, k := range s.public {
			if !seen[k.KeyID] {
				seen[k.KeyID] = true
				out.Keys = append(out.Keys, k)
			}
		}
	}
	return out
}

// ServeJWKS answers a GET or HEAD for JWKSPath with set (JSON,
// application/jwk-set+json, cacheable for five minutes); another method
// gets a bare 405 with Allow (the Caddy handler answers those itself,
// before this, in the spec's error body: 405 method-not-allowed).
func ServeJWKS(w http.ResponseWriter, r *http.Request, set jose.JSONWebKeySet) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := json.Marshal(set)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// AssertionConfig configures an Assertion policy.
type AssertionConfig struct {
	// Upstream is the upstream's name, for refusals.
	Upstream string
	// Issuer is the iss claim: the gateway's identifier (an URL the
	// upstream knows, e.g. https://gateway.example). Required.
	Issuer string
	// Audience is the aud claim: the upstream (e.g. its URL). Required.
	Audience string
	// TTL is exp − iat; default DefaultAssertionTTL, at most
	// MaxAssertionTTL.
	TTL time.Duration
	// Header carries the assertion; default Authorization, with the value
	// "Bearer <jwt>"; another header carries the JWT alone.
	Header string
	// Keys sign the assertions. Required.
	Keys *AssertionKeys
}

// AssertionClaims are an identity assertion's claims (a JWT, RFC 7519):
// the registered ones and who acted.
type AssertionClaims struct {
	josejwt.Claims
	// AgentID is the verified Agent-ID that acted (also the sub).
	AgentID string `json:"agent_id"`
	// OwnerID is the principal the agent acted for; absent if none.
	OwnerID string `json:"owner_id,omitempty"`
	// ContractID is the contract's synthesis id; absent for a Tier B
	// call.
	ContractID string `json:"contract_id,omitempty"`
	// RequestID is the request's Request-ID; absent if none was sent.
	RequestID string `json:"request_id,omitempty"`
}

// Assertion is the identity assertion policy: each call gets a fresh
// short-lived JWT signed by the gateway (header typ AssertionType, kid
// of the signing key) with iss = Issuer, aud = Audience, sub and
// agent_id = the agent, owner_id, contract_id, request_id, iat, nbf, exp
// = iat + TTL and a random jti. The upstream verifies it against the
// JWKS published at JWKSPath.
type Assertion struct {
	cfg AssertionConfig
	now func() time.Time
}

// NewAssertion validates cfg, sets its defaults and builds the policy.
func NewAssertion(cfg AssertionConfig) (*Assertion, error) {
	if cfg.Issuer == "" {
		return nil, fmt.Errorf("upstream %s: assertion needs issuer (the gateway's identifier, the iss claim)", cfg.Upstream)
	}
	if cfg.Audience == "" {
		return nil, fmt.Errorf("upstream %s: assertion needs audience (the upstream, the aud claim)", cfg.Upstream)
	}
	if cfg.Keys == nil || cfg.Keys.signer == nil {
		return nil, fmt.Errorf("upstream %s: assertion needs a signing key", cfg.Upstream)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultAssertionTTL
	}
	if cfg.TTL < time.Second || cfg.TTL > MaxAssertionTTL {
		return nil, fmt.Errorf("upstream %s: assertion ttl %v is not between 1s and %v", cfg.Upstream, cfg.TTL, MaxAssertionTTL)
	}
	if cfg.Header == "" {
		cfg.Header = "Authorization"
	}
	cfg.Header = http.CanonicalHeaderKey(cfg.Header)
	return &Assertion{cfg: cfg, now: time.Now}, nil
}

// Kind is KindAssertion.
func (*Assertion) Kind() Kind { return KindAssertion }

// Keys are the policy's keys (for the published JWKS).
func (a *Assertion) Keys() *AssertionKeys { return a.cfg.Keys }

// Resolve signs an assertion for c. A caller without a verified agent
// is refused (upstream-credential-missing); signing does not otherwise
// fail.
func (a *Assertion) Resolve(_ context.Context, c Caller, _ []string) (Credential, *Refusal) {
	if c.AgentID == "" {
		return Credential{}, &Refusal{Upstream: a.cfg.Upstream, Reason: ReasonCredentialMissing, Status: StatusCredentialMissing,
			Explanation: fmt.Sprintf("upstream %s takes an identity assertion naming the agent, and this request has no verified agent", a.cfg.Upstream)}
	}
	now := a.now()
	jti := make([]byte, 16)
	_, _ = rand.Read(jti)
	claims := AssertionClaims{
		Claims: josejwt.Claims{
			Issuer:    a.cfg.Issuer,
			Subject:   c.AgentID,
			Audience:  josejwt.Audience{a.cfg.Audience},
			IssuedAt:  josejwt.NewNumericDate(now),
			NotBefore: josejwt.NewNumericDate(now),
			Expiry:    josejwt.NewNumericDate(now.Add(a.cfg.TTL)),
			ID:        base64.RawURLEncoding.EncodeToString(jti),
		},
		AgentID: c.AgentID, OwnerID: c.OwnerID, ContractID: c.ContractID, RequestID: c.RequestID,
	}
	tok, err := josejwt.Signed(a.cfg.Keys.signer).Claims(claims).Serialize()
	if err != nil {
		return Credential{}, &Refusal{Upstream: a.cfg.Upstream, Reason: "internal-error", Status: 500,
			Explanation: fmt.Sprintf("signing the identity assertion for upstream %s failed", a.cfg.Upstream)}
	}
	v := tok
	if a.cfg.Header == "Authorization" {
		v = "Bearer " + tok
	}
	return Credential{Header: http.Header{a.cfg.Header: {v}}, Kind: KindAssertion}, nil
}

var _ Policy = (*Assertion)(nil)
