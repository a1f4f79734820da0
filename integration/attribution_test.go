package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

// Spec §24 items 1–7, 38, 39: response headers and the
// Attribution-Record extension fields (RCNS §4, §16).
func TestAttributionAndHeaders(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	// §24 39: Tier B responses carry none of the three RCNS fields.
	t.Run("Tier B attribution has no contract fields", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		p := attribution(t, r)
		for _, k := range []string{"synthesis_id", "contract_hash", "negotiation_origin"} {
			if _, ok := p[k]; ok {
				t.Errorf("Tier B attribution payload has %s: %v", k, p)
			}
		}
		if r.Header.Get("Contract-Synthesized") != "" {
			t.Errorf("Tier B response carries Contract-Synthesized")
		}
	})

	// Tier A built-ins carry none either.
	t.Run("Tier A attribution has no contract fields", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		p := attribution(t, r)
		for _, k := range []string{"synthesis_id", "contract_hash", "negotiation_origin"} {
			if _, ok := p[k]; ok {
				t.Errorf("Tier A attribution payload has %s: %v", k, p)
			}
		}
	})

	// §24 38: every action under a contract carries all three.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	id, hash := str(b, "synthesis_id"), str(b, "contract_hash")
	checkContractAttribution := func(t *testing.T, r *Resp) {
		t.Helper()
		p := attribution(t, r)
		if str(p, "synthesis_id") != id || str(p, "contract_hash") != hash || str(p, "negotiation_origin") != "rcns-gate" {
			t.Errorf("attribution payload = %v, want synthesis_id %s contract_hash %s negotiation_origin rcns-gate", p, id, hash)
		}
	}
	t.Run("263 attribution", func(t *testing.T) { checkContractAttribution(t, r) })
	// docs/agent-guide.md: the endpoint member arrives in the RFC 8785
	// form contract_hash covers, so hashing its bytes as received works.
	t.Run("contract_hash from the endpoint bytes as received", func(t *testing.T) {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &members); err != nil {
			t.Fatal(err)
		}
		lin, err := jcs.Transform(members["recipe_lineage"])
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(`{"endpoint":` + string(members["endpoint"]) + `,"recipe_lineage":` + string(lin) + `}`))
		if got := hex.EncodeToString(sum[:]); got != hash {
			t.Fatalf("SHA-256 over the endpoint bytes as received = %s, contract_hash %s", got, hash)
		}
		canon, err := jcs.Transform(members["endpoint"])
		if err != nil || !bytes.Equal(canon, members["endpoint"]) {
			t.Fatalf("endpoint member is not in RFC 8785 form (%v)", err)
		}
	})
	t.Run("presentation attribution", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id)
		wantStatus(t, r, 200)
		checkContractAttribution(t, r)
	})
	t.Run("by-pair attribution", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll)
		wantStatus(t, r, 200)
		checkContractAttribution(t, r)
	})

	// §24 1, 2, 5, 7: every AGTP response, success or refusal, carries
	// Server-ID, a fresh Response-ID, AGTP-API-Version, Content-Length and
	// an Attribution-Record.
	t.Run("every AGTP response", func(t *testing.T) {
		reqs := []struct {
			method, path string
			h            map[string]string
			body         any
		}{
			{"DISCOVER", "/", hdr(agentA1, ""), nil},
			{"DISCOVER", "/contracts", hdr(agentA1, ""), nil},
			{"FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil},
			{"FETCH", "/guests/g-404", hdr(agentA1, "hotel:read"), nil},
			{"FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), map[string]any{"parameters": map[string]any{"bogus": 1}}},
			{"FETCH", "/nothing-here", hdr(agentA1, "hotel:read"), nil},
			{"QUOTE", "/guests/g-1", hdr(agentA1, "hotel:read"), nil},
			{"FROBNICATE", "/guests/g-1", hdr(agentA1, "hotel:read"), nil},
			{"FETCH", "/items/query", hdr(agentA1, "hotel:read"), nil},
			{"FETCH", "/guests/g-1", hdr("not-an-id", "hotel:read"), nil},
			{"FETCH", "/guests/g-1", hdr(agentID("stranger"), "hotel:read"), nil},
			{"BOOK", "/room", hdr(agentA2, scopeNoRCNS, "Allow-RCNS", "true"), bookBody()},
			{"BOOK", "/room", hdr(agentA3, scopeAll, "Allow-RCNS", "true"), bookBody()},
			{"BOOK", "/room", hdr(agentA1, scopeAll, "Contract-Synthesized", id), bookBody()},
		}
		seen := map[string]bool{}
		for _, q := range reqs {
			r := g.Do(t, q.method, q.path, q.h, q.body)
			assertAGTPHeaders(t, r)
			// §24 4: a well-formed Agent-ID is echoed verbatim.
			if sent := q.h["Agent-ID"]; hex64.MatchString(sent) && r.Header.Get("Agent-ID") != sent {
				got := r.Header.Get("Agent-ID")
				t.Errorf("%s %s: Agent-ID echo %q, want %q", q.method, q.path, got, q.h["Agent-ID"])
			}
			if rid := r.Header.Get("Response-ID"); rid != "" {
				if seen[rid] {
					t.Errorf("Response-ID %s reused", rid)
				}
				seen[rid] = true
			}
			if r.Status != 204 && len(r.Body) > 0 {
				if ct := r.Header.Get("Content-Type"); ct == "" {
					t.Errorf("%s %s: body without Content-Type", q.method, q.path)
				}
			}
			for _, k := range []string{"AGTP-Version", "AGTP-Method", "AGTP-Status", "Principal-ID", "Server-Agent-ID"} {
				if r.Header.Get(k) != "" {
					t.Errorf("%s %s: retired header %s present", q.method, q.path, k)
				}
			}
		}
	})
}

// A request that reaches a contract (by pair or by presentation) but is
// refused before it runs names no contract: contract fields belong to
// answers produced by running (or replaying) the contract (RCNS §16.1).
// rate_limit invocation 1 1 and idempotency_max_per_agent 1 make the 429
// and the 503 reachable.
func TestContractRefusalsNameNoContract(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true,
		Extra: "\t\trate_limit invocation 1 1\n\t\tidempotency_max_per_agent 1\n"})
	g := w.GW
	first := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "k1")
	b := assertContractBody(t, first, 263, "BOOK", "/room", recipeName, recipeVer)
	id, hash := str(b, "synthesis_id"), str(b, "contract_hash")
	assertContractFields(t, first, id, hash, "rcns-gate")

	bad := bookBody()
	bad["parameters"].(map[string]any)["nights"] = 0
	other := bookBody()
	other["parameters"].(map[string]any)["nights"] = 3
	for _, route := range []struct {
		name string
		kv   []string
	}{
		{"by pair", nil},
		{"presentation", []string{"Contract-Synthesized", id}},
	} {
		for _, c := range []struct {
			name, scope string
			kv          []string
			body        any
			status      int
			reason      string
		}{
			{"scope not claimed", "rcns:negotiate, hotel:read", nil, bookBody(), 262, "scope-required"},
			{"no Authority-Scope", "", nil, bookBody(), 262, "scope-required"},
			{"invalid input", scopeAll, nil, bad, 422, ""},
			{"key reused", scopeAll, []string{"Idempotency-Key", "k1"}, other, 422, "idempotency-key-reused"},
			{"store full", scopeAll, []string{"Idempotency-Key", "k2"}, bookBody(), 503, "idempotency-store-full"},
		} {
			t.Run(route.name+": "+c.name, func(t *testing.T) {
				defer w.noUpstreamCall(t)()
				r := g.Do(t, "BOOK", "/room", hdr(agentA1, c.scope, append(append([]string{}, route.kv...), c.kv...)...), c.body)
				assertErrorBody(t, r, c.status, c.reason)
				assertNoContractFields(t, r)
			})
		}
	}

	// The one invocation token: the contract runs and says so.
	r := w.book(t, agentA1, scopeAll)
	wantStatus(t, r, 200)
	assertContractFields(t, r, id, hash, "rcns-gate")
	for _, kv := range [][]string{nil, {"Contract-Synthesized", id}} {
		func() {
			defer w.noUpstreamCall(t)()
			r := w.book(t, agentA1, scopeAll, kv...)
			assertRateLimited(t, r, "invocation", 1, 60)
			assertNoContractFields(t, r)
		}()
	}
	w.assertReservations(t, 2)
}
