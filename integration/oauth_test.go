package integration

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"

	"github.com/caddy-rcns/caddy-rcns/internal/oauthtest"
)

// identity oauth: the gateway as an OAuth 2.1 resource server in front
// of a real authorization server (oidc-provider through
// internal/oauthtest). Tokens are JWTs verified against the issuer's
// JWKS, or opaque ones introspected (RFC 7662); a token's client names
// the agent (oauth_clients), its scopes bound the agent's grants.

// oauthSite is the hotel rcns block under identity oauth with the MCP
// door on and durable records. The oauth block's issuer and resource
// are @@ISSUER@@ and @@RESOURCE@@: the resource is the site's origin,
// known only once the Caddyfile is rendered, and the authorization
// server must know it before it starts.
const oauthSite = `
	rcns {
		server_id caddy-rcns-it
		identity {{IDENTITY}}
		enabled true
		mode optimistic
		upstream hotel {{HOTEL}}
		agents {{AGENTS}}
		endpoints examples/hotel/endpoints
		recipes examples/hotel/recipes
		records_dir {{RECORDS}}
		fsync always
		{{MCP}}
{{RCNS}}
		oauth {
			issuer @@ISSUER@@
			resource @@RESOURCE@@
			client_id gateway
			client_secret gateway-secret
			jwks_min_refresh 100ms
{{OAUTH}}
		}
	}
	reverse_proxy {{LEGACY}}
`

// oauthAgent is an agent document with the OAuth clients that act as it.
type oauthAgent struct {
	name    string
	scopes  []string
	clients []string
}

// oauthOpts configures an oauthWorld.
type oauthOpts struct {
	agents []oauthAgent
	// format and ttl of the gateway's resource at the authorization
	// server ("jwt" by default; ttl 0: an hour).
	format string
	ttl    int
	// scopes the authorization server issues for the gateway's resource
	// (default: the three demo scopes).
	scopes []string
	// other resources the authorization server knows.
	others  map[string]oauthtest.Resource
	clients []oauthtest.Client
	// registration: dynamic client registration (RFC 7591).
	registration bool
	// extra lines of the gateway's oauth block, and of its rcns block.
	extra, rcns string
	// identity is the rcns identity line's modes (default oauth); mcp
	// the MCP door's line or block (default "mcp").
	identity, mcp string
	// slash: the authorization server also knows the resource with a
	// trailing slash (the TypeScript SDK sends new URL(resource).href).
	slash bool
	// hotel, when set, is what follows "upstream hotel " in the rcns
	// block, given the hotel counter's URL (default that URL alone): a
	// test puts a checking upstream in front and a credentials block.
	hotel func(hotelURL string) string
	// exchangeTTL and exchangeSubjects: the authorization server's token
	// exchange (oauthtest.Config.TokenExchangeTTL, .TokenExchangeSubjectClients).
	exchangeTTL      time.Duration
	exchangeSubjects []string
}

// oauthWorld is a gateway under identity oauth, its authorization
// server, the hotel upstream (json-server behind a counter) and the
// legacy API behind the reverse_proxy (a counter answering by itself).
type oauthWorld struct {
	GW       *Gateway
	AS       *oauthtest.Server
	JS       *JSONServer
	Hotel    *Counter
	Legacy   *Counter
	Resource string // the gateway's resource id (its origin)
	RecDir   string
}

// The OAuth clients of the tests: confidential client_credentials
// clients, and the gateway itself (the introspection client).
const (
	cidA1       = "svc-a1" // listed by rcns-demo-agent
	cidA2       = "svc-a2" // listed by rcns-demo-noscope
	cidStranger = "svc-stranger"
	oauthSecret = "s3cret-s3cret"
)

var demoScopes = []string{"rcns:negotiate", "hotel:read", "hotel:book"}

func defaultOAuthClients() []oauthtest.Client {
	return []oauthtest.Client{
		oauthtest.ConfidentialClient(cidA1, oauthSecret),
		oauthtest.ConfidentialClient(cidA2, oauthSecret),
		oauthtest.ConfidentialClient(cidStranger, oauthSecret),
		oauthtest.ConfidentialClient("gateway", "gateway-secret"),
	}
}

func defaultOAuthAgents() []oauthAgent {
	return []oauthAgent{
		{name: "rcns-demo-agent", scopes: demoScopes, clients: []string{cidA1}},
		{name: "rcns-demo-noscope", scopes: []string{"hotel:read", "hotel:book"}, clients: []string{cidA2}},
	}
}

