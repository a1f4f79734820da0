package integration

// Manifest, built-in discovery, wire headers on every surface, lifecycle
// streams, method policy (redirects, legacy aliases, deprecations),
// identifiers and AGTP-API-Version: spec §24 items 1–7 (DISCOVER,
// INSPECT, REVOKE, SUSPEND, PROPOSE, 461/263, 429), 23–27, 63–65, 88–95,
// 98 and 101 (RCNS §4, §8, §9, §16, §17.3, §18).
//
// Documents under integration/testdata/manifest:
//   - endpoints/fetch-legacy-guest.yaml: FETCH /legacy-guests/{guest_id},
//     deprecated (successor FETCH /guests/{guest_id}, removed_in "2");
//   - endpoints/fetch-internal-guest.yaml: FETCH /internal-guests/{guest_id},
//     internal: true;
//   - catalog-fetch-deprecated.json: the 1.0.0 catalog as version 1.1.0
//     with FETCH deprecated (successor RETRIEVE, removed_in 2.0.0).

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
)

const (
	mfEndpoints = "integration/testdata/manifest/endpoints"
	mfCatalog   = "integration/testdata/manifest/catalog-fetch-deprecated.json"
	mfServerID  = "caddy-rcns-it"
	mfOwner     = "hotel-ops"
	mfZeros     = "0000000000000000000000000000000000000000000000000000000000000000"
	// mfScopeOP is the operator's claim including inspect:all.
	mfScopeOP = "inspect:all, rcns:negotiate, hotel:read, hotel:book"
)

var (
	mfUUIDv7Re = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	mfULIDRe   = regexp.MustCompile(`^[0-7][0-9A-HJKMNP-TV-Z]{25}$`)
)

// mfRequestID mints a valid Request-ID (a lowercase UUIDv7, ids-02 §9.2).
func mfRequestID(t testing.TB) string {
	t.Helper()
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatalf("uuid v7: %v", err)
	}
	return u.String()
}

// mfIDs builds request headers carrying the full identifier set of the
// §24 fixture (Agent-ID, Owner-ID, Request-ID, Task-ID, Authority-Scope)
// for agent (anonymous when empty: then no Agent-ID nor Owner-ID); kv
// adds more pairs.
func mfIDs(t testing.TB, agent, scope, task string, kv ...string) map[string]string {
	t.Helper()
	h := hdr(agent, scope, kv...)
	if agent != "" {
		h["Owner-ID"] = mfOwner
	}
	h["Request-ID"] = mfRequestID(t)
	h["Task-ID"] = task
	return h
}

