package caddymodule

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/oppage"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redisstore"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/internal/testwait"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// countingUpstream serves GET /items/{id} as benchUpstream does and
// counts the calls it answered.
func countingUpstream(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "name": "item", "price": 1})
	})
	return loopbackServer(t, mux).URL, &n
}

// redisGateway is the bench gateway on the Redis store at addr, each
// adjust applied before Provision.
func redisGateway(t *testing.T, upstream, addr string, adjust ...func(*Handler)) *testGateway {
	t.Helper()
	return &testGateway{h: benchHandlerWith(t, upstream, false, "", "", append([]func(*Handler){func(h *Handler) {
		h.Store = StoreRedis
		h.Redis = &RedisConfig{Addresses: []string{addr}, KeyPrefix: "t:"}
	}}, adjust...)...)}
}

// wantStoreUnavailable checks a 503 store-unavailable answer.
func wantStoreUnavailable(t *testing.T, a *answer) {
	t.Helper()
	wantError(t, a, 503, "store-unavailable", "nothing was executed")
	if a.hdr("Retry-After") != "1" || a.body["retryable"] != true {
		t.Fatalf("503 store-unavailable without Retry-After 1 or retryable: %v %s", a.header, a)
	}
}

var itemInput = map[string]any{"parameters": map[string]any{"item_id": "1"}}

// TestRedisStoreServes: on the Redis store the engine serves Tier B,
// keyed replays, the gate and Tier C by pair, and INSPECT of contracts
// and attempts, as on memory.
func TestRedisStoreServes(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits := countingUpstream(t)
	g := redisGateway(t, up, srv.Addr())
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "k1"); a.status != 200 {
		t.Fatalf("keyed Tier B: %s", a)
	}
	a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "k1")
	if a.status != 200 || a.hdr("Idempotent-Replayed") != "true" || hits.Load() != 1 {
		t.Fatalf("keyed repeat: %s (replayed %q, %d upstream calls)", a, a.hdr("Idempotent-Replayed"), hits.Load())
	}
	syn := g.do(t, "LOOKUP", "/item/r1", itemInput, "Allow-RCNS", "true")
	if syn.status != 263 || syn.str("synthesis_id") == "" {
		t.Fatalf("gate synthesis: %s", syn)
	}
	if a := g.do(t, "LOOKUP", "/item/r1", itemInput); a.status != 200 || a.hdr("Contract-Synthesized") != syn.str("synthesis_id") {
		t.Fatalf("Tier C by pair: %s", a)
	}
	if a := g.do(t, "LOOKUP", "/item/r1", itemInput, "Contract-Synthesized", syn.str("synthesis_id")); a.status != 200 {
		t.Fatalf("presentation: %s", a)
	}
	if a := g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": syn.str("synthesis_id")}); a.status != 200 || a.str("state") != "active" {
		t.Fatalf("INSPECT contract: %s", a)
	}
	refused := g.do(t, "ACQUIRE", "/nothing/here/x", itemInput, "Allow-RCNS", "true")
	if refused.status != 464 || refused.hdr("RCNS-Attempt-Id") == "" {
		t.Fatalf("gate refusal: %s", refused)
	}
	if a := g.builtin(t, "INSPECT", map[string]any{"target": "rcns-attempt", "attempt_id": refused.hdr("RCNS-Attempt-Id")}); a.status != 200 {
		t.Fatalf("INSPECT rcns-attempt: %s", a)
	}
	if a := g.endContract(t, "REVOKE", syn.str("synthesis_id")); a.status != 200 {
		t.Fatalf("REVOKE: %s", a)
	}
	wantError(t, g.do(t, "LOOKUP", "/item/r1", itemInput, "Contract-Synthesized", syn.str("synthesis_id")), 464, "contract-revoked", "")
}

// TestRedisStoreDown: with Redis stopped, every request that needs
// state answers 503 store-unavailable with Retry-After and executes
// nothing (no upstream call, no contract); pass-through traffic, the
// manifest and an unkeyed Tier B call (which needs no state) are served;
// once Redis is back the gateway serves again by itself.
func TestRedisStoreDown(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits := countingUpstream(t)
	g := redisGateway(t, up, srv.Addr())
	syn := g.do(t, "LOOKUP", "/item/d1", itemInput, "Allow-RCNS", "true")
	if syn.status != 263 {
		t.Fatalf("gate synthesis: %s", syn)
	}
	before := hits.Load()
	srv.Stop()
	for _, tc := range []struct {
		name   string
		method string
		target string
		kv     []string
	}{
		{"keyed Tier B", "FETCH", "/items/1", []string{"Idempotency-Key", "down-1"}},
		{"gate", "LOOKUP", "/item/d2", []string{"Allow-RCNS", "true"}},
		{"Tier C by pair", "LOOKUP", "/item/d1", nil},
		{"presentation", "LOOKUP", "/item/d1", []string{"Contract-Synthesized", syn.str("synthesis_id")}},
		{"keyed presentation", "LOOKUP", "/item/d1", []string{"Contract-Synthesized", syn.str("synthesis_id"), "Idempotency-Key", "down-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStoreUnavailable(t, g.do(t, tc.method, tc.target, itemInput, tc.kv...))
		})
	}
	// PROPOSE's 503 (its negotiation turn is the first store call)
	// names a negotiation, as every PROPOSE answer does.
	prop := g.builtin(t, "PROPOSE", proposal("/item/d3"))
	wantStoreUnavailable(t, prop)
	if id := prop.hdr("Negotiation-ID"); len(id) != 36 || prop.body["negotiation_id"] != id {
		t.Fatalf("PROPOSE 503 Negotiation-ID %q, body negotiation_id %v", id, prop.body["negotiation_id"])
	}
	wantStoreUnavailable(t, g.builtin(t, "INSPECT", map[string]any{"target": "contract", "synthesis_id": syn.str("synthesis_id")}))
	wantStoreUnavailable(t, g.endContract(t, "REVOKE", syn.str("synthesis_id")))
	if n := hits.Load(); n != before {
		t.Fatalf("%d upstream calls while the store was down", n-before)
	}
	if a := g.anonymous(t, "DISCOVER", "/", nil); a.status != 200 {
		t.Fatalf("manifest while the store is down: %s", a)
	}
	if a := g.serve(t, "GET", "/legacy", nil, nil, 0); a.status != http.StatusTeapot || g.passed != 1 {
		t.Fatalf("pass-through while the store is down: %s (passed %d)", a, g.passed)
	}
	if a := g.do(t, "FETCH", "/items/2", nil); a.status != 200 {
		t.Fatalf("unkeyed Tier B while the store is down: %s", a)
	}
	if !g.h.redis.Down() {
		t.Fatal("the store is not reported down")
	}
	if got := metricValue(t, g.h, "caddy_rcns_store_up"); got != 0 {
		t.Fatalf("caddy_rcns_store_up = %v while down", got)
	}
	for _, op := range []store.Op{store.OpClaim, store.OpResolvePair, store.OpPresent} {
		if got := metricValue(t, g.h, "caddy_rcns_store_errors_total", "op", string(op)); got < 1 {
			t.Errorf("caddy_rcns_store_errors_total{op=%q} = %v, want at least 1", op, got)
		}
	}
	if n := seriesCount(t, g.h, "caddy_rcns_store_round_trip_duration_seconds"); n < 4 {
		t.Errorf("round-trip latency series by op: %d, want at least 4", n)
	}
	srv.Restart()
	// Redis restarted empty: the contract is gone (404), and the gate
	// serves again (unkeyed: claims wait out the restart quarantine).
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := g.do(t, "LOOKUP", "/item/d4", itemInput, "Allow-RCNS", "true")
		if a.status == 263 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not recover: %s", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantError(t, g.do(t, "LOOKUP", "/item/d1", itemInput, "Contract-Synthesized", syn.str("synthesis_id")), 404, "contract-not-found", "")
	// The quarantine's 503 says why and how long: the longest lease
	// (composition_timeout 60 s, the longest plan here, plus the 10 s
	// margin) less the seconds since the restart.
	a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "after-restart")
	wantError(t, a, 503, "store-unavailable", "Redis restarted")
	if ra, _ := strconv.Atoi(a.hdr("Retry-After")); ra < 55 || ra > 70 || a.body["retry_after_seconds"] != float64(ra) {
		t.Fatalf("the quarantine's Retry-After %q, retry_after_seconds %v: want the time left of the 70 s lease", a.hdr("Retry-After"), a.body["retry_after_seconds"])
	}
	// The health check shows it to the SRE (it runs every 5 s).
	for deadline := time.Now().Add(15 * time.Second); metricValue(t, g.h, "caddy_rcns_store_quarantine_seconds") < 40; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("caddy_rcns_store_quarantine_seconds = %v during the quarantine", metricValue(t, g.h, "caddy_rcns_store_quarantine_seconds"))
		}
	}
}

// TestRedisStoreRequired: a Redis that does not answer fails the config
// load, naming its address, unless store_required is off: then the
// gateway starts degraded (503 store-unavailable) and serves once Redis
// answers.
func TestRedisStoreRequired(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Stop()
	up, hits := countingUpstream(t)
	h := &Handler{}
	h.Name = "required-test"
	h.Store, h.Redis = StoreRedis, &RedisConfig{Addresses: []string{srv.Addr()}}
	h.RecordsDir = "off"
	err := h.Provision(benchContext(t))
	_ = h.Cleanup()
	if err == nil || !strings.Contains(err.Error(), srv.Addr()) || !strings.Contains(err.Error(), "store_required off") {
		t.Fatalf("Provision against a stopped Redis: %v; want an error naming %s", err, srv.Addr())
	}
	// A Redis that answers with an error reply is named as such, not as
	// one that does not answer (a DB out of range here).
	live := redistest.StartServer(t)
	h = &Handler{}
	h.Name = "required-test-db"
	h.Store, h.Redis = StoreRedis, &RedisConfig{Addresses: []string{live.Addr()}, DB: 99}
	h.RecordsDir = "off"
	err = h.Provision(benchContext(t))
	_ = h.Cleanup()
	if err == nil || !strings.Contains(err.Error(), "Redis refused: ERR DB index is out of range") {
		t.Fatalf("Provision with db 99: %v; want Redis's own refusal named", err)
	}
	off := false
	g := redisGateway(t, up, srv.Addr(), func(h *Handler) { h.StoreRequired = &off })
	wantStoreUnavailable(t, g.do(t, "LOOKUP", "/item/q1", itemInput, "Allow-RCNS", "true"))
	srv.Restart()
	if a := g.do(t, "LOOKUP", "/item/q1", itemInput, "Allow-RCNS", "true"); a.status != 263 || hits.Load() != 1 {
		t.Fatalf("after Redis started: %s (%d upstream calls)", a, hits.Load())
	}
}

