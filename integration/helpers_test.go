package integration

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

// ---------------------------------------------------------------------------
// The demo agents (examples/hotel/agents), mapped onto the spec §24 fixture:
// A1 → rcns-demo-agent, A2 → rcns-demo-noscope, A3 → rcns-demo-tier3,
// OP → rcns-demo-operator.

// agentID is the demo's agent id: lowercase hex SHA-256 of the name.
func agentID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

var (
	agentA1 = agentID("rcns-demo-agent")    // tier 1: rcns:negotiate hotel:read hotel:book
	agentA2 = agentID("rcns-demo-noscope")  // tier 1: hotel:read hotel:book
	agentA3 = agentID("rcns-demo-tier3")    // tier 3: rcns:negotiate hotel:read hotel:book
	agentOP = agentID("rcns-demo-operator") // tier 1: inspect:all + the three
)

const (
	scopeAll     = "rcns:negotiate, hotel:read, hotel:book"
	scopeNoRCNS  = "hotel:read, hotel:book"
	recipeName   = "book-room"
	recipeVer    = "1"
	demoCheckIn  = "2026-12-01"
	demoNights   = 2
	demoGuest    = "g-1"
	demoProperty = "p-1"
	hotelDB      = "examples/hotel/db.json"
)

// The six 464 reason tokens (RCNS §19).
var reasons464 = []string{
	"rcns-disabled", "trust-tier-insufficient", "composition-impossible",
	"synthesis-error", "contract-not-yours", "contract-revoked",
}

// bookBody is the demo's BOOK /room request body.
func bookBody() map[string]any {
	return map[string]any{"parameters": map[string]any{
		"guest_id": demoGuest, "property_id": demoProperty,
		"check_in": demoCheckIn, "nights": demoNights,
	}}
}

// hdr builds AGTP request headers: agent and scope may be empty (then not
// sent); kv adds more NAME, value pairs.
func hdr(agent, scope string, kv ...string) map[string]string {
	h := map[string]string{}
	if agent != "" {
		h["Agent-ID"] = agent
	}
	if scope != "" {
		h["Authority-Scope"] = scope
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

// ---------------------------------------------------------------------------
// Assertions

func wantStatus(t testing.TB, r *Resp, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("want status %d, got:\n%s", status, r)
	}
}

// assertAGTPHeaders checks what every AGTP response carries: Server-ID,
// Response-ID, AGTP-API-Version, an explicit Content-Length (never
// chunked), an Attribution-Record and its Audit-ID.
func assertAGTPHeaders(t testing.TB, r *Resp) {
	t.Helper()
	for _, h := range []string{"Server-ID", "Response-ID", "AGTP-API-Version", "Attribution-Record"} {
		if r.Header.Get(h) == "" {
			t.Errorf("response lacks %s:\n%s", h, r)
		}
	}
	// Audit-ID = lowercase hex SHA-256 of the Attribution-Record value
	// (RCNS §4; §24 item 3).
	if rec := r.Header.Get("Attribution-Record"); rec != "" {
		sum := sha256.Sum256([]byte(rec))
		if got := r.Header.Get("Audit-ID"); got != hex.EncodeToString(sum[:]) {
			t.Errorf("Audit-ID %q is not sha256(Attribution-Record) %x", got, sum)
		}
	}
	cl := r.Header.Get("Content-Length")
	if cl == "" {
		t.Errorf("response lacks Content-Length:\n%s", r)
	} else if cl != fmt.Sprint(len(r.Body)) {
		t.Errorf("Content-Length %s but body has %d bytes:\n%s", cl, len(r.Body), r)
	}
	if len(r.TransferEncoding) > 0 {
		t.Errorf("response uses Transfer-Encoding %v:\n%s", r.TransferEncoding, r)
	}
}

// assertErrorBody checks the uniform refusal body of RCNS §19 (OP-28):
// status (equal to the HTTP status), reason (equal to reason unless it is
// empty), explanation, retryable, method and path. It returns the body.
func assertErrorBody(t testing.TB, r *Resp, status int, reason string) map[string]any {
	t.Helper()
	wantStatus(t, r, status)
	assertAGTPHeaders(t, r)
	b := r.Object(t)
	if got, _ := b["status"].(float64); int(got) != status {
		t.Errorf("body status = %v, want %d:\n%s", b["status"], status, r)
	}
	got, _ := b["reason"].(string)
	if got == "" {
		t.Errorf("body has no reason:\n%s", r)
	}
	if reason != "" && got != reason {
		t.Errorf("body reason = %q, want %q:\n%s", got, reason, r)
	}
	if e, _ := b["explanation"].(string); strings.TrimSpace(e) == "" {
		t.Errorf("body has no explanation:\n%s", r)
	}
	if _, ok := b["retryable"].(bool); !ok {
		t.Errorf("body retryable is not a boolean:\n%s", r)
	}
	for _, k := range []string{"method", "path"} {
		if _, ok := b[k]; !ok {
			t.Errorf("body lacks %q:\n%s", k, r)
		}
	}
	return b
}

// assert464 checks a 464 RCNS No Contract: reason among the six tokens
// (and equal to reason), an explanation, and the RCNS-Attempt-Id header.
func assert464(t testing.TB, r *Resp, reason string) map[string]any {
	t.Helper()
	b := assertErrorBody(t, r, 464, reason)
	got, _ := b["reason"].(string)
	if !slices.Contains(reasons464, got) {
		t.Errorf("464 reason %q is not one of %v", got, reasons464)
	}
	if r.Header.Get("RCNS-Attempt-Id") == "" {
		t.Errorf("464 lacks RCNS-Attempt-Id:\n%s", r)
	}
	return b
}

// assertNoRCNSSignal checks that a response says nothing RCNS-specific.
func assertNoRCNSSignal(t testing.TB, r *Resp) {
	t.Helper()
	for _, h := range []string{"RCNS-Attempt-Id", "Contract-Synthesized"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("response carries %s: %s\n%s", h, v, r)
		}
	}
}

