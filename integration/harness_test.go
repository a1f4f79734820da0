// Package integration holds the black-box tests of caddy-rcns: they build
// the real Caddy binary (cmd/caddy), start real upstreams (json-server as
// the stateful legacy hotel API, go-httpbin for delays and failures, and
// small in-process test upstreams) on loopback ports, and speak AGTP over
// the socket. The package never imports caddymodule, policy or recipes.
//
// Run with `make integration` (or `go test -race -count=1 -p 1
// ./integration/...` after `make deps`). Environment knobs:
//
//	RCNS_IT_CADDY=/path/to/caddy  use this binary instead of building one
//	RCNS_IT_RACE=1                build the Caddy binary with -race
package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/mccutchen/go-httpbin/v2/httpbin"
)

// Bounds used by every wait in the harness.
const (
	buildTimeout      = 15 * time.Minute
	jsonServerStartup = 30 * time.Second
	gatewayStartup    = 20 * time.Second
	validateTimeout   = 60 * time.Second
	stopGrace         = 5 * time.Second
	requestTimeout    = 30 * time.Second
	barrierWait       = 5 * time.Second
	logTailLines      = 300
)

var (
	repoRoot      string // absolute path of the module root
	caddyBin      string // the Caddy binary under test
	jsonServerBin string // <repo>/.tools/node_modules/.bin/json-server
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := findRepoRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: cannot find the repository root: %v\n", err)
		return 1
	}
	repoRoot = root

	jsonServerBin = filepath.Join(repoRoot, ".tools", "node_modules", ".bin", "json-server")
	if _, err := os.Stat(jsonServerBin); err != nil {
		fmt.Fprintf(os.Stderr, "integration: json-server not found at %s\n"+
			"integration: run `make deps` (npm install --prefix .tools json-server@0.17.4) first\n", jsonServerBin)
		return 1
	}

	tmp, err := os.MkdirTemp("", "rcns-integration-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)

	if bin := os.Getenv("RCNS_IT_CADDY"); bin != "" {
		caddyBin = bin
	} else {
		caddyBin = filepath.Join(tmp, "caddy")
		args := []string{"build", "-o", caddyBin}
		if os.Getenv("RCNS_IT_RACE") == "1" {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/caddy")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "integration: go %s failed: %v\n%s\n", strings.Join(args, " "), err, out)
			return 1
		}
	}
	return m.Run()
}

// findRepoRoot asks `go env GOMOD` for the module root and falls back to
// walking up from the working directory.
func findRepoRoot() (string, error) {
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		gomod := strings.TrimSpace(string(out))
		if gomod != "" && gomod != os.DevNull {
			return filepath.Dir(gomod), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for i := 0; i < 10; i++ {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		dir = filepath.Dir(dir)
	}
	return "", fmt.Errorf("no go.mod above the working directory")
}

// freePort returns a loopback TCP port that was free a moment ago.
// It never returns a port twice in one test binary: Caddy binds with
// SO_REUSEPORT, so two of its listeners given one port would both bind
// and share the connections.
func freePort(t testing.TB) int {
	t.Helper()
	givenPorts.Lock()
	defer givenPorts.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !givenPorts.m[port] {
			givenPorts.m[port] = true
			return port
		}
	}
}

// givenPorts are the ports freePort has returned.
var givenPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// ---------------------------------------------------------------------------
// Child processes

// syncBuffer collects a child's output; safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a child process started by a test and stopped on cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // set before done is closed
}

// startProc starts name with args in dir (env appended to the test's own
// environment). Output goes to an in-memory buffer. The process is stopped
// on cleanup (SIGINT, then SIGKILL after stopGrace) and dies with the test
// binary (Pdeathsig).
func startProc(t testing.TB, name, dir string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(stopGrace):
	}
}

// tail returns the last n lines of the process output.
func (p *proc) tail(n int) string {
	lines := strings.Split(p.out.String(), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines cut)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// waitHTTP polls url with GET until it answers 2xx, the process exits, or
// limit passes.
func waitHTTP(t testing.TB, p *proc, url string, limit time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("%s exited before answering %s (%v); output:\n%s", p.name, url, p.err, p.tail(logTailLines))
		}
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer %s within %s (last: %s); output:\n%s", p.name, url, limit, last, p.tail(logTailLines))
}

// ---------------------------------------------------------------------------
// json-server: the legacy hotel API

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
	c.mu.Unlock()
	if c.next != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
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

// caddyfileTemplate is what every test gateway runs: an admin endpoint and
// one plain-HTTP site on free loopback ports. {{SITE}} is the body of the
// site block, which the tests write (see helpers_test.go for the rcns
// blocks they use).
const caddyfileTemplate = `{
	admin 127.0.0.1:{{ADMIN_PORT}}
	persist_config off
{{AGTP}}}

http://127.0.0.1:{{SITE_PORT}} {
	bind 127.0.0.1
	log {
		output stderr
	}
{{SITE}}
}
`

