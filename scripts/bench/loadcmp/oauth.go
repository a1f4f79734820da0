package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// The oauth site (identity oauth) trusts a real authorization server:
// scripts/oauth/authserver.mjs (oidc-provider), started by loadcmp on
// loopback before Caddy and stopped with the rest. One client_credentials
// token, fetched before the sanity check, is sent by every request to
// the site: the gateway verifies it once (ES256 against the issuer's
// JWKS) and then finds it in its cache by SHA-256, as it would for an
// agent reusing its token.

// The bench's OAuth client: scripts/bench/docs/agents/bench-agent.yaml
// lists it in oauth_clients, so its token is the bench agent.
const (
	oauthClient = "rcns-bench-client"
	oauthSecret = "rcns-bench-secret"
)

// The exchange site's upstream credential: the gateway's own client at
// the authorization server, allowed the token exchange grant, and the
// upstream as a resource there (scripts/bench/Caddyfile).
const (
	exchangeClient   = "rcns-bench-gateway"
	exchangeSecret   = "rcns-bench-gateway-secret"
	exchangeResource = "http://bench-upstream.test/"
)

// tokenTTL is the token's lifetime, s: an hour, or longer than the
// comparison's -max-total when that is longer, so the one token never
// expires mid-run.
func tokenTTL(maxTotal time.Duration) int {
	return max(3600, int(maxTotal/time.Second)+600)
}

// oauthScopes are the scopes of the token: those of the scenarios'
// Authority-Scope claims (the token stands for them).
var oauthScopes = []string{"rcns:negotiate", "bench:read"}

// usesOAuth: some scenario of the list is on an OAuth site.
func usesOAuth(scens []*scenario) bool {
	for _, s := range scens {
		if siteNamed(s.Site).OAuth {
			return true
		}
	}
	return false
}

// authServerConfig is the JSON configuration authserver.mjs reads: it
// listens on port, signs with key, issues JWTs for resource (ttl
// seconds, oauthScopes) to the bench client by client_credentials.
func authServerConfig(port int, resource string, ttl int, key jose.JSONWebKey) ([]byte, error) {
	cfg := map[string]any{
		"port": port,
		"keys": jose.JSONWebKeySet{Keys: []jose.JSONWebKey{key}},
		"resources": map[string]any{
			resource:         map[string]any{"scopes": oauthScopes, "format": "jwt", "ttl_seconds": ttl},
			exchangeResource: map[string]any{"scopes": oauthScopes, "format": "jwt", "ttl_seconds": ttl},
		},
		"default_resource": resource,
		"clients": []map[string]any{{
			"client_id":      oauthClient,
			"client_secret":  oauthSecret,
			"grant_types":    []string{"client_credentials"},
			"response_types": []string{},
			"redirect_uris":  []string{},
		}, {
			"client_id":      exchangeClient,
			"client_secret":  exchangeSecret,
			"grant_types":    []string{"urn:ietf:params:oauth:grant-type:token-exchange"},
			"response_types": []string{},
			"redirect_uris":  []string{},
		}},
		"registration":          false,
		"introspection_clients": []string{},
	}
	return json.Marshal(cfg)
}

// startAuthServer starts authserver.mjs on port for resource, waits for
// its ready line (the issuer, which must be d.issuer) and fetches the
// token every request to an OAuth site carries.
func (d *driver) startAuthServer(ctx context.Context, port int, resource string) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	key := jose.JSONWebKey{Key: k, KeyID: "bench-1", Algorithm: string(jose.ES256), Use: "sig"}
	ttl := tokenTTL(d.o.MaxTotal)
	raw, err := authServerConfig(port, resource, ttl, key)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(d.work, "authserver.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return err
	}
	say("==> authorization server %s (%s)", d.issuer, d.authServer)
	// authserver.mjs finds oidc-provider in <repo>/.tools/node_modules
	// by its own path, or in NODE_PATH.
	nodePath := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(d.authServer))), ".tools", "node_modules")
	_, stdout, err := d.start("authserver", d.work+"/authserver.log", []string{"NODE_PATH=" + nodePath}, d.node, d.authServer, cfgPath)
	if err != nil {
		return fmt.Errorf("authorization server (-node %s): %v", d.node, err)
	}
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, br)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("authorization server not ready after 30s; see %s/authserver.log", d.work)
	case <-ctx.Done():
		return ctx.Err()
	}
	var hello struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Issuer != d.issuer {
		time.Sleep(200 * time.Millisecond) // let its stderr reach the log
		return fmt.Errorf("authorization server: ready line %q, want issuer %s; its log ends:\n%s", strings.TrimSpace(line), d.issuer, logTail(d.work+"/authserver.log", 2000))
	}
	d.token, err = fetchToken(ctx, d.issuer, resource, ttl)
	if err != nil {
		return fmt.Errorf("token: %v; see %s/authserver.log", err, d.work)
	}
	fmt.Fprintf(d.log, "oauth: %s issued a %d-byte access token for %s to %s\n", d.issuer, len(d.token), resource, oauthClient)
	return nil
}

// fetchToken runs the client_credentials grant of the bench client at
// the issuer's token endpoint (from its RFC 8414 metadata) for resource;
// the token must live about ttl seconds.
func fetchToken(ctx context.Context, issuer, resource string, ttl int) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	var meta struct {
		TokenEndpoint string `json:"token_endpoint"`
	}
	if err := doJSON(ctx, c, http.MethodGet, issuer+"/.well-known/oauth-authorization-server", nil, &meta); err != nil {
		return "", err
	}
	if meta.TokenEndpoint == "" {
		return "", errors.New("the issuer's metadata has no token_endpoint")
	}
	form := url.Values{"grant_type": {"client_credentials"}, "resource": {resource}, "scope": {strings.Join(oauthScopes, " ")}}
	var tr struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	if err := doJSON(ctx, c, http.MethodPost, meta.TokenEndpoint, form, &tr); err != nil {
		return "", err
	}
	if strings.Count(tr.AccessToken, ".") != 2 {
		return "", fmt.Errorf("the access token is not a JWT (%d bytes)", len(tr.AccessToken))
	}
	if tr.ExpiresIn < ttl-60 {
		return "", fmt.Errorf("the access token expires in %d s, want %d", tr.ExpiresIn, ttl)
	}
	return tr.AccessToken, nil
}

// doJSON sends a GET, or a POST of form authenticated as the bench
// client (client_secret_basic), and decodes a 2xx JSON answer into out.
func doJSON(ctx context.Context, c *http.Client, method, u string, form url.Values, out any) error {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(url.QueryEscape(oauthClient), url.QueryEscape(oauthSecret))
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, strings.TrimSpace(string(raw)))
	}
	return json.Unmarshal(raw, out)
}

// logTail is the last n bytes of a log file, for an error message.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
