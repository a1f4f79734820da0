package caddymodule

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// nestedItems is a JSON Schema {"items":{"items":...{"type":"string"}}}
// whose JSON nesting is depth levels (the schema object itself is one).
func nestedItems(depth int) map[string]any {
	m := map[string]any{"type": "string"}
	for i := 1; i < depth; i++ {
		m = map[string]any{"items": m}
	}
	return m
}

// TestProposeSchemaShapeLimits: a proposed input_schema or output_schema
// nested deeper than recipes.MaxProposedSchemaDepth or holding more than
// recipes.MaxProposedSchemaNodes values is refused 400 invalid-schema
// before jsonschema's compiler (cubic in depth) sees it; at the limits
// it is compiled and the proposal goes on.
func TestProposeSchemaShapeLimits(t *testing.T) {
	g := newTestGateway(t)
	withSchema := func(path, key string, s any) map[string]any {
		p := proposal(path)
		p["endpoint"].(map[string]any)[key] = s
		return p
	}
	wide := map[string]any{}
	for i := 0; i < recipes.MaxProposedSchemaNodes; i++ {
		wide["p"+strconv.Itoa(i)] = true
	}
	for _, tc := range []struct {
		name, key string
		schema    any
		expl      string
	}{
		{"deep input_schema", "input_schema", nestedItems(2000), "input_schema is refused: it nests deeper than 32 levels"},
		{"one level too deep", "output_schema", nestedItems(recipes.MaxProposedSchemaDepth + 1), "output_schema is refused: it nests deeper than 32 levels"},
		{"too many values", "input_schema", map[string]any{"type": "object", "properties": wide}, "holds more than 1000 JSON values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := g.builtin(t, "PROPOSE", withSchema("/item/x", tc.key, tc.schema))
			wantError(t, a, 400, "invalid-schema", tc.expl)
			if a.body["limit_depth"] != float64(recipes.MaxProposedSchemaDepth) || a.body["limit_nodes"] != float64(recipes.MaxProposedSchemaNodes) || a.body["schema"] != tc.key {
				t.Errorf("refusal fields: %s", a)
			}
		})
	}
	for i, key := range []string{"input_schema", "output_schema"} {
		if a := g.builtin(t, "PROPOSE", withSchema("/item/ok"+strconv.Itoa(i), key, nestedItems(recipes.MaxProposedSchemaDepth))); a.status != 263 {
			t.Errorf("%s nested exactly %d deep: %s; want 263", key, recipes.MaxProposedSchemaDepth, a)
		}
	}
}

// TestProposeSchemaErrorBounded: a proposed schema the compiler refuses
// is quoted on one line, without the internal resource name, in at most
// engine.MaxSchemaErrorBytes: 300 invalid properties with long names and
// values (under the node limit) gave a 326 kB multi-line explanation.
func TestProposeSchemaErrorBounded(t *testing.T) {
	g := newTestGateway(t)
	props := map[string]any{}
	for i := 0; i < 300; i++ {
		props["p"+strconv.Itoa(i)+strings.Repeat("x", 200)] = map[string]any{"type": "nope" + strings.Repeat("y", 2000)}
	}
	p := proposal("/item/bad-schema")
	p["endpoint"].(map[string]any)["input_schema"] = map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	a := g.builtin(t, "PROPOSE", p)
	wantError(t, a, 400, "invalid-schema", "input_schema is not a valid JSON Schema: ")
	e := a.str("explanation")
	if len(e) > engine.MaxSchemaErrorBytes+len("input_schema is not a valid JSON Schema: ") || strings.Contains(e, "\n") || strings.Contains(e, "mem:") {
		t.Fatalf("explanation is %d bytes (newline %v, mem: %v): %.300s", len(e), strings.Contains(e, "\n"), strings.Contains(e, "mem:"), e)
	}
	if len(a.raw) > 4096 {
		t.Fatalf("answer is %d bytes", len(a.raw))
	}
}

