// Package oauthtest runs a real OAuth 2.1 / OpenID authorization server
// for tests: oidc-provider (panva, OpenID-certified), started as
// `node scripts/oauth/authserver.mjs` from the repository root. `make deps`
// installs oidc-provider into .tools/node_modules.
//
// The server listens on 127.0.0.1 with the issuer http://127.0.0.1:PORT; its
// metadata is at /.well-known/openid-configuration and at
// /.well-known/oauth-authorization-server (RFC 8414). It issues access
// tokens per resource indicator (RFC 8707): a JWT signed with the first key
// of Config.Keys (aud = the resource, client_id, scope, sub, iat, exp, iss,
// jti; header typ at+jwt and the key's kid), or an opaque token that
// RFC 7662 introspection answers for the clients of
// Config.IntrospectionClients. The authorization-code flow (PKCE S256
// required) needs no browser: the server's interaction route logs
// Config.Account in and grants what is asked, so the test plays the user.
//
// Token exchange (RFC 8693) is added to oidc-provider through its
// registerGrantType extension point: a client whose grant types include
// GrantTokenExchange exchanges an access token the server issued (the
// subject token) for one with another resource's audience, the same sub,
// act.sub = the exchanging client, and the requested scopes that both the
// subject token and the resource have (see Server.ExchangeToken and the
// comment at the top of scripts/oauth/authserver.mjs). ExchangeStats counts
// the exchanges the server answered.
//
// The server keeps its state in memory: Restart forgets opaque tokens,
// grants and dynamically registered clients.
//
// Only tests import this package.
package oauthtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/caddy-rcns/caddy-rcns/internal/testproc"
)

// GrantTokenExchange is the RFC 8693 grant type; a client needs it in its
// grant types to exchange tokens.
const GrantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"

// TokenTypeAccessToken is the RFC 8693 token type of an access token
// (subject_token_type and issued_token_type).
const TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"

// StartTimeout bounds the wait for the server's ready line.
const StartTimeout = 20 * time.Second

// Resource is one protected resource (RFC 8707 resource indicator) the
// server issues access tokens for.
type Resource struct {
	// Scopes are the scopes a token for this resource may carry.
	Scopes []string `json:"scopes"`
	// Format is "jwt" (the default) or "opaque".
	Format string `json:"format,omitempty"`
	// TTLSeconds is the access token lifetime; 0 means one hour.
	TTLSeconds int `json:"ttl_seconds,omitempty"`
}

// Client is oidc-provider client metadata (RFC 7591 names: client_id,
// client_secret, grant_types, redirect_uris, token_endpoint_auth_method,
// application_type, ...). ConfidentialClient and PublicClient build the
// usual two.
type Client map[string]any

// ConfidentialClient is a client authenticating with client_secret_basic
// (or client_secret_post) that may use the given grant types, by default
// client_credentials. An authorization_code grant needs redirect URIs:
// set c["redirect_uris"] on the result.
func ConfidentialClient(id, secret string, grantTypes ...string) Client {
	if len(grantTypes) == 0 {
		grantTypes = []string{"client_credentials"}
	}
	c := Client{
		"client_id":     id,
		"client_secret": secret,
		"grant_types":   grantTypes,
		"redirect_uris": []string{},
	}
	if !slices.Contains(grantTypes, "authorization_code") {
		c["response_types"] = []string{}
	}
	return c
}

// PublicClient is a native public client (token_endpoint_auth_method
// none, application_type native) for the authorization-code flow with
// refresh tokens. A loopback redirect URI such as http://127.0.0.1/cb
// matches the same URI with any port (RFC 8252 §7.3).
func PublicClient(id string, redirectURIs ...string) Client {
	return Client{
		"client_id":                  id,
		"token_endpoint_auth_method": "none",
		"application_type":           "native",
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"redirect_uris":              redirectURIs,
	}
}

