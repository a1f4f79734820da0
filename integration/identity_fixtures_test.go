package integration

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// The verified identity modes (docs/configuration.md "Identity"):
// `identity signature` (RFC 9421 HTTP Message Signatures, keys in the
// agent documents) and `identity mtls` (client certificates bound by
// SPKI SHA-256). Keys and certificates are generated at test time; the
// agent documents are written into t.TempDir().
//
// Signing goes through policy/httpsig, the public package agents import
// (docs: "policy/httpsig is the Go package agents can import"); one
// subtest signs by hand from RFC 9421 §2.5 so a fault shared by the
// package's signer and verifier cannot hide.

// idvSite is the hotel rcns block with a configurable identity mode and
// agents directory.
const idvSite = `
	rcns {
		server_id caddy-rcns-it
		identity {{IDENTITY}}
		enabled true
		mode {{MODE}}
		upstream hotel {{HOTEL}}
		agents {{AGENTS}}
		endpoints examples/hotel/endpoints
		recipes examples/hotel/recipes
{{EXTRA}}
	}
	reverse_proxy {{LEGACY}}
`

// idvAgentDoc is one agent document written by idvWriteAgents.
type idvAgentDoc struct {
	name   string // agent_id = sha256(name), like the demo agents
	tier   int
	status string // "" omits the field (active)
	scopes []string
	keys   []map[string]any
	certs  []string
}

// idvDemo copies the fields of a demo agent (examples/hotel/agents).
func idvDemo(name string) idvAgentDoc {
	switch name {
	case "rcns-demo-agent":
		return idvAgentDoc{name: name, tier: 1, scopes: []string{"rcns:negotiate", "hotel:read", "hotel:book"}}
	case "rcns-demo-noscope":
		return idvAgentDoc{name: name, tier: 1, scopes: []string{"hotel:read", "hotel:book"}}
	case "rcns-demo-tier3":
		return idvAgentDoc{name: name, tier: 3, scopes: []string{"rcns:negotiate", "hotel:read", "hotel:book"}}
	case "rcns-demo-operator":
		return idvAgentDoc{name: name, tier: 1, scopes: []string{"inspect:all", "rcns:negotiate", "hotel:read", "hotel:book"}}
	}
	panic("idvDemo: unknown demo agent " + name)
}

// idvWriteAgents writes one JSON agent document per agent into a fresh
// temp dir and returns the dir.
func idvWriteAgents(t testing.TB, docs ...idvAgentDoc) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range docs {
		m := map[string]any{
			"agent_id":   agentID(d.name),
			"name":       d.name,
			"owner_id":   "hotel-ops",
			"trust_tier": d.tier,
			"scopes":     d.scopes,
		}
		if d.status != "" {
			m["status"] = d.status
		}
		if len(d.keys) > 0 {
			m["keys"] = d.keys
		}
		if len(d.certs) > 0 {
			m["certificates"] = d.certs
		}
		if err := os.WriteFile(filepath.Join(dir, d.name+".json"), mustJSON(t, m), 0o644); err != nil {
			t.Fatalf("write agent document: %v", err)
		}
	}
	return dir
}

// idvKey is an agent signing key.
type idvKey struct {
	signer crypto.Signer
	alg    string
	kid    string         // RFC 7638 thumbprint
	jwk    map[string]any // public JWK (with kid)
}

// idvNewKey generates an Ed25519 or P-256 key and checks the package's
// thumbprint against one computed here from RFC 7638 §3.
func idvNewKey(t testing.TB, alg string) *idvKey {
	t.Helper()
	var (
		signer crypto.Signer
		canon  string // RFC 7638 required members, lexicographic order
	)
	switch alg {
	case httpsig.AlgEd25519:
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatalf("ed25519 key: %v", err)
		}
		signer = priv
		canon = fmt.Sprintf(`{"crv":"Ed25519","kty":"OKP","x":"%s"}`, base64.RawURLEncoding.EncodeToString(pub))
	case httpsig.AlgECDSAP256SHA256:
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatalf("p-256 key: %v", err)
		}
		signer = priv
		e, err := priv.PublicKey.ECDH()
		if err != nil {
			t.Fatalf("p-256 key: %v", err)
		}
		pt := e.Bytes() // 0x04 || X || Y
		canon = fmt.Sprintf(`{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}`,
			base64.RawURLEncoding.EncodeToString(pt[1:33]), base64.RawURLEncoding.EncodeToString(pt[33:65]))
	default:
		t.Fatalf("idvNewKey: unknown alg %q", alg)
	}
	kid, err := httpsig.Thumbprint(signer.Public())
	if err != nil {
		t.Fatalf("thumbprint: %v", err)
	}
	sum := sha256.Sum256([]byte(canon))
	if want := base64.RawURLEncoding.EncodeToString(sum[:]); kid != want {
		t.Fatalf("httpsig.Thumbprint = %s, RFC 7638 thumbprint of %s = %s", kid, canon, want)
	}
	jwk, err := httpsig.JWKFromPublic(signer.Public())
	if err != nil {
		t.Fatalf("JWKFromPublic: %v", err)
	}
	if got, _ := jwk["kid"].(string); got != kid {
		t.Fatalf("JWKFromPublic kid = %q, want the thumbprint %s", got, kid)
	}
	return &idvKey{signer: signer, alg: alg, kid: kid, jwk: jwk}
}

// idvRefused checks a 401 identity refusal with its reason and that the
// hotel upstream saw nothing.
func idvRefused(t testing.TB, r *Resp, status int, reason string, hotel *Counter, before int) {
	t.Helper()
	assertErrorBody(t, r, status, reason)
	if n := hotel.Count(); n != before {
		t.Errorf("a refused request reached the hotel upstream (%d calls, want %d)", n, before)
	}
}
