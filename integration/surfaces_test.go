package integration

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// The Tier A surfaces: REVOKE, SUSPEND, DISCOVER /patterns and /contracts,
// INSPECT and PROPOSE (RCNS §14.4, §15, §17; spec §24 items 46–49,
// 55–62, 69–78, 97).

// roomy is a generous gate budget so the surface tests never meet the
// rate limit (RCNS §12.1 counts PROPOSE evaluations too).
const roomy = "\t\trate_limit rcns 1000 1000\n"

// §24 46–49, 57–60: release and revocation, inventory and INSPECT
// target=contract.
func TestSurfacesContracts(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: roomy})
	g := w.GW

	// C1: A1 through the gate; C2, C3: A1 through PROPOSE; C4: OP.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	c1 := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	var c2, c3 string
	for _, p := range []*string{&c2, &c3} {
		r := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"))
		*p = str(assertProposeBody(t, r, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	}
	r = w.book(t, agentOP, scopeAll, "Allow-RCNS", "true")
	c4 := str(assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	mine := []string{c1, c2, c3}

	// §24 57: every entry carries the MUST fields (and the SHOULD times).
	t.Run("DISCOVER /contracts entries", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/contracts", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		list := r.Array(t)
		ids := contractIDs(list)
		sort.Strings(ids)
		want := slices.Clone(mine)
		sort.Strings(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("A1 lists %v, want %v", ids, want)
		}
		for _, c := range list {
			for _, k := range []string{"synthesis_id", "method", "path", "originating_agent_id", "contract_hash", "negotiation_origin", "issued_at", "expires_at"} {
				if str(c, k) == "" {
					t.Errorf("entry lacks %s: %v", k, c)
				}
			}
			if str(c, "method") != "BOOK" || str(c, "path") != "/room" || str(c, "originating_agent_id") != agentA1 {
				t.Errorf("entry method/path/originator = %v", c)
			}
			if str(c, "recipe_lineage", "recipe_name") != recipeName || str(c, "recipe_lineage", "recipe_version") != recipeVer {
				t.Errorf("entry recipe_lineage = %v", field(c, "recipe_lineage"))
			}
			if !hex64.MatchString(str(c, "contract_hash")) {
				t.Errorf("entry contract_hash = %q", str(c, "contract_hash"))
			}
			wantOrigin := "propose"
			if str(c, "synthesis_id") == c1 {
				wantOrigin = "rcns-gate"
			}
			if str(c, "negotiation_origin") != wantOrigin {
				t.Errorf("entry %s negotiation_origin = %q, want %s", str(c, "synthesis_id"), str(c, "negotiation_origin"), wantOrigin)
			}
			for _, k := range []string{"issued_at", "expires_at"} {
				if _, err := time.Parse(time.RFC3339, str(c, k)); err != nil {
					t.Errorf("entry %s %q is not RFC 3339", k, str(c, k))
				}
			}
		}
	})

	// §24 58.
	t.Run("DISCOVER /contracts scoping", func(t *testing.T) {
		// RCNS §17.2: without Agent-ID there is nothing to scope by.
		assertErrorBody(t, g.Do(t, "DISCOVER", "/contracts", nil, nil), 401, "")
		if cs := contracts(t, g, agentA3); len(cs) != 0 {
			t.Errorf("A3 lists %v", contractIDs(cs))
		}
		a1 := contracts(t, g, agentA1)
		if hasContract(a1, c4) {
			t.Errorf("A1 lists OP's contract %s", c4)
		}
		op := contracts(t, g, agentOP)
		for _, id := range append(slices.Clone(mine), c4) {
			if !hasContract(op, id) {
				t.Errorf("OP (inspect:all inherited) does not list %s: %v", id, contractIDs(op))
			}
		}
		// inspect:all counts only when the request carries it.
		r := g.Do(t, "DISCOVER", "/contracts", hdr(agentOP, "hotel:read"), nil)
		wantStatus(t, r, 200)
		if l := r.Array(t); len(l) != 1 || str(l[0], "synthesis_id") != c4 {
			t.Errorf("OP without inspect:all claimed lists %v, want only its own %s", contractIDs(l), c4)
		}
		r = g.Do(t, "DISCOVER", "/contracts", hdr(agentOP, "inspect:all"), nil)
		wantStatus(t, r, 200)
		if l := r.Array(t); len(l) != 4 {
			t.Errorf("OP claiming inspect:all lists %v, want all four", contractIDs(l))
		}
	})

	// Pagination (RFC 8288 Link rel="next").
	t.Run("DISCOVER /contracts pagination", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/contracts?limit=2", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		page1 := r.Array(t)
		if len(page1) != 2 {
			t.Fatalf("limit=2 answered %d entries", len(page1))
		}
		next := nextLink(t, g, r)
		if next == "" {
			t.Fatalf("limit=2 of 3 has no Link rel=\"next\":\n%s", r)
		}
		r2 := g.Do(t, "DISCOVER", next, hdr(agentA1, ""), nil)
		wantStatus(t, r2, 200)
		page2 := r2.Array(t)
		if len(page2) != 1 {
			t.Fatalf("next page %s answered %d entries, want 1:\n%s", next, len(page2), r2)
		}
		if l := r2.Header.Get("Link"); l != "" {
			t.Errorf("last page still has Link %q", l)
		}
		all := append(contractIDs(page1), contractIDs(page2)...)
		sort.Strings(all)
		want := slices.Clone(mine)
		sort.Strings(want)
		if !slices.Equal(all, want) {
			t.Errorf("pages hold %v, want %v", all, want)
		}
		r = g.Do(t, "DISCOVER", "/contracts", hdr(agentA1, ""), nil)
		if l := r.Header.Get("Link"); l != "" {
			t.Errorf("a complete listing has Link %q", l)
		}
	})

	// §24 59, 60.
	t.Run("INSPECT contract", func(t *testing.T) {
		r := inspectContract(t, g, agentA1, "", c1)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		b := r.Object(t)
		for k, want := range map[string]string{
			"target": "contract", "synthesis_id": c1, "method": "BOOK", "path": "/room",
			"originating_agent_id": agentA1, "negotiation_origin": "rcns-gate", "state": "active",
		} {
			if str(b, k) != want {
				t.Errorf("INSPECT %s = %q, want %q", k, str(b, k), want)
			}
		}
		if str(b, "recipe_lineage", "recipe_name") != recipeName || str(b, "recipe_lineage", "recipe_version") != recipeVer {
			t.Errorf("INSPECT recipe_lineage = %v", field(b, "recipe_lineage"))
		}
		list := contracts(t, g, agentA1)
		for _, c := range list {
			if str(c, "synthesis_id") == c1 && str(c, "contract_hash") != str(b, "contract_hash") {
				t.Errorf("INSPECT contract_hash %q differs from the listing's %q", str(b, "contract_hash"), str(c, "contract_hash"))
			}
		}
		if !hex64.MatchString(str(b, "contract_hash")) {
			t.Errorf("INSPECT contract_hash = %q", str(b, "contract_hash"))
		}
		for _, k := range []string{"issued_at", "expires_at"} {
			if _, err := time.Parse(time.RFC3339, str(b, k)); err != nil {
				t.Errorf("INSPECT %s %q is not RFC 3339", k, str(b, k))
			}
		}
		if _, ok := b["endpoint"].(map[string]any); !ok {
			t.Errorf("INSPECT endpoint = %v", b["endpoint"])
		}
	})
	t.Run("INSPECT contract by operator", func(t *testing.T) {
		r := inspectContract(t, g, agentOP, "inspect:all", c1)
		wantStatus(t, r, 200)
		if str(r.Object(t), "synthesis_id") != c1 {
			t.Errorf("INSPECT by OP:\n%s", r)
		}
	})
	t.Run("INSPECT contract by another agent 403", func(t *testing.T) {
		r := inspectContract(t, g, agentA3, "", c1)
		assertErrorBody(t, r, 403, "")
		if strings.Contains(string(r.Body), agentA1) {
			t.Errorf("the 403 leaks the originator's Agent-ID:\n%s", r)
		}
	})
	t.Run("INSPECT unknown contract 404", func(t *testing.T) {
		assertErrorBody(t, inspectContract(t, g, agentA1, "", "syn-AAAAAAAAAAAAAAAAAAAAAA"), 404, "")
	})

	// §24 46, 47: REVOKE target=contract.
	for _, c := range []struct{ name, agent, scope string }{
		{"unrelated tier-3 agent", agentA3, ""},
		{"unrelated tier-1 agent", agentA2, ""},
		{"operator not claiming inspect:all", agentOP, "hotel:read"},
	} {
		t.Run("REVOKE by "+c.name+" 403", func(t *testing.T) {
			assertErrorBody(t, revokeContract(t, g, c.agent, c.scope, c1), 403, "")
			// Still alive.
			r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1)
			wantStatus(t, r, 200)
		})
	}
	t.Run("REVOKE by originator", func(t *testing.T) {
		r := revokeContract(t, g, agentA1, "", c1)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		b := r.Object(t)
		if str(b, "result", "synthesis_id") != c1 || str(b, "result", "state") != "revoked" || field(b, "result", "noop") != false {
			t.Errorf("REVOKE result = %v, want {synthesis_id %s, state revoked, noop false}", field(b, "result"), c1)
		}
		defer w.noUpstreamCall(t)()
		assert464(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", c1), "contract-revoked")
		// Another agent learns nothing of its state: whose it was comes
		// first (§10 step 7).
		assert464(t, w.book(t, agentA3, scopeAll, "Contract-Synthesized", c1), "contract-not-yours")
		if hasContract(contracts(t, g, agentA1), c1) || hasContract(contracts(t, g, agentOP), c1) {
			t.Errorf("revoked contract %s still listed", c1)
		}
		// Repeating is a no-op.
		r = revokeContract(t, g, agentA1, "", c1)
		wantStatus(t, r, 200)
		if field(r.Object(t), "result", "noop") != true {
			t.Errorf("second REVOKE result = %v, want noop true", field(r.Object(t), "result"))
		}
		// INSPECT reports the state.
		r = inspectContract(t, g, agentA1, "", c1)
		if r.Status == 200 && str(r.Object(t), "state") != "revoked" {
			t.Errorf("INSPECT of a revoked contract: state %q, want revoked", str(r.Object(t), "state"))
		}
	})
	t.Run("REVOKE by operator", func(t *testing.T) {
		r := revokeContract(t, g, agentOP, "inspect:all", c2)
		wantStatus(t, r, 200)
		if str(r.Object(t), "result", "state") != "revoked" {
			t.Errorf("REVOKE result = %v", field(r.Object(t), "result"))
		}
		defer w.noUpstreamCall(t)()
		assert464(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", c2), "contract-revoked")
		if hasContract(contracts(t, g, agentA1), c2) {
			t.Errorf("revoked contract %s still listed", c2)
		}
	})
	t.Run("REVOKE unknown 404", func(t *testing.T) {
		assertErrorBody(t, revokeContract(t, g, agentOP, "inspect:all", "syn-BBBBBBBBBBBBBBBBBBBBBB"), 404, "")
	})

	// §24 48: SUSPEND with synthesis_id: only the originator.
	for _, c := range []struct{ name, agent, scope string }{
		{"unrelated agent", agentA3, ""},
		{"operator", agentOP, "inspect:all"},
	} {
		t.Run("SUSPEND by "+c.name+" 403", func(t *testing.T) {
			assertErrorBody(t, suspendContract(t, g, c.agent, c.scope, c3), 403, "")
			wantStatus(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", c3), 200)
		})
	}
	t.Run("SUSPEND by originator", func(t *testing.T) {
		r := suspendContract(t, g, agentA1, "", c3)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		b := r.Object(t)
		if str(b, "result", "synthesis_id") != c3 || str(b, "result", "state") != "released" {
			t.Errorf("SUSPEND result = %v, want {synthesis_id %s, state released}", field(b, "result"), c3)
		}
		defer w.noUpstreamCall(t)()
		assertErrorBody(t, w.book(t, agentA1, scopeAll, "Contract-Synthesized", c3), 404, "")
		if hasContract(contracts(t, g, agentA1), c3) || hasContract(contracts(t, g, agentOP), c3) {
			t.Errorf("released contract %s still listed", c3)
		}
	})
	// §14.4: an operation on a contract that has already ended is a 200
	// no-op reporting the state INSPECT reports; 404 is for unknown ids.
	for _, c := range []struct {
		name, id, state string
		call            func(t testing.TB, g *Gateway, agent, scope, id string) *Resp
	}{
		{"SUSPEND a revoked contract", c1, "revoked", suspendContract},
		{"REVOKE a released contract", c3, "released", revokeContract},
		{"SUSPEND a released contract", c3, "released", suspendContract},
	} {
		t.Run(c.name+" noop", func(t *testing.T) {
			r := c.call(t, g, agentA1, "", c.id)
			wantStatus(t, r, 200)
			b := r.Object(t)
			if str(b, "result", "synthesis_id") != c.id || str(b, "result", "state") != c.state || field(b, "result", "noop") != true {
				t.Errorf("result = %v, want {synthesis_id %s, state %s, noop true}", field(b, "result"), c.id, c.state)
			}
			r = inspectContract(t, g, agentA1, "", c.id)
			wantStatus(t, r, 200)
			if str(r.Object(t), "state") != c.state {
				t.Errorf("INSPECT state %q, want %s", str(r.Object(t), "state"), c.state)
			}
		})
	}
	t.Run("SUSPEND unknown 404", func(t *testing.T) {
		assertErrorBody(t, suspendContract(t, g, agentA1, "", "syn-CCCCCCCCCCCCCCCCCCCCCC"), 404, "")
	})

	// §24 49: only OP's contract is left.
	if cs := contracts(t, g, agentA1); len(cs) != 0 {
		t.Errorf("A1 still lists %v", contractIDs(cs))
	}
	if cs := contracts(t, g, agentOP); len(cs) != 1 || str(cs[0], "synthesis_id") != c4 {
		t.Errorf("OP lists %v, want only %s", contractIDs(cs), c4)
	}
	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// §24 61, 62: INSPECT target=rcns-attempt.
func TestSurfacesAttempts(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: roomy})
	g := w.GW
	inspect := func(agent, scope, id string) *Resp {
		return builtinCall(t, g, "INSPECT", agent, scope, map[string]any{"target": "rcns-attempt", "attempt_id": id})
	}

	for _, c := range []struct {
		name, agent, method, path, reason string
		tier                              int
		locks                             map[string]string
	}{
		{"trust tier", agentA3, "BOOK", "/room", "trust-tier-insufficient", 3,
			map[string]string{"server_policy": "open", "caller_opt_in": "open", "caller_scope": "open", "trust_tier": "closed"}},
		{"composition impossible", agentA1, "BOOK", "/nowhere", "composition-impossible", 1,
			map[string]string{"server_policy": "open", "caller_opt_in": "open", "caller_scope": "open", "trust_tier": "open"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := g.Do(t, c.method, c.path, hdr(c.agent, scopeAll, "Allow-RCNS", "true"), bookBody())
			assert464(t, r, c.reason)
			id := r.Header.Get("RCNS-Attempt-Id")
			a := inspect(c.agent, "", id)
			wantStatus(t, a, 200)
			assertAGTPHeaders(t, a)
			b := a.Object(t)
			for k, want := range map[string]string{"target": "rcns-attempt", "attempt_id": id, "method": c.method,
				"path": c.path, "agent_id": c.agent, "reason": c.reason} {
				if str(b, k) != want {
					t.Errorf("attempt %s = %q, want %q", k, str(b, k), want)
				}
			}
			if tier, _ := b["trust_tier"].(float64); int(tier) != c.tier {
				t.Errorf("attempt trust_tier = %v, want %d", b["trust_tier"], c.tier)
			}
			locks, _ := b["locks"].(map[string]any)
			for k, v := range locks {
				if s, _ := v.(string); s != "open" && s != "closed" && s != "not-evaluated" {
					t.Errorf("lock %s = %v, want open|closed|not-evaluated", k, v)
				}
			}
			for k, want := range c.locks {
				if str(locks, k) != want {
					t.Errorf("lock %s = %v, want %s (locks %v)", k, locks[k], want, locks)
				}
			}
			// Readable by inspect:all, not by another agent.
			wantStatus(t, inspect(agentOP, "inspect:all", id), 200)
			other := agentA2
			assertErrorBody(t, inspect(other, "", id), 403, "")
		})
	}
	t.Run("unknown attempt 404", func(t *testing.T) {
		assertErrorBody(t, inspect(agentA1, "", "rcns-AAAAAAAAAAAAAAAAAAAAAA"), 404, "")
	})
}

// §24 55, 56: DISCOVER /patterns, with RCNS on and off.
func TestSurfacesPatterns(t *testing.T) {
	dir := t.TempDir()
	recipeVariant(t, dir, "book-suite", "BOOK", `re:/suites/[a-z0-9-]+`, []string{"hotel:book"}, true)
	extra := fmt.Sprintf("\t\trecipes %s\n", dir)

	check := func(t *testing.T, g *Gateway, enabled bool) {
		for _, agent := range []string{agentA1, agentA3, ""} {
			r := g.Do(t, "DISCOVER", "/patterns", hdr(agent, ""), nil)
			wantStatus(t, r, 200)
			if agent != "" {
				assertAGTPHeaders(t, r)
			}
			b := r.Object(t)
			if got, ok := b["rcns_enabled"].(bool); !ok || got != enabled {
				t.Errorf("rcns_enabled = %v, want %v", b["rcns_enabled"], enabled)
			}
			ps, ok := b["patterns"].([]any)
			if !ok {
				t.Fatalf("patterns is not an array:\n%s", r)
			}
			found := map[string]map[string]any{}
			for _, p := range ps {
				pm, _ := p.(map[string]any)
				for _, k := range []string{"recipe_name", "recipe_version", "method"} {
					if str(pm, k) == "" {
						t.Errorf("pattern lacks %s: %v", k, pm)
					}
				}
				_, exact := pm["path_exact"]
				_, regex := pm["path_regex"]
				if exact == regex {
					t.Errorf("pattern has path_exact %v and path_regex %v; want exactly one: %v", exact, regex, pm)
				}
				found[str(pm, "recipe_name")] = pm
			}
			if p := found[recipeName]; str(p, "recipe_version") != recipeVer || str(p, "method") != "BOOK" || str(p, "path_exact") != "/room" {
				t.Errorf("book-room pattern = %v", p)
			}
			if p := found["book-suite"]; str(p, "path_regex") != "/suites/[a-z0-9-]+" || str(p, "method") != "BOOK" {
				t.Errorf("book-suite pattern = %v", p)
			}
		}
	}
	t.Run("enabled", func(t *testing.T) {
		w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: extra})
		check(t, w.GW, true)
		// The regex pattern matches the whole path.
		r := w.GW.Do(t, "BOOK", "/suites/s-1", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
		wantStatus(t, r, 263)
		if str(r.Object(t), "recipe_lineage", "recipe_name") != "book-suite" || str(r.Object(t), "path") != "/suites/s-1" {
			t.Errorf("regex synthesis:\n%s", r)
		}
		assert464(t, w.GW.Do(t, "BOOK", "/suites/s-1/x", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody()), "composition-impossible")
	})
	t.Run("disabled", func(t *testing.T) {
		w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Disabled: true, Extra: extra})
		check(t, w.GW, false)
		// The rcns-disabled attempt is inspectable: lock 1 closed.
		r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
		assert464(t, r, "rcns-disabled")
		a := builtinCall(t, w.GW, "INSPECT", agentA1, "", map[string]any{"target": "rcns-attempt", "attempt_id": r.Header.Get("RCNS-Attempt-Id")})
		wantStatus(t, a, 200)
		if str(a.Object(t), "locks", "server_policy") != "closed" || str(a.Object(t), "reason") != "rcns-disabled" {
			t.Errorf("rcns-disabled attempt record:\n%s", a)
		}
		if w.Legacy.Count() != 0 {
			t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
		}
	})
}