// writeOAuthAgents writes one agent document per agent (tier 1, owner
// hotel-ops) and returns the directory.
func writeOAuthAgents(t testing.TB, agents []oauthAgent) string {
	t.Helper()
	dir := t.TempDir()
	for _, a := range agents {
		m := map[string]any{
			"agent_id": agentID(a.name), "name": a.name, "owner_id": "hotel-ops",
			"trust_tier": 1, "scopes": a.scopes,
		}
		if len(a.clients) > 0 {
			m["oauth_clients"] = a.clients
		}
		if err := os.WriteFile(filepath.Join(dir, a.name+".json"), mustJSON(t, m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startOAuthWorld renders the gateway's Caddyfile (for its port), starts
// the authorization server knowing the gateway's resource, then the
// gateway.
func startOAuthWorld(t testing.TB, o oauthOpts) *oauthWorld {
	t.Helper()
	if o.agents == nil {
		o.agents = defaultOAuthAgents()
	}
	if o.clients == nil {
		o.clients = defaultOAuthClients()
	}
	if o.scopes == nil {
		o.scopes = demoScopes
	}
	if o.identity == "" {
		o.identity = "oauth"
	}
	if o.mcp == "" {
		o.mcp = "mcp"
	}
	w := &oauthWorld{JS: startJSONServer(t, hotelDB), Legacy: startCounter(t)}
	w.Hotel = startCountingProxy(t, w.JS.URL)
	w.RecDir = filepath.Join(t.TempDir(), "records")
	hotel := w.Hotel.URL
	if o.hotel != nil {
		hotel = o.hotel(w.Hotel.URL)
	}
	site := fill(oauthSite, "HOTEL", hotel, "AGENTS", writeOAuthAgents(t, o.agents),
		"RECORDS", w.RecDir, "OAUTH", o.extra, "RCNS", o.rcns, "LEGACY", w.Legacy.URL,
		"IDENTITY", o.identity, "MCP", o.mcp)
	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, site, suiteDoor)
	w.Resource = fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	res := map[string]oauthtest.Resource{w.Resource: {Scopes: o.scopes, Format: o.format, TTLSeconds: o.ttl}}
	if o.slash {
		res[w.Resource+"/"] = res[w.Resource]
	}
	for k, v := range o.others {
		res[k] = v
	}
	// Its port from freePort, as the gateways' own: bound at port 0, the
	// issuer could take a port freePort just handed a Caddy's admin
	// endpoint (helper-125: "bind: address already in use").
	w.AS = oauthtest.Start(t, oauthtest.Config{Port: freePort(t), Resources: res, Clients: o.clients,
		IntrospectionClients: []string{"gateway"}, Registration: o.registration,
		TokenExchangeTTL: o.exchangeTTL, TokenExchangeSubjectClients: o.exchangeSubjects})
	text = strings.NewReplacer("@@ISSUER@@", w.AS.Issuer(), "@@RESOURCE@@", w.Resource).Replace(text)
	w.GW = launchText(t, text, sitePort, adminPort, agtpPort)
	return w
}

// token runs client_credentials for one of the test clients.
func (w *oauthWorld) token(t testing.TB, client, resource string, scopes ...string) string {
	t.Helper()
	if resource == "" {
		resource = w.Resource
	}
	tok, err := w.AS.ClientCredentials(client, oauthSecret, resource, scopes...)
	if err != nil {
		t.Fatalf("client_credentials for %s: %v", client, err)
	}
	return tok
}

// bearer is the Authorization header of tok alone, with kv added: no
// Agent-ID and no Authority-Scope (the token's scopes stand for the
// claim, so scope_required_for_invocation, on by default, is met).
func bearer(tok string, kv ...string) map[string]string {
	return hdr("", "", append([]string{"Authorization", "Bearer " + tok}, kv...)...)
}

// negotiations reads every record of the negotiation log.
func (w *oauthWorld) negotiations(t testing.TB) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(w.RecDir, "negotiations", "*.jsonl"))
	var out []map[string]any
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if l == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("negotiation record %q: %v", l, err)
			}
			out = append(out, m)
		}
	}
	return out
}

// wantOAuthAnswer checks an answer verified by a token: the agent named,
// Verification-Path oauth, the owner.
func wantOAuthAnswer(t testing.TB, r *Resp, agent, owner string) {
	t.Helper()
	if got := r.Header.Get("Agent-ID"); got != agent {
		t.Errorf("Agent-ID = %q, want %s:\n%s", got, agent, r)
	}
	if got := r.Header.Get("Verification-Path"); got != "oauth" {
		t.Errorf("Verification-Path = %q, want oauth:\n%s", got, r)
	}
	if got := r.Header.Get("Owner-ID"); got != owner {
		t.Errorf("Owner-ID = %q, want %q:\n%s", got, owner, r)
	}
}

