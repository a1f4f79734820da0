package integration

// Helpers for the rate-limit, idempotency, surface and reload tests
// (ratelimit_test.go, idempotency_test.go, surfaces_test.go,
// reload_test.go).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	// RateLimit / RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-10).
	rateLimitRe = regexp.MustCompile(`^"([a-z]+)";r=(\d+);t=(\d+)$`)
	linkNextRe  = regexp.MustCompile(`^<([^>]+)>;\s*rel="next"$`)
)

// rateLimitField parses a RateLimit value `"name";r=R;t=T`; ok is false
// when it does not have that shape.
func rateLimitField(v string) (name string, r, tsec int, ok bool) {
	m := rateLimitRe.FindStringSubmatch(v)
	if m == nil {
		return "", 0, 0, false
	}
	r, _ = strconv.Atoi(m[2])
	tsec, _ = strconv.Atoi(m[3])
	return m[1], r, tsec, true
}

// assertRateLimited checks a 429 of budget scope with policy q/w: the
// uniform body with reason rate-limited, scope, retry_after_seconds equal
// to an integer Retry-After ≥ 1, RateLimit-Policy `"scope";q=Q;w=W` and
// RateLimit `"scope";r=0;t=N` (N ≥ 1). It returns the Retry-After value.
func assertRateLimited(t testing.TB, r *Resp, scope string, q, w int) int {
	t.Helper()
	b := assertErrorBody(t, r, 429, "rate-limited")
	if str(b, "scope") != scope {
		t.Errorf("429 body scope = %q, want %q:\n%s", str(b, "scope"), scope, r)
	}
	ra := r.Header.Get("Retry-After")
	secs, err := strconv.Atoi(ra)
	if err != nil || secs < 1 || strconv.Itoa(secs) != ra {
		t.Errorf("Retry-After = %q, want an integer number of seconds ≥ 1:\n%s", ra, r)
	}
	if got, ok := b["retry_after_seconds"].(float64); !ok || int(got) != secs || got != float64(int(got)) {
		t.Errorf("body retry_after_seconds = %v, want the Retry-After value %d:\n%s", b["retry_after_seconds"], secs, r)
	}
	if secs > w {
		t.Errorf("Retry-After %d exceeds the policy window %d s", secs, w)
	}
	if want := fmt.Sprintf(`"%s";q=%d;w=%d`, scope, q, w); r.Header.Get("RateLimit-Policy") != want {
		t.Errorf("RateLimit-Policy = %q, want %q", r.Header.Get("RateLimit-Policy"), want)
	}
	name, rem, tsec, ok := rateLimitField(r.Header.Get("RateLimit"))
	if !ok || name != scope || rem != 0 || tsec < 1 {
		t.Errorf("RateLimit = %q, want \"%s\";r=0;t=N with N ≥ 1", r.Header.Get("RateLimit"), scope)
	}
	if v := r.Header.Get("RCNS-Attempt-Id"); v != "" && scope != "rcns" {
		t.Errorf("invocation 429 carries RCNS-Attempt-Id %s", v)
	}
	return secs
}

// assertRateLimitHeader checks that an answer that spent budget scope
// carries RateLimit `"scope";r=remaining;t=N` and the matching policy.
func assertRateLimitHeader(t testing.TB, r *Resp, scope string, remaining, q, w int) {
	t.Helper()
	name, rem, _, ok := rateLimitField(r.Header.Get("RateLimit"))
	if !ok || name != scope || rem != remaining {
		t.Errorf("RateLimit = %q, want \"%s\";r=%d;t=N:\n%s", r.Header.Get("RateLimit"), scope, remaining, r)
	}
	if want := fmt.Sprintf(`"%s";q=%d;w=%d`, scope, q, w); r.Header.Get("RateLimit-Policy") != want {
		t.Errorf("RateLimit-Policy = %q, want %q", r.Header.Get("RateLimit-Policy"), want)
	}
}

// builtinBody is the envelope of a Tier A built-in at "/".
func builtinBody(method string, params map[string]any) map[string]any {
	return map[string]any{"method": method, "task_id": "t-" + strings.ToLower(method), "parameters": params}
}

// builtinCall sends METHOD / with params in the envelope.
func builtinCall(t testing.TB, g *Gateway, method, agent, scope string, params map[string]any, kv ...string) *Resp {
	t.Helper()
	return g.Do(t, method, "/", hdr(agent, scope, kv...), builtinBody(method, params))
}