// TestProposeErrorMethodPath: the uniform error body's method and path
// are the request's own (spec §19, OP-28): PROPOSE and "/" on every
// PROPOSE refusal, except that a 459 names the method it refuses (§19:
// "459 adds method"), the proposed one. The proposal's pair is in
// proposed_method and proposed_path and in the explanation. A 460
// answered PROPOSE with path /query/x.
func TestProposeErrorMethodPath(t *testing.T) {
	g := newTestGateway(t)
	with := func(method, path string) map[string]any {
		p := proposal(path)
		p["endpoint"].(map[string]any)["method"] = method
		return p
	}
	for _, tc := range []struct {
		name, method, path string
		status             int
		reason, expl       string
		fields             map[string]any
	}{
		{"459", "FROB", "/item/a", 459, "method-not-in-catalog", "proposed method FROB is not in catalog", map[string]any{"catalog_version": g.h.eng.Methods().Catalog.Version()}},
		// Outside the lexical rule: named so, as for a request method
		// (it was method-not-in-catalog; fresh-user review).
		{"459 lowercase", "book", "/item/a", 459, "invalid-method-token", `proposed method "book" is not a valid AGTP method token`, map[string]any{"method": "book"}},
		{"459 digit", "B0OK", "/item/a", 459, "invalid-method-token", `proposed method "B0OK" is not a valid AGTP method token`, map[string]any{"method": "B0OK"}},
		{"459 too long", strings.Repeat("A", 34), "/item/a", 459, "invalid-method-token", "is not a valid AGTP method token", nil},
		{"460", "LOOKUP", "/query/x", 460, "path-grammar-violation", `Path segment "query"`, map[string]any{"segment": "query"}},
		{"463", "LOOKUP", "/nothing-here", 463, "composition-impossible", "no recipe can build LOOKUP /nothing-here", nil},
		{"400", "LOOKUP", "/item/a", 400, "invalid-semantic", "the semantic block is invalid", nil},
		// A missing block is named missing (it was "semantic block is
		// null, want an object"; fresh-user review); null is null.
		{"400 missing", "LOOKUP", "/item/a", 400, "invalid-semantic", "has no semantic block", nil},
		{"400 null", "LOOKUP", "/item/a", 400, "invalid-semantic", "semantic block is null, want an object", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := with(tc.method, tc.path)
			switch tc.name {
			case "400":
				delete(p["endpoint"].(map[string]any)["semantic"].(map[string]any), "impact")
			case "400 missing":
				delete(p["endpoint"].(map[string]any), "semantic")
			case "400 null":
				p["endpoint"].(map[string]any)["semantic"] = nil
			}
			a := g.builtin(t, "PROPOSE", p)
			wantError(t, a, tc.status, tc.reason, tc.expl)
			// A 459 names the method it refuses (spec §19: 459 adds
			// method): the proposed one; any other answer the request's.
			wantMethod := "PROPOSE"
			if tc.status == 459 {
				wantMethod = tc.method
			}
			if a.str("method") != wantMethod || a.str("path") != "/" {
				t.Errorf("method/path = %q %q, want %s /: %s", a.str("method"), a.str("path"), wantMethod, a)
			}
			if a.str("proposed_method") != tc.method || a.str("proposed_path") != tc.path {
				t.Errorf("proposed_method/proposed_path = %q %q, want %q %q: %s", a.str("proposed_method"), a.str("proposed_path"), tc.method, tc.path, a)
			}
			for k, v := range tc.fields {
				if a.body[k] != v {
					t.Errorf("%s = %v, want %v: %s", k, a.body[k], v, a)
				}
			}
		})
	}
}

// TestContractLimitExplanation: a refusal at the per-agent contract
// limit states the limit as enforced (the default 100 when
// max_contracts_per_agent is unset, not 0) and the agent's actual count
// (which exceeds the limit after a reload lowered it).
func TestContractLimitExplanation(t *testing.T) {
	g := newTestGateway(t)
	g.h.MaxContractsPerAgent = 0 // unset: the default applies
	g.h.state.MemoryStore().ContractStore().SetLimits(g.h.eng.StoreLimits().Contracts)
	for i := 0; i < recipes.DefaultMaxContractsPerAgent; i++ {
		g.propose(t, "/item/n"+strconv.Itoa(i))
	}
	a := g.builtin(t, "PROPOSE", proposal("/item/over"))
	wantError(t, a, 463, "policy-refused", "the agent already holds 100 live contracts; max_contracts_per_agent is 100")
	g.h.MaxContractsPerAgent = 50
	g.h.state.MemoryStore().ContractStore().SetLimits(g.h.eng.StoreLimits().Contracts)
	a = g.builtin(t, "PROPOSE", proposal("/item/over"))
	wantError(t, a, 463, "policy-refused", "the agent already holds 100 live contracts; max_contracts_per_agent is 50")
	// The store-wide bound: its count and limit.
	g.h.MaxContracts, g.h.MaxContractsPerAgent = 80, 0
	g.h.state.MemoryStore().ContractStore().SetLimits(g.h.eng.StoreLimits().Contracts)
	a = g.builtin(t, "PROPOSE", proposal("/item/over"))
	wantError(t, a, 463, "policy-refused", "the gateway holds 100 live contracts, its maximum (max_contracts is 80)")
}