// challenge parses a WWW-Authenticate Bearer challenge's parameters.
func challenge(t testing.TB, r *Resp) map[string]string {
	t.Helper()
	v := r.Header.Get("WWW-Authenticate")
	rest, ok := strings.CutPrefix(v, "Bearer ")
	if !ok {
		t.Fatalf("WWW-Authenticate = %q, want a Bearer challenge:\n%s", v, r)
	}
	out := map[string]string{}
	for rest != "" {
		rest = strings.TrimLeft(rest, " ,")
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			t.Fatalf("WWW-Authenticate %q: no = after %q", v, rest)
		}
		if !strings.HasPrefix(after, `"`) {
			t.Fatalf("WWW-Authenticate %q: %s is not a quoted string", v, k)
		}
		val, err := strconv.QuotedPrefix(after)
		if err != nil {
			t.Fatalf("WWW-Authenticate %q: %s: %v", v, k, err)
		}
		out[k], _ = strconv.Unquote(val)
		rest = after[len(val):]
	}
	return out
}

// wantChallenge checks the Bearer challenge of a 401 (invalid_token
// unless noError) or a 403 insufficient_scope naming scope.
func (w *oauthWorld) wantChallenge(t testing.TB, r *Resp, errCode, scope string) {
	t.Helper()
	c := challenge(t, r)
	if c["realm"] == "" {
		t.Errorf("challenge %v has no realm", c)
	}
	if want := w.Resource + "/.well-known/oauth-protected-resource"; c["resource_metadata"] != want {
		t.Errorf("challenge resource_metadata = %q, want %q", c["resource_metadata"], want)
	}
	if c["error"] != errCode {
		t.Errorf("challenge error = %q, want %q (%v)", c["error"], errCode, c)
	}
	if scope != "" && !slices.Contains(strings.Fields(c["scope"]), scope) {
		t.Errorf("challenge scope = %q, want it to name %s", c["scope"], scope)
	}
}

