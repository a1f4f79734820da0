package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/caddy-rcns/caddy-rcns/internal/oauthtest"
)

// Upstream credentials per agent and per owner (issue 31;
// docs/configuration.md "Upstream credentials"): the legacy API behind
// the gateway sees, on every step, the credential of the agent or the
// person the call is for, from the operator's secret sources, and never
// the caller's own token.

// credSite is a gateway under identity oauth with two upstreams on one
// checking server: by-owner (per_owner, a mapping file) and by-agent
// (per_agent, a file per agent).
const credSite = `
	rcns {
		server_id caddy-rcns-it
		identity oauth
		enabled true
		mode optimistic
		upstream by-owner {{UP}}/o {
			credentials per_owner {
				file {{OWNERS}}
			}
		}
		upstream by-agent {{UP}}/a {
			credentials per_agent {
				dir {{AGENTSECRETS}}
				header Authorization "Bearer {secret}"
			}
		}
		agents {{AGENTS}}
		endpoints {{DOCS}}/endpoints
		recipes {{DOCS}}/recipes
		mcp
		oauth {
			issuer @@ISSUER@@
			resource @@RESOURCE@@
			client_id gateway
			client_secret gateway-secret
		}
	}
	reverse_proxy {{LEGACY}}
`

// credEndpoint is a Tier B endpoint FETCH <path> calling GET <upPath>
// on upstream; internal ones serve recipe steps only.
func credEndpoint(path, upstream, upPath string, internal bool) string {
	in := ""
	if internal {
		in = "internal: true\n"
	}
	return fmt.Sprintf(`method: FETCH
path: %s
description: Says whom the legacy API took the caller to be.
%ssemantic:
  intent: Tell whom the upstream sees.
  actor: agent
  outcome: The upstream's principal is returned.
  capability: retrieval
  confidence: 0.9
  impact: informational
  is_idempotent: true
input_schema: {type: object, additionalProperties: false}
output_schema:
  type: object
  required: [principal]
  properties:
    principal: {type: string}
errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
required_scopes: [hotel:read]
external_service:
  upstream: %s
  method: GET
  path: %s
`, path, in, upstream, upPath)
}

// credRecipe is LOOKUP /triple: three steps, the owner's credential,
// the agent's, the owner's again.
const credRecipe = `name: cred-triple
version: "1"
description: Asks the legacy API three times whom it sees.
required_scopes: [hotel:read]
pattern:
  method: LOOKUP
  path_exact: /triple
endpoint:
  description: Whom the legacy API sees, per step.
  semantic:
    intent: Tell whom the upstream sees on each step.
    actor: agent
    outcome: Each step's principal is returned.
    capability: retrieval
    confidence: 0.9
    impact: informational
    is_idempotent: true
  input_schema: {type: object, additionalProperties: false}
  output_schema:
    type: object
    required: [first, second, third]
  errors: [composition_failed]
steps:
  - name: first
    method: FETCH
    path: /whoami
    input: '{}'
  - name: second
    method: FETCH
    path: /agent-whoami
    input: '{}'
  - name: third
    method: FETCH
    path: /owner-again
    input: '{}'
output: '{first: $first.principal, second: $second.principal, third: $third.principal}'
`

// credUpstream is the legacy API: under /o it takes an owner's secret,
// under /a an agent's, and answers whom the secret names; any other
// Authorization is 401. It records every request.
type credUpstream struct {
	URL    string
	mu     sync.Mutex
	owners map[string]string // secret → owner
	agents map[string]string // secret → agent name
	seen   []credSeen
}

type credSeen struct {
	path      string
	principal string // "" when refused
	header    http.Header
}

func (u *credUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	table := u.owners
	if strings.HasPrefix(r.URL.Path, "/a/") {
		table = u.agents
	}
	secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p := table[secret]
	u.seen = append(u.seen, credSeen{path: r.URL.Path, principal: p, header: r.Header.Clone()})
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if p == "" || len(r.Header.Values("Authorization")) != 1 {
		w.WriteHeader(401)
		w.Write([]byte(`{"error":"unknown credential"}`))
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"principal": p})
}