func inspectContract(t testing.TB, g *Gateway, agent, scope, id string) *Resp {
	t.Helper()
	return builtinCall(t, g, "INSPECT", agent, scope, map[string]any{"target": "contract", "synthesis_id": id})
}

func revokeContract(t testing.TB, g *Gateway, agent, scope, id string) *Resp {
	t.Helper()
	return builtinCall(t, g, "REVOKE", agent, scope, map[string]any{
		"target": "contract", "synthesis_id": id, "reason": "integration test", "actor": "it-operator"})
}

func suspendContract(t testing.TB, g *Gateway, agent, scope, id string) *Resp {
	t.Helper()
	return builtinCall(t, g, "SUSPEND", agent, scope, map[string]any{"synthesis_id": id, "reason": "integration test"})
}

// contractIDs returns the synthesis ids of a DISCOVER /contracts listing.
func contractIDs(list []any) []string {
	var out []string
	for _, c := range list {
		out = append(out, str(c, "synthesis_id"))
	}
	return out
}

func hasContract(list []any, id string) bool {
	for _, c := range list {
		if str(c, "synthesis_id") == id {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// PROPOSE

// proposalSemantic is a valid semantic block (RCNS §7.2).
func proposalSemantic() map[string]any {
	return map[string]any{
		"intent": "Book a room for one guest at one property.", "actor": "agent",
		"outcome":    "A reservation exists for the guest at the property.",
		"capability": "transaction", "confidence": 0.8, "impact": "reversible", "is_idempotent": false,
	}
}

// wrappedProposal is the RECOMMENDED PROPOSE parameters form (RCNS §15.2).
func wrappedProposal(method, path string) map[string]any {
	return map[string]any{
		"endpoint": map[string]any{
			"method": method, "path": path,
			"description": "Books a room for the named guest.",
			"semantic":    proposalSemantic(),
			"input_schema": map[string]any{"type": "object", "additionalProperties": false,
				"properties": map[string]any{"guest_id": map[string]any{"type": "string"}}},
			"output_schema": map[string]any{"type": "object"},
		},
		"persistent": false,
	}
}

// legacyProposal is the legacy PROPOSE parameters form (RCNS §15.2).
func legacyProposal(method, path string) map[string]any {
	return map[string]any{"name": "my-booking", "method": method, "path": path, "semantic": proposalSemantic()}
}

// proposeCall sends PROPOSE / with the given parameters.
func proposeCall(t testing.TB, g *Gateway, agent, scope string, params map[string]any, kv ...string) *Resp {
	t.Helper()
	return builtinCall(t, g, "PROPOSE", agent, scope, params, kv...)
}

// assertProposeBody checks a 263 Proposal Approved (RCNS §15.4): method
// and path equal to the proposal, synthesis_id, endpoint, recipe_lineage,
// expires_at in the future, contract_hash over {endpoint,
// recipe_lineage}, negotiation_origin "propose" and a UUID Negotiation-ID
// header. It returns the body.
func assertProposeBody(t testing.TB, r *Resp, method, path, recipe, version string) map[string]any {
	t.Helper()
	wantStatus(t, r, 263)
	assertAGTPHeaders(t, r)
	b := r.Object(t)
	if got, _ := b["status"].(float64); got != 263 {
		t.Errorf("body status = %v, want 263", b["status"])
	}
	if str(b, "method") != method || str(b, "path") != path {
		t.Errorf("263 method/path = %q %q, want the proposal's %q %q", str(b, "method"), str(b, "path"), method, path)
	}
	if id := str(b, "synthesis_id"); !synthIDRe.MatchString(id) {
		t.Errorf("synthesis_id %q does not match %s", id, synthIDRe)
	}
	if _, ok := b["endpoint"].(map[string]any); !ok {
		t.Errorf("263 endpoint is not an object: %v", b["endpoint"])
	}
	if str(b, "recipe_lineage", "recipe_name") != recipe || str(b, "recipe_lineage", "recipe_version") != version {
		t.Errorf("recipe_lineage = %v, want {%s %s}", b["recipe_lineage"], recipe, version)
	}
	if exp, err := time.Parse(time.RFC3339, str(b, "expires_at")); err != nil || !exp.After(time.Now()) {
		t.Errorf("expires_at %q is not a future RFC 3339 time", str(b, "expires_at"))
	}
	h := str(b, "contract_hash")
	if !hex64.MatchString(h) {
		t.Errorf("contract_hash %q is not 64 lowercase hex", h)
	} else if want := contractHash(t, r.Body); h != want {
		t.Errorf("contract_hash = %s, want %s", h, want)
	}
	if o := str(b, "negotiation_origin"); o != "propose" {
		t.Errorf("negotiation_origin = %q, want propose", o)
	}
	if n := r.Header.Get("Negotiation-ID"); !uuidRe.MatchString(n) {
		t.Errorf("Negotiation-ID header %q is not a UUID", n)
	} else if got := str(b, "negotiation_id"); got != n {
		t.Errorf("263 body negotiation_id %q, header %q (OP-35)", got, n)
	}
	if t.Failed() {
		t.FailNow()
	}
	return b
}

// assert463 checks a 463 Proposal Rejected with reason (RCNS §15.5).
func assert463(t testing.TB, r *Resp, reason string) map[string]any {
	t.Helper()
	b := assertErrorBody(t, r, 463, reason)
	switch str(b, "reason") {
	case "out-of-scope", "policy-refused", "composition-impossible", "ambiguous", "synthesis-disabled":
	default:
		t.Errorf("463 reason %q is outside the §15.5 vocabulary", str(b, "reason"))
	}
	return b
}

// ---------------------------------------------------------------------------
// Documents and upstreams

// patternLine is `path_exact: P`, or `path_regex: 'R'` for path "re:R".
func patternLine(path string) string {
	if re, ok := strings.CutPrefix(path, "re:"); ok {
		return "path_regex: '" + re + "'"
	}
	return "path_exact: " + path
}

// recipeVariant writes a copy of the demo's book-room recipe into dir
// under a new name and pattern (method, path; "re:R" for a path_regex), with required_scopes and
// propose replaced, and returns its path.
func recipeVariant(t testing.TB, dir, name, method, path string, scopes []string, propose bool) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "examples/hotel/recipes/book-room.yaml"))
	if err != nil {
		t.Fatalf("read book-room recipe: %v", err)
	}
	s := string(raw)
	for _, rep := range [][2]string{
		{"name: book-room", "name: " + name},
		{"  method: BOOK\n  path_exact: /room", "  method: " + method + "\n  " + patternLine(path)},
		{"required_scopes: [hotel:book]", "required_scopes: [" + strings.Join(scopes, ", ") + "]"},
		{"propose: true", "propose: " + strconv.FormatBool(propose)},
	} {
		if !strings.Contains(s, rep[0]) {
			t.Fatalf("book-room recipe no longer contains %q; update recipeVariant", rep[0])
		}
		s = strings.Replace(s, rep[0], rep[1], 1)
	}
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatalf("write recipe: %v", err)
	}
	return p
}

