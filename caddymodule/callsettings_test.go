package caddymodule

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// authUpstream is the bench upstream's GET /items/{id}, recording the
// Authorization header of each call and answering after delay.
type authUpstream struct {
	url   string
	delay atomic.Int64 // nanoseconds
	mu    sync.Mutex
	seen  []string
}

func newAuthUpstream(t *testing.T) *authUpstream {
	t.Helper()
	u := &authUpstream{}
	mux := http.NewServeMux()
	serve := func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Get("Authorization"))
		u.mu.Unlock()
		if d := time.Duration(u.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "name": "item", "price": 1})
	}
	mux.HandleFunc("GET /items/{id}", serve)
	mux.HandleFunc("GET /items/v2/{id}", serve)
	u.url = loopbackServer(t, mux).URL
	return u
}

// take returns the Authorization headers seen since the last take.
func (u *authUpstream) take() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.seen
	u.seen = nil
	return s
}

// benchEndpointsWith is a copy of the bench endpoints directory whose
// fetch-item.yaml (FETCH /items/{item_id}, the lookup-item recipe's
// step) has settings (external_service members, two-space indented)
// instead of its timeout_seconds: 10 line, and upstream path upPath.
func benchEndpointsWith(t *testing.T, settings, upPath string) string {
	t.Helper()
	src := filepath.Join("..", "scripts", "bench", "docs", "endpoints")
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "fetch-item.yaml" {
			s := string(b)
			for _, r := range [][2]string{{"  timeout_seconds: 10\n", settings}, {"  path: /items/{item_id}\n", "  path: " + upPath + "\n"}} {
				if !strings.Contains(s, r[0]) {
					t.Fatalf("fetch-item.yaml has no %q", r[0])
				}
				s = strings.Replace(s, r[0], r[1], 1)
			}
			b = []byte(s)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestContractTakesCurrentCallSettings: what a live contract's step
// sends and how long it waits come from the configuration running when
// it is presented, not from the one it was minted under (a contract
// stores no credential). A contract minted before the endpoint had an
// Authorization header and one minted under "Bearer old-key", with a
// 1 s timeout, presented after a reload to "Bearer new-key" and 5 s,
// both send the new header (as a Tier B call does) and wait out an
// upstream that takes 1.5 s; the
// stale sweep finds them unchanged. A reload that changes the step's
// upstream path (what the contract agreed to) refuses them 464
// composition-impossible naming the endpoint, with nothing sent, and
// the sweep lists them. The Redis store's plan holds no header. On the
// memory store and Redis alike.
func TestContractTakesCurrentCallSettings(t *testing.T) {
	for _, tt := range []struct {
		name  string
		redis bool
	}{{"memory", false}, {"redis", true}} {
		t.Run(tt.name, func(t *testing.T) {
			st, addr := func(*Handler) {}, ""
			if tt.redis {
				addr = redistest.StartServer(t).Addr()
				st = func(h *Handler) {
					h.Store = StoreRedis
					h.Redis = &RedisConfig{Addresses: []string{addr}, KeyPrefix: "t:"}
				}
			}
			up := newAuthUpstream(t)
			gateway := func(settings, upPath string) *testGateway {
				dir := benchEndpointsWith(t, settings, upPath)
				return &testGateway{h: benchHandlerWith(t, up.url, false, "", "", st, withOperator(t), func(h *Handler) { h.Endpoints = []string{dir} })}
			}
			reload := func(old *testGateway, settings, upPath string) *testGateway {
				g := gateway(settings, upPath)
				if err := old.h.Cleanup(); err != nil {
					t.Fatal(err)
				}
				return g
			}
			sweep := func(g *testGateway, ids ...string) []map[string]any {
				a := g.do(t, "REVOKE", "/", map[string]any{"parameters": map[string]any{"target": "stale-contracts", "mode": "grandfather"}},
					"Agent-ID", operatorAgent, "Authority-Scope", "inspect:all")
				var out []map[string]any
				for _, id := range ids {
					out = append(out, sweepEntry(t, a, id))
				}
				return out
			}
			mint := func(g *testGateway, path, wantAuth string) string {
				syn := g.do(t, "LOOKUP", path, itemInput, "Allow-RCNS", "true")
				id := syn.str("synthesis_id")
				if got := up.take(); syn.status != 263 || id == "" || !slices.Equal(got, []string{wantAuth}) {
					t.Fatalf("gate synthesis of %s: %s (upstream saw Authorization %q, want %q)", path, syn, got, wantAuth)
				}
				return id
			}

			// Minted with no header, then (after a reload) with the old
			// key; both with a 1 s timeout (a loopback answer under a
			// loaded -race run has taken over 0.2 s).
			g := gateway("  timeout_seconds: 1\n", "/items/{item_id}")
			bare := mint(g, "/item/r1", "")
			g = reload(g, "  timeout_seconds: 1\n  headers: {Authorization: Bearer old-key}\n", "/items/{item_id}")
			keyed := mint(g, "/item/r2", "Bearer old-key")
			if tt.redis {
				for _, id := range []string{bare, keyed} {
					plan, err := redistest.Do(addr, "HGET", "t:{a:"+benchAgent+"}:c:"+id, "plan")
					if err != nil || plan == "" {
						t.Fatalf("the stored plan of %s: %q (%v)", id, plan, err)
					}
					for _, s := range []string{"old-key", "Authorization", "headers", "timeout_seconds"} {
						if strings.Contains(plan, s) {
							t.Fatalf("the plan stored in Redis holds %q: %s", s, plan)
						}
					}
				}
			}

			// The operator rotates the key and raises the timeout; the
			// upstream now takes 1.5 s, more than the old timeout.
			g = reload(g, "  timeout_seconds: 5\n  headers: {Authorization: Bearer new-key}\n", "/items/{item_id}")
			up.delay.Store(int64(1500 * time.Millisecond))
			if a := g.do(t, "FETCH", "/items/1", nil); a.status != 200 || !slices.Equal(up.take(), []string{"Bearer new-key"}) {
				t.Fatalf("Tier B after the rotation: %s", a)
			}
			for _, c := range []struct{ path, id string }{{"/item/r1", bare}, {"/item/r2", keyed}} {
				a := g.do(t, "LOOKUP", c.path, itemInput, "Contract-Synthesized", c.id)
				if got := up.take(); a.status != 200 || a.hdr("Contract-Synthesized") != c.id || !slices.Equal(got, []string{"Bearer new-key"}) {
					t.Fatalf("%s presented after the rotation: %s (upstream saw Authorization %q); want 200 after 1.5 s with Bearer new-key", c.id, a, got)
				}
			}
			if a := g.do(t, "LOOKUP", "/item/r2", itemInput); a.status != 200 || !slices.Equal(up.take(), []string{"Bearer new-key"}) {
				t.Fatalf("by pair after the rotation: %s", a)
			}
			for _, e := range sweep(g, bare, keyed) {
				if e["disposition"] != "unchanged" || e["unavailable_endpoints"] != nil {
					t.Fatalf("sweep after the rotation: %v; want unchanged", e)
				}
			}
			up.delay.Store(0)

			// The step's upstream path changes: the contracts agreed to
			// the old call, and are refused naming its endpoint.
			g = reload(g, "  headers: {Authorization: Bearer new-key}\n", "/items/v2/{item_id}")
			for _, c := range []struct{ path, id string }{{"/item/r1", bare}, {"/item/r2", keyed}} {
				a := g.do(t, "LOOKUP", c.path, itemInput, "Contract-Synthesized", c.id)
				wantError(t, a, 464, "composition-impossible", "FETCH /items/{item_id}")
				if eps, _ := a.body["unavailable_endpoints"].([]any); !slices.Equal(eps, []any{"FETCH /items/{item_id}"}) {
					t.Fatalf("refusal without unavailable_endpoints: %s", a)
				}
			}
			if got := up.take(); len(got) != 0 {
				t.Fatalf("a refused contract called the upstream: %q", got)
			}
			for _, e := range sweep(g, bare, keyed) {
				eps, _ := e["unavailable_endpoints"].([]any)
				if e["disposition"] != "grandfathered" || !slices.Equal(eps, []any{"FETCH /items/{item_id}"}) {
					t.Fatalf("sweep after the endpoint changed: %v; want grandfathered naming FETCH /items/{item_id}", e)
				}
			}

			// The agent's way out, as the 464 tells it: the contract it
			// holds answers the pair before the gate (Allow-RCNS or not),
			// so it releases the contract, and the gate synthesizes a new
			// one over the endpoint as it now is (helper-80: the 464 said
			// "synthesize a new contract", and the gate could not).
			wantError(t, g.do(t, "LOOKUP", "/item/r2", itemInput, "Allow-RCNS", "true"), 464, "composition-impossible", "SUSPEND")
			if a := g.do(t, "SUSPEND", "/", map[string]any{"parameters": map[string]any{"synthesis_id": keyed}}); a.status != 200 {
				t.Fatalf("releasing the stale contract: %s", a)
			}
			syn := g.do(t, "LOOKUP", "/item/r2", itemInput, "Allow-RCNS", "true")
			if id := syn.str("synthesis_id"); syn.status != 263 || id == "" || id == keyed || !slices.Equal(up.take(), []string{"Bearer new-key"}) {
				t.Fatalf("a new contract for the pair after the release: %s", syn)
			}
			if err := g.h.Cleanup(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
