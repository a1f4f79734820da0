package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// proposeBook is a wrapped PROPOSE body for BOOK /room.
func proposeBook() map[string]any {
	return map[string]any{"method": "PROPOSE", "parameters": map[string]any{"endpoint": map[string]any{
		"method": "BOOK", "path": "/room", "description": "Books a room.",
		"semantic": map[string]any{"intent": "Book a room.", "actor": "agent", "outcome": "A reservation exists.",
			"capability": "transaction", "confidence": 0.8, "impact": "reversible", "is_idempotent": false},
	}}}
}

// TestProposeHonoursRCNSLocks: PROPOSE is RCNS's explicit entry point, so
// the gate's policy applies to it too: RCNS off → 463
// synthesis-disabled; no rcns:negotiate → 262; a trust tier above
// min_trust_tier → 463 policy-refused. None of them mints a contract
// or touches the upstream. (A fresh-user review found PROPOSE bypassed
// locks 1, 3 and 4.)
func TestProposeHonoursRCNSLocks(t *testing.T) {
	t.Run("rcns disabled", func(t *testing.T) {
		w := startHotel(t, hotelOpts{Disabled: true})
		r := w.GW.Do(t, "PROPOSE", "/", hdr(agentID("rcns-demo-agent"), "rcns:negotiate, hotel:read, hotel:book"), proposeBook())
		assertErrorBody(t, r, 463, "synthesis-disabled")
		if len(contracts(t, w.GW, agentID("rcns-demo-agent"))) != 0 {
			t.Fatal("a contract exists after a refused PROPOSE")
		}
	})
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	tier3 := agentID("rcns-demo-tier3")
	r := w.GW.Do(t, "PROPOSE", "/", hdr(tier3, "rcns:negotiate, hotel:read, hotel:book"), proposeBook())
	assertErrorBody(t, r, 463, "policy-refused")
	noscope := agentID("rcns-demo-noscope")
	r = w.GW.Do(t, "PROPOSE", "/", hdr(noscope, "hotel:read, hotel:book"), proposeBook())
	if r.Status != 262 && r.Status != 455 {
		t.Fatalf("PROPOSE without rcns:negotiate granted:\n%s", r)
	}
	for _, a := range []string{tier3, noscope} {
		if len(contracts(t, w.GW, a)) != 0 {
			t.Fatalf("agent %s holds a contract after a refused PROPOSE", a)
		}
		// And its plain BOOK /room is still unregistered.
		wantStatus(t, w.GW.Do(t, "BOOK", "/room", hdr(a, "hotel:read, hotel:book"), bookBody()), 404)
	}
	if n := w.Hotel.Count(); n != 0 {
		t.Fatalf("refused proposals caused %d upstream calls", n)
	}
	w.assertReservations(t, 0)
	// The tier-1 agent with rcns:negotiate still gets its contract.
	r = w.GW.Do(t, "PROPOSE", "/", hdr(agentID("rcns-demo-agent"), "rcns:negotiate, hotel:read, hotel:book"), proposeBook())
	wantStatus(t, r, 263)
}

// TestDuplicateSingleValuedHeaders: two Agent-ID (or Contract-Synthesized,
// Idempotency-Key) field lines make the request ambiguous: 400
// duplicate-header, never "the first one wins".
func TestDuplicateSingleValuedHeaders(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	a1, a2 := agentID("rcns-demo-agent"), agentID("rcns-demo-noscope")
	for _, dup := range []struct{ name, first, second string }{
		{"Agent-ID", a1, a2},
		{"Idempotency-Key", "k1", "k2"},
		{"Allow-RCNS", "true", "true"},
	} {
		extra := dup.name + ": " + dup.first + "\r\n" + dup.name + ": " + dup.second + "\r\n"
		if dup.name != "Agent-ID" {
			extra = "Agent-ID: " + a1 + "\r\n" + extra
		}
		r := w.GW.Raw(t, "FETCH /guests/g-1 HTTP/1.1\r\nHost: "+w.GW.Addr+"\r\nAuthority-Scope: hotel:read\r\n"+extra+"Connection: close\r\n\r\n")
		assertErrorBody(t, r, 400, "duplicate-header")
	}
	if n := w.Hotel.Count(); n != 0 {
		t.Fatalf("ambiguous requests caused %d upstream calls", n)
	}
}

