package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a reload does and does not do (docs/operator-guide.md §7):
// `enabled false` stops new syntheses, but contracts granted before keep
// answering, presented or by pair, from their captured plan until they
// expire or are revoked; with the recipe still loaded they are
// "unchanged" to REVOKE target=stale-contracts and need REVOKE
// target=contract. Removing the upstream (with its endpoints and
// recipes) leaves a contract that calls it refused, 464
// composition-impossible naming the upstream, nothing called; the sweep
// lists it with missing_upstreams, and mode=invalidate ends it
// (cases/06). The endpoints removed with it are named too
// (unavailable_endpoints).
func TestReloadContractsOfRemovedUpstream(t *testing.T) {
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
	before := hotel.Count()
	for _, kv := range [][]string{{"Contract-Synthesized", c2}, nil} {
		b := assert464(t, w.book(t, agentA1, scopeAll, kv...), "composition-impossible")
		if !strings.Contains(str(b, "explanation"), "upstream hotel") || !findString(b["missing_upstreams"], "hotel") {
			t.Errorf("upstream removed (%v): the refusal does not name upstream hotel: %v", kv, b)
		}
		// Its endpoints went with it: the refusal names them too.
		if eps, _ := b["unavailable_endpoints"].([]any); len(eps) == 0 {
			t.Errorf("upstream removed (%v): the refusal names no unavailable_endpoints: %v", kv, b)
		}
	}
	if hotel.Count() != before {
		t.Errorf("the removed upstream was called")
	}
	r = staleSweep(t, g, agentOP, "inspect:all", "grandfather")
	wantStatus(t, r, 200)
	if e := sweepEntries(t, r)[c2]; str(e, "disposition") != "grandfathered" || !findString(e["missing_upstreams"], "hotel") {
		t.Errorf("upstream removed, grandfather sweep: %s is %v, want grandfathered with missing_upstreams [hotel]", c2, e)
	}
	r = staleSweep(t, g, agentOP, "inspect:all", "invalidate")
	wantStatus(t, r, 200)
	if d := str(sweepEntries(t, r)[c2], "disposition"); d != "evicted" {
		t.Errorf("upstream removed, stale sweep: %s disposition %q, want evicted", c2, d)
	}
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
