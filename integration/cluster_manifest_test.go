package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// agentPersist proposes the persistent synthesis of
// clusterManifestAcross.
var agentPersist = agentID("rcns-it-cluster-persist")

// clusterManifestAcross: a persistent synthesis granted on A joins B's
// manifest too, under the same AGTP-API-Version and ETag, told by the
// store's manifest channel (a node logs the rebuild "via":
// "notification"; the health check, every 5 s, is only the fallback);
// its REVOKE on B leaves both manifests, at a higher version again; and
// no node's version goes down meanwhile (spec §4, §14.2, §15.4:
// monotonically increasing, never reused). Before, each node numbered
// and rebuilt its own manifest: B never listed the endpoint, and A kept
// the revoked one (helper-130); then the other nodes took up to 5 s.
func clusterManifestAcross(t *testing.T, w *clusterWorld) {
	last := make([]int, len(w.Nodes))
	v0, etag0 := manifestsAgree(t, w, false, last)
	start := time.Now()
	id := proposePersistent(t, w.A)
	v1, _ := manifestsAgree(t, w, true, last)
	if v1 <= v0 {
		t.Fatalf("AGTP-API-Version %d → %d after a persistent synthesis joined the manifest, want higher", v0, v1)
	}
	t.Logf("every node served version %d %s after the PROPOSE was sent", v1, time.Since(start).Round(time.Millisecond))
	// Each node other than A rebuilt it once, by the notification or, if
	// its health check came first (a few ms in 5 s), by that: at least
	// one by the notification (the channel works on this topology).
	notified := 0
	for _, g := range w.Nodes[1:] {
		for _, ln := range strings.Split(g.Output(), "\n") {
			if strings.Contains(ln, `"msg":"rebuilt the manifest another node changed"`) &&
				strings.Contains(ln, `"agtp_api_version":"`+strconv.Itoa(v1)+`"`) && strings.Contains(ln, `"via":"notification"`) {
				notified++
			}
		}
	}
	if notified == 0 {
		t.Fatalf("no node logged rebuilding version %d via the notification; node B's output:\n%s", v1, w.B.Output())
	}
	wantStatus(t, revokeContract(t, w.B, agentPersist, scopeAll, id), 200)
	v2, etag2 := manifestsAgree(t, w, false, last)
	if v2 <= v1 {
		t.Fatalf("AGTP-API-Version %d → %d after the persistent contract was revoked, want higher", v1, v2)
	}
	// The endpoints are v0's again, the document (its document_version)
	// is not: another ETag (helper-131).
	if etag2 == etag0 {
		t.Fatalf("versions %d and %d share the ETag %s", v0, v2, etag0)
	}
}

// TestClusterManifestRedisRestarted: a Redis restarted empty has lost
// the persistent contracts and the manifest's version: every node
// leaves the lost contract out of its manifest within a few health
// checks, under one version above the one it served (helper-131 L2:
// the nodes kept advertising it while BOOK /room answered 404).
func TestClusterManifestRedisRestarted(t *testing.T) {
	_, topo := startSingleRedis(t)
	w := startClusterWorld(t, topo.block(), clusterOpts{Extra: "\t\tallow_persistent\n"})
	last := make([]int, len(w.Nodes))
	proposePersistent(t, w.A)
	v1, _ := manifestsAgree(t, w, true, last)
	topo.kill(t)
	topo.restart(t)
	if v2, _ := manifestsAgree(t, w, false, last); v2 <= v1 {
		t.Fatalf("AGTP-API-Version %d → %d after the store lost the persistent contract, want higher", v1, v2)
	}
}

// proposePersistent grants agentPersist a persistent synthesis of BOOK
// /room on g and returns its synthesis_id.
func proposePersistent(t *testing.T, g *Gateway) string {
	t.Helper()
	body := proposeBook()
	body["parameters"].(map[string]any)["persistent"] = true
	r := g.Do(t, "PROPOSE", "/", hdr(agentPersist, scopeAll), body)
	wantStatus(t, r, 263)
	if r.Object(t)["persistent"] != true {
		t.Fatalf("persistent not granted:\n%s", r)
	}
	return str(r.Object(t), "synthesis_id")
}