// Gateway is a running `caddy run` process.
type Gateway struct {
	URL  string // http://127.0.0.1:SITE_PORT
	Addr string // 127.0.0.1:SITE_PORT
	// AGTPAddr is the native AGTP/1.0 listener (127.0.0.1:AGTP_PORT,
	// plain text) when the suite runs over the native door
	// (RCNS_IT_DOOR=agtp); "" otherwise.
	AGTPAddr   string
	AdminURL   string
	Caddyfile  string // the text it runs
	ConfigPath string
	proc       *proc
}

// fill replaces {{KEY}} placeholders; kv is KEY, value, KEY, value...
func fill(s string, kv ...string) string {
	if len(kv)%2 != 0 {
		panic("fill: odd number of arguments")
	}
	for i := 0; i < len(kv); i += 2 {
		s = strings.ReplaceAll(s, "{{"+kv[i]+"}}", kv[i+1])
	}
	return s
}

// suiteDoor is the door the suite's AGTP requests (Gateway.Do) go
// through: "http" (the HTTP binding, the default) or "agtp" (the native
// AGTP/1.0 listener every test gateway then also opens), from
// RCNS_IT_DOOR. `make integration` runs the suite once per door.
var suiteDoor = func() string {
	if d := os.Getenv("RCNS_IT_DOOR"); d != "" {
		return d
	}
	return "http"
}()

// rcnsName is the rcns handler name a site's block sets (`name X`),
// "default" when it sets none.
var rcnsName = regexp.MustCompile(`(?m)^\s*name\s+(\S+)\s*$`)

// renderCaddyfile puts site into caddyfileTemplate with fresh ports.
// Over the native door (suiteDoor "agtp") the global options also open
// the agtp listener of the site's rcns handler on agtpPort.
func renderCaddyfile(t testing.TB, site string) (text string, sitePort, adminPort int) {
	text, sitePort, adminPort, _ = renderCaddyfileDoor(t, site, suiteDoor)
	return text, sitePort, adminPort
}

func renderCaddyfileDoor(t testing.TB, site, door string) (text string, sitePort, adminPort, agtpPort int) {
	t.Helper()
	sitePort, adminPort = freePort(t), freePort(t)
	agtpOpt := ""
	if door == "agtp" {
		agtpPort = freePort(t)
		name := "default"
		if m := rcnsName.FindStringSubmatch(site); m != nil {
			name = m[1]
		}
		agtpOpt = fmt.Sprintf("\tagtp 127.0.0.1:%d {\n\t\thandler %s\n\t}\n", agtpPort, name)
	}
	text = fill(caddyfileTemplate,
		"ADMIN_PORT", strconv.Itoa(adminPort),
		"SITE_PORT", strconv.Itoa(sitePort),
		"AGTP", agtpOpt,
		"SITE", site)
	if i := strings.Index(text, "{{"); i >= 0 {
		t.Fatalf("unfilled placeholder in Caddyfile near %q:\n%s", text[i:min(len(text), i+40)], text)
	}
	return text, sitePort, adminPort, agtpPort
}

// startGateway writes the site (the body of the site block, placeholders
// already filled) into the harness template, runs `caddy run` from the
// repo root and waits until the site answers.
func startGateway(t testing.TB, site string) *Gateway {
	t.Helper()
	return startGatewayEnv(t, site, nil)
}

// startGatewayEnv is startGateway with extra environment variables.
func startGatewayEnv(t testing.TB, site string, env []string) *Gateway {
	t.Helper()
	return startGatewayDoor(t, site, env, suiteDoor)
}

// startGatewayDoor is startGatewayEnv with the door Do uses: "agtp"
// opens the native listener and sends Do's requests over it, "http"
// sends them over the HTTP binding.
func startGatewayDoor(t testing.TB, site string, env []string, door string) *Gateway {
	t.Helper()
	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, site, door)
	return launchTextEnv(t, text, sitePort, adminPort, agtpPort, env)
}

// launchText runs a rendered Caddyfile (renderCaddyfileDoor's, possibly
// edited) whose site, admin and native ports are given (agtpPort 0: no
// native door).
func launchText(t testing.TB, text string, sitePort, adminPort, agtpPort int) *Gateway {
	t.Helper()
	return launchTextEnv(t, text, sitePort, adminPort, agtpPort, nil)
}