// flakyEndpointDoc is a Tier B endpoint FETCH /flaky-ledger on the
// upstream named flaky (a counting upstream that answers 500).
const flakyEndpointDoc = `# Integration-test endpoint: a counting upstream that answers 500.
method: FETCH
path: /flaky-ledger
description: Calls a counting upstream that always fails.
semantic:
  intent: Read the flaky ledger.
  actor: agent
  outcome: The upstream answer is returned.
  capability: retrieval
  confidence: 0.9
  impact: informational
  is_idempotent: true
input_schema:
  type: object
  additionalProperties: false
  properties: {}
output_schema:
  type: object
  additionalProperties: true
errors:
  - upstream_timeout
  - upstream_connection_error
  - upstream_malformed_response
  - upstream_authentication_failed
  - upstream_error
required_scopes: [hotel:read]
external_service:
  upstream: flaky
  method: GET
  path: /ledger
  timeout_seconds: 5
`

// writeDoc writes text to dir/name and returns the path.
func writeDoc(t testing.TB, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	return p
}

// FailingUpstream counts calls and answers every one 500.
type FailingUpstream struct {
	URL string
	mu  sync.Mutex
	n   int
}

func startFailingUpstream(t testing.TB) *FailingUpstream {
	t.Helper()
	f := &FailingUpstream{}
	f.URL = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "boom"})
	}))
	return f
}