// since returns what the upstream saw after the first n requests.
func (u *credUpstream) since(n int) []credSeen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]credSeen(nil), u.seen[n:]...)
}

func (u *credUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

// credCaller is one caller: the token, and the principals the two
// upstreams must see for it.
type credCaller struct {
	name, token, owner, agent string
}

// TestUpstreamCredentialsPerAgentAndOwner: two agents, and two people
// (OAuth subs) behind one agent, call the same Tier B endpoint and the
// same three-step recipe over the door under test and over MCP; the
// legacy API sees the right distinct credential on every step of every
// call and never a caller's token; the Attribution-Record names each
// step's credential kind; a person the operator keeps no credential for
// is refused 424 with nothing upstream; a secret rotated by reload
// reaches the next call of a live contract.
func TestUpstreamCredentialsPerAgentAndOwner(t *testing.T) {
	up := &credUpstream{
		owners: map[string]string{"sec-ops-a": "ops-a", "sec-ops-b": "ops-b", "sec-alice": "alice", "sec-bob": "bob"},
		agents: map[string]string{"sec-agent-a": "cred-agent-a", "sec-agent-b": "cred-agent-b"},
	}
	up.URL = serve(t, up)
	legacy := startCounter(t)

	dir := t.TempDir()
	agentsDir, secretsDir, docs := filepath.Join(dir, "agents"), filepath.Join(dir, "agent-secrets"), filepath.Join(dir, "docs")
	for _, d := range []string{agentsDir, secretsDir, docs + "/endpoints", docs + "/recipes"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	idA, idB := agentID("cred-agent-a"), agentID("cred-agent-b")
	// Agent A also answers for the public client "app" its users (alice,
	// bob) log in with at the authorization server.
	for _, a := range []struct {
		name, owner string
		clients     []string
	}{{"cred-agent-a", "ops-a", []string{cidA1, "app"}}, {"cred-agent-b", "ops-b", []string{cidA2}}} {
		write(filepath.Join(agentsDir, a.name+".json"), string(mustJSON(t, map[string]any{
			"agent_id": agentID(a.name), "name": a.name, "owner_id": a.owner, "trust_tier": 1,
			"scopes": demoScopes, "oauth_clients": a.clients})))
	}
	write(filepath.Join(secretsDir, idA), "sec-agent-a\n")
	write(filepath.Join(secretsDir, idB), "sec-agent-b\n")
	owners := filepath.Join(dir, "owners.yaml")
	write(owners, "ops-a: sec-ops-a\nops-b: sec-ops-b\nalice: sec-alice\nbob: sec-bob\n")
	write(docs+"/endpoints/whoami.yaml", credEndpoint("/whoami", "by-owner", "/whoami", false))
	write(docs+"/endpoints/agent-whoami.yaml", credEndpoint("/agent-whoami", "by-agent", "/whoami", true))
	write(docs+"/endpoints/owner-again.yaml", credEndpoint("/owner-again", "by-owner", "/again", true))
	write(docs+"/recipes/cred-triple.yaml", credRecipe)

	site := fill(credSite, "UP", up.URL, "OWNERS", owners, "AGENTSECRETS", secretsDir, "AGENTS", agentsDir,
		"DOCS", docs, "LEGACY", legacy.URL)
	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, site, suiteDoor)
	resource := fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	priv, _ := oauthtest.NewRSAKey("cred-it")
	as := oauthtest.Start(t, oauthtest.Config{Port: freePort(t), Keys: []jose.JSONWebKey{priv},
		Resources:            map[string]oauthtest.Resource{resource: {Scopes: demoScopes}},
		Clients:              append(defaultOAuthClients(), oauthtest.PublicClient("app", appRedirect)),
		IntrospectionClients: []string{"gateway"}})
	text = strings.NewReplacer("@@ISSUER@@", as.Issuer(), "@@RESOURCE@@", resource).Replace(text)
	gw := launchText(t, text, sitePort, adminPort, agtpPort)

	clientToken := func(client string) string {
		t.Helper()
		tok, err := as.ClientCredentials(client, oauthSecret, resource, demoScopes...)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// A person's token: the authorization-code flow at the authorization
	// server with the person logged in, through agent A's public client.
	personToken := func(sub string) string {
		t.Helper()
		tr, err := as.AuthorizationCodeAs(sub, "app", "", appRedirect, resource, demoScopes...)
		if err != nil {
			t.Fatalf("authorization code for %s: %v", sub, err)
		}
		return tr.AccessToken
	}
	callers := []credCaller{
		{"agent A (for its owner)", clientToken(cidA1), "ops-a", "cred-agent-a"},
		{"agent B (for its owner)", clientToken(cidA2), "ops-b", "cred-agent-b"},
		{"alice through agent A", personToken("alice"), "alice", "cred-agent-a"},
		{"bob through agent A", personToken("bob"), "bob", "cred-agent-a"},
	}
	tokens := []string{}
	for _, c := range callers {
		tokens = append(tokens, c.token)
	}

	// checkSeen: the upstream saw exactly want (path → principal) since
	// n, every request accepted, no caller token in any header.
	checkSeen := func(t *testing.T, n int, want [][2]string) {
		t.Helper()
		seen := up.since(n)
		if len(seen) != len(want) {
			t.Fatalf("upstream saw %d requests, want %d: %+v", len(seen), len(want), seen)
		}
		got := map[[2]string]int{}
		for _, s := range seen {
			got[[2]string{s.path, s.principal}]++
			for k, vs := range s.header {
				for _, v := range vs {
					for _, tok := range tokens {
						if strings.Contains(v, tok) {
							t.Errorf("the upstream saw a caller's token in %s", k)
						}
					}
				}
			}
		}
		for _, w := range want {
			if got[w] == 0 {
				t.Errorf("upstream did not see %s as %s; saw %+v", w[0], w[1], seen)
			}
			got[w]--
		}
	}
	wantKinds := func(t *testing.T, rec map[string]any, want ...string) {
		t.Helper()
		list, _ := rec["upstream_credentials"].([]any)
		var got []string
		for _, e := range list {
			m, _ := e.(map[string]any)
			got = append(got, fmt.Sprintf("%s:%s:%s", m["step"], m["upstream"], m["kind"]))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("upstream_credentials = %v, want %v", got, want)
		}
	}

	t.Run(suiteDoor+" door", func(t *testing.T) {
		for _, c := range callers {
			n := up.count()
			r := gw.Do(t, "FETCH", "/whoami", bearer(c.token), nil)
			wantStatus(t, r, 200)
			if got := str(r.Object(t), "result", "principal"); got != c.owner {
				t.Errorf("%s: FETCH /whoami principal %q, want %q", c.name, got, c.owner)
			}
			wantKinds(t, attribution(t, r), "FETCH /whoami:by-owner:per_owner")
			checkSeen(t, n, [][2]string{{"/o/whoami", c.owner}})

			n = up.count()
			r = gw.Do(t, "LOOKUP", "/triple", bearer(c.token, "Allow-RCNS", "true"), nil)
			if r.Status != 200 && r.Status != 263 {
				t.Fatalf("%s: LOOKUP /triple = %s", c.name, r)
			}
			res := r.Object(t)["result"]
			if str(res, "first") != c.owner || str(res, "second") != c.agent || str(res, "third") != c.owner {
				t.Errorf("%s: LOOKUP /triple result %v, want %s/%s/%s", c.name, res, c.owner, c.agent, c.owner)
			}
			wantKinds(t, attribution(t, r), "first:by-owner:per_owner", "second:by-agent:per_agent", "third:by-owner:per_owner")
			checkSeen(t, n, [][2]string{{"/o/whoami", c.owner}, {"/a/whoami", c.agent}, {"/o/again", c.owner}})
		}
	})

	if suiteDoor == "http" {
		t.Run("mcp", func(t *testing.T) {
			for _, c := range callers {
				mc := mcpConnectWith(t, gw.URL+"/mcp", &mcpTransport{hdr: map[string]string{"Authorization": "Bearer " + c.token}, base: http.DefaultTransport})
				n := up.count()
				mr := mc.call(t, "fetch_whoami", map[string]any{}, nil)
				res := mr.wantSuccess(t, 200)
				if got := str(res, "principal"); got != c.owner {
					t.Errorf("%s: MCP fetch_whoami principal %q, want %q", c.name, got, c.owner)
				}
				wantKinds(t, attribution(t, &Resp{Header: mr.header}), "FETCH /whoami:by-owner:per_owner")
				checkSeen(t, n, [][2]string{{"/o/whoami", c.owner}})

				n = up.count()
				mr = mc.call(t, "cred-triple", map[string]any{}, nil)
				if mr.res.IsError {
					t.Fatalf("%s: MCP cred-triple: %v", c.name, mr.structured)
				}
				res = mr.structured["result"]
				if str(res, "first") != c.owner || str(res, "second") != c.agent || str(res, "third") != c.owner {
					t.Errorf("%s: MCP cred-triple result %v", c.name, mr.structured)
				}
				checkSeen(t, n, [][2]string{{"/o/whoami", c.owner}, {"/a/whoami", c.agent}, {"/o/again", c.owner}})
			}
		})
	}

	// Two people behind one agent share its Idempotency-Key space, not
	// their answers: bob repeating alice's key is a different request
	// (422 idempotency-key-reused), never alice's answer, made with her
	// credential, replayed to him; alice's own repeat replays.
	t.Run("one person's key is not another's", func(t *testing.T) {
		alice, bob := callers[2], callers[3]
		key := "shared-" + suiteDoor
		n := up.count()
		r := gw.Do(t, "FETCH", "/whoami", bearer(alice.token, "Idempotency-Key", key), nil)
		wantStatus(t, r, 200)
		r = gw.Do(t, "FETCH", "/whoami", bearer(bob.token, "Idempotency-Key", key), nil)
		assertErrorBody(t, r, 422, "idempotency-key-reused")
		if strings.Contains(r.String(), "alice") || r.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("bob got alice's answer: %s", r)
		}
		r = gw.Do(t, "FETCH", "/whoami", bearer(alice.token, "Idempotency-Key", key), nil)
		wantStatus(t, r, 200)
		if r.Header.Get("Idempotent-Replayed") != "true" || str(r.Object(t), "result", "principal") != "alice" {
			t.Errorf("alice's repeat: %s, want her answer replayed", r)
		}
		checkSeen(t, n, [][2]string{{"/o/whoami", "alice"}})
		// Her Attribution-Record is hers to read, not bob's (agent_only).
		audit := r.Header.Get("Audit-ID")
		if got := gw.Do(t, "INSPECT", "/?target=audit&audit_id="+audit, bearer(alice.token), nil); got.Status != 200 {
			t.Errorf("alice reading her record: %s", got)
		}
		assertErrorBody(t, gw.Do(t, "INSPECT", "/?target=audit&audit_id="+audit, bearer(bob.token), nil), 403, "forbidden")
	})

	t.Run("missing pair", func(t *testing.T) {
		carol := personToken("carol")
		n := up.count()
		r := gw.Do(t, "FETCH", "/whoami", bearer(carol), nil)
		b := assertErrorBody(t, r, 424, "upstream-credential-missing")
		if b["upstream"] != "by-owner" || b["step"] != "FETCH /whoami" || strings.Contains(r.String(), "sec-") {
			t.Errorf("refusal %s: want upstream by-owner, step FETCH /whoami, no secret", r.Body)
		}
		// The recipe: the agent's step has a credential, the owner's
		// not; nothing runs.
		r = gw.Do(t, "LOOKUP", "/triple", bearer(carol, "Allow-RCNS", "true"), nil)
		b = assertErrorBody(t, r, 424, "upstream-credential-missing")
		if b["upstream"] != "by-owner" || b["step"] != "first" {
			t.Errorf("recipe refusal %s: want upstream by-owner, step first", r.Body)
		}
		if got := up.count(); got != n {
			t.Errorf("the upstream saw %d requests for a refused pair", got-n)
		}
	})

	t.Run("credential dir unmounted", func(t *testing.T) {
		// The operator's secret volume goes away at run time: agent A's
		// file was there, but the gateway cannot read the store. That is
		// not "no credential for this agent" (424) but the operator's
		// fault: 503 upstream-credential-unavailable with Retry-After, no
		// path in the body, nothing upstream, and counted by upstream and
		// reason. Back in place, the next call runs.
		a := callers[0]
		n := up.count()
		if err := os.Rename(secretsDir, secretsDir+".bak"); err != nil {
			t.Fatal(err)
		}
		r := gw.Do(t, "LOOKUP", "/triple", bearer(a.token, "Allow-RCNS", "true"), nil)
		if err := os.Rename(secretsDir+".bak", secretsDir); err != nil {
			t.Fatal(err)
		}
		b := assertErrorBody(t, r, 503, "upstream-credential-unavailable")
		if b["upstream"] != "by-agent" || b["step"] != "second" || b["retryable"] != true || r.Header.Get("Retry-After") == "" ||
			strings.Contains(r.String(), dir) || strings.Contains(r.String(), "sec-") {
			t.Errorf("refusal %s (Retry-After %q): want upstream by-agent, step second, retryable, no path or secret", r, r.Header.Get("Retry-After"))
		}
		if got := up.count(); got != n {
			t.Errorf("the upstream saw %d requests while the store was unreadable", got-n)
		}
		if l := metricLines(scrapeMetrics(t, gw).raw, "caddy_rcns_upstream_credential_refusals_total{"); !strings.Contains(l, `reason="upstream-credential-unavailable",upstream="by-agent"} 1`) &&
			!strings.Contains(l, `upstream="by-agent",reason="upstream-credential-unavailable"} 1`) {
			t.Errorf("refusal not counted: %q", l)
		}
		r = gw.Do(t, "LOOKUP", "/triple", bearer(a.token, "Allow-RCNS", "true"), nil)
		if r.Status != 200 && r.Status != 263 {
			t.Errorf("store back: %s", r)
		}
	})

	t.Run("rotation by reload", func(t *testing.T) {
		alice := callers[2].token
		// Agent A's live contract for LOOKUP /triple (minted above).
		r := gw.Do(t, "LOOKUP", "/triple", bearer(alice, "Allow-RCNS", "true"), nil)
		wantStatus(t, r, 200)
		sid := r.Header.Get("Contract-Synthesized")
		if sid == "" {
			t.Fatalf("LOOKUP /triple ran under no contract: %s", r)
		}
		// The legacy API rotates alice's secret: the old one is refused.
		up.mu.Lock()
		delete(up.owners, "sec-alice")
		up.owners["sec-alice-2"] = "alice"
		up.mu.Unlock()
		r = gw.Do(t, "LOOKUP", "/triple", bearer(alice, "Contract-Synthesized", sid), nil)
		b := assertErrorBody(t, r, 422, "composition_failed")
		// The failure's step reports say which kind each step used.
		steps, _ := field(b, "error", "details", "steps").([]any)
		var kinds []string
		for _, st := range steps {
			kinds = append(kinds, str(st, "name")+":"+str(st, "credential"))
		}
		if strings.Join(kinds, " ") != "first:per_owner second:per_agent third:per_owner" {
			t.Errorf("composition_failed steps carry credential kinds %v", kinds)
		}
		// The operator rotates the mapping and reloads.
		write(owners, "ops-a: sec-ops-a\nops-b: sec-ops-b\nalice: sec-alice-2\nbob: sec-bob\n")
		if status, body := reload(t, gw, text); status != 200 {
			t.Fatalf("reload: %d %s", status, body)
		}
		n := up.count()
		r = gw.Do(t, "LOOKUP", "/triple", bearer(alice, "Contract-Synthesized", sid), nil)
		wantStatus(t, r, 200)
		if r.Header.Get("Contract-Synthesized") != sid || str(r.Object(t), "result", "first") != "alice" {
			t.Errorf("after reload: %s", r)
		}
		checkSeen(t, n, [][2]string{{"/o/whoami", "alice"}, {"/a/whoami", "cred-agent-a"}, {"/o/again", "alice"}})
	})
}

// TestUpstreamCredentialsConfirmFirst: a confirm-first contract whose
// upstream keeps no credential for its agent is refused when presented
// (424, nothing upstream) and stays pending; once the operator drops
// the agent's file in the directory (read per call, no reload), the
// next presentation accepts and runs it with that credential.
func TestUpstreamCredentialsConfirmFirst(t *testing.T) {
	up := &credUpstream{owners: map[string]string{}, agents: map[string]string{}}
	up.URL = serve(t, up)
	dir := t.TempDir()
	secrets, docs := filepath.Join(dir, "secrets"), filepath.Join(dir, "docs")
	for _, d := range []string{secrets, docs + "/endpoints", docs + "/recipes"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(docs+"/endpoints/agent-whoami.yaml", credEndpoint("/agent-whoami", "by-agent", "/whoami", true))
	write(docs+"/endpoints/agent-again.yaml", credEndpoint("/agent-again", "by-agent", "/again", true))
	write(docs+"/recipes/cred-pair.yaml", strings.NewReplacer("name: cred-triple", "name: cred-pair", "path_exact: /triple", "path_exact: /couples",
		"required: [first, second, third]", "required: [first, second]",
		"    path: /whoami\n", "    path: /agent-whoami\n", "    path: /owner-again\n", "    path: /agent-again\n",
		"  - name: third\n    method: FETCH\n    path: /owner-again\n    input: '{}'\n", "",
		", third: $third.principal", "").Replace(credRecipe))
	site := fill(`
	rcns {
		identity header
		enabled true
		mode confirm-first
		upstream by-agent {{UP}}/a {
			credentials per_agent {
				dir {{SECRETS}}
			}
		}
		agents examples/hotel/agents
		endpoints {{DOCS}}/endpoints
		recipes {{DOCS}}/recipes
	}
	respond 404
`, "UP", up.URL, "SECRETS", secrets, "DOCS", docs)
	gw := startGateway(t, site)

	r := gw.Do(t, "LOOKUP", "/couples", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), nil)
	wantStatus(t, r, 461)
	sid := str(r.Object(t), "synthesis_id")
	r = gw.Do(t, "LOOKUP", "/couples", hdr(agentA1, scopeAll, "Contract-Synthesized", sid), nil)
	b := assertErrorBody(t, r, 424, "upstream-credential-missing")
	if b["upstream"] != "by-agent" || b["step"] != "first" {
		t.Errorf("refusal %s: want upstream by-agent, step first", r.Body)
	}
	if n := up.count(); n != 0 {
		t.Fatalf("the upstream saw %d requests for a refused presentation", n)
	}
	// Still pending: a plain repeat does not find it by pair (an
	// accepted one would run, and be refused 424 again).
	assertErrorBody(t, gw.Do(t, "LOOKUP", "/couples", hdr(agentA1, scopeAll), nil), 404, "not-found")

	write(filepath.Join(secrets, agentA1), "sec-a1")
	up.mu.Lock()
	up.agents["sec-a1"] = "a1"
	up.mu.Unlock()
	r = gw.Do(t, "LOOKUP", "/couples", hdr(agentA1, scopeAll, "Contract-Synthesized", sid), nil)
	wantStatus(t, r, 200)
	if res := r.Object(t)["result"]; str(res, "first") != "a1" || str(res, "second") != "a1" {
		t.Errorf("result %v, want a1 on both steps", res)
	}
	if n := up.count(); n != 2 {
		t.Errorf("upstream saw %d requests, want 2", n)
	}
}
