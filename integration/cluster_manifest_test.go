package integration

import (
	"strconv"
	"testing"
	"time"
)

// agentPersist proposes the persistent synthesis of
// clusterManifestAcross.
var agentPersist = agentID("rcns-it-cluster-persist")

// clusterManifestAcross: a persistent synthesis granted on A joins B's
// manifest too, within a health check of B's store (5 s), under the same
// AGTP-API-Version and ETag; its REVOKE on B leaves both manifests, at a
// higher version again; and no node's version goes down meanwhile
// (spec §4, §14.2, §15.4: monotonically increasing, never reused).
// Before, each node numbered and rebuilt its own manifest: B never
// listed the endpoint, and A kept the revoked one (helper-130).
func clusterManifestAcross(t *testing.T, w *clusterWorld) {
	last := make([]int, len(w.Nodes))
	// await polls every node's manifest until each lists BOOK /room as
	// a Tier C endpoint (or none does, listed false) under one version
	// and one ETag, and returns the version.
	await := func(listed bool) int {
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
				return versions[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 20 s the nodes' manifests still differ (BOOK /room listed: want %v): versions %v", listed, versions)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	v0 := await(false)
	body := proposeBook()
	body["parameters"].(map[string]any)["persistent"] = true
	r := w.A.Do(t, "PROPOSE", "/", hdr(agentPersist, scopeAll), body)
	wantStatus(t, r, 263)
	if r.Object(t)["persistent"] != true {
		t.Fatalf("persistent not granted:\n%s", r)
	}
	id := str(r.Object(t), "synthesis_id")
	v1 := await(true)
	if v1 <= v0 {
		t.Fatalf("AGTP-API-Version %d → %d after a persistent synthesis joined the manifest, want higher", v0, v1)
	}
	wantStatus(t, revokeContract(t, w.B, agentPersist, scopeAll, id), 200)
	if v2 := await(false); v2 <= v1 {
		t.Fatalf("AGTP-API-Version %d → %d after the persistent contract was revoked, want higher", v1, v2)
	}
}