// TestRedisPoolSharedAcrossReload: a reload with the same store settings
// keeps the Redis client (one pool); the client is closed when the last
// configuration using it is cleaned up; other settings get their own.
func TestRedisPoolSharedAcrossReload(t *testing.T) {
	srv := redistest.StartServer(t)
	up, _ := countingUpstream(t)
	first := redisGateway(t, up, srv.Addr())
	second := redisGateway(t, up, srv.Addr())
	if first.h.redis == nil || first.h.redis != second.h.redis {
		t.Fatal("two configurations with the same store settings do not share one client")
	}
	key := first.h.redisKey
	if n, _ := redisClients.References(key); n != 2 {
		t.Fatalf("pool references = %d, want 2", n)
	}
	syn := first.do(t, "LOOKUP", "/item/p1", itemInput, "Allow-RCNS", "true")
	if syn.status != 263 {
		t.Fatalf("gate on the first configuration: %s", syn)
	}
	if err := first.h.Cleanup(); err != nil { // the old configuration goes away
		t.Fatal(err)
	}
	presents := func(g *testGateway) uint64 {
		return uint64(metricValue(t, g.h, "caddy_rcns_store_round_trip_duration_seconds", "op", string(store.OpPresent)))
	}
	oldCount, newCount := presents(first), presents(second)
	if a := second.do(t, "LOOKUP", "/item/p1", itemInput, "Contract-Synthesized", syn.str("synthesis_id")); a.status != 200 {
		t.Fatalf("the new configuration after the old one's cleanup: %s", a)
	}
	if presents(first) != oldCount || presents(second) != newCount+1 {
		t.Fatalf("store round trips observed: old configuration %d→%d, new %d→%d; want the new one's only",
			oldCount, presents(first), newCount, presents(second))
	}
	other := redisGateway(t, up, srv.Addr(), func(h *Handler) { h.Redis.KeyPrefix = "other:" })
	if other.h.redis == second.h.redis {
		t.Fatal("other store settings share the client")
	}
	if err := second.h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, ok := redisClients.References(key); ok {
		t.Fatal("the client outlived the last configuration using it")
	}
}

// TestStoreCaddyfileErrors: the store lines refuse unknown subdirectives
// and bad combinations with the knob named.
func TestStoreCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown store", "store disk", `store: "disk" is not memory or redis`},
		{"memory block", "store memory {\n\t\t\tmode single\n\t\t}", "store memory takes no block"},
		{"unknown subdirective", "store redis {\n\t\t\taddress 127.0.0.1:6379\n\t\t\tcolor red\n\t\t}", `store redis: unknown subdirective "color"`},
		{"no address", "store redis {\n\t\t\tmode single\n\t\t}", "no address"},
		{"no block", "store redis", "no address"},
		{"master_name without sentinel", "store redis {\n\t\t\taddress 127.0.0.1:6379\n\t\t\tmaster_name m\n\t\t}", "master_name is for mode sentinel"},
		{"sentinel without master_name", "store redis {\n\t\t\tmode sentinel\n\t\t\taddress 127.0.0.1:26379\n\t\t}", "mode sentinel needs master_name"},
		{"db with cluster", "store redis {\n\t\t\tmode cluster\n\t\t\taddress 127.0.0.1:7000\n\t\t\tdb 1\n\t\t}", "db is not for mode cluster"},
		{"two addresses single", "store redis {\n\t\t\taddress 127.0.0.1:1 127.0.0.1:2\n\t\t}", "mode single takes exactly one address"},
		{"bad mode", "store redis {\n\t\t\tmode ring\n\t\t\taddress 127.0.0.1:1\n\t\t}", `mode "ring" is not single, cluster or sentinel`},
		{"bad db", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tdb -1\n\t\t}", "db: \"-1\" is not a non-negative integer"},
		{"bad pool", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tpool_size 0\n\t\t}", "pool_size: \"0\" is not a positive integer"},
		{"bad timeout", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tread_timeout soon\n\t\t}", "read_timeout: \"soon\" is not a duration"},
		{"prefix with brace", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tkey_prefix a{b\n\t\t}", "must not contain '{' or '}'"},
		{"contract_lease over a second", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tcontract_lease 2s\n\t\t}", "contract_lease 2s is over 1s"},
		{"contract_lease zero", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tcontract_lease 0s\n\t\t}", `contract_lease: "0s" must be a positive duration, or off`},
		{"contract_lease off and more", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tcontract_lease off now\n\t\t}", "contract_lease: want one value, a duration (e.g. 100ms, at most 1s) or off; got 2"},
		{"contract_lease none", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tcontract_lease\n\t\t}", "contract_lease: want one value"},
		{"contract_lease OFF", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tcontract_lease OFF\n\t\t}", `contract_lease: "OFF" is not a duration (e.g. 100ms, 500ms, 1s) or off`},
		{"subdirective twice", "store redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tdb 1\n\t\t\tdb 2\n\t\t}", "db is set twice"},
		{"store twice", "store memory\n\t\tstore memory", "store is set twice"},
		{"store_required value", "store_required maybe", `store_required: "maybe" is not on or off`},
		{"bad node_id", "node_id a/b", `node_id: "a/b" must be`},
		{"bad audit_read_acl", "audit_read_acl everyone", `audit_read_acl: "everyone" is not agent_only, operator_only or public`},
		{"bad record_retention", "record_retention 0s", `record_retention: "0s" must be a positive duration`},
		{"bad max_retained_records", "max_retained_records 0", `max_retained_records: "0" is not a positive integer`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := ":8080 {\n\trcns {\n\t\t" + tc.body + "\n\t}\n}\n"
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestContractLeaseCaddyfile: contract_lease takes a duration or off
// (JSON: a negative duration).
func TestContractLeaseCaddyfile(t *testing.T) {
	for arg, want := range map[string]string{"250ms": `"contract_lease":250000000`, "off": `"contract_lease":-1`} {
		src := ":8080 {\n\trcns {\n\t\tstore redis {\n\t\t\taddress 127.0.0.1:1\n\t\t\tcontract_lease " + arg + "\n\t\t}\n\t}\n}\n"
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("contract_lease %s: %v; the JSON does not hold %s: %s", arg, err, want, out)
		}
	}
}

// TestStoreConfigValidate: JSON can say what the Caddyfile refuses;
// Validate refuses it with the knob named.
func TestStoreConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  StoreConfig
		want string
	}{
		{"unknown store", StoreConfig{Store: "disk"}, `store "disk" is not memory or redis`},
		{"redis without settings", StoreConfig{Store: StoreRedis}, "store redis needs its settings"},
		{"settings without redis", StoreConfig{Store: StoreMemory, Redis: &RedisConfig{Addresses: []string{"a:1"}}}, "store is memory"},
		{"no address", StoreConfig{Store: StoreRedis, Redis: &RedisConfig{}}, "no address"},
		{"cluster db", StoreConfig{Store: StoreRedis, Redis: &RedisConfig{Mode: "cluster", Addresses: []string{"a:1"}, DB: 2}}, "db is not for mode cluster"},
		{"negative timeout", StoreConfig{Store: StoreRedis, Redis: &RedisConfig{Addresses: []string{"a:1"}, DialTimeout: -1}}, "must not be negative"},
		{"long contract lease", StoreConfig{Store: StoreRedis, Redis: &RedisConfig{Addresses: []string{"a:1"}, ContractLease: caddy.Duration(2 * time.Second)}}, "contract_lease 2s is over 1s"},
		{"bad node id", StoreConfig{Store: StoreMemory, NodeID: ".."}, "node_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Handler{StoreConfig: tc.cfg}
			c.setDefaults()
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	c := &Handler{}
	c.setDefaults()
	if c.Store != StoreMemory || !engine.ValidName(c.NodeID) || !c.storeRequired() {
		t.Fatalf("defaults: store %q node_id %q required %v", c.Store, c.NodeID, c.storeRequired())
	}
}

// TestRedisPlaceholders: {env.*} placeholders in the store settings are
// replaced when the config loads, and take part in the pool key.
func TestRedisPlaceholders(t *testing.T) {
	t.Setenv("RCNS_TEST_REDIS_PASSWORD", "s3cret")
	r := &RedisConfig{Addresses: []string{"{env.RCNS_TEST_REDIS_HOST}:6379"}, Password: "{env.RCNS_TEST_REDIS_PASSWORD}"}
	t.Setenv("RCNS_TEST_REDIS_HOST", "10.0.0.7")
	cfg := r.clientConfig(caddy.NewReplacer(), time.Minute)
	if cfg.Addrs[0] != "10.0.0.7:6379" || cfg.Password != "s3cret" || cfg.KeyPrefix != "rcns:" || cfg.Mode != "single" {
		t.Fatalf("client config %+v", cfg)
	}
	t.Setenv("RCNS_TEST_REDIS_PASSWORD", "other")
	if redisKey(cfg) == redisKey(r.clientConfig(caddy.NewReplacer(), time.Minute)) {
		t.Fatal("a changed password keeps the pool key")
	}
	// The lease is the client's (its Sets' leases and LeaseFence): a
	// reload that changes it gets a client with the new one.
	before := redisKey(r.clientConfig(caddy.NewReplacer(), time.Minute))
	r.ContractLease = caddy.Duration(time.Second)
	if redisKey(r.clientConfig(caddy.NewReplacer(), time.Minute)) == before {
		t.Fatal("a changed contract_lease keeps the pool key")
	}
}

// signedAgent writes an agent document with an Ed25519 key into a new
// directory and returns the directory, the agent's id and its signer.
func signedAgent(t *testing.T) (dir, id string, s *httpsig.Signer) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := httpsig.JWKFromPublic(pub)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := httpsig.Thumbprint(pub)
	if err != nil {
		t.Fatal(err)
	}
	id = strings.Repeat("5a", 32)
	doc, _ := json.Marshal(map[string]any{"agent_id": id, "name": "signer", "owner_id": "ops", "trust_tier": 1, "status": "active",
		"scopes": []string{"bench:read"}, "keys": []any{jwk}})
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "signer.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, id, &httpsig.Signer{KeyID: kid, Key: priv}
}

// signedFetch is FETCH /items/1 as agent, signed by s.
func signedFetch(t *testing.T, agent string, s *httpsig.Signer) http.Header {
	t.Helper()
	r, _ := http.NewRequest("FETCH", "http://127.0.0.1/items/1", nil)
	r.Header.Set("Agent-ID", agent)
	r.Header.Set("Authority-Scope", "bench:read")
	now := time.Now()
	if err := s.Sign(r, httpsig.SignOptions{Created: now, Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	return r.Header
}

// TestRedisReplayCache: under identity signature the replay cache is
// the store's: a signature accepted on one node is refused on the
// other, and a signed request while the store is down is 503.
func TestRedisReplayCache(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits := countingUpstream(t)
	dir, agent, signer := signedAgent(t)
	node := func(name string) *testGateway {
		return redisGateway(t, up, srv.Addr(), func(h *Handler) {
			h.Name, h.NodeID, h.Identity, h.Agents = name, name, IdentitySignature, []string{dir}
		})
	}
	a, b := node("node-a"), node("node-b")
	hdr := signedFetch(t, agent, signer)
	if got := a.serveHeader(t, "FETCH", "/items/1", hdr.Clone(), nil, 0); got.status != 200 {
		t.Fatalf("signed request: %s", got)
	}
	wantError(t, b.serveHeader(t, "FETCH", "/items/1", hdr.Clone(), nil, 0), 401, "signature-replayed", "already used")
	srv.Stop()
	wantStoreUnavailable(t, a.serveHeader(t, "FETCH", "/items/1", signedFetch(t, agent, signer), nil, 0))
	if hits.Load() != 1 {
		t.Fatalf("%d upstream calls, want 1", hits.Load())
	}
}

// TestRedisRoundTripsPerRequest: the round trips each kind of request
// makes to Redis, as docs/cluster.md counts them ("before" the answer,
// "after" it, and the record's, written off the answer path; the
// health check's pings left out).
func TestRedisRoundTripsPerRequest(t *testing.T) {
	// The longest contract lease (1 s): the presentation within a lease
	// comes right after the one that took it.
	longLease := func(h *Handler) { h.Redis.ContractLease = caddy.Duration(redisstore.MaxContractLease) }
	t.Run("single", func(t *testing.T) {
		srv := redistest.StartServer(t)
		up, _ := countingUpstream(t)
		roundTripsPerRequest(t, redisGateway(t, up, srv.Addr(), longLease), false)
	})
	// Redis Cluster: the gate's script is in the agent's slot; the
	// refusal's attempt record (kept in the {g} slot) is queued with the
	// records, and a synthesis's owner and global index writes (other
	// slots) go in the script's pipeline (docs/cluster.md).
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		up, _ := countingUpstream(t)
		roundTripsPerRequest(t, redisGateway(t, up, cl.Addrs()[0], longLease, func(h *Handler) {
			h.Redis.Mode, h.Redis.Addresses = "cluster", cl.Addrs()
		}), true)
	})
}

