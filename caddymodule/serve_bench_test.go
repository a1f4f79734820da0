package caddymodule

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/internal/cputime"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// The serve benchmarks run the whole handler in process, request by
// request, against a real upstream on 127.0.0.1 (the same fixed JSON
// item the load comparison's upstream serves), with the load test's
// documents (scripts/bench/docs) and its gateway settings. They give the
// gateway's own cost per load scenario of make bench (scripts/bench/loadcmp) in ns/op and
// allocs/op, next to Caddy's reverse_proxy over the same upstream
// (BenchmarkServe/b-reverse_proxy), without the load generator and the
// upstream competing for the same cores.

const benchAgent = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"

// benchUpstream serves GET /items/{id} like scripts/bench/upstream.
func benchUpstream(tb testing.TB) *httptest.Server {
	tb.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"id": r.PathValue("id"), "name": "bench item", "price": 12.5})
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})
	return loopbackServer(tb, mux)
}

// loopbackServer serves h on 127.0.0.1 (never the wildcard address)
// until the test ends.
func loopbackServer(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := httptest.NewUnstartedServer(h)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv.Listener = l
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// benchHandler provisions the gateway as scripts/bench/Caddyfile does
// (signed: with an Ed25519 record key).
func benchHandler(tb testing.TB, upstream string, signed bool) *Handler {
	tb.Helper()
	return benchHandlerWith(tb, upstream, signed, "", "")
}

// benchHandlerWith is benchHandler with one more endpoints directory
// and one more recipes directory ("" for none), each adjust applied to
// the configuration before Provision.
func benchHandlerWith(tb testing.TB, upstream string, signed bool, endpoints, recipes string, adjust ...func(*Handler)) *Handler {
	tb.Helper()
	return provisionIn(tb, benchContext(tb), benchConfig(tb, upstream, signed, endpoints, recipes, adjust...))
}

// benchConfig is benchHandlerWith's configuration, not provisioned.
func benchConfig(tb testing.TB, upstream string, signed bool, endpoints, recipes string, adjust ...func(*Handler)) *Handler {
	tb.Helper()
	docs := filepath.Join("..", "scripts", "bench", "docs")
	dir := tb.TempDir()
	h := &Handler{}
	h.Name = fmt.Sprintf("bench-%s-%v", strings.ReplaceAll(tb.Name(), "/", "-"), signed)
	h.ServerID = "rcns-bench"
	h.Identity = "header"
	h.Enabled = true
	h.Mode = "optimistic"
	h.ContractTTL = engine.Duration(30 * time.Second)
	h.TombstoneTTL = engine.Duration(30 * time.Second)
	h.MaxContracts = 10_000_000
	h.MaxContractsPerAgent = 10_000_000
	h.RateLimitPerMinute = 1e8
	h.RateLimitBurst = 100_000_000
	// Keyed runs mint a fresh Idempotency-Key per request: room for any
	// -benchtime, so no run ends in idempotency-store-full (503).
	h.IdempotencyMaxRecords = 10_000_000
	h.IdempotencyMaxPerAgent = 10_000_000
	h.Upstreams = map[string]*engine.UpstreamConfig{"bench": {URL: upstream}}
	h.Agents = []string{filepath.Join(docs, "agents")}
	h.Endpoints = []string{filepath.Join(docs, "endpoints")}
	h.Recipes = []string{filepath.Join(docs, "recipes")}
	h.RecordsDir = filepath.Join(dir, "records")
	h.Fsync = "off"
	if endpoints != "" {
		h.Endpoints = append(h.Endpoints, endpoints)
	}
	if recipes != "" {
		h.Recipes = append(h.Recipes, recipes)
	}
	if signed {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			tb.Fatal(err)
		}
		key := filepath.Join(dir, "record.key")
		if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			tb.Fatal(err)
		}
		h.RecordKeys = []string{key}
	}
	for _, f := range adjust {
		f(h)
	}
	return h
}

