package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// assertNamedError checks a 422 named error: reason and error.code equal
// code (RCNS §7.3, §19).
func assertNamedError(t testing.TB, r *Resp, code string) map[string]any {
	t.Helper()
	b := assertErrorBody(t, r, 422, code)
	if got := str(b, "error", "code"); got != code {
		t.Errorf("error.code = %q, want %q:\n%s", got, code, r)
	}
	return b
}

// Tier B endpoints on the hotel API (RCNS §7; §24 item 83).
func TestTierBHotel(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	t.Run("FETCH guest", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		b := r.Object(t)
		if got, _ := b["status"].(float64); got != 200 {
			t.Errorf("envelope status = %v", b["status"])
		}
		_, _, direct := w.JS.Get(t, "/guests/g-1")
		if string(mustJSON(t, b["result"])) != string(mustJSON(t, decodeJSON(t, direct))) {
			t.Errorf("result %v differs from the upstream record %s", b["result"], direct)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/vnd.agtp+json" {
			t.Errorf("Content-Type = %q, want application/vnd.agtp+json", ct)
		}
	})

	t.Run("FETCH property", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/properties/p-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		if str(r.Object(t), "result", "city") != "Lisbon" {
			t.Errorf("property result:\n%s", r)
		}
	})

	// §24 83: unknown input field.
	t.Run("unknown input field 422", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"),
			map[string]any{"parameters": map[string]any{"bogus": true}})
		assertErrorBody(t, r, 422, "")
		r = g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book"),
			map[string]any{"parameters": map[string]any{"guest_id": "g-1", "property_id": "p-1",
				"check_in": demoCheckIn, "nights": 1, "bogus": true}})
		assertErrorBody(t, r, 422, "")
		r = g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book"),
			map[string]any{"parameters": map[string]any{"guest_id": "g-1", "property_id": "p-1",
				"check_in": demoCheckIn, "nights": 0}})
		assertErrorBody(t, r, 422, "")
		w.assertReservations(t, 0)
	})

	// A body of 60,000 unknown keys (about 700 KB) is answered with a 422
	// of a few hundred bytes: the violation names five keys and how many
	// more, once in the explanation and once in error.details (it was
	// the whole key list twice, larger than the request).
	t.Run("invalid-input answer is bounded", func(t *testing.T) {
		before := w.Hotel.Count()
		params := map[string]any{}
		for i := range 60_000 {
			params[fmt.Sprintf("k%05d", i)] = i
		}
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), map[string]any{"parameters": params})
		b := assertNamedError(t, r, "invalid-input")
		if len(r.Body) > 2048 {
			t.Errorf("the 422 is %d bytes: %.300s", len(r.Body), r.Body)
		}
		const want = "at /: additional properties 'k00000', 'k00001', 'k00002', 'k00003', 'k00004' and 59995 more not allowed"
		if e := str(b, "explanation"); e != "input does not match input_schema: "+want {
			t.Errorf("explanation = %q", e)
		}
		vs, _ := field(b, "error", "details", "violations").([]any)
		if len(vs) != 1 || vs[0] != want {
			t.Errorf("error.details.violations = %v, want [%q]", vs, want)
		}
		if n, _ := field(b, "error", "details", "violation_count").(float64); n != 1 {
			t.Errorf("error.details.violation_count = %v, want 1", field(b, "error", "details", "violation_count"))
		}
		if n := w.Hotel.Count(); n != before {
			t.Errorf("invalid input reached the hotel upstream")
		}
	})

	// error_map: upstream 404 → the endpoint's named error.
	t.Run("upstream 404 mapped", func(t *testing.T) {
		assertNamedError(t, g.Do(t, "FETCH", "/guests/g-404", hdr(agentA1, "hotel:read"), nil), "guest_not_found")
		assertNamedError(t, g.Do(t, "FETCH", "/properties/p-404", hdr(agentA1, "hotel:read"), nil), "property_not_found")
	})

	t.Run("RESERVE creates one reservation", func(t *testing.T) {
		r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book"),
			map[string]any{"parameters": map[string]any{"guest_id": "g-2", "property_id": "p-2",
				"check_in": "2027-02-01", "nights": 1}})
		wantStatus(t, r, 200)
		rs := w.assertReservations(t, 1)
		if field(r.Object(t), "result", "id") != rs[0]["id"] || rs[0]["guest_id"] != "g-2" {
			t.Errorf("RESERVE result %s vs stored %v", r.Body, rs[0])
		}
	})

	// Required scopes of a Tier B endpoint (§11.5): granted but not
	// claimed → 262 scope-required; OP-9: no Authority-Scope → 262.
	t.Run("scope checks", func(t *testing.T) {
		before := w.Hotel.Count()
		defer func() {
			if n := w.Hotel.Count() - before; n != 0 {
				t.Errorf("scope refusals made %d hotel upstream calls", n)
			}
		}()
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:book"), nil)
		b := assertErrorBody(t, r, 262, "")
		if str(b, "type") != "scope-required" && str(b, "reason") != "scope-required" {
			t.Errorf("262 does not name scope-required:\n%s", r)
		}
		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, ""), nil)
		b = assertErrorBody(t, r, 262, "")
		if str(b, "type") != "scope-required" && str(b, "reason") != "scope-required" {
			t.Errorf("262 does not name scope-required:\n%s", r)
		}
	})

	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// Tier B against go-httpbin and dead upstreams: query merge (§24 96),