// roundTripsPerRequest counts g's round trips per request kind. In
// Cluster mode a batch of the record writer may go to several nodes and
// a request's attempt record and Attribution-Record may land in two
// batches: op record is then held to at least its count.
func roundTripsPerRequest(t *testing.T, g *testGateway, cluster bool) {
	total := func() map[store.Op]uint64 {
		out := map[store.Op]uint64{}
		for _, op := range store.Ops {
			// The health check's own round trips (every 5 s: its ping, the
			// gauges' counts, the node id's hold, the manifest version it
			// reads for SyncManifest) are no request's, and land in a
			// step only when its tick does (helper-137: a step on a loaded
			// machine counted the manifest's). No request kind here reads
			// or writes the manifest version; a persistent PROPOSE does
			// (docs/cluster.md).
			if op != store.OpPing && op != store.OpCount && op != store.OpNodeID && op != store.OpManifest {
				if n := uint64(metricValue(t, g.h, "caddy_rcns_store_round_trip_duration_seconds", "op", string(op))); n > 0 {
					out[op] = n
				}
			}
		}
		return out
	}
	diff := func(before, after map[store.Op]uint64) map[store.Op]uint64 {
		out := map[store.Op]uint64{}
		for op, n := range after {
			if d := n - before[op]; d > 0 {
				out[op] = d
			}
		}
		return out
	}
	syn := g.do(t, "LOOKUP", "/item/rt1", itemInput, "Allow-RCNS", "true")
	if syn.status != 263 {
		t.Fatalf("gate: %s", syn)
	}
	revoked := g.do(t, "LOOKUP", "/item/rt4", itemInput, "Allow-RCNS", "true").str("synthesis_id")
	if a := g.endContract(t, "REVOKE", revoked); a.status != 200 {
		t.Fatalf("revoke: %s", a)
	}
	for _, tc := range []struct {
		name string
		send func() *answer
		want map[store.Op]uint64
	}{
		{"manifest", func() *answer { return g.anonymous(t, "DISCOVER", "/", nil) },
			map[store.Op]uint64{store.OpRecord: 1}},
		{"Tier B, no key", func() *answer { return g.do(t, "FETCH", "/items/1", nil) },
			map[store.Op]uint64{store.OpRecord: 1}},
		{"Tier B, keyed", func() *answer { return g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "rt-b") },
			map[store.Op]uint64{store.OpClaim: 1, store.OpComplete: 1, store.OpRecord: 1}},
		{"keyed contract presentation", func() *answer {
			return g.do(t, "LOOKUP", "/item/rt1", itemInput, "Contract-Synthesized", syn.str("synthesis_id"), "Idempotency-Key", "rt-p")
		}, map[store.Op]uint64{store.OpPresent: 1, store.OpComplete: 1, store.OpRecord: 1}},
		{"unkeyed contract presentation", func() *answer {
			return g.do(t, "LOOKUP", "/item/rt1", itemInput, "Contract-Synthesized", syn.str("synthesis_id"))
		}, map[store.Op]uint64{store.OpPresent: 1, store.OpRecord: 1}},
		// It took a lease on the contract: the next ones on this node
		// make no round trip before the answer while it lasts.
		{"unkeyed contract presentation within its lease", func() *answer {
			return g.do(t, "LOOKUP", "/item/rt1", itemInput, "Contract-Synthesized", syn.str("synthesis_id"))
		}, map[store.Op]uint64{store.OpRecord: 1}},
		{"Tier C by pair", func() *answer { return g.do(t, "LOOKUP", "/item/rt1", itemInput) },
			map[store.Op]uint64{store.OpResolvePair: 1, store.OpRecord: 1}},
		// A gate evaluation: the pair lookup, the claim, the RCNS budget
		// and the mint or the refusal's attempt record in one script
		// (ResolvePair; issue 32). In Cluster mode the mint's owner and
		// global index writes go beside the script, in its pipeline.
		{"gate synthesis", func() *answer { return g.do(t, "LOOKUP", "/item/rt2", itemInput, "Allow-RCNS", "true") },
			map[store.Op]uint64{store.OpResolvePair: 1, store.OpRecord: 1}},
		{"keyed gate synthesis", func() *answer {
			return g.do(t, "LOOKUP", "/item/rt3", itemInput, "Allow-RCNS", "true", "Idempotency-Key", "rt-g")
		}, map[store.Op]uint64{store.OpResolvePair: 1, store.OpComplete: 1, store.OpRecord: 1}},
		{"gate refusal", func() *answer { return g.do(t, "LOOKUP", "/nothing", nil, "Allow-RCNS", "true") },
			map[store.Op]uint64{store.OpResolvePair: 1, store.OpRecord: 1}},
		{"keyed gate refusal", func() *answer {
			return g.do(t, "LOOKUP", "/nothing", nil, "Allow-RCNS", "true", "Idempotency-Key", "rt-f")
		},
			map[store.Op]uint64{store.OpResolvePair: 1, store.OpAbandon: 1, store.OpRecord: 1}},
		// A presentation's refusal keeps its attempt record off the answer
		// path (store.AttemptsLater), with the records.
		{"presentation refusal", func() *answer {
			return g.do(t, "LOOKUP", "/item/rt4", itemInput, "Contract-Synthesized", revoked)
		}, map[store.Op]uint64{store.OpPresent: 1, store.OpRecord: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := total()
			if a := tc.send(); a.status >= 400 && a.status != 464 && !strings.Contains(tc.name, "refusal") {
				t.Fatalf("%s", a)
			} else if a.status == 464 && a.hdr("RCNS-Attempt-Id") == "" {
				t.Fatalf("464 without RCNS-Attempt-Id: %s", a)
			}
			// The record is written off the answer path (batched by the
			// store's record writer), and a keyed answer is stored beside
			// the answer (SettleLater): wait for them, then count.
			short := func(got map[store.Op]uint64) bool {
				for op, n := range tc.want {
					if got[op] < n {
						return true
					}
				}
				return false
			}
			got := diff(before, total())
			for deadline := time.Now().Add(5 * time.Second); short(got) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
				got = diff(before, total())
			}
			if cluster && got[store.OpRecord] > tc.want[store.OpRecord] {
				got[store.OpRecord] = tc.want[store.OpRecord] // the same writes in more batches
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("round trips %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAttemptKeptOffAnswerPath: in Redis Cluster mode a gate refusal's
// attempt record is queued with the records (store.AttemptsLater, no
// round trip before the 464), and INSPECT target=rcns-attempt finds it
// at once on the node that refused and on another node (attempts.Get
// reads a missing id once more attemptRecheck later). A presentation's
// refusal, queued the same way on single Redis, is kept too.
func TestAttemptKeptOffAnswerPath(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	up, _ := countingUpstream(t)
	node := func(name string) *testGateway {
		return redisGateway(t, up, cl.Addrs()[0], func(h *Handler) {
			h.Name, h.NodeID = name, name
			h.Redis.Mode, h.Redis.Addresses = "cluster", cl.Addrs()
		})
	}
	a, b := node("node-a"), node("node-b")
	inspect := func(g *testGateway, id string) *answer {
		return g.builtin(t, "INSPECT", map[string]any{"target": "rcns-attempt", "attempt_id": id})
	}
	// Redis learns the attempt script first (a first batch meets NOSCRIPT
	// and sends it again): read on the node that refused, which waits.
	if warm := a.do(t, "LOOKUP", "/nothing/warm", nil, "Allow-RCNS", "true"); warm.status != 464 || inspect(a, warm.hdr("RCNS-Attempt-Id")).status != 200 {
		t.Fatalf("first refusal: %s", warm)
	}
	for i := range 20 {
		refused := a.do(t, "LOOKUP", fmt.Sprintf("/nothing/%d", i), nil, "Allow-RCNS", "true")
		id := refused.hdr("RCNS-Attempt-Id")
		if refused.status != 464 || id == "" {
			t.Fatalf("refusal %d: %s", i, refused)
		}
		g := b
		if i%2 == 1 {
			g = a
		}
		if got := inspect(g, id); got.status != 200 || got.str("attempt_id") != id || got.str("reason") != refused.str("reason") {
			t.Fatalf("INSPECT of attempt %d (%s) on %s right after its 464: %s", i, id, map[bool]string{true: "node-a", false: "node-b"}[g == a], got)
		}
	}
	if got := inspect(b, "rcns-unknown"); got.status != 404 {
		t.Fatalf("INSPECT of an unknown attempt: %s", got)
	}
}

// cutProxy forwards TCP connections from a loopback port to addr until
// cut: then it closes every connection and closes each new one at
// once (Redis unreachable without losing its data: fault injection
// below the module, as a network partition would).
type cutProxy struct {
	l    net.Listener
	mu   sync.Mutex
	cutt bool
	open map[net.Conn]bool
	// cutOn, when set, cuts the path as soon as the client sends bytes
	// holding it, before they reach Redis (cutWhenSent).
	cutOn []byte
}

// cutWhenSent makes the proxy cut the path when a command holding
// pattern is sent: that command never reaches Redis, and neither does
// anything after it until setCut(false).
func (p *cutProxy) cutWhenSent(pattern string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOn = []byte(pattern)
}

// forward copies the client's bytes to Redis, cutting the path first
// when they hold cutOn.
func (p *cutProxy) forward(s, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			trigger := len(p.cutOn) > 0 && bytes.Contains(buf[:n], p.cutOn)
			if trigger {
				p.cutOn = nil
			}
			p.mu.Unlock()
			if trigger {
				p.setCut(true)
				return
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func startCutProxy(t *testing.T, addr string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, open: map[net.Conn]bool{}}
	t.Cleanup(func() { l.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cutt {
				p.mu.Unlock()
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.open[c], p.open[s] = true, true
			p.mu.Unlock()
			go func() { p.forward(s, c); s.Close(); c.Close() }()
			go func() { _, _ = io.Copy(c, s); s.Close(); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) Addr() string { return p.l.Addr().String() }

// setCut cuts (true) or restores (false) the path to Redis.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutt = cut
	if cut {
		for c := range p.open {
			c.Close()
		}
		clear(p.open)
	}
}

// TestRedisCompleteRetried: when Redis becomes unreachable while a
// keyed request runs, the answer still goes out, and storing it is
// retried in the background: once Redis answers again a repeat of the
// key replays it (without the retry the key stayed in flight, 409,
// then outcome-unknown once its lease ended), and the upstream ran
// once.
func TestRedisCompleteRetried(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := startCutProxy(t, srv.Addr())
	g, hits := cutDuringCall(t, proxy, nil)
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "cut-1"); a.status != 200 || !strings.Contains(a.String(), `"name":"item"`) {
		t.Fatalf("the keyed call whose Complete failed: %s", a)
	}
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "cut-1"); a.status != 503 {
		t.Fatalf("a repeat while Redis is unreachable: %s, want 503 store-unavailable", a)
	}
	// The answer is stored beside it (SettleLater): its first try fails
	// while Redis is away, and only then is the retry pending.
	for deadline := time.Now().Add(10 * time.Second); g.h.redis.nSettling.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("storing the answer beside it did not end while Redis was away")
		}
	}
	if n := g.h.redis.pending.Load(); n != 1 {
		t.Fatalf("%d answers pending a retry, want 1", n)
	}
	proxy.setCut(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "cut-1")
		if a.status == 200 && a.hdr("Idempotent-Replayed") == "true" {
			break
		}
		if a.status != 409 && a.status != 503 {
			t.Fatalf("a repeat after Redis came back: %s, want a replay (or 409/503 until it is stored)", a)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the answer was never stored: the last repeat got %s", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
	// The retry's goroutine counts itself out after its write landed
	// (and after its log line): a replay can come first.
	for deadline := time.Now().Add(10 * time.Second); g.h.redis.pending.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d answers still pending 10 s after the store came back and the answer replayed", g.h.redis.pending.Load())
		}
	}
}

// TestRedisAbandonRetried: a keyed request refused before it ran (its
// invocation budget's round trip failed: 503 "nothing was executed")
// whose release failed too (Redis unreachable) gets its key released
// in the background once Redis answers again, so the retry the 503
// asked for runs. Found by review: the release was only logged, and
// the key stayed in flight (409), then outcome-unknown for the whole
// window, about a request that never ran.
func TestRedisAbandonRetried(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := startCutProxy(t, srv.Addr())
	up, hits := countingUpstream(t)
	g := redisGateway(t, up, proxy.Addr(), func(h *Handler) {
		h.InvocationRateLimitPerMinute, h.InvocationRateLimitBurst = 1e6, 1e6
	})
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "warm"); a.status != 200 {
		t.Fatalf("a first keyed call (scripts loaded): %s", a)
	}
	// The claim goes through; the budget's call (its key names the
	// invocation budget) never reaches Redis, nor does anything after it.
	for deadline := time.Now().Add(10 * time.Second); g.h.redis.nSettling.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first call's answer was not stored")
		}
	}
	core, logs := observer.New(zap.InfoLevel)
	setLogCore(t, g.h, core)
	proxy.cutWhenSent("rl:invocation")
	a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "abandon-1")
	wantStoreUnavailable(t, a)
	for deadline := time.Now().Add(10 * time.Second); g.h.redis.nSettling.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("releasing the claim beside the 503 did not end while Redis was away")
		}
	}
	if n := g.h.redis.pending.Load(); n != 1 {
		t.Fatalf("%d settles pending a retry, want 1 (the failed release); logs %v", n, logs.All())
	}
	proxy.setCut(false)
	for deadline := time.Now().Add(20 * time.Second); g.h.redis.pending.Load() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the release was not retried after Redis came back")
		}
	}
	if n := logs.FilterMessageSnippet("done releasing an Idempotency-Key after the store came back").Len(); n != 1 {
		t.Errorf("logged %d times that the claim was released after Redis came back, want 1; logs: %v", n, logs.All())
	}
	// The lease (seconds) has not passed: without the retry this is 409
	// in flight.
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "abandon-1"); a.status != 200 || a.hdr("Idempotent-Replayed") == "true" {
		t.Fatalf("the retry after Redis came back: %s, want 200, run (not replayed)", a)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d upstream calls, want 2 (the warm-up and the retry; the refused call ran nothing)", n)
	}
}

