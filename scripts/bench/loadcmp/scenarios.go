package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// This file is the whole list of what the comparison measures: the
// sites (listeners of scripts/bench/Caddyfile), the scenarios (request
// shapes sent to one site), and the targets judged on them. How to add
// a scenario is in scripts/bench/README.md.

// site is one listener of scripts/bench/Caddyfile. loadcmp gives it a
// free loopback port and passes it to Caddy as the environment variable
// BENCH_PORT_<NAME> (the name upper-cased, '-' as '_').
type site struct {
	Name string
	// Door is how the load generator speaks to the site.
	Door door
	// Alg is the "alg" of the Attribution-Record an AGTP answer of the
	// site carries: "" for a site without rcns, "none" without
	// record_keys, "EdDSA" with an Ed25519 key. The sanity check
	// before the rounds holds every scenario to it.
	Alg string
	// Label names the site's configuration on the page.
	Label string
	// OAuth: the site's gateway runs identity oauth. Its scenarios'
	// requests carry the bench token (Authorization: Bearer) in place
	// of Agent-ID and Authority-Scope (withBearer): the token alone
	// names the agent and its scopes.
	OAuth bool
	// StaticOf, on a site whose upstream has a credential policy
	// (token_exchange, assertion), names the site that makes the same
	// requests with static headers: the page reports each scenario
	// against its twin there, round by round (not judged).
	StaticOf string
	// Redis: the site talks to the redis-server loadcmp starts
	// (BENCH_REDIS: the redis site's store, the floor site's round
	// trip); each of its runs reads that server's commandstats
	// (redisstats.go).
	Redis bool
}

// sites of scripts/bench/Caddyfile. Every gateway site writes its
// negotiation records to disk; only the record key and the fsync
// policy differ.
var sites = []*site{
	{Name: "proxy", Door: httpDoor{}, Label: "plain `reverse_proxy`, no rcns"},
	{Name: "nokey", Door: httpDoor{}, Alg: "none", Label: "rcns, no record key (unsigned records), fsync off"},
	{Name: "ed25519", Door: httpDoor{}, Alg: "EdDSA", Label: "rcns, Ed25519 record key, fsync off"},
	{Name: "group", Door: httpDoor{}, Alg: "none", Label: "rcns, no record key, fsync group (the default)"},
	{Name: "agtp", Door: agtpDoor{}, Alg: "none", Label: "the native AGTP/1.0 door (plain text) of the nokey gateway: same engine, same state"},
	{Name: "redis", Door: httpDoor{}, Alg: "none", Redis: true, Label: "a gateway configured as nokey with its state on Redis (`store redis`: one loopback redis-server 7, no persistence), so the Redis store against the memory store of nokey"},
	{Name: "mcp", Door: httpDoor{}, Alg: "none", Label: "a gateway configured as nokey with the MCP door on (`mcp /mcp`: stateless, JSON responses)"},
	{Name: "oauth", Door: httpDoor{}, Alg: "none", OAuth: true, Label: "a gateway configured as mcp but with `identity oauth` instead of `identity header`: every request carries `Authorization: Bearer <JWT>` (ES256, one client_credentials token fetched before the rounds from a local oidc-provider, `scripts/oauth/authserver.mjs`) and no `Agent-ID` or `Authority-Scope`; after its first use the verified token is a cache hit (SHA-256 lookup, `exp` checked)"},
	{Name: "exchange", Door: httpDoor{}, Alg: "none", OAuth: true, StaticOf: "oauth", Label: "a gateway configured as oauth (same token) whose upstream has `credentials token_exchange`: each call's upstream request carries a token exchanged (RFC 8693) for the caller's at the same oidc-provider; after the first call, a cache hit (SHA-256 of the caller's token, audience and scopes)"},
	{Name: "assertion", Door: httpDoor{}, Alg: "none", StaticOf: "mcp", Label: "a gateway configured as mcp (identity header) whose upstream has `credentials assertion`: each call's upstream request carries a fresh identity assertion, a JWT the gateway signs (Ed25519 key file, 60 s)"},
	{Name: "floor", Door: httpDoor{}, Redis: true, Label: "not a gateway: the proxy site's `reverse_proxy` after one round trip to the redis site's redis-server (`bench_redis_floor`, scripts/bench/floor: an `EVALSHA` of `return 1` on a client built as the Redis store builds its own), the floor under a request kind that makes one round trip"},
}