func launchTextEnv(t testing.TB, text string, sitePort, adminPort, agtpPort int, env []string) *Gateway {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatalf("write Caddyfile: %v", err)
	}
	g := &Gateway{
		Addr:       fmt.Sprintf("127.0.0.1:%d", sitePort),
		AdminURL:   fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		Caddyfile:  text,
		ConfigPath: path,
	}
	if agtpPort != 0 {
		g.AGTPAddr = fmt.Sprintf("127.0.0.1:%d", agtpPort)
	}
	g.URL = "http://" + g.Addr
	g.launch(t, dir, env)
	return g
}

// startGatewayFile runs an existing Caddyfile (e.g. Caddyfile.example)
// whose site listens on siteAddr (host:port); env sets its placeholders.
func startGatewayFile(t testing.TB, path, siteAddr string, env []string) *Gateway {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	g := &Gateway{Addr: siteAddr, URL: "http://" + siteAddr, Caddyfile: string(text), ConfigPath: path}
	// A file that opens the native door (Caddyfile.example: agtp on
	// RCNS_AGTP_PORT) gets a free port for it, which Do uses when the
	// suite runs over the native door, unless env sets its own.
	agtpPort := 0
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RCNS_AGTP_PORT="); ok {
			agtpPort, _ = strconv.Atoi(v)
		}
	}
	if agtpPort == 0 {
		agtpPort = freePort(t)
	}
	if suiteDoor == "agtp" && strings.Contains(string(text), "{$RCNS_AGTP_PORT") {
		g.AGTPAddr = fmt.Sprintf("127.0.0.1:%d", agtpPort)
	}
	env = append([]string{fmt.Sprintf("RCNS_AGTP_PORT=%d", agtpPort)}, env...)
	g.launch(t, t.TempDir(), env)
	return g
}

func (g *Gateway) launch(t testing.TB, stateDir string, env []string) {
	t.Helper()
	env = append([]string{
		"XDG_CONFIG_HOME=" + filepath.Join(stateDir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(stateDir, "data"),
	}, env...)
	g.proc = startProc(t, "caddy", repoRoot, env, caddyBin,
		"run", "--config", g.ConfigPath, "--adapter", "caddyfile")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Caddyfile %s:\n%s", g.ConfigPath, g.Caddyfile)
			t.Logf("caddy output (tail):\n%s", g.proc.tail(logTailLines))
		}
	})
	waitServing(t, g.proc, g.Addr, gatewayStartup)
}

// waitServing polls addr with `OPTIONS *` until the HTTP server answers.
// Go's net/http answers that request itself, so the probe reaches no
// handler: no legacy upstream call, no access log line, no AGTP state.
// Caddy binds its listeners only after every module is provisioned, so an
// answer means the configuration is loaded.
func waitServing(t testing.TB, p *proc, addr string, limit time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("%s exited before serving %s (%v); output:\n%s", p.name, addr, p.err, p.tail(logTailLines))
		}
		req := &http.Request{Method: http.MethodOptions, URL: &url.URL{Scheme: "http", Host: addr, Opaque: "*"},
			Host: addr, Header: http.Header{}}
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return
		}
		last = err.Error()
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not serve %s within %s (last: %s); output:\n%s", p.name, addr, limit, last, p.tail(logTailLines))
}

// Output returns everything the Caddy process printed so far.
func (g *Gateway) Output() string { return g.proc.out.String() }

// caddyValidate runs `caddy validate` on the site in the harness template.
func caddyValidate(t testing.TB, site string) (string, error) {
	t.Helper()
	return caddyValidateEnv(t, site, nil)
}

// caddyValidateEnv is caddyValidate with extra environment variables.
func caddyValidateEnv(t testing.TB, site string, env []string) (string, error) {
	t.Helper()
	text, _, _ := renderCaddyfile(t, site)
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatalf("write Caddyfile: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), validateTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, caddyBin, "validate", "--config", path, "--adapter", "caddyfile")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(dir, "data"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("caddy validate did not finish within %s:\n%s", validateTimeout, out)
	}
	return string(out), err
}

// ---------------------------------------------------------------------------
// AGTP client

// Resp is one response as the test saw it on the wire.
type Resp struct {
	Method           string
	Path             string
	Status           int
	Header           http.Header
	Body             []byte
	TransferEncoding []string
	// Reason is the status line's reason phrase of a native AGTP/1.0
	// answer ("" over HTTP).
	Reason string
}

// Do sends one request to the gateway. hdr keys are sent exactly as
// spelled (Agent-ID, not Agent-Id). body: nil sends no body; a string or
// []byte is sent raw; anything else is JSON-encoded. A body without a
// Content-Type in hdr gets application/json.
func (g *Gateway) Do(t testing.TB, method, path string, hdr map[string]string, body any) *Resp {
	t.Helper()
	return g.do(t, method, path, hdr, body, g.AGTPAddr != "")
}

// DoHTTP is Do over the HTTP door whatever the suite's door: for what
// only HTTP carries (the MCP transport, HTTP's access log).
func (g *Gateway) DoHTTP(t testing.TB, method, path string, hdr map[string]string, body any) *Resp {
	t.Helper()
	return g.do(t, method, path, hdr, body, false)
}