// signJWT signs claims with key (RS256, kid in the header, typ at+jwt).
func signJWT(t testing.TB, key jose.JSONWebKey, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", key.KeyID))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := josejwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claimsFor are access-token claims as the issuer would mint them for
// client at resource.
func (w *oauthWorld) claimsFor(client string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": w.AS.Issuer(), "aud": w.Resource, "client_id": client, "sub": client,
		"scope": strings.Join(demoScopes, " "), "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": randomID()}
}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestOAuthTokenOverEveryDoor: one client_credentials JWT for the client
// rcns-demo-agent's document lists is the agent's identity over the
// door under test (no Agent-ID header) and over MCP: the same agent is
// echoed with Verification-Path oauth and the document's owner, the
// protected-resource metadata names the issuer, and the negotiation
// records carry identity_assurance oauth with the issuer and client.
func TestOAuthTokenOverEveryDoor(t *testing.T) {
	w := startOAuthWorld(t, oauthOpts{})
	tok := w.token(t, cidA1, "", demoScopes...)

	// RFC 9728 metadata, answered by the gateway itself, at the path
	// its resource (the origin) forms; the /mcp form names it (§3.3: a
	// document's resource is the identifier its URL was formed from),
	// and the legacy API sees neither.
	r := w.GW.DoHTTP(t, "GET", "/.well-known/oauth-protected-resource", nil, nil)
	wantStatus(t, r, 200)
	m := r.Object(t)
	if m["resource"] != w.Resource || !slices.Contains(strSlice(m["authorization_servers"]), w.AS.Issuer()) ||
		!slices.Equal(strSlice(m["bearer_methods_supported"]), []string{"header"}) {
		t.Errorf("GET /.well-known/oauth-protected-resource = %s", r.Body)
	}
	r = w.GW.DoHTTP(t, "GET", "/.well-known/oauth-protected-resource/mcp", nil, nil)
	if b := assertErrorBody(t, r, 404, "not-found"); b["resource_metadata"] != w.Resource+"/.well-known/oauth-protected-resource" {
		t.Errorf("the /mcp form names %v, want the resource's metadata URL", b["resource_metadata"])
	}

	// The door under test: a Tier B read and a recipe booking.
	r = w.GW.Do(t, "FETCH", "/guests/g-1", bearer(tok), nil)
	wantStatus(t, r, 200)
	assertAGTPHeaders(t, r)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")
	if str(r.Object(t), "result", "id") != "g-1" {
		t.Fatalf("FETCH /guests/g-1 = %s", r)
	}
	r = w.GW.Do(t, "DISCOVER", "/", bearer(tok), nil)
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")

	// MCP: the same token on the go-sdk client's HTTP requests. The
	// recipe tool synthesizes the contract (optimistic: 263, run).
	c := mcpConnectWith(t, w.GW.URL+"/mcp", &mcpTransport{hdr: map[string]string{"Authorization": "Bearer " + tok}, base: http.DefaultTransport})
	mr := c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil)
	mr.wantSuccess(t, 200)
	mr.wantRecord(t)
	// The MCP answer names the agent the token named, as the other doors
	// do, and so does its record.
	if got := mr.header.Get("Agent-ID"); got != agentA1 {
		t.Errorf("MCP answer Agent-ID = %q, want %s (the token's agent)", got, agentA1)
	}
	rec := attribution(t, &Resp{Header: mr.header})
	if rec["agent_id"] != agentA1 || rec["owner_id"] != "hotel-ops" {
		t.Errorf("MCP Attribution-Record = %v, want agent %s, owner hotel-ops", rec, agentA1)
	}
	if got := mr.header.Get("Verification-Path"); got != "oauth" {
		t.Errorf("MCP answer Verification-Path = %q, want oauth", got)
	}
	if got := mr.header.Get("Owner-ID"); got != "hotel-ops" {
		t.Errorf("MCP answer Owner-ID = %q, want hotel-ops", got)
	}
	mr = c.call(t, "book-room", bookArgs(), nil)
	mr.wantSuccess(t, 263)
	sid := str(mr.structured, "synthesis_id")

	// Back on the door under test: the contract the MCP call made is the
	// token's agent's, and serves its BOOK.
	r = w.GW.Do(t, "BOOK", "/room", bearer(tok), bookBody())
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")
	if got := r.Header.Get("Contract-Synthesized"); got != "" && got != sid {
		t.Errorf("BOOK ran under %s, want the MCP call's contract %s", got, sid)
	}
	r = w.GW.Do(t, "PROPOSE", "/", bearer(tok), builtinBody("PROPOSE", wrappedProposal("BOOK", "/reserve-suite")))
	assert463(t, r, "composition-impossible") // refused on its merits, after identity
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")

	recs := w.negotiations(t)
	if len(recs) == 0 {
		t.Fatalf("no negotiation records in %s", w.RecDir)
	}
	bindings := map[string]bool{}
	versions := 0
	for _, rec := range recs {
		if rec["kind"] == "protocol-version" {
			// The MCP client's initialize: the version it asked for and
			// the one the door answered with (seed 003).
			versions++
			if rec["binding"] != "mcp" || rec["outcome"] != "accepted" || str(rec, "requested", "protocol_version") == "" || str(rec, "granted", "protocol_version") == "" {
				t.Errorf("protocol-version record %v", rec)
			}
		}
		if rec["agent_id"] != agentA1 || rec["identity_assurance"] != "oauth" ||
			rec["identity_issuer"] != w.AS.Issuer() || rec["oauth_client_id"] != cidA1 {
			t.Errorf("negotiation record %v: want agent %s, identity_assurance oauth, issuer %s, client %s", rec, agentA1, w.AS.Issuer(), cidA1)
		}
		bindings[str(rec, "binding")] = true
	}
	t.Logf("%d negotiation records (%d protocol-version), bindings %v", len(recs), versions, bindings)
	if versions == 0 {
		t.Error("the MCP client's initialize left no protocol-version negotiation record")
	}
	if len(recs) < 2 || !bindings["mcp"] || !bindings[suiteDoor] {
		t.Errorf("want a negotiation record from the MCP door and one from the %s door; bindings %v", suiteDoor, bindings)
	}
	w.JS.assertReservationCount(t, 2)
}