// cutDuringCall is a Redis gateway (through proxy) whose upstream
// GET /items/{id} cuts the proxy while it runs, then calls also (when
// not nil): Redis goes away after the claim, before the Complete. hits
// counts the upstream calls.
func cutDuringCall(t *testing.T, proxy *cutProxy, also func()) (*testGateway, *atomic.Int64) {
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		proxy.setCut(true)
		if also != nil {
			also()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "name": "item", "price": 1})
	})
	return redisGateway(t, loopbackServer(t, mux).URL, proxy.Addr()), &hits
}

// TestRedisCompleteLost: a keyed answer whose Complete failed while
// Redis was away, and which Redis came back without (restarted empty),
// is stored by the retry all the same (the node saw Redis restart since
// the claim: the key was lost with its data, and no other request
// holds it), so a repeat after the restart's quarantine replays it; the
// key is in that quarantine meanwhile (503), and nothing runs twice.
// Before, the retry gave up ("came back without the key's claim"), and
// a repeat after the quarantine ran the key again.
func TestRedisCompleteLost(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := startCutProxy(t, srv.Addr())
	g, hits := cutDuringCall(t, proxy, srv.Restart) // empty: the claim is gone
	core, logs := observer.New(zap.InfoLevel)
	setLogCore(t, g.h, core)
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "lost-1"); a.status != 200 {
		t.Fatalf("the keyed call whose Complete failed: %s", a)
	}
	// The answer is stored beside it (SettleLater): let that first try
	// fail while Redis is away, then bring Redis back.
	for deadline := time.Now().Add(10 * time.Second); g.h.redis.nSettling.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("storing the answer beside it did not end while Redis was away")
		}
	}
	proxy.setCut(false)
	for deadline := time.Now().Add(20 * time.Second); g.h.redis.pending.Load() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the retry did not end after Redis came back")
		}
	}
	if n := logs.FilterMessageSnippet("after the store came back").Len(); n != 1 {
		t.Errorf("logged %d times that the answer was stored after Redis came back, want 1; logs: %v", n, logs.All())
	}
	if n := logs.FilterMessageSnippet("came back without the key's claim").Len(); n != 0 {
		t.Errorf("logged %d times that the answer was not stored; logs: %v", n, logs.All())
	}
	a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "lost-1")
	wantError(t, a, 503, "store-unavailable", "Redis restarted")
	c, err := redisstore.New(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set, err := c.Set(store.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok, err := set.Idempotency.Peek(context.Background(), benchAgent, "lost-1"); err != nil || !ok || st.State != idempotency.StateAnswered || st.Status != 200 {
		t.Fatalf("the key after the retry: %+v %v %v, want its answer stored (200)", st, ok, err)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
}

// failingClaim is a store.Claim whose Complete always fails as
// unavailable (fault injection below the module).
type failingClaim struct{ tries atomic.Int64 }

func (c *failingClaim) Complete(context.Context, idempotency.Response) error {
	c.tries.Add(1)
	return fmt.Errorf("%w: injected", store.ErrUnavailable)
}
func (c *failingClaim) Abandon(context.Context) error              { return nil }
func (c *failingClaim) Renew(context.Context, time.Duration) error { return nil }
func (c *failingClaim) Preview() *idempotency.Response             { return nil }
func (c *failingClaim) Key() (string, string)                      { return "a", "k" }
func (c *failingClaim) Token() string                              { return "t" }
func (c *failingClaim) ClaimedAt() time.Time                       { return time.Time{} }

// TestRetryCompleteBounded: at most maxPendingCompletes answers are
// retried at once, a retry gives up when the key's hold has passed,
// and closing the client stops the retries still pending.
func TestRetryCompleteBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	p, err := newPooledRedis(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:"}, true, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	short := &failingClaim{}
	if !p.retryComplete(short, idempotency.Response{Status: 200}, completeRetryFirst/2, zap.NewNop()) {
		t.Fatal("the first retry was refused")
	}
	for deadline := time.Now().Add(10 * time.Second); p.pending.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a retry whose hold passed did not give up")
		}
	}
	if short.tries.Load() != 1 {
		t.Fatalf("%d tries within a hold shorter than one backoff step, want 1", short.tries.Load())
	}
	p.pending.Store(maxPendingCompletes)
	if p.retryComplete(&failingClaim{}, idempotency.Response{Status: 200}, time.Hour, zap.NewNop()) {
		t.Fatal("a retry past maxPendingCompletes was started")
	}
	p.pending.Store(0)
	long := &failingClaim{}
	if !p.retryComplete(long, idempotency.Response{Status: 200}, time.Hour, zap.NewNop()) {
		t.Fatal("a retry was refused")
	}
	for deadline := time.Now().Add(10 * time.Second); long.tries.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the retry did not try again")
		}
	}
	testwait.Returns(t, 30*time.Second, p.Destruct, "Destruct with a pending retry")
	if p.pending.Load() != 0 {
		t.Fatalf("%d retries pending after Destruct", p.pending.Load())
	}
}

// healingClaim is a store.Claim whose Complete and Abandon fail as
// unavailable until healed (fault injection below the module): Redis
// answering again between two backoff steps of a retry.
type healingClaim struct {
	failingClaim
	healed atomic.Bool
	done   atomic.Int64
}

func (c *healingClaim) settle() error {
	c.tries.Add(1)
	if !c.healed.Load() {
		return fmt.Errorf("%w: injected", store.ErrUnavailable)
	}
	c.done.Add(1)
	return nil
}
func (c *healingClaim) Complete(context.Context, idempotency.Response) error { return c.settle() }
func (c *healingClaim) Abandon(context.Context) error                        { return c.settle() }

// panicClaim is a store.Claim whose Complete panics (a defect below the
// module).
type panicClaim struct{ failingClaim }

func (c *panicClaim) Complete(context.Context, idempotency.Response) error {
	c.tries.Add(1)
	panic("complete defect")
}

// TestRetryPanicRecovered: a panic in a background retry of a keyed
// answer's store is logged at ERROR with its stack and ends that retry
// alone: it no longer counts as pending, and Destruct returns.
func TestRetryPanicRecovered(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	p, err := newPooledRedis(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:"}, true, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	c := &panicClaim{}
	if !p.retryComplete(c, idempotency.Response{Status: 200}, time.Hour, zap.NewNop()) {
		t.Fatal("the retry was refused")
	}
	for deadline := time.Now().Add(5 * time.Second); p.pending.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the retry whose store panicked still pending after 5 s (%d tries)", c.tries.Load())
		}
	}
	lines := logs.FilterMessageSnippet("panic storing the answer of an Idempotency-Key in the background").All()
	if len(lines) != 1 || lines[0].ContextMap()["panic"] != "complete defect" || lines[0].ContextMap()["stack"] == nil {
		t.Fatalf("lines %v, want one with the panic and its stack", logs.All())
	}
	if err := p.Destruct(); err != nil {
		t.Fatal(err)
	}
}

