package integration

import (
	"strings"
	"testing"
)

// TestDiscoverOutsideBuiltins: a DISCOVER of anything but the manifest
// and the built-ins is answered with the AGTP headers and the §19 body.
// Without Agent-ID it is 401 agent-unauthenticated (identity, RCNS §10
// step 6, comes before the match; it was an empty 200 without
// Server-ID, Response-ID, Attribution-Record or Content-Type); with
// one it is the unregistered-pair answer. A body target at "/" is the
// path it names (RCNS §9, api-01 §5.10), and the refusal names it.
func TestDiscoverOutsideBuiltins(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	nope := map[string]any{"parameters": map[string]any{"target": "nope"}}
	for _, tc := range []struct {
		path string
		body any
		want string // the pair the refusal names
	}{
		{path: "/guests/g-1", want: "/guests/g-1"},
		{path: "/room", want: "/room"},
		{path: "/nope", want: "/nope"},
		{path: "/patterns/x", want: "/patterns/x"},
		{path: "/", body: nope, want: "/nope"},
	} {
		t.Run("anonymous DISCOVER "+tc.path+" "+tc.want, func(t *testing.T) {
			r := g.Do(t, "DISCOVER", tc.path, nil, tc.body)
			b := assertErrorBody(t, r, 401, "agent-unauthenticated")
			if !mfJSONMediaType(r.Header.Get("Content-Type")) {
				t.Errorf("Content-Type %q is not JSON", r.Header.Get("Content-Type"))
			}
			if e := str(b, "explanation"); !strings.Contains(e, "DISCOVER "+tc.want) || !strings.Contains(e, "Agent-ID") {
				t.Errorf("explanation %q does not name DISCOVER %s and Agent-ID", e, tc.want)
			}
			if str(b, "path") != tc.want {
				t.Errorf("body path %q, want %q", str(b, "path"), tc.want)
			}
		})
	}
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