// TestIdempotencyStoreFullNamesTheBound: 503 idempotency-store-full
// says whether the agent's bound (idempotency_max_per_agent) or the
// store's (idempotency_max_records) was hit.
func TestIdempotencyStoreFullNamesTheBound(t *testing.T) {
	for _, tc := range []struct {
		name         string
		limits       idempotency.Limits
		bound, expl  string
		limitRecords float64
	}{
		{"per agent", idempotency.Limits{MaxRecords: 10, MaxPerAgent: 1}, "idempotency_max_per_agent", "this agent holds its maximum of 1 idempotency record (idempotency_max_per_agent)", 1},
		{"store", idempotency.Limits{MaxRecords: 1, MaxPerAgent: 5}, "idempotency_max_records", "the gateway's idempotency store holds its maximum of 1 record for all agents (idempotency_max_records)", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGateway(t)
			// Activated first: its first request applies the
			// configuration's bounds to the memory store (Activate).
			g.h.eng.Activate()
			g.h.state.MemoryStore().ResetIdempotency(tc.limits)
			if a := g.builtin(t, "PROPOSE", proposal("/item/k1"), "Idempotency-Key", "k1"); a.status != 263 {
				t.Fatalf("first keyed PROPOSE: %s", a)
			}
			a := g.builtin(t, "PROPOSE", proposal("/item/k2"), "Idempotency-Key", "k2")
			wantError(t, a, 503, "idempotency-store-full", tc.expl)
			if a.body["bound"] != tc.bound || a.body["limit_records"] != tc.limitRecords {
				t.Errorf("fields: %s", a)
			}
		})
	}
}

// TestProposeMethodPathTyped: a proposal whose method or path is
// missing or not a string is told which, and how (a number method was
// answered "needs method and path"; second fresh-user review).
func TestProposeMethodPathTyped(t *testing.T) {
	g := newTestGateway(t)
	for _, tc := range []struct {
		name string
		set  func(ep map[string]any)
		expl string
	}{
		{"number method", func(ep map[string]any) { ep["method"] = 123 }, "method must be a string, not a number"},
		{"object path", func(ep map[string]any) { ep["path"] = map[string]any{} }, "path must be a string, not an object"},
		{"missing path", func(ep map[string]any) { delete(ep, "path") }, "path is missing"},
		{"empty method, missing path", func(ep map[string]any) { ep["method"] = ""; delete(ep, "path") }, "method is missing; path is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := proposal("/item/a")
			tc.set(p["endpoint"].(map[string]any))
			wantError(t, g.builtin(t, "PROPOSE", p), 400, "invalid-proposal", tc.expl)
		})
	}
}

// TestProposeEchoBounded: a PROPOSE's method and path are echoed in its
// error answers, so they are bounded: a proposed path over 8000 bytes is
// 400 invalid-proposal, and an over-long method is cut in the 459's
// explanation and proposed_method. A 500 kB method gave a 1 MB 459.
func TestProposeEchoBounded(t *testing.T) {
	g := newTestGateway(t)
	p := proposal("/item/" + strings.Repeat("a", 8000))
	a := g.builtin(t, "PROPOSE", p)
	wantError(t, a, 400, "invalid-proposal", "the proposed path is 8006 bytes; at most 8000")
	if len(a.raw) > 2048 {
		t.Errorf("400 answer is %d bytes", len(a.raw))
	}
	p = proposal("/item/a")
	p["endpoint"].(map[string]any)["method"] = strings.Repeat("A", 500_000)
	a = g.builtin(t, "PROPOSE", p)
	wantError(t, a, 459, "invalid-method-token", `proposed method "AAAA`)
	if len(a.raw) > 2048 {
		t.Errorf("459 answer is %d bytes", len(a.raw))
	}
	if m := a.str("proposed_method"); len(m) > 100 || !strings.HasPrefix(m, "AAAA") {
		t.Errorf("proposed_method %q…, want the method cut", m[:min(len(m), 80)])
	}
}