// mfJSONMediaType reports whether ct is application/json or an
// application/*+json type.
func mfJSONMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// mfCheckWire checks §24 items 1–7 on one response to a request sent with
// headers sent: Server-ID (the configured one), a fresh UUIDv7/ULID
// Response-ID (seen collects them), a decodable Attribution-Record whose
// Audit-ID is its SHA-256, echoes of Agent-ID, Task-ID and Request-ID,
// Content-Length without chunking, a JSON Content-Type on the body, none
// of the retired headers, AGTP-API-Version. The Attribution-Record
// payload must name the same response_id and request_id. It returns the
// payload.
func mfCheckWire(t testing.TB, r *Resp, sent map[string]string, seen map[string]bool) map[string]any {
	t.Helper()
	what := fmt.Sprintf("%s %s -> %d", r.Method, r.Path, r.Status)
	assertAGTPHeaders(t, r)
	if got := r.Header.Get("Server-ID"); got != mfServerID {
		t.Errorf("%s: Server-ID %q, want %q", what, got, mfServerID)
	}
	rid := r.Header.Get("Response-ID")
	if !mfUUIDv7Re.MatchString(rid) && !mfULIDRe.MatchString(rid) {
		t.Errorf("%s: Response-ID %q is neither a UUIDv7 nor a ULID", what, rid)
	}
	if seen[rid] {
		t.Errorf("%s: Response-ID %s was already used", what, rid)
	}
	seen[rid] = true
	for _, h := range []string{"Agent-ID", "Task-ID", "Request-ID"} {
		if v, ok := sent[h]; ok && r.Header.Get(h) != v {
			t.Errorf("%s: %s echo %q, want %q", what, h, r.Header.Get(h), v)
		}
	}
	if len(r.Body) == 0 {
		t.Errorf("%s: no body", what)
	} else if ct := r.Header.Get("Content-Type"); !mfJSONMediaType(ct) {
		t.Errorf("%s: Content-Type %q is not JSON", what, ct)
	} else if !json.Valid(r.Body) {
		t.Errorf("%s: body is not JSON:\n%s", what, r)
	}
	for _, k := range []string{"AGTP-Version", "AGTP-Method", "AGTP-Status", "Principal-ID", "Server-Agent-ID"} {
		if v := r.Header.Get(k); v != "" {
			t.Errorf("%s: retired header %s: %s", what, k, v)
		}
	}
	p := attribution(t, r)
	if got := str(p, "response_id"); got != rid {
		t.Errorf("%s: Attribution-Record response_id %q, header Response-ID %q", what, got, rid)
	}
	if v, ok := sent["Request-ID"]; ok && str(p, "request_id") != v {
		t.Errorf("%s: Attribution-Record request_id %q, want %q", what, str(p, "request_id"), v)
	}
	if v, ok := sent["Agent-ID"]; ok && str(p, "agent_id") != v {
		t.Errorf("%s: Attribution-Record agent_id %q, want %q", what, str(p, "agent_id"), v)
	}
	if v := str(p, "audit_record_version"); v != "1" {
		t.Errorf("%s: audit_record_version %q, want \"1\"", what, v)
	}
	if v := str(p, "previous_audit_id"); !hex64.MatchString(v) {
		t.Errorf("%s: previous_audit_id %q is not 64 lowercase hex", what, v)
	}
	return p
}

// mfAPIVersion parses AGTP-API-Version as a non-negative integer.
func mfAPIVersion(t testing.TB, r *Resp) int {
	t.Helper()
	v := r.Header.Get("AGTP-API-Version")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("AGTP-API-Version %q is not a non-negative integer:\n%s", v, r)
	}
	return n
}

// mfJWSPayload decodes the payload of a JWS Compact value.
func mfJWSPayload(t testing.TB, compact string) map[string]any {
	t.Helper()
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		t.Fatalf("envelope has %d segments, want 3: %q", len(parts), compact)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("envelope payload is not base64url: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("envelope payload is not a JSON object: %v: %s", err, raw)
	}
	return m
}

// mfLifecycle reads a lifecycle stream with INSPECT target=lifecycle
// (agent_id omitted when empty) and returns the response.
func mfLifecycle(t testing.TB, g *Gateway, caller, agent string) *Resp {
	t.Helper()
	p := map[string]any{"target": "lifecycle"}
	if agent != "" {
		p["agent_id"] = agent
	}
	scope := scopeAll
	if caller == agentOP {
		scope = mfScopeOP
	}
	return builtinCall(t, g, "INSPECT", caller, scope, p)
}

// mfEntry is one lifecycle entry with its decoded envelope payload.
type mfEntry struct {
	Entry   map[string]any
	Payload map[string]any
}

// mfEntries checks a 200 target=lifecycle answer (spec §17.3, §18, §24
// 65): entries is an array; every entry has format "jws" or "cose" and
// its signed envelope; a "jws" envelope is JWS Compact whose payload is a
// JSON object. It returns the entries, newest first as served.
func mfEntries(t testing.TB, r *Resp) []mfEntry {
	t.Helper()
	wantStatus(t, r, 200)
	raw, ok := r.Object(t)["entries"].([]any)
	if !ok {
		t.Fatalf("lifecycle answer has no entries array:\n%s", r)
	}
	var out []mfEntry
	for i, e := range raw {
		m, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("entry %d is not an object: %v", i, e)
		}
		format := str(m, "format")
		if format != "jws" && format != "cose" {
			t.Fatalf("entry %d format %q, want jws or cose: %v", i, format, m)
		}
		env := str(m, "envelope")
		if env == "" {
			t.Fatalf("entry %d carries no signed envelope: %v", i, m)
		}
		if format != "jws" {
			t.Fatalf("entry %d is %s; this gateway signs JWS", i, format)
		}
		if a := str(m, "audit_id"); a != "" {
			sum := sha256.Sum256([]byte(env))
			if a != hex.EncodeToString(sum[:]) {
				t.Errorf("entry %d audit_id %s is not sha256(envelope) (spec §18)", i, a)
			}
		}
		out = append(out, mfEntry{Entry: m, Payload: mfJWSPayload(t, env)})
	}
	return out
}

