package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Config reloads through the Caddy admin API: captured recipe versions,
// the stale-contract sweep and the no-change-in-place rule (RCNS §13.1,
// §14.4 path 4; spec §24 items 66–68; ARCHITECTURE.md "contract_hash").

// reloadSite reads every operator document from a directory the test
// owns, so a reload can swap the recipes.
const reloadSite = `
	rcns {
		server_id caddy-rcns-it
		identity header
		enabled true
		mode optimistic
		upstream hotel {{HOTEL}}
		agents {{DOCS}}/agents
		endpoints {{DOCS}}/endpoints
		recipes {{RECIPES}}
	}
	reverse_proxy {{LEGACY}}
`

// reload POSTs text to the admin /load endpoint and drops the client's
// idle connections to the old server.
func reload(t testing.TB, g *Gateway, text string) (int, string) {
	t.Helper()
	status, body := adminLoad(t, g, text)
	if tr, ok := testClient.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	return status, body
}

func staleSweep(t testing.TB, g *Gateway, agent, scope string, mode any) *Resp {
	t.Helper()
	p := map[string]any{"target": "stale-contracts", "actor": "it-operator"}
	if mode != nil {
		p["mode"] = mode
	}
	return builtinCall(t, g, "REVOKE", agent, scope, p)
}

// sweepEntries indexes a stale sweep's contracts by synthesis_id.
func sweepEntries(t testing.TB, r *Resp) map[string]map[string]any {
	t.Helper()
	list, ok := r.Object(t)["contracts"].([]any)
	if !ok {
		t.Fatalf("sweep body has no contracts array:\n%s", r)
	}
	out := map[string]map[string]any{}
	for _, e := range list {
		m, _ := e.(map[string]any)
		out[str(m, "synthesis_id")] = m
	}
	return out
}

// reloadWorld starts the hotel upstream (json-server behind a counting
// proxy) and a legacy counter, and copies the hotel agents and
// endpoints into a fresh docs dir; recipes are the caller's.
func reloadWorld(t *testing.T) (js *JSONServer, hotel, legacy *Counter, docs string) {
	t.Helper()
	js = startJSONServer(t, hotelDB)
	hotel = startCountingProxy(t, js.URL)
	legacy = startCounter(t)
	docs = t.TempDir()
	copyDocs(t, "examples/hotel/agents", filepath.Join(docs, "agents"))
	copyDocs(t, "examples/hotel/endpoints", filepath.Join(docs, "endpoints"))
	return js, hotel, legacy, docs
}