// endContract asks for contract id to end: REVOKE target=contract or
// SUSPEND synthesis_id.
func (g *testGateway) endContract(t *testing.T, method, id string) *answer {
	t.Helper()
	p := map[string]any{"synthesis_id": id}
	if method == "REVOKE" {
		p["target"] = "contract"
	}
	return g.builtin(t, method, p)
}

// inspectState returns the state INSPECT target=contract reports for
// id, failing unless it answers 200.
func (g *testGateway) inspectState(t *testing.T, id string) string {
	t.Helper()
	a := g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": id})
	if a.status != 200 {
		t.Fatalf("INSPECT target=contract %s: %s", id, a)
	}
	return a.str("state")
}

// TestEndedContractNoopReportsState: SUSPEND synthesis_id or REVOKE
// target=contract on a contract that has already ended is a 200 no-op
// reporting the state the contract is in, the one INSPECT reports
// (revoked, expired), not the state the request would have set (spec
// §14.4); it writes no lifecycle event. SUSPEND of a revoked contract
// used to answer "released".
func TestEndedContractNoopReportsState(t *testing.T) {
	g := newTestGateway(t)
	for i, tc := range []struct {
		name, end, then, want string
	}{
		{"SUSPEND a revoked one", "REVOKE", "SUSPEND", recipes.StateRevoked},
		{"REVOKE a revoked one", "REVOKE", "REVOKE", recipes.StateRevoked},
		{"SUSPEND an expired one", "expire", "SUSPEND", recipes.StateExpired},
		{"REVOKE an expired one", "expire", "REVOKE", recipes.StateExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := g.propose(t, "/item/ended-"+strconv.Itoa(i))
			if tc.end == "expire" {
				if !g.h.state.MemoryStore().ContractStore().End(id, recipes.StateExpired) {
					t.Fatalf("contract %s was not live", id)
				}
			} else if a := g.endContract(t, tc.end, id); a.status != 200 || field(a.body, "result", "noop") != false {
				t.Fatalf("%s: %s", tc.end, a)
			}
			evs := len(g.lifecycleEvents(t))
			a := g.endContract(t, tc.then, id)
			want := map[string]any{"synthesis_id": id, "state": tc.want, "noop": true}
			if a.status != 200 || !reflect.DeepEqual(a.body["result"], want) {
				t.Fatalf("%s: %s; want 200 with result %v", tc.then, a, want)
			}
			if st := g.inspectState(t, id); st != tc.want {
				t.Fatalf("INSPECT reports %q, the no-op %q", st, tc.want)
			}
			if n := len(g.lifecycleEvents(t)); n != evs {
				t.Fatalf("the no-op %s wrote %d lifecycle events", tc.then, n-evs)
			}
		})
	}
}