func (g *Gateway) do(t testing.TB, method, path string, hdr map[string]string, body any, native bool) *Resp {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatalf("encode body: %v", err)
		}
	}
	if native && agtpRequest(method, hdr) {
		return g.doNative(t, method, path, hdr, raw)
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		t.Fatalf("new request %s %s: %v", method, path, err)
	}
	for k, v := range hdr {
		req.Header[k] = []string{v}
	}
	if raw != nil && req.Header.Get("Content-Type") == "" {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return &Resp{Method: method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: b,
		TransferEncoding: resp.TransferEncoding}
}

// ianaMethods are HTTP's registered methods: without Agent-ID such a
// request is legacy HTTP, which only the HTTP door carries (it passes
// through to the legacy API).
var ianaMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "CONNECT": true,
	"OPTIONS": true, "TRACE": true, "PATCH": true, "QUERY": true, "PROPFIND": true, "SEARCH": true, "PURGE": true}

// agtpRequest reports whether Do's request is an AGTP one (it carries
// Agent-ID, or its method is not HTTP's): only those go over the native
// door when the suite runs there.
func agtpRequest(method string, hdr map[string]string) bool {
	for k := range hdr {
		if strings.EqualFold(k, "Agent-ID") {
			return true
		}
	}
	return !ianaMethods[method]
}

// doNative is Do over the native AGTP/1.0 listener: the request line
// `AGTP/1.0 METHOD PATH`, the header fields as spelled, Host,
// Content-Type (application/json with a body, as Do) and Content-Length,
// written as given (no client-side check, so a test can send what a
// server must refuse), on a fresh connection; the answer read with the
// codec. A reason phrase is kept in Resp.Reason.
func (g *Gateway) doNative(t testing.TB, method, path string, hdr map[string]string, raw []byte) *Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("%s %s: dial %s: %v", method, path, g.AGTPAddr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	var b bytes.Buffer
	fmt.Fprintf(&b, "AGTP/1.0 %s %s\r\nHost: %s\r\n", method, path, g.AGTPAddr)
	hasCT := false
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		hasCT = hasCT || strings.EqualFold(k, "Content-Type")
	}
	if raw != nil && !hasCT {
		b.WriteString("Content-Type: application/json\r\n")
	}
	if raw != nil {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(raw))
	}
	b.WriteString("\r\n")
	b.Write(raw)
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatalf("%s %s: write: %v", method, path, err)
	}
	resp, err := wire.ReadResponse(bufio.NewReader(c), wire.Limits{MaxHeaderBytes: 1 << 20}, 64<<20)
	if err != nil {
		t.Fatalf("%s %s over agtp: %v", method, path, err)
	}
	return &Resp{Method: method, Path: path, Status: resp.Status, Header: resp.Header, Body: resp.Body, Reason: resp.Reason}
}

// Raw writes rawRequest (a complete HTTP/1.1 request, CRLF line ends) to a
// fresh connection and reads one response. Use it for request lines a Go
// client refuses to send (e.g. a '#' in the target).
func (g *Gateway) Raw(t testing.TB, rawRequest string) *Resp {
	t.Helper()
	r, _ := rawExchange(t, g.Addr, rawRequest)
	return r
}

// String renders the response for failure messages (body cut at 4 KiB).
func (r *Resp) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s -> %d\n", r.Method, r.Path, r.Status)
	for k, v := range r.Header {
		fmt.Fprintf(&sb, "  %s: %s\n", k, strings.Join(v, ", "))
	}
	body := string(r.Body)
	if len(body) > 4096 {
		body = body[:4096] + "…"
	}
	sb.WriteString(body)
	return sb.String()
}

// JSON decodes the body as a JSON object; nil when it is not one.
func (r *Resp) JSON() map[string]any {
	var m map[string]any
	if json.Unmarshal(r.Body, &m) != nil {
		return nil
	}
	return m
}

// JSONArray decodes the body as a JSON array; nil when it is not one.
func (r *Resp) JSONArray() []any {
	var a []any
	if json.Unmarshal(r.Body, &a) != nil {
		return nil
	}
	return a
}

// Object is JSON that fails the test when the body is not a JSON object.
func (r *Resp) Object(t testing.TB) map[string]any {
	t.Helper()
	m := r.JSON()
	if m == nil {
		t.Fatalf("body is not a JSON object:\n%s", r)
	}
	return m
}

// Array is JSONArray that fails the test when the body is not a JSON array.
func (r *Resp) Array(t testing.TB) []any {
	t.Helper()
	a := r.JSONArray()
	if a == nil {
		t.Fatalf("body is not a JSON array:\n%s", r)
	}
	return a
}