// field walks a decoded JSON value by keys and returns what it finds.
func field(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string {
	s, _ := field(v, keys...).(string)
	return s
}

var (
	hex64     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	b64url    = regexp.MustCompile(`^[A-Za-z0-9_-]*$`)
	synthIDRe = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)
)

// attribution decodes the Attribution-Record header: a JWS compact
// serialization (three base64url segments; the signature may be empty for
// alg none) whose payload is a JSON object.
func attribution(t testing.TB, r *Resp) map[string]any {
	t.Helper()
	rec := r.Header.Get("Attribution-Record")
	if rec == "" {
		t.Fatalf("no Attribution-Record:\n%s", r)
	}
	parts := strings.Split(rec, ".")
	if len(parts) != 3 {
		t.Fatalf("Attribution-Record has %d segments, want 3: %q", len(parts), rec)
	}
	for i, p := range parts {
		if !b64url.MatchString(p) {
			t.Fatalf("Attribution-Record segment %d is not base64url: %q", i, p)
		}
	}
	for i, name := range []string{"header", "payload"} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatalf("Attribution-Record %s: %v", name, err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("Attribution-Record %s is not a JSON object: %v: %s", name, err, raw)
		}
		if i == 1 {
			return m
		}
	}
	return nil
}

// contractHash recomputes contract_hash from a 461/263 body: lowercase hex
// SHA-256 of the RFC 8785 canonical JSON of
// {"endpoint": body.endpoint, "recipe_lineage": body.recipe_lineage}.
// The body's own bytes are used (no float round trip).
func contractHash(t testing.TB, body []byte) string {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("contract body: %v", err)
	}
	ep, ok1 := raw["endpoint"]
	lin, ok2 := raw["recipe_lineage"]
	if !ok1 || !ok2 {
		t.Fatalf("contract body lacks endpoint or recipe_lineage: %s", body)
	}
	doc := []byte(`{"endpoint":` + string(ep) + `,"recipe_lineage":` + string(lin) + `}`)
	canon, err := jcs.Transform(doc)
	if err != nil {
		t.Fatalf("JCS: %v", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// assertContractBody checks the fields a 461 or 263 body shares and
// returns the decoded body.
func assertContractBody(t testing.TB, r *Resp, status int, method, path, recipe, version string) map[string]any {
	t.Helper()
	wantStatus(t, r, status)
	assertAGTPHeaders(t, r)
	b := r.Object(t)
	if got, _ := b["status"].(float64); int(got) != status {
		t.Errorf("body status = %v, want %d", b["status"], status)
	}
	if id := str(b, "synthesis_id"); !synthIDRe.MatchString(id) {
		t.Errorf("synthesis_id %q does not match %s", id, synthIDRe)
	}
	if str(b, "method") != method || str(b, "path") != path {
		t.Errorf("method/path = %q %q, want %q %q", str(b, "method"), str(b, "path"), method, path)
	}
	if _, ok := b["endpoint"].(map[string]any); !ok {
		t.Errorf("endpoint is not an object: %v", b["endpoint"])
	}
	if str(b, "recipe_lineage", "recipe_name") != recipe || str(b, "recipe_lineage", "recipe_version") != version {
		t.Errorf("recipe_lineage = %v, want {%s %s}", b["recipe_lineage"], recipe, version)
	}
	h := str(b, "contract_hash")
	if !hex64.MatchString(h) {
		t.Errorf("contract_hash %q is not 64 lowercase hex", h)
	} else if want := contractHash(t, r.Body); h != want {
		t.Errorf("contract_hash = %s, want sha256(JCS({endpoint, recipe_lineage})) = %s", h, want)
	}
	if o := str(b, "negotiation_origin"); o != "rcns-gate" {
		t.Errorf("negotiation_origin = %q, want rcns-gate", o)
	}
	issued, err1 := time.Parse(time.RFC3339, str(b, "issued_at"))
	expires, err2 := time.Parse(time.RFC3339, str(b, "expires_at"))
	if err1 != nil || err2 != nil {
		t.Errorf("issued_at/expires_at are not RFC 3339: %q %q", str(b, "issued_at"), str(b, "expires_at"))
	} else {
		if !expires.After(time.Now()) {
			t.Errorf("expires_at %s is not in the future", expires)
		}
		if !expires.After(issued) {
			t.Errorf("expires_at %s is not after issued_at %s", expires, issued)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return b
}

// contracts lists the caller's contracts with DISCOVER /contracts.
func contracts(t testing.TB, g *Gateway, agent string) []any {
	t.Helper()
	r := g.Do(t, "DISCOVER", "/contracts", hdr(agent, ""), nil)
	wantStatus(t, r, 200)
	return r.Array(t)
}

// waitFor polls cond every interval until it is true or limit passes.
func waitFor(t testing.TB, limit, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(interval)
	}
}

// findString reports whether s occurs as a string value (or an object key)
// anywhere inside the decoded JSON value v.
func findString(v any, s string) bool {
	switch x := v.(type) {
	case string:
		return x == s
	case map[string]any:
		for k, e := range x {
			if k == s || findString(e, s) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if findString(e, s) {
				return true
			}
		}
	}
	return false
}

// headerNames returns the lowercased names of an httpbin "headers" echo.
func headerNames(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, strings.ToLower(k))
	}
	return out
}

// ---------------------------------------------------------------------------
// Worlds: a gateway plus the upstreams it talks to.

// hotelSite is the demo's rcns block: the example documents, the hotel
// upstream, then the legacy API for everything that is not AGTP.
const hotelSite = `
	rcns {
		server_id caddy-rcns-it
		identity header
		enabled {{ENABLED}}
		mode {{MODE}}
		upstream hotel {{HOTEL}}
		agents examples/hotel/agents
		endpoints examples/hotel/endpoints
		recipes examples/hotel/recipes
{{EXTRA}}
	}
	reverse_proxy {{LEGACY}}
`

// hotelOpts configures startHotel.
type hotelOpts struct {
	Mode     string // optimistic | confirm-first (default confirm-first)
	Disabled bool   // enabled false
	Extra    string // more lines inside the rcns block
	// LegacyCounter sends non-AGTP traffic to a counting upstream instead
	// of json-server, so a test can prove nothing fell through.
	LegacyCounter bool
}

// hotelWorld is json-server, a counting proxy in front of it (the rcns
// `hotel` upstream) and the gateway.
type hotelWorld struct {
	JS     *JSONServer
	Hotel  *Counter // every upstream call rcns makes to the hotel API
	Legacy *Counter // non-nil with LegacyCounter
	GW     *Gateway
}

func startHotel(t testing.TB, o hotelOpts) *hotelWorld {
	t.Helper()
	w := &hotelWorld{JS: startJSONServer(t, hotelDB)}
	w.Hotel = startCountingProxy(t, w.JS.URL)
	legacy := w.JS.URL
	if o.LegacyCounter {
		w.Legacy = startCounter(t)
		legacy = w.Legacy.URL
	}
	mode := o.Mode
	if mode == "" {
		mode = "confirm-first"
	}
	enabled := "true"
	if o.Disabled {
		enabled = "false"
	}
	w.GW = startGateway(t, fill(hotelSite,
		"ENABLED", enabled, "MODE", mode, "HOTEL", w.Hotel.URL,
		"EXTRA", o.Extra, "LEGACY", legacy))
	return w
}

// book sends the demo's BOOK /room as agent with extra headers.
func (w *hotelWorld) book(t testing.TB, agent, scope string, kv ...string) *Resp {
	t.Helper()
	return w.GW.Do(t, "BOOK", "/room", hdr(agent, scope, kv...), bookBody())
}

// assertReservations checks the number of reservations in json-server.
func (w *hotelWorld) assertReservations(t testing.TB, n int) []map[string]any {
	t.Helper()
	rs := w.JS.Reservations(t)
	if len(rs) != n {
		t.Fatalf("json-server has %d reservations, want %d: %v", len(rs), n, rs)
	}
	return rs
}

// labSite loads the demo documents plus integration/testdata/lab: Tier B
// endpoints on go-httpbin (bin), a closed port (dead), a counting upstream
// (counter) and a barrier upstream (barrier), and recipes over them.
const labSite = `
	rcns {
		server_id caddy-rcns-it
		identity header
		enabled true
		mode {{MODE}}
		upstream hotel {{HOTEL}}
		upstream bin {{BIN}}
		upstream dead {{DEAD}}
		upstream counter {{COUNTER}}
		upstream barrier {{BARRIER}}
		agents examples/hotel/agents
		endpoints examples/hotel/endpoints integration/testdata/lab/endpoints
		recipes examples/hotel/recipes integration/testdata/lab/recipes
{{EXTRA}}
	}
	reverse_proxy {{LEGACY}}
`

type labWorld struct {
	JS      *JSONServer
	Hotel   *Counter // counting proxy in front of json-server (the hotel upstream)
	Bin     string
	Counter *Counter
	Barrier *Barrier
	GW      *Gateway
}

// startLab starts json-server, go-httpbin, a counter, a 3-way barrier and
// a gateway in mode (optimistic when empty) with extra rcns lines.
func startLab(t testing.TB, mode, extra string) *labWorld {
	t.Helper()
	if mode == "" {
		mode = "optimistic"
	}
	w := &labWorld{
		JS:      startJSONServer(t, hotelDB),
		Bin:     startHTTPBin(t),
		Counter: startCounter(t),
		Barrier: startBarrier(t, 3),
	}
	w.Hotel = startCountingProxy(t, w.JS.URL)
	dead := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	w.GW = startGateway(t, fill(labSite,
		"MODE", mode, "HOTEL", w.Hotel.URL, "LEGACY", w.JS.URL, "BIN", w.Bin, "DEAD", dead,
		"COUNTER", w.Counter.URL, "BARRIER", w.Barrier.URL, "EXTRA", extra))
	return w
}

// mustJSON encodes v (map keys sorted, so equal values give equal bytes).
func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

// assertNoContractFields checks that r names no contract: no
// Contract-Synthesized header and no synthesis_id, contract_hash or
// negotiation_origin in its Attribution-Record (RCNS §16.1: they belong
// to answers produced by running, or replaying, a contract).
func assertNoContractFields(t testing.TB, r *Resp) {
	t.Helper()
	if v := r.Header.Get("Contract-Synthesized"); v != "" {
		t.Errorf("%d %s carries Contract-Synthesized: %s\n%s", r.Status, str(r.JSON(), "reason"), v, r)
	}
	p := attribution(t, r)
	for _, k := range []string{"synthesis_id", "contract_hash", "negotiation_origin"} {
		if v, ok := p[k]; ok {
			t.Errorf("%d %s: Attribution-Record has %s %v", r.Status, str(r.JSON(), "reason"), k, v)
		}
	}
}

// assertContractFields checks that r names contract id: the
// Contract-Synthesized header and the three RCNS fields of its
// Attribution-Record, with contract_hash hash and origin.
func assertContractFields(t testing.TB, r *Resp, id, hash, origin string) {
	t.Helper()
	if v := r.Header.Get("Contract-Synthesized"); v != id {
		t.Errorf("Contract-Synthesized = %q, want %s\n%s", v, id, r)
	}
	p := attribution(t, r)
	if str(p, "synthesis_id") != id || str(p, "contract_hash") != hash || str(p, "negotiation_origin") != origin {
		t.Errorf("Attribution-Record payload = %v, want synthesis_id %s contract_hash %s negotiation_origin %s", p, id, hash, origin)
	}
}
