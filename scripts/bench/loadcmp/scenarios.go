package main

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// agentID is the bench agent (scripts/bench/docs/agents/bench-agent.yaml).
const agentID = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"

// Variants of the gateway (one listener each in scripts/bench/Caddyfile).
const (
	vNone    = ""        // (a), (b): no gateway
	vNoKey   = "nokey"   // no record_keys, fsync off
	vEd25519 = "ed25519" // Ed25519 record key, fsync off
	vGroup   = "group"   // no record_keys, fsync group (the default)
	vHeaders = "headers" // (bh): reverse_proxy adding (c)'s AGTP response headers, no gateway
	// (bd): (d)'s exchange with no gateway work (bench_exchange: read the
	// request body, the same upstream GET, static (d) answer).
	vExchange = "exchange"
)

// staticSynthesisID is the Contract-Synthesized value (bd) sends and
// answers with: the form and length of a real one (syn- and 22
// base64url characters), naming no contract.
const staticSynthesisID = "syn-Lptr2IwjQBSY0j-XhChA-w"

// scenario is one measured request shape.
type scenario struct {
	Key     string // unique, e.g. "c/nokey"
	Letter  string // a, b, b2, bh, bd, c, d, e1, e3, f, g
	Variant string
	Label   string
	Method  string
	Headers map[string]string
	Body    string
	Want    int // expected status
	// pathFor returns the request path of request i of a run tagged tag
	// (tags are unique per run); the contract, when the scenario
	// presents one, is synthesized on pathFor(tag, -1).
	pathFor func(tag string, i int) string
	// Contract: synthesize a fresh contract before each run and present it.
	Contract bool
	// Tput: measured in the throughput phase; Rate: fixed-rate phase
	// requests per second (0 = not in that phase).
	Tput bool
	Rate int
}

func fixedPath(p string) func(string, int) string { return func(string, int) string { return p } }

// runPath: one path per run (the contract's pair).
func runPath(prefix string) func(string, int) string {
	return func(tag string, _ int) string { return prefix + tag }
}

// uniquePath: a fresh pair for every request (every request synthesizes).
func uniquePath(prefix string) func(string, int) string {
	return func(tag string, i int) string { return fmt.Sprintf("%s%s-%d", prefix, tag, i) }
}

const (
	scopeRead      = "bench:read"
	scopeNegotiate = "rcns:negotiate, bench:read"
	bodyOne        = `{"parameters":{"item_id":"1"}}`
	bodyThree      = `{"parameters":{"a":"1","b":"2","c":"3"}}`
)