func TestReloadStaleContracts(t *testing.T) {
	js, hotel, legacy, docs := reloadWorld(t)
	v1 := filepath.Join(docs, "recipes-v1")
	v2 := filepath.Join(docs, "recipes-v2")
	v1c := filepath.Join(docs, "recipes-v1-changed")
	copyDocs(t, "examples/hotel/recipes", v1)
	copyDocs(t, "integration/testdata/reload/v2", v2)
	copyDocs(t, "integration/testdata/reload/v1-changed", v1c)

	g := startGateway(t, fill(reloadSite, "HOTEL", hotel.URL, "DOCS", docs, "RECIPES", v1, "LEGACY", legacy.URL))
	w := &hotelWorld{JS: js, Hotel: hotel, Legacy: legacy, GW: g}
	recipesLine := "recipes " + v1
	if !strings.Contains(g.Caddyfile, recipesLine) {
		t.Fatalf("Caddyfile lacks %q", recipesLine)
	}
	withRecipes := func(dir, extra string) string {
		return strings.Replace(g.Caddyfile, recipesLine, "recipes "+dir+extra, 1)
	}
	patternVersion := func() string {
		r := g.Do(t, "DISCOVER", "/patterns", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		ps, _ := r.Object(t)["patterns"].([]any)
		for _, p := range ps {
			if str(p, "recipe_name") == recipeName {
				return str(p, "recipe_version")
			}
		}
		return ""
	}

	// A1 takes a v1 contract.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b1 := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, "1")
	c1 := str(b1, "synthesis_id")
	if field(b1, "result", "edition") != nil {
		t.Fatalf("v1 result has an edition:\n%s", r)
	}

	// A recipe whose content changed under the same name and version is
	// refused; the running config keeps serving.
	t.Run("changed in place refused", func(t *testing.T) {
		status, body := reload(t, g, withRecipes(v1c, ""))
		if status/100 == 2 {
			t.Fatalf("admin /load accepted book-room v1 with changed content (%d): %s", status, body)
		}
		if !strings.Contains(body, recipeName) {
			t.Errorf("the load error does not name the recipe: %s", body)
		}
		t.Logf("admin /load refused (%d): %s", status, strings.TrimSpace(body))
		if v := patternVersion(); v != "1" {
			t.Errorf("after the refused load DISCOVER /patterns reports book-room %q, want 1", v)
		}
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1)
		wantStatus(t, r, 200)
		if field(r.Object(t), "result", "edition") != nil {
			t.Errorf("v1 contract result has an edition after the refused load:\n%s", r)
		}
		if cs := contracts(t, g, agentA1); len(cs) != 1 || str(cs[0], "synthesis_id") != c1 {
			t.Errorf("contracts after the refused load = %v, want %s", contractIDs(cs), c1)
		}
		r = g.Do(t, "DISCOVER", "/patterns", hdr(agentA1, ""), nil)
		if strings.Contains(string(r.Body), "changed in place") {
			t.Errorf("the refused recipe is served:\n%s", r)
		}
	})

	// Bump book-room to "2" and make grandfather the default sweep mode.
	status, body := reload(t, g, withRecipes(v2, "\n\t\ton_policy_change grandfather"))
	if status/100 != 2 {
		t.Fatalf("admin /load of book-room v2 failed (%d): %s", status, body)
	}
	if v := patternVersion(); v != "2" {
		t.Fatalf("after the reload DISCOVER /patterns reports book-room %q, want 2", v)
	}

	// §24 67: the old contract keeps its captured version and behaviour.
	t.Run("old contract keeps v1", func(t *testing.T) {
		r := inspectContract(t, g, agentA1, "", c1)
		wantStatus(t, r, 200)
		b := r.Object(t)
		if str(b, "recipe_lineage", "recipe_version") != "1" || str(b, "state") != "active" {
			t.Errorf("INSPECT after the reload: recipe_lineage %v state %q, want version 1, active", field(b, "recipe_lineage"), str(b, "state"))
		}
		if str(b, "contract_hash") != str(b1, "contract_hash") {
			t.Errorf("contract_hash changed across the reload: %s → %s", str(b1, "contract_hash"), str(b, "contract_hash"))
		}
		r = w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1)
		wantStatus(t, r, 200)
		if field(r.Object(t), "result", "edition") != nil {
			t.Errorf("the v1 contract runs v2 behaviour:\n%s", r)
		}
		if field(r.Object(t), "result", "reservation_id") == nil {
			t.Errorf("the v1 contract did not book:\n%s", r)
		}
	})

	// A new synthesis captures "2".
	r = w.book(t, agentOP, scopeAll, "Allow-RCNS", "true")
	b2 := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, "2")
	c2 := str(b2, "synthesis_id")
	if c2 == c1 {
		t.Fatalf("the v2 synthesis reuses synthesis_id %s", c1)
	}
	if str(b2, "contract_hash") == str(b1, "contract_hash") {
		t.Errorf("v1 and v2 contracts share contract_hash %s", str(b1, "contract_hash"))
	}
	if str(b2, "result", "edition") != "v2" {
		t.Errorf("the v2 synthesis does not run v2:\n%s", r)
	}

	// §24 66.
	t.Run("sweep without inspect:all 403", func(t *testing.T) {
		assertErrorBody(t, staleSweep(t, g, agentA1, "", "grandfather"), 403, "")
		assertErrorBody(t, staleSweep(t, g, agentA1, "", "invalidate"), 403, "")
		// inspect:all counts only when the request carries it.
		assertErrorBody(t, staleSweep(t, g, agentOP, "hotel:read", "invalidate"), 403, "")
		wantStatus(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1), 200)
	})
	// Any mode other than grandfather or invalidate is 400 (RCNS §14.4
	// path 4), whatever its JSON type; nothing is evicted.
	for _, c := range []struct {
		name string
		mode any
	}{
		{"bogus", "bogus"},
		{"wrong case", "GRANDFATHER"},
		{"empty string", ""},
		{"number", 1},
	} {
		t.Run("sweep mode "+c.name+" 400", func(t *testing.T) {
			p := map[string]any{"target": "stale-contracts", "actor": "it-operator", "mode": c.mode}
			r := builtinCall(t, g, "REVOKE", agentOP, "inspect:all", p)
			assertErrorBody(t, r, 400, "")
			wantStatus(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1), 200)
		})
	}

	// §24 68: grandfather (the configured on_policy_change, then
	// explicit) keeps the drifted contract.
	for _, mode := range []any{nil, "grandfather"} {
		name := "default"
		if mode != nil {
			name = mode.(string)
		}
		t.Run("sweep "+name, func(t *testing.T) {
			r := staleSweep(t, g, agentOP, "inspect:all", mode)
			wantStatus(t, r, 200)
			assertAGTPHeaders(t, r)
			if str(r.Object(t), "mode") != "grandfather" {
				t.Errorf("sweep mode = %q, want grandfather (on_policy_change)", str(r.Object(t), "mode"))
			}
			es := sweepEntries(t, r)
			e1, e2 := es[c1], es[c2]
			if str(e1, "disposition") != "grandfathered" || str(e1, "captured_version") != "1" ||
				str(e1, "current_version") != "2" || str(e1, "recipe_name") != recipeName {
				t.Errorf("v1 contract entry = %v, want grandfathered 1 → 2", e1)
			}
			if str(e2, "disposition") != "unchanged" {
				t.Errorf("v2 contract entry = %v, want unchanged", e2)
			}
			r = w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1)
			wantStatus(t, r, 200)
			if field(r.Object(t), "result", "edition") != nil {
				t.Errorf("the grandfathered contract runs v2:\n%s", r)
			}
			if !hasContract(contracts(t, g, agentA1), c1) {
				t.Errorf("the grandfathered contract is no longer listed")
			}
		})
	}

	t.Run("sweep invalidate", func(t *testing.T) {
		r := staleSweep(t, g, agentOP, "inspect:all", "invalidate")
		wantStatus(t, r, 200)
		if str(r.Object(t), "mode") != "invalidate" {
			t.Errorf("sweep mode = %q, want invalidate", str(r.Object(t), "mode"))
		}
		es := sweepEntries(t, r)
		if e := es[c1]; str(e, "disposition") != "evicted" || str(e, "captured_version") != "1" || str(e, "current_version") != "2" {
			t.Errorf("v1 contract entry = %v, want evicted 1 → 2", e)
		}
		if e := es[c2]; str(e, "disposition") != "unchanged" {
			t.Errorf("v2 contract entry = %v, want unchanged", e)
		}
		func() {
			defer w.noUpstreamCall(t)()
			assertErrorBody(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1), 404, "")
		}()
		if hasContract(contracts(t, g, agentA1), c1) || hasContract(contracts(t, g, agentOP), c1) {
			t.Errorf("the evicted contract is still listed")
		}
		r = w.book(t, agentOP, scopeAll, "Contract-Synthesized", c2)
		wantStatus(t, r, 200)
		if str(r.Object(t), "result", "edition") != "v2" {
			t.Errorf("the v2 contract after the sweep:\n%s", r)
		}
		// A second sweep no longer examines the evicted contract.
		r = staleSweep(t, g, agentOP, "inspect:all", "invalidate")
		wantStatus(t, r, 200)
		if _, ok := sweepEntries(t, r)[c1]; ok {
			t.Errorf("a second sweep still examines the evicted contract")
		}
	})

	// RCNS §14.4 path 4: a recipe removed entirely is drift with
	// current_version null.
	t.Run("recipe removed", func(t *testing.T) {
		other := filepath.Join(docs, "recipes-other")
		if err := os.MkdirAll(other, 0o755); err != nil {
			t.Fatal(err)
		}
		recipeVariant(t, other, "book-suite", "BOOK", "/suite", []string{"hotel:book"}, true)
		status, body := reload(t, g, withRecipes(other, ""))
		if status/100 != 2 {
			t.Fatalf("admin /load without book-room failed (%d): %s", status, body)
		}
		if v := patternVersion(); v != "" {
			t.Fatalf("book-room is still a pattern (version %q)", v)
		}
		r := staleSweep(t, g, agentOP, "inspect:all", "grandfather")
		wantStatus(t, r, 200)
		e, ok := sweepEntries(t, r)[c2]
		if !ok {
			t.Fatalf("the sweep does not examine %s:\n%s", c2, r)
		}
		if cv, present := e["current_version"]; !present || cv != nil || str(e, "captured_version") != "2" || str(e, "disposition") != "grandfathered" {
			t.Errorf("entry = %v, want current_version null, captured 2, grandfathered", e)
		}
		r = w.book(t, agentOP, scopeAll, "Contract-Synthesized", c2)
		wantStatus(t, r, 200)
		if str(r.Object(t), "result", "edition") != "v2" {
			t.Errorf("the grandfathered v2 contract after the recipe was removed:\n%s", r)
		}
		r = staleSweep(t, g, agentOP, "inspect:all", "invalidate")
		wantStatus(t, r, 200)
		if e := sweepEntries(t, r)[c2]; str(e, "disposition") != "evicted" {
			t.Errorf("entry = %v, want evicted", e)
		}
		assertErrorBody(t, w.book(t, agentOP, scopeAll, "Contract-Synthesized", c2), 404, "")
	})

	if legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", legacy.Count())
	}
}