// TestReleasedContractStaysKnown: a released contract is known while
// its tombstone is kept, to REVOKE and SUSPEND as to INSPECT: both
// answer 200 noop with state released (spec §14.4: 404 is for ids the
// server does not know; they used to answer 404 contract-not-found
// while INSPECT showed the record). Presenting it stays 404 (§14.4 path
// 1). Once the tombstone is gone (tombstone_ttl), and for an id never
// issued, INSPECT, REVOKE and SUSPEND all answer 404.
func TestReleasedContractStaysKnown(t *testing.T) {
	g := newTestGateway(t)
	var ids []string
	for i, end := range []string{"SUSPEND synthesis_id", "SUSPEND session_id", "stale sweep"} {
		sid := "known-" + strconv.Itoa(i) + "-0123456789abcdefABCDEF"
		path := "/item/released-" + strconv.Itoa(i)
		id := g.propose(t, path, "Session-ID", sid)
		switch end {
		case "SUSPEND synthesis_id":
			if a := g.endContract(t, "SUSPEND", id); a.status != 200 || field(a.body, "result", "noop") != false {
				t.Fatalf("%s: %s", end, a)
			}
		case "SUSPEND session_id":
			if got := g.released(t, sid); len(got) != 1 || got[0] != id {
				t.Fatalf("%s released %v; want [%s]", end, got, id)
			}
		case "stale sweep":
			// Released as an invalidating sweep releases (its recipe is
			// unchanged here, so a sweep would keep it).
			if !g.h.state.MemoryStore().ContractStore().End(id, recipes.StateReleased) {
				t.Fatalf("contract %s was not live", id)
			}
		}
		ids = append(ids, id)
		if st := g.inspectState(t, id); st != recipes.StateReleased {
			t.Fatalf("released by %s: INSPECT reports %q", end, st)
		}
		evs := len(g.lifecycleEvents(t))
		for _, method := range []string{"REVOKE", "SUSPEND"} {
			a := g.endContract(t, method, id)
			want := map[string]any{"synthesis_id": id, "state": recipes.StateReleased, "noop": true}
			if a.status != 200 || !reflect.DeepEqual(a.body["result"], want) {
				t.Fatalf("released by %s, then %s: %s; want 200 with result %v", end, method, a, want)
			}
		}
		if n := len(g.lifecycleEvents(t)); n != evs {
			t.Fatalf("released by %s: the no-ops wrote %d lifecycle events", end, n-evs)
		}
		if st := g.inspectState(t, id); st != recipes.StateReleased {
			t.Fatalf("released by %s: INSPECT reports %q after the no-ops", end, st)
		}
		wantError(t, g.do(t, "LOOKUP", path, map[string]any{"parameters": map[string]any{"item_id": "1"}}, "Contract-Synthesized", id),
			404, "contract-not-found", "")
	}
	// A revoked contract too, until its tombstone goes.
	revoked := g.propose(t, "/item/revoked")
	if a := g.endContract(t, "REVOKE", revoked); a.status != 200 {
		t.Fatalf("REVOKE: %s", a)
	}
	ids = append(ids, revoked)
	// With the tombstones gone the ids are unknown to all three, as an
	// id never issued is.
	g.h.TombstoneTTL = engine.Duration(time.Nanosecond)
	g.h.state.MemoryStore().ContractStore().SetLimits(g.h.eng.StoreLimits().Contracts)
	for _, id := range append(ids, "syn-AAAAAAAAAAAAAAAAAAAAAA") {
		wantError(t, g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": id}), 404, "contract-not-found", "")
		wantError(t, g.endContract(t, "REVOKE", id), 404, "contract-not-found", "")
		wantError(t, g.endContract(t, "SUSPEND", id), 404, "contract-not-found", "")
	}
}

// TestGrantedDurationForm: granted_duration, in the 263 body and in the
// propose negotiation record, is written in a form requested_duration
// accepts, the shortest Go form without zero units ("30m", "1h30m",
// "26h"), not Go's "30m0s" / "1h30m0s" / "26h0m0s"; it reads back as the
// duration granted.
func TestGrantedDurationForm(t *testing.T) {
	g := newTestGateway(t)
	g.h.ContractTTL = engine.Duration(100 * time.Hour)
	for i, tc := range []struct{ requested, granted string }{
		{"30m", "30m"}, {"PT30M", "30m"}, {"1h30m", "1h30m"}, {"90m", "1h30m"}, {"PT90M", "1h30m"}, {"24h", "24h"}, {"P1D", "24h"},
		{"P1DT2H", "26h"}, {"45s", "45s"}, {"3600s", "1h"}, {"1h0m1s", "1h1s"}, {"1.5s", "1s"}, {"PT1.9S", "1s"}, {"PT59.9999999999M", "59m59s"}, {"7d", "100h"}, {"61m", "1h1m"},
	} {
		a := g.builtin(t, "PROPOSE", proposal("/item/form"+strconv.Itoa(i), "requested_duration", tc.requested))
		if a.status != 263 || a.str("granted_duration") != tc.granted {
			t.Fatalf("requested_duration %q: %s; want 263 with granted_duration %q", tc.requested, a, tc.granted)
		}
		want, _ := time.ParseDuration(tc.granted)
		if d, err := agtp.ParseRequestedDuration(tc.granted); err != nil || d != want {
			t.Fatalf("granted_duration %q reads back as %v, %v; want %v", tc.granted, d, err, want)
		}
		var recs []any
		for _, rec := range g.negotiationRecords(t, "propose", "") {
			if field(rec, "granted", "synthesis_id") == a.str("synthesis_id") {
				recs = append(recs, field(rec, "granted", "granted_duration"))
			}
		}
		if !reflect.DeepEqual(recs, []any{tc.granted}) {
			t.Fatalf("requested_duration %q: the negotiation record grants %v; want [%s]", tc.requested, recs, tc.granted)
		}
	}
}

// TestPersistentGrantHasNoDuration: a persistent PROPOSE with
// requested_duration is granted no duration in the 263 answer, and its
// negotiation record says the same; the record wrote the internal
// lifetime of persistent contracts ("876000h") as granted_duration.
func TestPersistentGrantHasNoDuration(t *testing.T) {
	g := newTestGateway(t)
	g.h.AllowPersistent = true
	a := g.builtin(t, "PROPOSE", proposal("/item/persist-d", "persistent", true, "requested_duration", "30m"))
	if a.status != 263 || a.body["persistent"] != true || a.body["granted_duration"] != nil {
		t.Fatalf("persistent PROPOSE: %s; want 263, persistent, no granted_duration", a)
	}
	n := 0
	for _, rec := range g.negotiationRecords(t, "propose", "") {
		if field(rec, "granted", "synthesis_id") != a.str("synthesis_id") {
			continue
		}
		n++
		if d := field(rec, "granted", "granted_duration"); d != nil {
			t.Errorf("the negotiation record grants duration %v to a persistent contract", d)
		}
		if r := field(rec, "requested", "requested_duration"); r != "30m" {
			t.Errorf("the negotiation record's requested_duration is %v, want 30m", r)
		}
	}
	if n != 1 {
		t.Fatalf("%d negotiation records of the synthesis, want 1", n)
	}
}

// TestProposeErrorsNameNegotiation: every error answer of PROPOSE names
// its negotiation in the body and the Negotiation-ID header, those of
// the shared Idempotency-Key and budget checks included (they named
// none while PROPOSE's own refusals did).
func TestProposeErrorsNameNegotiation(t *testing.T) {
	g := newTestGateway(t)
	if a := g.builtin(t, "PROPOSE", proposal("/item/n1"), "Idempotency-Key", "nk"); a.status != 263 {
		t.Fatalf("first PROPOSE: %s", a)
	}
	a := g.builtin(t, "PROPOSE", proposal("/item/n2"), "Idempotency-Key", "nk")
	wantError(t, a, 422, "idempotency-key-reused", "")
	if id := a.str("negotiation_id"); id == "" || a.hdr("Negotiation-ID") != id || a.str("proposed_path") != "/item/n2" {
		t.Errorf("reused key: %s (Negotiation-ID %q); want negotiation_id in the body and the header, and proposed_path", a, a.hdr("Negotiation-ID"))
	}
	a = g.builtin(t, "PROPOSE", map[string]any{"endpoint": 5})
	wantError(t, a, 400, "invalid-proposal", "")
	if id := a.str("negotiation_id"); id == "" || a.hdr("Negotiation-ID") != id {
		t.Errorf("invalid proposal: %s (Negotiation-ID %q); want negotiation_id in the body and the header", a, a.hdr("Negotiation-ID"))
	}
}

// TestSessionBelongsToItsAgent: a Session-ID is checked against the
// Agent-ID that sends it (RCNS §3) by keying sessions by agent: another
// agent that sends the same Session-ID, header and parameter, ends none
// of the first agent's contracts; the first agent's SUSPEND does.
func TestSessionBelongsToItsAgent(t *testing.T) {
	g := &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, false, "", "", withOperator(t))}
	const sid = "mine-0123456789abcdefABCDEF"
	id := g.propose(t, "/item/session-owned", "Session-ID", sid)
	a := g.builtin(t, "SUSPEND", map[string]any{"session_id": sid}, "Agent-ID", operatorAgent, "Authority-Scope", "inspect:all", "Session-ID", sid)
	if a.status != 200 || fmt.Sprint(field(a.body, "result", "released")) != "[]" {
		t.Fatalf("another agent's SUSPEND of the session: %s; want 200 releasing nothing", a)
	}
	if st := g.inspectState(t, id); st != recipes.StateActive {
		t.Fatalf("after another agent's SUSPEND of the session, the contract is %q, want active", st)
	}
	if got := g.released(t, sid); len(got) != 1 || got[0] != id {
		t.Fatalf("the owner's SUSPEND of the session released %v, want [%s]", got, id)
	}
}
