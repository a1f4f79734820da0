package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

// A legacy API that checks each request's credential, as an operator's
// API would: it verifies the bearer JWT against a JWKS it fetches
// itself (the authorization server's for an exchanged token, the
// gateway's published one for an identity assertion), with its own
// issuer and audience, refuses a wrong one with 401, and forwards a
// right one (without the credential) to the real upstream.

// seenCredential is what the checking upstream verified on one request.
type seenCredential struct {
	Method, Path string
	Claims       map[string]any
	// Raw is the credential header's value as received, and Header
	// every header of the request (to show no caller token came along).
	Raw    string
	Header http.Header
}

// credentialChecker is a checking upstream in front of target.
type credentialChecker struct {
	URL     string
	jwksURL func() string
	issuer  func() string
	aud     string
	typ     string // the JWT typ it requires ("" any)
	header  string // the header carrying the JWT (Authorization: Bearer)

	mu      sync.Mutex
	seen    []seenCredential
	refused []string
	next    http.Handler
}

// startCredentialChecker starts an upstream that requires, in header
// (Authorization with Bearer, or another header with the JWT alone), a
// JWT signed by a key of jwksURL with iss issuer, aud containing aud,
// typ typ (when set) and a live exp, then forwards to target.
//
// jwksURL and issuer are read on each request: the test may know them
// only once the gateway or the authorization server runs.
func startCredentialChecker(t testing.TB, target string, jwksURL, issuer func() string, aud, typ, header string) *credentialChecker {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	if header == "" {
		header = "Authorization"
	}
	c := &credentialChecker{jwksURL: jwksURL, issuer: issuer, aud: aud, typ: typ, header: header, next: httputil.NewSingleHostReverseProxy(u)}
	c.URL = serve(t, c)
	return c
}

func (c *credentialChecker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	claims, err := c.check(r.Header.Get(c.header))
	if err != nil {
		c.mu.Lock()
		c.refused = append(c.refused, r.Method+" "+r.URL.Path+": "+err.Error())
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_token", "error_description": err.Error()})
		return
	}
	c.mu.Lock()
	c.seen = append(c.seen, seenCredential{Method: r.Method, Path: r.URL.Path, Claims: claims, Raw: r.Header.Get(c.header), Header: r.Header.Clone()})
	c.mu.Unlock()
	r.Header.Del(c.header)
	c.next.ServeHTTP(w, r)
}

// check is the upstream's own verification.
func (c *credentialChecker) check(v string) (map[string]any, error) {
	tok := v
	if c.header == "Authorization" {
		var ok bool
		if tok, ok = strings.CutPrefix(v, "Bearer "); !ok {
			return nil, errors.New("no bearer token")
		}
	}
	jwt, err := josejwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA})
	if err != nil {
		return nil, fmt.Errorf("not a JWS: %v", err)
	}
	h := jwt.Headers[0]
	if c.typ != "" && h.ExtraHeaders["typ"] != c.typ {
		return nil, fmt.Errorf("typ %v, want %s", h.ExtraHeaders["typ"], c.typ)
	}
	set, err := fetchJWKS(c.jwksURL())
	if err != nil {
		return nil, err
	}
	keys := set.Key(h.KeyID)
	if len(keys) != 1 {
		return nil, fmt.Errorf("kid %q is not in %s", h.KeyID, c.jwksURL())
	}
	var std josejwt.Claims
	var all map[string]any
	if err := jwt.Claims(keys[0], &std, &all); err != nil {
		return nil, fmt.Errorf("signature: %v", err)
	}
	if err := std.ValidateWithLeeway(josejwt.Expected{Issuer: c.issuer(), AnyAudience: josejwt.Audience{c.aud}, Time: time.Now()}, 0); err != nil {
		return nil, err
	}
	return all, nil
}

func fetchJWKS(u string) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	resp, err := http.Get(u)
	if err != nil {
		return set, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != 200 {
		return set, fmt.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	err = json.Unmarshal(body, &set)
	return set, err
}

// Seen returns what the upstream accepted so far, and Refused what it
// refused.
func (c *credentialChecker) Seen() []seenCredential {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seenCredential(nil), c.seen...)
}

// Refused returns the refusals so far (method, path, why).
func (c *credentialChecker) Refused() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.refused...)
}

// Reset forgets what was seen and refused.
func (c *credentialChecker) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen, c.refused = nil, nil
}