// TestUpstreamErrorsNameNoAddress: an upstream connection failure is
// explained without the upstream's address or host.
func TestUpstreamErrorsNameNoAddress(t *testing.T) {
	w := startLab(t, "", "")
	r := w.GW.Do(t, "FETCH", "/unreachable", hdr(agentID("rcns-demo-agent"), "hotel:read"), nil)
	assertErrorBody(t, r, 422, "upstream_connection_error")
	if strings.Contains(string(r.Body), "127.0.0.1") || strings.Contains(string(r.Body), "dial tcp") {
		t.Fatalf("the answer names the upstream address:\n%s", r)
	}
}

// TestInvalidListingCursor: a cursor the server did not issue is 400.
func TestInvalidListingCursor(t *testing.T) {
	w := startHotel(t, hotelOpts{})
	for _, c := range []string{"junk!", "AAAA", "MDAwMDAx"} {
		r := w.GW.Do(t, "DISCOVER", "/contracts?cursor="+c, hdr(agentID("rcns-demo-agent"), ""), nil)
		assertErrorBody(t, r, 400, "invalid-cursor")
	}
}

// TestPersistentSynthesis: `persistent: true` is granted only with
// allow_persistent; a granted persistent contract joins the manifest and
// bumps AGTP-API-Version; a refused one is granted as a session contract
// and the negotiation record keeps both values (a visible downgrade).
// Spec §14.2, §15.4, §24 item 101; issue 4.
func TestPersistentSynthesis(t *testing.T) {
	a1 := agentID("rcns-demo-agent")
	body := proposeBook()
	body["parameters"].(map[string]any)["persistent"] = true

	t.Run("refused without allow_persistent", func(t *testing.T) {
		recDir := t.TempDir()
		w := startHotel(t, hotelOpts{Extra: "\t\trecords_dir " + recDir + "\n\t\tfsync always"})
		before := w.GW.Do(t, "DISCOVER", "/", nil, nil).Header.Get("AGTP-API-Version")
		r := w.GW.Do(t, "PROPOSE", "/", hdr(a1, "rcns:negotiate, hotel:read, hotel:book"), body)
		wantStatus(t, r, 263)
		if r.Object(t)["persistent"] != false {
			t.Fatalf("persistent granted without allow_persistent:\n%s", r)
		}
		if after := w.GW.Do(t, "DISCOVER", "/", nil, nil).Header.Get("AGTP-API-Version"); after != before {
			t.Fatalf("AGTP-API-Version moved %s → %s without a manifest change", before, after)
		}
		raw, err := os.ReadFile(mustGlobOne(t, recDir+"/negotiations/*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(string(raw))), &rec); err != nil {
			t.Fatalf("negotiation log: %v\n%s", err, raw)
		}
		if field(rec, "requested", "persistent") != true || field(rec, "granted", "persistent") != false || rec["outcome"] != "accepted" {
			t.Fatalf("the downgrade is not visible in the record: %v", rec)
		}
	})

	t.Run("granted with allow_persistent", func(t *testing.T) {
		w := startHotel(t, hotelOpts{Extra: "\t\tallow_persistent\n\t\tcontract_ttl 2s"})
		m0 := w.GW.Do(t, "DISCOVER", "/", nil, nil)
		v0, _ := strconv.Atoi(m0.Header.Get("AGTP-API-Version"))
		r := w.GW.Do(t, "PROPOSE", "/", hdr(a1, "rcns:negotiate, hotel:read, hotel:book"), body)
		wantStatus(t, r, 263)
		obj := r.Object(t)
		if obj["persistent"] != true {
			t.Fatalf("persistent not granted:\n%s", r)
		}
		m1 := w.GW.Do(t, "DISCOVER", "/", nil, nil)
		v1, _ := strconv.Atoi(m1.Header.Get("AGTP-API-Version"))
		if v1 != v0+1 {
			t.Fatalf("AGTP-API-Version %d → %d, want +1 after a persistent synthesis", v0, v1)
		}
		found := false
		for _, e := range m1.Object(t)["endpoints"].([]any) {
			if str(e, "method") == "BOOK" && str(e, "path") == "/room" && str(e, "tier") == "C" {
				found = true
			}
		}
		if !found {
			t.Fatalf("the persistent endpoint is not in the manifest:\n%s", m1)
		}
		// It outlives contract_ttl and still serves its proposer by pair.
		time.Sleep(2500 * time.Millisecond)
		wantStatus(t, w.GW.Do(t, "BOOK", "/room", hdr(a1, "hotel:read, hotel:book"), bookBody()), 200)
		w.assertReservations(t, 1)
	})
}

func mustGlobOne(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		t.Fatalf("glob %s = %v (%v), want one file", pattern, m, err)
	}
	return m[0]
}

