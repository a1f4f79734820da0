package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/testproc"
)

// MCP clients that are not the Go SDK, under identity oauth: the MCP
// Inspector CLI with a bearer token as a header, and mcp-remote (the
// stdio bridge MCP hosts such as Claude Desktop run) walking the whole
// OAuth flow against the demo (make demo, RCNS_DEMO_IDENTITY=oauth).
// Both are door-independent: they run the same under RCNS_IT_DOOR=agtp.

// TestMCPInspectorCLIOAuth: the MCP Inspector CLI lists the demo's tools
// with nothing but "Authorization: Bearer <token>" (a client_credentials
// token of the test authorization server for the gateway's resource);
// without the header it fails with the door's 401.
func TestMCPInspectorCLIOAuth(t *testing.T) {
	cli := mustTool(t, "node_modules/@modelcontextprotocol/inspector-cli/build/index.js")
	w := startOAuthWorld(t, oauthOpts{})
	tok := w.token(t, cidA1, "", demoScopes...)
	dir := filepath.Dir(cli) // the CLI reads its package.json relative to the working directory
	base := []string{cli, w.GW.URL + "/mcp", "--transport", "http", "--method", "tools/list"}

	out, code := runTool(t, dir, "node", append(base, "--header", "Authorization: Bearer "+tok)...)
	if code != 0 {
		t.Fatalf("inspector tools/list with a bearer token (exit %d):\n%s", code, out)
	}
	for _, tool := range []string{"book-room", "fetch_guest", "fetch_property", "reserve_reservations", "discover_contracts"} {
		if !strings.Contains(out, `"name": "`+tool+`"`) {
			t.Errorf("inspector tools/list with a bearer token lacks %s:\n%s", tool, out)
		}
	}

	out, code = runTool(t, dir, "node", base...)
	t.Logf("inspector tools/list without a token (exit %d): %s", code, lastLines(out, 3))
	if code == 0 || !strings.Contains(out, `"status":401`) || !strings.Contains(out, `"reason":"agent-unauthenticated"`) {
		t.Fatalf("inspector tools/list without a token: exit %d, want a failure with the door's 401 agent-unauthenticated:\n%s", code, out)
	}
	if strings.Contains(out, `"name": "fetch_guest"`) {
		t.Errorf("inspector tools/list without a token listed tools:\n%s", out)
	}
	if n := w.Hotel.Count(); n != 0 {
		t.Errorf("the hotel upstream saw %d requests", n)
	}
	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("the legacy API saw %d requests: %+v", n, w.Legacy.Requests())
	}
}

const (
	// demoReady bounds scripts/demo.sh until it prints "Press Ctrl-C":
	// it builds bin/caddy and bin/rcns-agent first (seconds with a warm
	// build cache, minutes on a cold one).
	demoReady = 5 * time.Minute
	// mcpRemoteTimeout bounds mcp-remote's whole run: the OAuth flow, then
	// initialize and tools/list over stdio.
	mcpRemoteTimeout = 90 * time.Second
)