// Config is the server's configuration (the JSON file
// scripts/oauth/authserver.mjs reads).
type Config struct {
	// Port is the port to listen on; 0 picks a free one.
	Port int
	// Keys are the private signing keys: the first signs, all are
	// published in the JWKS. Empty: Start generates one RSA key.
	Keys []jose.JSONWebKey
	// Resources maps a resource URI to what tokens for it look like.
	Resources map[string]Resource
	// DefaultResource is the resource of requests that name none
	// (optional).
	DefaultResource string
	// Clients are the registered clients.
	Clients []Client
	// Account is the user the authorization-code flow logs in; default
	// "alice".
	Account string
	// Registration enables dynamic client registration (RFC 7591) at the
	// metadata's registration_endpoint, without an initial access token.
	Registration bool
	// IntrospectionClients are the client ids allowed to introspect
	// tokens; others get {"active": false}.
	IntrospectionClients []string
	// TokenExchangeTTL is the lifetime of tokens issued by token exchange;
	// 0: the target resource's TTLSeconds.
	TokenExchangeTTL time.Duration
	// TokenExchangeSubjectClients, when not nil, are the clients whose
	// tokens may be exchanged: the token of another client is refused
	// with invalid_grant (the server's exchange policy).
	TokenExchangeSubjectClients []string
}

type tokenExchangeConfig struct {
	TTLSeconds     int      `json:"ttl_seconds,omitempty"`
	SubjectClients []string `json:"subject_clients,omitempty"`
}

type jsonConfig struct {
	Port                 int                 `json:"port"`
	Keys                 jose.JSONWebKeySet  `json:"keys"`
	Resources            map[string]Resource `json:"resources"`
	DefaultResource      string              `json:"default_resource,omitempty"`
	Clients              []Client            `json:"clients"`
	Account              string              `json:"account,omitempty"`
	Registration         bool                `json:"registration"`
	IntrospectionClients []string            `json:"introspection_clients"`
	TokenExchange        tokenExchangeConfig `json:"token_exchange"`
}

// NewRSAKey returns a fresh 2048-bit RS256 signing key with the given kid:
// the private JWK for Config.Keys and its public half.
func NewRSAKey(kid string) (private, public jose.JSONWebKey) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	private = jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"}
	return private, private.Public()
}

// NewECKey returns a fresh P-256 ES256 signing key with the given kid: the
// private JWK for Config.Keys and its public half.
func NewECKey(kid string) (private, public jose.JSONWebKey) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	private = jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(jose.ES256), Use: "sig"}
	return private, private.Public()
}

// Server is a running authorization server.
type Server struct {
	t    testing.TB
	root string
	cfg  Config
	dir  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stderr  *syncBuffer
	issuer  string
	port    int
	running bool
	starts  int
}

// Start runs the server with cfg and waits (at most StartTimeout) until it
// listens; t.Cleanup stops it. The test fails, saying "run make deps",
// when oidc-provider is not installed.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("oauthtest: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, ".tools", "node_modules", "oidc-provider", "package.json")); err != nil {
		t.Fatalf("oauthtest: oidc-provider is not installed in %s/.tools: run make deps", root)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("oauthtest: node is not on PATH: %v", err)
	}
	if len(cfg.Keys) == 0 {
		k, _ := NewRSAKey("key-1")
		cfg.Keys = []jose.JSONWebKey{k}
	}
	s := &Server{t: t, root: root, cfg: cfg, dir: t.TempDir()}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() && s.stderr != nil {
			t.Logf("oauthtest: authorization server stderr:\n%s", s.stderr.String())
		}
	})
	if err := s.start(cfg.Port); err != nil {
		t.Fatalf("oauthtest: %v", err)
	}
	return s
}

