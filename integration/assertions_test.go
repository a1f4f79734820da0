package integration

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

// Assertions on AGTP answers: status, the AGTP response headers, the
// uniform error body (spec §19), contract and proposal bodies, the
// Attribution-Record and the RateLimit fields.

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

// assertContractBody checks the fields a 461 or 263 body of the gate
// shares and returns the decoded body.
func assertContractBody(t testing.TB, r *Resp, status int, method, path, recipe, version string) map[string]any {
	t.Helper()
	b := checkContractBody(t, r, status, method, path, recipe, version, "rcns-gate")
	if t.Failed() {
		t.FailNow()
	}
	return b
}

// checkContractBody checks the fields every contract body shares (spec
// §13.4, §15.4): the status, synthesis_id, method and path, endpoint,
// recipe_lineage, contract_hash over {endpoint, recipe_lineage},
// negotiation_origin origin, and issued_at before a future expires_at.
func checkContractBody(t testing.TB, r *Resp, status int, method, path, recipe, version, origin string) map[string]any {
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
	if o := str(b, "negotiation_origin"); o != origin {
		t.Errorf("negotiation_origin = %q, want %s", o, origin)
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
	return b
}

// assertProposeBody checks a 263 Proposal Approved (RCNS §15.4): the
// contract body of the proposed method and path with
// negotiation_origin "propose", and a UUID Negotiation-ID header equal
// to the body's negotiation_id. It returns the body.
func assertProposeBody(t testing.TB, r *Resp, method, path, recipe, version string) map[string]any {
	t.Helper()
	b := checkContractBody(t, r, 263, method, path, recipe, version, "propose")
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