// manifestsAgree polls every node's manifest until each lists BOOK
// /room as a Tier C endpoint (or none does, listed false) under one
// AGTP-API-Version and one ETag, within 20 s, and returns them; last
// holds each node's last version seen, which must never go down.
func manifestsAgree(t *testing.T, w *clusterWorld, listed bool, last []int) (int, string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		same, versions := true, make([]int, len(w.Nodes))
		var etag0 string
		for i, g := range w.Nodes {
			r := g.Do(t, "DISCOVER", "/", nil, nil)
			wantStatus(t, r, 200)
			v, err := strconv.Atoi(r.Header.Get("AGTP-API-Version"))
			if err != nil {
				t.Fatalf("node %d: AGTP-API-Version %q", i, r.Header.Get("AGTP-API-Version"))
			}
			if v < last[i] {
				t.Fatalf("node %d: AGTP-API-Version went down, %d → %d", i, last[i], v)
			}
			last[i], versions[i] = v, v
			has := false
			for _, e := range r.Object(t)["endpoints"].([]any) {
				if str(e, "method") == "BOOK" && str(e, "path") == "/room" && str(e, "tier") == "C" {
					has = true
				}
			}
			if i == 0 {
				etag0 = r.Header.Get("ETag")
			}
			same = same && has == listed && v == versions[0] && r.Header.Get("ETag") == etag0
		}
		if same {
			return versions[0], etag0
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the nodes' manifests still differ (BOOK /room listed: want %v): versions %v", listed, versions)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// clusterNegotiationAcross: a PROPOSE negotiation begun on one node goes
// on on the others (spec §24 item 97, OP-35): a turn echoing its
// Negotiation-ID keeps the ID on whichever node it reaches, and its
// rejected turns count across nodes, so a fourth turn after three
// rejections is 463 policy-refused on any node and mints nothing
// (before, each node kept its own negotiations: a turn on another node
// began a new one under another ID).
func clusterNegotiationAcross(t *testing.T, w *clusterWorld) {
	r := proposeCall(t, w.node(0), agentNegotiate, scopeAll, wrappedProposal("BOOK", "/nothing-here"))
	assert463(t, r, "composition-impossible")
	neg := r.Header.Get("Negotiation-ID")
	for turn := 2; turn <= 3; turn++ {
		r := proposeCall(t, w.node(turn-1), agentNegotiate, scopeAll, wrappedProposal("BOOK", "/nothing-here"), "Negotiation-ID", neg)
		assert463(t, r, "composition-impossible")
		if got := r.Header.Get("Negotiation-ID"); got != neg {
			t.Fatalf("turn %d, on node %d: Negotiation-ID %q, want the echoed %s", turn, (turn-1)%len(w.Nodes), got, neg)
		}
	}
	for i := range w.Nodes {
		r := proposeCall(t, w.node(i), agentNegotiate, scopeAll, wrappedProposal("BOOK", "/room"), "Negotiation-ID", neg)
		assert463(t, r, "policy-refused")
		if got := r.Header.Get("Negotiation-ID"); got != neg {
			t.Errorf("turn after three rejections, on node %d: Negotiation-ID %q, want %s", i, got, neg)
		}
	}
	if cs := contracts(t, w.A, agentNegotiate); len(cs) != 0 {
		t.Errorf("a turn after three rejections minted %v", contractIDs(cs))
	}
	// Another agent echoing the ID begins a negotiation of its own.
	r = proposeCall(t, w.node(1), agentA1, scopeAll, wrappedProposal("BOOK", "/nothing-here"), "Negotiation-ID", neg)
	assert463(t, r, "composition-impossible")
	if r.Header.Get("Negotiation-ID") == neg {
		t.Errorf("another agent's turn continued %s", neg)
	}
}
