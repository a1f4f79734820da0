package caddymodule

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
	docs := filepath.Join("..", "scripts", "bench", "docs")
	dir := tb.TempDir()
	h := &Handler{}
	h.Name = fmt.Sprintf("bench-%s-%v", strings.ReplaceAll(tb.Name(), "/", "-"), signed)
	h.ServerID = "rcns-bench"
	h.Identity = "header"
	h.Enabled = true
	h.Mode = "optimistic"
	h.ContractTTL = caddy.Duration(30 * time.Second)
	h.TombstoneTTL = caddy.Duration(30 * time.Second)
	h.MaxContracts = 10_000_000
	h.MaxContractsPerAgent = 10_000_000
	h.RateLimitPerMinute = 1e8
	h.RateLimitBurst = 100_000_000
	h.Upstreams = map[string]*UpstreamConfig{"bench": {URL: upstream}}
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
	ctx := benchContext(tb)
	if err := h.Provision(ctx); err != nil {
		tb.Fatalf("Provision: %v", err)
	}
	// Caddy's default logger writes INFO lines to stderr; keep the
	// encoding, drop the output.
	h.eng.logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	if err := h.Validate(); err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	tb.Cleanup(func() { _ = h.Cleanup() })
	return h
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
	start := cpuTime()
	i := 0
	for b.Loop() {
		i++
		fn(i)
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mwFunc adapts a function to caddyhttp.MiddlewareHandler.
type mwFunc func(http.ResponseWriter, *http.Request, caddyhttp.Handler) error

func (f mwFunc) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	return f(w, r, next)
}

// BenchmarkAttribution is the Attribution-Record of one contract
// answer as the handler builds it (payload appended by hand in
// encoding/json's key order, request_hash of a 30-byte body, chain
// append, JWS), unsigned and Ed25519.
func BenchmarkAttribution(b *testing.B) {
	up := benchUpstream(b)
	for _, signed := range []bool{false, true} {
		name := "none"
		if signed {
			name = "ed25519"
		}
		b.Run(name, func(b *testing.B) {
			h := benchHandler(b, up.URL, signed)
			h.eng.activate() // what the first request does: opens the record chains
			body := []byte(`{"parameters":{"item_id":"1"}}`)
			r := httptest.NewRequest("LOOKUP", "/item/d-1", bytes.NewReader(body))
			x := &exchange{h: h.eng, in: &agtp.Request{Method: r.Method, Target: r.RequestURI, ContentLength: r.ContentLength}, bodyRead: true, rawBody: body, agentID: benchAgent, method: "LOOKUP", ownerID: "bench-ops", requestID: newUUID(),
				contract: idempotency.ContractRef{SynthesisID: "syn-UAnHZX7sOG7zkqfyKqWafw", NegotiationOrigin: "rcns-gate",
					ContractHash: "b514591affe87603c866d338581f7f760e9fade9d9b6de220051aa808cf915d3"}}
			resp := newUUID()
			b.ReportAllocs()
			for b.Loop() {
				rec, id := x.attribution(200, resp)
				if rec == "" || id == "" {
					b.Fatal("empty Attribution-Record")
				}
			}
		})
	}
}

// BenchmarkContractAnswer is the 263 body of a one-step synthesis as
// the handler writes it: the canonical endpoint bytes spliced in, the
// other members and the result encoded around them.
func BenchmarkContractAnswer(b *testing.B) {
	up := benchUpstream(b)
	h := benchHandler(b, up.URL, false)
	var r *recipes.Recipe
	for _, rc := range h.eng.set.Recipes {
		if rc.Name == "lookup-item" {
			r = rc
		}
	}
	if r == nil {
		b.Fatal("no lookup-item recipe")
	}
	hash, ep, err := r.ContractHashFor("LOOKUP", "/item/g-1-1")
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	c := &recipes.Contract{SynthesisID: recipes.NewSynthesisID(), Method: "LOOKUP", Path: "/item/g-1-1", Recipe: r, EndpointJSON: ep,
		Lineage: r.Lineage(), ContractHash: hash, NegotiationOrigin: recipes.OriginGate, IssuedAt: now, ExpiresAt: now.Add(30 * time.Second)}
	result := map[string]any{"item": map[string]any{"id": "1", "name": "bench item", "price": 12.5}}
	b.ReportAllocs()
	for b.Loop() {
		body := contractBody(c)
		body.Members["status"] = 263
		body.Members["result"] = result
		raw, err := body.Encode()
		if err != nil || len(raw) == 0 {
			b.Fatal(err)
		}
	}
}

// BenchmarkMetricsPresentation is the metrics of one contract
// presentation (request, presentation, composition, step and upstream
// call), from every core at once as under load: resolved is the handler's
// path (children resolved once: presented, recipeRun, the request
// counter's last code); with-label-values is the path it replaced,
// WithLabelValues on every observation (kept here only as the baseline).
func BenchmarkMetricsPresentation(b *testing.B) {
	m, err := newMetrics(nil, []string{"LOOKUP"})
	if err != nil {
		b.Fatal(err)
	}
	r := &recipes.Recipe{Name: "lookup-item"}
	reports := []recipes.StepReport{{Name: "item", Upstream: "bench", State: recipes.StepSucceeded, Called: true, Duration: time.Millisecond}}
	b.Run("resolved", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.recipeRun(r, 0.001, reports)
				m.presentation(viaSynthesisID, "executed")
				m.request("LOOKUP", 200, "http")
			}
		})
	})
	b.Run("with-label-values", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.compositionSeconds.WithLabelValues(r.Name).Observe(0.001)
				m.stepSeconds.WithLabelValues(r.Name, reports[0].Name).Observe(0.001)
				m.upstreamSeconds.WithLabelValues(reports[0].Upstream).Observe(0.001)
				m.presentations.WithLabelValues(presentationVia.label(viaSynthesisID), presentationOutcomes.label("executed")).Inc()
				m.requests.WithLabelValues(m.methodSeries("LOOKUP")[0].label, codeLabel(200), "http").Inc()
			}
		})
	})
}
