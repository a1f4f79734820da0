package upstreamauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cost of Resolve per call, in process (make bench measures the
// gateway's whole cost): static headers, a cached exchanged token, and
// a fresh identity assertion (Ed25519 and ES256).

func BenchmarkResolveStatic(b *testing.B) {
	p := Static{Header: http.Header{"Authorization": {"Bearer service-key"}}}
	c := Caller{AgentID: strings.Repeat("a", 64)}
	b.ReportAllocs()
	for b.Loop() {
		if _, r := p.Resolve(context.Background(), c, nil); r != nil {
			b.Fatal(r)
		}
	}
}

// BenchmarkResolveExchangeCached: a token exchanged once at the real
// authorization server, then served from the cache.
func BenchmarkResolveExchangeCached(b *testing.B) {
	as := startAS(b, "alice")
	user, err := as.AuthorizationCode("app", callbackURI, gatewayResource, "orders:read")
	if err != nil {
		b.Fatal(err)
	}
	x, err := NewTokenExchange(TokenExchangeConfig{Upstream: "legacy", Issuer: as.Issuer(), ClientID: "gateway", ClientSecret: "gateway-secret", Resource: legacyResource})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	c := Caller{AgentID: strings.Repeat("a", 64), Token: user}
	if _, r := x.Resolve(context.Background(), c, []string{"orders:read"}); r != nil {
		b.Fatal(r)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, r := x.Resolve(context.Background(), c, []string{"orders:read"}); r != nil {
			b.Fatal(r)
		}
	}
	b.StopTimer()
	if st, err := as.ExchangeStats(); err != nil || st.Issued != 1 {
		b.Fatalf("%d exchanges, want 1 (%v)", st.Issued, err)
	}
}

func benchAssertion(b *testing.B, key any) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "k.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		b.Fatal(err)
	}
	keys, err := LoadAssertionKeys([]string{path})
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewAssertion(AssertionConfig{Upstream: "u", Issuer: "https://gw.example", Audience: "https://api.example/", Keys: keys})
	if err != nil {
		b.Fatal(err)
	}
	c := Caller{AgentID: strings.Repeat("a", 64), OwnerID: "alice", ContractID: "syn-1", RequestID: "req-1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, r := p.Resolve(context.Background(), c, nil); r != nil {
			b.Fatal(r)
		}
	}
}

func BenchmarkResolveAssertionES256(b *testing.B) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	benchAssertion(b, k)
}

func BenchmarkResolveAssertionEd25519(b *testing.B) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	benchAssertion(b, k)
}
