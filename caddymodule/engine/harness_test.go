package engine

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// The engine's own tests build it as a host would, without Caddy: a
// Config of the load test's documents (scripts/bench/docs), a real
// upstream on 127.0.0.1, the memory store, and agtp.Requests handed to
// Serve as a door frames them.

// testAgent is the load test's registered agent (trust tier 1), and
// testScope what it may claim.
const (
	testAgent = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"
	testScope = "rcns:negotiate, bench:read"
)

// testEngine is an engine attached to its memory store, and the
// registry its metrics are on.
type testEngine struct {
	*Engine
	reg *prometheus.Registry
}

// testUpstream serves GET /items/{id} like scripts/bench/upstream, on
// 127.0.0.1 until the test ends.
func testUpstream(t testing.TB) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(map[string]any{"id": r.PathValue("id"), "name": "bench item", "price": 12.5})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})
	return serveLoopback(t, mux)
}

// serveLoopback serves h on 127.0.0.1 (never another interface) until
// the test ends, and returns its URL.
func serveLoopback(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// newTestEngine builds and attaches the engine of the load test's
// configuration (identity header, optimistic synthesis), each adjust
// applied to the Config before New.
func newTestEngine(t testing.TB, adjust ...func(*Config)) *testEngine {
	t.Helper()
	return newTestEngineSet(t, nil, adjust...)
}

// newTestEngineSet is newTestEngine with the memory store's Set passed
// through wrap (nil: as it is) before Attach: a fault injected below
// the module boundary.
func newTestEngineSet(t testing.TB, wrap func(store.Set) store.Set, adjust ...func(*Config)) *testEngine {
	t.Helper()
	docs := filepath.Join("..", "..", "scripts", "bench", "docs")
	cfg := &Config{Name: "engine-test", ServerID: "rcns-test"}
	cfg.Identity = IdentityHeader
	cfg.Enabled = true
	cfg.Mode = ModeOptimistic
	cfg.ContractTTL = Duration(30 * time.Second)
	cfg.RateLimitPerMinute = 1e6
	cfg.RateLimitBurst = 1_000_000
	cfg.Upstreams = map[string]*UpstreamConfig{"bench": {URL: testUpstream(t)}}
	cfg.Agents = []string{filepath.Join(docs, "agents")}
	cfg.Endpoints = []string{filepath.Join(docs, "endpoints")}
	cfg.Recipes = []string{filepath.Join(docs, "recipes")}
	cfg.Fsync = "off"
	for _, f := range adjust {
		f(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	reg := prometheus.NewRegistry()
	st := NewState(cfg.Name)
	t.Cleanup(func() { _ = st.Destruct() })
	e, err := New(cfg, Deps{Logger: zap.NewNop(), Metrics: reg, State: st, DataDir: t.TempDir(), NodeID: "test-node"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(e.Close)
	mem := st.Memory(e.StoreLimits())
	set := mem.Set()
	if wrap != nil {
		set = wrap(set)
	}
	if err := e.Attach(Store{Set: set, Memory: mem}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return &testEngine{Engine: e, reg: reg}
}

// testAnswer is an engine answer with its body decoded when it is a
// JSON object.
type testAnswer struct {
	*agtp.Response
	body map[string]any
}

// str is a string member of the body ("" when absent).
func (a *testAnswer) str(key string) string {
	s, _ := a.body[key].(string)
	return s
}

// header is the first value of the response field name.
func (a *testAnswer) header(name string) string {
	for _, f := range a.Header {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

func (a *testAnswer) String() string { return strconv.Itoa(a.Status) + " " + string(a.Body) }

// serve hands one request to Serve as the HTTP door frames it, from a
// loopback address: hdr as given, body with its Content-Length.
func (te *testEngine) serve(t testing.TB, method, target string, hdr http.Header, body string) *testAnswer {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatalf("target %q: %v", target, err)
	}
	if hdr == nil {
		hdr = http.Header{}
	}
	in := &agtp.Request{Binding: agtp.BindingHTTP, Method: method, Target: target, URL: u, Host: "127.0.0.1",
		Header: hdr, ContentLength: int64(len(body)), Loopback: true}
	if body != "" {
		in.Body = strings.NewReader(body)
	}
	resp := te.Serve(t.Context(), in)
	a := &testAnswer{Response: resp}
	_ = json.Unmarshal(resp.Body, &a.body)
	return a
}

// agentHeader is benchAgent's header with testScope, plus kv pairs
// (added, so a repeated name repeats the field).
func agentHeader(kv ...string) http.Header {
	h := http.Header{"Agent-Id": {testAgent}, "Authority-Scope": {testScope}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// do sends body (a JSON value, or none when nil) as testAgent with
// testScope plus the kv header pairs.
func (te *testEngine) do(t testing.TB, method, target string, body any, kv ...string) *testAnswer {
	t.Helper()
	hdr := agentHeader(kv...)
	if body == nil {
		return te.serve(t, method, target, hdr, "")
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	hdr.Set("Content-Type", "application/json")
	return te.serve(t, method, target, hdr, string(raw))
}

// withRecordKey gives the configuration a fresh Ed25519 record key
// (record_keys), written under the test's temporary directory.
func withRecordKey(t testing.TB) func(*Config) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "record.key")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *Config) { c.RecordKeys = []string{key} }
}
