package integration

import (
	"strings"
	"testing"
)

// TestDiscoverOutsideBuiltins: a DISCOVER of anything but the manifest
// and the built-ins is answered with the AGTP headers and the §19 body:
// with Agent-ID, the unregistered-pair answer. A body target at "/" is
// the path it names (RCNS §9, api-01 §5.10), and the refusal names it
// (it named "/").
func TestDiscoverOutsideBuiltins(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	nope := map[string]any{"parameters": map[string]any{"target": "nope"}}
	t.Run("DISCOVER / target=nope with Agent-ID names the target", func(t *testing.T) {
		b := assertErrorBody(t, g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nope), 404, "not-found")
		if e := str(b, "explanation"); !strings.Contains(e, "DISCOVER /nope") {
			t.Errorf("explanation %q does not name DISCOVER /nope", e)
		}
		if str(b, "path") != "/nope" {
			t.Errorf("body path %q, want /nope", str(b, "path"))
		}
		// The same answer as the path form.
		b2 := assertErrorBody(t, g.Do(t, "DISCOVER", "/nope", hdr(agentA1, ""), nil), 404, "not-found")
		if str(b2, "explanation") != str(b, "explanation") {
			t.Errorf("DISCOVER /nope explains %q, DISCOVER / target=nope %q", str(b2, "explanation"), str(b, "explanation"))
		}
	})
	t.Run("DISCOVER / target=guests/g-1 with Agent-ID", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), map[string]any{"parameters": map[string]any{"target": "guests/g-1"}})
		b := assertErrorBody(t, r, 405, "method-not-allowed")
		if e := str(b, "explanation"); !strings.Contains(e, "DISCOVER /guests/g-1") {
			t.Errorf("explanation %q does not name DISCOVER /guests/g-1", e)
		}
	})
	if w.Legacy.Count() != 0 || w.Hotel.Count() != 0 {
		t.Errorf("DISCOVER reached an upstream (legacy %d, hotel %d)", w.Legacy.Count(), w.Hotel.Count())
	}
}