func (s *Server) start(port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	jc := jsonConfig{
		Port:                 port,
		Keys:                 jose.JSONWebKeySet{Keys: s.cfg.Keys},
		Resources:            s.cfg.Resources,
		DefaultResource:      s.cfg.DefaultResource,
		Clients:              s.cfg.Clients,
		Account:              s.cfg.Account,
		Registration:         s.cfg.Registration,
		IntrospectionClients: s.cfg.IntrospectionClients,
		TokenExchange:        tokenExchangeConfig{TTLSeconds: int(s.cfg.TokenExchangeTTL / time.Second), SubjectClients: s.cfg.TokenExchangeSubjectClients},
	}
	if jc.Resources == nil {
		jc.Resources = map[string]Resource{}
	}
	if jc.Clients == nil {
		jc.Clients = []Client{}
	}
	if jc.IntrospectionClients == nil {
		jc.IntrospectionClients = []string{}
	}
	raw, err := json.Marshal(jc)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	s.starts++
	cfgPath := filepath.Join(s.dir, fmt.Sprintf("config-%d.json", s.starts))
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return err
	}
	cmd := exec.Command("node", filepath.Join(s.root, "scripts", "oauth", "authserver.mjs"), cfgPath)
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(s.root, ".tools", "node_modules"))
	testproc.DieWithParent(cmd) // gone with a test binary that crashes
	if s.stderr == nil {
		s.stderr = &syncBuffer{}
	}
	cmd.Stderr = s.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node: %w", err)
	}
	exited := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, br)
	}()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var line string
	select {
	case line = <-ready:
	case <-time.After(StartTimeout):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("authorization server not ready after %v; stderr:\n%s", StartTimeout, s.stderr.String())
	}
	var hello struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Issuer == "" {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("authorization server did not start (ready line %q); stderr:\n%s", line, s.stderr.String())
	}
	u, err := url.Parse(hello.Issuer)
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("issuer %q: %w", hello.Issuer, err)
	}
	fmt.Sscan(u.Port(), &s.port)
	s.issuer = hello.Issuer
	s.cmd = cmd
	s.exited = exited
	s.running = true
	return nil
}

// Issuer is the issuer identifier, http://127.0.0.1:PORT (it stays the
// same across Restart).
func (s *Server) Issuer() string { return s.issuer }

// Port is the port the server listens on.
func (s *Server) Port() int { return s.port }

// Stderr is what the server logged so far (for a test's failure message).
func (s *Server) Stderr() string { return s.stderr.String() }