// TestRetrySettleLastTryAtClose: a stored answer and a release still
// waiting for their next backoff step when the client closes get one
// last try while Redis answers, so the key is answered or freed instead
// of ending outcome-unknown (before, the close dropped them); while the
// health check says Redis is down, the close gives up at once, with no
// try and no wait.
func TestRetrySettleLastTryAtClose(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, down := range []bool{false, true} {
		core, logs := observer.New(zap.InfoLevel)
		p, err := newPooledRedis(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:"}, true, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		answer, release := &healingClaim{}, &healingClaim{}
		if !p.retryComplete(answer, idempotency.Response{Status: 200}, time.Hour, zap.New(core)) || !p.RetryAbandon(release, zap.New(core)) {
			t.Fatal("a retry was refused")
		}
		for deadline := time.Now().Add(10 * time.Second); answer.tries.Load() < 1 || release.tries.Load() < 1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the first retries did not run")
			}
		}
		// Redis answers again (or not) well before the next step, 500 ms
		// after the first: the close comes first.
		answer.healed.Store(true)
		release.healed.Store(true)
		p.down.Store(down)
		start := time.Now()
		if err := p.Destruct(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("the close took %s", took)
		}
		want := int64(1)
		line := "in a last try as the store's client closed"
		if down {
			want, line = 0, "while Redis does not answer"
		}
		if answer.done.Load() != want || release.done.Load() != want || answer.tries.Load() != 1+want || release.tries.Load() != 1+want {
			t.Fatalf("down %v: answer done %d of %d tries, release done %d of %d, want done %d after one failed try", down,
				answer.done.Load(), answer.tries.Load(), release.done.Load(), release.tries.Load(), want)
		}
		if n := logs.FilterMessageSnippet(line).Len(); n != 2 {
			t.Fatalf("down %v: %d lines saying %q, want 2: %v", down, n, line, logs.All())
		}
	}
}

// TestRedisOutageLogged: an outage is one WARN saying what Redis did
// and, when it answers again, one INFO with how long it was away,
// however many health checks failed in between.
func TestRedisOutageLogged(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.InfoLevel)
	p, err := newPooledRedis(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:",
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond}, true, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destruct()
	waitLog := func(snippet string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); logs.FilterMessageSnippet(snippet).Len() == 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line %q; logs: %v", snippet, logs.All())
			}
		}
	}
	srv.Stop()
	if err := p.client.Ping(context.Background()); err == nil { // a request meets the outage first
		t.Fatal("Ping with Redis stopped succeeded")
	}
	failed := time.Now()
	waitLog("requests that need state answer 503")
	time.Sleep(3 * storeHealthDown) // three more failed checks
	srv.Restart()
	waitLog("store redis answers again")
	elapsed := time.Since(failed)
	if n := logs.FilterMessageSnippet("requests that need state answer 503").Len(); n != 1 {
		t.Errorf("%d outage lines, want 1: %v", n, logs.All())
	}
	if w := logs.FilterMessageSnippet("requests that need state answer 503").All()[0]; w.Level != zap.WarnLevel || !strings.Contains(w.Message, "does not answer") {
		t.Errorf("outage line %v %q, want a WARN saying Redis does not answer", w.Level, w.Message)
	}
	l := logs.FilterMessageSnippet("answers again").All()
	if len(l) != 1 || l[0].ContextMap()["down_for"] == nil {
		t.Fatalf("recovery lines %v, want one with down_for", l)
	}
	// The outage began with the first failed request (a Ping here), not
	// at the health check that noticed it (up to storeHealthUp later):
	// down_for is the time since that Ping, less the polling of waitLog.
	if d, ok := l[0].ContextMap()["down_for"].(time.Duration); !ok || d < elapsed-time.Second {
		t.Errorf("down_for %v, want about the %v since the first failed call", l[0].ContextMap()["down_for"], elapsed)
	}
}

// TestRedisLibraryLog: go-redis's own lines go to the configured
// logger, named rcns.store.redis; a failed dial at DEBUG.
func TestRedisLibraryLog(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	l := redisLog{logger: func() *zap.Logger { return zap.New(core) }}
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v\n", 1, "refused")
	l.Printf(context.Background(), "sentinel: new master=%q addr=%q", "m", "127.0.0.1:1")
	all := logs.All()
	if len(all) != 2 || all[0].Level != zap.DebugLevel || all[1].Level != zap.InfoLevel ||
		all[0].LoggerName != "rcns.store.redis" || all[1].Message != `sentinel: new master="m" addr="127.0.0.1:1"` || strings.HasSuffix(all[0].Message, "\n") {
		t.Fatalf("logged %+v", all)
	}
}

// TestRedisStoreFull: a Redis over maxmemory answers, refusing writes:
// keyed requests are 503 store-unavailable saying the store is full
// (Retry-After 10), nothing reaches the upstream, and the store is not
// reported down (caddy_rcns_store_up stays 1), its refusals counted.
func TestRedisStoreFull(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	up, hits := countingUpstream(t)
	g := redisGateway(t, up, srv.Addr())
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	before := hits.Load()
	a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "full-1")
	wantError(t, a, 503, "store-unavailable", "is full")
	if a.hdr("Retry-After") != "10" {
		t.Errorf("Retry-After %q, want 10", a.hdr("Retry-After"))
	}
	wantError(t, g.do(t, "LOOKUP", "/item/f1", itemInput, "Allow-RCNS", "true"), 503, "store-unavailable", "is full")
	if n := hits.Load(); n != before {
		t.Fatalf("%d upstream calls while Redis was full", n-before)
	}
	if up := metricValue(t, g.h, "caddy_rcns_store_up"); g.h.redis.Down() || up != 1 {
		t.Fatalf("a full Redis is reported down (store_up %v)", up)
	}
	if got := metricValue(t, g.h, "caddy_rcns_store_errors_total", "op", string(store.OpClaim)); got < 1 {
		t.Errorf("caddy_rcns_store_errors_total{op=claim} = %v, want at least 1", got)
	}
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "full-1"); a.status != 200 {
		t.Fatalf("once Redis has room: %s", a)
	}
}

// TestKeyedAnswerBesideComplete: on the Redis store a keyed request's
// answer does not wait for its answer to be stored (issue 32: one round
// trip, the claim, before the answer): with Redis holding every byte
// after the claim, the answer comes when the upstream answers, not
// after the read timeout; once Redis answers, a repeat replays it. A
// repeat sent on the same node as soon as the answer arrives waits for
// the answer to be stored and replays it, never 409 in flight.
func TestKeyedAnswerBesideComplete(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	up, hits, arrived, release := heldUpstream(t)
	const readTimeout = 4 * time.Second
	g := redisGateway(t, up, proxy.Addr(), func(h *Handler) {
		h.Redis.ReadTimeout, h.Redis.WriteTimeout = caddy.Duration(readTimeout), caddy.Duration(readTimeout)
	})

	answered := startHeld(t, g, "beside", arrived) // claimed: the plan runs
	proxy.Hold(true, true)
	start := time.Now()
	close(release)
	a := <-answered
	waited := time.Since(start)
	proxy.Release()
	if a.status != 200 {
		t.Fatalf("keyed Tier B while Redis holds: %s", a)
	}
	if waited >= readTimeout/2 {
		t.Fatalf("the answer waited %v with Redis holding its bytes: it waited for its answer to be stored (read timeout %v)", waited, readTimeout)
	}
	rep := g.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "beside")
	if rep.status != 200 || rep.hdr("Idempotent-Replayed") != "true" || hits.Load() != 1 {
		t.Fatalf("repeat once Redis answers: %s (replayed %q, %d upstream calls)", rep, rep.hdr("Idempotent-Replayed"), hits.Load())
	}

	for i := 0; i < 40; i++ {
		key := "again-" + strconv.Itoa(i)
		if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", key); a.status != 200 {
			t.Fatalf("keyed Tier B %d: %s", i, a)
		}
		if r := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", key); r.status != 200 || r.hdr("Idempotent-Replayed") != "true" {
			t.Fatalf("a repeat on the same node as soon as answer %d arrived: %s (replayed %q)", i, r, r.hdr("Idempotent-Replayed"))
		}
	}
	if n := hits.Load(); n != 41 {
		t.Fatalf("%d upstream calls, want 41 (one per key)", n)
	}
}

// TestKeyedAnswerBesideFullRedis: a keyed answer whose store, gathered
// beside the answer (store.OffAnswerPath), meets a full Redis is stored
// all the same (its script runs over maxmemory: docs/cluster.md "Redis
// over maxmemory"), so its key is not left stuck: while Redis is full a
// repeat gets 503 (its claim is refused: never a second execution), and
// the first repeat once Redis has room replays the answer, the upstream
// called once.
func TestKeyedAnswerBesideFullRedis(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	up, hits, arrived, release := heldUpstream(t)
	g := redisGateway(t, up, srv.Addr())

	answered := startHeld(t, g, "full-beside", arrived) // claimed: the plan runs
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if a := <-answered; a.status != 200 {
		t.Fatalf("keyed Tier B whose answer meets a full Redis: %s", a)
	}
	wantError(t, g.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "full-beside"), 503, "store-unavailable", "is full")
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	r := g.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "full-beside")
	if r.status != 200 || r.hdr("Idempotent-Replayed") != "true" {
		t.Fatalf("the first repeat once Redis has room: %s (replayed %q), want the answer replayed", r, r.hdr("Idempotent-Replayed"))
	}
	if n := metricValue(t, g.h, "caddy_rcns_store_errors_total", "op", string(store.OpComplete)); n != 0 {
		t.Errorf("caddy_rcns_store_errors_total{op=idempotency_complete} = %v: the answer's store failed while Redis was full", n)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
}

// heldUpstream is the bench items API on loopback that counts its calls
// (hits) and holds GET /items/held: it signals arrived, then answers once
// release is closed.
func heldUpstream(t *testing.T) (url string, hits *atomic.Int64, arrived chan struct{}, release chan struct{}) {
	t.Helper()
	hits = new(atomic.Int64)
	arrived, release = make(chan struct{}, 1), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.PathValue("id") == "held" {
			arrived <- struct{}{}
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "name": "item", "price": 1})
	})
	return loopbackServer(t, mux).URL, hits, arrived, release
}