// mfFindEvent returns the first entry (newest first) of event type typ
// about synthesis id, or nil.
func mfFindEvent(es []mfEntry, typ, id string) *mfEntry {
	for i := range es {
		if str(es[i].Payload, "event_type") == typ && str(es[i].Payload, "synthesis_id") == id {
			return &es[i]
		}
	}
	return nil
}

// mfMethodEntries decodes DISCOVER /methods and checks the §9 shape.
func mfMethodEntries(t testing.TB, r *Resp) []map[string]any {
	t.Helper()
	wantStatus(t, r, 200)
	var out []map[string]any
	for i, e := range r.Array(t) {
		m, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("DISCOVER /methods entry %d is not an object: %v", i, e)
		}
		for _, k := range []string{"method", "path", "description", "tier"} {
			if _, ok := m[k].(string); !ok {
				t.Errorf("DISCOVER /methods entry %d lacks string %q: %v", i, k, m)
			}
		}
		out = append(out, m)
	}
	return out
}

func mfHasPair(list []map[string]any, method, path string) bool {
	for _, m := range list {
		if str(m, "method") == method && str(m, "path") == path {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// §24 items 1–7 on the surfaces attribution_test.go does not cover.

func TestManifestWireHeadersEverySurface(t *testing.T) {
	// confirm-first gives the 461; PROPOSE gives a 263; the rcns budget
	// of 3 (refilled one per minute) gives the 429.
	w := startHotel(t, hotelOpts{Mode: "confirm-first", LegacyCounter: true, Extra: "\t\trate_limit rcns 1 3\n"})
	g := w.GW
	seen := map[string]bool{}
	n := 0
	send := func(t *testing.T, method, path, agent, scope string, body any, kv ...string) (*Resp, map[string]string) {
		t.Helper()
		n++
		h := mfIDs(t, agent, scope, fmt.Sprintf("task-%d", n), kv...)
		return g.Do(t, method, path, h, body), h
	}
	check := func(t *testing.T, r *Resp, h map[string]string, status int) map[string]any {
		t.Helper()
		wantStatus(t, r, status)
		return mfCheckWire(t, r, h, seen)
	}

	t.Run("DISCOVER / manifest", func(t *testing.T) {
		r, h := send(t, "DISCOVER", "/", "", "", nil)
		check(t, r, h, 200)
	})
	t.Run("DISCOVER / directory", func(t *testing.T) {
		r, h := send(t, "DISCOVER", "/", agentA1, "", nil)
		check(t, r, h, 200)
	})
	t.Run("DISCOVER /methods", func(t *testing.T) {
		r, h := send(t, "DISCOVER", "/methods", agentA1, "", nil)
		check(t, r, h, 200)
	})
	t.Run("DISCOVER /patterns", func(t *testing.T) {
		r, h := send(t, "DISCOVER", "/patterns", agentA1, "", nil)
		check(t, r, h, 200)
	})

	var previewID, proposedID string
	t.Run("461", func(t *testing.T) {
		r, h := send(t, "BOOK", "/room", agentA1, scopeAll, bookBody(), "Allow-RCNS", "true")
		check(t, r, h, 461)
		previewID = str(r.Object(t), "synthesis_id")
	})
	t.Run("PROPOSE 263", func(t *testing.T) {
		r, h := send(t, "PROPOSE", "/", agentA1, scopeAll, builtinBody("PROPOSE", wrappedProposal("BOOK", "/room")))
		check(t, r, h, 263)
		proposedID = str(r.Object(t), "synthesis_id")
	})
	if previewID == "" || proposedID == "" {
		t.Fatalf("no contracts to work with (461 %q, 263 %q)", previewID, proposedID)
	}
	t.Run("INSPECT contract", func(t *testing.T) {
		r, h := send(t, "INSPECT", "/", agentA1, scopeAll, builtinBody("INSPECT", map[string]any{"target": "contract", "synthesis_id": previewID}))
		check(t, r, h, 200)
	})
	t.Run("INSPECT lifecycle", func(t *testing.T) {
		r, h := send(t, "INSPECT", "/", agentA1, scopeAll, builtinBody("INSPECT", map[string]any{"target": "lifecycle"}))
		check(t, r, h, 200)
	})
	t.Run("INSPECT unknown attempt 404", func(t *testing.T) {
		r, h := send(t, "INSPECT", "/", agentA1, scopeAll, builtinBody("INSPECT", map[string]any{"target": "rcns-attempt", "attempt_id": "rcns-nope"}))
		check(t, r, h, 404)
	})
	t.Run("INSPECT contract by another agent 403", func(t *testing.T) {
		r, h := send(t, "INSPECT", "/", agentA3, scopeAll, builtinBody("INSPECT", map[string]any{"target": "contract", "synthesis_id": previewID}))
		check(t, r, h, 403)
	})
	t.Run("REVOKE by another agent 403", func(t *testing.T) {
		r, h := send(t, "REVOKE", "/", agentA2, scopeNoRCNS, builtinBody("REVOKE", map[string]any{"target": "contract", "synthesis_id": previewID}))
		check(t, r, h, 403)
	})
	t.Run("REVOKE", func(t *testing.T) {
		r, h := send(t, "REVOKE", "/", agentA1, scopeAll, builtinBody("REVOKE", map[string]any{"target": "contract", "synthesis_id": previewID, "reason": "wire test"}))
		check(t, r, h, 200)
	})
	t.Run("SUSPEND", func(t *testing.T) {
		r, h := send(t, "SUSPEND", "/", agentA1, scopeAll, builtinBody("SUSPEND", map[string]any{"synthesis_id": proposedID, "reason": "wire test"}))
		check(t, r, h, 200)
	})
	var thirdID string
	t.Run("third gate evaluation 461", func(t *testing.T) {
		r, h := send(t, "BOOK", "/room", agentA1, scopeAll, bookBody(), "Allow-RCNS", "true")
		check(t, r, h, 461)
		thirdID = str(r.Object(t), "synthesis_id")
	})
	t.Run("429", func(t *testing.T) {
		r, h := send(t, "BOOK", "/room", agentA1, scopeAll, bookBody(), "Allow-RCNS", "true")
		check(t, r, h, 429)
		if b := r.Object(t); str(b, "scope") != "rcns" {
			t.Errorf("429 body scope %q, want rcns", str(b, "scope"))
		}
	})
	t.Run("262", func(t *testing.T) {
		r, h := send(t, "BOOK", "/room", agentA2, scopeNoRCNS, bookBody(), "Allow-RCNS", "true")
		check(t, r, h, 262)
	})
	t.Run("464", func(t *testing.T) {
		r, h := send(t, "BOOK", "/nowhere", agentOP, scopeAll, nil, "Allow-RCNS", "true")
		check(t, r, h, 464)
	})
	t.Run("presentation 200", func(t *testing.T) {
		if thirdID == "" {
			t.Fatal("the earlier subtest minted no third contract to present")
		}
		r, h := send(t, "BOOK", "/room", agentA1, scopeAll, bookBody(), "Contract-Synthesized", thirdID)
		p := check(t, r, h, 200)
		if str(p, "synthesis_id") != thirdID {
			t.Errorf("presentation Attribution-Record synthesis_id %q, want %s", str(p, "synthesis_id"), thirdID)
		}
	})
	t.Run("Tier B 422", func(t *testing.T) {
		r, h := send(t, "FETCH", "/guests/g-404", agentA1, "hotel:read", nil)
		check(t, r, h, 422)
	})
	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// ---------------------------------------------------------------------------
// §24 items 23–27, 89, 90, 93: the manifest, the built-ins, redirects and
// a deprecated endpoint.

func TestManifestDocument(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\tendpoints " + mfEndpoints + "\n" +
		"\t\tredirect READ /guest-one FETCH /guests/g-1\n" +
		"\t\tredirect LOOKUP * FETCH *\n"})
	g := w.GW

	// §24 23–25 (RCNS §8).
	t.Run("manifest", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/", nil, nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/vnd.agtp.manifest+json" {
			t.Errorf("manifest Content-Type %q, want application/vnd.agtp.manifest+json", r.Header.Get("Content-Type"))
		}
		if r.Header.Get("ETag") == "" {
			t.Errorf("manifest has no ETag (RCNS §8.1 SHOULD)")
		}
		if r.Header.Get("Cache-Control") == "" {
			t.Errorf("manifest has no Cache-Control (RCNS §8.1 SHOULD)")
		}
		m := r.Object(t)
		for _, k := range []string{"agtp_version", "agtp_api_version", "document_version", "catalog_version"} {
			if s, _ := m[k].(string); s == "" {
				t.Errorf("manifest %s = %v, want a non-empty string", k, m[k])
			}
		}
		sup, _ := m["catalog_versions_supported"].([]any)
		if !slices.Contains(sup, m["catalog_version"]) {
			t.Errorf("catalog_version %v not in catalog_versions_supported %v", m["catalog_version"], m["catalog_versions_supported"])
		}
		if got := str(m, "server", "server_id"); got != mfServerID {
			t.Errorf("server.server_id %q, want %q", got, mfServerID)
		}
		if _, ok := field(m, "policies", "synthesis_enabled").(bool); !ok {
			t.Errorf("policies.synthesis_enabled = %v, want a boolean", field(m, "policies", "synthesis_enabled"))
		}
		if d, ok := field(m, "policies", "max_synthesis_depth").(float64); !ok || d < 1 || d != float64(int(d)) {
			t.Errorf("policies.max_synthesis_depth = %v, want a positive integer", field(m, "policies", "max_synthesis_depth"))
		}
		eps, ok := m["endpoints"].([]any)
		if !ok {
			t.Fatalf("manifest endpoints is not an array: %v", m["endpoints"])
		}
		var pairs []map[string]any
		for i, e := range eps {
			em, _ := e.(map[string]any)
			pairs = append(pairs, em)
			hd, ok := em["handler"].(map[string]any)
			if !ok {
				t.Errorf("endpoint %d (%s %s) handler is not an object: %v", i, str(em, "method"), str(em, "path"), em["handler"])
				continue
			}
			for _, k := range []string{"recipe", "url", "function"} {
				if _, ok := hd[k]; ok {
					t.Errorf("endpoint %s %s handler carries %q: %v (api-01 §8.9)", str(em, "method"), str(em, "path"), k, hd)
				}
			}
			if len(hd) != 1 || str(hd, "type") == "" {
				t.Errorf("endpoint %s %s handler is not the projection {\"type\": ...}: %v", str(em, "method"), str(em, "path"), hd)
			}
			if _, ok := em["external_service"]; ok {
				t.Errorf("endpoint %s %s exposes its external_service binding", str(em, "method"), str(em, "path"))
			}
		}
		for _, p := range [][2]string{{"FETCH", "/guests/{guest_id}"}, {"FETCH", "/properties/{property_id}"}, {"RESERVE", "/reservations"}, {"FETCH", "/legacy-guests/{guest_id}"}} {
			if !mfHasPair(pairs, p[0], p[1]) {
				t.Errorf("manifest endpoints lack %s %s", p[0], p[1])
			}
		}
		if mfHasPair(pairs, "FETCH", "/internal-guests/{guest_id}") || strings.Contains(string(r.Body), "/internal-guests") {
			t.Errorf("manifest lists the internal endpoint")
		}
		// No upstream address anywhere in the manifest.
		for _, u := range []string{w.Hotel.URL, w.JS.URL, w.Legacy.URL} {
			host := strings.TrimPrefix(u, "http://")
			if strings.Contains(string(r.Body), host) {
				t.Errorf("manifest contains the upstream address %s", host)
			}
		}
		// The deprecated endpoint carries its deprecated block (RCNS §7.1).
		for _, em := range pairs {
			if str(em, "path") != "/legacy-guests/{guest_id}" {
				continue
			}
			if str(em, "deprecated", "deprecated_in") != "1" || str(em, "deprecated", "removed_in") != "2" ||
				str(em, "deprecated", "successor", "method") != "FETCH" || str(em, "deprecated", "successor", "path") != "/guests/{guest_id}" {
				t.Errorf("deprecated endpoint's deprecated block = %v", em["deprecated"])
			}
		}
		// The configured redirect is published (RCNS §5.4).
		reds, _ := field(m, "policies", "methods", "redirects").([]any)
		found := false
		for _, rd := range reds {
			if str(rd, "from_method") == "READ" && str(rd, "from_path") == "/guest-one" && str(rd, "to_method") == "FETCH" && str(rd, "to_path") == "/guests/g-1" {
				found = true
			}
		}
		if !found {
			t.Errorf("policies.methods.redirects = %v, want the READ /guest-one → FETCH /guests/g-1 entry", reds)
		}
	})

	// §24 26 (RCNS §9).
	t.Run("DISCOVER / with Agent-ID", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/vnd.agtp.manifest+json" {
			t.Errorf("DISCOVER / with Agent-ID answered the manifest")
		}
		dir, ok := r.Object(t)["directory"].([]any)
		if !ok {
			t.Fatalf("no directory array:\n%s", r)
		}
		paths := map[string]string{}
		for i, e := range dir {
			p, tier := str(e, "path"), str(e, "tier")
			if !strings.HasPrefix(p, "/") {
				t.Errorf("directory entry %d path %q", i, p)
			}
			if tier != "A" && tier != "B" {
				t.Errorf("directory entry %d tier %q", i, tier)
			}
			paths[p] = tier
		}
		for _, b := range []string{"/methods", "/patterns", "/contracts"} {
			if paths[b] != "A" {
				t.Errorf("directory lacks %s with tier A: %v", b, dir)
			}
		}
		for _, b := range []string{"/agents", "/genesis", "/tools", "/apis"} {
			if tier, ok := paths[b]; ok && tier != "A" {
				t.Errorf("built-in %s listed with tier %q", b, tier)
			}
		}
	})

	// §24 27 (RCNS §9) and the project's pagination.
	var all []map[string]any
	t.Run("DISCOVER /methods", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/methods", hdr(agentA1, ""), nil)
		all = mfMethodEntries(t, r)
		for _, p := range [][2]string{{"DISCOVER", "/methods"}, {"DISCOVER", "/patterns"}, {"DISCOVER", "/contracts"},
			{"FETCH", "/guests/{guest_id}"}, {"FETCH", "/properties/{property_id}"}, {"RESERVE", "/reservations"}, {"FETCH", "/legacy-guests/{guest_id}"}} {
			if !mfHasPair(all, p[0], p[1]) {
				t.Errorf("DISCOVER /methods lacks %s %s", p[0], p[1])
			}
		}
		for _, m := range all {
			if strings.HasPrefix(str(m, "path"), "/internal-guests") {
				t.Errorf("DISCOVER /methods lists the internal endpoint: %v", m)
			}
			if str(m, "method") == "DISCOVER" && str(m, "tier") != "A" {
				t.Errorf("built-in %s %s has tier %q", str(m, "method"), str(m, "path"), str(m, "tier"))
			}
		}
		if r.Header.Get("Link") != "" {
			t.Errorf("a complete /methods listing has Link %q", r.Header.Get("Link"))
		}
		anon := g.Do(t, "DISCOVER", "/methods", nil, nil)
		if got := mfMethodEntries(t, anon); len(got) != len(all) {
			t.Errorf("anonymous DISCOVER /methods lists %d entries, with Agent-ID %d", len(got), len(all))
		}
	})
	t.Run("DISCOVER /methods pagination", func(t *testing.T) {
		if len(all) < 3 {
			t.Fatalf("need at least 3 /methods entries, have %d", len(all))
		}
		var got []map[string]any
		next := "/methods?limit=2"
		pages := 0
		for next != "" {
			pages++
			if pages > len(all) {
				t.Fatalf("more than %d pages for %d entries", len(all), len(all))
			}
			r := g.Do(t, "DISCOVER", next, hdr(agentA1, ""), nil)
			page := mfMethodEntries(t, r)
			if len(page) > 2 || len(page) == 0 {
				t.Fatalf("page %d (%s) has %d entries, want 1 or 2:\n%s", pages, next, len(page), r)
			}
			got = append(got, page...)
			next = nextLink(t, g, r)
			if next == "" && len(got) < len(all) {
				t.Fatalf("page %d has no Link rel=\"next\" after %d of %d entries:\n%s", pages, len(got), len(all), r)
			}
		}
		if want := (len(all) + 1) / 2; pages != want {
			t.Errorf("%d pages, want %d", pages, want)
		}
		if len(got) != len(all) {
			t.Fatalf("pages hold %d entries, want %d", len(got), len(all))
		}
		for i := range all {
			if str(got[i], "method") != str(all[i], "method") || str(got[i], "path") != str(all[i], "path") {
				t.Errorf("entry %d: paged %s %s, full listing %s %s", i, str(got[i], "method"), str(got[i], "path"), str(all[i], "method"), str(all[i], "path"))
			}
		}
	})

	// §24 89 (RCNS §9, api-01 §5.10).
	t.Run("DISCOVER /methods with another target 400", func(t *testing.T) {
		for _, target := range []string{"patterns", "/contracts", "agents"} {
			r := g.Do(t, "DISCOVER", "/methods", hdr(agentA1, ""), map[string]any{"target": target})
			assertErrorBody(t, r, 400, "")
			r = g.Do(t, "DISCOVER", "/methods", nil, map[string]any{"target": target})
			assertErrorBody(t, r, 400, "")
		}
	})
	t.Run("DISCOVER /methods with its own target", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/methods", hdr(agentA1, ""), map[string]any{"target": "methods"})
		if got := mfMethodEntries(t, r); len(got) != len(all) {
			t.Errorf("DISCOVER /methods target=methods lists %d entries, want %d", len(got), len(all))
		}
	})

	// §24 90 (RCNS §5.4): a redirected pair is served as the target pair.
	direct := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, direct, 200)
	t.Run("redirect exact pair", func(t *testing.T) {
		before := w.Hotel.Count()
		r := g.Do(t, "READ", "/guest-one", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if got, want := field(r.Object(t), "result"), field(direct.Object(t), "result"); !mfJSONEqual(got, want) {
			t.Errorf("READ /guest-one result %v, FETCH /guests/g-1 result %v", got, want)
		}
		reqs := w.Hotel.Requests()
		if len(reqs) != before+1 || reqs[len(reqs)-1].Method != "GET" || reqs[len(reqs)-1].Path != "/guests/g-1" {
			t.Errorf("upstream calls after READ /guest-one: %+v", reqs[before:])
		}
		if h := r.Header.Get("AGTP-Endpoint-Warning"); h != "" {
			t.Errorf("redirect to a current endpoint carries AGTP-Endpoint-Warning %q", h)
		}
	})
	t.Run("redirect any path", func(t *testing.T) {
		r := g.Do(t, "LOOKUP", "/guests/g-2", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		if id := str(r.Object(t), "result", "id"); id != "g-2" {
			t.Errorf("LOOKUP /guests/g-2 result id %q, want g-2:\n%s", id, r)
		}
		r = g.Do(t, "LOOKUP", "/guests/g-404", hdr(agentA1, "hotel:read"), nil)
		b := assertErrorBody(t, r, 422, "guest_not_found")
		if str(b, "error", "code") != "guest_not_found" {
			t.Errorf("LOOKUP /guests/g-404 error.code %q, want guest_not_found", str(b, "error", "code"))
		}
		// A redirected request is checked like the target pair: FETCH
		// /guests/{guest_id} needs hotel:read.
		r = g.Do(t, "LOOKUP", "/guests/g-1", hdr(agentA1, "rcns:negotiate"), nil)
		assertErrorBody(t, r, 262, "")
	})
	t.Run("redirect is pair specific", func(t *testing.T) {
		r := g.Do(t, "READ", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		assertErrorBody(t, r, 405, "")
	})

	// §24 93 (RCNS §4, api-01 §6.5): every response of a deprecated
	// endpoint, success or failure, carries AGTP-Endpoint-Warning.
	const wantWarning = "deprecated; successor=FETCH /guests/{guest_id}; removed_in=2"
	for _, c := range []struct {
		name   string
		path   string
		scope  string
		body   any
		status int
	}{
		{"success", "/legacy-guests/g-1", "hotel:read", nil, 200},
		{"unknown field 422", "/legacy-guests/g-1", "hotel:read", map[string]any{"parameters": map[string]any{"bogus": 1}}, 422},
		{"not found 422", "/legacy-guests/g-404", "hotel:read", nil, 422},
		{"scope not claimed 262", "/legacy-guests/g-1", "rcns:negotiate", nil, 262},
	} {
		t.Run("deprecated endpoint "+c.name, func(t *testing.T) {
			r := g.Do(t, "FETCH", c.path, hdr(agentA1, c.scope), c.body)
			wantStatus(t, r, c.status)
			assertAGTPHeaders(t, r)
			got := r.Header.Get("AGTP-Endpoint-Warning")
			if !strings.HasPrefix(got, "deprecated") {
				t.Fatalf("AGTP-Endpoint-Warning %q, want it to start with deprecated:\n%s", got, r)
			}
			if got != wantWarning {
				t.Errorf("AGTP-Endpoint-Warning %q, want %q", got, wantWarning)
			}
			if c.status == 200 && str(r.Object(t), "result", "id") != "g-1" {
				t.Errorf("deprecated endpoint result:\n%s", r)
			}
		})
	}
	t.Run("current endpoint has no warning", func(t *testing.T) {
		for _, k := range []string{"AGTP-Endpoint-Warning", "AGTP-Catalog-Warning"} {
			if v := direct.Header.Get(k); v != "" {
				t.Errorf("FETCH /guests/g-1 carries %s %q", k, v)
			}
		}
	})

	// Internal endpoints are recipe steps only: not callable by agents.
	t.Run("internal endpoint not callable", func(t *testing.T) {
		before := w.Hotel.Count()
		r := g.Do(t, "FETCH", "/internal-guests/g-1", hdr(agentA1, "hotel:read"), nil)
		assertErrorBody(t, r, 404, "")
		if w.Hotel.Count() != before {
			t.Errorf("an internal endpoint was called for an agent")
		}
	})

	// §24 91, second half (and 12): without `legacy GET`, GET with
	// Agent-ID is 459.
	t.Run("GET with Agent-ID without legacy 459", func(t *testing.T) {
		r := g.Do(t, "GET", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		b := assertErrorBody(t, r, 459, "")
		if str(b, "method") != "GET" {
			t.Errorf("459 body method %q, want GET", str(b, "method"))
		}
	})

	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler: %+v", w.Legacy.Count(), w.Legacy.Requests())
	}
}

// mfJSONEqual compares two decoded JSON values.
func mfJSONEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// ---------------------------------------------------------------------------
// §24 item 88 (RCNS §8.1).
