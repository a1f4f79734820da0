package engine

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// TestOperatorView: the view lists what INSPECT and DISCOVER read (the
// contract minted, the agent's chain head, the refusal), bounded by Max
// with the rest counted.
func TestOperatorView(t *testing.T) {
	te := newTestEngine(t)
	body := map[string]any{"parameters": map[string]any{"item_id": "1"}}
	var ids []string
	for i := range 3 {
		syn := te.do(t, "LOOKUP", fmt.Sprintf("/item/v-%d", i), body, "Allow-RCNS", "true")
		if syn.Status != 263 {
			t.Fatalf("synthesis: %s", syn)
		}
		ids = append(ids, syn.header("Contract-Synthesized"))
	}
	if a := te.serve(t, "LOOKUP", "/item/x", agentHeader("Idempotency-Key", "bad key with spaces"), ""); a.Reason == "" {
		t.Fatalf("want a refusal, got %s", a)
	}
	v := te.OperatorView(t.Context(), OperatorViewOptions{Max: 2})
	// Newest first by issue time, which is to the second: any two of
	// the three minted within one second.
	if v.ContractsTotal != 3 || len(v.Contracts) != 2 || !slices.Contains(ids, v.Contracts[0].SynthesisID) ||
		!slices.Contains(ids, v.Contracts[1].SynthesisID) || v.Contracts[0].OwnerID != "bench-ops" {
		t.Fatalf("contracts = %d listed of %d: %+v; want 2 of %v", len(v.Contracts), v.ContractsTotal, v.Contracts, ids)
	}
	if len(v.ByAgent) != 1 || v.ByAgent[0].AgentID != testAgent || v.ByAgent[0].Count != 3 || v.ByAgent[0].AgentName == "" {
		t.Fatalf("by agent = %+v", v.ByAgent)
	}
	heads, err := te.sto.Records.Heads(t.Context(), testAgent)
	if err != nil || len(heads) != 1 {
		t.Fatalf("heads %v %v", heads, err)
	}
	found := false
	for _, ah := range v.Heads {
		if ah.AgentID == testAgent && len(ah.Heads) == 1 && ah.Heads[0].AuditID == heads[0].AuditID && ah.Heads[0].NodeID == "test-node" {
			found = true
		}
	}
	if !found {
		t.Fatalf("view heads %+v lack %v", v.Heads, heads)
	}
	if v.RefusalsTotal != 1 || len(v.Recent) != 1 || v.Recent[0].Reason != v.Refusals[0].Reason || v.Recent[0].AgentID != testAgent {
		t.Fatalf("refusals %+v, recent %+v", v.Refusals, v.Recent)
	}
	if v.InFlightTotal != 0 {
		t.Fatalf("in flight %+v after every request ended", v.InFlight)
	}
}