// TestSettleLater: the pool settles a key beside its answer in its own
// goroutine; AwaitSettling waits for that key only, at most until its
// context ends; a key already settling, an answer past maxSettlingBytes,
// a key past maxSettling keys and one after Destruct are refused (the
// caller settles before answering); Destruct waits for the ones running.
func TestSettleLater(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	p, err := newPooledRedis(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:"}, true, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.AwaitSettling(ctx, "a", "k") // nothing settling: returns at once

	hold, ran := make(chan struct{}), make(chan struct{})
	if !p.SettleLater("a", "k", 10, func() { <-hold; close(ran) }) {
		t.Fatal("SettleLater refused the first key")
	}
	if p.SettleLater("a", "k", 10, func() {}) {
		t.Fatal("SettleLater took a key already settling")
	}
	p.AwaitSettling(ctx, "a", "other") // another key: does not wait
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	p.AwaitSettling(short, "a", "k") // bounded by its context
	cancel()
	select {
	case <-ran:
		t.Fatal("the settle ran before it was let go")
	default:
	}
	waited := make(chan struct{})
	go func() { p.AwaitSettling(ctx, "a", "k"); close(waited) }()
	select {
	case <-waited:
		t.Fatal("AwaitSettling returned while the key was settling")
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	<-waited
	select {
	case <-ran:
	default:
		t.Fatal("AwaitSettling returned before the settle ended")
	}

	// A settle that panics (a defect) ends neither the process nor the
	// key's settling: it is logged, and AwaitSettling returns.
	if !p.SettleLater("a", "panics", 10, func() { panic("settle defect") }) {
		t.Fatal("SettleLater refused the panicking key")
	}
	p.AwaitSettling(ctx, "a", "panics")
	panics := logs.FilterMessageSnippet("panic storing or releasing")
	for deadline := time.Now().Add(5 * time.Second); panics.Len() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		panics = logs.FilterMessageSnippet("panic storing or releasing")
	}
	if all := panics.All(); len(all) != 1 || all[0].ContextMap()["panic"] != "settle defect" || !strings.Contains(all[0].ContextMap()["stack"].(string), "TestSettleLater") {
		t.Fatalf("the panicking settle logged %v; want one ERROR line with the panic and its stack", all)
	}
	if n := p.nSettling.Load(); n != 0 {
		t.Fatalf("%d keys settling after the panicking one ended", n)
	}

	// The bytes bound: an answer past maxSettlingBytes held is refused.
	if p.SettleLater("a", "big", maxSettlingBytes+1, func() {}) {
		t.Fatal("SettleLater took an answer past maxSettlingBytes")
	}
	// The bound: past maxSettling keys settling at once, refused.
	release := make(chan struct{})
	var ended atomic.Int64
	for i := 0; i < maxSettling; i++ {
		if !p.SettleLater("b", strconv.Itoa(i), 1, func() { <-release; ended.Add(1) }) {
			t.Fatalf("SettleLater refused key %d of %d", i, maxSettling)
		}
	}
	if p.SettleLater("b", "one-more", 1, func() {}) {
		t.Fatalf("SettleLater took a key past maxSettling (%d)", maxSettling)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		close(release)
	}()
	if err := testwait.Returns(t, 30*time.Second, p.Destruct, "Destruct"); err != nil {
		t.Fatal(err)
	}
	if n := p.nSettling.Load(); n != 0 || ended.Load() != maxSettling {
		t.Fatalf("Destruct returned with %d keys settling, %d of %d settled", n, ended.Load(), maxSettling)
	}
	if p.SettleLater("a", "after", 1, func() {}) {
		t.Fatal("SettleLater took a key after Destruct")
	}
}

// TestKeyedRepeatOtherNode: two nodes with their own Redis clients on
// one Redis (a pool key of their own: pool_size differs). A repeat sent
// to the other node as soon as the answer arrived replays it (the other
// node claims again after inFlightRechecks instead of answering 409
// while the first node stores the answer beside it), and a
// confirm-first confirmation sent to the other node as soon as its 461
// arrived runs the contract (a 461 is stored before it goes out).
// Nothing runs twice.
func TestKeyedRepeatOtherNode(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits := countingUpstream(t)
	node := func(name string, pool int, mode string) *testGateway {
		return redisGateway(t, up, srv.Addr(), func(h *Handler) {
			h.NodeID, h.Name, h.Redis.PoolSize = name, name, pool
			if mode != "" {
				h.Mode = mode
			}
		})
	}
	a, b := node("node-a", 0, ""), node("node-b", 7, "")
	if a.h.redis == b.h.redis {
		t.Fatal("the two nodes share one Redis client: not two nodes")
	}
	t.Run("tier-b", func(t *testing.T) {
		start := hits.Load()
		const n = 40
		for i := 0; i < n; i++ {
			key := "other-" + strconv.Itoa(i)
			if r := a.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", key); r.status != 200 {
				t.Fatalf("keyed Tier B %d: %s", i, r)
			}
			if r := b.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", key); r.status != 200 || r.hdr("Idempotent-Replayed") != "true" {
				t.Fatalf("a repeat on the other node as soon as answer %d arrived: %s (replayed %q)", i, r, r.hdr("Idempotent-Replayed"))
			}
		}
		if got := hits.Load() - start; got != n {
			t.Fatalf("%d upstream calls for %d keys", got, n)
		}
	})

	t.Run("confirm-first", func(t *testing.T) {
		start := hits.Load()
		ca, cb := node("node-c", 5, engine.ModeConfirmFirst), node("node-d", 6, engine.ModeConfirmFirst)
		for i := 0; i < 20; i++ {
			key, path := "confirm-"+strconv.Itoa(i), "/item/cf"+strconv.Itoa(i)
			gate := ca.do(t, "LOOKUP", path, itemInput, "Allow-RCNS", "true", "Idempotency-Key", key)
			if gate.status != 461 {
				t.Fatalf("gate %d: %s", i, gate)
			}
			if p := cb.do(t, "LOOKUP", path, itemInput, "Contract-Synthesized", gate.str("synthesis_id"), "Idempotency-Key", key); p.status != 200 || p.hdr("Idempotent-Replayed") == "true" {
				t.Fatalf("confirmation %d on the other node as soon as its 461 arrived: %s (replayed %q)", i, p, p.hdr("Idempotent-Replayed"))
			}
		}
		if got := hits.Load() - start; got != 20 {
			t.Fatalf("%d upstream calls, want 20", got)
		}
	})

	// The gate path: a keyed synthesis repeated on the other node as
	// soon as its 263 arrived replays it (ResolvePair finds the key in
	// flight, then claims once more); a keyed refusal's repeat, whose
	// claim is released beside its 464, is refused again, not 409.
	t.Run("gate", func(t *testing.T) {
		start := hits.Load()
		for i := 0; i < 20; i++ {
			key, path := "gate-"+strconv.Itoa(i), "/item/gs"+strconv.Itoa(i)
			gate := a.do(t, "LOOKUP", path, itemInput, "Allow-RCNS", "true", "Idempotency-Key", key)
			if gate.status != 263 {
				t.Fatalf("keyed gate synthesis %d: %s", i, gate)
			}
			if r := b.do(t, "LOOKUP", path, itemInput, "Allow-RCNS", "true", "Idempotency-Key", key); r.status != 263 || r.hdr("Idempotent-Replayed") != "true" || r.str("synthesis_id") != gate.str("synthesis_id") {
				t.Fatalf("synthesis %d repeated on the other node as soon as its 263 arrived: %s (replayed %q)", i, r, r.hdr("Idempotent-Replayed"))
			}
			key = "refused-" + strconv.Itoa(i)
			if r := a.do(t, "LOOKUP", "/nothing", nil, "Allow-RCNS", "true", "Idempotency-Key", key); r.status != 464 {
				t.Fatalf("keyed gate refusal %d: %s", i, r)
			}
			if r := b.do(t, "LOOKUP", "/nothing", nil, "Allow-RCNS", "true", "Idempotency-Key", key); r.status != 464 {
				t.Fatalf("refusal %d repeated on the other node as soon as its 464 arrived: %s", i, r)
			}
		}
		if got := hits.Load() - start; got != 20 {
			t.Fatalf("%d upstream calls, want 20 (one per synthesis)", got)
		}
	})
}

// TestKeyedRepeatWhileRunningHere: on Redis, a repeat of a key whose
// request still runs on the same node answers 409 in flight after its
// one claim: the node knows the request runs (runningHere), so the
// claims again of inFlightRechecks, meant for an answer another node is
// still storing, are not made (before: five claims and 75 ms for every
// such repeat, each a round trip). The same repeat on another node
// still claims again (it cannot know), then answers 409; once the
// request has answered, a repeat on either node replays it.
func TestKeyedRepeatWhileRunningHere(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	node := func(name string, pool int) *testGateway {
		return redisGateway(t, up, srv.Addr(), func(h *Handler) { h.NodeID, h.Name, h.Redis.PoolSize = name, name, pool })
	}
	a, b := node("node-a", 0), node("node-b", 7)
	claims := func(g *testGateway) int {
		return int(metricValue(t, g.h, "caddy_rcns_store_round_trip_duration_seconds", "op", string(store.OpClaim)))
	}
	answered := startHeld(t, a, "running", arrived)

	before := claims(a)
	wantError(t, a.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running"), 409, "idempotency-key-in-flight", "still running")
	if n := claims(a) - before; n != 1 {
		t.Fatalf("a repeat on the node running the request made %d claims, want 1 (no claims again: it runs here)", n)
	}
	before = claims(b)
	wantError(t, b.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running"), 409, "idempotency-key-in-flight", "still running")
	if n := claims(b) - before; n < 2 {
		t.Fatalf("a repeat on the other node made %d claims, want it to claim again (the answer may be on its way)", n)
	}

	endRunning(t, free, answered)
	for _, g := range []*testGateway{a, b} {
		if r := g.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running"); r.status != 200 || r.hdr("Idempotent-Replayed") != "true" {
			t.Fatalf("a repeat on %s once answered: %s (replayed %q), want the answer replayed", g.h.NodeID, r, r.hdr("Idempotent-Replayed"))
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
}

// TestKeyedRepeatAfterLostClaim: a request whose claim was lost while
// it runs (Redis lost the record, or an operator released the key)
// still runs on this node; another request here takes the key and
// answers; a repeat sent at once to a handler of the same name and node
// on another Redis client (a reload that changed the pool's settings)
// claims again and replays that answer. Its claim is not the lost one
// still running here (runningHere matches the claim, not the key:
// helper-95 found 9 of 10 such repeats answered 409 when it matched
// the key).
func TestKeyedRepeatAfterLostClaim(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	node := func(pool int) *testGateway {
		return redisGateway(t, up, srv.Addr(), func(h *Handler) { h.NodeID, h.Name, h.Redis.PoolSize = "node-x", "lost-claim", pool })
	}
	first, second := node(0), node(7)
	if first.h.redis == second.h.redis {
		t.Fatal("the two handlers share one Redis client")
	}
	const n = 5
	var held []<-chan *answer
	for i := range n {
		held = append(held, startHeld(t, first, "lost-"+strconv.Itoa(i), arrived))
	}
	lose := func(key string) {
		t.Helper()
		names, err := redistest.Do(srv.Addr(), "KEYS", "t:*:i:"+key)
		if err != nil || names == "" {
			t.Fatalf("the record of %s: %q, %v", key, names, err)
		}
		if _, err := redistest.Do(srv.Addr(), "DEL", names); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		key := "lost-" + strconv.Itoa(i)
		lose(key)
		r := first.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", key)
		for try := 0; r.status == 409 && try < 5; try++ {
			lose(key) // the held request's renewal wrote its claim back first
			r = first.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", key)
		}
		if r.status != 200 {
			t.Fatalf("the key %s taken again after its claim was lost: %s", key, r)
		}
		if r := second.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", key); r.status != 200 || r.hdr("Idempotent-Replayed") != "true" {
			t.Fatalf("a repeat of %s on the other client as soon as its answer arrived: %s (replayed %q), want the answer replayed", key, r, r.hdr("Idempotent-Replayed"))
		}
	}
	free()
	for _, a := range held {
		<-a
	}
	if got := hits.Load(); got != 2*n {
		t.Fatalf("%d upstream calls, want %d (the held requests and the ones that took their keys)", got, 2*n)
	}
}

// TestRedisPoolOutlivesRunningRequests: a reload that ends the last
// configuration using a Redis client (its store settings changed) runs
// that configuration's Cleanup while its requests still run (Caddy
// does not wait for them). Cleanup returns at once, and the client
// stays open until they exit: a keyed request the reload overtook
// stores its answer (a repeat on the next configuration replays it, the
// upstream called once) instead of leaving its key in flight, then
// outcome-unknown. The client closes once the request has exited.
func TestRedisPoolOutlivesRunningRequests(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free() // a failure below must not leave the upstream's handler blocked
	old := redisGateway(t, up, srv.Addr())
	pool := old.h.redis
	answered := startHeld(t, old, "overtaken", arrived)

	cleanupUnderRequest(t, old.h, pool)
	free()
	if a := <-answered; a.status != 200 {
		t.Fatalf("the request the reload overtook: %s", a)
	}

	next := redisGateway(t, up, srv.Addr(), func(h *Handler) { h.Redis.KeyPrefix = "t:"; h.Redis.PoolSize = 7 })
	if next.h.redis == pool {
		t.Fatal("the next configuration shares the old client")
	}
	var a *answer
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a = next.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "overtaken")
		if a.status != 409 || a.str("reason") != "idempotency-key-in-flight" || time.Now().After(deadline) {
			break
		}
	}
	if a.status != 200 || a.hdr("Idempotent-Replayed") != "true" || hits.Load() != 1 {
		t.Fatalf("a repeat of the overtaken request's key: %s (replayed %q, %d upstream calls), want its answer replayed", a, a.hdr("Idempotent-Replayed"), hits.Load())
	}
	waitPoolClosed(t, pool)
}

