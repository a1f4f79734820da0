package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// mfAgentDoc is an agent document for rcns-it-<name>.
func mfAgentDoc(name, status string) string {
	return fmt.Sprintf(`# Integration test agent (manifest_test.go).
agent_id: %s
name: %s
owner_id: %s
trust_tier: 1
status: %s
scopes:
  - hotel:read
`, agentID(name), name, mfOwner, status)
}

func TestManifestIdentifiers(t *testing.T) {
	agents := t.TempDir()
	for _, a := range [][2]string{{"rcns-it-suspended", "suspended"}, {"rcns-it-retired", "retired"}, {"rcns-it-deprecated", "deprecated"}} {
		writeDoc(t, agents, a[0]+".yaml", mfAgentDoc(a[0], a[1]))
	}
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\tagents " + agents + "\n"})
	g := w.GW
	fetch := func(t *testing.T, agent string, kv ...string) *Resp {
		t.Helper()
		return g.Do(t, "FETCH", "/guests/g-1", hdr(agent, "hotel:read", kv...), nil)
	}

	t.Run("valid identifiers 200", func(t *testing.T) {
		for _, rid := range []string{mfRequestID(t), "01ARZ3NDEKTSV4RRFFQ69G5FAV"} {
			r := fetch(t, agentA1, "Owner-ID", mfOwner, "Request-ID", rid)
			wantStatus(t, r, 200)
			if r.Header.Get("Request-ID") != rid {
				t.Errorf("Request-ID echo %q, want %q", r.Header.Get("Request-ID"), rid)
			}
			if p := attribution(t, r); str(p, "request_id") != rid || str(p, "owner_id") != mfOwner {
				t.Errorf("payload request_id %q owner_id %q, want %q %q", str(p, "request_id"), str(p, "owner_id"), rid, mfOwner)
			}
		}
	})
	calls := w.Hotel.Count()
	for _, c := range []struct{ name, owner string }{
		{"space", "hotel ops"},
		{"slash", "hotel/ops"},
		{"non-ASCII", "hôtel-ops"},
		{"257 characters", strings.Repeat("a", 257)},
	} {
		t.Run("malformed Owner-ID "+c.name+" 400", func(t *testing.T) {
			r := fetch(t, agentA1, "Owner-ID", c.owner, "Request-ID", mfRequestID(t))
			assertErrorBody(t, r, 400, "")
		})
	}
	u4 := uuid.New().String()
	for _, c := range []struct{ name, rid string }{
		{"free text", "request-1"},
		{"UUIDv4", u4},
		{"uppercase UUIDv7", strings.ToUpper(mfRequestID(t))},
		{"UUIDv7 without dashes", strings.ReplaceAll(mfRequestID(t), "-", "")},
		{"25-character ULID", "01ARZ3NDEKTSV4RRFFQ69G5FA"},
		{"ULID with I", "01ARZ3NDEKTSV4RRFFQ69G5FAI"},
		{"ULID over 128 bits", "81ARZ3NDEKTSV4RRFFQ69G5FAV"},
	} {
		t.Run("malformed Request-ID "+c.name+" 400", func(t *testing.T) {
			r := fetch(t, agentA1, "Owner-ID", mfOwner, "Request-ID", c.rid)
			assertErrorBody(t, r, 400, "")
		})
	}
	t.Run("Owner-ID differing from the registry 401", func(t *testing.T) {
		r := fetch(t, agentA1, "Owner-ID", "someone-else", "Request-ID", mfRequestID(t))
		assertErrorBody(t, r, 401, "")
	})
	t.Run("suspended agent 503", func(t *testing.T) {
		r := fetch(t, agentID("rcns-it-suspended"), "Owner-ID", mfOwner, "Request-ID", mfRequestID(t))
		assertErrorBody(t, r, 503, "")
		r = fetch(t, agentID("rcns-it-suspended"))
		assertErrorBody(t, r, 503, "")
	})
	t.Run("retired agent 410", func(t *testing.T) {
		r := fetch(t, agentID("rcns-it-retired"), "Owner-ID", mfOwner, "Request-ID", mfRequestID(t))
		assertErrorBody(t, r, 410, "")
		r = fetch(t, agentID("rcns-it-retired"))
		assertErrorBody(t, r, 410, "")
	})
	if n := w.Hotel.Count(); n != calls {
		t.Errorf("refused requests made %d hotel upstream calls", n-calls)
	}
	t.Run("deprecated agent served", func(t *testing.T) {
		r := fetch(t, agentID("rcns-it-deprecated"), "Owner-ID", mfOwner, "Request-ID", mfRequestID(t))
		wantStatus(t, r, 200)
	})
	t.Run("identifiers are optional without strict_identifiers", func(t *testing.T) {
		r := fetch(t, agentA1)
		wantStatus(t, r, 200)
	})
	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

func TestManifestStrictIdentifiers(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\tstrict_identifiers\n"})
	g := w.GW
	fetch := func(t *testing.T, kv ...string) *Resp {
		t.Helper()
		return g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", kv...), nil)
	}
	t.Run("both present 200", func(t *testing.T) {
		wantStatus(t, fetch(t, "Owner-ID", mfOwner, "Request-ID", mfRequestID(t)), 200)
	})
	calls := w.Hotel.Count()
	t.Run("no Owner-ID 400", func(t *testing.T) {
		assertErrorBody(t, fetch(t, "Request-ID", mfRequestID(t)), 400, "")
	})
	t.Run("no Request-ID 400", func(t *testing.T) {
		assertErrorBody(t, fetch(t, "Owner-ID", mfOwner), 400, "")
	})
	t.Run("neither 400", func(t *testing.T) {
		assertErrorBody(t, fetch(t), 400, "")
	})
	t.Run("gate request without identifiers 400", func(t *testing.T) {
		r := g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
		assertErrorBody(t, r, 400, "")
	})
	if n := w.Hotel.Count(); n != calls {
		t.Errorf("refused requests made %d hotel upstream calls", n-calls)
	}
	w.assertReservations(t, 0)
	t.Run("anonymous DISCOVER unaffected", func(t *testing.T) {
		wantStatus(t, g.Do(t, "DISCOVER", "/", nil, nil), 200)
	})
	// §24 94 holds without Agent-ID too: anonymous DISCOVER answered
	// 200 and echoed a malformed Request-ID.
	t.Run("anonymous DISCOVER with malformed identifiers 400", func(t *testing.T) {
		assertErrorBody(t, g.Do(t, "DISCOVER", "/", hdr("", "", "Request-ID", "bad"), nil), 400, "invalid-request-id")
		assertErrorBody(t, g.Do(t, "DISCOVER", "/", hdr("", "", "Session-ID", "x"), nil), 400, "invalid-session-id")
		assertErrorBody(t, g.Do(t, "DISCOVER", "/", hdr("", "", "Owner-ID", "a b"), nil), 400, "invalid-owner-id")
		wantStatus(t, g.Do(t, "DISCOVER", "/", hdr("", "", "Request-ID", mfRequestID(t), "Owner-ID", mfOwner), nil), 200)
	})
}

// ---------------------------------------------------------------------------
// §24 items 63–65 (RCNS §17.3, §18): the lifecycle stream.

func TestManifestLifecycleStream(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	t.Run("fresh agent has an empty stream", func(t *testing.T) {
		if es := mfEntries(t, mfLifecycle(t, g, agentA1, "")); len(es) != 0 {
			t.Fatalf("A1's stream before any contract has %d entries", len(es))
		}
	})

	// §24 63: a gate synthesis.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	id1 := str(b, "synthesis_id")
	t.Run("rcns_propose_accepted after a gate synthesis", func(t *testing.T) {
		es := mfEntries(t, mfLifecycle(t, g, agentA1, ""))
		e := mfFindEvent(es, "rcns_propose_accepted", id1)
		if e == nil {
			t.Fatalf("no rcns_propose_accepted for %s in %v", id1, es)
		}
		p := e.Payload
		if str(p, "agent_id") != agentA1 {
			t.Errorf("payload agent_id %q, want A1", str(p, "agent_id"))
		}
		if str(p, "method") != "BOOK" || str(p, "path") != "/room" {
			t.Errorf("payload method/path %q %q", str(p, "method"), str(p, "path"))
		}
		if str(p, "recipe_name") != recipeName || str(p, "recipe_version") != recipeVer {
			t.Errorf("payload recipe lineage %q %q", str(p, "recipe_name"), str(p, "recipe_version"))
		}
		if str(p, "negotiation_origin") != "rcns-gate" {
			t.Errorf("payload negotiation_origin %q, want rcns-gate", str(p, "negotiation_origin"))
		}
		if str(e.Entry, "format") != "jws" {
			t.Errorf("entry format %q", str(e.Entry, "format"))
		}
	})
	t.Run("agent_id naming oneself", func(t *testing.T) {
		es := mfEntries(t, mfLifecycle(t, g, agentA1, agentA1))
		if mfFindEvent(es, "rcns_propose_accepted", id1) == nil {
			t.Errorf("INSPECT lifecycle agent_id=A1 by A1 lacks the event")
		}
	})

	// §24 64: REVOKE target=contract.
	wantStatus(t, revokeContract(t, g, agentA1, scopeAll, id1), 200)
	t.Run("rcns_revoke after REVOKE", func(t *testing.T) {
		es := mfEntries(t, mfLifecycle(t, g, agentA1, ""))
		e := mfFindEvent(es, "rcns_revoke", id1)
		if e == nil {
			t.Fatalf("no rcns_revoke for %s in %v", id1, es)
		}
		if str(e.Payload, "reason") != "integration test" {
			t.Errorf("rcns_revoke reason %q, want the operator-supplied one", str(e.Payload, "reason"))
		}
		if str(es[0].Payload, "event_type") != "rcns_revoke" {
			t.Errorf("stream is not newest first: entry 0 is %q", str(es[0].Payload, "event_type"))
		}
	})

	// §24 64: SUSPEND synthesis_id.
	r = w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	id2 := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	wantStatus(t, suspendContract(t, g, agentA1, scopeAll, id2), 200)
	t.Run("rcns_release after SUSPEND", func(t *testing.T) {
		es := mfEntries(t, mfLifecycle(t, g, agentA1, ""))
		e := mfFindEvent(es, "rcns_release", id2)
		if e == nil {
			t.Fatalf("no rcns_release for %s in %v", id2, es)
		}
		if str(e.Payload, "reason") != "integration test" {
			t.Errorf("rcns_release reason %q, want the agent-supplied one", str(e.Payload, "reason"))
		}
		if mfFindEvent(es, "rcns_propose_accepted", id2) == nil {
			t.Errorf("no rcns_propose_accepted for the second contract %s", id2)
		}
		for i, e := range es {
			if str(e.Entry, "format") != "jws" && str(e.Entry, "format") != "cose" {
				t.Errorf("entry %d format %q", i, str(e.Entry, "format"))
			}
		}
	})

	// A PROPOSE contract is also announced, with origin propose.
	pr := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"))
	wantStatus(t, pr, 263)
	id3 := str(pr.Object(t), "synthesis_id")
	t.Run("rcns_propose_accepted after PROPOSE", func(t *testing.T) {
		es := mfEntries(t, mfLifecycle(t, g, agentA1, ""))
		e := mfFindEvent(es, "rcns_propose_accepted", id3)
		if e == nil {
			t.Fatalf("no rcns_propose_accepted for %s", id3)
		}
		if str(e.Payload, "negotiation_origin") != "propose" {
			t.Errorf("negotiation_origin %q, want propose", str(e.Payload, "negotiation_origin"))
		}
	})

	// An operator revocation goes to the originator's stream.
	wantStatus(t, revokeContract(t, g, agentOP, mfScopeOP, id3), 200)
	t.Run("operator REVOKE lands in the originator's stream", func(t *testing.T) {
		es := mfEntries(t, mfLifecycle(t, g, agentOP, agentA1))
		e := mfFindEvent(es, "rcns_revoke", id3)
		if e == nil {
			t.Fatalf("A1's stream (read by OP with inspect:all) lacks rcns_revoke for %s", id3)
		}
		// RCNS §18 (OP-26): the subject is the originator, the actor who
		// triggered it and the operator id are recorded.
		if str(e.Payload, "agent_id") != agentA1 || str(e.Payload, "actor_agent_id") != agentOP || str(e.Payload, "actor") != "it-operator" {
			t.Errorf("operator rcns_revoke payload agent_id %q actor_agent_id %q actor %q, want A1, OP, it-operator",
				str(e.Payload, "agent_id"), str(e.Payload, "actor_agent_id"), str(e.Payload, "actor"))
		}
		if mfFindEvent(es, "rcns_propose_accepted", id1) == nil {
			t.Errorf("OP's read of A1's stream lacks the first contract's event")
		}
		own := mfEntries(t, mfLifecycle(t, g, agentOP, ""))
		if mfFindEvent(own, "rcns_revoke", id3) != nil {
			t.Errorf("the revocation went to the operator's own stream")
		}
	})

	// §17.3 ACL: another agent without inspect:all.
	for name, agent := range map[string]string{"A2": agentA2, "A3": agentA3} {
		t.Run(name+" reading A1's stream 403", func(t *testing.T) {
			scope := scopeAll
			if agent == agentA2 {
				scope = scopeNoRCNS
			}
			r := builtinCall(t, g, "INSPECT", agent, scope, map[string]any{"target": "lifecycle", "agent_id": agentA1})
			assertErrorBody(t, r, 403, "")
			if strings.Contains(string(r.Body), id1) || strings.Contains(string(r.Body), "envelope") {
				t.Errorf("403 leaks the stream:\n%s", r)
			}
			// RCNS §17.3: an ACL refusal MUST NOT leak other Agent-IDs.
			if strings.Contains(string(r.Body), agentA1) {
				t.Errorf("403 body names A1's Agent-ID:\n%s", r)
			}
		})
	}
	// RCNS §17.3: target=lifecycle takes a limit; newest first.
	t.Run("limit", func(t *testing.T) {
		all := mfEntries(t, mfLifecycle(t, g, agentA1, ""))
		r := builtinCall(t, g, "INSPECT", agentA1, scopeAll, map[string]any{"target": "lifecycle", "limit": 1})
		es := mfEntries(t, r)
		if len(all) < 2 || len(es) != 1 {
			t.Fatalf("limit 1 answered %d entries (full stream %d)", len(es), len(all))
		}
		if str(es[0].Entry, "envelope") != str(all[0].Entry, "envelope") {
			t.Errorf("limit 1 is not the newest entry: %v, newest %v", es[0].Payload, all[0].Payload)
		}
		if str(es[0].Payload, "event_type") != "rcns_revoke" || str(es[0].Payload, "synthesis_id") != id3 {
			t.Errorf("newest entry is %v, want the operator's rcns_revoke of %s", es[0].Payload, id3)
		}
	})
	t.Run("A2 reads its own empty stream", func(t *testing.T) {
		r := builtinCall(t, g, "INSPECT", agentA2, scopeNoRCNS, map[string]any{"target": "lifecycle"})
		if es := mfEntries(t, r); len(es) != 0 {
			t.Errorf("A2's stream has %d entries", len(es))
		}
	})
}

// ---------------------------------------------------------------------------
// §24 item 98 (RCNS §16.2, OP-22): per-agent Attribution-Record chains.

func TestManifestAttributionChain(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	seen := map[string]bool{}
	last := map[string]string{} // agent → prior Audit-ID
	step := 0
	call := func(agent, scope, method, path string, body any, status int, kv ...string) {
		t.Helper()
		step++
		h := mfIDs(t, agent, scope, fmt.Sprintf("chain-%d", step), kv...)
		r := g.Do(t, method, path, h, body)
		wantStatus(t, r, status)
		p := mfCheckWire(t, r, h, seen)
		if agent == "" {
			return
		}
		want, ok := last[agent]
		if !ok {
			want = mfZeros
		}
		if got := str(p, "previous_audit_id"); got != want {
			t.Errorf("step %d (%s %s -> %d): previous_audit_id %s, want %s", step, method, path, status, got, want)
		}
		for _, k := range []string{"agent_id", "request_id", "response_id"} {
			if str(p, k) == "" {
				t.Errorf("step %d: payload lacks %s: %v", step, k, p)
			}
		}
		if str(p, "owner_id") != mfOwner {
			t.Errorf("step %d: payload owner_id %q, want %q", step, str(p, "owner_id"), mfOwner)
		}
		last[agent] = r.Header.Get("Audit-ID")
	}
	call(agentA1, "hotel:read", "FETCH", "/guests/g-1", nil, 200)
	call(agentA2, "hotel:read", "FETCH", "/guests/g-2", nil, 200)
	call("", "", "DISCOVER", "/", nil, 200)
	call(agentA1, scopeAll, "BOOK", "/room", bookBody(), 263, "Allow-RCNS", "true")
	call(agentA1, "hotel:read", "FETCH", "/nothing-here", nil, 404)
	call(agentA2, scopeNoRCNS, "BOOK", "/room", bookBody(), 262, "Allow-RCNS", "true")
	call(agentA1, "hotel:read", "FROBNICATE", "/guests/g-1", nil, 459)
	call(agentOP, "", "DISCOVER", "/contracts", nil, 200)
	call(agentA1, "", "DISCOVER", "/", nil, 200)
	call(agentA1, "hotel:read", "FETCH", "/guests/g-404", nil, 422)
	call(agentA2, "hotel:read", "FETCH", "/guests/g-1", nil, 200)

	// Without Request-ID the payload still carries a request_id (§16.2 MUST).
	t.Run("request_id without a Request-ID header", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		p := attribution(t, r)
		if str(p, "request_id") == "" {
			t.Errorf("payload has no request_id: %v", p)
		}
		if got := str(p, "previous_audit_id"); got != last[agentA1] {
			t.Errorf("previous_audit_id %s, want %s", got, last[agentA1])
		}
	})
}