// headers never forwarded (§24 82) and the upstream error mapping
// (RCNS §7.3).
func TestTierBUpstreams(t *testing.T) {
	w := startLab(t, "optimistic", "")
	g := w.GW

	// §24 96: query-string parameters reach the input; the body wins.
	t.Run("query parameters reach the input", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/reflect?color=blue&size=m", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		b := r.Object(t)
		if !argIs(field(b, "result", "args", "color"), "blue") || !argIs(field(b, "result", "args", "size"), "m") {
			t.Errorf("upstream args = %v, want color=blue size=m", field(b, "result", "args"))
		}
	})
	t.Run("body parameter wins over query", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/reflect?color=red&size=s", hdr(agentA1, "hotel:read"),
			map[string]any{"parameters": map[string]any{"size": "xl"}})
		wantStatus(t, r, 200)
		b := r.Object(t)
		if !argIs(field(b, "result", "args", "color"), "red") || !argIs(field(b, "result", "args", "size"), "xl") {
			t.Errorf("upstream args = %v, want color=red size=xl", field(b, "result", "args"))
		}
	})
	t.Run("percent-decoded query", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/reflect?color=deep%20blue&size=m", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		if !argIs(field(r.Object(t), "result", "args", "color"), "deep blue") {
			t.Errorf("upstream args = %v, want color=deep blue", field(r.Object(t), "result", "args"))
		}
	})
	t.Run("unknown query parameter 422", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/reflect?color=red&size=s&bogus=1", hdr(agentA1, "hotel:read"), nil)
		assertErrorBody(t, r, 422, "")
	})

	// §24 82: what the upstream saw.
	forbidden := []string{"agent-id", "owner-id", "authority-scope", "allow-rcns", "contract-synthesized",
		"synthesis-id", "authorization", "signature", "signature-input"}
	t.Run("no identity headers upstream (Tier B)", func(t *testing.T) {
		r := g.Do(t, "SUBMIT", "/reflect", hdr(agentA1, "hotel:read",
			"Owner-ID", "hotel-ops", "Allow-RCNS", "true"),
			map[string]any{"parameters": map[string]any{"marker": "m-1"}})
		wantStatus(t, r, 200)
		b := r.Object(t)
		if str(b, "result", "json", "marker") != "m-1" {
			t.Errorf("upstream body = %v, want the input", field(b, "result", "json"))
		}
		names := headerNames(field(b, "result", "headers"))
		if len(names) == 0 {
			t.Fatalf("httpbin echoed no headers:\n%s", r)
		}
		for _, h := range forbidden {
			if slices.Contains(names, h) {
				t.Errorf("upstream received %s (headers %v)", h, names)
			}
		}
	})
	t.Run("caller Authorization not forwarded", func(t *testing.T) {
		r := g.Do(t, "SUBMIT", "/reflect", hdr(agentA1, "hotel:read",
			"Authorization", "Bearer caller-token-not-for-upstream"),
			map[string]any{"parameters": map[string]any{"marker": "m-2"}})
		wantStatus(t, r, 200)
		if names := headerNames(field(r.Object(t), "result", "headers")); slices.Contains(names, "authorization") {
			t.Errorf("upstream received the caller's Authorization (headers %v)", names)
		}
	})
	t.Run("no identity headers upstream (contract)", func(t *testing.T) {
		body := map[string]any{"parameters": map[string]any{"marker": "via-gate"}}
		r := g.Do(t, "ANALYZE", "/upstream-view", hdr(agentA1, "rcns:negotiate, hotel:read",
			"Allow-RCNS", "true", "Owner-ID", "hotel-ops"), body)
		wantStatus(t, r, 263)
		id := r.Header.Get("Contract-Synthesized")
		names := headerNames(field(r.Object(t), "result", "seen", "headers"))
		if len(names) == 0 {
			t.Fatalf("no upstream echo in the 263:\n%s", r)
		}
		for _, h := range forbidden {
			if slices.Contains(names, h) {
				t.Errorf("gate synthesis: upstream received %s (headers %v)", h, names)
			}
		}
		r = g.Do(t, "ANALYZE", "/upstream-view", hdr(agentA1, "hotel:read",
			"Contract-Synthesized", id), map[string]any{"parameters": map[string]any{"marker": "via-contract"}})
		wantStatus(t, r, 200)
		if str(r.Object(t), "result", "seen", "json", "marker") != "via-contract" {
			t.Errorf("contract invocation result:\n%s", r)
		}
		names = headerNames(field(r.Object(t), "result", "seen", "headers"))
		for _, h := range forbidden {
			if slices.Contains(names, h) {
				t.Errorf("contract invocation: upstream received %s (headers %v)", h, names)
			}
		}
	})

	// RCNS §7.3 upstream mapping.
	for _, c := range []struct{ path, code string }{
		{"/slow", "upstream_timeout"},
		{"/unreachable", "upstream_connection_error"},
		{"/html-page", "upstream_malformed_response"},
		{"/locked", "upstream_authentication_failed"},
		{"/broken", "upstream_error"},
	} {
		t.Run("FETCH "+c.path+" "+c.code, func(t *testing.T) {
			r := g.Do(t, "FETCH", c.path, hdr(agentA1, "hotel:read"), nil)
			b := assertNamedError(t, r, c.code)
			assertNoRCNSSignal(t, r)
			// details.upstream_status only when the upstream answered.
			details, _ := field(b, "error", "details").(map[string]any)
			st, has := details["upstream_status"]
			if answered := c.code != "upstream_timeout" && c.code != "upstream_connection_error"; has != answered || (has && st == 0.0) {
				t.Errorf("error.details.upstream_status = %v (present %v), want present and non-zero only when the upstream answered:\n%s", st, has, r)
			}
		})
	}
}

// argIs reports whether an httpbin args entry (an array of strings) is [want].
func argIs(v any, want string) bool {
	a, ok := v.([]any)
	return ok && len(a) == 1 && a[0] == want
}

func decodeJSON(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}
