package mcpdoor

import (
	"encoding/json"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// synthesisID is a contract's synthesis_id as the engine mints it.
var synthesisID = regexp.MustCompile(`syn-[A-Za-z0-9_-]{22}`)

// The volatile values of recipe answers: synthesis ids, and the sealed
// requestState of confirm-first's input_required (payload.MAC, which
// names the synthesis id).
func init() {
	volatile = append(volatile, regexp.MustCompile(`"requestState":"[A-Za-z0-9_.-]+"`), synthesisID)
}

// recipeCall is a tools/call of the bench's lookup-item recipe with
// arguments args, and meta (without braces, "" for none) as its _meta.
func recipeCall(args, meta string) string {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup-item","arguments":` + args
	if meta != "" {
		body += `,"_meta":{` + meta + `}`
	}
	return body + `}}`
}

// triple728 is a 2026-07-28 _meta triple declaring caps.
func triple728(caps string) string {
	return `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` + caps
}

// recipeCorpus are recipe calls around the fast path's: each revision
// it serves, the arguments the door refuses, keys and replays, the
// gate's refusal, and what it leaves to the SDK (a 2026-07-28 client
// that can elicit or declared tasks, an older revision, a
// notification).
func recipeCorpus() []fastCase {
	negotiate := map[string][]string{"Authority-Scope": {"bench:read, rcns:negotiate"}}
	with := func(kv ...string) map[string][]string {
		m := maps.Clone(negotiate)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = []string{kv[i+1]}
		}
		return m
	}
	h728 := with("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "lookup-item")
	return []fastCase{
		{name: "synthesis", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/r1"}`, ""), fast: true},
		{name: "the pair again: its contract", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/r1"}`, ""), fast: true},
		{name: "other arguments on the pair", hdr: negotiate, body: recipeCall(`{"item_id":"2","path":"/item/r1"}`, ""), fast: true},
		{name: "2025-06-18", hdr: with("Mcp-Protocol-Version", "2025-06-18"), body: recipeCall(`{"item_id":"1","path":"/item/r2"}`, ""), fast: true},
		{name: "path off the pattern", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/other/x"}`, ""), fast: true},
		{name: "path missing", hdr: negotiate, body: recipeCall(`{"item_id":"1"}`, ""), fast: true},
		{name: "path percent-encoding invalid", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/%zz"}`, ""), fast: true},
		{name: "argument a number", hdr: negotiate, body: recipeCall(`{"item_id":5,"path":"/item/r3"}`, ""), fast: true},
		{name: "argument missing", hdr: negotiate, body: recipeCall(`{"path":"/item/r4"}`, ""), fast: true},
		{name: "unknown synthesis_id", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/r5","synthesis_id":"syn-AAAAAAAAAAAAAAAAAAAAAA"}`, ""), fast: true},
		{name: "synthesis_id a number", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/r5","synthesis_id":7}`, ""), fast: true},
		{name: "keyed", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/r6"}`, `"io.github.caddy-rcns/idempotency-key":"k-recipe-1"`), fast: true},
		{name: "keyed replayed", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/r6"}`, `"io.github.caddy-rcns/idempotency-key":"k-recipe-1"`), fast: true},
		{name: "keyed, other arguments", hdr: negotiate, body: recipeCall(`{"item_id":"2","path":"/item/r6"}`, `"io.github.caddy-rcns/idempotency-key":"k-recipe-1"`), fast: true},
		{name: "attribution record", hdr: negotiate, body: recipeCall(`{"item_id":"1","path":"/item/r7"}`, `"io.github.caddy-rcns/attribution-record":true`), fast: true},
		{name: "without rcns:negotiate", body: recipeCall(`{"item_id":"1","path":"/item/r8"}`, ""), fast: true},
		{name: "2026-07-28", hdr: h728, body: recipeCall(`{"item_id":"1","path":"/item/s1"}`, triple728(`{}`)), fast: true},
		{name: "2026-07-28 the pair again", hdr: h728, body: recipeCall(`{"item_id":"1","path":"/item/s1"}`, triple728(`{}`)), fast: true},
		{name: "2026-07-28 as the go-sdk client", hdr: h728, fast: true,
			body: recipeCall(`{"item_id":"1","path":"/item/s2"}`, triple728(`{"roots":{"listChanged":true}}`)+`,"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}`)},
		{name: "2026-07-28 keyed", hdr: h728, body: recipeCall(`{"item_id":"1","path":"/item/s3"}`, triple728(`{}`)+`,"io.github.caddy-rcns/idempotency-key":"k-recipe-2"`), fast: true},
		{name: "2026-07-28 path off the pattern", hdr: h728, body: recipeCall(`{"item_id":"1","path":"/x"}`, triple728(`{}`)), fast: true},
		{name: "2026-07-28 elicitation declared", hdr: h728, body: recipeCall(`{"item_id":"1","path":"/item/s4"}`, triple728(`{"elicitation":{}}`))},
		{name: "2026-07-28 tasks declared", hdr: h728, body: recipeCall(`{"item_id":"1","path":"/item/s5"}`, triple728(`{"extensions":{"io.modelcontextprotocol/tasks":{}}}`))},
		{name: "2026-07-28 Mcp-Name differs", hdr: with("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "fetch_item"),
			body: recipeCall(`{"item_id":"1","path":"/item/s6"}`, triple728(`{}`))},
		{name: "2025-03-26", hdr: with("Mcp-Protocol-Version", "2025-03-26"), body: recipeCall(`{"item_id":"1","path":"/item/t1"}`, "")},
		{name: "notification", hdr: negotiate, body: `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"lookup-item","arguments":{"item_id":"1","path":"/item/t2"}}}`},
		{name: "requestState", hdr: negotiate, body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup-item","arguments":{"item_id":"1","path":"/item/t3"},"requestState":"x"}}`},
	}
}

// TestMCPFastPathRecipes holds the fast path's answers to recipe calls
// byte-identical to the go-sdk's (volatile values aside) under both
// modes, and that each call reached the upstream as often on both
// doors. In confirm-first, a preview is confirmed with the synthesis_id
// each door gave, and the contract presented by id again.
func TestMCPFastPathRecipes(t *testing.T) {
	for _, mode := range []string{engine.ModeOptimistic, engine.ModeConfirmFirst} {
		t.Run(mode, func(t *testing.T) {
			dd := newDiffDoors(t, func(c *engine.Config) {
				c.Mode = mode
				c.RateLimitPerMinute = 6000 // each call its own synthesis, not the gate's budget (10 a minute)
			})
			for _, c := range recipeCorpus() {
				t.Run(c.name, func(t *testing.T) { dd.serve(t, c) })
			}
			negotiate := map[string][]string{"Authority-Scope": {"bench:read, rcns:negotiate"}}
			first := fastCase{hdr: negotiate, body: recipeCall(`{"item_id":"9","path":"/item/p1"}`, ""), fast: true}
			fast, sdk := serveCase(dd.fast, first), serveCase(dd.sdk, first)
			sameAnswer(t, fast, sdk)
			want := `"status":263`
			if mode == engine.ModeConfirmFirst {
				want = `"outcome":"preview"`
			}
			if !strings.Contains(fast.Body.String(), want) {
				t.Fatalf("the first call: %s, want %s", fast.Body, want)
			}
			// Each door presents its own contract by id (Contract-Synthesized).
			for round := range 2 {
				hits := dd.hits.Load()
				before := dd.fast.fastServed.Load()
				byID := func(w string) fastCase {
					id := synthesisID.FindString(w)
					return fastCase{hdr: negotiate, body: recipeCall(`{"item_id":"9","path":"/item/p1","synthesis_id":"`+id+`"}`, ""), fast: true}
				}
				f, s := serveCase(dd.fast, byID(fast.Body.String())), serveCase(dd.sdk, byID(sdk.Body.String()))
				sameAnswer(t, f, s)
				if dd.fast.fastServed.Load() != before+1 {
					t.Errorf("round %d: the fast path did not answer the call by synthesis_id", round)
				}
				var res struct {
					Result struct {
						Structured map[string]any `json:"structuredContent"`
					} `json:"result"`
				}
				if json.Unmarshal(f.Body.Bytes(), &res) != nil || res.Result.Structured["outcome"] != "succeeded" || f.Code != http.StatusOK {
					t.Errorf("round %d: the call by synthesis_id: %d %s, want it run", round, f.Code, f.Body)
				}
				if n := dd.hits.Load() - hits; n != 2 {
					t.Errorf("round %d: %d upstream calls for the two doors, want one each", round, n)
				}
			}
		})
	}
}
