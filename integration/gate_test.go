package integration

import (
	"strconv"
	"strings"
	"testing"
)

// Spec §24 items 16, 18, 28–33: the four-lock gate (RCNS §11). Every
// refusal leaves json-server untouched: no hotel upstream call, no new
// reservation, nothing falls through to the legacy handler.
func TestGateRefusals(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	// §24 16: lock 2 closed → ordinary 404, no RCNS signalling.
	absent := w.book(t, agentA1, scopeAll)
	ab := assertErrorBody(t, absent, 404, "")
	assertNoRCNSSignal(t, absent)

	// §24 18: only the exact value "true" opens lock 2; "false" and any
	// other value get the absent header's answer (status, reason, no
	// RCNS signal), the others with an explanation that names the
	// accepted values (cases/04: not a bare 404).
	t.Run("Allow-RCNS false", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "false")
		b := assertErrorBody(t, r, absent.Status, "")
		if str(b, "reason") != str(ab, "reason") {
			t.Errorf("reason %q, want the absent-header reason %q", str(b, "reason"), str(ab, "reason"))
		}
		assertNoRCNSSignal(t, r)
	})
	for _, v := range []string{"TRUE", "True", "1", "optimistic", "yes", ""} {
		t.Run("Allow-RCNS "+quoteOrEmpty(v), func(t *testing.T) {
			r := w.book(t, agentA1, scopeAll, "Allow-RCNS", v)
			b := assertErrorBody(t, r, absent.Status, "")
			if str(b, "reason") != str(ab, "reason") {
				t.Errorf("reason %q, want the absent-header reason %q", str(b, "reason"), str(ab, "reason"))
			}
			if e := str(b, "explanation"); !strings.Contains(e, "Allow-RCNS "+strconv.Quote(v)+" is not a value this gateway understands") || !strings.Contains(e, `the accepted values are "true"`) {
				t.Errorf("explanation %q does not name the value and the accepted ones", e)
			}
			assertNoRCNSSignal(t, r)
		})
	}

	// §24 29: lock 3 (caller scope) closed: A2 lacks rcns:negotiate.
	t.Run("noscope agent 262 scope-required", func(t *testing.T) {
		r := w.book(t, agentA2, scopeNoRCNS, "Allow-RCNS", "true")
		b := assertErrorBody(t, r, 262, "")
		if str(b, "type") != "scope-required" {
			t.Errorf("262 type = %q, want scope-required:\n%s", str(b, "type"), r)
		}
		if str(b, "scope") != "rcns:negotiate" {
			t.Errorf("262 scope = %q, want rcns:negotiate:\n%s", str(b, "scope"), r)
		}
	})

	// Lock 3 also closes when a granted rcns:negotiate is not claimed.
	t.Run("unclaimed rcns:negotiate 262", func(t *testing.T) {
		r := w.book(t, agentA1, scopeNoRCNS, "Allow-RCNS", "true")
		b := assertErrorBody(t, r, 262, "")
		if str(b, "type") != "scope-required" || str(b, "scope") != "rcns:negotiate" {
			t.Errorf("262 body type/scope = %q/%q:\n%s", str(b, "type"), str(b, "scope"), r)
		}
	})

	// §24 30: lock 4 (trust tier): tier 3 against the default minimum 1.
	t.Run("tier3 464 trust-tier-insufficient", func(t *testing.T) {
		r := w.book(t, agentA3, scopeAll, "Allow-RCNS", "true")
		assert464(t, r, "trust-tier-insufficient")
	})

	// §24 31: all locks open, no recipe for the pair.
	t.Run("no recipe 464 composition-impossible", func(t *testing.T) {
		r := g.Do(t, "BOOK", "/suite", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
		assert464(t, r, "composition-impossible")
	})

	// Without Allow-RCNS the same pair is a plain 404.
	t.Run("no recipe without opt-in 404", func(t *testing.T) {
		r := g.Do(t, "BOOK", "/suite", hdr(agentA1, scopeAll), bookBody())
		assertErrorBody(t, r, 404, "")
		assertNoRCNSSignal(t, r)
	})

	// §24 33: no upstream call for any refused evaluation.
	if n := w.Hotel.Count(); n != 0 {
		t.Errorf("refused gate evaluations made %d hotel upstream calls: %+v", n, w.Hotel.Requests())
	}
	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler: %+v", n, w.Legacy.Requests())
	}
	w.assertReservations(t, 0)
	if cs := contracts(t, g, agentA1); len(cs) != 0 {
		t.Errorf("refusals created contracts: %v", cs)
	}
}

// §24 28: lock 1 (server policy) closed.
func TestGateDisabled(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", Disabled: true, LegacyCounter: true})

	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	assert464(t, r, "rcns-disabled")

	// OP-1: callers that did not opt in see nothing RCNS-specific.
	r = w.book(t, agentA1, scopeAll)
	assertErrorBody(t, r, 404, "")
	assertNoRCNSSignal(t, r)

	// Tier B endpoints still work with RCNS off.
	r = w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, r, 200)

	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
	if w.Hotel.Count() != 1 {
		t.Errorf("hotel upstream calls = %d, want 1 (the Tier B FETCH)", w.Hotel.Count())
	}
	w.assertReservations(t, 0)
}

func quoteOrEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}