// TestAmbiguousBodiesAndPaths: a body naming one key twice is refused
// instead of last-wins; percent-encoded unreserved characters name the
// same pair in every tier ("/%72oom" is "/room"); a path whose decoded
// bytes are not UTF-8 is refused before any upstream call.
func TestAmbiguousBodiesAndPaths(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	a1 := agentID("rcns-demo-agent")
	scope := "rcns:negotiate, hotel:read, hotel:book"
	dup := `{"parameters":{"guest_id":"g-1","guest_id":"g-2","property_id":"p-1","check_in":"2026-12-01","nights":2}}`
	r := w.GW.Do(t, "BOOK", "/room", hdr(a1, scope, "Allow-RCNS", "true", "Content-Type", "application/json"), dup)
	assertErrorBody(t, r, 400, "duplicate-key")
	// A query net/url would partly drop, or one that is not UTF-8, is
	// refused rather than read without the bad pairs.
	for _, q := range []string{"x=%zz", "x=1;y=2", "doc=%ff"} {
		assertErrorBody(t, w.GW.Do(t, "FETCH", "/guests/g-1?"+q, hdr(a1, "hotel:read"), nil), 400, "invalid-query")
	}
	assertErrorBody(t, w.GW.Do(t, "DISCOVER", "/contracts?cursor=%%%", hdr(a1, ""), nil), 400, "invalid-query")
	// A task_id that is not a string, or that a header could not carry.
	for _, body := range []string{`{"task_id":5,"parameters":{}}`, `{"task_id":"a\r\nb","parameters":{}}`} {
		assertErrorBody(t, w.GW.Do(t, "BOOK", "/room", hdr(a1, scope, "Allow-RCNS", "true", "Content-Type", "application/json"), body), 400, "invalid-task-id")
	}
	// JSON null is "not given" for every envelope member, as for the
	// gateway's parameters: no Task-ID echo, no method mismatch.
	r = w.GW.Do(t, "FETCH", "/guests/g-1", hdr(a1, "hotel:read", "Content-Type", "application/json"), `{"method":null,"task_id":null,"session_id":null,"context":null,"parameters":null}`)
	wantStatus(t, r, 200)
	if v := r.Header.Get("Task-ID"); v != "" {
		t.Fatalf("Task-ID = %q for a null envelope task_id, want none", v)
	}

	r = w.GW.Do(t, "BOOK", "/%72oom", hdr(a1, scope, "Allow-RCNS", "true"), bookBody())
	wantStatus(t, r, 263)
	if str(r.Object(t), "path") != "/room" {
		t.Fatalf("contract path = %q, want /room", str(r.Object(t), "path"))
	}
	// The contract now serves the plain spelling by pair.
	wantStatus(t, w.GW.Do(t, "BOOK", "/room", hdr(a1, scope), bookBody()), 200)
	wantStatus(t, w.GW.Do(t, "FETCH", "/guests/g%2D1", hdr(a1, "hotel:read"), nil), 200)

	calls := w.Hotel.Count()
	r = w.GW.Do(t, "FETCH", "/guests/%c0%ae", hdr(a1, "hotel:read"), nil)
	assertErrorBody(t, r, 400, "invalid-path-encoding")
	if w.Hotel.Count() != calls {
		t.Fatal("an undecodable path reached the upstream")
	}
	w.assertReservations(t, 2)
}