// ---------------------------------------------------------------------------
// §24 item 101 (RCNS §4, agtp-09 §8.6): AGTP-API-Version never decreases.

func TestManifestAPIVersionMonotonic(t *testing.T) {
	js := startJSONServer(t, hotelDB)
	hotel := startCountingProxy(t, js.URL)
	records := filepath.Join(t.TempDir(), "records")
	site := fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", hotel.URL,
		"EXTRA", "\t\trecords_dir "+records+"\n", "LEGACY", js.URL)
	siteMore := fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", hotel.URL,
		"EXTRA", "\t\trecords_dir "+records+"\n\t\tendpoints "+mfEndpoints+"\n", "LEGACY", js.URL)

	version := func(g *Gateway) int {
		t.Helper()
		r := g.Do(t, "DISCOVER", "/", nil, nil)
		wantStatus(t, r, 200)
		v := mfAPIVersion(t, r)
		// Every response of the same config carries the same value.
		r2 := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r2, 200)
		if v2 := mfAPIVersion(t, r2); v2 != v {
			t.Fatalf("AGTP-API-Version %d on DISCOVER, %d on FETCH", v, v2)
		}
		return v
	}
	load := func(g *Gateway, text string) {
		t.Helper()
		status, body := adminLoad(t, g, text)
		if tr, ok := testClient.Transport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
		if status != 200 {
			t.Fatalf("admin /load = %d: %s", status, body)
		}
	}

	g := startGateway(t, site)
	v0 := version(g)
	if v0 < 1 {
		t.Fatalf("AGTP-API-Version %d, want ≥ 1", v0)
	}

	load(g, g.Caddyfile)
	v1 := version(g)
	if v1 != v0 {
		t.Fatalf("same config reloaded: AGTP-API-Version %d → %d, want unchanged", v0, v1)
	}

	// `caddy validate` of another config naming the live records_dir
	// (the upgrade steps run it) writes nothing there: a reload of the
	// unchanged config still serves the same version.
	if out, err := caddyValidate(t, siteMore); err != nil {
		t.Fatalf("caddy validate: %v\n%s", err, out)
	}
	load(g, g.Caddyfile)
	if v := version(g); v != v1 {
		t.Fatalf("caddy validate of another config, then the running config reloaded: AGTP-API-Version %d → %d, want unchanged", v1, v)
	}

	if !strings.Contains(g.Caddyfile, site) {
		t.Fatalf("Caddyfile does not contain the site text")
	}
	more := strings.Replace(g.Caddyfile, site, siteMore, 1)
	load(g, more)
	v2 := version(g)
	if v2 != v1+1 {
		t.Fatalf("manifest changed (one more endpoint): AGTP-API-Version %d → %d, want %d", v1, v2, v1+1)
	}
	r := g.Do(t, "DISCOVER", "/methods", hdr(agentA1, ""), nil)
	if !mfHasPair(mfMethodEntries(t, r), "FETCH", "/legacy-guests/{guest_id}") {
		t.Fatalf("the reload did not add the endpoint")
	}

	// Restart: a new process on the same records_dir.
	g.proc.stop()
	if !g.proc.exited() {
		t.Fatalf("the first gateway did not stop")
	}
	if tr, ok := testClient.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	if _, err := os.Stat(filepath.Join(records)); err != nil {
		t.Fatalf("records_dir: %v", err)
	}
	g2 := startGateway(t, siteMore)
	v3 := version(g2)
	if v3 < v2 {
		t.Fatalf("restart with the same records_dir and config: AGTP-API-Version %d → %d (decreased)", v2, v3)
	}
	if v3 != v2 {
		t.Logf("restart with an unchanged manifest moved AGTP-API-Version %d → %d", v2, v3)
	}

	// Going back to the first manifest must not reuse an old value.
	g2.proc.stop()
	if tr, ok := testClient.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	g3 := startGateway(t, site)
	v4 := version(g3)
	if v4 <= v3 {
		t.Fatalf("restart with the earlier manifest: AGTP-API-Version %d → %d, want an increase (never decrease or reuse)", v3, v4)
	}
}