// Stop ends the server (SIGTERM, then SIGKILL after 5 s), so a test can
// see the issuer unreachable. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return
	}
	s.running = false
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Restart stops the server and starts it again on the same port (so with
// the same issuer) with keys as its signing keys: the first signs, all are
// published. For key rotation, pass only new keys (tokens carry an
// unknown kid) or new keys then old ones (old tokens still verify). The
// in-memory state (opaque tokens, grants, registered clients) is lost.
func (s *Server) Restart(keys ...jose.JSONWebKey) error {
	if len(keys) == 0 {
		return errors.New("oauthtest: Restart needs at least one key")
	}
	s.Stop()
	s.mu.Lock()
	s.cfg.Keys = keys
	port := s.port
	s.mu.Unlock()
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err = s.start(port); err == nil {
			return nil
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "EADDRINUSE") {
			return fmt.Errorf("oauthtest: restart on port %d: %w", port, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Metadata fetches the authorization server metadata (RFC 8414, the same
// document as OpenID discovery).
func (s *Server) Metadata() (map[string]any, error) {
	var m map[string]any
	err := getJSON(s.issuer+"/.well-known/oauth-authorization-server", &m)
	return m, err
}

// JWKS fetches the published key set from the metadata's jwks_uri.
func (s *Server) JWKS() (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	u, err := s.endpoint("jwks_uri")
	if err != nil {
		return set, err
	}
	err = getJSON(u, &set)
	return set, err
}

// TokenResponse is a token endpoint answer (RFC 6749 §5.1).
type TokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
	IDToken      string `json:"id_token,omitempty"`
}

// ClientCredentials runs the client_credentials grant for a confidential
// client and returns the access token for resource with scopes. Scopes
// the resource does not list are dropped from the token, not refused
// (oidc-provider grants the intersection; RFC 6749 §3.3 allows less).
func (s *Server) ClientCredentials(clientID, secret, resource string, scopes ...string) (string, error) {
	form := url.Values{"grant_type": {"client_credentials"}}
	if resource != "" {
		form.Set("resource", resource)
	}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	tr, err := s.token(clientID, secret, form)
	if err != nil {
		return "", err
	}
	return tr.AccessToken, nil
}

// AuthorizationCode runs the authorization-code flow with PKCE for a
// public client (no secret) and returns the access token for resource.
func (s *Server) AuthorizationCode(clientID, redirectURI, resource string, scopes ...string) (string, error) {
	tr, err := s.AuthorizationCodeTokens(clientID, "", redirectURI, resource, scopes...)
	if err != nil {
		return "", err
	}
	return tr.AccessToken, nil
}

// AuthorizationCodeTokens runs the whole authorization-code flow with PKCE
// (S256): it follows the redirects of the authorization URL with a cookie
// jar (the server logs Config.Account in and consents at once), stops at
// redirectURI, checks state and exchanges the code, authenticating with
// secret when it is not empty (client_secret_basic). It returns the whole
// token response (a refresh token too when the client may use that grant).
func (s *Server) AuthorizationCodeTokens(clientID, secret, redirectURI, resource string, scopes ...string) (*TokenResponse, error) {
	return s.AuthorizationCodeAs("", clientID, secret, redirectURI, resource, scopes...)
}

// AuthorizationCodeAs is AuthorizationCodeTokens with account logged in
// (sent as login_hint) instead of Config.Account; "" is Config.Account.
func (s *Server) AuthorizationCodeAs(account, clientID, secret, redirectURI, resource string, scopes ...string) (*TokenResponse, error) {
	authz, err := s.endpoint("authorization_endpoint")
	if err != nil {
		return nil, err
	}
	verifier := randomString(32)
	sum := sha256.Sum256([]byte(verifier))
	state := randomString(16)
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {clientID},
		"redirect_uri":          {redirectURI},
		"state":                 {state},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	if len(scopes) > 0 {
		q.Set("scope", strings.Join(scopes, " "))
	}
	if resource != "" {
		q.Set("resource", resource)
	}
	if account != "" {
		q.Set("login_hint", account)
	}
	target, err := url.Parse(redirectURI)
	if err != nil {
		return nil, fmt.Errorf("redirect_uri: %w", err)
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{
		Jar:     jar,
		Timeout: 10 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if sameEndpoint(req.URL, target) {
				return http.ErrUseLastResponse
			}
			if len(via) >= 10 {
				return errors.New("more than 10 redirects")
			}
			return nil
		},
	}
	resp, err := hc.Get(authz + "?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("authorization request: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil || !sameEndpoint(loc, target) {
		return nil, fmt.Errorf("authorization request ended at %s with status %d, not at the redirect_uri: %s", resp.Request.URL, resp.StatusCode, body)
	}
	got := loc.Query()
	if e := got.Get("error"); e != "" {
		return nil, fmt.Errorf("authorization error %s: %s", e, got.Get("error_description"))
	}
	if got.Get("state") != state {
		return nil, fmt.Errorf("state %q, sent %q", got.Get("state"), state)
	}
	if iss := got.Get("iss"); iss != "" && iss != s.issuer {
		return nil, fmt.Errorf("iss %q, want %q", iss, s.issuer)
	}
	code := got.Get("code")
	if code == "" {
		return nil, fmt.Errorf("no code in %s", loc)
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {redirectURI},
		"code_verifier": {verifier},
	}
	if resource != "" {
		form.Set("resource", resource)
	}
	return s.token(clientID, secret, form)
}

// Refresh runs the refresh_token grant (secret empty for a public client)
// for resource (empty: the one granted).
func (s *Server) Refresh(clientID, secret, refreshToken, resource string) (*TokenResponse, error) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}}
	if resource != "" {
		form.Set("resource", resource)
	}
	return s.token(clientID, secret, form)
}

// ExchangeToken runs the token exchange grant (RFC 8693) as the
// confidential client clientID: subjectToken (an access token this server
// issued) for a token for resource with scopes (none: the subject token's
// scopes that the resource has). The error of a refusal names the
// server's error code (invalid_grant, invalid_target, invalid_scope, ...).
func (s *Server) ExchangeToken(clientID, secret, subjectToken, resource string, scopes ...string) (*TokenResponse, error) {
	form := url.Values{
		"grant_type":         {GrantTokenExchange},
		"subject_token":      {subjectToken},
		"subject_token_type": {TokenTypeAccessToken},
		"resource":           {resource},
	}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	return s.token(clientID, secret, form)
}

// ExchangeStats is what the server counted of token exchanges since it
// started: issued tokens and refused requests.
type ExchangeStats struct {
	Issued  int `json:"issued"`
	Refused int `json:"refused"`
}

// ExchangeStats asks the server how many token exchanges it answered
// (GET /_test/stats; counts start again at zero after Restart).
func (s *Server) ExchangeStats() (ExchangeStats, error) {
	var out struct {
		TokenExchange ExchangeStats `json:"token_exchange"`
	}
	err := getJSON(s.issuer+"/_test/stats", &out)
	return out.TokenExchange, err
}

// Introspect asks the introspection endpoint (RFC 7662) about token,
// authenticating as clientID with secret. JWT access tokens are not
// introspectable (oidc-provider answers an error); opaque ones are.
func (s *Server) Introspect(clientID, secret, token string) (map[string]any, error) {
	u, err := s.endpoint("introspection_endpoint")
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = postForm(u, clientID, secret, url.Values{"token": {token}}, &out)
	return out, err
}

// Register registers a client dynamically (RFC 7591) when
// Config.Registration is set, returning the server's answer (client_id,
// client_secret, ...).
func (s *Server) Register(metadata map[string]any) (map[string]any, error) {
	u, err := s.endpoint("registration_endpoint")
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(metadata)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Post(u, "application/json", bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = decode(resp, &out)
	return out, err
}

func (s *Server) token(clientID, secret string, form url.Values) (*TokenResponse, error) {
	u, err := s.endpoint("token_endpoint")
	if err != nil {
		return nil, err
	}
	var tr TokenResponse
	if err := postForm(u, clientID, secret, form, &tr); err != nil {
		return nil, err
	}
	if tr.AccessToken == "" {
		return nil, errors.New("token response without access_token")
	}
	return &tr, nil
}

func (s *Server) endpoint(name string) (string, error) {
	m, err := s.Metadata()
	if err != nil {
		return "", err
	}
	u, _ := m[name].(string)
	if u == "" {
		return "", fmt.Errorf("metadata has no %s", name)
	}
	return u, nil
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func getJSON(u string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	return decode(resp, out)
}

// postForm posts form to u; with a secret the client authenticates with
// client_secret_basic, without one it sends client_id (a public client).
func postForm(u, clientID, secret string, form url.Values, out any) error {
	if secret == "" {
		form.Set("client_id", clientID)
	}
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if secret != "" {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	return decode(resp, out)
}

func decode(resp *http.Response, out any) error {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", resp.Request.Method, resp.Request.URL, resp.Status, bytes.TrimSpace(body))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: %w: %s", resp.Request.URL, err, body)
	}
	return nil
}

// sameEndpoint: scheme, host and path equal (the redirect_uri reached).
func sameEndpoint(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && a.Host == b.Host && a.Path == b.Path
}

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