// §24 69–78, 97: PROPOSE.
func TestPropose(t *testing.T) {
	dir := t.TempDir()
	recipeVariant(t, dir, "vault-stay", "BOOK", "/vault-room", []string{"vault:admin"}, true)
	recipeVariant(t, dir, "closed-stay", "BOOK", "/closed-room", []string{"hotel:book"}, false)
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true,
		Extra: roomy + fmt.Sprintf("\t\trecipes %s\n", dir)})
	g := w.GW

	// §24 69: wrapped form; nothing runs, the contract is the agent's.
	r := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"))
	b := assertProposeBody(t, r, "BOOK", "/room", recipeName, recipeVer)
	id := str(b, "synthesis_id")
	if w.Hotel.Count() != 0 {
		t.Errorf("PROPOSE made %d hotel upstream calls", w.Hotel.Count())
	}
	if cs := contracts(t, g, agentA1); !hasContract(cs, id) {
		t.Errorf("the PROPOSE contract is not listed: %v", contractIDs(cs))
	}

	t.Run("legacy form", func(t *testing.T) {
		r := proposeCall(t, g, agentA1, scopeAll, legacyProposal("BOOK", "/room"))
		b := assertProposeBody(t, r, "BOOK", "/room", recipeName, recipeVer)
		if str(b, "synthesis_id") == id {
			t.Errorf("two proposals share synthesis_id %s", id)
		}
	})

	// §24 78: another agent presenting it; the originator's presentation
	// is attributed to PROPOSE.
	t.Run("presented by another agent", func(t *testing.T) {
		defer w.noUpstreamCall(t)()
		assert464(t, w.book(t, agentA3, scopeAll, "Contract-Synthesized", id), "contract-not-yours")
		assert464(t, w.book(t, agentOP, scopeAll, "Contract-Synthesized", id), "contract-not-yours")
	})
	t.Run("presented by the originator", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id)
		wantStatus(t, r, 200)
		if r.Header.Get("Contract-Synthesized") != id {
			t.Errorf("Contract-Synthesized = %q, want %s", r.Header.Get("Contract-Synthesized"), id)
		}
		p := attribution(t, r)
		if str(p, "negotiation_origin") != "propose" || str(p, "synthesis_id") != id || str(p, "contract_hash") != str(b, "contract_hash") {
			t.Errorf("attribution payload = %v, want origin propose, synthesis_id %s, contract_hash %s", p, id, str(b, "contract_hash"))
		}
		w.assertReservations(t, 1)
	})

	// §24 71–77: refusals, table-driven.
	mod := func(f func(ep map[string]any)) map[string]any {
		p := wrappedProposal("BOOK", "/room")
		f(p["endpoint"].(map[string]any))
		return p
	}
	semantic := func(k string, v any) map[string]any {
		return mod(func(ep map[string]any) {
			s := ep["semantic"].(map[string]any)
			if v == nil {
				delete(s, k)
			} else {
				s[k] = v
			}
		})
	}
	both := wrappedProposal("BOOK", "/room")
	both["name"] = "my-booking"
	// The error body's method and path are the request's (PROPOSE /,
	// RCNS §19), but a 459's method is the method it refuses (§19: 459
	// adds method); the proposal's pair is in proposed_method/proposed_path.
	pair := func(t testing.TB, b map[string]any, method, path string) {
		t.Helper()
		want := "PROPOSE"
		if st, _ := field(b, "status").(float64); st == 459 {
			want = method
		}
		if str(b, "method") != want || str(b, "path") != "/" {
			t.Errorf("error body method/path = %q %q, want %s /: %v", str(b, "method"), str(b, "path"), want, b)
		}
		if str(b, "proposed_method") != method || str(b, "proposed_path") != path {
			t.Errorf("proposed_method/proposed_path = %q %q, want %q %q: %v", str(b, "proposed_method"), str(b, "proposed_path"), method, path, b)
		}
	}
	for _, c := range []struct {
		name   string
		scope  string
		params map[string]any
		status int
		reason string
		check  func(t testing.TB, b map[string]any)
	}{
		{"both forms 400 ambiguous-body", scopeAll, both, 400, "ambiguous-body", nil},
		{"method not in catalog 459", scopeAll, wrappedProposal("FROBNICATE", "/room"), 459, "", func(t testing.TB, b map[string]any) {
			if !strings.Contains(str(b, "explanation"), "FROBNICATE") {
				t.Errorf("459 does not name the method: %v", b)
			}
			pair(t, b, "FROBNICATE", "/room")
		}},
		{"path /query/x 460", scopeAll, wrappedProposal("BOOK", "/query/x"), 460, "", func(t testing.TB, b map[string]any) {
			if str(b, "segment") != "query" {
				t.Errorf("460 segment = %q, want query", str(b, "segment"))
			}
			pair(t, b, "BOOK", "/query/x")
		}},
		{"semantic missing impact 400", scopeAll, semantic("impact", nil), 400, "", nil},
		{"semantic confidence 1.5 400", scopeAll, semantic("confidence", 1.5), 400, "", nil},
		{"semantic unknown capability 400", scopeAll, semantic("capability", "teleportation"), 400, "", nil},
		{"invalid input_schema 400", scopeAll, mod(func(ep map[string]any) { ep["input_schema"] = map[string]any{"type": 12} }), 400, "", nil},
		{"invalid output_schema 400", scopeAll, mod(func(ep map[string]any) { ep["output_schema"] = map[string]any{"type": "no-such-type"} }), 400, "", nil},
		{"scope granted not claimed 262", "rcns:negotiate, hotel:read", wrappedProposal("BOOK", "/room"), 262, "", func(t testing.TB, b map[string]any) {
			if str(b, "reason") != "scope-required" && str(b, "type") != "scope-required" {
				t.Errorf("262 does not name scope-required: %v", b)
			}
			// OP-35: 262 is a turn of the negotiation too.
			if !uuidRe.MatchString(str(b, "negotiation_id")) {
				t.Errorf("262 body negotiation_id %q is not a UUID", str(b, "negotiation_id"))
			}
		}},
		// RCNS §15.3: the steps run in order; the first failing one answers.
		{"method checked before path", scopeAll, wrappedProposal("FROBNICATE", "/query/x"), 459, "", nil},
		{"path checked before semantic", scopeAll, func() map[string]any {
			p := semantic("impact", nil)
			p["endpoint"].(map[string]any)["path"] = "/query/x"
			return p
		}(), 460, "", nil},
		{"semantic checked before scope", "rcns:negotiate, hotel:read", semantic("impact", nil), 400, "", nil},
		{"schema checked before scope", "rcns:negotiate, hotel:read",
			mod(func(ep map[string]any) { ep["input_schema"] = map[string]any{"type": 12} }), 400, "", nil},
		{"scope checked before policy", "rcns:negotiate, hotel:read", wrappedProposal("BOOK", "/closed-room"), 262, "", nil},
		{"scope not granted 455", scopeAll, wrappedProposal("BOOK", "/vault-room"), 455, "scope-exceeded", nil},
		{"no recipe 463", scopeAll, wrappedProposal("BOOK", "/nothing-here"), 463, "composition-impossible", func(t testing.TB, b map[string]any) {
			pair(t, b, "BOOK", "/nothing-here")
		}},
		{"propose false 463", scopeAll, wrappedProposal("BOOK", "/closed-room"), 463, "policy-refused", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := len(contracts(t, g, agentA1))
			r := proposeCall(t, g, agentA1, c.scope, c.params)
			var b map[string]any
			if c.status == 463 {
				b = assert463(t, r, c.reason)
			} else {
				b = assertErrorBody(t, r, c.status, c.reason)
			}
			if c.check != nil {
				c.check(t, b)
			}
			if got := len(contracts(t, g, agentA1)); got != n {
				t.Errorf("a refused PROPOSE changed A1's contracts %d → %d", n, got)
			}
		})
	}

	// §24 97 and RCNS §15.1: Negotiation-ID ties the turns together;
	// after three rejections the negotiation stays rejected.
	t.Run("negotiation turns", func(t *testing.T) {
		r := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/nothing-here"))
		assert463(t, r, "composition-impossible")
		neg := r.Header.Get("Negotiation-ID")
		if !uuidRe.MatchString(neg) {
			t.Fatalf("463 Negotiation-ID %q is not a UUID", neg)
		}
		if got := str(r.Object(t), "negotiation_id"); got != neg {
			t.Errorf("463 body negotiation_id %q, header %q (OP-35)", got, neg)
		}
		for turn := 2; turn <= 3; turn++ {
			r := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/nothing-here"), "Negotiation-ID", neg)
			assert463(t, r, "composition-impossible")
			if got := r.Header.Get("Negotiation-ID"); got != neg {
				t.Fatalf("turn %d Negotiation-ID %q, want the echoed %s", turn, got, neg)
			}
		}
		n := len(contracts(t, g, agentA1))
		r = proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"), "Negotiation-ID", neg)
		assert463(t, r, "")
		if got := r.Header.Get("Negotiation-ID"); got != neg {
			t.Errorf("turn 4 Negotiation-ID %q, want %s", got, neg)
		}
		if got := len(contracts(t, g, agentA1)); got != n {
			t.Errorf("the fourth turn minted a contract")
		}
		// A fresh negotiation with the same proposal is approved.
		r = proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"))
		assertProposeBody(t, r, "BOOK", "/room", recipeName, recipeVer)
		if r.Header.Get("Negotiation-ID") == neg {
			t.Errorf("a new negotiation reuses Negotiation-ID %s", neg)
		}
	})
	// Idempotency-Key is honoured on PROPOSE: the replay is the same 263
	// (same synthesis_id, Negotiation-ID) and mints nothing.
	t.Run("Idempotency-Key replays a proposal", func(t *testing.T) {
		r1 := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"), "Idempotency-Key", "prop-1")
		b1 := assertProposeBody(t, r1, "BOOK", "/room", recipeName, recipeVer)
		n := len(contracts(t, g, agentA1))
		r := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"), "Idempotency-Key", "prop-1")
		assertReplay(t, r1, r)
		if len(contracts(t, g, agentA1)) != n {
			t.Errorf("a replayed PROPOSE minted a contract")
		}
		b := assertProposeBody(t, r, "BOOK", "/room", recipeName, recipeVer)
		if str(b, "synthesis_id") != str(b1, "synthesis_id") {
			t.Errorf("replay synthesis_id %q, want %q", str(b, "synthesis_id"), str(b1, "synthesis_id"))
		}
	})
	t.Run("amended turn approved in the same negotiation", func(t *testing.T) {
		r := proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/nothing-here"))
		assert463(t, r, "composition-impossible")
		neg := r.Header.Get("Negotiation-ID")
		r = proposeCall(t, g, agentA1, scopeAll, wrappedProposal("BOOK", "/room"), "Negotiation-ID", neg)
		assertProposeBody(t, r, "BOOK", "/room", recipeName, recipeVer)
		if got := r.Header.Get("Negotiation-ID"); got != neg {
			t.Errorf("Negotiation-ID %q, want the echoed %s", got, neg)
		}
	})
	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// §24 77: synthesis_enabled false → 463 synthesis-disabled, before any
// other check.
func TestProposeSynthesisDisabled(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\tsynthesis_enabled false\n"})
	for _, p := range []map[string]any{wrappedProposal("BOOK", "/room"), wrappedProposal("FROBNICATE", "/room")} {
		r := proposeCall(t, w.GW, agentA1, scopeAll, p)
		assert463(t, r, "synthesis-disabled")
		if !uuidRe.MatchString(r.Header.Get("Negotiation-ID")) {
			t.Errorf("463 Negotiation-ID %q is not a UUID", r.Header.Get("Negotiation-ID"))
		}
	}
	if cs := contracts(t, w.GW, agentA1); len(cs) != 0 {
		t.Errorf("contracts %v", contractIDs(cs))
	}
}