// envName is the environment variable that carries a site's port.
func (s *site) envName() string {
	return "BENCH_PORT_" + strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
}

func siteNamed(name string) *site {
	for _, s := range sites {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// phase is how a scenario is run in each round.
type phase string

const (
	// phaseLoad: closed loop, -workers requests in flight; gives the
	// Caddy CPU per request and the throughput, each against the (b)
	// runs just before and after.
	phaseLoad phase = "load"
	// phaseSlow: open loop at -slow-rate; gives p50 latency, compared
	// between the (e) scenarios of one site in the same round.
	phaseSlow phase = "slow"
)

// scenario is one measured request shape on one site.
type scenario struct {
	Key    string // unique: "b", or letter/site such as "d/nokey"
	Letter string // what the page explains: b, b2, c, d, e1, e3, f, g
	Site   string
	Method string
	// Path is the request path; "{run}" becomes the run's tag (unique
	// per run) and "{i}" the request's index in the run.
	Path   string
	Header map[string]string
	// Body is the request body; "{run}" and "{i}" in it become what
	// they become in Path (an MCP call's path argument, fresh per
	// request).
	Body string
	Want int // the status every answer must have
	// Contract: a contract is synthesized on the run's path (as
	// Path with {i} = "0") before each run, and every request presents
	// it in Contract-Synthesized.
	Contract bool
	// NoRecord: a request that is not AGTP, answered without an
	// Attribution-Record even on a gateway site.
	NoRecord bool
	// KeyPerRequest: every request carries its own Idempotency-Key
	// ("{run}-{i}"), so each one is claimed, runs and is stored.
	KeyPerRequest bool
	// WantBody, when set, must appear in the body of the sanity
	// check's answer (an MCP tool error is an HTTP 200 too).
	WantBody string
	Phase    phase
}

// agentID is the bench agent (scripts/bench/docs/agents/bench-agent.yaml).
const agentID = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"

const (
	scopeRead      = "bench:read"
	scopeNegotiate = "rcns:negotiate, bench:read"
	bodyOne        = `{"parameters":{"item_id":"1"}}`
	bodyThree      = `{"parameters":{"a":"1","b":"2","c":"3"}}`
)

func agentHeader(scope string, kv ...string) map[string]string {
	h := map[string]string{"Agent-ID": agentID, "Authority-Scope": scope}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

// letters describes each scenario letter for the page.
var letters = map[string]string{
	"b":   "`GET /items/1` through the plain `reverse_proxy` (200): the reference",
	"b2":  "the same non-AGTP `GET` through a gateway site: rcns passes it on (200)",
	"bf":  "(b) after one Redis round trip (`EVALSHA` of `return 1`, go-redis as the Redis store configures it) in the same Caddy request: not a gateway, the floor under every kind that makes one round trip (200)",
	"c":   "Tier B `FETCH /items/1` → `GET /items/1` (200)",
	"d":   "`LOOKUP /item/d-…` presenting `Contract-Synthesized` of a one-step contract made before the run (200)",
	"e1":  "`LOOKUP /slow-one/e-…` presenting a contract whose one step waits 20 ms upstream (200)",
	"e3":  "`COMPARE /slow-three/e-…` presenting a contract of three independent 20 ms steps, run in parallel (200)",
	"f":   "`LOOKUP /nothing` with `Allow-RCNS: true`: every lock open, no recipe matches → 464, recorded",
	"cm":  "the Tier B endpoint of (c) as the MCP tool `fetch_item`: `POST /mcp` with a JSON-RPC `tools/call` (200, `outcome` `succeeded`)",
	"cm7": "(cm) from a client on MCP 2026-07-28, as the go-sdk client sends it: `Mcp-Method` and `Mcp-Name`, and the `_meta` triple (protocol version, capabilities, clientInfo) (200, `outcome` `succeeded`)",
	"dk":  "(d) with a fresh `Idempotency-Key` per request: the key claimed with the contract lookup, the answer stored for replay (200)",
	"g":   "`LOOKUP /item/g-…` with `Allow-RCNS: true`, a fresh path per request: optimistic synthesis with contract creation, one upstream step (263)",
	"gm":  "(g) as the MCP tool `lookup-item` of its recipe: `POST /mcp` with a JSON-RPC `tools/call` whose `path` argument is fresh per request (200, the tool result's `agtp-status` 263)",
	"gm7": "(gm) from a client on MCP 2026-07-28, as the go-sdk client sends it (the header fields and `_meta` triple of (cm7)) (200, `agtp-status` 263)",
}

// Scenario constructors, one per letter: a new site gets a letter's
// scenario with one call.
func b2(site string) *scenario {
	return &scenario{Key: "b2/" + site, Letter: "b2", Site: site, Method: "GET", Path: "/items/1", Want: 200, NoRecord: true, Phase: phaseLoad}
}

func c(site string) *scenario {
	return &scenario{Key: "c/" + site, Letter: "c", Site: site, Method: "FETCH", Path: "/items/1",
		Header: agentHeader(scopeRead), Want: 200, Phase: phaseLoad}
}

// cm is (c) as an MCP tools/call (issue 20: a Tier B tool call against
// the same endpoint on the HTTP door, in the same run).
func cm(site string) *scenario {
	return &scenario{Key: "cm/" + site, Letter: "cm", Site: site, Method: "POST", Path: "/mcp",
		// As an MCP client sends a call after initialize: the revision
		// it negotiated in MCP-Protocol-Version (a MUST from MCP
		// 2025-06-18 on; without it a server assumes 2025-03-26).
		Header: agentHeader(scopeRead, "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
			"Mcp-Protocol-Version", "2025-11-25"),
		Body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`,
		Want: 200, WantBody: `"outcome":"succeeded"`, Phase: phaseLoad}
}

// cm7 is (cm) from a client on MCP 2026-07-28 (the go-sdk client's
// revision): the standard header fields and the per-request _meta
// triple the SDK checks (SEP-2575), as that client sends them.
func cm7(site string) *scenario {
	s := cm(site)
	s.Key, s.Letter = "cm7/"+site, "cm7"
	s.Header = agentHeader(scopeRead, "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "fetch_item")
	s.Body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},` +
		`"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"bench-client","version":"1.0.0"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	return s
}

func d(site string) *scenario {
	return &scenario{Key: "d/" + site, Letter: "d", Site: site, Method: "LOOKUP", Path: "/item/d-{run}",
		Header: agentHeader(scopeRead, "Content-Type", "application/json"), Body: bodyOne, Contract: true, Want: 200, Phase: phaseLoad}
}

func e1(site string) *scenario {
	return &scenario{Key: "e1/" + site, Letter: "e1", Site: site, Method: "LOOKUP", Path: "/slow-one/e-{run}",
		Header: agentHeader(scopeRead, "Content-Type", "application/json"), Body: bodyOne, Contract: true, Want: 200, Phase: phaseSlow}
}

func e3(site string) *scenario {
	return &scenario{Key: "e3/" + site, Letter: "e3", Site: site, Method: "COMPARE", Path: "/slow-three/e-{run}",
		Header: agentHeader(scopeRead, "Content-Type", "application/json"), Body: bodyThree, Contract: true, Want: 200, Phase: phaseSlow}
}

func f(site string) *scenario {
	return &scenario{Key: "f/" + site, Letter: "f", Site: site, Method: "LOOKUP", Path: "/nothing",
		Header: agentHeader(scopeNegotiate, "Allow-RCNS", "true"), Want: 464, Phase: phaseLoad}
}

// dk is d with a fresh Idempotency-Key per request: a keyed
// presentation, claimed with the contract lookup and stored.
func dk(site string) *scenario {
	s := d(site)
	s.Key, s.Letter, s.KeyPerRequest = "dk/"+site, "dk", true
	return s
}

// gm is (g) as an MCP tools/call of the recipe's tool (the MCP door's
// share of a synthesis, against (g) on the HTTP door in the same run).
func gm(site string) *scenario {
	return &scenario{Key: "gm/" + site, Letter: "gm", Site: site, Method: "POST", Path: "/mcp",
		Header: agentHeader(scopeNegotiate, "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
			"Mcp-Protocol-Version", "2025-11-25"),
		Body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup-item","arguments":{"item_id":"1","path":"/item/gm-{run}-{i}"}}}`,
		Want: 200, WantBody: `"io.github.caddy-rcns/agtp-status":263`, Phase: phaseLoad}
}

// gm7 is (gm) from a client on MCP 2026-07-28, as (cm7) is (cm).
func gm7(site string) *scenario {
	s := gm(site)
	s.Key, s.Letter = "gm7/"+site, "gm7"
	s.Header = agentHeader(scopeNegotiate, "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "lookup-item")
	s.Body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup-item","arguments":{"item_id":"1","path":"/item/gm7-{run}-{i}"},` +
		`"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"bench-client","version":"1.0.0"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	return s
}

func g(site string) *scenario {
	return &scenario{Key: "g/" + site, Letter: "g", Site: site, Method: "LOOKUP", Path: "/item/g-{run}-{i}",
		Header: agentHeader(scopeNegotiate, "Allow-RCNS", "true", "Content-Type", "application/json"), Body: bodyOne, Want: 263, Phase: phaseLoad}
}

// scenarios returns every scenario of the comparison in table order;
// "b" comes first and is the reference of every load scenario.
func scenarios() []*scenario {
	return []*scenario{
		{Key: "b", Letter: "b", Site: "proxy", Method: "GET", Path: "/items/1", Want: 200, NoRecord: true, Phase: phaseLoad},
		b2("nokey"),
		{Key: "bf/floor", Letter: "bf", Site: "floor", Method: "GET", Path: "/items/1", Want: 200, NoRecord: true, Phase: phaseLoad},
		c("nokey"), d("nokey"), f("nokey"), g("nokey"),
		c("ed25519"), d("ed25519"), f("ed25519"), g("ed25519"),
		f("group"), g("group"),
		c("agtp"), d("agtp"),
		c("mcp"), cm("mcp"), cm7("mcp"),
		g("mcp"), gm("mcp"), gm7("mcp"),
		c("oauth"), cm("oauth"),
		c("exchange"), c("assertion"),
		c("redis"), d("redis"), f("redis"), g("redis"),
		dk("nokey"), dk("redis"),
		e1("nokey"), e3("nokey"),
		e1("ed25519"), e3("ed25519"),
	}
}

// target is one performance target, judged on every run.
type target struct {
	Name string // as the page shows it
	// Key is the scenario judged. For kindCPU, the median over rounds
	// of its Caddy CPU per request minus that of the (b) runs around
	// it, µs; for kindVs, minus that of Of in the same round, µs; for
	// kindSlow, the median over rounds of the p50 of Key divided by the
	// p50 of Of in the same round; for kindRatio, the median over
	// rounds of its Caddy CPU per request divided by that of Of in the
	// same round.
	Key, Of string
	Kind    targetKind
	Limit   float64
	// Below: the value must be less than Limit; otherwise at most Limit.
	Below bool
}

type targetKind string

const (
	kindCPU  targetKind = "cpu"  // Caddy CPU µs per request more than (b)
	kindVs   targetKind = "vs"   // Caddy CPU µs per request of Key more than Of's, in the same round
	kindSlow targetKind = "slow" // p50 ratio of two (e) scenarios
	// kindRatio: Caddy CPU per request of Key divided by Of's, in the
	// same round.
	kindRatio targetKind = "ratio"
	// kindP50Vs: the closed-loop p50 of Key minus Of's, in the same
	// round, ms.
	kindP50Vs targetKind = "p50vs"
)

// targets are the project's load targets (issues 18 and 32 of its
// tracker).
var targets = []target{
	{Name: "(c) Tier B, no record key: Caddy CPU per request ≤ (b) + 15 µs", Key: "c/nokey", Kind: kindCPU, Limit: 15},
	{Name: "(d) contract presentation, no record key: ≤ (b) + 15 µs", Key: "d/nokey", Kind: kindCPU, Limit: 15},
	{Name: "(c) Tier B, Ed25519 record key: ≤ (b) + 30 µs", Key: "c/ed25519", Kind: kindCPU, Limit: 30},
	{Name: "(d) contract presentation, Ed25519 record key: ≤ (b) + 30 µs", Key: "d/ed25519", Kind: kindCPU, Limit: 30},
	{Name: "(d) over the native AGTP/1.0 door: ≤ (d) over the HTTP door", Key: "d/agtp", Of: "d/nokey", Kind: kindVs, Limit: 0},
	{Name: "(c) Tier B, identity oauth (a verified bearer JWT), HTTP door: ≤ identity header + 30 µs", Key: "c/oauth", Of: "c/mcp", Kind: kindVs, Limit: 30},
	{Name: "(cm) MCP tools/call, identity oauth (a verified bearer JWT): ≤ identity header + 30 µs", Key: "cm/oauth", Of: "cm/mcp", Kind: kindVs, Limit: 30},
	{Name: "(cm) MCP tools/call: Caddy CPU per request ≤ 2 × the same call over the HTTP door (c)", Key: "cm/mcp", Of: "c/mcp", Kind: kindRatio, Limit: 2},
	{Name: "(cm7) MCP tools/call from a 2026-07-28 client: ≤ 2 × the same call over the HTTP door (c)", Key: "cm7/mcp", Of: "c/mcp", Kind: kindRatio, Limit: 2},
	{Name: "(gm) MCP recipe call (synthesis): Caddy CPU per request ≤ 2 × the same synthesis over the HTTP door (g)", Key: "gm/mcp", Of: "g/mcp", Kind: kindRatio, Limit: 2},
	{Name: "(gm7) MCP recipe call from a 2026-07-28 client: ≤ 2 × the same synthesis over the HTTP door (g)", Key: "gm7/mcp", Of: "g/mcp", Kind: kindRatio, Limit: 2},
	{Name: "(f) gate refusal, no record key: < (b)", Key: "f/nokey", Kind: kindCPU, Limit: 0, Below: true},
	{Name: "(f) gate refusal, Ed25519 record key: < (b)", Key: "f/ed25519", Kind: kindCPU, Limit: 0, Below: true},
	{Name: "(g) synthesis, no record key: ≤ (b) + 80 µs", Key: "g/nokey", Kind: kindCPU, Limit: 80},
	{Name: "(c) Tier B on the Redis store: Caddy CPU per request ≤ the memory store's + 20 µs", Key: "c/redis", Of: "c/nokey", Kind: kindVs, Limit: 20},
	{Name: "(c) Tier B on the Redis store: closed-loop p50 ≤ the memory store's + 0.3 ms", Key: "c/redis", Of: "c/nokey", Kind: kindP50Vs, Limit: 0.3},
	{Name: "(d) contract presentation on the Redis store: Caddy CPU ≤ memory + 20 µs", Key: "d/redis", Of: "d/nokey", Kind: kindVs, Limit: 20},
	{Name: "(d) contract presentation on the Redis store: p50 ≤ memory + 0.3 ms", Key: "d/redis", Of: "d/nokey", Kind: kindP50Vs, Limit: 0.3},
	{Name: "(dk) keyed contract presentation on the Redis store: Caddy CPU ≤ memory + 20 µs", Key: "dk/redis", Of: "dk/nokey", Kind: kindVs, Limit: 20},
	{Name: "(dk) keyed contract presentation on the Redis store: p50 ≤ memory + 0.3 ms", Key: "dk/redis", Of: "dk/nokey", Kind: kindP50Vs, Limit: 0.3},
	{Name: "(f) gate refusal on the Redis store: Caddy CPU ≤ memory + 20 µs", Key: "f/redis", Of: "f/nokey", Kind: kindVs, Limit: 20},
	{Name: "(f) gate refusal on the Redis store: p50 ≤ memory + 0.3 ms", Key: "f/redis", Of: "f/nokey", Kind: kindP50Vs, Limit: 0.3},
	{Name: "(g) synthesis on the Redis store: Caddy CPU ≤ memory + 20 µs", Key: "g/redis", Of: "g/nokey", Kind: kindVs, Limit: 20},
	{Name: "(g) synthesis on the Redis store: p50 ≤ memory + 0.3 ms", Key: "g/redis", Of: "g/nokey", Kind: kindP50Vs, Limit: 0.3},
	{Name: "(e) no record key: p50 of three parallel 20 ms steps ≤ 1.15 × p50 of one", Key: "e3/nokey", Of: "e1/nokey", Kind: kindSlow, Limit: 1.15},
	{Name: "(e) Ed25519 record key: p50 of three parallel 20 ms steps ≤ 1.15 × p50 of one", Key: "e3/ed25519", Of: "e1/ed25519", Kind: kindSlow, Limit: 1.15},
}

// checkScenarios reports a scenario list that cannot run: a duplicate
// key, a site not in sites, a letter the page does not explain, no (b),
// or a target naming a scenario not in the list.
func checkScenarios(all []*scenario) error {
	seen := map[string]bool{}
	for _, s := range all {
		switch {
		case seen[s.Key]:
			return fmt.Errorf("scenario %q is listed twice", s.Key)
		case siteNamed(s.Site) == nil:
			return fmt.Errorf("scenario %q: no site %q", s.Key, s.Site)
		case letters[s.Letter] == "":
			return fmt.Errorf("scenario %q: letter %q has no description", s.Key, s.Letter)
		case s.Want < 100 || s.Want > 999:
			return fmt.Errorf("scenario %q: expected status %d", s.Key, s.Want)
		case s.Phase != phaseLoad && s.Phase != phaseSlow:
			return fmt.Errorf("scenario %q: phase %q", s.Key, s.Phase)
		}
		seen[s.Key] = true
	}
	if !seen["b"] || all[0].Key != "b" {
		return fmt.Errorf("the reference scenario b must come first")
	}
	for _, t := range targets {
		for _, k := range []string{t.Key, t.Of} {
			if k != "" && !seen[k] {
				return fmt.Errorf("target %q: no scenario %q", t.Name, k)
			}
		}
	}
	return nil
}

// filterScenarios keeps the scenarios whose key, letter or site is in
// the comma-separated list only (all for ""); b is always kept, as
// every load scenario is measured against it. A token that names no
// scenario is an error.
func filterScenarios(all []*scenario, only string) ([]*scenario, error) {
	if strings.TrimSpace(only) == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, k := range strings.Split(only, ",") {
		if k = strings.TrimSpace(k); k != "" {
			want[k] = true
		}
	}
	used := map[string]bool{}
	var out []*scenario
	for _, s := range all {
		hit := s.Key == "b"
		for _, k := range []string{s.Key, s.Letter, s.Site} {
			if want[k] {
				used[k], hit = true, true
			}
		}
		if hit {
			out = append(out, s)
		}
	}
	var unknown []string
	for k := range want {
		if !used[k] {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("-only: %s names no scenario (keys such as d/nokey, letters such as c, sites such as ed25519)", strings.Join(unknown, ", "))
	}
	return out, nil
}

// withBearer returns the header fields of a request to an OAuth site:
// h without Agent-ID and Authority-Scope (the token names the agent and
// stands for the scope claim), with Authorization: Bearer token.
func withBearer(h map[string]string, token string) map[string]string {
	out := map[string]string{"Authorization": "Bearer " + token}
	for k, v := range h {
		switch strings.ToLower(k) {
		case "agent-id", "authority-scope", "authorization":
		default:
			out[k] = v
		}
	}
	return out
}

// path returns the scenario's request path for run tag and index i.
func (s *scenario) path(tag string, i int) string { return fill(s.Path, tag, i) }

// body returns the scenario's request body for run tag and index i.
func (s *scenario) body(tag string, i int) string { return fill(s.Body, tag, i) }

// perRequest reports whether the scenario's requests differ within a
// run ("{i}" in its path or body, or a key per request).
func (s *scenario) perRequest() bool {
	return strings.Contains(s.Path, "{i}") || strings.Contains(s.Body, "{i}") || s.KeyPerRequest
}

// fill is t with "{run}" replaced by tag and "{i}" by i.
func fill(t, tag string, i int) string {
	t = strings.ReplaceAll(t, "{run}", tag)
	if strings.Contains(t, "{i}") {
		t = strings.ReplaceAll(t, "{i}", strconv.Itoa(i))
	}
	return t
}