// provisionIn provisions h in ctx, as one handler of the configuration
// load ctx is (handlers provisioned in one ctx are one load's), and
// cleans it up at the end of the test.
func provisionIn(tb testing.TB, ctx caddy.Context, h *Handler) *Handler {
	tb.Helper()
	// Caddy's default logger writes INFO lines to stderr; keep the
	// encoding, drop the output (setLogCore swaps it for a test that
	// reads the lines).
	swapLogger(tb, h)
	forgetOtherRuns(tb, h)
	registries.Store(h, ctx.GetMetricsRegistry())
	tb.Cleanup(func() { registries.Delete(h) })
	if err := h.Provision(ctx); err != nil {
		tb.Fatalf("Provision: %v", err)
	}
	if err := h.Validate(); err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	tb.Cleanup(func() { _ = h.Cleanup() })
	return h
}

// testRuns holds, per top-level test and run-id file, that the test
// has used that Redis deployment (forgetOtherRuns).
var testRuns sync.Map

// forgetOtherRuns removes, the first time a test provisions a gateway
// on a Redis deployment, the run ids an earlier test of this process
// left for the same address: tests take free ports, and a port reused
// by another test's redis-server, a different run started seconds ago,
// is what a restart looks like (redisstore's quarantine), so that
// test's first keyed request was refused 503 when the ports met (CI:
// TestRedisCompleteLost). Within one test the file is kept: a gateway
// made after a restart in the same test sees it as a node would.
func forgetOtherRuns(tb testing.TB, h *Handler) {
	if h.Store != StoreRedis || h.Redis == nil {
		return
	}
	file := runIDFile(h.Redis.clientConfig(caddy.NewReplacer(), 0))
	top, _, _ := strings.Cut(tb.Name(), "/")
	if _, seen := testRuns.LoadOrStore(top+"\x00"+file, true); !seen {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			tb.Fatalf("removing the run-id file of an earlier test: %v", err)
		}
	}
}

// benchContext is a caddy.Context over an empty config (admin off),
// as Caddy gives a handler at provisioning.
func benchContext(tb testing.TB) caddy.Context {
	tb.Helper()
	ctx, err := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
	if err != nil {
		tb.Fatalf("ProvisionContext: %v", err)
	}
	c, cancel := caddy.NewContext(ctx)
	tb.Cleanup(cancel)
	return c
}

// discardWriter is a reusable http.ResponseWriter that keeps the status
// and drops the body.
type discardWriter struct {
	hdr    http.Header
	status int
	head   []byte // the first 512 bytes of the body, for failure messages
}

func (w *discardWriter) Header() http.Header { return w.hdr }
func (w *discardWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	if len(w.head) < 512 {
		w.head = append(w.head, p[:min(len(p), 512-len(w.head))]...)
	}
	return len(p), nil
}

// benchRequest builds one request as the Caddy server hands it to a
// handler (replacer and vars in the context), from 127.0.0.1.
func benchRequest(w http.ResponseWriter, method, path, body string, hdr map[string]string) *http.Request {
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
	}
	r.Host = "127.0.0.1"
	r.RemoteAddr = "127.0.0.1:40000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, benchLocalAddr))
	return caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, benchServer)
}

// serveOnce runs one request through h (next: the given handler) and
// fails the benchmark on an unexpected status.
func serveOnce(b *testing.B, h caddyhttp.MiddlewareHandler, next caddyhttp.Handler, method, path, body string, hdr map[string]string, want int) *discardWriter {
	w := &discardWriter{hdr: http.Header{}}
	r := benchRequest(w, method, path, body, hdr)
	if err := h.ServeHTTP(w, r, next); err != nil {
		b.Fatalf("%s %s: %v", method, path, err)
	}
	if w.status != want {
		b.Fatalf("%s %s: status %d, want %d: %s", method, path, w.status, want, w.head)
	}
	return w
}

// benchLocalAddr is the listener address the request arrived on.
var benchLocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}

// benchServer is the *caddyhttp.Server handlers find in the request context.
var benchServer = &caddyhttp.Server{}

var notFound = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	w.WriteHeader(http.StatusNotFound)
	return nil
})

