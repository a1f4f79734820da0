package integration

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// doorStep is what one request of doorScript answered, in the terms
// that must not depend on the door: the status, the error reason, and
// the Attribution-Record's field names with the values that are not
// per-request (method, status, agent_id, owner_id, negotiation_origin,
// requested_method).
type doorStep struct {
	name   string
	status int
	reason string
	record string
	phrase string // the native status line's reason phrase ("" over HTTP)
}

func (s doorStep) String() string {
	return fmt.Sprintf("%s: %d %s record{%s}", s.name, s.status, s.reason, s.record)
}

// stableRecordFields are the Attribution-Record fields whose value is
// the same for the same request on any door.
var stableRecordFields = map[string]bool{"method": true, "status": true, "agent_id": true, "owner_id": true,
	"negotiation_origin": true, "requested_method": true, "audit_record_version": true, "server_id": true}

func stepOf(t *testing.T, name string, r *Resp) doorStep {
	t.Helper()
	rec := attribution(t, r)
	keys := make([]string, 0, len(rec))
	for k, v := range rec {
		if stableRecordFields[k] {
			keys = append(keys, fmt.Sprintf("%s=%v", k, v))
		} else {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return doorStep{name: name, status: r.Status, reason: str(r.JSON(), "reason"), record: strings.Join(keys, ","), phrase: r.Reason}
}

// doorScript runs the same AGTP requests on a fresh hotel demo, over the
// door the gateways are started with: the four locks, 461 then
// acceptance, the pair, contract scoping, Idempotency-Key replay,
// INSPECT, REVOKE, SUSPEND, DISCOVER, an optimistic 263, the method and
// path refusals.
func doorScript(t *testing.T, door string) []doorStep {
	t.Helper()
	var steps []doorStep
	add := func(name string, r *Resp) *Resp {
		steps = append(steps, stepOf(t, name, r))
		return r
	}
	off := startHotel(t, hotelOpts{Disabled: true, Door: door})
	add("lock 1 rcns-disabled", off.book(t, agentA1, scopeAll, "Allow-RCNS", "true"))

	w := startHotel(t, hotelOpts{Door: door})
	g := w.GW
	add("Tier B", g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil))
	add("lock 2 no opt-in", w.book(t, agentA1, scopeAll))
	add("lock 3 scope", w.book(t, agentA2, scopeNoRCNS, "Allow-RCNS", "true"))
	add("lock 3 claim beyond the grant", w.book(t, agentA2, scopeAll, "Allow-RCNS", "true"))
	add("lock 4 tier", w.book(t, agentA3, scopeAll, "Allow-RCNS", "true"))
	preview := add("461 preview", w.book(t, agentA1, scopeAll, "Allow-RCNS", "true"))
	id := str(preview.JSON(), "synthesis_id")
	add("pending serves no pair", w.book(t, agentA1, scopeAll))
	add("acceptance", w.book(t, agentA1, scopeAll, "Contract-Synthesized", id))
	add("Tier C by pair", w.book(t, agentA1, scopeAll))
	add("not yours", w.book(t, agentA2, scopeNoRCNS, "Contract-Synthesized", id))
	add("other pair", g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Contract-Synthesized", id), nil))
	key := "door-key-" + door
	add("keyed first", g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Idempotency-Key", key), nil))
	replay := add("keyed replay", g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Idempotency-Key", key), nil))
	if replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("%s: the keyed repeat is not a replay:\n%s", door, replay)
	}
	add("key reused", g.Do(t, "FETCH", "/guests/g-2", hdr(agentA1, "hotel:read", "Idempotency-Key", key), nil))
	add("DISCOVER manifest", g.Do(t, "DISCOVER", "/", nil, nil))
	add("DISCOVER patterns", g.Do(t, "DISCOVER", "/patterns", hdr(agentA1, "hotel:read"), nil))
	add("DISCOVER contracts", g.Do(t, "DISCOVER", "/contracts", hdr(agentA1, "hotel:read"), nil))
	add("INSPECT contract", inspectContract(t, g, agentA1, scopeAll, id))
	add("INSPECT forbidden", inspectContract(t, g, agentA2, scopeNoRCNS, id))
	add("REVOKE", revokeContract(t, g, agentOP, "inspect:all", id))
	add("revoked", w.book(t, agentA1, scopeAll, "Contract-Synthesized", id))
	add("459", g.Do(t, "FROBNICATE", "/guests/g-1", hdr(agentA1, "hotel:read"), nil))
	add("460", g.Do(t, "FETCH", "/search", hdr(agentA1, "hotel:read"), nil))

	opt := startHotel(t, hotelOpts{Mode: "optimistic", Door: door})
	sy := add("optimistic 263", opt.book(t, agentA1, scopeAll, "Allow-RCNS", "true"))
	add("SUSPEND", suspendContract(t, opt.GW, agentA1, scopeAll, str(sy.JSON(), "synthesis_id")))
	add("released", opt.book(t, agentA1, scopeAll, "Contract-Synthesized", str(sy.JSON(), "synthesis_id")))
	return steps
}

// TestDoorsAgree: the same requests give the same status, reason and
// record fields on the HTTP binding and on the native AGTP/1.0 door
// (issue: "only the framing and the reason phrase differ"), and the
// native door's status line carries the spec's reason phrase.
func TestDoorsAgree(t *testing.T) {
	overHTTP := doorScript(t, "http")
	overAGTP := doorScript(t, "agtp")
	if len(overHTTP) != len(overAGTP) {
		t.Fatalf("%d steps over http, %d over agtp", len(overHTTP), len(overAGTP))
	}
	for i := range overHTTP {
		h, a := overHTTP[i], overAGTP[i]
		if h.status != a.status || h.reason != a.reason || h.record != a.record {
			t.Errorf("the doors disagree:\n  http %s\n  agtp %s", h, a)
		}
		if a.phrase != wire.StatusText(a.status) {
			t.Errorf("%s: agtp reason phrase %q, want %q", a.name, a.phrase, wire.StatusText(a.status))
		}
	}
	// The script reached what it names.
	want := map[string]int{"lock 1 rcns-disabled": 464, "lock 3 scope": 262, "lock 4 tier": 464, "461 preview": 461,
		"acceptance": 200, "Tier C by pair": 200, "not yours": 464, "keyed replay": 200, "key reused": 422,
		"optimistic 263": 263, "459": 459, "460": 460, "revoked": 464}
	for _, s := range overAGTP {
		if st, ok := want[s.name]; ok && s.status != st {
			t.Errorf("%s over agtp: %d, want %d", s.name, s.status, st)
		}
	}
	for _, code := range []int{263, 461, 262, 464, 459, 460} {
		found := false
		for _, s := range overAGTP {
			found = found || s.status == code
		}
		if !found {
			t.Errorf("the script sent no request answered %d", code)
		}
	}
}
