package mcpdoor

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// testEngine is the engine of the load test's documents
// (scripts/bench/docs) as the MCP door's tests list them, built without
// Caddy and attached to its memory store. Its upstream is never called:
// these tests look at tools, not calls (caddymodule's MCP tests call
// them through a provisioned handler).
func testEngine(t testing.TB) *engine.Engine {
	t.Helper()
	return testEngineAt(t, "http://127.0.0.1:9")
}

// testEngineAt is testEngine with its bench upstream at upstream (a
// loopback URL).
func testEngineAt(t testing.TB, upstream string) *engine.Engine {
	t.Helper()
	return testEngineWith(t, upstream)
}

// testEngineWith is testEngineAt with adjust applied to its config
// before it is validated.
func testEngineWith(t testing.TB, upstream string, adjust ...func(*engine.Config)) *engine.Engine {
	t.Helper()
	return testEngineLogged(t, zap.NewNop(), upstream, adjust...)
}

// testEngineLogged is testEngineWith logging to logger.
func testEngineLogged(t testing.TB, logger *zap.Logger, upstream string, adjust ...func(*engine.Config)) *engine.Engine {
	t.Helper()
	return testEngineSet(t, logger, upstream, nil, adjust...)
}

// testEngineSet is testEngineLogged with its memory store's set passed
// through wrap (nil: as it is): a fault injected below the engine.
func testEngineSet(t testing.TB, logger *zap.Logger, upstream string, wrap func(store.Set) store.Set, adjust ...func(*engine.Config)) *engine.Engine {
	t.Helper()
	docs := filepath.Join("..", "..", "scripts", "bench", "docs")
	cfg := &engine.Config{Name: "mcp-test"}
	cfg.Enabled = true
	cfg.Mode = engine.ModeOptimistic
	cfg.Upstreams = map[string]*engine.UpstreamConfig{"bench": {URL: upstream}}
	cfg.Agents = []string{filepath.Join(docs, "agents")}
	cfg.Endpoints = []string{filepath.Join(docs, "endpoints")}
	cfg.Recipes = []string{filepath.Join(docs, "recipes")}
	cfg.RecordsDir = "off"
	for _, f := range adjust {
		f(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	st := engine.NewState(cfg.Name)
	t.Cleanup(func() { _ = st.Destruct() })
	e, err := engine.New(cfg, engine.Deps{Logger: logger, Metrics: prometheus.NewRegistry(), State: st})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	t.Cleanup(e.Close)
	mem := st.Memory(e.StoreLimits())
	set := mem.Set()
	if wrap != nil {
		set = wrap(set)
	}
	if err := e.Attach(engine.Store{Set: set, Memory: mem}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return e
}

// newTestDoor is the door of e with cfg (nil: every knob unset) and
// the defaults a handler with its own defaults gives it.
func newTestDoor(t testing.TB, e *engine.Engine, cfg *Config) *Door {
	t.Helper()
	if cfg == nil {
		cfg = &Config{}
	}
	ec := &engine.Config{}
	ec.SetDefaults()
	cfg.SetDefaults(ec)
	d, err := New(e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// mustMarshal is v as JSON.
func mustMarshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