// TestRepeatedQueryKeyLastValue: a query key given twice keeps its last
// value (spec §2.1, api-01 §5.5), in every spelling of the key, for the
// gate's synthesis input and for Tier B.
func TestRepeatedQueryKeyLastValue(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	a1 := agentID("rcns-demo-agent")
	scope := "rcns:negotiate, hotel:read, hotel:book"
	body := map[string]any{"parameters": map[string]any{"property_id": demoProperty, "check_in": demoCheckIn, "nights": demoNights}}
	r := w.GW.Do(t, "BOOK", "/room?guest_id=g-2&guest_id=g-1", hdr(a1, scope, "Allow-RCNS", "true"), body)
	wantStatus(t, r, 263)
	if rs := w.assertReservations(t, 1); rs[0]["guest_id"] != "g-1" {
		t.Fatalf("?guest_id=g-2&guest_id=g-1 booked for %v; want g-1 (the last value)", rs[0]["guest_id"])
	}
	// "%67uest_id" is guest_id: the last of the two spellings wins.
	wantStatus(t, w.GW.Do(t, "BOOK", "/room?guest_id=g-1&%67uest_id=g-2", hdr(a1, scope), body), 200)
	if rs := w.assertReservations(t, 2); rs[1]["guest_id"] != "g-2" {
		t.Fatalf("?guest_id=g-1&%%67uest_id=g-2 booked for %v; want g-2", rs[1]["guest_id"])
	}
	// Tier B: the last value agrees with the path template.
	wantStatus(t, w.GW.Do(t, "FETCH", "/guests/g-1?guest_id=g-2&guest_id=g-1", hdr(a1, "hotel:read"), nil), 200)
	assertErrorBody(t, w.GW.Do(t, "FETCH", "/guests/g-1?guest_id=g-1&guest_id=g-2", hdr(a1, "hotel:read"), nil), 400, "parameter-conflict")
}

// TestEnvelopeSessionID: without a Session-ID header the envelope's
// session_id is the request's session: the gate's contract carries it
// and SUSPEND with that session_id releases it. With the header, the
// header wins (spec OP-37). A malformed one is 400 invalid-session-id.
func TestEnvelopeSessionID(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	a1 := agentID("rcns-demo-agent")
	scope := "rcns:negotiate, hotel:read, hotel:book"
	hdrS, bodyS := "hdr-0123456789abcdefABCDEF", "body-0123456789abcdefABCDEF"
	book := func(session any, kv ...string) string {
		t.Helper()
		b := bookBody()
		b["session_id"] = session
		r := w.GW.Do(t, "BOOK", "/room", hdr(a1, scope, append([]string{"Allow-RCNS", "true"}, kv...)...), b)
		wantStatus(t, r, 263)
		return str(r.Object(t), "synthesis_id")
	}
	released := func(sid string) []any {
		t.Helper()
		r := builtinCall(t, w.GW, "SUSPEND", a1, scope, map[string]any{"session_id": sid})
		wantStatus(t, r, 200)
		return field(r.Object(t), "result", "released").([]any)
	}
	id := book(bodyS)
	if got := released(bodyS); len(got) != 1 || got[0] != id {
		t.Fatalf("SUSPEND session_id %s released %v; want [%s]", bodyS, got, id)
	}
	id = book(bodyS, "Session-ID", hdrS)
	if got := released(bodyS); len(got) != 0 {
		t.Fatalf("the envelope session_id won over the header: released %v", got)
	}
	if got := released(hdrS); len(got) != 1 || got[0] != id {
		t.Fatalf("SUSPEND session_id %s released %v; want [%s]", hdrS, got, id)
	}
	b := bookBody()
	b["session_id"] = "sess-a1b2c3d4"
	r := w.GW.Do(t, "BOOK", "/room", hdr(a1, scope, "Allow-RCNS", "true"), b)
	assertErrorBody(t, r, 400, "invalid-session-id")
	w.assertReservations(t, 2)
}
