package engine

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
)

// TestIdentityStep: the identity step asks its verifiers in order; the
// first that verifies or refuses decides, and when none claims the
// request the first one's refusal is the answer. An engine without
// verifiers verifies nobody.
func TestIdentityStep(t *testing.T) {
	cert := &x509.Certificate{RawSubjectPublicKeyInfo: []byte("spki-of-agent-a")}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	agentA, agentB := "a", "b"
	mtls := mtlsVerifier{spki: map[string]string{hex.EncodeToString(sum[:]): agentA}}
	withCert := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	otherCert := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{RawSubjectPublicKeyInfo: []byte("unknown")}}}
	tests := []struct {
		name   string
		steps  []verifier
		in     *agtp.Request
		agent  string
		reason string // "" verified
	}{
		{"mtls verifies its agent", []verifier{mtls}, &agtp.Request{TLS: withCert}, agentA, ""},
		{"mtls refuses another agent", []verifier{mtls, headerVerifier{}}, &agtp.Request{TLS: withCert, Loopback: true}, agentB, "certificate-mismatch"},
		{"mtls refuses an unknown key, header not asked", []verifier{mtls, headerVerifier{}}, &agtp.Request{TLS: otherCert, Loopback: true}, agentA, "certificate-unknown"},
		{"no certificate: the next verifier verifies", []verifier{mtls, headerVerifier{}}, &agtp.Request{Loopback: true}, agentB, ""},
		{"none claims it: the first one's refusal", []verifier{mtls, headerVerifier{}}, &agtp.Request{}, agentA, "certificate-required"},
		{"header off loopback", []verifier{headerVerifier{}}, &agtp.Request{}, agentA, "identity-mode-refused"},
		{"header on loopback", []verifier{headerVerifier{}}, &agtp.Request{Loopback: true}, agentA, ""},
		{"no verifier verifies nobody", nil, &agtp.Request{Loopback: true}, agentA, "agent-unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &Engine{idSteps: tt.steps}
			id, e := h.VerifyTransport(tt.in, nil, tt.agent)
			switch {
			case tt.reason == "" && e != nil:
				t.Fatalf("refused %s: %s, want verified", e.Reason, e.Explanation)
			case tt.reason == "" && (id == nil || id.AgentID != tt.agent):
				t.Fatalf("verified as %+v, want agent %s", id, tt.agent)
			case tt.reason != "" && (e == nil || e.Reason != tt.reason):
				t.Fatalf("answer %+v, want refusal %s", e, tt.reason)
			}
		})
	}
}