// groupProc is a process started in its own process group, so that the
// group (a script's children included) can be stopped at once.
type groupProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func startGroup(t testing.TB, cmd *exec.Cmd) *groupProc {
	t.Helper()
	p := &groupProc{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p.out
	}
	cmd.Stderr = p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	testproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop sends SIGTERM to the group, then SIGKILL after stopGrace, and
// checks that no process of the group is left.
func (p *groupProc) stop(t testing.TB) {
	pg := p.cmd.Process.Pid
	_ = syscall.Kill(-pg, syscall.SIGTERM)
	deadline := time.Now().Add(2 * stopGrace)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
		default:
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err := syscall.Kill(-pg, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pg, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
	}
	time.Sleep(100 * time.Millisecond)
	if err := syscall.Kill(-pg, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d (%s) is still alive after SIGKILL", pg, filepath.Base(p.cmd.Path))
	}
}

func (p *groupProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startOAuthDemo runs scripts/demo.sh with RCNS_DEMO_IDENTITY=oauth on
// free ports (its work folder under a temporary TMPDIR, kept for the
// test, its records under a temporary XDG_DATA_HOME) until it is ready;
// it returns the process, the gateway's origin and the work folder.
func startOAuthDemo(t testing.TB) (*groupProc, string, string) {
	t.Helper()
	tmp, data := t.TempDir(), t.TempDir()
	gwPort := freePort(t)
	cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "demo.sh"))
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(),
		"RCNS_DEMO_IDENTITY=oauth",
		fmt.Sprintf("RCNS_DEMO_PORT=%d", gwPort),
		fmt.Sprintf("HOTEL_PORT=%d", freePort(t)),
		fmt.Sprintf("RCNS_ADMIN_PORT=%d", freePort(t)),
		fmt.Sprintf("RCNS_DEMO_AGTP_PORT=%d", freePort(t)),
		fmt.Sprintf("RCNS_DEMO_OAUTH_PORT=%d", freePort(t)),
		"DEMO_MAX_SECONDS=600",
		"KEEP_DEMO_WORK=1",
		"TMPDIR="+tmp,
		"XDG_DATA_HOME="+data,
	)
	p := startGroup(t, cmd)
	deadline := time.Now().Add(demoReady)
	for !strings.Contains(p.out.String(), "Press Ctrl-C to stop") {
		if p.exited() {
			t.Fatalf("scripts/demo.sh exited before it was ready:\n%s", p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("scripts/demo.sh was not ready within %s:\n%s", demoReady, p.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	works, _ := filepath.Glob(filepath.Join(tmp, "rcns-demo.*"))
	if len(works) != 1 {
		t.Fatalf("the demo's work folder under %s: %v", tmp, works)
	}
	return p, fmt.Sprintf("http://127.0.0.1:%d", gwPort), works[0]
}

// fakeBrowser writes an executable that plays the user's browser: it
// follows the URL it is given with curl (a cookie jar, redirects
// followed), so the demo's authorization server, which signs alice in
// and consents at once, redirects it to mcp-remote's callback with the
// code. Each run appends the URL, then curl's last status and URL, to
// the returned log.
func fakeBrowser(t testing.TB) (dir, log string) {
	t.Helper()
	dir = t.TempDir()
	log = filepath.Join(dir, "browser.log")
	script := fmt.Sprintf(`#!/bin/sh
echo "open $1" >>%[1]q
exec curl -sS -L --max-time 20 -c %[2]q -b %[2]q -o /dev/null -w 'done %%{http_code} %%{url_effective}\n' "$1" >>%[1]q 2>&1
`, log, filepath.Join(dir, "cookies"))
	if err := os.WriteFile(filepath.Join(dir, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, log
}

// rpcLines reads JSON-RPC messages, one a line, from r into a channel.
func rpcLines(r io.Reader) <-chan map[string]any {
	ch := make(chan map[string]any, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				ch <- m
			}
		}
	}()
	return ch
}

// TestMCPRemoteOAuthDemo: mcp-remote, with nothing but the demo's MCP URL,
// completes its OAuth flow against the real demo (scripts/demo.sh,
// RCNS_DEMO_IDENTITY=oauth): 401 and the protected-resource metadata,
// the authorization server's metadata, dynamic registration, the
// authorization URL opened in the "browser" (the test plays the user:
// the fake xdg-open follows it to mcp-remote's callback), the code
// exchanged for a token; then initialize and tools/list over its stdio
// list the demo's tools. The hotel API, the legacy API behind the
// gateway's reverse_proxy, sees no request meanwhile (its request log,
// json-server.log, gains no line).
func TestMCPRemoteOAuthDemo(t *testing.T) {
	proxy := mustTool(t, "node_modules/mcp-remote/dist/proxy.js")
	mustTool(t, "node_modules/oidc-provider/package.json")
	mustTool(t, "node_modules/.bin/json-server")
	_, gw, work := startOAuthDemo(t)
	jsLog := filepath.Join(work, "json-server.log")
	before, err := os.ReadFile(jsLog)
	if err != nil {
		t.Fatal(err)
	}

	browserDir, browserLog := fakeBrowser(t)
	cfgDir := t.TempDir()
	callback := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), mcpRemoteTimeout)
	defer cancel()
	cmd := exec.Command("node", proxy, gw+"/mcp", strconv.Itoa(callback), "--host", "127.0.0.1", "--debug")
	cmd.Dir = cfgDir
	// The open package runs its own bundled xdg-open, which (with no
	// desktop session) runs $BROWSER; a system xdg-open found on PATH
	// is the fake too.
	env := []string{"PATH=" + browserDir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"BROWSER=" + filepath.Join(browserDir, "xdg-open"), "MCP_REMOTE_CONFIG_DIR=" + cfgDir}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "BROWSER", "MCP_REMOTE_CONFIG_DIR", "DISPLAY", "WAYLAND_DISPLAY", "XDG_CURRENT_DESKTOP",
			"XDG_SESSION_DESKTOP", "DESKTOP_SESSION", "KDE_FULL_SESSION", "GNOME_DESKTOP_SESSION_ID":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p := startGroup(t, cmd)
	msgs := rpcLines(stdout)
	diag := func() string {
		b, _ := os.ReadFile(browserLog)
		return fmt.Sprintf("mcp-remote's stderr:\n%s\nthe browser:\n%s", p.out.String(), b)
	}
	send := func(m map[string]any) {
		t.Helper()
		if _, err := stdin.Write(append(mustJSON(t, m), '\n')); err != nil {
			t.Fatalf("write to mcp-remote: %v\n%s", err, diag())
		}
	}
	await := func(id float64) map[string]any {
		t.Helper()
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("mcp-remote closed its stdout before answering %v\n%s", id, diag())
				}
				if m["id"] == id {
					return m
				}
			case <-ctx.Done():
				t.Fatalf("no answer to %v from mcp-remote within %s\n%s", id, mcpRemoteTimeout, diag())
			}
		}
	}

	send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "rcns-it", "version": "1"}}})
	initRes := await(1)
	if initRes["error"] != nil || initRes["result"] == nil {
		t.Fatalf("initialize through mcp-remote: %v\n%s", initRes, diag())
	}
	send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	send(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": map[string]any{}})
	list := await(2)
	t.Logf("mcp-remote: the OAuth flow, initialize and tools/list took %s", time.Since(start).Round(time.Millisecond))
	res, _ := list["result"].(map[string]any)
	tools, _ := res["tools"].([]any)
	var names []string
	for _, tl := range tools {
		if m, ok := tl.(map[string]any); ok {
			names = append(names, str(m, "name"))
		}
	}
	t.Logf("tools through mcp-remote: %v", names)
	for _, want := range []string{"book-room", "fetch_guest", "fetch_property", "reserve_reservations", "discover_contracts"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("tools/list through mcp-remote lacks %s: %v (%v)", want, names, list)
		}
	}

	// The user's part happened: the authorization URL was opened and
	// the browser ended at mcp-remote's callback.
	b, _ := os.ReadFile(browserLog)
	if !strings.Contains(string(b), "open ") || !strings.Contains(string(b), "code_challenge_method=S256") ||
		!strings.Contains(string(b), fmt.Sprintf("done 200 http://127.0.0.1:%d/oauth/callback?code=", callback)) {
		t.Errorf("the browser did not go from the authorization URL (PKCE) to the callback with a code:\n%s", b)
	}
	t.Logf("the browser ended at: %s", lastLines(string(b), 1))
	// mcp-remote registered dynamically and holds the token.
	var client, tokens bool
	_ = filepath.WalkDir(cfgDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			client = client || strings.HasSuffix(path, "_client_info.json")
			tokens = tokens || strings.HasSuffix(path, "_tokens.json")
		}
		return nil
	})
	if !client || !tokens {
		t.Errorf("mcp-remote's config dir lacks client info (%v) or tokens (%v)\n%s", client, tokens, diag())
	}

	// Nothing reached the legacy API (the hotel json-server, which
	// logs each request): no /.well-known/*, no /register, no line at all.
	_ = stdin.Close()
	after, err := os.ReadFile(jsLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(after), string(before)) {
		t.Fatalf("json-server.log was rewritten:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if added := strings.TrimSpace(string(after[len(before):])); added != "" {
		t.Errorf("the legacy API (json-server) saw requests during mcp-remote's flow:\n%s", added)
	}
	if !strings.Contains(string(before), "GET /db") {
		t.Errorf("json-server.log does not log requests (the demo's readiness check, GET /db, is missing):\n%s", before)
	}
}
