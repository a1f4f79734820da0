package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Clients of the MCP door that are not the go-sdk, installed by `make
// deps` into .tools/: the official MCP conformance suite (run by bun,
// since it needs a newer Node than the machine's) and the MCP Inspector
// CLI.

const (
	mcpClientTimeout = 2 * time.Minute
	// mcpBaseline is the conformance suite's expected-failures file:
	// the scenarios that run but do not apply to the door, a reason
	// each.
	mcpBaseline = "integration/testdata/mcp/conformance-baseline.yml"
)

// mustTool returns the path of a tool make deps installs, failing the
// test when it is missing.
func mustTool(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(repoRoot, ".tools", rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing (%v): run make deps", p, err)
	}
	return p
}

// runTool runs a command (bounded by mcpClientTimeout) and returns its
// combined output and exit code.
func runTool(t testing.TB, dir, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mcpClientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %s:\n%s", filepath.Base(bin), args, mcpClientTimeout, out)
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v", bin, args, err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}

// startConformanceGateway runs integration/testdata/mcp/conformance.Caddyfile
// (the hotel demo with the MCP door, test_agent on, every Host of its
// port) over a fresh json-server and the conformance fixture API.
func startConformanceGateway(t testing.TB) *Gateway {
	t.Helper()
	js := startJSONServer(t, hotelDB)
	fx := httptest.NewServer(conformanceFixtures())
	t.Cleanup(fx.Close)
	port := freePort(t)
	return startGatewayFile(t, filepath.Join(repoRoot, "integration", "testdata", "mcp", "conformance.Caddyfile"), fmt.Sprintf("127.0.0.1:%d", port), []string{
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("RCNS_PORT=%d", port),
		"HOTEL_ADDR=" + js.Addr,
		"CONFORMANCE_ADDR=" + strings.TrimPrefix(fx.URL, "http://"),
	})
}

// conformanceFixtures is the fixture API behind the conformance
// gateway's conformance upstream: the REST answers from which the
// endpoints of integration/testdata/mcp/conformance serve the suite's
// fixture tools (their names and results as the suite's reference
// server has them, in the suite's scenario descriptions):
//
//	GET /simple-text     200 {"text": "This is a simple text response for testing."} (test_simple_text)
//	GET /error-handling  500 {"error": "This tool intentionally returns an error for testing"} (test_error_handling)
//	GET /greet?name=N    200 {"greeting": "Hello, N!"} (greet, of the tasks-extension scenarios)
//
// Anything else is 404.
func conformanceFixtures() http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, status int, body any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
	mux.HandleFunc("GET /simple-text", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, map[string]string{"text": "This is a simple text response for testing."})
	})
	mux.HandleFunc("GET /error-handling", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusInternalServerError, map[string]string{"error": "This tool intentionally returns an error for testing"})
	})
	mux.HandleFunc("GET /greet", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, map[string]string{"greeting": "Hello, " + r.URL.Query().Get("name") + "!"})
	})
	// slow_compute's two steps: min(seconds, 1) seconds, then the rest.
	seconds := func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("seconds"))
		return min(max(n, 0), 60)
	}
	mux.HandleFunc("GET /slow-compute/start", func(w http.ResponseWriter, r *http.Request) {
		n := seconds(r)
		sleepCtx(r.Context(), time.Duration(min(n, 1))*time.Second)
		answer(w, http.StatusOK, map[string]any{"started": true, "seconds": n})
	})
	mux.HandleFunc("GET /slow-compute/finish", func(w http.ResponseWriter, r *http.Request) {
		n := seconds(r)
		sleepCtx(r.Context(), time.Duration(max(n-1, 0))*time.Second)
		answer(w, http.StatusOK, map[string]any{"result": fmt.Sprintf("computed after %d seconds", n), "label": r.URL.Query().Get("label"), "seconds": n})
	})
	mux.HandleFunc("GET /failing-job", func(w http.ResponseWriter, r *http.Request) {
		sleepCtx(r.Context(), time.Second)
		answer(w, http.StatusInternalServerError, map[string]string{"error": "This job always fails"})
	})
	return mux
}

