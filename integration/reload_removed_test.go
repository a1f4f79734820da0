package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a reload does not do (docs/operator-guide.md §7): `enabled false`
// or removing an upstream with its endpoints and recipes stops new
// syntheses, but contracts granted before keep answering, presented or
// by pair, from the captured plan (the removed upstream included) until
// they expire or are revoked. REVOKE target=stale-contracts
// mode=invalidate ends those whose recipe is gone; with the recipe still
// loaded (enabled false) they are "unchanged" and need REVOKE
// target=contract.
func TestReloadKeepsContractsOfRemovedUpstream(t *testing.T) {
	js, hotel, legacy, docs := reloadWorld(t)
	recipesDir := filepath.Join(docs, "recipes")
	copyDocs(t, "examples/hotel/recipes", recipesDir)
	empty := filepath.Join(docs, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}

	g := startGateway(t, fill(reloadSite, "HOTEL", hotel.URL, "DOCS", docs, "RECIPES", recipesDir, "LEGACY", legacy.URL))
	w := &hotelWorld{JS: js, Hotel: hotel, Legacy: legacy, GW: g}
	original := g.Caddyfile
	mustReload := func(text string) {
		t.Helper()
		if status, body := reload(t, g, text); status/100 != 2 {
			t.Fatalf("admin /load failed (%d): %s\n%s", status, body, text)
		}
	}
	// 200 from the hotel upstream, presented and by pair.
	answersFromHotel := func(what, id string) {
		t.Helper()
		before := hotel.Count()
		wantStatus(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", id), 200)
		wantStatus(t, w.book(t, agentA1, scopeAll), 200)
		if hotel.Count() == before {
			t.Errorf("%s: the contract answered without calling the hotel upstream", what)
		}
	}

	c1 := str(assertContractBody(t, w.book(t, agentA1, scopeAll, "Allow-RCNS", "true"), 263, "BOOK", "/room", recipeName, "1"), "synthesis_id")

	// enabled false: no new synthesis, the old contract still answers,
	// and a stale sweep leaves it (its recipe is unchanged).
	mustReload(strings.Replace(original, "enabled true", "enabled false", 1))
	answersFromHotel("enabled false", c1)
	r := staleSweep(t, g, agentOP, "inspect:all", "invalidate")
	wantStatus(t, r, 200)
	if d := str(sweepEntries(t, r)[c1], "disposition"); d != "unchanged" {
		t.Errorf("enabled false, stale sweep: %s disposition %q, want unchanged", c1, d)
	}
	wantStatus(t, revokeContract(t, g, agentOP, "inspect:all", c1), 200)
	if r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1); r.Status == 200 {
		t.Errorf("the revoked contract still answers: %s", r)
	}

	// The upstream, its endpoints and the recipe removed.
	mustReload(original)
	c2 := str(assertContractBody(t, w.book(t, agentA1, scopeAll, "Allow-RCNS", "true"), 263, "BOOK", "/room", recipeName, "1"), "synthesis_id")
	removed := original
	for _, kv := range [][2]string{
		{"\t\tupstream hotel " + hotel.URL + "\n", ""},
		{"endpoints " + docs + "/endpoints", "endpoints " + empty},
		{"recipes " + recipesDir, "recipes " + empty},
	} {
		if !strings.Contains(removed, kv[0]) {
			t.Fatalf("Caddyfile lacks %q:\n%s", kv[0], removed)
		}
		removed = strings.Replace(removed, kv[0], kv[1], 1)
	}
	mustReload(removed)
	answersFromHotel("upstream removed", c2)
	r = staleSweep(t, g, agentOP, "inspect:all", "invalidate")
	wantStatus(t, r, 200)
	if d := str(sweepEntries(t, r)[c2], "disposition"); d != "evicted" {
		t.Errorf("upstream removed, stale sweep: %s disposition %q, want evicted", c2, d)
	}
	before := hotel.Count()
	if r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", c2); r.Status == 200 {
		t.Errorf("the evicted contract still answers: %s", r)
	}
	if r := w.book(t, agentA1, scopeAll); r.Status == 200 {
		t.Errorf("the evicted contract still answers by pair: %s", r)
	}
	if hotel.Count() != before {
		t.Errorf("the removed upstream was called after the sweep")
	}
}