// TestOperatorRevoke: the revoke ends the contract as REVOKE does (the
// next presentation is 464 contract-revoked), a second is a no-op, and
// an unknown id is ErrContractUnknown.
func TestOperatorRevoke(t *testing.T) {
	te := newTestEngine(t)
	body := map[string]any{"parameters": map[string]any{"item_id": "1"}}
	syn := te.do(t, "LOOKUP", "/item/r-1", body, "Allow-RCNS", "true")
	id := syn.header("Contract-Synthesized")
	op := Operator{Name: "sre", Access: "bearer"}
	res, err := te.OperatorRevoke(t.Context(), id, "test", op)
	if err != nil || res.Noop || res.State != recipes.StateRevoked || res.RequestID == "" {
		t.Fatalf("revoke = %+v, %v", res, err)
	}
	if a := te.do(t, "LOOKUP", "/item/r-1", body, "Contract-Synthesized", id); a.Status != 464 || a.Reason != "contract-revoked" {
		t.Fatalf("presentation after revoke: %s", a)
	}
	again, err := te.OperatorRevoke(t.Context(), id, "", op)
	if err != nil || !again.Noop || again.State != recipes.StateRevoked {
		t.Fatalf("second revoke = %+v, %v", again, err)
	}
	if _, err := te.OperatorRevoke(t.Context(), "syn-unknown", "", op); !errors.Is(err, ErrContractUnknown) {
		t.Fatalf("unknown id: %v", err)
	}
	// The lifecycle event names the operator and no agent.
	evs := te.st.records.lifecycle.List(testAgent, 10)
	var ev map[string]any
	for _, e := range evs {
		if e["event_type"] == "rcns_revoke" {
			ev = e
		}
	}
	if ev == nil {
		t.Fatalf("no rcns_revoke in %v", evs)
	}
	parts := strings.Split(fmt.Sprint(ev["envelope"]), ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[min(1, len(parts)-1)])
	var payload map[string]any
	if err != nil || json.Unmarshal(raw, &payload) != nil {
		t.Fatalf("event envelope %v does not decode", ev["envelope"])
	}
	if _, named := payload["actor_agent_id"]; payload["actor"] != "sre" || named || payload["reason"] != "test" {
		t.Fatalf("rcns_revoke payload %v: want actor sre, reason test, no actor_agent_id", payload)
	}
}

// TestRefusalRingBound: the ring keeps the newest RefusalRing, newest
// first; the counts keep everything.
func TestRefusalRingBound(t *testing.T) {
	var l refusalLog
	for i := range RefusalRing + 10 {
		l.add(RecentRefusal{Reason: fmt.Sprintf("r%d", i%2), Status: i})
	}
	counts, total, recent := l.view(RefusalRing + 100)
	if total != RefusalRing+10 || len(recent) != RefusalRing || recent[0].Status != RefusalRing+9 || recent[RefusalRing-1].Status != 10 {
		t.Fatalf("total %d, %d recent, newest %d, oldest %d", total, len(recent), recent[0].Status, recent[len(recent)-1].Status)
	}
	if len(counts) != 2 || counts[0].Count+counts[1].Count != total {
		t.Fatalf("counts %v", counts)
	}
	if _, _, r := l.view(5); len(r) != 5 {
		t.Fatalf("view(5) listed %d", len(r))
	}
}

// TestInflightSet: claims are listed oldest first, bounded, and gone
// once their renewer stops; holds names one claim of a key (its
// ClaimedAt), not the key.
func TestInflightSet(t *testing.T) {
	s := &inflightSet{}
	base := time.Unix(1_800_000_000, 0)
	var rs []*leaseRenewer
	for i := range 4 {
		r := &leaseRenewer{set: s, t: time.NewTimer(time.Hour)}
		s.add(r, InFlightClaim{AgentID: "a", Key: fmt.Sprint(i), Since: base.Add(time.Duration(3-i) * time.Second)},
			claimID("a", fmt.Sprint(i), base.Add(time.Duration(i)*time.Millisecond)))
		rs = append(rs, r)
	}
	list, n := s.list(2)
	if n != 4 || len(list) != 2 || list[0].Key != "3" || list[1].Key != "2" {
		t.Fatalf("list = %v of %d", list, n)
	}
	if !s.holds(claimID("a", "1", base.Add(time.Millisecond))) {
		t.Fatal("holds: the running claim of key 1 not found")
	}
	if s.holds(claimID("a", "1", base.Add(2*time.Millisecond))) || s.holds(claimID("b", "1", base.Add(time.Millisecond))) {
		t.Fatal("holds: another claim of key 1 (a later ClaimedAt), or another agent's key 1, taken for the running one")
	}
	for _, r := range rs {
		r.stop()
		r.stop() // a second stop changes nothing
	}
	if _, n := s.list(2); n != 0 || s.holds(claimID("a", "1", base.Add(time.Millisecond))) || len(s.claims) != 0 {
		t.Fatalf("%d claims left after stop (%d counted)", n, len(s.claims))
	}
}