// sleepCtx waits d or until ctx ends, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// wantConformanceFixtures checks that the fixture tools the suite's
// scenarios pass with are real endpoint calls, not refusals that happen
// to satisfy a scenario: test_simple_text and greet succeed with the
// fixture API's answer, test_error_handling fails as upstream_error
// (the fixture's 500), the task tools' recipes run through their steps
// (slow_compute with seconds 0 succeeds with the fixture's result,
// failing_job fails as composition_failed), each with the result in its
// text.
func wantConformanceFixtures(t *testing.T, g *Gateway) {
	t.Helper()
	for _, c := range []struct {
		tool, args, outcome, want string
	}{
		{"test_simple_text", `{}`, "succeeded", `"text":"This is a simple text response for testing."`},
		{"greet", `{"name":"World"}`, "succeeded", `"greeting":"Hello, World!"`},
		{"test_error_handling", `{}`, "failed", `"code":"upstream_error"`},
		{"slow_compute", `{"seconds":0,"label":"fixture"}`, "succeeded", `"result":"computed after 0 seconds"`},
		{"failing_job", `{}`, "failed", `"code":"composition_failed"`},
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + c.tool + `","arguments":` + c.args + `}}`
		r := mcpRaw(t, g, "/mcp", body, map[string]string{"MCP-Protocol-Version": "2025-11-25"})
		var msg struct {
			Result struct {
				IsError bool `json:"isError"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
				StructuredContent map[string]any `json:"structuredContent"`
			} `json:"result"`
		}
		if r.Status != 200 || json.Unmarshal(r.Body, &msg) != nil || len(msg.Result.Content) == 0 {
			t.Errorf("tools/call %s: %d %s", c.tool, r.Status, r.Body)
			continue
		}
		res := msg.Result
		if res.StructuredContent["outcome"] != c.outcome || res.IsError != (c.outcome == "failed") ||
			!strings.Contains(res.Content[0].Text, c.want) {
			t.Errorf("tools/call %s: want outcome %s and %s in the text, got isError %v: %s", c.tool, c.outcome, c.want, res.IsError, r.Body)
		}
	}
}

// scenarioLine is one "  - name [versions]" line of `conformance list`.
var scenarioLine = regexp.MustCompile(`^\s+- ([a-z0-9-]+) \[`)

// TestMCPConformance runs every server scenario of the official MCP
// conformance suite 0.1.16, each against the door with the
// expected-failures baseline (a scenario in it that passes fails the
// run, as a failure outside it does). The suite's fixture tools that a
// REST gateway can serve are endpoints of the conformance gateway over
// conformanceFixtures; the scenarios it cannot serve are in the
// baseline, a reason each. The door does not matter to it: it runs in
// the HTTP door's pass only.
func TestMCPConformance(t *testing.T) {
	bun := mustTool(t, "node_modules/.bin/bun")
	suite := mustTool(t, "node_modules/@modelcontextprotocol/conformance/dist/index.js")
	baseline := filepath.Join(repoRoot, mcpBaseline)
	raw, err := os.ReadFile(baseline)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir() // the suite writes its results under the working directory

	out, code := runTool(t, work, bun, suite, "list", "--server")
	if code != 0 {
		t.Fatalf("conformance list (exit %d):\n%s", code, out)
	}
	var scenarios []string
	for _, line := range strings.Split(out, "\n") {
		if m := scenarioLine.FindStringSubmatch(line); m != nil {
			scenarios = append(scenarios, m[1])
		}
	}
	for _, must := range []string{"server-initialize", "ping", "tools-list", "json-schema-2020-12", "dns-rebinding-protection"} {
		if !slices.Contains(scenarios, must) {
			t.Fatalf("the suite does not list %s; it lists %v", must, scenarios)
		}
	}
	run := scenarios
	for _, entry := range regexp.MustCompile(`(?m)^\s+- ([a-z0-9-]+)\s*$`).FindAllStringSubmatch(string(raw), -1) {
		if !slices.Contains(run, entry[1]) {
			t.Errorf("%s lists %s, which this test does not run", mcpBaseline, entry[1])
		}
	}

	g := startConformanceGateway(t)
	for _, s := range run {
		t.Run(s, func(t *testing.T) {
			out, code := runTool(t, work, bun, suite, "server", "--url", g.URL+"/mcp", "--scenario", s, "--expected-failures", baseline)
			if code != 0 {
				t.Fatalf("conformance server --scenario %s (exit %d):\n%s", s, code, out)
			}
			t.Logf("%s", lastLines(out, 3))
		})
	}

	wantConformanceFixtures(t, g)

	// The rebinding refusal is the door's AGTP answer.
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	r := g.Raw(t, "POST /mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: "+fmt.Sprint(len(list))+"\r\nConnection: close\r\n\r\n"+list)
	assertErrorBody(t, r, 403, "host-refused")
}

// lastLines is the last n non-empty lines of s.
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestMCPInspectorCLI: the MCP Inspector CLI lists and calls the demo's
// tools on the demo's Caddyfile (Caddyfile.example), with Agent-ID and
// Authority-Scope as headers, as docs/agent-guide.md shows.
func TestMCPInspectorCLI(t *testing.T) {
	cli := mustTool(t, "node_modules/@modelcontextprotocol/inspector-cli/build/index.js")
	js := startJSONServer(t, hotelDB)
	site := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	g := startGatewayFile(t, filepath.Join(repoRoot, "Caddyfile.example"), site, []string{
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		"RCNS_PORT=" + strings.TrimPrefix(site, "127.0.0.1:"),
		"HOTEL_ADDR=" + js.Addr,
	})
	// The CLI reads its own package.json relative to the working
	// directory: run it from its build directory.
	dir := filepath.Dir(cli)
	base := []string{cli, g.URL + "/mcp", "--transport", "http", "--header", "Agent-ID: " + agentA1, "--header", "Authority-Scope: " + scopeAll}

	out, code := runTool(t, dir, "node", append(base, "--method", "tools/list")...)
	if code != 0 {
		t.Fatalf("inspector tools/list (exit %d):\n%s", code, out)
	}
	for _, tool := range []string{"book-room", "fetch_guest", "fetch_property", "reserve_reservations", "discover_contracts"} {
		if !strings.Contains(out, `"name": "`+tool+`"`) {
			t.Errorf("inspector tools/list lacks %s:\n%s", tool, out)
		}
	}
	out, code = runTool(t, dir, "node", append(base, "--method", "tools/call", "--tool-name", "fetch_guest", "--tool-arg", "guest_id=g-1")...)
	if code != 0 || !strings.Contains(out, `"name": "Ada Lovelace"`) || !strings.Contains(out, `"outcome": "succeeded"`) {
		t.Fatalf("inspector tools/call fetch_guest (exit %d):\n%s", code, out)
	}
	// The demo runs optimistic: book-room synthesizes and runs.
	out, code = runTool(t, dir, "node", append(base, "--method", "tools/call", "--tool-name", "book-room",
		"--tool-arg", "guest_id=g-1", "property_id=p-1", "check_in=2026-12-01", "nights=2")...)
	if code != 0 || !strings.Contains(out, `"status": 263`) {
		t.Fatalf("inspector tools/call book-room (exit %d):\n%s", code, out)
	}
	if rs := js.Reservations(t); len(rs) != 1 {
		t.Fatalf("reservations after the Inspector's book-room: %v", rs)
	}
}