// BenchmarkServe gives, per load scenario of make bench (scripts/bench/loadcmp), the cost of
// one request through the handler in process (ns/op, B/op, allocs/op),
// upstream round trip over loopback included:
//
//	b-reverse_proxy    Caddy's reverse_proxy, GET /items/1 (the baseline)
//	c-tierB            FETCH /items/1 → GET /items/1
//	d-present          LOOKUP /item/… presenting a one-step contract
//	f-refusal          LOOKUP /nothing with Allow-RCNS → 464
//	g-synthesis        LOOKUP /item/<fresh> with Allow-RCNS → 263
//
// each without a record key (/nokey) and with an Ed25519 key (/ed25519).
func BenchmarkServe(b *testing.B) {
	up := benchUpstream(b)
	host := strings.TrimPrefix(up.URL, "http://")

	b.Run("b-reverse_proxy", func(b *testing.B) {
		ctx := benchContext(b)
		rp := &reverseproxy.Handler{Upstreams: reverseproxy.UpstreamPool{{Dial: host}}}
		if err := rp.Provision(ctx); err != nil {
			b.Fatalf("reverse_proxy Provision: %v", err)
		}
		defer func() { _ = rp.Cleanup() }()
		wrap := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return rp.ServeHTTP(w, r, notFound) })
		passthrough := mwFunc(func(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
			return next.ServeHTTP(w, r)
		})
		loop(b, func(int) { serveOnce(b, passthrough, wrap, http.MethodGet, "/items/1", "", nil, 200) })
	})

	runs := 0
	for _, signed := range []bool{false, true} {
		variant := "nokey"
		if signed {
			variant = "ed25519"
		}
		h := benchHandler(b, up.URL, signed)
		read := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"}
		readJSON := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read", "Content-Type": "application/json"}
		negotiate := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true", "Content-Type": "application/json"}
		const one = `{"parameters":{"item_id":"1"}}`

		b.Run("c-tierB/"+variant, func(b *testing.B) {
			loop(b, func(int) { serveOnce(b, h, notFound, "FETCH", "/items/1", "", read, 200) })
		})
		b.Run("d-present/"+variant, func(b *testing.B) {
			runs++
			path := "/item/d-" + variant + "-" + strconv.Itoa(runs)
			w := serveOnce(b, h, notFound, "LOOKUP", path, one, negotiate, 263)
			hdr := map[string]string{"Contract-Synthesized": w.hdr.Get("Contract-Synthesized")}
			for k, v := range readJSON {
				hdr[k] = v
			}
			loop(b, func(int) { serveOnce(b, h, notFound, "LOOKUP", path, one, hdr, 200) })
		})
		// e: a repeat of the pair by an agent that keeps sending
		// Allow-RCNS (it cannot know the pair is served): Tier C by pair,
		// the gate's work for a miss not done.
		b.Run("e-pair/"+variant, func(b *testing.B) {
			runs++
			path := "/item/e-" + variant + "-" + strconv.Itoa(runs)
			serveOnce(b, h, notFound, "LOOKUP", path, one, negotiate, 263)
			loop(b, func(int) { serveOnce(b, h, notFound, "LOOKUP", path, one, negotiate, 200) })
		})
		b.Run("f-refusal/"+variant, func(b *testing.B) {
			hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Allow-RCNS": "true"}
			loop(b, func(int) { serveOnce(b, h, notFound, "LOOKUP", "/nothing", "", hdr, 464) })
		})
		b.Run("g-synthesis/"+variant, func(b *testing.B) {
			runs++
			prefix := "/item/g-" + variant + "-" + strconv.Itoa(runs) + "-"
			loop(b, func(i int) { serveOnce(b, h, notFound, "LOOKUP", prefix+strconv.Itoa(i), one, negotiate, 263) })
		})
	}
}

// loop runs fn b.N times and reports, next to the wall time, the
// process's CPU time per request (cpu-ns/op: user+system from
// getrusage, the in-process upstream included), the steadier number on
// a shared machine.
func loop(b *testing.B, fn func(i int)) {
	b.ReportAllocs()
	start := cputime.Process()
	i := 0
	for b.Loop() {
		i++
		fn(i)
	}
	b.ReportMetric(float64(cputime.Process()-start)/float64(b.N), "cpu-ns/op")
}

// mwFunc adapts a function to caddyhttp.MiddlewareHandler.
type mwFunc func(http.ResponseWriter, *http.Request, caddyhttp.Handler) error

func (f mwFunc) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	return f(w, r, next)
}