func strSlice(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// assertReservationCount checks json-server's reservations.
func (j *JSONServer) assertReservationCount(t testing.TB, n int) {
	t.Helper()
	if rs := j.Reservations(t); len(rs) != n {
		t.Fatalf("json-server has %d reservations, want %d: %v", len(rs), n, rs)
	}
}

// TestOAuthBadTokensRefused: each bad token (or token misuse) on a
// Tier B write is refused with its status and reason, a Bearer challenge
// saying why, and nothing reaches the hotel upstream.
func TestOAuthBadTokensRefused(t *testing.T) {
	const other = "http://127.0.0.1:1/other-api"
	// Tokens for the gateway live 3 s; the gateway's skew is 1 s.
	w := startOAuthWorld(t, oauthOpts{ttl: 3, extra: "\t\t\tclock_skew 1s",
		others: map[string]oauthtest.Resource{other: {Scopes: demoScopes}}})
	stranger, _ := oauthtest.NewRSAKey("not-in-the-jwks")

	// A valid token works (the baseline the refusals differ from).
	r := w.GW.Do(t, "RESERVE", "/reservations", bearer(w.token(t, cidA1, "", demoScopes...)), reserveBody("g-1", 1))
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")
	w.JS.assertReservationCount(t, 1)

	expired := w.token(t, cidA1, "", demoScopes...)
	time.Sleep(4500 * time.Millisecond) // 3 s lifetime + 1 s skew, and a margin

	algNone := func() string {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"at+jwt"}`))
		p := base64.RawURLEncoding.EncodeToString(mustJSON(t, w.claimsFor(cidA1)))
		return h + "." + p + "."
	}
	cases := []struct {
		name   string
		hdr    func() map[string]string
		status int
		reason string
		errc   string // the challenge's error
		scope  string // a scope the challenge must name
	}{
		{"wrong audience", func() map[string]string { return bearer(w.token(t, cidA1, other, demoScopes...)) },
			401, "token-audience-mismatch", "invalid_token", ""},
		{"expired", func() map[string]string { return bearer(expired) }, 401, "token-expired", "invalid_token", ""},
		{"unknown key", func() map[string]string { return bearer(signJWT(t, stranger, w.claimsFor(cidA1))) },
			401, "token-invalid", "invalid_token", ""},
		{"alg none", func() map[string]string { return bearer(algNone()) }, 401, "token-invalid", "invalid_token", ""},
		{"too few scopes", func() map[string]string { return bearer(w.token(t, cidA1, "", "hotel:read")) },
			403, "insufficient-scope", "insufficient_scope", "hotel:book"},
		{"inactive opaque token", func() map[string]string { return bearer(randomID() + randomID()) },
			401, "token-inactive", "invalid_token", ""},
		{"unnamed client", func() map[string]string { return bearer(w.token(t, cidStranger, "", demoScopes...)) },
			401, "oauth-client-unknown", "invalid_token", ""},
		{"Agent-ID of another agent", func() map[string]string {
			return bearer(w.token(t, cidA1, "", demoScopes...), "Agent-ID", agentA2)
		}, 401, "identity-conflict", "invalid_token", ""},
	}
	recsBefore := len(w.negotiations(t))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := c.hdr()
			before := w.Hotel.Count()
			r := w.GW.Do(t, "RESERVE", "/reservations", h, reserveBody("g-2", 2))
			assertErrorBody(t, r, c.status, c.reason)
			w.wantChallenge(t, r, c.errc, c.scope)
			if n := w.Hotel.Count(); n != before {
				t.Errorf("the refused request reached the hotel upstream (%d calls): %+v", n-before, w.Hotel.Requests()[before:])
			}
			if c.status == 401 && r.Header.Get("Verification-Path") == "oauth" && r.Header.Get("Agent-ID") != "" {
				t.Errorf("a 401 names a verified agent: %s", r)
			}
			if rec := attribution(t, r); rec["status"] != float64(c.status) {
				t.Errorf("Attribution-Record status = %v, want %d", rec["status"], c.status)
			}
		})
	}
	w.JS.assertReservationCount(t, 1)
	if n := len(w.negotiations(t)); n != recsBefore {
		t.Logf("the refusals added %d negotiation records", n-recsBefore)
	} else {
		t.Logf("the identity refusals wrote no negotiation record (their trace is the Attribution-Record on the answer)")
	}
	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("the legacy API saw %d requests: %+v", n, w.Legacy.Requests())
	}
}

// TestOAuthKeyRotation: the authorization server restarts signing with a
// new key only; the gateway, holding the old JWKS, refetches it on the
// unknown kid and accepts the new token; the old key's token is then
// refused (its kid is gone from the JWKS).
func TestOAuthKeyRotation(t *testing.T) {
	w := startOAuthWorld(t, oauthOpts{})
	old := w.token(t, cidA1, "", demoScopes...)
	r := w.GW.Do(t, "FETCH", "/guests/g-1", bearer(old), nil)
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")

	k2, _ := oauthtest.NewRSAKey("key-2")
	if err := w.AS.Restart(k2); err != nil {
		t.Fatal(err)
	}
	fresh := w.token(t, cidA1, "", demoScopes...)
	if h := jwtHeader(t, fresh); h["kid"] != "key-2" {
		t.Fatalf("the new token's kid = %v, want key-2", h["kid"])
	}
	r = w.GW.Do(t, "FETCH", "/guests/g-1", bearer(fresh), nil)
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")

	time.Sleep(200 * time.Millisecond) // past jwks_min_refresh
	before := w.Hotel.Count()
	r = w.GW.Do(t, "RESERVE", "/reservations", bearer(old), reserveBody("g-1", 1))
	assertErrorBody(t, r, 401, "token-invalid")
	w.wantChallenge(t, r, "invalid_token", "")
	if w.Hotel.Count() != before {
		t.Errorf("the refused request reached the hotel upstream")
	}
}

func jwtHeader(t testing.TB, tok string) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOAuthIntrospectionAndIssuerDown: the gateway's resource gets
// opaque tokens, which it introspects (RFC 7662, as client gateway):
// an active one is the agent (a write executes once); with the issuer
// down a token the gateway has not introspected yet is 503
// issuer-unavailable with Retry-After, and nothing executes. A gateway
// that never fetched the JWKS answers a JWT with the same 503.
func TestOAuthIntrospectionAndIssuerDown(t *testing.T) {
	w := startOAuthWorld(t, oauthOpts{format: "opaque"})
	tok := w.token(t, cidA1, "", demoScopes...)
	if strings.Count(tok, ".") == 2 {
		t.Fatalf("the resource's token is a JWT, want opaque: %s", tok)
	}
	r := w.GW.Do(t, "RESERVE", "/reservations", bearer(tok), reserveBody("g-1", 1))
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")
	w.JS.assertReservationCount(t, 1)
	// A random string is an opaque token the issuer does not know.
	r = w.GW.Do(t, "RESERVE", "/reservations", bearer(randomID()), reserveBody("g-2", 1))
	assertErrorBody(t, r, 401, "token-inactive")
	w.wantChallenge(t, r, "invalid_token", "")

	fresh := w.token(t, cidA1, "", demoScopes...)
	w.AS.Stop()
	before := w.Hotel.Count()
	r = w.GW.Do(t, "RESERVE", "/reservations", bearer(fresh), reserveBody("g-2", 1))
	b := assertErrorBody(t, r, 503, "issuer-unavailable")
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("503 Retry-After = %q, want a positive number of seconds", r.Header.Get("Retry-After"))
	}
	if b["retryable"] != true {
		t.Errorf("503 issuer-unavailable is not retryable: %v", b)
	}
	if w.Hotel.Count() != before {
		t.Errorf("the request reached the hotel upstream with the issuer down")
	}
	w.JS.assertReservationCount(t, 1)

	t.Run("JWT, JWKS never fetched", func(t *testing.T) {
		w := startOAuthWorld(t, oauthOpts{})
		tok := w.token(t, cidA1, "", demoScopes...)
		w.AS.Stop()
		r := w.GW.Do(t, "RESERVE", "/reservations", bearer(tok), reserveBody("g-1", 1))
		assertErrorBody(t, r, 503, "issuer-unavailable")
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After:\n%s", r)
		}
		if w.Hotel.Count() != 0 {
			t.Errorf("the hotel upstream saw %d requests", w.Hotel.Count())
		}
	})
}

// TestOAuthOfficialTypeScriptClient: the MCP TypeScript SDK's client
// with an OAuth client provider and nothing configured but the MCP URL
// (no identity header, no Authority-Scope: the token's scopes bound the
// agent's grants and stand for the claim) walks 401 → protected-resource metadata →
// authorization-server metadata → dynamic client registration →
// authorization code with PKCE → token, then calls the booking recipe
// twice with one Idempotency-Key: 263 with the contract, then the
// replay; the hotel saw one booking, the legacy API nothing (the
// discovery never reaches it). The registered client is in no agent
// document: unnamed_clients makes it rcns-demo-agent; the OAuth scope
// hotel.booking maps to the three AGTP scopes.
func TestOAuthOfficialTypeScriptClient(t *testing.T) {
	sdk := filepath.Dir(mustTool(t, "node_modules/@modelcontextprotocol/sdk/package.json"))
	w := startOAuthWorld(t, oauthOpts{registration: true, slash: true, scopes: []string{"hotel.booking"},
		mcp:   "mcp {\n\t\t\tmeta_attribution_record\n\t\t}",
		extra: "\t\t\tscope hotel.booking rcns:negotiate hotel:read hotel:book\n\t\t\tunnamed_clients rcns-demo-agent"})
	script := filepath.Join(repoRoot, "integration", "testdata", "oauth", "oauth-client.mjs")
	idem := "ts-oauth-" + randomID()
	out, code := runTool(t, t.TempDir(), "node", script, sdk, w.GW.URL+"/mcp", "book-room", string(mustJSON(t, bookArgs())), idem)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Requests         []string       `json:"requests"`
		Error            string         `json:"error"`
		AuthorizationURL string         `json:"authorizationURL"`
		ClientID         string         `json:"clientID"`
		TokenScope       string         `json:"tokenScope"`
		AccessToken      string         `json:"accessToken"`
		First            map[string]any `json:"first"`
		Second           map[string]any `json:"second"`
	}
	if code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &res) != nil {
		t.Fatalf("oauth-client.mjs (exit %d):\n%s", code, out)
	}
	t.Logf("the SDK sent:\n  %s", strings.Join(res.Requests, "\n  "))
	if res.Error != "" {
		t.Fatalf("oauth-client.mjs: %s", res.Error)
	}
	meta, err := w.AS.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	mcpURL := w.GW.URL + "/mcp"
	// The flow, in order.
	// The SDK fetches the metadata the challenge's resource_metadata
	// names (the origin's), or else the path-suffixed one first.
	prm := "GET " + w.GW.URL + "/.well-known/oauth-protected-resource"
	if slices.Contains(res.Requests, prm+"/mcp") && !slices.Contains(res.Requests, prm) {
		prm += "/mcp"
	}
	want := []string{
		"POST " + mcpURL,
		prm,
		"GET " + w.AS.Issuer() + "/.well-known/oauth-authorization-server",
		"POST " + meta["registration_endpoint"].(string),
		"POST " + meta["token_endpoint"].(string),
		"POST " + mcpURL,
	}
	i := 0
	for _, r := range res.Requests {
		if i < len(want) && r == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("the SDK's requests lack %q (in order %v)", want[i], want)
	}
	au, err := url.Parse(res.AuthorizationURL)
	if err != nil || au.Query().Get("code_challenge_method") != "S256" || au.Query().Get("scope") != "hotel.booking" ||
		strings.TrimSuffix(au.Query().Get("resource"), "/") != w.Resource {
		t.Errorf("authorization URL %s: want PKCE S256, scope hotel.booking, resource %s", res.AuthorizationURL, w.Resource)
	}
	if res.ClientID == "" || res.TokenScope != "hotel.booking" {
		t.Errorf("registered client %q, token scope %q; want a client and hotel.booking", res.ClientID, res.TokenScope)
	}

	// The first call synthesized the contract and booked; the second is
	// the replay of that answer.
	sc1, _ := res.First["structuredContent"].(map[string]any)
	sc2, _ := res.Second["structuredContent"].(map[string]any)
	if res.First["isError"] == true || str(sc1, "outcome") != "succeeded" || sc1["status"] != float64(263) || str(sc1, "synthesis_id") == "" {
		t.Fatalf("first book-room: %v", res.First)
	}
	m1, _ := res.First["_meta"].(map[string]any)
	m2, _ := res.Second["_meta"].(map[string]any)
	if m2[metaReplayed] != true || str(sc2, "synthesis_id") != str(sc1, "synthesis_id") || sc2["status"] != float64(263) {
		t.Errorf("second book-room with the same Idempotency-Key is not the replay: %v", res.Second)
	}
	if m1[metaReplayed] == true {
		t.Errorf("the first call says it was replayed: %v", m1)
	}
	rec, _ := m1[metaAttribution].(string)
	if pl := attribution(t, &Resp{Header: http.Header{"Attribution-Record": {rec}}}); pl["agent_id"] != agentA1 || pl["owner_id"] != "alice" {
		t.Errorf("Attribution-Record = %v, want agent %s (unnamed_clients) and owner alice (the token's sub)", pl, agentA1)
	}
	w.JS.assertReservationCount(t, 1)
	posts := 0
	for _, r := range w.Hotel.Requests() {
		if r.Method == "POST" && r.Path == "/reservations" {
			posts++
		}
	}
	if posts != 1 {
		t.Errorf("the hotel saw %d POST /reservations, want 1", posts)
	}
	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("the legacy API saw %d requests during discovery: %+v", n, w.Legacy.Requests())
	}
	var found bool
	for _, rec := range w.negotiations(t) {
		if rec["oauth_client_id"] == res.ClientID && rec["identity_assurance"] == "oauth" && rec["agent_id"] == agentA1 {
			found = true
		}
	}
	if !found {
		t.Errorf("no negotiation record of the registered client %s with identity_assurance oauth: %v", res.ClientID, w.negotiations(t))
	}
	// The same token, replayed by hand over the door under test.
	r := w.GW.Do(t, "FETCH", "/guests/g-1", hdr("", "", "Authorization", "Bearer "+res.AccessToken), nil)
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "alice")
}

// TestOAuthIdentityList: identity header oauth, with the MCP door
// narrowed to oauth. The AGTP door under test takes the bare Agent-ID on
// loopback and the token; the MCP door refuses the bare Agent-ID (401
// identity-mode-refused with a Bearer challenge) and takes the token; a
// token with an Agent-ID naming another agent is identity-conflict.
func TestOAuthIdentityList(t *testing.T) {
	w := startOAuthWorld(t, oauthOpts{identity: "header oauth", mcp: "mcp {\n\t\t\tidentity oauth\n\t\t}"})
	tok := w.token(t, cidA1, "", demoScopes...)

	r := w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, scopeAll), nil)
	wantStatus(t, r, 200)
	if got := r.Header.Get("Verification-Path"); got != "header" {
		t.Errorf("bare Agent-ID: Verification-Path = %q, want header", got)
	}
	r = w.GW.Do(t, "FETCH", "/guests/g-1", bearer(tok), nil)
	wantStatus(t, r, 200)
	wantOAuthAnswer(t, r, agentA1, "hotel-ops")

	before := w.Hotel.Count()
	r = w.GW.Do(t, "RESERVE", "/reservations", bearer(tok, "Agent-ID", agentID("rcns-demo-noscope")), reserveBody("g-1", 1))
	assertErrorBody(t, r, 401, "identity-conflict")
	w.wantChallenge(t, r, "invalid_token", "")
	if w.Hotel.Count() != before {
		t.Error("the refused request reached the hotel upstream")
	}

	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	r = mcpRaw(t, w.GW, "/mcp", list, hdr(agentA1, scopeAll))
	assertErrorBody(t, r, 401, "identity-mode-refused")
	w.wantChallenge(t, r, "", "")
	r = mcpRaw(t, w.GW, "/mcp", list, map[string]string{"Authorization": "Bearer " + tok})
	wantStatus(t, r, 200)
	if !strings.Contains(string(r.Body), "fetch_guest") {
		t.Errorf("tools/list with the token lacks fetch_guest: %s", r.Body)
	}

	// An initialize asking for a version the door does not speak is
	// answered with another: the downgrade is a negotiation record.
	init := `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}`
	r = mcpRaw(t, w.GW, "/mcp", init, map[string]string{"Authorization": "Bearer " + tok})
	wantStatus(t, r, 200)
	var got string
	for _, rec := range w.negotiations(t) {
		if rec["kind"] == "protocol-version" && str(rec, "requested", "protocol_version") == "2099-01-01" {
			got = str(rec, "granted", "protocol_version")
			if rec["outcome"] != "accepted" || got == "" || got == "2099-01-01" || !strings.Contains(string(r.Body), got) {
				t.Errorf("downgrade record %v for answer %s", rec, r.Body)
			}
		}
	}
	if got == "" {
		t.Errorf("the downgraded initialize left no protocol-version record; answer %s", r.Body)
	}
	// The agent reads its own downgrade back: INSPECT on the HTTP door
	// and the MCP resource rcns://negotiations, newest first.
	ins := w.GW.DoHTTP(t, "INSPECT", "/?target=negotiations&kind=protocol-version&limit=1", bearer(tok), nil)
	wantStatus(t, ins, 200)
	if b := string(ins.Body); !strings.Contains(b, `"protocol_version":"2099-01-01"`) || got == "" || !strings.Contains(b, `"protocol_version":"`+got+`"`) {
		t.Errorf("INSPECT target=negotiations does not show the downgrade: %s", b)
	}
	r = mcpRaw(t, w.GW, "/mcp", `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"rcns://negotiations"}}`, map[string]string{"Authorization": "Bearer " + tok})
	wantStatus(t, r, 200)
	if !strings.Contains(string(r.Body), `2099-01-01`) {
		t.Errorf("rcns://negotiations does not show the downgrade: %s", r.Body)
	}
	// The log with that record verifies (verify-log knows every kind the
	// gateway writes).
	if out, err := exec.Command(caddyBin, "rcns", "verify-log", w.RecDir).CombinedOutput(); err != nil {
		t.Errorf("verify-log on the log with a protocol-version record: %v\n%s", err, out)
	}
}
