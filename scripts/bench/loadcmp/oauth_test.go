package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// TestAuthServerConfig: the configuration authserver.mjs reads issues
// JWTs for the resource, with the scenarios' scopes, for at least the
// ttl, to the client the bench agent document lists.
func TestAuthServerConfig(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key := jose.JSONWebKey{Key: k, KeyID: "bench-1", Algorithm: string(jose.ES256), Use: "sig"}
	raw, err := authServerConfig(41000, "http://127.0.0.1:42000", 3600, key)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Port int `json:"port"`
		Keys struct {
			Keys []map[string]any `json:"keys"`
		} `json:"keys"`
		Resources map[string]struct {
			Scopes []string `json:"scopes"`
			Format string   `json:"format"`
			TTL    int      `json:"ttl_seconds"`
		} `json:"resources"`
		Clients []map[string]any `json:"clients"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Port != 41000 {
		t.Errorf("port %d", cfg.Port)
	}
	if len(cfg.Keys.Keys) != 1 || cfg.Keys.Keys[0]["d"] == nil || cfg.Keys.Keys[0]["kid"] != "bench-1" || cfg.Keys.Keys[0]["alg"] != "ES256" {
		t.Errorf("keys: want the one private ES256 key, got %v", cfg.Keys.Keys)
	}
	rs, ok := cfg.Resources["http://127.0.0.1:42000"]
	if !ok || rs.Format != "jwt" || rs.TTL != 3600 || strings.Join(rs.Scopes, " ") != "rcns:negotiate bench:read" {
		t.Errorf("resources: %+v", cfg.Resources)
	}
	if len(cfg.Clients) != 2 || cfg.Clients[0]["client_id"] != oauthClient || cfg.Clients[0]["client_secret"] != oauthSecret ||
		cfg.Clients[1]["client_id"] != exchangeClient {
		t.Errorf("clients: %v", cfg.Clients)
	}
	doc, err := os.ReadFile("../docs/agents/bench-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "\noauth_clients: ["+oauthClient+"]\n") {
		t.Errorf("bench-agent.yaml does not list the OAuth client %s", oauthClient)
	}
}

func TestTokenTTL(t *testing.T) {
	for _, tc := range []struct {
		maxTotal time.Duration
		want     int
	}{
		{30 * time.Minute, 3600},
		{2 * time.Hour, 7800},
	} {
		if got := tokenTTL(tc.maxTotal); got != tc.want {
			t.Errorf("tokenTTL(%v) = %d, want %d", tc.maxTotal, got, tc.want)
		}
	}
}