func agentHeaders(scope string, extra ...string) map[string]string {
	h := map[string]string{"Agent-ID": agentID, "Authority-Scope": scope}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// scenarios returns every scenario of the comparison, in table order.
func scenarios(rate, slowRate int) []*scenario {
	out := []*scenario{
		{Key: "a", Letter: "a", Label: "direct upstream: GET /items/1", Method: http.MethodGet,
			pathFor: fixedPath("/items/1"), Want: 200, Tput: true, Rate: rate},
		{Key: "b", Letter: "b", Label: "plain reverse_proxy: GET /items/1", Method: http.MethodGet,
			pathFor: fixedPath("/items/1"), Want: 200, Tput: true, Rate: rate},
		{Key: "b2", Letter: "b2", Variant: vNoKey, Label: "non-AGTP GET through the gateway site (rcns passes it to reverse_proxy)",
			Method: http.MethodGet, pathFor: fixedPath("/items/1"), Want: 200, Tput: true},
		{Key: "bh", Letter: "bh", Variant: vHeaders, Label: "plain reverse_proxy that also sends the AGTP response headers of (c), static values (no gateway)",
			Method: http.MethodGet, pathFor: fixedPath("/items/1"), Want: 200, Tput: true},
		{Key: "bd", Letter: "bd", Variant: vExchange, Label: "the exchange of (d) with no gateway work: bench_exchange reads its request body, makes the same upstream GET and answers with (d)'s AGTP headers and envelope, static values",
			Method: "LOOKUP", Headers: agentHeaders(scopeRead, "Content-Type", "application/json", "Contract-Synthesized", staticSynthesisID), Body: bodyOne,
			pathFor: runPath("/item/d-"), Want: 200, Tput: true},
	}
	for _, v := range []string{vNoKey, vEd25519} {
		out = append(out,
			&scenario{Key: "c/" + v, Letter: "c", Variant: v, Label: "Tier B: FETCH /items/1 → GET /items/1",
				Method: "FETCH", Headers: agentHeaders(scopeRead), pathFor: fixedPath("/items/1"), Want: 200, Tput: true, Rate: rate},
			&scenario{Key: "d/" + v, Letter: "d", Variant: v, Label: "contract presentation, one step (LOOKUP /item/… + Contract-Synthesized)",
				Method: "LOOKUP", Headers: agentHeaders(scopeRead, "Content-Type", "application/json"), Body: bodyOne,
				pathFor: runPath("/item/d-"), Contract: true, Want: 200, Tput: true, Rate: rate},
			&scenario{Key: "e1/" + v, Letter: "e1", Variant: v, Label: "contract presentation, one 20 ms step",
				Method: "LOOKUP", Headers: agentHeaders(scopeRead, "Content-Type", "application/json"), Body: bodyOne,
				pathFor: runPath("/slow-one/e-"), Contract: true, Want: 200, Rate: slowRate},
			&scenario{Key: "e3/" + v, Letter: "e3", Variant: v, Label: "contract presentation, three parallel 20 ms steps",
				Method: "COMPARE", Headers: agentHeaders(scopeRead, "Content-Type", "application/json"), Body: bodyThree,
				pathFor: runPath("/slow-three/e-"), Contract: true, Want: 200, Rate: slowRate},
		)
	}
	for _, v := range []string{vNoKey, vEd25519, vGroup} {
		out = append(out,
			&scenario{Key: "f/" + v, Letter: "f", Variant: v, Label: "gate refusal 464 composition-impossible (LOOKUP /nothing, Allow-RCNS: true)",
				Method: "LOOKUP", Headers: agentHeaders(scopeNegotiate, "Allow-RCNS", "true"), pathFor: fixedPath("/nothing"),
				Want: 464, Tput: true, Rate: rate},
			&scenario{Key: "g/" + v, Letter: "g", Variant: v, Label: "optimistic synthesis 263, one-step recipe, new contract per request",
				Method: "LOOKUP", Headers: agentHeaders(scopeNegotiate, "Allow-RCNS", "true", "Content-Type", "application/json"), Body: bodyOne,
				pathFor: uniquePath("/item/g-"), Want: 263, Tput: true, Rate: rate},
		)
	}
	return out
}

// filterScenarios keeps the scenarios whose key or letter is listed
// (comma-separated); (a) and (b) are always kept (ratios need them).
func filterScenarios(all []*scenario, only string) ([]*scenario, error) {
	if only == "" {
		return all, nil
	}
	want := map[string]bool{"a": true, "b": true}
	for _, k := range strings.Split(only, ",") {
		if k = strings.TrimSpace(k); k != "" { // "c,d," as "c,d", as -profile reads it
			want[k] = true
		}
	}
	var out []*scenario
	used := map[string]bool{"a": true, "b": true}
	for _, s := range all {
		matched := false
		for _, k := range []string{s.Key, s.Letter, s.Variant} {
			if k != "" && want[k] {
				used[k], matched = true, true
			}
		}
		if matched {
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
		return nil, fmt.Errorf("-only: %s names no scenario (keys such as c/nokey, letters a b b2 bh bd c d e1 e3 f g, variants nokey ed25519 group headers exchange)", strings.Join(unknown, ", "))
	}
	return out, nil
}
