package engine

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// The agents TestEveryStageRefusal adds to the load test's one
// (testAgent, trust tier 1, rcns:negotiate and bench:read), each named
// by the SHA-256 of its name as the load test's is.
var (
	// srOperator carries inspect:all: it reads and settles what other
	// agents hold.
	srOperator = srAgentID("rcns-test-operator")
	// srTier3 is an experimental agent, refused by min_trust_tier 1.
	srTier3 = srAgentID("rcns-test-tier3")
	// srNarrow holds rcns:negotiate only, never bench:read.
	srNarrow = srAgentID("rcns-test-narrow")
	// srSuspended and srRetired are registered but not served.
	srSuspended = srAgentID("rcns-test-suspended")
	srRetired   = srAgentID("rcns-test-retired")
	// srCertA is an identity mtls agent (rcns-test-cert-b, bound to
	// srSPKIB, is another), srSigner an identity signature agent
	// (rcns-test-signer-2, with another key, is another).
	srCertA  = srAgentID("rcns-test-cert-a")
	srSigner = srAgentID("rcns-test-signer")
)

// The scopes the rows claim: srOpScope is the operator's whole grant.
const srOpScope = "rcns:negotiate, bench:read, inspect:all"

// The SubjectPublicKeyInfo bytes of the identity mtls agents'
// certificates, and of one no agent is bound to.
var (
	srSPKIA     = []byte("spki-of-rcns-test-cert-a")
	srSPKIB     = []byte("spki-of-rcns-test-cert-b")
	srSPKIStray = []byte("spki-of-nobody")
)

// srAgentID is the Agent-ID of the agent named name: the SHA-256 of the
// name, in lowercase hex.
func srAgentID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// srRow is one refusal of one stage: the request (send, with any setup
// it needs), sent to the engine named engine ("" the main one), and the
// refusal wanted: want's status and reason token, and a fragment of the
// explanation when expl is not empty. check, when set, checks more of
// the answer.
type srRow struct {
	stage  string
	name   string
	engine string
	send   srSender
	want   agtp.Reason
	expl   string
	check  func(t *testing.T, a *testAnswer)
}

// srSender sends one request (after any setup) and returns the answer.
type srSender func(t *testing.T, te *testEngine) *srAnswer

// srSend sends method target with hdr and body as the harness's serve
// frames them (Content-Length, from a loopback address).
func srSend(method, target string, hdr http.Header, body string) srSender {
	return srRaw(method, target, hdr, body, nil)
}

// srCall is srSend with Content-Type: application/json added to a body
// sent without one.
func srCall(method, target string, hdr http.Header, body string) srSender {
	if hdr == nil {
		hdr = http.Header{}
	}
	if _, ok := hdr["Content-Type"]; body != "" && !ok {
		hdr = hdr.Clone()
		hdr.Set("Content-Type", "application/json")
	}
	return srSend(method, target, hdr, body)
}

// srRaw sends method target with hdr and body as srSend does, once
// mutate changed the door's request (framing, TLS, loopback, a verified
// identity).
func srRaw(method, target string, hdr http.Header, body string, mutate func(in *agtp.Request)) srSender {
	return func(t *testing.T, te *testEngine) *srAnswer {
		u, _ := url.ParseRequestURI(target) // nil: a target the door could not parse
		in := &agtp.Request{Binding: agtp.BindingHTTP, Method: method, Target: target, URL: u, Host: "127.0.0.1",
			Header: hdr.Clone(), ContentLength: int64(len(body)), Loopback: true}
		if in.Header == nil {
			in.Header = http.Header{}
		}
		if body != "" {
			in.Body = strings.NewReader(body)
		}
		if mutate != nil {
			mutate(in)
		}
		return srServe(t, te, in)
	}
}

// srAnswer is an answer and the stage that gave it: the one that
// refused the request, or answered it itself.
type srAnswer struct {
	*testAnswer
	stage string
}

// srServe answers in as Engine.Serve does (Activate, newExchange,
// dispatch, finish), keeping the name of the stage at which the request
// stopped (dispatch's result), and decodes the answer as the harness's
// serve does.
func srServe(t *testing.T, te *testEngine, in *agtp.Request) *srAnswer {
	t.Helper()
	in.Context = t.Context()
	h := te.Engine
	start := time.Now()
	h.Activate()
	x := h.newExchange(in)
	stage := h.dispatch(x)
	a := &srAnswer{testAnswer: &testAnswer{Response: h.finish(x, start)}, stage: stage}
	_ = json.Unmarshal(a.Body, &a.body)
	return a
}

// srAfter runs setup, then sends s.
func srAfter(setup func(t *testing.T, te *testEngine), s srSender) srSender {
	return func(t *testing.T, te *testEngine) *srAnswer {
		setup(t, te)
		return s(t, te)
	}
}

