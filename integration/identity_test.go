package integration

import (
	"fmt"
	"strings"
	"testing"
)

// Spec §24 items 19–22: Agent-ID and Authority-Scope (RCNS §3).
func TestIdentity(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	// §24 19: not 64 lowercase hex.
	malformed := map[string]string{
		"short":     "abc123",
		"uppercase": strings.ToUpper(agentA1),
		"65 chars":  agentA1 + "0",
		"non-hex":   strings.Repeat("g", 64),
		"name":      "rcns-demo-agent",
	}
	for name, id := range malformed {
		t.Run("malformed "+name, func(t *testing.T) {
			r := g.Do(t, "FETCH", "/guests/g-1", hdr(id, "hotel:read"), nil)
			assertErrorBody(t, r, 400, "invalid-canonical-id")
		})
	}

	// §24 20: well-formed but not registered.
	t.Run("unknown agent 401", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentID("nobody-registered"), "hotel:read"), nil)
		assertErrorBody(t, r, 401, "agent-unauthenticated")
	})

	// §24 21: claiming a scope the agent was not granted.
	claimInvalid := []struct {
		name, agent, scope, method, path string
		body                             any
	}{
		{"A1 claims vault:read on Tier B", agentA1, "hotel:read, vault:read", "FETCH", "/guests/g-1", nil},
		{"A2 claims rcns:negotiate at the gate", agentA2, scopeAll, "BOOK", "/room", bookBody()},
		{"A1 claims inspect:all", agentA1, "hotel:read, inspect:all", "FETCH", "/guests/g-1", nil},
	}
	for _, c := range claimInvalid {
		t.Run("262 "+c.name, func(t *testing.T) {
			r := g.Do(t, c.method, c.path, hdr(c.agent, c.scope, "Allow-RCNS", "true"), c.body)
			b := assertErrorBody(t, r, 262, "")
			if str(b, "reason") != "scope-claim-invalid" && str(b, "type") != "scope-claim-invalid" {
				t.Errorf("262 body names neither reason nor type scope-claim-invalid:\n%s", r)
			}
		})
	}

	// A claim of 1500 ungranted tokens, each sent twice, is answered
	// with the first 8 and their count, not a 14.6 KB echo.
	t.Run("262 echo bounded", func(t *testing.T) {
		toks := []string{"hotel:read"}
		for i := range 1500 {
			toks = append(toks, fmt.Sprintf("a:%d", i), fmt.Sprintf("a:%d", i))
		}
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, strings.Join(toks, ", ")), nil)
		b := assertErrorBody(t, r, 262, "scope-claim-invalid")
		if got := fmt.Sprint(b["missing_scopes"]); got != "[a:0 a:1 a:2 a:3 a:4 a:5 a:6 a:7]" {
			t.Errorf("missing_scopes = %s, want the first 8", got)
		}
		if n, _ := b["missing_scope_count"].(float64); n != 1500 {
			t.Errorf("missing_scope_count = %v, want 1500", b["missing_scope_count"])
		}
		if e := str(b, "explanation"); !strings.Contains(e, "a:7 and 1492 more,") {
			t.Errorf("explanation %q does not say how many more", e)
		}
		if len(r.Body) > 1024 {
			t.Errorf("the 262 body is %d bytes:\n%s", len(r.Body), r)
		}
	})

	// §24 22: whitespace after commas is optional.
	t.Run("comma spacing", func(t *testing.T) {
		var results []string
		for _, scope := range []string{"hotel:read,hotel:book", "hotel:read, hotel:book", "hotel:read ,  hotel:book"} {
			r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, scope), nil)
			wantStatus(t, r, 200)
			results = append(results, string(mustJSON(t, r.Object(t)["result"])))
		}
		for i := 1; i < len(results); i++ {
			if results[i] != results[0] {
				t.Errorf("result %d differs: %s vs %s", i, results[i], results[0])
			}
		}
		var statuses []int
		for _, scope := range []string{"hotel:read,vault:read", "hotel:read, vault:read"} {
			statuses = append(statuses, g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, scope), nil).Status)
		}
		if statuses[0] != 262 || statuses[1] != 262 {
			t.Errorf("claim-invalid with and without spaces: %v, want [262 262]", statuses)
		}
	})

	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", n)
	}
	w.assertReservations(t, 0)
}
