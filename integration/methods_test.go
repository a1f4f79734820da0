package integration

import (
	"slices"
	"testing"
)

// The 18 floor methods (RCNS §5.1).
var floorMethods = []string{
	"QUERY", "DISCOVER", "DESCRIBE", "INSPECT", "SUMMARIZE", "PLAN", "PROPOSE",
	"EXECUTE", "DELEGATE", "ESCALATE", "CONFIRM", "SUSPEND", "NOTIFY",
	"ACTIVATE", "DEACTIVATE", "REINSTATE", "REVOKE", "DEPRECATE",
}

// Spec §24 items 8–17: request line, methods, paths (RCNS §2.1, §5, §6).
func TestMethodsAndPaths(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	// §24 8: '#' in the request target.
	t.Run("hash in target is invalid-request-line", func(t *testing.T) {
		r := g.Raw(t, "FETCH /guests/g-1#frag HTTP/1.1\r\n"+
			"Host: "+g.Addr+"\r\n"+
			"Agent-ID: "+agentA1+"\r\n"+
			"Authority-Scope: hotel:read\r\n"+
			"Content-Length: 0\r\n"+
			"Connection: close\r\n\r\n")
		b := assertErrorBody(t, r, 400, "invalid-request-line")
		// The path as net/http reads it, '#' kept; the native door
		// names the same (TestNativeFraming).
		if p := str(b, "path"); p != "/guests/g-1#frag" {
			t.Errorf("path %q, want /guests/g-1#frag: %s", p, r.Body)
		}
	})
	// A percent-encoded '#' is an ordinary character of a segment: the
	// value is escaped as one upstream segment and json-server has no such
	// guest.
	t.Run("encoded hash is not a fragment", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g%231", hdr(agentA1, "hotel:read"), nil)
		assertNamedError(t, r, "guest_not_found")
	})

	// §24 9, 10: methods outside the catalog.
	for _, m := range []string{"FROBNICATE", "book", "BO", "B00K", "Book"} {
		t.Run("459 "+m, func(t *testing.T) {
			r := g.Do(t, m, "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
			b := assertErrorBody(t, r, 459, "")
			if str(b, "method") != m {
				t.Errorf("459 body method = %q, want %q", str(b, "method"), m)
			}
			if str(b, "catalog_version") == "" {
				t.Errorf("459 body has no catalog_version:\n%s", r)
			}
			assertNoRCNSSignal(t, r)
		})
	}

	// §24 11: a floor method is never 459 (and /nothing-here is a legal path).
	t.Run("floor methods never 459", func(t *testing.T) {
		for _, m := range floorMethods {
			r := g.Do(t, m, "/nothing-here", hdr(agentA1, "hotel:read"), nil)
			if r.Status == 459 || r.Status == 460 {
				t.Errorf("%s /nothing-here -> %d:\n%s", m, r.Status, r)
			}
			assertAGTPHeaders(t, r)
		}
	})

	// §24 12: a legacy verb with Agent-ID, legacy NONE (default).
	t.Run("GET with Agent-ID is 459", func(t *testing.T) {
		r := g.Do(t, "GET", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		b := assertErrorBody(t, r, 459, "")
		if str(b, "method") != "GET" {
			t.Errorf("459 body method = %q, want GET", str(b, "method"))
		}
	})

	// §24 14: a path segment that is a catalog method, compared
	// case-insensitively after removing '-' and '_'.
	for _, seg := range []string{"query", "Query", "q-uery", "q_uery", "book"} {
		t.Run("460 segment "+seg, func(t *testing.T) {
			r := g.Do(t, "FETCH", "/items/"+seg, hdr(agentA1, "hotel:read"), nil)
			b := assertErrorBody(t, r, 460, "")
			if str(b, "segment") != seg {
				t.Errorf("460 body segment = %q, want %q", str(b, "segment"), seg)
			}
		})
	}

	// §24 15: trailing slash.
	for _, p := range []string{"/guests/", "/room/"} {
		t.Run("460 trailing slash "+p, func(t *testing.T) {
			r := g.Do(t, "FETCH", p, hdr(agentA1, "hotel:read"), nil)
			assertErrorBody(t, r, 460, "")
		})
	}

	// §24 16: unknown path, no Allow-RCNS → 404 without RCNS signalling.
	t.Run("unknown path 404", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/nothing-here", hdr(agentA1, "hotel:read"), nil)
		assertErrorBody(t, r, 404, "")
		assertNoRCNSSignal(t, r)
	})

	// §24 17: known path, method not served there → 405.
	t.Run("known path other method 405", func(t *testing.T) {
		r := g.Do(t, "QUOTE", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		b := assertErrorBody(t, r, 405, "")
		allowed, ok := b["allowed_methods_for_path"].([]any)
		if !ok || !slices.Contains(allowed, any("FETCH")) {
			t.Errorf("allowed_methods_for_path = %v, want an array with FETCH", b["allowed_methods_for_path"])
		}
		if _, ok := b["redirects_for_path"].(map[string]any); !ok {
			t.Errorf("redirects_for_path = %v, want an object", b["redirects_for_path"])
		}
		assertNoRCNSSignal(t, r)
	})

	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler: %+v", n, w.Legacy.Requests())
	}
	// Only the encoded-hash FETCH reaches the hotel API.
	if n := w.Hotel.Count(); n != 1 {
		t.Errorf("hotel upstream calls = %d, want 1 (refused requests make none): %+v", n, w.Hotel.Requests())
	}
	w.assertReservations(t, 0)
}

// §24 13: a disallowed method is 405 with the two path fields.
func TestDisallowedMethod(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", Extra: "\t\tdisallow RESERVE\n", LegacyCounter: true})
	body := map[string]any{"parameters": map[string]any{
		"guest_id": "g-1", "property_id": "p-1", "check_in": demoCheckIn, "nights": 1}}
	r := w.GW.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book"), body)
	b := assertErrorBody(t, r, 405, "")
	if _, ok := b["allowed_methods_for_path"].([]any); !ok {
		t.Errorf("allowed_methods_for_path = %v, want an array", b["allowed_methods_for_path"])
	}
	if _, ok := b["redirects_for_path"].(map[string]any); !ok {
		t.Errorf("redirects_for_path = %v, want an object", b["redirects_for_path"])
	}
	if w.Hotel.Count() != 0 || w.Legacy.Count() != 0 {
		t.Errorf("disallowed request reached an upstream (hotel %d, legacy %d)", w.Hotel.Count(), w.Legacy.Count())
	}
	w.assertReservations(t, 0)

	// The other methods are still served.
	r = w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, r, 200)
}