// cleanupUnderRequest runs h's Cleanup, as a reload that ends h's
// configuration does, while a request still runs on it, and checks
// that Cleanup returned at once and left the request's Redis client
// (pool) open.
func cleanupUnderRequest(t *testing.T, h *Handler, pool *pooledRedis) {
	t.Helper()
	cleaned := make(chan error, 1)
	go func() { cleaned <- h.Cleanup() }()
	select {
	case err := <-cleaned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Cleanup waited for the configuration's running request")
	}
	select {
	case <-pool.done:
		t.Fatal("the client was closed under a request still running")
	default:
	}
}

// waitPoolClosed waits, at most 10 s, for the Redis client of a
// configuration that went away to close once its requests exited.
func waitPoolClosed(t *testing.T, pool *pooledRedis) {
	t.Helper()
	select {
	case <-pool.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the old client was not closed once its requests exited")
	}
}

// startHeld sends a keyed FETCH /items/held to g and returns once the
// held upstream has it (claimed, its plan running); its answer comes
// on the channel when the upstream is released.
func startHeld(t *testing.T, g *testGateway, key string, arrived <-chan struct{}) <-chan *answer {
	answered := make(chan *answer, 1)
	go func() { answered <- g.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", key) }()
	<-arrived
	return answered
}

// endRunning releases the request held at the upstream (free) and
// checks that it answered 200.
func endRunning(t *testing.T, free func(), answered <-chan *answer) {
	t.Helper()
	free()
	if a := <-answered; a.status != 200 {
		t.Fatalf("the running request: %s", a)
	}
}

// TestReloadMovingKeysRefusesClaims: while a keyed request of the
// previous configuration runs, a reload that moves the handler's
// Idempotency-Keys to another store (memory to Redis, then another
// key_prefix, through a reload that moved nothing) answers keyed
// requests 503 store-unavailable naming the reload, the repeat of the
// running request included; requests without a key are served; once it
// has ended, keyed requests run. A reload that keeps the store refuses
// nothing. Before, a repeat on the new store ran the key a second time
// (a review: every key of 3 running requests ran twice after a
// key_prefix change). Caddy provisions a reload's configuration before
// it cleans up the previous one: each handler below is provisioned
// while the one before it still runs (same name, same shared state).
func TestReloadMovingKeysRefusesClaims(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	mem := &testGateway{h: benchHandler(t, up, false)}
	answered := startHeld(t, mem, "running", arrived)
	same := &testGateway{h: benchHandler(t, up, false)}
	if a := same.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "kept"); a.status != 200 {
		t.Fatalf("a reload that keeps the store: keyed request %s", a)
	}
	onRedis := redisGateway(t, up, srv.Addr())
	n := hits.Load()
	a := onRedis.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running")
	wantError(t, a, 503, "store-unavailable", "Idempotency-Key store changed with a configuration reload")
	if ra, err := strconv.Atoi(a.hdr("Retry-After")); err != nil || ra < 1 || ra > 5 {
		t.Fatalf("Retry-After %q, want 1-5 s", a.hdr("Retry-After"))
	}
	if a := onRedis.do(t, "FETCH", "/items/1", nil); a.status != 200 {
		t.Fatalf("a request without a key while keyed ones are refused: %s", a)
	}
	prefixed := redisGateway(t, up, srv.Addr(), func(h *Handler) { h.Redis.KeyPrefix = "other:" })
	wantError(t, prefixed.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running"), 503, "store-unavailable", "Idempotency-Key store changed")
	if got := hits.Load(); got != n+1 {
		t.Fatalf("%d upstream calls for refused keyed requests, want none (and one without a key)", got-n-1)
	}
	endRunning(t, free, answered)
	if a := prefixed.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "after"); a.status != 200 {
		t.Fatalf("a keyed request once the previous configuration's has ended: %s", a)
	}
}

// TestReloadKeepsRunningClaims: on the memory store, a reload that
// changes the Idempotency-Key bounds (idempotency_window) keeps the
// claim of a request still running: its repeat gets 409 in flight, then
// the answer (review: the store started empty and the repeat ran
// again). A reload that drops the name (its State destroyed while the
// request runs) and one that brings it back with a fresh memory store:
// the repeat is refused until the request has ended.
func TestReloadKeepsRunningClaims(t *testing.T) {
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	old := &testGateway{h: benchHandler(t, up, false)}
	answered := startHeld(t, old, "running", arrived)
	windowed := &testGateway{h: benchHandlerWith(t, up, false, "", "", func(h *Handler) { h.IdempotencyWindow = engine.Duration(2 * time.Hour) })}
	wantError(t, windowed.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running"), 409, "idempotency-key-in-flight", "still running")
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want the running request's only", n)
	}
	endRunning(t, free, answered)
	if a := windowed.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running"); a.status != 200 || a.hdr("Idempotent-Replayed") != "true" {
		t.Fatalf("the repeat once answered: %s, want the answer replayed", a)
	}

	// The name leaves the configuration while a request runs, then
	// comes back: a new State, a new memory store.
	up2, hits2, arrived2, release2 := heldUpstream(t)
	free2 := sync.OnceFunc(func() { close(release2) })
	defer free2()
	gone := &testGateway{h: benchHandlerWith(t, up2, false, "", "", func(h *Handler) { h.Name += "-comes-back" })}
	answered = startHeld(t, gone, "running", arrived2)
	for _, g := range []*testGateway{old, windowed, gone} {
		if g.h.Name == gone.h.Name {
			_ = g.h.Cleanup() // the name's last handler: its State is destroyed
		}
	}
	back := &testGateway{h: benchHandlerWith(t, up2, false, "", "", func(h *Handler) { h.Name += "-comes-back" })}
	wantError(t, back.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "running"), 503, "store-unavailable", "Idempotency-Key store changed with a configuration reload")
	if n := hits2.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want the running request's only", n)
	}
	endRunning(t, free2, answered)
	if a := back.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "after"); a.status != 200 {
		t.Fatalf("a keyed request once it ended: %s", a)
	}
}

// TestFailedReloadKeepsMemoryBounds: a reload that fails after its
// memory store was attached (an empty operator page token placeholder)
// leaves the running configuration's bounds as they were: its
// idempotency_window (24 h) still replays a key 2 s later, though the
// failed configuration said 1 s (review: the failed load's bounds were
// applied at once, and the repeat ran again). The next configuration's
// bounds apply from its first request.
func TestFailedReloadKeepsMemoryBounds(t *testing.T) {
	up, hits := countingUpstream(t)
	running := &testGateway{h: benchHandler(t, up, false)}
	if a := running.do(t, "FETCH", "/items/1", nil); a.status != 200 { // serving before the reload
		t.Fatalf("request: %s", a)
	}
	t.Setenv("RCNS_TEST_UNSET_TOKEN", "")
	failed := benchConfig(t, up, false, "", "", func(h *Handler) {
		h.IdempotencyWindow = engine.Duration(time.Second)
		h.OperatorPage = &oppage.Config{BearerToken: "{env.RCNS_TEST_UNSET_TOKEN}"}
	})
	swapLogger(t, failed)
	if err := failed.Provision(benchContext(t)); err == nil {
		t.Fatal("Provision with an empty token placeholder succeeded")
	}
	_ = failed.Cleanup()
	if a := running.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "kept"); a.status != 200 {
		t.Fatalf("keyed request: %s", a)
	}
	time.Sleep(1500 * time.Millisecond)
	if a := running.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "kept"); a.status != 200 || a.hdr("Idempotent-Replayed") != "true" || hits.Load() != 2 {
		t.Fatalf("the repeat 1.5 s later on the running configuration: %s (%d upstream calls), want the answer replayed", a, hits.Load())
	}
	next := &testGateway{h: benchHandlerWith(t, up, false, "", "", func(h *Handler) { h.IdempotencyWindow = engine.Duration(time.Second) })}
	if a := next.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "short"); a.status != 200 {
		t.Fatalf("keyed request on the next configuration: %s", a)
	}
	if got := running.h.state.MemoryStore().Limits().Idempotency.Window; got != time.Second {
		t.Fatalf("the memory store's window once the next configuration served: %v, want 1s", got)
	}
}

// TestOneLoadStoresDoNotRefuseEachOther: two handlers of one name in
// one configuration (two site blocks that leave name unset) share the
// name's State; keeping their keys in different stores is not a reload
// that moved the keys, on the first load or on a reload that keeps
// both. A reload that moves one of them, under a running keyed request,
// refuses keyed requests.
func TestOneLoadStoresDoNotRefuseEachOther(t *testing.T) {
	srv := redistest.StartServer(t)
	up, _, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	load := func(prefix string) (mem, red *testGateway) {
		ctx := benchContext(t) // one configuration load
		mem = &testGateway{h: provisionIn(t, ctx, benchConfig(t, up, false, "", ""))}
		red = &testGateway{h: provisionIn(t, ctx, benchConfig(t, up, false, "", "", func(h *Handler) {
			h.Store = StoreRedis
			h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: prefix}
		}))}
		if mem.h.Name != red.h.Name {
			t.Fatalf("names %q and %q: the test needs one name", mem.h.Name, red.h.Name)
		}
		return mem, red
	}
	n := 0
	keyed := func(g *testGateway) *answer {
		n++
		return g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "one-load-"+strconv.Itoa(n))
	}
	var mem, red *testGateway
	for i, what := range []string{"first load", "a reload that keeps both stores"} {
		mem, red = load("t:")
		if a := keyed(mem); a.status != 200 {
			t.Fatalf("%s (%d): keyed request on the memory handler: %s", what, i, a)
		}
		if a := keyed(red); a.status != 200 {
			t.Fatalf("%s (%d): keyed request on the Redis handler: %s", what, i, a)
		}
	}
	answered := startHeld(t, red, "running", arrived)
	if a := keyed(mem); a.status != 200 {
		t.Fatalf("a keyed request on the memory handler while one runs on the Redis handler of its configuration: %s", a)
	}
	_, moved := load("moved:")
	wantError(t, keyed(moved), 503, "store-unavailable", "Idempotency-Key store changed with a configuration reload")
	endRunning(t, free, answered)
}