func (f *FailingUpstream) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// copyDocs copies the regular files of src (relative to the repo root)
// into dst, creating it.
func copyDocs(t testing.TB, src, dst string) {
	t.Helper()
	if !filepath.IsAbs(src) {
		src = filepath.Join(repoRoot, src)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatalf("mkdir %s: %v", dst, err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("read %s: %v", src, err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatalf("read %s: %v", e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), raw, 0o644); err != nil {
			t.Fatalf("write %s: %v", e.Name(), err)
		}
	}
}

// adminLoad POSTs a Caddyfile to the gateway's admin /load endpoint and
// returns the admin API's status and body. Cache-Control: must-revalidate
// makes Caddy load it even when it adapts to the running config.
func adminLoad(t testing.TB, g *Gateway, caddyfile string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.AdminURL+"/load", bytes.NewReader([]byte(caddyfile)))
	if err != nil {
		t.Fatalf("new admin request: %v", err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/load: %v", g.AdminURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// Caddy on Linux binds each config's listener with SO_REUSEPORT: until
	// the old config's socket is closed (asynchronously, as its server
	// shuts down), the kernel may queue a new connection on it, and
	// closing it resets that connection. The old server also closes its
	// idle keep-alive connections. Either fails the next AGTP request with
	// EOF or a reset (net/http does not retry methods it does not know to
	// be idempotent). Wait until one listening socket is left, then start
	// every request on a fresh connection.
	waitSingleListener(t, g.Addr)
	testClient.CloseIdleConnections()
	return resp.StatusCode, string(body)
}

// waitSingleListener waits (at most 5 s) until at most one socket
// listens on addr's port, read from /proc/net/tcp and /proc/net/tcp6
// (state 0A, LISTEN). Where /proc cannot be read it waits 200 ms.
func waitSingleListener(t testing.TB, addr string) {
	t.Helper()
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("waitSingleListener: %v", err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("waitSingleListener: port %q: %v", portText, err)
	}
	suffix := fmt.Sprintf(":%04X", port)
	listeners := func() int {
		n, read := 0, false
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			raw, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			read = true
			for _, line := range strings.Split(string(raw), "\n")[1:] {
				fields := strings.Fields(line)
				if len(fields) > 3 && strings.HasSuffix(fields[1], suffix) && fields[3] == "0A" {
					n++
				}
			}
		}
		if !read {
			return -1
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := listeners()
		if n < 0 {
			time.Sleep(200 * time.Millisecond)
			return
		}
		if n <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("waitSingleListener: %d sockets still listen on %s after 5 s", n, addr)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nextLink returns the target of a `Link: <…>; rel="next"` header as a
// path with query relative to the gateway, or "" when there is none.
func nextLink(t testing.TB, g *Gateway, r *Resp) string {
	t.Helper()
	v := strings.TrimSpace(r.Header.Get("Link"))
	if v == "" {
		return ""
	}
	m := linkNextRe.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("Link %q is not `<URI>; rel=\"next\"`", v)
	}
	base, _ := url.Parse(g.URL + "/contracts")
	u, err := base.Parse(m[1])
	if err != nil {
		t.Fatalf("Link target %q: %v", m[1], err)
	}
	if u.Host != "" && u.Host != g.Addr {
		t.Fatalf("Link target %q points to another host", m[1])
	}
	return u.RequestURI()
}

// concurrently runs f(i) for i in [0, n) at the same moment and waits
// (bounded by requestTimeout plus a margin) for all of them.
func concurrently(t testing.TB, n int, f func(i int)) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			f(i)
		}(i)
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(requestTimeout + 10*time.Second):
		t.Fatalf("%d concurrent requests did not finish within %s", n, requestTimeout+10*time.Second)
	}
	// A burst leaves dialed-but-unused connections; a server waits up to
	// 5 s for those on shutdown. Close them now.
	if tr, ok := testClient.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// tryDo is Gateway.Do without t: safe to call from any goroutine. body is
// JSON-encoded (nil sends none).
func tryDo(g *Gateway, method, path string, h map[string]string, body any) (*Resp, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = []string{v}
	}
	if body != nil {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Resp{Method: method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: b,
		TransferEncoding: resp.TransferEncoding}, nil
}

// reserveBody is a Tier B RESERVE /reservations input.
func reserveBody(guest string, nights int) map[string]any {
	return map[string]any{"parameters": map[string]any{
		"guest_id": guest, "property_id": demoProperty, "check_in": demoCheckIn, "nights": nights}}
}
