package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mccutchen/go-httpbin/v2/httpbin"
)

// JSONServer is a json-server 0.17.4 process serving a private copy of a db file.
type JSONServer struct {
	URL    string // http://127.0.0.1:PORT
	Addr   string // 127.0.0.1:PORT
	DBPath string
	proc   *proc
}

// startJSONServer copies dbTemplate (absolute, or relative to the repo
// root) into t.TempDir() and serves it on a free loopback port.
func startJSONServer(t testing.TB, dbTemplate string) *JSONServer {
	t.Helper()
	if !filepath.IsAbs(dbTemplate) {
		dbTemplate = filepath.Join(repoRoot, dbTemplate)
	}
	data, err := os.ReadFile(dbTemplate)
	if err != nil {
		t.Fatalf("read db template: %v", err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "db.json")
	if err := os.WriteFile(db, data, 0o644); err != nil {
		t.Fatalf("write db copy: %v", err)
	}
	port := freePort(t)
	s := &JSONServer{
		Addr:   fmt.Sprintf("127.0.0.1:%d", port),
		DBPath: db,
	}
	s.URL = "http://" + s.Addr
	s.proc = startProc(t, "json-server", dir, nil, jsonServerBin,
		"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--quiet", db)
	waitHTTP(t, s.proc, s.URL+"/db", jsonServerStartup)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("json-server output:\n%s", s.proc.tail(50))
		}
	})
	return s
}

// Get performs a plain GET directly against json-server.
func (s *JSONServer) Get(t testing.TB, path string) (int, http.Header, []byte) {
	t.Helper()
	return plainRequest(t, http.MethodGet, s.URL+path, nil, nil)
}

// Reservations reads the reservations collection over HTTP.
func (s *JSONServer) Reservations(t testing.TB) []map[string]any {
	t.Helper()
	status, _, body := s.Get(t, "/reservations")
	if status != http.StatusOK {
		t.Fatalf("GET /reservations on json-server: %d %s", status, body)
	}
	var out []map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("GET /reservations on json-server: %v: %s", err, body)
	}
	return out
}

// plainRequest sends an ordinary HTTP request (no AGTP headers unless given).
func plainRequest(t testing.TB, method, url string, hdr map[string]string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for k, v := range hdr {
		req.Header[k] = []string{v}
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// testClient never follows redirects, never asks for compression (so the
// test sees the bytes on the wire) and bounds every request.
var testClient = &http.Client{
	Timeout: requestTimeout,
	Transport: &http.Transport{
		Proxy:              nil,
		DisableCompression: true,
		MaxIdleConns:       16,
		IdleConnTimeout:    5 * time.Second,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// ---------------------------------------------------------------------------
// In-process upstreams

// serve runs h on a fresh 127.0.0.1 listener until cleanup.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// startHTTPBin serves go-httpbin in process and returns its base URL.
func startHTTPBin(t testing.TB) string {
	t.Helper()
	return serve(t, httpbin.New(httpbin.WithMaxDuration(10*time.Second)).Handler())
}

// Barrier is a test upstream that answers a request only once n requests
// are in flight at the same time; a request that waits longer than
// barrierWait is answered 504. Steps that really run in parallel pass;
// sequential steps cannot.
type Barrier struct {
	URL      string
	n        int
	mu       sync.Mutex
	inflight int
	released bool
	release  chan struct{}
	total    int
	timeouts int
}

func startBarrier(t testing.TB, n int) *Barrier {
	t.Helper()
	b := &Barrier{n: n, release: make(chan struct{})}
	b.URL = serve(t, http.HandlerFunc(b.serveHTTP))
	return b
}

func (b *Barrier) serveHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.total++
	b.inflight++
	if b.inflight >= b.n && !b.released {
		b.released = true
		close(b.release)
	}
	b.mu.Unlock()

	timer := time.NewTimer(barrierWait)
	defer timer.Stop()
	select {
	case <-b.release:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "path": r.URL.Path})
	case <-timer.C:
		b.mu.Lock()
		b.inflight--
		b.timeouts++
		seen := b.inflight + 1
		b.mu.Unlock()
		writeJSON(w, http.StatusGatewayTimeout, map[string]any{
			"ok":    false,
			"path":  r.URL.Path,
			"error": fmt.Sprintf("barrier timed out after %s: %d of %d requests in flight", barrierWait, seen, b.n),
		})
	case <-r.Context().Done():
		b.mu.Lock()
		b.inflight--
		b.mu.Unlock()
	}
}

// Count returns how many requests reached the barrier.
func (b *Barrier) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Timeouts returns how many requests gave up waiting.
func (b *Barrier) Timeouts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.timeouts
}

// CounterRequest is one request seen by a Counter.
type CounterRequest struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// Counter is a test upstream that counts calls and records what it saw. A
// plain counter answers {"ok":true,"path":...,"count":N}; a counting proxy
// forwards to another upstream after recording.
type Counter struct {
	URL  string
	mu   sync.Mutex
	reqs []CounterRequest
	next http.Handler
	// slow, when set, is how long a counting proxy holds the answer to
	// a request it matches, after the upstream answered (the write is
	// done; the caller waits): a slow step a test can kill a node in.
	slow     time.Duration
	slowWhat func(r *http.Request) bool
}

// SlowAfter makes the counting proxy hold, for d, its answer to each
// request match accepts (after the upstream answered); d 0 stops it.
func (c *Counter) SlowAfter(d time.Duration, match func(r *http.Request) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slow, c.slowWhat = d, match
}

// startCounter starts a counting upstream that answers by itself.
func startCounter(t testing.TB) *Counter {
	t.Helper()
	c := &Counter{}
	c.URL = serve(t, http.HandlerFunc(c.serveHTTP))
	return c
}

// startCountingProxy starts a counting upstream that forwards every
// request to target (e.g. json-server).
func startCountingProxy(t testing.TB, target string) *Counter {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("counting proxy target: %v", err)
	}
	c := &Counter{next: httputil.NewSingleHostReverseProxy(u)}
	c.URL = serve(t, http.HandlerFunc(c.serveHTTP))
	return c
}

func (c *Counter) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body.Close()
	c.mu.Lock()
	c.reqs = append(c.reqs, CounterRequest{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body,
	})
	n := len(c.reqs)
	slow := c.slow
	if slow > 0 && !c.slowWhat(r) {
		slow = 0
	}
	c.mu.Unlock()
	if c.next != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if slow > 0 {
			rec := httptest.NewRecorder()
			c.next.ServeHTTP(rec, r)
			time.Sleep(slow)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		c.next.ServeHTTP(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "path": r.URL.Path, "count": n})
}

// Count returns how many requests reached the counter.
func (c *Counter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

// Requests returns a copy of what the counter saw.
func (c *Counter) Requests() []CounterRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]CounterRequest(nil), c.reqs...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// ---------------------------------------------------------------------------
// The gateway (Caddy with the rcns module)