// TestFailedReloadMovesNoKeys: a reload that would move the keys but
// fails after the store was attached (here the operator page's token
// placeholder is empty) never serves, so the running configuration is
// not refused; the same move, loaded later while a keyed request runs,
// still is (review: the failed load's location was recorded, the
// running configuration refused for the lease, and the later real move
// went unseen, running a keyed write twice).
func TestFailedReloadMovesNoKeys(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits, arrived, release := heldUpstream(t)
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	running := redisGateway(t, up, srv.Addr())
	if a := running.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "before"); a.status != 200 {
		t.Fatalf("keyed request: %s", a)
	}
	t.Setenv("RCNS_TEST_UNSET_TOKEN", "")
	failed := benchConfig(t, up, false, "", "", func(h *Handler) {
		h.Store = StoreRedis
		h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "moved:"}
		h.OperatorPage = &oppage.Config{BearerToken: "{env.RCNS_TEST_UNSET_TOKEN}"}
	})
	swapLogger(t, failed)
	if err := failed.Provision(benchContext(t)); err == nil || !strings.Contains(err.Error(), "placeholder is empty") {
		t.Fatalf("Provision with an empty token placeholder: %v, want the placeholder named", err)
	}
	_ = failed.Cleanup() // as Caddy does after a failed Provision
	answered := startHeld(t, running, "after-failed", arrived)
	if a := running.do(t, "FETCH", "/items/2", nil, "Idempotency-Key", "beside"); a.status != 200 {
		t.Fatalf("keyed request on the running configuration after a failed reload: %s", a)
	}
	moved := redisGateway(t, up, srv.Addr(), func(h *Handler) { h.Redis.KeyPrefix = "moved:" })
	n := hits.Load()
	wantError(t, moved.do(t, "FETCH", "/items/held", nil, "Idempotency-Key", "after-failed"), 503, "store-unavailable", "Idempotency-Key store changed with a configuration reload")
	if got := hits.Load(); got != n {
		t.Fatalf("%d upstream calls for a refused keyed request, want none", got-n)
	}
	endRunning(t, free, answered)
}

// TestRunIDFileNamesTheDeployment: the run-id file (docs/cluster.md,
// "Failure modes") is one per deployment's data: the order the seed
// addresses are written in does not change it (a reload that reorders
// them keeps the run ids seen, so a restart before it is quarantined);
// another key prefix or db does.
func TestRunIDFileNamesTheDeployment(t *testing.T) {
	cfg := redisstore.Config{Mode: "cluster", Addrs: []string{"10.0.0.2:7000", "10.0.0.1:7000"}, KeyPrefix: "rcns:"}
	reordered := cfg
	reordered.Addrs = []string{"10.0.0.1:7000", "10.0.0.2:7000"}
	if runIDFile(cfg) != runIDFile(reordered) {
		t.Errorf("seeds reordered: %s and %s, want one file", runIDFile(cfg), runIDFile(reordered))
	}
	if cfg.Addrs[0] != "10.0.0.2:7000" {
		t.Errorf("runIDFile reordered the configuration's addresses: %v", cfg.Addrs)
	}
	prefixed, db := cfg, cfg
	prefixed.KeyPrefix, db.DB = "other:", 1
	for _, other := range []redisstore.Config{prefixed, db} {
		if runIDFile(other) == runIDFile(cfg) {
			t.Errorf("%+v and %+v share a run-id file", other, cfg)
		}
	}
}

// TestPortOfAnotherTestsRedis: a test whose redis-server took the port
// of an earlier test's (tests take free ports; the run-id file of that
// address holds the earlier server's run) is not quarantined as if its
// Redis had restarted: its first keyed request runs. The harness
// (forgetOtherRuns) drops another test's run ids; CI met this as a 503
// "Redis restarted" on TestRedisCompleteLost's first request.
func TestPortOfAnotherTestsRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	up, hits := countingUpstream(t)
	h := benchConfig(t, up, false, "", "")
	h.Store, h.Redis = StoreRedis, &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "t:"}
	file := runIDFile(h.Redis.clientConfig(caddy.NewReplacer(), 0))
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	// What an earlier test's server, on the same port, left.
	if err := os.WriteFile(file, []byte(`{"master":"0123456789abcdef0123456789abcdef01234567"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &testGateway{h: provisionIn(t, benchContext(t), h)}
	if a := g.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "first"); a.status != 200 || hits.Load() != 1 {
		t.Fatalf("the first keyed request on a port another test's Redis had: %s (%d upstream calls)", a, hits.Load())
	}
}

// TestStoreGaugesTwoHandlers: two rcns handlers of one config, each on
// its own Redis (different names, so different state), share the
// store gauges' series (one registry). With one Redis stopped, a
// request on the other handler (its store answering) must not turn
// caddy_rcns_store_up back to 1: it reads 0 while any handler's store
// is down, and 1 again once the handler on the stopped Redis is
// unloaded (helper-89: it read 1 every 5 s, so RCNSStoreDown's
// "for: 1m" never fired).
func TestStoreGaugesTwoHandlers(t *testing.T) {
	down, upSrv := redistest.StartServer(t), redistest.StartServer(t)
	up, _ := countingUpstream(t)
	ctx := benchContext(t)
	handler := func(name, addr string) *testGateway {
		return &testGateway{h: provisionIn(t, ctx, benchConfig(t, up, false, "", "", func(h *Handler) {
			h.Name = name
			h.Store = StoreRedis
			h.Redis = &RedisConfig{Addresses: []string{addr}, KeyPrefix: name + ":"}
		}))}
	}
	red, other := handler("gauge-red", down.Addr()), handler("gauge-other", upSrv.Addr())
	if red.h.redis == other.h.redis {
		t.Fatal("the two handlers share one Redis client")
	}
	down.Stop()
	wantStoreUnavailable(t, red.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "gauge-1"))
	for i := 0; i < 3; i++ {
		if a := other.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "gauge-ok-"+strconv.Itoa(i)); a.status != 200 {
			t.Fatalf("keyed Tier B on the handler whose Redis answers: %s", a)
		}
		if got := metricValue(t, other.h, "caddy_rcns_store_up"); got != 0 {
			t.Fatalf("caddy_rcns_store_up = %v after a round trip on the other handler, with one handler's Redis stopped: want 0", got)
		}
	}
	if err := red.h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if a := other.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "gauge-after"); a.status != 200 {
		t.Fatalf("keyed Tier B after the other handler was unloaded: %s", a)
	}
	if got := metricValue(t, other.h, "caddy_rcns_store_up"); got != 1 {
		t.Fatalf("caddy_rcns_store_up = %v once the handler on the stopped Redis is unloaded: want 1", got)
	}
}

// TestStoreGaugesOneStoreTwoHandlers: two handlers of one name in one
// config read one memory store (their State's). Each counts the live
// contracts after its own syntheses; the gauge is that store's newest
// count, not the sum of the two handlers' counts (helper-92: nothing
// checked that SwitchStore groups them).
func TestStoreGaugesOneStoreTwoHandlers(t *testing.T) {
	up, _ := countingUpstream(t)
	ctx := benchContext(t)
	handler := func() *testGateway {
		return &testGateway{h: provisionIn(t, ctx, benchConfig(t, up, false, "", "", func(h *Handler) { h.Name = "gauge-one-store" }))}
	}
	first, second := handler(), handler()
	if first.h.state != second.h.state {
		t.Fatal("two handlers of one name in one config do not share their State")
	}
	for i, g := range []*testGateway{first, second, second} {
		if a := g.do(t, "LOOKUP", "/item/one-store-"+strconv.Itoa(i), itemInput, "Allow-RCNS", "true"); a.status != 263 {
			t.Fatalf("synthesis %d: %s", i, a)
		}
	}
	if got := metricValue(t, first.h, "caddy_rcns_active_contracts"); got != 3 {
		t.Fatalf("caddy_rcns_active_contracts = %v with 3 live contracts in the two handlers' one store: want 3 (4 is the two handlers' counts summed)", got)
	}
}

// TestStoreRoundTripsCountedOnce: two handlers of one name on one Redis
// share its client (and one registry): a round trip is counted once in
// caddy_rcns_store_round_trip_duration_seconds, not once per handler
// (helper-92).
func TestStoreRoundTripsCountedOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	up, _ := countingUpstream(t)
	ctx := benchContext(t)
	handler := func() *testGateway {
		return &testGateway{h: provisionIn(t, ctx, benchConfig(t, up, false, "", "", func(h *Handler) {
			h.Name = "round-trips-once"
			h.Store = StoreRedis
			h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "once:"}
		}))}
	}
	first, second := handler(), handler()
	if first.h.redis != second.h.redis {
		t.Fatal("two handlers of one name on one Redis do not share its client")
	}
	claims := func() float64 {
		return metricValue(t, first.h, "caddy_rcns_store_round_trip_duration_seconds", "op", string(store.OpClaim))
	}
	before := claims()
	for i := 0; i < 3; i++ {
		if a := second.do(t, "FETCH", "/items/1", nil, "Idempotency-Key", "once-"+strconv.Itoa(i)); a.status != 200 {
			t.Fatalf("keyed Tier B %d: %s", i, a)
		}
	}
	if got := claims() - before; got != 3 {
		t.Fatalf("%v idempotency_claim round trips counted for 3 keyed requests: want 3", got)
	}
}

// TestPanicInHealthCheck: a panic in the Redis store's health check (a
// defect; here a test hook at its start), which runs on the pool's
// own goroutine outside any request, is logged at ERROR with its stack
// and counts as a failed check instead of ending the process; the next
// check runs and finds Redis up.
func TestPanicInHealthCheck(t *testing.T) {
	srv := redistest.StartServer(t)
	core, logs := observer.New(zap.ErrorLevel)
	p, err := newPooledRedis(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:"}, true, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.close() })
	var armed atomic.Bool
	hook := func() {
		if armed.CompareAndSwap(true, false) {
			panic("health check defect")
		}
	}
	testHookHealthCheck.Store(&hook)
	defer testHookHealthCheck.Store(nil)
	armed.Store(true)
	if p.check() {
		t.Fatal("a health check that panicked reported Redis up")
	}
	lines := logs.FilterMessageSnippet("panic in the Redis store's health check").All()
	if len(lines) != 1 || lines[0].ContextMap()["panic"] != "health check defect" ||
		!strings.Contains(lines[0].ContextMap()["stack"].(string), "check") {
		t.Fatalf("panic lines %v, want one with the value and the stack", lines)
	}
	if !p.check() {
		t.Fatal("the check after the panic did not find Redis up")
	}
}