// srAs is the header of agent claiming scope (no Authority-Scope when
// scope is ""), plus the kv pairs (added: a repeated name repeats).
func srAs(agent, scope string, kv ...string) http.Header {
	h := http.Header{"Agent-Id": {agent}}
	if scope != "" {
		h.Set("Authority-Scope", scope)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// srMe is testAgent with testScope plus kv (agentHeader), srOp the
// operator with its whole grant.
func srMe(kv ...string) http.Header { return agentHeader(kv...) }
func srOp(kv ...string) http.Header { return srAs(srOperator, srOpScope, kv...) }

// srAnon is a header without Agent-ID, of the kv pairs.
func srAnon(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// srJSON is v as JSON.
func srJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// srParams is the envelope {"parameters": p}.
func srParams(p map[string]any) string {
	b, err := json.Marshal(map[string]any{"parameters": p})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// srKeyOp is the body of REVOKE target=idempotency-key for testAgent's
// key with action ("" none). key and action are read from the body
// only (builtinQueryParams).
func srKeyOp(key, action string) string {
	p := map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": key}
	if action != "" {
		p["action"] = action
	}
	return srParams(p)
}

// srSemantic is a valid semantic block.
func srSemantic() map[string]any {
	return map[string]any{"intent": "Look up one item by id.", "actor": "agent", "outcome": "The item record is returned.",
		"capability": "retrieval", "confidence": 0.9, "impact": "informational", "is_idempotent": true}
}

// srProposal is a PROPOSE body for method path with a valid semantic
// block: ep changes members of the proposed endpoint (nil removes
// one), p adds parameters beside it.
func srProposal(method, path string, ep, p map[string]any) string {
	endpoint := map[string]any{"method": method, "path": path, "semantic": srSemantic()}
	for k, v := range ep {
		if v == nil {
			delete(endpoint, k)
		} else {
			endpoint[k] = v
		}
	}
	params := map[string]any{"endpoint": endpoint}
	for k, v := range p {
		params[k] = v
	}
	return srParams(params)
}

// srItem is the envelope giving item_id.
func srItem(id string) string { return srParams(map[string]any{"item_id": id}) }

// srWant fails t unless a, the answer to the setup step what, has
// status.
func srWant(t *testing.T, what string, a *srAnswer, status int) {
	t.Helper()
	if a.Status != status {
		t.Fatalf("setup %s: %s; want %d", what, a, status)
	}
}

// srMint synthesizes a contract for agent on LOOKUP path through the
// gate (optimistic: 263, run at once) and returns its synthesis id.
func srMint(t *testing.T, te *testEngine, agent, scope, path string) string {
	t.Helper()
	a := srCall("LOOKUP", path, srAs(agent, scope, "Allow-RCNS", "true"), srItem("1"))(t, te)
	srWant(t, "mint LOOKUP "+path, a, 263)
	id := a.str("synthesis_id")
	if id == "" {
		t.Fatalf("setup mint LOOKUP %s: no synthesis_id: %s", path, a)
	}
	return id
}

// srPropose synthesizes a contract for testAgent on LOOKUP path by
// PROPOSE and returns its synthesis id.
func srPropose(t *testing.T, te *testEngine, path string) string {
	t.Helper()
	a := srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", path, nil, nil))(t, te)
	srWant(t, "PROPOSE LOOKUP "+path, a, 263)
	return a.str("synthesis_id")
}

// srPresent presents contract id on LOOKUP path as testAgent with body
// and kv.
func srPresent(id, path, body string, kv ...string) srSender {
	return func(t *testing.T, te *testEngine) *srAnswer {
		return srCall("LOOKUP", path, srMe(append([]string{"Contract-Synthesized", id}, kv...)...), body)(t, te)
	}
}

// srMinted mints a contract for testAgent on LOOKUP path, then sends
// what send makes of its synthesis id.
func srMinted(path string, send func(id string) srSender) srSender {
	return func(t *testing.T, te *testEngine) *srAnswer {
		return send(srMint(t, te, testAgent, testScope, path))(t, te)
	}
}

// srHeld claims key for testAgent in the engine's store, for lease, as
// another node running method target with body would (the request's
// fingerprint): the key is in flight until the lease ends, and, since
// that node never stores an answer, outcome-unknown after.
func srHeld(t *testing.T, te *testEngine, key, method, target, body string, lease time.Duration) {
	t.Helper()
	var raw []byte
	if body != "" {
		raw = []byte(body)
	}
	c, err := te.sto.Idempotency.Claim(t.Context(), idempotency.ClaimRequest{AgentID: testAgent, Key: key,
		Fingerprint: idempotency.Fingerprint(method, target, raw), Lease: lease,
		Holder: idempotency.Holder{Node: "other-node", What: method + " " + target}})
	if err != nil || c.Outcome != idempotency.Execute {
		t.Fatalf("setup claim %s: %v %v", key, c.Outcome, err)
	}
}

// srInFlight holds key for method target with body (srHeld) for a
// minute, then sends that request with the key as testAgent, plus kv.
func srInFlight(key, method, target, body string, kv ...string) srSender {
	return srAfter(func(t *testing.T, te *testEngine) {
		srHeld(t, te, key, method, target, body, time.Minute)
	}, srCall(method, target, srMe(append([]string{"Idempotency-Key", key}, kv...)...), body))
}

// srOrphaned holds key for method target with body (srHeld) for a
// millisecond and lets the lease end, then sends that request with the
// key as testAgent, plus kv.
func srOrphaned(key, method, target, body string, kv ...string) srSender {
	return srAfter(func(t *testing.T, te *testEngine) {
		srHeld(t, te, key, method, target, body, time.Millisecond)
		time.Sleep(20 * time.Millisecond)
	}, srCall(method, target, srMe(append([]string{"Idempotency-Key", key}, kv...)...), body))
}

// srKeysFull spends testAgent's one idempotency record (one-key
// engines) on a keyed FETCH, then sends s.
func srKeysFull(s srSender) srSender {
	return srAfter(func(t *testing.T, te *testEngine) {
		srWant(t, "keyed FETCH", srSend("FETCH", "/items/1", srMe("Idempotency-Key", "first-key"), "")(t, te), 200)
	}, s)
}

// srHasHeader checks that the answer carries header name (want "":
// any value).
func srHasHeader(name, want string) func(t *testing.T, a *testAnswer) {
	return func(t *testing.T, a *testAnswer) {
		t.Helper()
		if got := a.header(name); got == "" || want != "" && got != want {
			t.Errorf("header %s = %q, want %q", name, got, srOr(want, "a value"))
		}
	}
}

// srNoEcho checks that the answer carries neither the header field nor
// the body member.
func srNoEcho(field, member string) func(t *testing.T, a *testAnswer) {
	return func(t *testing.T, a *testAnswer) {
		t.Helper()
		for _, f := range a.Header {
			if strings.EqualFold(f.Name, field) {
				t.Errorf("the refusal echoes %s: %q", f.Name, f.Value)
			}
		}
		if v, ok := a.body[member]; ok {
			t.Errorf("the refusal's body has %s: %v", member, v)
		}
	}
}

// srField checks that body member name, as JSON, is want.
func srField(name, want string) func(t *testing.T, a *testAnswer) {
	return func(t *testing.T, a *testAnswer) {
		t.Helper()
		b, _ := json.Marshal(a.body[name])
		if string(b) != want {
			t.Errorf("body %s = %s, want %s", name, b, want)
		}
	}
}

// srExplNot checks that the explanation does not hold part: a
// parameter the caller gave, or one defaulted, is not named missing.
func srExplNot(part string) func(t *testing.T, a *testAnswer) {
	return func(t *testing.T, a *testAnswer) {
		t.Helper()
		if e := a.str("explanation"); strings.Contains(e, part) {
			t.Errorf("explanation %q holds %q", e, part)
		}
	}
}

// srOr is a, or b when a is empty.
func srOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// srFailingBody is a request body whose reads fail with err, as a
// door's body does when the connection times out or a request_body
// max_size in front of the gateway cuts it.
type srFailingBody struct{ err error }

// Read fails with f.err, having read nothing.
func (f srFailingBody) Read([]byte) (int, error) { return 0, f.err }

// srDocs writes the documents the main engine adds to the load test's:
// its agents, an endpoint whose upstream call times out, and a recipe
// PROPOSE may not synthesize. It returns their three directories.
func srDocs(t *testing.T) (agents, endpoints, recipes string) {
	t.Helper()
	dir := t.TempDir()
	agents, endpoints, recipes = filepath.Join(dir, "agents"), filepath.Join(dir, "endpoints"), filepath.Join(dir, "recipes")
	type agentDoc struct {
		name, owner string
		tier        int
		status      string
		scopes      []string
	}
	for _, a := range []agentDoc{
		{"rcns-test-operator", "test-ops", 1, "active", []string{"rcns:negotiate", "bench:read", "inspect:all"}},
		{"rcns-test-tier3", "test-ops", 3, "active", []string{"rcns:negotiate", "bench:read"}},
		{"rcns-test-narrow", "test-ops", 1, "active", []string{"rcns:negotiate"}},
		{"rcns-test-suspended", "test-ops", 1, "suspended", []string{"rcns:negotiate", "bench:read"}},
		{"rcns-test-retired", "test-ops", 1, "retired", []string{"rcns:negotiate", "bench:read"}},
	} {
		srWriteDoc(t, agents, a.name+".json", map[string]any{"agent_id": srAgentID(a.name), "name": a.name, "owner_id": a.owner,
			"trust_tier": a.tier, "status": a.status, "scopes": a.scopes})
	}
	item := map[string]any{"type": "object", "additionalProperties": false, "required": []string{"item_id"},
		"properties": map[string]any{"item_id": map[string]any{"type": "string", "minLength": 1}}}
	srWriteDoc(t, endpoints, "fetch-waiting-item.json", map[string]any{
		"method": "FETCH", "path": "/waits/{item_id}", "description": "Fetches one item from a route that answers after the call's 50 ms timeout.",
		"semantic": srSemantic(), "input_schema": item,
		"output_schema": map[string]any{"type": "object"},
		"errors": []string{"upstream_timeout", "upstream_connection_error", "upstream_malformed_response",
			"upstream_authentication_failed", "upstream_error"},
		"required_scopes": []string{"bench:read"},
		"external_service": map[string]any{"upstream": "bench", "method": "GET", "path": "/wait/{item_id}",
			"timeout_seconds": 0.05},
	})
	srWriteDoc(t, recipes, "sealed-item.json", map[string]any{
		"name": "sealed-item", "version": "1", "description": "Looks up one item; not offered to PROPOSE.",
		"required_scopes": []string{"bench:read"}, "propose": false,
		"pattern": map[string]any{"method": "LOOKUP", "path_regex": "/sealed/[A-Za-z0-9-]+"},
		"endpoint": map[string]any{"description": "Looks up one item by id.", "semantic": srSemantic(), "input_schema": item,
			"output_schema": map[string]any{"type": "object"}, "errors": []string{"composition_failed"}},
		"steps":  []any{map[string]any{"name": "item", "method": "FETCH", "path": "/items/{item_id}", "input": "{item_id: $input.item_id}"}},
		"output": "{item: $item}",
	})
	return agents, endpoints, recipes
}

// srIdentityDocs writes the agents of the verified identity modes: two
// bound to client certificates (mtls), and two with Ed25519 keys
// (signature). It returns the two directories.
func srIdentityDocs(t *testing.T, signerKey, signer2Key ed25519.PublicKey) (mtls, sig string) {
	t.Helper()
	dir := t.TempDir()
	mtls, sig = filepath.Join(dir, "mtls"), filepath.Join(dir, "sig")
	scopes := []string{"rcns:negotiate", "bench:read"}
	for name, spki := range map[string][]byte{"rcns-test-cert-a": srSPKIA, "rcns-test-cert-b": srSPKIB} {
		sum := sha256.Sum256(spki)
		srWriteDoc(t, mtls, name+".json", map[string]any{"agent_id": srAgentID(name), "name": name, "owner_id": "test-ops",
			"trust_tier": 1, "scopes": scopes, "certificates": []string{hex.EncodeToString(sum[:])}})
	}
	for name, pub := range map[string]ed25519.PublicKey{"rcns-test-signer": signerKey, "rcns-test-signer-2": signer2Key} {
		jwk, err := httpsig.JWKFromPublic(pub)
		if err != nil {
			t.Fatal(err)
		}
		srWriteDoc(t, sig, name+".json", map[string]any{"agent_id": srAgentID(name), "name": name, "owner_id": "test-ops",
			"trust_tier": 1, "scopes": scopes, "keys": []any{jwk}})
	}
	return mtls, sig
}

// srWriteDoc writes doc as the JSON document dir/name.
func srWriteDoc(t *testing.T, dir, name string, doc map[string]any) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(srJSON(t, doc)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// srUpstream serves the bench upstream's routes on 127.0.0.1, each
// item id choosing the answer: e500 a 500, e401 a 401, junk a 200 that
// is not JSON, any other the item. GET /wait/{id} answers only after 5
// s (or once the caller gave up).
func srUpstream(t *testing.T) string {
	t.Helper()
	item := func(w http.ResponseWriter, r *http.Request) {
		switch id := r.PathValue("id"); id {
		case "e500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "e401":
			w.WriteHeader(http.StatusUnauthorized)
		case "junk":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "not json")
		default:
			b, _ := json.Marshal(map[string]any{"id": id, "name": "bench item", "price": 12.5})
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			_, _ = w.Write(b)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", item)
	mux.HandleFunc("GET /slow/{id}", item)
	mux.HandleFunc("GET /wait/{id}", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	return serveLoopback(t, mux)
}

// srDeadUpstream is the URL of a 127.0.0.1 port nothing listens on.
func srDeadUpstream(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

// srSigning is how srSigned signs: the Host signed and sent, the
// signature parameters, the bytes Content-Digest is computed over (nil:
// the body), and the target sent (the one signed when "").
type srSigning struct {
	host       string
	opt        httpsig.SignOptions
	digestOf   []byte
	sendTarget string
}

// srSigned builds the request method target with body from agent
// (claiming bench:read), signed with key as tweak says.
func srSigned(t *testing.T, agent string, key ed25519.PrivateKey, method, target, body string, tweak func(*srSigning)) *agtp.Request {
	t.Helper()
	s := srSigning{host: "127.0.0.1", opt: httpsig.SignOptions{Expires: time.Now().Add(time.Minute)}}
	if tweak != nil {
		tweak(&s)
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	hr := httptest.NewRequest(method, target, rd)
	hr.Host = s.host
	hr.Header.Set("Agent-ID", agent)
	hr.Header.Set("Authority-Scope", "bench:read")
	if body != "" {
		hr.Header.Set("Content-Type", "application/json")
		digest := s.digestOf
		if digest == nil {
			digest = []byte(body)
		}
		httpsig.SetContentDigest(hr.Header, digest)
	}
	kid, err := httpsig.Thumbprint(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if err := (&httpsig.Signer{KeyID: kid, Key: key}).Sign(hr, s.opt); err != nil {
		t.Fatal(err)
	}
	sent := target
	if s.sendTarget != "" {
		sent = s.sendTarget
	}
	u, err := url.ParseRequestURI(sent)
	if err != nil {
		t.Fatal(err)
	}
	in := &agtp.Request{Binding: agtp.BindingHTTP, Method: method, Target: sent, URL: u, Host: s.host,
		Header: hr.Header, ContentLength: int64(len(body)), Loopback: true}
	if body != "" {
		in.Body = strings.NewReader(body)
	}
	return in
}

// srKey is a new Ed25519 key.
func srKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// srSignedSend sends srSigned's request.
func srSignedSend(agent string, key *ed25519.PrivateKey, method, target, body string, tweak func(*srSigning)) srSender {
	return func(t *testing.T, te *testEngine) *srAnswer {
		return srServe(t, te, srSigned(t, agent, *key, method, target, body, tweak))
	}
}

// TestEveryStageRefusal: every refusal each stage of the spec §10 order
// (stages) can give an agent is given for its own reason, by that stage
// (the one at which the request stops, srServe), with the status its
// reason token has in the catalog, in the spec §19 body (status,
// reason, an explanation saying why, retryable as the catalog says).
// The rows go stage by stage in the stages' order, and every stage has
// some. A refusal that needs a knob runs on an engine of that
// configuration; one that needs state (a contract, a spent budget, a
// used or held key) makes it first.
//
// Not covered, and why:
//   - store-unavailable (503) and internal-error (500), from storeFailed
//     in every stage that calls the store (identity signature's replay
//     cache included): the memory store never fails.
//   - synthesis-error (464) from storeFailed on recipes.ErrPlan: a
//     captured plan this node cannot rebuild comes from another
//     configuration through a shared store.
//   - composition-impossible (464) from unbound (presentation,
//     Tier C by pair): a contract whose upstream the running
//     configuration no longer declares needs the contract to outlive a
//     reload; each test engine has its own state.
//   - scope-exceeded (455) under a contract (presentation, Tier C by
//     pair): minting one needed the recipe's scopes granted, and grants
//     change only with the agents documents, on a reload.
//   - synthesis-in-flight (409, pair): a concurrent first call of the
//     same agent minting the pair's contract between the pair lookup and
//     the mint, which then ends; a race no single request reaches.
//   - body-too-large (413) after the body was read longer than
//     max_request_body (framing): httpbody.Read never returns more than
//     a Content-Length the stage already bounded.
//   - invalid-canonical-id and invalid-owner-id from
//     policy.ResolveCaller (identity): the stage refuses both earlier
//     with the same reason (the rows below), so ResolveCaller never sees
//     them.
//   - the 2xx and 409 answers a key replays: replays, not refusals.
func TestEveryStageRefusal(t *testing.T) {
	agentsDir, endpointsDir, recipesDir := srDocs(t)
	upstream := srUpstream(t)
	signerKey, signer2Key, strayKey := srKey(t), srKey(t), srKey(t) // strayKey: no agent's
	mtlsDir, sigDir := srIdentityDocs(t, signerKey.Public().(ed25519.PublicKey), signer2Key.Public().(ed25519.PublicKey))

	// main is every engine's start: the load test's configuration with
	// the rows' agents, endpoint and recipe, and the upstream whose item
	// ids choose its answer.
	main := func(c *Config) {
		c.Agents = append(c.Agents, agentsDir)
		c.Endpoints = append(c.Endpoints, endpointsDir)
		c.Recipes = append(c.Recipes, recipesDir)
		c.Upstreams = map[string]*UpstreamConfig{"bench": {URL: upstream}}
	}
	no := false
	invokeOne := func(c *Config) { c.InvocationRateLimitPerMinute, c.InvocationRateLimitBurst = 1, 1 }
	oneKey := func(c *Config) { c.IdempotencyMaxPerAgent = 1 }
	knobs := map[string]func(c *Config){
		"":          func(*Config) {},
		"strict":    func(c *Config) { c.StrictIdentifiers = true },
		"no-anon":   func(c *Config) { c.AnonymousDiscovery = &no },
		"rcns-off":  func(c *Config) { c.Enabled = false },
		"synth-off": func(c *Config) { c.SynthesisEnabled = &no },
		"depth-1":   func(c *Config) { c.MaxSynthesisDepth = 1 },
		"one-each":  func(c *Config) { c.MaxContractsPerAgent = 1 },
		"gate-1":    func(c *Config) { c.RateLimitPerMinute, c.RateLimitBurst = 1, 1 },
		"dead":      func(c *Config) { c.Upstreams = map[string]*UpstreamConfig{"bench": {URL: srDeadUpstream(t)}} },
		"mtls":      func(c *Config) { c.Identity, c.Agents = IdentityMTLS, []string{mtlsDir} },
		"signature": func(c *Config) {
			c.Identity, c.Agents, c.SignatureAuthorities = IdentitySignature, []string{sigDir}, []string{"127.0.0.1"}
		},
		"no-fetch": func(c *Config) {
			c.Disallow = []string{"FETCH"}
			c.Redirects = []RedirectConfig{
				{FromMethod: "LOOKUP", FromPath: "/old-items", ToMethod: "FETCH", ToPath: "/items/1"},
				{FromMethod: "DISCOVER", FromPath: "/old-list", ToMethod: "FETCH", ToPath: "/items/1"},
			}
		},
		// One engine per row that spends testAgent's invocation budget
		// (it refills once a minute) or fills its one idempotency
		// record.
		"invoke-1/presentation": invokeOne,
		"invoke-1/tier-b":       invokeOne,
		"invoke-1/pair":         invokeOne,
		"one-key/built-in":      oneKey,
		"one-key/presentation":  oneKey,
		"one-key/tier-b":        oneKey,
		"one-key/pair":          oneKey,
	}

	long := strings.Repeat("k", 256)
	rows := []srRow{
		// task-id: a Task-ID header is 1-256 visible ASCII characters.
		{stage: "task-id", name: "space", send: srSend("FETCH", "/items/1", srMe("Task-ID", "not a task id"), ""),
			want: agtp.InvalidTaskID, expl: "the Task-ID header must be"},
		{stage: "task-id", name: "empty", send: srSend("FETCH", "/items/1", srMe("Task-ID", ""), ""),
			want: agtp.InvalidTaskID, expl: "the Task-ID header must be"},
		{stage: "task-id", name: "257 characters", send: srSend("FETCH", "/items/1", srMe("Task-ID", strings.Repeat("t", 257)), ""),
			want: agtp.InvalidTaskID, expl: "the Task-ID header must be"},

		// singletons: a single-valued AGTP header sent twice.
		// Neither value of a repeated identifier is echoed, as the
		// native door drops it (helper-88: the HTTP door echoed the
		// first).
		{stage: "singletons", name: "Agent-ID", send: srSend("FETCH", "/items/1", srMe("Agent-ID", testAgent), ""),
			want: agtp.DuplicateHeader, expl: "the Agent-ID header appears more than once", check: srNoEcho("Agent-ID", "agent_id")},
		{stage: "singletons", name: "Task-ID", send: srSend("FETCH", "/items/1", srMe("Task-ID", "t-1", "Task-ID", "t-2"), ""),
			want: agtp.DuplicateHeader, expl: "the Task-ID header", check: srNoEcho("Task-ID", "task_id")},
		// Before the body is read, as the native codec refuses them
		// (helper-90): the envelope's task_id is not echoed instead, and
		// a body that is not JSON does not answer first.
		{stage: "singletons", name: "Task-ID beside an envelope task_id", send: srCall("FETCH", "/items/1", srMe("Task-ID", "t-1", "Task-ID", "t-2"), `{"task_id":"t-env"}`),
			want: agtp.DuplicateHeader, expl: "the Task-ID header", check: srNoEcho("Task-ID", "task_id")},
		{stage: "singletons", name: "Agent-ID with a body that is not JSON", send: srCall("FETCH", "/items/1", srMe("Agent-ID", testAgent), `{bad`),
			want: agtp.DuplicateHeader, expl: "the Agent-ID header appears more than once"},
		{stage: "singletons", name: "Authority-Scope", send: srSend("FETCH", "/items/1", srMe("Authority-Scope", "catalog:read"), ""),
			want: agtp.DuplicateHeader, expl: "the Authority-Scope header appears more than once"},
		{stage: "singletons", name: "Session-ID", send: srSend("FETCH", "/items/1", srMe("Session-ID", strings.Repeat("s", 22), "Session-ID", strings.Repeat("s", 22)), ""),
			want: agtp.DuplicateHeader, expl: "the Session-ID header"},
		{stage: "singletons", name: "Allow-RCNS", send: srSend("LOOKUP", "/item/x", srMe("Allow-RCNS", "true", "Allow-RCNS", "true"), ""),
			want: agtp.DuplicateHeader, expl: "the Allow-RCNS header"},
		{stage: "singletons", name: "Idempotency-Key", send: srSend("FETCH", "/items/1", srMe("Idempotency-Key", "a", "Idempotency-Key", "b"), ""),
			want: agtp.DuplicateHeader, expl: "the Idempotency-Key header"},
		{stage: "singletons", name: "Contract-Synthesized", send: srSend("LOOKUP", "/item/x", srMe("Contract-Synthesized", "syn-a", "Contract-Synthesized", "syn-a"), ""),
			want: agtp.DuplicateHeader, expl: "the Contract-Synthesized header"},

		// framing: origin-form, Content-Length, the body and its JSON
		// envelope.
		{stage: "framing", name: "fragment in the target", send: srSend("FETCH", "/items/1#top", srMe(), ""),
			want: agtp.InvalidRequestLine, expl: "must not contain '#'"},
		{stage: "framing", name: "asterisk-form", send: srSend("FETCH", "*", srMe(), ""),
			want: agtp.InvalidRequestLine, expl: "must be origin-form"},
		{stage: "framing", name: "unparsed target", send: srRaw("FETCH", "/items/%zz", srMe(), "", nil),
			want: agtp.InvalidRequestLine, expl: "must be origin-form"},
		{stage: "framing", name: "chunked", send: srRaw("FETCH", "/items/1", srMe(), "", func(in *agtp.Request) { in.Chunked, in.ContentLength = true, -1 }),
			want: agtp.ContentLengthRequired, expl: "chunked or unframed"},
		{stage: "framing", name: "unframed", send: srRaw("FETCH", "/items/1", srMe(), "", func(in *agtp.Request) { in.ContentLength = -1 }),
			want: agtp.ContentLengthRequired, expl: "framed by Content-Length"},
		{stage: "framing", name: "declared over max_request_body", send: srRaw("FETCH", "/items/1", srMe(), "", func(in *agtp.Request) { in.ContentLength = 1<<20 + 1 }),
			want: agtp.BodyTooLarge, expl: "the limit is 1048576 bytes", check: srField("limit_bytes", "1048576")},
		{stage: "framing", name: "content-encoding", send: srSend("FETCH", "/items/1", srMe("Content-Type", "application/json", "Content-Encoding", "gzip"), "{}"),
			want: agtp.UnsupportedContentEncoding, expl: `Content-Encoding "gzip"`, check: srHasHeader("Accept-Encoding", "identity")},
		{stage: "framing", name: "body ends early", send: srRaw("FETCH", "/items/1", srMe("Content-Type", "application/json"), "{}", func(in *agtp.Request) { in.ContentLength = 10 }),
			want: agtp.InvalidBody, expl: "ended early: 2 of the 10 bytes"},
		{stage: "framing", name: "body read times out", send: srRaw("FETCH", "/items/1", srMe("Content-Type", "application/json"), "{}", func(in *agtp.Request) { in.Body = srFailingBody{os.ErrDeadlineExceeded} }),
			want: agtp.InvalidBody, expl: "timed out"},
		{stage: "framing", name: "body cut by a limit in front", send: srRaw("FETCH", "/items/1", srMe("Content-Type", "application/json"), "{}", func(in *agtp.Request) { in.Body = srFailingBody{&http.MaxBytesError{Limit: 1}} }),
			want: agtp.BodyTooLarge, expl: "exceeds 1 bytes"},
		{stage: "framing", name: "body read fails", send: srRaw("FETCH", "/items/1", srMe("Content-Type", "application/json"), "{}", func(in *agtp.Request) { in.Body = srFailingBody{net.ErrClosed} }),
			want: agtp.InvalidBody, expl: "the connection failed after 0 of the 2 bytes"},
		{stage: "framing", name: "no content-type", send: srSend("FETCH", "/items/1", srMe(), "{}"),
			want: agtp.UnsupportedContentType, expl: "needs a JSON Content-Type"},
		{stage: "framing", name: "text/plain", send: srSend("FETCH", "/items/1", srMe("Content-Type", "text/plain"), "{}"),
			want: agtp.UnsupportedContentType, expl: `Content-Type "text/plain" is not accepted`},
		{stage: "framing", name: "two content-types", send: srSend("FETCH", "/items/1", srMe("Content-Type", "application/json", "Content-Type", "application/json"), "{}"),
			want: agtp.UnsupportedContentType, expl: "Content-Type appears 2 times"},
		{stage: "framing", name: "latin-1", send: srSend("FETCH", "/items/1", srMe("Content-Type", "application/json; charset=latin1"), "{}"),
			want: agtp.UnsupportedContentType, expl: `charset "latin1"`},
		{stage: "framing", name: "truncated json", send: srCall("FETCH", "/items/1", srMe(), `{"parameters":`),
			want: agtp.InvalidJSON, expl: "truncated"},
		{stage: "framing", name: "duplicate key", send: srCall("FETCH", "/items/1", srMe(), `{"parameters":{},"parameters":{}}`),
			want: agtp.DuplicateKey, expl: `names the key "parameters" twice`},
		{stage: "framing", name: "inexact integer", send: srCall("FETCH", "/items/1", srMe(), `{"parameters":{"n":123456789012345678901}}`),
			want: agtp.InvalidJSON, expl: "beyond ±2^53"},
		{stage: "framing", name: "not an object", send: srCall("FETCH", "/items/1", srMe(), `[1]`),
			want: agtp.InvalidJSON, expl: "must be a JSON object"},
		{stage: "framing", name: "task_id a number", send: srCall("FETCH", "/items/1", srMe(), `{"task_id":5}`),
			want: agtp.InvalidTaskID, expl: "must be a string, not a number"},
		{stage: "framing", name: "task_id malformed", send: srCall("FETCH", "/items/1", srMe(), `{"task_id":"a b"}`),
			want: agtp.InvalidTaskID, expl: "the envelope task_id must be"},
		{stage: "framing", name: "session_id malformed", send: srCall("FETCH", "/items/1", srMe(), `{"session_id":"short"}`),
			want: agtp.InvalidSessionID, expl: "the envelope session_id must be a Session-ID"},

		// method: lexical form, legacy opt-in, catalog, and the
		// envelope's method.
		{stage: "method", name: "legacy GET", send: srSend("GET", "/items/1", srMe(), ""),
			want: agtp.LegacyMethodNotEnabled, expl: "use FETCH", check: srField("method", `"GET"`)},
		{stage: "method", name: "hyphen", send: srSend("FOO-BAR", "/items/1", srMe(), ""),
			want: agtp.InvalidMethodToken, expl: "not a valid AGTP method token"},
		{stage: "method", name: "lowercase", send: srSend("fetch", "/items/1", srMe(), ""),
			want: agtp.InvalidMethodToken, expl: "not a valid AGTP method token"},
		{stage: "method", name: "not in the catalog", send: srSend("FROBNICATE", "/items/1", srMe(), ""),
			want: agtp.MethodNotInCatalog, expl: "is not in AGTP method catalog", check: srField("catalog_version", `"1.0.0"`)},
		{stage: "method", name: "envelope method differs", send: srCall("FETCH", "/items/1", srMe(), `{"method":"REMOVE"}`),
			want: agtp.MethodMismatch, expl: `the envelope method "REMOVE" differs from the request method FETCH`},
		{stage: "method", name: "envelope method a number", send: srCall("FETCH", "/items/1", srMe(), `{"method":5}`),
			want: agtp.MethodMismatch, expl: "the envelope method a number differs"},

		// path: characters, encoding, query, grammar, method policy.
		{stage: "path", name: "raw brace", send: srSend("FETCH", "/items/{x}", srMe(), ""),
			want: agtp.PathGrammarViolation, expl: "send it percent-encoded", check: srField("segment", `"{x}"`)},
		{stage: "path", name: "not UTF-8", send: srSend("FETCH", "/items/%FF", srMe(), ""),
			want: agtp.InvalidPathEncoding, expl: "not valid UTF-8"},
		{stage: "path", name: "semicolon query", send: srSend("FETCH", "/items/1?a=1;b=2", srMe(), ""),
			want: agtp.InvalidQuery, expl: "a ';' separator"},
		{stage: "path", name: "bad query escape", send: srSend("FETCH", "/items/1?a=%zz", srMe(), ""),
			want: agtp.InvalidQuery, expl: "a bad percent-escape"},
		{stage: "path", name: "query not UTF-8", send: srSend("FETCH", "/items/1?a=%FF", srMe(), ""),
			want: agtp.InvalidQuery, expl: "a query value is not UTF-8"},
		{stage: "path", name: "trailing slash", send: srSend("FETCH", "/items/", srMe(), ""),
			want: agtp.PathGrammarViolation, expl: `must not end with "/"`},
		{stage: "path", name: "empty segment", send: srSend("FETCH", "/items//1", srMe(), ""),
			want: agtp.PathGrammarViolation, expl: "an empty segment"},
		{stage: "path", name: "dot segment", send: srSend("FETCH", "/items/../1", srMe(), ""),
			want: agtp.PathGrammarViolation, expl: "is a dot segment"},
		{stage: "path", name: "method name as segment", send: srSend("FETCH", "/items/book", srMe(), ""),
			want: agtp.PathGrammarViolation, expl: "equals the AGTP method name BOOK"},
		{stage: "path", name: "disallowed method", engine: "no-fetch", send: srSend("FETCH", "/items/1", srMe(), ""),
			want: agtp.MethodNotAllowed, expl: "method FETCH is not allowed on this server", check: srField("allowed_methods_for_path", "[]")},
		{stage: "path", name: "redirected to a disallowed method", engine: "no-fetch", send: srSend("LOOKUP", "/old-items", srMe(), ""),
			want: agtp.MethodNotAllowed, expl: "method FETCH is not allowed on this server", check: srField("path", `"/items/1"`)},

		// identity: the identity mode, the identifiers, the registry and
		// the scope claim; without Agent-ID only DISCOVER.
		{stage: "identity", name: "header identity off loopback", send: srRaw("FETCH", "/items/1", srMe(), "", func(in *agtp.Request) { in.Loopback = false }),
			want: agtp.IdentityModeRefused, expl: "only on loopback"},
		{stage: "identity", name: "anonymous FETCH", send: srSend("FETCH", "/items/1", srAnon(), ""),
			want: agtp.AgentUnauthenticated, expl: "this request needs an Agent-ID header"},
		{stage: "identity", name: "anonymous, bad Request-ID", send: srSend("DISCOVER", "/", srAnon("Request-ID", "req-1"), ""),
			want: agtp.InvalidRequestID, expl: "a lowercase UUIDv7 or a ULID"},
		{stage: "identity", name: "anonymous, bad Session-ID", send: srSend("DISCOVER", "/", srAnon("Session-ID", "short"), ""),
			want: agtp.InvalidSessionID, expl: "Session-ID must be"},
		{stage: "identity", name: "anonymous, bad Owner-ID", send: srSend("DISCOVER", "/", srAnon("Owner-ID", "no spaces allowed"), ""),
			want: agtp.InvalidOwnerID, expl: "Owner-ID is not 1 to 256 characters"},
		{stage: "identity", name: "anonymous discovery off", engine: "no-anon", send: srSend("DISCOVER", "/", srAnon(), ""),
			want: agtp.AnonymousDiscoveryDisabled, expl: "does not answer DISCOVER without an Agent-ID", check: srField("type", `"anonymous-discovery-disabled"`)},
		{stage: "identity", name: "anonymous DISCOVER /contracts", send: srSend("DISCOVER", "/contracts", srAnon(), ""),
			want: agtp.AgentUnauthenticated, expl: "DISCOVER /contracts lists the caller's contracts"},
		{stage: "identity", name: "anonymous DISCOVER of an endpoint", send: srSend("DISCOVER", "/items/1", srAnon(), ""),
			want: agtp.AgentUnauthenticated, expl: "without one this server answers only DISCOVER /"},
		{stage: "identity", name: "anonymous DISCOVER /genesis", send: srSend("DISCOVER", "/genesis", srAnon(), ""),
			want: agtp.NotFound, expl: "no Agent Genesis"},
		{stage: "identity", name: "anonymous body target conflict", send: srCall("DISCOVER", "/methods", srAnon(), `{"target":"/apis"}`),
			want: agtp.TargetConflict, expl: "disagrees with the path /methods"},
		{stage: "identity", name: "malformed Agent-ID", send: srSend("FETCH", "/items/1", srAs(strings.ToUpper(testAgent), testScope), ""),
			want: agtp.InvalidCanonicalID, expl: "64 lowercase hexadecimal characters"},
		{stage: "identity", name: "transport verified another agent", send: srRaw("FETCH", "/items/1", srMe(), "", func(in *agtp.Request) {
			in.Verified = &agtp.Identity{AgentID: srOperator, VerificationPath: IdentityMTLS}
		}), want: agtp.AgentUnauthenticated, expl: "differs from the identity the transport verified"},
		{stage: "identity", name: "bad Request-ID", send: srSend("FETCH", "/items/1", srMe("Request-ID", "req-1"), ""),
			want: agtp.InvalidRequestID, expl: "a lowercase UUIDv7 or a ULID"},
		{stage: "identity", name: "bad Session-ID", send: srSend("FETCH", "/items/1", srMe("Session-ID", "short"), ""),
			want: agtp.InvalidSessionID, expl: "Session-ID must be"},
		{stage: "identity", name: "bad Owner-ID", send: srSend("FETCH", "/items/1", srMe("Owner-ID", "bench ops"), ""),
			want: agtp.InvalidOwnerID, expl: "Owner-ID is not 1 to 256 characters"},
		{stage: "identity", name: "strict: no Owner-ID", engine: "strict", send: srSend("FETCH", "/items/1", srMe(), ""),
			want: agtp.OwnerIDRequired, expl: "requires Owner-ID with Agent-ID"},
		{stage: "identity", name: "strict: no Request-ID", engine: "strict", send: srSend("FETCH", "/items/1", srMe("Owner-ID", "bench-ops"), ""),
			want: agtp.RequestIDRequired, expl: "requires Request-ID with Agent-ID"},
		{stage: "identity", name: "unknown agent", send: srSend("FETCH", "/items/1", srAs(strings.Repeat("ab", 32), testScope), ""),
			want: agtp.AgentUnauthenticated, expl: "does not resolve to an agent registered"},
		{stage: "identity", name: "owner mismatch", send: srSend("FETCH", "/items/1", srMe("Owner-ID", "someone-else"), ""),
			want: agtp.OwnerMismatch, expl: "does not match the owner registered"},
		{stage: "identity", name: "suspended agent", send: srSend("FETCH", "/items/1", srAs(srSuspended, testScope), ""),
			want: agtp.AgentSuspended, expl: "The agent is suspended"},
		{stage: "identity", name: "retired agent", send: srSend("FETCH", "/items/1", srAs(srRetired, testScope), ""),
			want: agtp.AgentRetired, expl: "The agent is retired"},
		{stage: "identity", name: "malformed Authority-Scope", send: srSend("FETCH", "/items/1", srAs(testAgent, "bench:read,,rcns:negotiate"), ""),
			want: agtp.InvalidAuthorityScope, expl: "element 2 is empty"},
		{stage: "identity", name: "scope claimed, not granted", send: srSend("FETCH", "/items/1", srAs(testAgent, "bench:read, inspect:all"), ""),
			want: agtp.ScopeClaimInvalid, expl: "claims inspect:all", check: srField("missing_scopes", `["inspect:all"]`)},
		{stage: "identity", name: "mtls: no certificate", engine: "mtls", send: srSend("FETCH", "/items/1", srAs(srCertA, "bench:read"), ""),
			want: agtp.CertificateRequired, expl: "must present a client certificate"},
		{stage: "identity", name: "mtls: certificate of no agent", engine: "mtls", send: srRaw("FETCH", "/items/1", srAs(srCertA, "bench:read"), "", func(in *agtp.Request) {
			in.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{RawSubjectPublicKeyInfo: srSPKIStray}}}
		}), want: agtp.CertificateUnknown, expl: "not bound to any agent"},
		{stage: "identity", name: "mtls: another agent's certificate", engine: "mtls", send: srRaw("FETCH", "/items/1", srAs(srCertA, "bench:read"), "", func(in *agtp.Request) {
			in.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{RawSubjectPublicKeyInfo: srSPKIB}}}
		}), want: agtp.CertificateMismatch, expl: "bound to another Agent-ID"},
		{stage: "identity", name: "signature: none", engine: "signature", send: srSend("FETCH", "/items/1", srAs(srSigner, "bench:read"), ""),
			want: agtp.SignatureMissing, expl: "no Signature-Input or Signature field"},
		{stage: "identity", name: "signature: unparsable", engine: "signature", send: srSend("FETCH", "/items/1", srAs(srSigner, "bench:read", "Signature-Input", "sig1=(", "Signature", "sig1=:AA==:"), ""),
			want: agtp.SignatureInvalid, expl: "Signature-Input is not a structured dictionary"},
		{stage: "identity", name: "signature: unregistered key", engine: "signature", send: srSignedSend(srSigner, &strayKey, "FETCH", "/items/1", "", nil),
			want: agtp.KeyUnknown, expl: "is not registered"},
		{stage: "identity", name: "signature: another agent's key", engine: "signature", send: srSignedSend(srSigner, &signer2Key, "FETCH", "/items/1", "", nil),
			want: agtp.KeyUnknown, expl: "is not registered to this agent"},
		{stage: "identity", name: "signature: expired", engine: "signature", send: srSignedSend(srSigner, &signerKey, "FETCH", "/items/1", "", func(s *srSigning) {
			now := time.Now()
			s.opt.Created, s.opt.Expires = now.Add(-50*time.Second), now.Add(-45*time.Second)
		}), want: agtp.SignatureExpired, expl: "the signature expired"},
		{stage: "identity", name: "signature: Agent-ID not covered", engine: "signature", send: srSignedSend(srSigner, &signerKey, "FETCH", "/items/1", "", func(s *srSigning) {
			s.opt.Components = []string{"@method", "@authority", "@path"}
		}), want: agtp.ComponentNotCovered, expl: `component "agent-id" is not covered`},
		{stage: "identity", name: "signature: made for another host", engine: "signature", send: srSignedSend(srSigner, &signerKey, "FETCH", "/items/1", "", func(s *srSigning) {
			s.host = "other.example"
		}), want: agtp.AuthorityMismatch, expl: `"other.example" is not one this server answers to`},
		{stage: "identity", name: "signature: digest of another body", engine: "signature", send: srSignedSend(srSigner, &signerKey, "FETCH", "/items/1", srItem("1"), func(s *srSigning) {
			s.digestOf = []byte("{}")
		}), want: agtp.DigestMismatch, expl: "identity signature:"},
		{stage: "identity", name: "signature: another target", engine: "signature", send: srSignedSend(srSigner, &signerKey, "FETCH", "/items/1", "", func(s *srSigning) {
			s.sendTarget = "/items/2"
		}), want: agtp.SignatureInvalid, expl: "the signature does not verify"},
		{stage: "identity", name: "signature: replayed", engine: "signature", send: func(t *testing.T, te *testEngine) *srAnswer {
			in := srSigned(t, srSigner, signerKey, "FETCH", "/items/1", "", nil)
			srWant(t, "first use of the signature", srServe(t, te, in), 200)
			return srServe(t, te, in)
		}, want: agtp.SignatureReplayed, expl: "the signature was already used"},

		// idempotency-key: the key and its alias, read once.
		{stage: "idempotency-key", name: "unterminated string", send: srSend("FETCH", "/items/1", srMe("Idempotency-Key", `"unterminated`), ""),
			want: agtp.InvalidIdempotencyKey, expl: "Idempotency-Key must be 1-255 visible ASCII characters"},
		{stage: "idempotency-key", name: "empty", send: srSend("FETCH", "/items/1", srMe("Idempotency-Key", ""), ""),
			want: agtp.InvalidIdempotencyKey, expl: "empty"},
		{stage: "idempotency-key", name: "256 characters", send: srSend("FETCH", "/items/1", srMe("Idempotency-Key", long), ""),
			want: agtp.InvalidIdempotencyKey, expl: "Idempotency-Key must be"},
		{stage: "idempotency-key", name: "alias malformed", send: srSend("FETCH", "/items/1", srMe(IdempotencyKeyAlias, `"open`), ""),
			want: agtp.InvalidIdempotencyKey, expl: "RCNS-Idempotency-Key must be"},
		{stage: "idempotency-key", name: "alias malformed beside a key", send: srSend("FETCH", "/items/1", srMe("Idempotency-Key", "k-1", IdempotencyKeyAlias, `"open`), ""),
			want: agtp.InvalidIdempotencyKey, expl: "RCNS-Idempotency-Key must be"},
		{stage: "idempotency-key", name: "key and alias differ", send: srSend("FETCH", "/items/1", srMe("Idempotency-Key", "k-1", IdempotencyKeyAlias, "k-2"), ""),
			want: agtp.AmbiguousIdempotencyKey, expl: "carry different keys"},
		// X-Idempotency-Key is never a key, never ignored (cases/04:
		// it was dropped, and a retry wrote twice).
		{stage: "idempotency-key", name: "X-Idempotency-Key alone", send: srSend("FETCH", "/items/1", srMe(LegacyIdempotencyKey, "k-1"), ""),
			want: agtp.InvalidIdempotencyKey, expl: "send the key as Idempotency-Key"},
		{stage: "idempotency-key", name: "X-Idempotency-Key empty", send: srSend("FETCH", "/items/1", srMe(LegacyIdempotencyKey, ""), ""),
			want: agtp.InvalidIdempotencyKey, expl: "send the key as Idempotency-Key"},
		{stage: "idempotency-key", name: "X-Idempotency-Key beside another key", send: srSend("FETCH", "/items/1", srMe("Idempotency-Key", "k-1", LegacyIdempotencyKey, "k-2"), ""),
			want: agtp.AmbiguousIdempotencyKey, expl: "X-Idempotency-Key carry different keys"},
		{stage: "idempotency-key", name: "X-Idempotency-Key malformed beside a key", send: srSend("FETCH", "/items/1", srMe(IdempotencyKeyAlias, "k-1", LegacyIdempotencyKey, `"open`), ""),
			want: agtp.AmbiguousIdempotencyKey, expl: "RCNS-Idempotency-Key and X-Idempotency-Key carry different keys"},

		// built-in: DISCOVER, and INSPECT, REVOKE, SUSPEND and PROPOSE
		// on "/".
		{stage: "built-in", name: "DISCOVER parameters not an object", send: srCall("DISCOVER", "/", srMe(), `{"parameters":5}`),
			want: agtp.InvalidEnvelope, expl: `"parameters" must be a JSON object`},
		{stage: "built-in", name: "DISCOVER parameter given twice", send: srCall("DISCOVER", "/", srMe(), `{"target":"/apis","parameters":{"target":"/tools"}}`),
			want: agtp.ParameterConflict, expl: `parameter "target" is given twice`},
		// Compared as JSON values, not as printed (helper-149: "201" and
		// 201 were the same, and the top-level value won).
		{stage: "built-in", name: "REVOKE status given twice, a string and a number", send: srCall("REVOKE", "/", srOp(), `{"status":"201","parameters":{"target":"idempotency-key","status":201}}`),
			want: agtp.ParameterConflict, expl: `parameter "status" is given twice`},
		{stage: "built-in", name: "DISCOVER target a number", send: srCall("DISCOVER", "/", srMe(), `{"target":5}`),
			want: agtp.InvalidParameter, expl: "parameter target must be a string, not a number"},
		{stage: "built-in", name: "DISCOVER target too long", send: srCall("DISCOVER", "/", srMe(), srJSON(t, map[string]any{"target": "/" + strings.Repeat("a", MaxTargetBytes)})),
			want: agtp.InvalidParameter, expl: "the limit is 8000", check: srField("limit_bytes", "8000")},
		{stage: "built-in", name: "DISCOVER target conflict", send: srCall("DISCOVER", "/methods", srMe(), `{"target":"/apis"}`),
			want: agtp.TargetConflict, expl: "disagrees with the path /methods"},
		{stage: "built-in", name: "DISCOVER target not a path", send: srCall("DISCOVER", "/", srMe(), `{"target":"/%zz"}`),
			want: agtp.InvalidParameter, expl: "is not a path"},
		{stage: "built-in", name: "DISCOVER target grammar", send: srCall("DISCOVER", "/", srMe(), `{"target":"/items/"}`),
			want: agtp.PathGrammarViolation, expl: `must not end with "/"`},
		{stage: "built-in", name: "DISCOVER target redirected to a disallowed method", engine: "no-fetch", send: srCall("DISCOVER", "/", srMe(), `{"target":"/old-list"}`),
			want: agtp.MethodNotAllowed, expl: "method FETCH is not allowed on this server", check: srField("path", `"/items/1"`)},
		{stage: "built-in", name: "DISCOVER limit 0", send: srSend("DISCOVER", "/methods?limit=0", srMe(), ""),
			want: agtp.InvalidLimit, expl: "limit must be a positive integer"},
		{stage: "built-in", name: "DISCOVER limit fractional", send: srCall("DISCOVER", "/methods", srMe(), `{"parameters":{"limit":1.5}}`),
			want: agtp.InvalidLimit, expl: "limit must be a positive integer"},
		{stage: "built-in", name: "DISCOVER cursor not issued", send: srSend("DISCOVER", "/methods?cursor=zzz", srMe(), ""),
			want: agtp.InvalidCursor, expl: "not one this server issued"},
		{stage: "built-in", name: "DISCOVER cursor a number", send: srCall("DISCOVER", "/contracts", srMe(), `{"parameters":{"cursor":5}}`),
			want: agtp.InvalidCursor, expl: "cursor must be a string, not a number"},
		{stage: "built-in", name: "DISCOVER limit in query and body", send: srCall("DISCOVER", "/methods?limit=5", srMe(), `{"parameters":{"limit":6}}`),
			want: agtp.ParameterConflict, expl: `parameter "limit" is given in the query and in the body`},
		{stage: "built-in", name: "DISCOVER /genesis", send: srSend("DISCOVER", "/genesis", srMe(), ""),
			want: agtp.NotFound, expl: "no Agent Genesis"},

		{stage: "built-in", name: "INSPECT without target", send: srSend("INSPECT", "/", srMe(), ""),
			want: agtp.ParameterRequired, expl: "INSPECT needs a target"},
		{stage: "built-in", name: "INSPECT unknown target", send: srCall("INSPECT", "/", srMe(), `{"parameters":{"target":"nothing"}}`),
			want: agtp.UnknownTarget, expl: `INSPECT target "nothing" is not known`},
		{stage: "built-in", name: "INSPECT target a number", send: srCall("INSPECT", "/", srMe(), `{"parameters":{"target":5}}`),
			want: agtp.InvalidParameter, expl: "parameter target must be a string"},
		{stage: "built-in", name: "INSPECT target in query and body", send: srCall("INSPECT", "/?target=audit", srMe(), `{"parameters":{"target":"contract"}}`),
			want: agtp.ParameterConflict, expl: "given in the query and in the body"},
		{stage: "built-in", name: "INSPECT contract without id", send: srSend("INSPECT", "/?target=contract", srMe(), ""),
			want: agtp.ParameterRequired, expl: "INSPECT target=contract needs synthesis_id"},
		{stage: "built-in", name: "INSPECT contract id a number", send: srCall("INSPECT", "/", srMe(), `{"parameters":{"target":"contract","synthesis_id":5}}`),
			want: agtp.InvalidSynthesisID, expl: "synthesis_id must be a string, not a number"},
		{stage: "built-in", name: "INSPECT contract id malformed", send: srSend("INSPECT", "/?target=contract&synthesis_id=bad!", srMe(), ""),
			want: agtp.InvalidSynthesisID, expl: "a synthesis id is 1-128 characters"},
		{stage: "built-in", name: "INSPECT contract unknown", send: srSend("INSPECT", "/?target=contract&synthesis_id=syn-unknown", srMe(), ""),
			want: agtp.ContractNotFound, expl: "no contract with this synthesis id is known"},
		{stage: "built-in", name: "INSPECT another agent's contract", send: func(t *testing.T, te *testEngine) *srAnswer {
			id := srMint(t, te, srOperator, srOpScope, "/item/op-inspect")
			return srSend("INSPECT", "/?target=contract&synthesis_id="+id, srMe(), "")(t, te)
		}, want: agtp.Forbidden, expl: "only the originating agent or a caller carrying inspect:all may inspect"},
		{stage: "built-in", name: "INSPECT attempt without id", send: srSend("INSPECT", "/?target=rcns-attempt", srMe(), ""),
			want: agtp.ParameterRequired, expl: "needs attempt_id"},
		{stage: "built-in", name: "INSPECT attempt id a number", send: srCall("INSPECT", "/", srMe(), `{"parameters":{"target":"rcns-attempt","attempt_id":5}}`),
			want: agtp.InvalidParameter, expl: "parameter attempt_id must be a string"},
		{stage: "built-in", name: "INSPECT attempt unknown", send: srSend("INSPECT", "/?target=rcns-attempt&attempt_id=att-unknown", srMe(), ""),
			want: agtp.AttemptNotFound, expl: "no attempt record with this id"},
		{stage: "built-in", name: "INSPECT another agent's attempt", send: func(t *testing.T, te *testEngine) *srAnswer {
			a := srSend("LOOKUP", "/nothing/op-attempt", srOp("Allow-RCNS", "true"), "")(t, te)
			srWant(t, "operator's refused attempt", a, 464)
			return srSend("INSPECT", "/?target=rcns-attempt&attempt_id="+a.header("RCNS-Attempt-Id"), srMe(), "")(t, te)
		}, want: agtp.Forbidden, expl: "only the agent that made the attempt"},
		{stage: "built-in", name: "INSPECT lifecycle agent_id malformed", send: srSend("INSPECT", "/?target=lifecycle&agent_id=me", srMe(), ""),
			want: agtp.InvalidParameter, expl: "agent_id must be a canonical Agent-ID"},
		{stage: "built-in", name: "INSPECT lifecycle limit 0", send: srSend("INSPECT", "/?target=lifecycle&limit=0", srMe(), ""),
			want: agtp.InvalidLimit, expl: "limit must be a positive integer"},
		{stage: "built-in", name: "INSPECT lifecycle cursor", send: srSend("INSPECT", "/?target=lifecycle&cursor=abc", srMe(), ""),
			want: agtp.InvalidCursor, expl: "has no pages"},
		{stage: "built-in", name: "INSPECT another agent's lifecycle", send: srSend("INSPECT", "/?target=lifecycle&agent_id="+srOperator, srMe(), ""),
			want: agtp.Forbidden, expl: "only the agent itself or a caller carrying inspect:all"},
		{stage: "built-in", name: "INSPECT audit without id", send: srSend("INSPECT", "/?target=audit", srMe(), ""),
			want: agtp.ParameterRequired, expl: "INSPECT target=audit needs audit_id"},
		{stage: "built-in", name: "INSPECT audit id malformed", send: srCall("INSPECT", "/", srMe(), `{"parameters":{"target":"audit","audit_id":"xyz"}}`),
			want: agtp.InvalidParameter, expl: "audit_id must be an Audit-ID"},
		{stage: "built-in", name: "INSPECT audit unknown", send: srCall("INSPECT", "/", srMe(), srParams(map[string]any{"target": "audit", "audit_id": strings.Repeat("0", 64)})),
			want: agtp.RecordNotFound, expl: "no retained Attribution-Record has this Audit-ID (records are kept 24h, at most the newest 100000)"},
		{stage: "built-in", name: "INSPECT another agent's record", send: func(t *testing.T, te *testEngine) *srAnswer {
			a := srSend("FETCH", "/items/1", srOp(), "")(t, te)
			srWant(t, "operator's FETCH", a, 200)
			return srCall("INSPECT", "/", srMe(), srParams(map[string]any{"target": "audit", "audit_id": a.header("Audit-ID")}))(t, te)
		}, want: agtp.Forbidden, expl: "the read ACL of Attribution-Records is agent_only", check: srField("acl", `"agent_only"`)},
		{stage: "built-in", name: "INSPECT another agent's chain head", send: srSend("INSPECT", "/?target=chain_head&agent_id="+srOperator, srMe(), ""),
			want: agtp.Forbidden, expl: "the read ACL of record chains is agent_only"},
		{stage: "built-in", name: "INSPECT chain head of no records", send: srSend("INSPECT", "/?target=chain_head&agent_id="+strings.Repeat("cd", 32), srOp(), ""),
			want: agtp.RecordNotFound, expl: "no Attribution-Record of this agent is retained (records are kept 24h, at most the newest 100000)"},
		{stage: "built-in", name: "INSPECT key without key", send: srSend("INSPECT", "/?target=idempotency-key", srMe(), ""),
			want: agtp.ParameterRequired, expl: "INSPECT target=idempotency-key needs key", check: srExplNot("agent_id")},
		{stage: "built-in", name: "INSPECT key malformed", send: srCall("INSPECT", "/", srMe(), `{"parameters":{"target":"idempotency-key","key":"\"open"}}`),
			want: agtp.InvalidIdempotencyKey, expl: "key is not an Idempotency-Key"},
		{stage: "built-in", name: "INSPECT another agent's key", send: srCall("INSPECT", "/", srMe(), srParams(map[string]any{"target": "idempotency-key", "key": "k-1", "agent_id": srOperator})),
			want: agtp.Forbidden, expl: "another agent's key needs the inspect:all scope"},
		{stage: "built-in", name: "INSPECT key never used", send: srCall("INSPECT", "/", srMe(), `{"parameters":{"target":"idempotency-key","key":"never-used"}}`),
			want: agtp.RecordNotFound, expl: "no record of this Idempotency-Key"},

		{stage: "built-in", name: "REVOKE without target", send: srSend("REVOKE", "/", srMe(), ""),
			want: agtp.ParameterRequired, expl: "REVOKE needs a target"},
		{stage: "built-in", name: "REVOKE unknown target", send: srSend("REVOKE", "/?target=everything", srMe(), ""),
			want: agtp.UnknownTarget, expl: `REVOKE target "everything" is not known`},
		{stage: "built-in", name: "REVOKE reason a number", send: srCall("REVOKE", "/", srMe(), `{"parameters":{"target":"contract","reason":5}}`),
			want: agtp.InvalidParameter, expl: "parameter reason must be a string"},
		{stage: "built-in", name: "REVOKE actor a boolean", send: srCall("REVOKE", "/", srMe(), `{"parameters":{"target":"contract","actor":true}}`),
			want: agtp.InvalidParameter, expl: "parameter actor must be a string"},
		{stage: "built-in", name: "REVOKE contract without id", send: srSend("REVOKE", "/?target=contract", srMe(), ""),
			want: agtp.ParameterRequired, expl: "REVOKE target=contract needs synthesis_id"},
		{stage: "built-in", name: "REVOKE contract unknown", send: srSend("REVOKE", "/?target=contract&synthesis_id=syn-unknown", srMe(), ""),
			want: agtp.ContractNotFound, expl: "no contract with this synthesis id is known"},
		{stage: "built-in", name: "REVOKE another agent's contract", send: func(t *testing.T, te *testEngine) *srAnswer {
			id := srMint(t, te, srOperator, srOpScope, "/item/op-revoke")
			return srSend("REVOKE", "/?target=contract&synthesis_id="+id, srMe(), "")(t, te)
		}, want: agtp.Forbidden, expl: "may revoke this contract"},
		{stage: "built-in", name: "REVOKE stale contracts without inspect:all", send: srSend("REVOKE", "/?target=stale-contracts", srMe(), ""),
			want: agtp.Forbidden, expl: "REVOKE target=stale-contracts needs the inspect:all scope"},
		{stage: "built-in", name: "REVOKE stale contracts, unknown mode", send: srSend("REVOKE", "/?target=stale-contracts&mode=sometimes", srOp(), ""),
			want: agtp.InvalidMode, expl: `mode "sometimes" is not grandfather or invalidate`},
		{stage: "built-in", name: "REVOKE stale contracts, mode a number", send: srCall("REVOKE", "/", srOp(), `{"parameters":{"target":"stale-contracts","mode":1}}`),
			want: agtp.InvalidMode, expl: "parameter mode must be a string"},
		{stage: "built-in", name: "REVOKE key without inspect:all", send: srSend("REVOKE", "/?target=idempotency-key", srMe(), ""),
			want: agtp.Forbidden, expl: "REVOKE target=idempotency-key needs the inspect:all scope"},
		{stage: "built-in", name: "REVOKE key without key", send: srSend("REVOKE", "/?target=idempotency-key", srOp(), ""),
			want: agtp.ParameterRequired, expl: "needs agent_id and key"},
		{stage: "built-in", name: "REVOKE key without agent_id", send: srSend("REVOKE", "/?target=idempotency-key&key=k", srOp(), ""),
			want: agtp.ParameterRequired, expl: "REVOKE target=idempotency-key needs agent_id", check: srExplNot("and key")},
		{stage: "built-in", name: "REVOKE key without key, agent_id given", send: srSend("REVOKE", "/?target=idempotency-key&agent_id="+testAgent, srOp(), ""),
			want: agtp.ParameterRequired, expl: "REVOKE target=idempotency-key needs key"},
		{stage: "built-in", name: "REVOKE key, agent_id malformed", send: srSend("REVOKE", "/?target=idempotency-key&agent_id=me&key=k", srOp(), ""),
			want: agtp.InvalidParameter, expl: "agent_id must be a canonical Agent-ID"},
		{stage: "built-in", name: "REVOKE key malformed", send: srCall("REVOKE", "/", srOp(), srParams(map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": long})),
			want: agtp.InvalidIdempotencyKey, expl: "key is not an Idempotency-Key"},
		{stage: "built-in", name: "REVOKE key without action", send: srCall("REVOKE", "/", srOp(), srKeyOp("k", "")),
			want: agtp.ParameterRequired, expl: "needs action: release"},
		{stage: "built-in", name: "REVOKE key, unknown action", send: srCall("REVOKE", "/", srOp(), srKeyOp("k", "forget")),
			want: agtp.InvalidParameter, expl: "action must be release or resolve"},
		{stage: "built-in", name: "REVOKE key, status without a body", send: srCall("REVOKE", "/", srOp(), srParams(map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": "k", "action": "resolve", "status": 204})),
			want: agtp.InvalidParameter, expl: "status must be a 2xx status that carries a body"},
		{stage: "built-in", name: "REVOKE key, release with a result", send: srCall("REVOKE", "/", srOp(), srParams(map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": "k", "action": "release", "result": 1})),
			want: agtp.InvalidParameter, expl: "status and result go with action resolve"},
		{stage: "built-in", name: "REVOKE key never used", send: srCall("REVOKE", "/", srOp(), srKeyOp("never-used", "release")),
			want: agtp.RecordNotFound, expl: "no record of this Idempotency-Key"},
		{stage: "built-in", name: "REVOKE key holding an answer", send: srAfter(func(t *testing.T, te *testEngine) {
			srWant(t, "keyed FETCH", srSend("FETCH", "/items/1", srMe("Idempotency-Key", "settle-answered"), "")(t, te), 200)
		}, srCall("REVOKE", "/", srOp(), srKeyOp("settle-answered", "release"))),
			want: agtp.KeyNotSettleable, expl: "holds a stored answer", check: srField("state", `"answered"`)},
		{stage: "built-in", name: "REVOKE key still running", send: srAfter(func(t *testing.T, te *testEngine) {
			srHeld(t, te, "settle-live", "FETCH", "/items/1", "", time.Minute)
		}, srCall("REVOKE", "/", srOp(), srKeyOp("settle-live", "release"))),
			want: agtp.KeyNotSettleable, expl: "still running under its lease", check: srField("node_id", `"other-node"`)},

		{stage: "built-in", name: "SUSPEND without parameters", send: srSend("SUSPEND", "/", srMe(), ""),
			want: agtp.ParameterRequired, expl: "SUSPEND needs synthesis_id or session_id"},
		// A misspelt target is named (helper-151).
		{stage: "built-in", name: "REVOKE with a misspelt target", send: srCall("REVOKE", "/", srMe(), `{"parameters":{"targt":"contract"}}`),
			want: agtp.InvalidParameter, expl: `REVOKE needs a target (contract, stale-contracts, idempotency-key); REVOKE takes no parameter "targt"`},
		// The request's own session is not the one to end (helper-150).
		{stage: "built-in", name: "SUSPEND with only an envelope session_id", send: srCall("SUSPEND", "/", srMe(), `{"session_id":"abcdefghijklmnopqrstuvwxyz"}`),
			want: agtp.ParameterRequired, expl: "name the request's own session, not the one to end"},
		{stage: "built-in", name: "SUSPEND reason a number", send: srCall("SUSPEND", "/", srMe(), `{"parameters":{"reason":5}}`),
			want: agtp.InvalidParameter, expl: "parameter reason must be a string"},
		{stage: "built-in", name: "SUSPEND session_id malformed", send: srSend("SUSPEND", "/?session_id=short", srMe(), ""),
			want: agtp.InvalidSessionID, expl: "SUSPEND: parameter session_id must be a Session-ID"},
		{stage: "built-in", name: "SUSPEND both", send: srSend("SUSPEND", "/?synthesis_id=syn-a&session_id="+strings.Repeat("s", 22), srMe(), ""),
			want: agtp.InvalidParameter, expl: "not both"},
		{stage: "built-in", name: "SUSPEND id malformed", send: srSend("SUSPEND", "/?synthesis_id=bad!", srMe(), ""),
			want: agtp.InvalidSynthesisID, expl: "a synthesis id is 1-128 characters"},
		{stage: "built-in", name: "SUSPEND unknown contract", send: srSend("SUSPEND", "/?synthesis_id=syn-unknown", srMe(), ""),
			want: agtp.ContractNotFound, expl: "no contract with this synthesis id is known"},
		{stage: "built-in", name: "SUSPEND another agent's contract", send: func(t *testing.T, te *testEngine) *srAnswer {
			id := srMint(t, te, testAgent, testScope, "/item/me-suspend")
			return srSend("SUSPEND", "/?synthesis_id="+id, srOp(), "")(t, te)
		}, want: agtp.Forbidden, expl: "only the originating agent may release this contract"},

		{stage: "built-in", name: "PROPOSE, synthesis disabled", engine: "synth-off", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.ProposalSynthesisOff, expl: "does not synthesize endpoints", check: srHasHeader("Negotiation-ID", "")},
		{stage: "built-in", name: "PROPOSE, rejected three times", send: func(t *testing.T, te *testEngine) *srAnswer {
			neg := ""
			for i := range 3 {
				a := srCall("PROPOSE", "/", srMe("Negotiation-ID", neg), srProposal("LOOKUP", "/nothing/x", nil, nil))(t, te)
				srWant(t, "rejected proposal "+strconv.Itoa(i), a, 463)
				neg = a.header("Negotiation-ID")
			}
			return srCall("PROPOSE", "/", srMe("Negotiation-ID", neg), srProposal("LOOKUP", "/item/p", nil, nil))(t, te)
		}, want: agtp.ProposalPolicyRefused, expl: "rejected three times; ESCALATE"},
		{stage: "built-in", name: "PROPOSE both forms", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", nil, map[string]any{"name": "x"})),
			want: agtp.AmbiguousBody, expl: "either endpoint (wrapped form) or name (legacy form)"},
		{stage: "built-in", name: "PROPOSE nothing", send: srSend("PROPOSE", "/", srMe(), ""),
			want: agtp.InvalidProposal, expl: "a proposal needs endpoint"},
		{stage: "built-in", name: "PROPOSE endpoint not an object", send: srCall("PROPOSE", "/", srMe(), `{"parameters":{"endpoint":"LOOKUP /item/p"}}`),
			want: agtp.InvalidProposal, expl: "endpoint must be a JSON object"},
		{stage: "built-in", name: "PROPOSE without method", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", map[string]any{"method": nil, "path": 5}, nil)),
			want: agtp.InvalidProposal, expl: "method is missing; path must be a string, not a number"},
		{stage: "built-in", name: "PROPOSE path too long", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/"+strings.Repeat("a", MaxTargetBytes), nil, nil)),
			want: agtp.InvalidProposal, expl: "at most 8000 are accepted"},
		{stage: "built-in", name: "PROPOSE duration a number", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", nil, map[string]any{"requested_duration": 60})),
			want: agtp.InvalidDuration, expl: "requested_duration must be a string", check: srField("proposed_path", `"/item/p"`)},
		{stage: "built-in", name: "PROPOSE duration malformed", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", nil, map[string]any{"requested_duration": "soon"})),
			want: agtp.InvalidDuration, expl: "requested_duration must be a Go duration"},
		{stage: "built-in", name: "PROPOSE duration under a second", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", nil, map[string]any{"requested_duration": "500ms"})),
			want: agtp.InvalidDuration, expl: "must be at least 1s"},
		{stage: "built-in", name: "PROPOSE persistent not a boolean", send: srSend("PROPOSE", "/?persistent=true", srMe("Content-Type", "application/json"), srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.InvalidParameter, expl: "persistent must be true or false, not a string"},
		{stage: "built-in", name: "PROPOSE session_id malformed", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", nil, map[string]any{"session_id": "short"})),
			want: agtp.InvalidSessionID, expl: "PROPOSE: parameter session_id must be a Session-ID"},
		{stage: "built-in", name: "PROPOSE key reused", send: srAfter(func(t *testing.T, te *testEngine) {
			srWant(t, "keyed PROPOSE", srCall("PROPOSE", "/", srMe("Idempotency-Key", "prop-key"), srProposal("LOOKUP", "/item/pk-1", nil, nil))(t, te), 263)
		}, srCall("PROPOSE", "/", srMe("Idempotency-Key", "prop-key"), srProposal("LOOKUP", "/item/pk-2", nil, nil))),
			want: agtp.IdempotencyKeyReused, expl: "was used for a different request"},
		{stage: "built-in", name: "PROPOSE key in flight", send: srInFlight("prop-in-flight", "PROPOSE", "/", srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.IdempotencyKeyInFlight, expl: "is still running", check: srHasHeader("Negotiation-ID", "")},
		{stage: "built-in", name: "PROPOSE key's lease ended unanswered", send: srOrphaned("prop-orphaned", "PROPOSE", "/", srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.OutcomeUnknown, expl: "that ran PROPOSE / with this Idempotency-Key"},
		{stage: "built-in", name: "PROPOSE agent's keys at their bound", engine: "one-key/built-in", send: srKeysFull(srCall("PROPOSE", "/", srMe("Idempotency-Key", "second-key"), srProposal("LOOKUP", "/item/p", nil, nil))),
			want: agtp.IdempotencyStoreFull, expl: "its maximum of 1 idempotency record "},
		{stage: "built-in", name: "PROPOSE budget spent", engine: "gate-1", send: srAfter(func(t *testing.T, te *testEngine) {
			srWant(t, "PROPOSE spending the budget", srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/rl-1", nil, nil))(t, te), 263)
		}, srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/rl-2", nil, nil))),
			want: agtp.RateLimited, expl: "the rcns budget of this agent is spent", check: srHasHeader("Retry-After", "")},
		{stage: "built-in", name: "PROPOSE method token", send: srCall("PROPOSE", "/", srMe(), srProposal("lookup", "/item/p", nil, nil)),
			want: agtp.InvalidMethodToken, expl: `proposed method "lookup" is not a valid AGTP method token`},
		{stage: "built-in", name: "PROPOSE method not in the catalog", send: srCall("PROPOSE", "/", srMe(), srProposal("FROBNICATE", "/item/p", nil, nil)),
			want: agtp.MethodNotInCatalog, expl: "proposed method FROBNICATE is not in catalog"},
		{stage: "built-in", name: "PROPOSE path grammar", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/", nil, nil)),
			want: agtp.PathGrammarViolation, expl: `proposed path "/item/"`},
		{stage: "built-in", name: "PROPOSE path template", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/{item_id}", nil, nil)),
			want: agtp.PathGrammarViolation, expl: "does not allow; a proposal names the concrete pair it will call"},
		{stage: "built-in", name: "PROPOSE without semantic", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", map[string]any{"semantic": nil}, nil)),
			want: agtp.InvalidSemantic, expl: "has no semantic block"},
		{stage: "built-in", name: "PROPOSE semantic invalid", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", map[string]any{"semantic": map[string]any{"intent": "x"}}, nil)),
			want: agtp.InvalidSemantic, expl: "the semantic block is invalid: "},
		{stage: "built-in", name: "PROPOSE schema not an object", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", map[string]any{"input_schema": "object"}, nil)),
			want: agtp.InvalidSchema, expl: "input_schema must be a JSON Schema object"},
		{stage: "built-in", name: "PROPOSE schema invalid", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/p", map[string]any{"output_schema": map[string]any{"type": 5}}, nil)),
			want: agtp.InvalidSchema, expl: "output_schema is not a valid JSON Schema"},
		{stage: "built-in", name: "PROPOSE without Authority-Scope", send: srCall("PROPOSE", "/", srAs(testAgent, ""), srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.ScopeRequired, expl: "scope_required_for_invocation"},
		{stage: "built-in", name: "PROPOSE without rcns:negotiate claimed", send: srCall("PROPOSE", "/", srAs(testAgent, "bench:read"), srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.ScopeRequired, expl: "does not include rcns:negotiate", check: srField("missing_scopes", `["rcns:negotiate"]`)},
		{stage: "built-in", name: "PROPOSE recipe scope never granted", send: srCall("PROPOSE", "/", srAs(srNarrow, "rcns:negotiate"), srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.ScopeExceeded, expl: "has not been granted bench:read", check: srField("missing_scopes", `["bench:read"]`)},
		{stage: "built-in", name: "PROPOSE no recipe", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/nothing/p", nil, nil)),
			want: agtp.ProposalNotComposable, expl: "no recipe can build LOOKUP /nothing/p"},
		{stage: "built-in", name: "PROPOSE recipe too deep", engine: "depth-1", send: srCall("PROPOSE", "/", srMe(), srProposal("COMPARE", "/slow-three/p", nil, nil)),
			want: agtp.ProposalNotComposable, expl: "recipe slow-three needs 3 steps; max_synthesis_depth is 1"},
		{stage: "built-in", name: "PROPOSE trust tier", send: srCall("PROPOSE", "/", srAs(srTier3, testScope), srProposal("LOOKUP", "/item/p", nil, nil)),
			want: agtp.ProposalPolicyRefused, expl: "does not meet this server's min_trust_tier"},
		{stage: "built-in", name: "PROPOSE recipe not offered", send: srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/sealed/p", nil, nil)),
			want: agtp.ProposalPolicyRefused, expl: "does not allow PROPOSE for LOOKUP /sealed/p"},
		{stage: "built-in", name: "PROPOSE over max_contracts_per_agent", engine: "one-each", send: srAfter(func(t *testing.T, te *testEngine) {
			srPropose(t, te, "/item/mc-1")
		}, srCall("PROPOSE", "/", srMe(), srProposal("LOOKUP", "/item/mc-2", nil, nil))),
			want: agtp.ProposalPolicyRefused, expl: "max_contracts_per_agent is 1"},

		// presentation: a contract presented by Contract-Synthesized or
		// Synthesis-Id runs under it, or is refused.
		{stage: "presentation", name: "two ids", send: srSend("LOOKUP", "/item/x", srMe("Contract-Synthesized", "syn-a", "Synthesis-Id", "syn-b"), ""),
			want: agtp.AmbiguousContract, expl: "name different contracts"},
		{stage: "presentation", name: "id malformed", send: srSend("LOOKUP", "/item/x", srMe("Contract-Synthesized", "bad id!"), ""),
			want: agtp.InvalidSynthesisID, expl: "a synthesis id is 1-128 characters"},
		{stage: "presentation", name: "alias id malformed", send: srSend("LOOKUP", "/item/x", srMe("Synthesis-Id", "bad id!"), ""),
			want: agtp.InvalidSynthesisID, expl: "a synthesis id is 1-128 characters"},
		{stage: "presentation", name: "unknown contract", send: srSend("LOOKUP", "/item/x", srMe("Contract-Synthesized", "syn-unknown"), ""),
			want: agtp.ContractNotFound, expl: "no contract with this synthesis id exists"},
		{stage: "presentation", name: "another agent's contract", send: func(t *testing.T, te *testEngine) *srAnswer {
			id := srMint(t, te, srOperator, srOpScope, "/item/op-present")
			return srPresent(id, "/item/op-present", srItem("1"))(t, te)
		}, want: agtp.ContractNotYours, expl: "bound to another agent", check: srHasHeader("RCNS-Attempt-Id", "")},
		{stage: "presentation", name: "revoked contract", send: srMinted("/item/revoked", func(id string) srSender {
			return srAfter(func(t *testing.T, te *testEngine) {
				srWant(t, "REVOKE", srSend("REVOKE", "/?target=contract&synthesis_id="+id, srMe(), "")(t, te), 200)
			}, srPresent(id, "/item/revoked", srItem("1")))
		}), want: agtp.ContractRevoked, expl: "has expired or was revoked", check: srHasHeader("RCNS-Attempt-Id", "")},
		{stage: "presentation", name: "contract of another pair", send: srMinted("/item/pair-a", func(id string) srSender {
			return srPresent(id, "/item/pair-b", srItem("1"))
		}), want: agtp.ContractNotFound, expl: "the presented contract serves LOOKUP /item/pair-a, not this pair"},
		{stage: "presentation", name: "without Authority-Scope", send: srMinted("/item/no-scope", func(id string) srSender {
			return srCall("LOOKUP", "/item/no-scope", srAs(testAgent, "", "Contract-Synthesized", id), srItem("1"))
		}), want: agtp.ScopeRequired, expl: "scope_required_for_invocation"},
		{stage: "presentation", name: "recipe scope not claimed", send: srMinted("/item/narrow-claim", func(id string) srSender {
			return srCall("LOOKUP", "/item/narrow-claim", srAs(testAgent, "rcns:negotiate", "Contract-Synthesized", id), srItem("1"))
		}), want: agtp.ScopeRequired, expl: "does not include bench:read"},
		{stage: "presentation", name: "unknown envelope field", send: srMinted("/item/envelope", func(id string) srSender {
			return srPresent(id, "/item/envelope", `{"item_id":"1"}`)
		}), want: agtp.InvalidEnvelope, expl: `unknown envelope field "item_id"`},
		{stage: "presentation", name: "input invalid", send: srMinted("/item/input", func(id string) srSender {
			return srPresent(id, "/item/input", `{"parameters":{}}`)
		}), want: agtp.InvalidInput, expl: "input does not match input_schema"},
		{stage: "presentation", name: "key reused", send: srMinted("/item/key-reused", func(id string) srSender {
			return srAfter(func(t *testing.T, te *testEngine) {
				srWant(t, "keyed presentation", srPresent(id, "/item/key-reused", srItem("1"), "Idempotency-Key", "present-key")(t, te), 200)
			}, srPresent(id, "/item/key-reused", srItem("2"), "Idempotency-Key", "present-key"))
		}), want: agtp.IdempotencyKeyReused, expl: "was used for a different request"},
		{stage: "presentation", name: "key holds another contract's answer", send: func(t *testing.T, te *testEngine) *srAnswer {
			first, second := srPropose(t, te, "/item/two-contracts"), srPropose(t, te, "/item/two-contracts")
			srWant(t, "keyed presentation", srPresent(first, "/item/two-contracts", srItem("1"), "Idempotency-Key", "two-contracts")(t, te), 200)
			return srPresent(second, "/item/two-contracts", srItem("1"), "Idempotency-Key", "two-contracts")(t, te)
		}, want: agtp.IdempotencyKeyReused, expl: "holds the answer for another contract"},
		{stage: "presentation", name: "key in flight", send: srMinted("/item/present-in-flight", func(id string) srSender {
			return srInFlight("present-in-flight", "LOOKUP", "/item/present-in-flight", srItem("1"), "Contract-Synthesized", id)
		}), want: agtp.IdempotencyKeyInFlight, expl: "is still running"},
		{stage: "presentation", name: "key's lease ended unanswered", send: srMinted("/item/present-orphaned", func(id string) srSender {
			return srOrphaned("present-orphaned", "LOOKUP", "/item/present-orphaned", srItem("1"), "Contract-Synthesized", id)
		}), want: agtp.OutcomeUnknown, expl: "that ran LOOKUP /item/present-orphaned with this Idempotency-Key"},
		{stage: "presentation", name: "agent's keys at their bound", engine: "one-key/presentation", send: srMinted("/item/present-full", func(id string) srSender {
			return srKeysFull(srPresent(id, "/item/present-full", srItem("1"), "Idempotency-Key", "second-key"))
		}), want: agtp.IdempotencyStoreFull, expl: "its maximum of 1 idempotency record "},
		{stage: "presentation", name: "invocation budget spent", engine: "invoke-1/presentation", send: srMinted("/item/budget", func(id string) srSender {
			return srAfter(func(t *testing.T, te *testEngine) {
				srWant(t, "presentation spending the budget", srPresent(id, "/item/budget", srItem("1"))(t, te), 200)
			}, srPresent(id, "/item/budget", srItem("1")))
		}), want: agtp.RateLimited, expl: "the invocation budget of this agent is spent", check: srHasHeader("Retry-After", "")},
		{stage: "presentation", name: "upstream fails", send: srMinted("/item/fails", func(id string) srSender {
			return srPresent(id, "/item/fails", srItem("e500"))
		}), want: agtp.CompositionFailed, expl: "", check: srField("contract_state", `"active"`)},

		// tier-b: a registered endpoint.
		{stage: "tier-b", name: "without Authority-Scope", send: srSend("FETCH", "/items/1", srAs(testAgent, ""), ""),
			want: agtp.ScopeRequired, expl: "scope_required_for_invocation", check: srField("type", `"scope-required"`)},
		{stage: "tier-b", name: "endpoint scope not claimed", send: srSend("FETCH", "/items/1", srAs(testAgent, "rcns:negotiate"), ""),
			want: agtp.ScopeRequired, expl: "does not include bench:read", check: srField("missing_scopes", `["bench:read"]`)},
		{stage: "tier-b", name: "endpoint scope never granted", send: srSend("FETCH", "/items/1", srAs(srNarrow, "rcns:negotiate"), ""),
			want: agtp.ScopeExceeded, expl: "has not been granted bench:read"},
		{stage: "tier-b", name: "key reused", send: srAfter(func(t *testing.T, te *testEngine) {
			srWant(t, "keyed FETCH", srSend("FETCH", "/items/1", srMe("Idempotency-Key", "fetch-key"), "")(t, te), 200)
		}, srSend("FETCH", "/items/2", srMe("Idempotency-Key", "fetch-key"), "")),
			want: agtp.IdempotencyKeyReused, expl: "was used for a different request"},
		{stage: "tier-b", name: "key in flight", send: srInFlight("in-flight", "FETCH", "/items/3", ""),
			want: agtp.IdempotencyKeyInFlight, expl: "is still running", check: srHasHeader("Retry-After", "5")},
		{stage: "tier-b", name: "key's lease ended unanswered", send: srOrphaned("orphaned", "FETCH", "/items/4", ""),
			want: agtp.OutcomeUnknown, expl: "the gateway node other-node that ran FETCH /items/4", check: srField("node_id", `"other-node"`)},
		{stage: "tier-b", name: "agent's keys at their bound", engine: "one-key/tier-b", send: srKeysFull(srSend("FETCH", "/items/1", srMe("Idempotency-Key", "second-key"), "")),
			want: agtp.IdempotencyStoreFull, expl: "its maximum of 1 idempotency record ", check: srField("bound", `"idempotency_max_per_agent"`)},
		{stage: "tier-b", name: "unknown envelope field", send: srCall("FETCH", "/items/1", srMe(), `{"item":"1"}`),
			want: agtp.InvalidEnvelope, expl: `unknown envelope field "item"`},
		{stage: "tier-b", name: "parameters not an object", send: srCall("FETCH", "/items/1", srMe(), `{"parameters":[1]}`),
			want: agtp.InvalidEnvelope, expl: `"parameters" must be a JSON object`},
		{stage: "tier-b", name: "path and body disagree", send: srCall("FETCH", "/items/1", srMe(), srItem("2")),
			want: agtp.ParameterConflict, expl: `parameter "item_id" is given by the path as "1"`},
		{stage: "tier-b", name: "input invalid", send: srCall("FETCH", "/items/1", srMe(), `{"parameters":{"nope":1}}`),
			want: agtp.InvalidInput, expl: "input does not match input_schema"},
		{stage: "tier-b", name: "query input invalid", send: srSend("FETCH", "/items/1?nope=1", srMe(), ""),
			want: agtp.InvalidInput, expl: "input does not match input_schema"},
		{stage: "tier-b", name: "invocation budget spent", engine: "invoke-1/tier-b", send: srAfter(func(t *testing.T, te *testEngine) {
			srWant(t, "FETCH spending the budget", srSend("FETCH", "/items/1", srMe(), "")(t, te), 200)
		}, srSend("FETCH", "/items/1", srMe(), "")),
			want: agtp.RateLimited, expl: "the invocation budget of this agent is spent", check: srHasHeader("Retry-After", "")},
		{stage: "tier-b", name: "upstream 500", send: srSend("FETCH", "/items/e500", srMe(), ""),
			want: agtp.UpstreamError, expl: "upstream bench answered 500"},
		{stage: "tier-b", name: "upstream 401", send: srSend("FETCH", "/items/e401", srMe(), ""),
			want: agtp.UpstreamAuthentication, expl: "upstream bench answered 401"},
		{stage: "tier-b", name: "upstream not JSON", send: srSend("FETCH", "/items/junk", srMe(), ""),
			want: agtp.UpstreamMalformed, expl: "with a body that is not JSON"},
		{stage: "tier-b", name: "upstream times out", send: srSend("FETCH", "/waits/1", srMe(), ""),
			want: agtp.UpstreamTimeout, expl: "did not answer within 50ms"},
		{stage: "tier-b", name: "upstream refuses connections", engine: "dead", send: srSend("FETCH", "/items/1", srMe(), ""),
			want: agtp.UpstreamConnection, expl: "cannot reach upstream bench"},

		// pair: Tier C by pair, else the gate for a pair no endpoint
		// serves.
		{stage: "pair", name: "no endpoint, no opt-in", send: srSend("LOOKUP", "/nothing/here", srMe(), ""),
			want: agtp.NotFound, expl: "no endpoint serves LOOKUP /nothing/here"},
		{stage: "pair", name: "path served by other methods", send: srSend("BOOK", "/items/1", srMe(), ""),
			want: agtp.MethodNotAllowed, expl: "the path is served under other methods", check: srField("allowed_methods_for_path", `["FETCH"]`)},
		{stage: "pair", name: "Allow-RCNS not understood", send: srSend("LOOKUP", "/nothing/here", srMe("Allow-RCNS", "TRUE"), ""),
			want: agtp.NotFound, expl: `no endpoint serves LOOKUP /nothing/here; Allow-RCNS "TRUE" is not a value this gateway understands and was read as no opt-in`},
		{stage: "pair", name: "RCNS disabled", engine: "rcns-off", send: srSend("LOOKUP", "/item/x", srMe("Allow-RCNS", "true"), ""),
			want: agtp.RCNSDisabled, expl: "negotiation is disabled on this server", check: srHasHeader("RCNS-Attempt-Id", "")},
		{stage: "pair", name: "gate without Authority-Scope", send: srSend("LOOKUP", "/item/x", srAs(testAgent, "", "Allow-RCNS", "true"), ""),
			want: agtp.ScopeRequired, expl: "scope_required_for_invocation"},
		{stage: "pair", name: "gate budget spent", engine: "gate-1", send: srAfter(func(t *testing.T, te *testEngine) {
			srWant(t, "gate request spending the budget", srSend("LOOKUP", "/nothing/a", srOp("Allow-RCNS", "true"), "")(t, te), 464)
		}, srSend("LOOKUP", "/nothing/b", srOp("Allow-RCNS", "true"), "")),
			want: agtp.RateLimited, expl: "the rcns budget of this agent is spent", check: srField("scope", `"rcns"`)},
		{stage: "pair", name: "lock 3: rcns:negotiate not claimed", send: srSend("LOOKUP", "/item/x", srAs(testAgent, "bench:read", "Allow-RCNS", "true"), ""),
			want: agtp.ScopeRequired, expl: "does not carry the rcns:negotiate scope", check: srField("scope", `"rcns:negotiate"`)},
		{stage: "pair", name: "lock 4: trust tier", send: srSend("LOOKUP", "/item/x", srAs(srTier3, testScope, "Allow-RCNS", "true"), ""),
			want: agtp.TrustTierInsufficient, expl: "trust tier 3 does not meet this server's minimum trust tier 1", check: srHasHeader("RCNS-Attempt-Id", "")},
		{stage: "pair", name: "no recipe", send: srSend("LOOKUP", "/nothing/here", srMe("Allow-RCNS", "true"), ""),
			want: agtp.CompositionImpossible, expl: "no recipe can synthesize LOOKUP /nothing/here", check: srHasHeader("RCNS-Attempt-Id", "")},
		{stage: "pair", name: "recipe too deep", engine: "depth-1", send: srSend("COMPARE", "/slow-three/x", srMe("Allow-RCNS", "true"), ""),
			want: agtp.CompositionImpossible, expl: "recipe slow-three needs 3 steps; max_synthesis_depth is 1"},
		{stage: "pair", name: "recipe scope not claimed", send: srSend("LOOKUP", "/item/x", srAs(testAgent, "rcns:negotiate", "Allow-RCNS", "true"), ""),
			want: agtp.ScopeRequired, expl: "does not include bench:read"},
		{stage: "pair", name: "recipe scope never granted", send: srSend("LOOKUP", "/item/x", srAs(srNarrow, "rcns:negotiate", "Allow-RCNS", "true"), ""),
			want: agtp.ScopeExceeded, expl: "has not been granted bench:read"},
		{stage: "pair", name: "gate, unknown envelope field", send: srCall("LOOKUP", "/item/x", srMe("Allow-RCNS", "true"), `{"item_id":"1"}`),
			want: agtp.InvalidEnvelope, expl: `unknown envelope field "item_id"`},
		{stage: "pair", name: "gate, input invalid", send: srSend("LOOKUP", "/item/x", srMe("Allow-RCNS", "true"), ""),
			want: agtp.InvalidInput, expl: "input does not match input_schema"},
		{stage: "pair", name: "gate, key reused", send: srAfter(func(t *testing.T, te *testEngine) {
			srWant(t, "keyed gate request", srCall("LOOKUP", "/item/gk-1", srMe("Allow-RCNS", "true", "Idempotency-Key", "gate-key"), srItem("1"))(t, te), 263)
		}, srCall("LOOKUP", "/item/gk-2", srMe("Allow-RCNS", "true", "Idempotency-Key", "gate-key"), srItem("1"))),
			want: agtp.IdempotencyKeyReused, expl: "was used for a different request"},
		{stage: "pair", name: "gate, key in flight", send: srInFlight("gate-in-flight", "LOOKUP", "/item/gate-in-flight", srItem("1"), "Allow-RCNS", "true"),
			want: agtp.IdempotencyKeyInFlight, expl: "is still running"},
		{stage: "pair", name: "gate, key's lease ended unanswered", send: srOrphaned("gate-orphaned", "LOOKUP", "/item/gate-orphaned", srItem("1"), "Allow-RCNS", "true"),
			want: agtp.OutcomeUnknown, expl: "that ran LOOKUP /item/gate-orphaned with this Idempotency-Key"},
		{stage: "pair", name: "gate, agent's keys at their bound", engine: "one-key/pair", send: srKeysFull(srCall("LOOKUP", "/item/gate-full", srMe("Allow-RCNS", "true", "Idempotency-Key", "second-key"), srItem("1"))),
			want: agtp.IdempotencyStoreFull, expl: "its maximum of 1 idempotency record "},
		{stage: "pair", name: "gate over max_contracts_per_agent", engine: "one-each", send: srAfter(func(t *testing.T, te *testEngine) {
			srMint(t, te, srOperator, srOpScope, "/item/gm-1")
		}, srCall("LOOKUP", "/item/gm-2", srOp("Allow-RCNS", "true"), srItem("1"))),
			want: agtp.SynthesisError, expl: "max_contracts_per_agent is 1", check: srHasHeader("RCNS-Attempt-Id", "")},
		{stage: "pair", name: "gate, upstream fails", send: srCall("LOOKUP", "/item/gf", srMe("Allow-RCNS", "true"), srItem("e500")),
			want: agtp.CompositionFailed, expl: "", check: srField("failed_step", `"item"`)},
		{stage: "pair", name: "by pair, without Authority-Scope", send: srMinted("/item/bp-scope", func(string) srSender {
			return srCall("LOOKUP", "/item/bp-scope", srAs(testAgent, ""), srItem("1"))
		}), want: agtp.ScopeRequired, expl: "scope_required_for_invocation"},
		{stage: "pair", name: "by pair, recipe scope not claimed", send: srMinted("/item/bp-claim", func(string) srSender {
			return srCall("LOOKUP", "/item/bp-claim", srAs(testAgent, "rcns:negotiate"), srItem("1"))
		}), want: agtp.ScopeRequired, expl: "does not include bench:read"},
		{stage: "pair", name: "by pair, input invalid", send: srMinted("/item/bp-input", func(string) srSender {
			return srCall("LOOKUP", "/item/bp-input", srMe(), `{"parameters":{"item_id":""}}`)
		}), want: agtp.InvalidInput, expl: "input does not match input_schema"},
		{stage: "pair", name: "by pair, invocation budget spent", engine: "invoke-1/pair", send: srMinted("/item/bp-budget", func(string) srSender {
			return srAfter(func(t *testing.T, te *testEngine) {
				srWant(t, "call by pair spending the budget", srCall("LOOKUP", "/item/bp-budget", srMe(), srItem("1"))(t, te), 200)
			}, srCall("LOOKUP", "/item/bp-budget", srMe(), srItem("1")))
		}), want: agtp.RateLimited, expl: "the invocation budget of this agent is spent"},
		{stage: "pair", name: "by pair, upstream fails", send: srMinted("/item/bp-fails", func(string) srSender {
			return srCall("LOOKUP", "/item/bp-fails", srMe(), srItem("e401"))
		}), want: agtp.CompositionFailed, expl: "", check: srField("contract_state", `"active"`)},
	}

	// Every row names a stage, in the stages' order, and every stage
	// has a row.
	order := map[string]int{}
	for i, s := range stages {
		order[s.name] = i
	}
	counts := make([]int, len(stages))
	last := 0
	for _, r := range rows {
		i, ok := order[r.stage]
		if !ok {
			t.Fatalf("row %q names stage %q, which is not in stages", r.name, r.stage)
		}
		if i < last {
			t.Fatalf("row %s/%s comes after stage %s: keep the rows in the stages' order", r.stage, r.name, stages[last].name)
		}
		last = i
		counts[i]++
	}
	for i, s := range stages {
		if counts[i] == 0 {
			t.Errorf("stage %s has no row", s.name)
		}
	}

	engines := map[string]*testEngine{}
	for _, r := range rows {
		if _, ok := engines[r.engine]; ok {
			continue
		}
		knob, ok := knobs[r.engine]
		if !ok {
			t.Fatalf("row %s/%s names engine %q, which is not configured", r.stage, r.name, r.engine)
		}
		engines[r.engine] = newTestEngine(t, main, knob)
	}

	for _, r := range rows {
		t.Run(r.stage+"/"+r.name, func(t *testing.T) {
			a := r.send(t, engines[r.engine])
			wantError(t, a.testAnswer, r.want.Status, r.want.Token, r.expl)
			if a.stage != r.stage {
				t.Errorf("answered by stage %q, want %q", a.stage, r.stage)
			}
			if r.want.Retry != agtp.RetryDepends {
				if got, want := a.body["retryable"], r.want.Retry == agtp.Retryable; got != want {
					t.Errorf("retryable %v, want %v", got, want)
				}
			}
			if r.check != nil {
				r.check(t, a.testAnswer)
			}
		})
	}
}
