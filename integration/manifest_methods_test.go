package integration

import (
	"encoding/json"
	"mime"
	"slices"
	"strings"
	"testing"
)

func TestManifestAnonymousDiscoveryDisabled(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\tanonymous_discovery false\n"})
	g := w.GW
	for _, path := range []string{"/", "/methods", "/patterns"} {
		t.Run("anonymous DISCOVER "+path, func(t *testing.T) {
			r := g.Do(t, "DISCOVER", path, nil, nil)
			b := assertErrorBody(t, r, 262, "")
			if str(b, "reason") != "anonymous-discovery-disabled" && str(b, "type") != "anonymous-discovery-disabled" {
				t.Errorf("262 does not name anonymous-discovery-disabled (reason %q, type %q)", str(b, "reason"), str(b, "type"))
			}
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/vnd.agtp.manifest+json" {
				t.Errorf("262 answered with the manifest media type")
			}
			if strings.Contains(string(r.Body), "catalog_versions_supported") {
				t.Errorf("262 body leaks the manifest:\n%s", r)
			}
		})
	}
	t.Run("DISCOVER / with Agent-ID still answers", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		if _, ok := r.Object(t)["directory"].([]any); !ok {
			t.Errorf("no directory:\n%s", r)
		}
		r = g.Do(t, "DISCOVER", "/methods", hdr(agentA1, ""), nil)
		mfMethodEntries(t, r)
	})
	if w.Legacy.Count() != 0 || w.Hotel.Count() != 0 {
		t.Errorf("discovery reached an upstream (legacy %d, hotel %d)", w.Legacy.Count(), w.Hotel.Count())
	}
}

// ---------------------------------------------------------------------------
// §24 item 91 (RCNS §5.4, §16.2): legacy GET with the default aliases.

func TestManifestLegacyGETAlias(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", Extra: "\t\tlegacy GET\n"})
	g := w.GW

	direct := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, direct, 200)
	t.Run("FETCH carries no requested_method", func(t *testing.T) {
		if _, ok := attribution(t, direct)["requested_method"]; ok {
			t.Errorf("FETCH Attribution-Record has requested_method: %v", attribution(t, direct))
		}
	})
	t.Run("GET with Agent-ID is FETCH", func(t *testing.T) {
		before := w.Hotel.Count()
		r := g.Do(t, "GET", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		b := r.Object(t)
		if str(b, "result", "id") != "g-1" || str(b, "result", "name") != "Ada Lovelace" {
			t.Errorf("GET /guests/g-1 result is not the guest:\n%s", r)
		}
		if !mfJSONEqual(b["result"], field(direct.Object(t), "result")) {
			t.Errorf("GET result %v differs from FETCH result %v", b["result"], field(direct.Object(t), "result"))
		}
		if p := attribution(t, r); str(p, "requested_method") != "GET" {
			t.Errorf("Attribution-Record requested_method %q, want GET: %v", str(p, "requested_method"), p)
		}
		if w.Hotel.Count() != before+1 {
			t.Errorf("hotel upstream calls %d → %d, want one FETCH call", before, w.Hotel.Count())
		}
	})
	t.Run("GET failure is FETCH failure", func(t *testing.T) {
		r := g.Do(t, "GET", "/guests/g-404", hdr(agentA1, "hotel:read"), nil)
		b := assertErrorBody(t, r, 422, "guest_not_found")
		if str(b, "error", "code") != "guest_not_found" {
			t.Errorf("error.code %q", str(b, "error", "code"))
		}
		if p := attribution(t, r); str(p, "requested_method") != "GET" {
			t.Errorf("Attribution-Record requested_method %q, want GET", str(p, "requested_method"))
		}
	})
	t.Run("GET without Agent-ID stays legacy HTTP", func(t *testing.T) {
		status, h, body := plainRequest(t, "GET", g.URL+"/guests/g-1", nil, nil)
		if status != 200 || h.Get("Attribution-Record") != "" || h.Get("AGTP-API-Version") != "" {
			t.Fatalf("plain GET: %d %v %s", status, h, body)
		}
		var m map[string]any
		if json.Unmarshal(body, &m) != nil || str(m, "id") != "g-1" {
			t.Errorf("plain GET body is not json-server's guest: %s", body)
		}
	})
	t.Run("POST with Agent-ID not admitted 459", func(t *testing.T) {
		r := g.Do(t, "POST", "/reservations", hdr(agentA1, "hotel:book"), map[string]any{"parameters": map[string]any{}})
		b := assertErrorBody(t, r, 459, "")
		if str(b, "method") != "POST" {
			t.Errorf("459 body method %q, want POST", str(b, "method"))
		}
	})
}

// ---------------------------------------------------------------------------
// §24 item 92 (RCNS §4, api-01 §4.4): a method deprecated in the loaded
// catalog.

func TestManifestCatalogDeprecatedMethod(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\tcatalog " + mfCatalog + "\n"})
	g := w.GW
	const want = "deprecated; successor=RETRIEVE; removed_in=2.0.0"
	checkWarning := func(t *testing.T, r *Resp) {
		t.Helper()
		got := r.Header.Get("AGTP-Catalog-Warning")
		if !strings.HasPrefix(got, "deprecated") {
			t.Fatalf("AGTP-Catalog-Warning %q, want deprecated…:\n%s", got, r)
		}
		if got != want {
			t.Errorf("AGTP-Catalog-Warning %q, want %q", got, want)
		}
	}
	t.Run("deprecated method still processed", func(t *testing.T) {
		before := w.Hotel.Count()
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if str(r.Object(t), "result", "id") != "g-1" {
			t.Errorf("result:\n%s", r)
		}
		if w.Hotel.Count() != before+1 {
			t.Errorf("the deprecated method did not reach the upstream")
		}
		checkWarning(t, r)
	})
	t.Run("deprecated method failure", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-404", hdr(agentA1, "hotel:read"), nil)
		assertErrorBody(t, r, 422, "guest_not_found")
		checkWarning(t, r)
	})
	t.Run("other methods carry no warning", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/methods", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		if v := r.Header.Get("AGTP-Catalog-Warning"); v != "" {
			t.Errorf("DISCOVER carries AGTP-Catalog-Warning %q", v)
		}
	})
	t.Run("manifest names the loaded catalog", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/", nil, nil)
		wantStatus(t, r, 200)
		m := r.Object(t)
		if str(m, "catalog_version") != "1.1.0" {
			t.Errorf("catalog_version %q, want 1.1.0", str(m, "catalog_version"))
		}
		if sup, _ := m["catalog_versions_supported"].([]any); !slices.Contains(sup, any("1.1.0")) {
			t.Errorf("catalog_versions_supported %v lacks 1.1.0", m["catalog_versions_supported"])
		}
	})
	t.Run("459 names the loaded catalog", func(t *testing.T) {
		r := g.Do(t, "FROBNICATE", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		b := assertErrorBody(t, r, 459, "")
		if str(b, "catalog_version") != "1.1.0" {
			t.Errorf("459 catalog_version %q, want 1.1.0", str(b, "catalog_version"))
		}
	})
}

// ---------------------------------------------------------------------------
// §24 items 94, 95 (RCNS §3; ids-02 §4.3, §9.2; agtp-09 §7.3).
