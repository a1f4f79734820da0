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
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/testproc"
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
	testproc.DieWithParent(p.cmd)
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

// Kill kills the gateway process (SIGKILL, as a crash would) and waits
// for it to exit.
func (g *Gateway) Kill(t testing.TB) {
	t.Helper()
	_ = g.proc.cmd.Process.Kill()
	select {
	case <-g.proc.done:
	case <-time.After(stopGrace):
		t.Fatalf("the gateway on %s did not exit after SIGKILL", g.Addr)
	}
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

// rcnsDirective finds the rcns directive in a site's block.
var rcnsDirective = regexp.MustCompile(`(?m)^\s*rcns\b`)

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
	// Only a site with an rcns handler gets the native door: the agtp
	// app refuses a handler name no rcns block sets.
	if door == "agtp" && rcnsDirective.MatchString(site) {
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
	if g.AGTPAddr != "" {
		// Caddy starts its apps one after another, in no set order:
		// the HTTP server may answer before the native door listens
		// (TestOAuthKeyRotation's first request over it was once
		// refused so).
		waitListening(t, g.proc, g.AGTPAddr, gatewayStartup)
	}
}

// waitListening polls addr until it accepts a TCP connection, which it
// closes unused (the native door reads no request from it).
func waitListening(t testing.TB, p *proc, addr string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("%s exited before listening on %s (%v); output:\n%s", p.name, addr, p.err, p.tail(logTailLines))
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not listen on %s within %s (last: %v); output:\n%s", p.name, addr, limit, last, p.tail(logTailLines))
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

// caddyRunExit runs `caddy run` on the Caddyfile text from the repo
// root, with its own config and data dirs, for a load that must fail:
// it returns the output and the exit error, and fails the test when
// Caddy is still running after a minute.
func caddyRunExit(t testing.TB, text string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, caddyBin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_DATA_HOME="+filepath.Join(dir, "data"))
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("caddy run did not exit within a minute:\n%s", out)
	}
	return string(out), err
}
