package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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

// notRun are the conformance suite's server scenarios that assume the
// suite's own test server (its tools, prompts and resources by name):
// they test that server's fixtures, not an MCP server, and the door's
// tools are the operator's endpoints and recipes.
var notRun = map[string]string{
	"tools-call-simple-text":        "calls the suite's tool test_simple_text",
	"tools-call-image":              "calls the suite's tool test_image_content",
	"tools-call-audio":              "calls the suite's tool test_audio_content",
	"tools-call-embedded-resource":  "calls the suite's tool test_embedded_resource",
	"tools-call-mixed-content":      "calls the suite's tool test_multiple_content_types",
	"tools-call-with-logging":       "calls the suite's tool test_tool_with_logging",
	"tools-call-error":              "calls the suite's tool test_error_handling",
	"tools-call-with-progress":      "calls the suite's tool test_tool_with_progress",
	"tools-call-sampling":           "calls the suite's tool test_sampling (and needs server-to-client requests)",
	"tools-call-elicitation":        "calls the suite's tool test_elicitation (and needs server-to-client requests)",
	"elicitation-sep1034-defaults":  "calls the suite's elicitation tool",
	"elicitation-sep1330-enums":     "calls the suite's elicitation tool",
	"resources-read-text":           "reads the suite's resource test://static-text",
	"resources-read-binary":         "reads the suite's resource test://static-binary",
	"resources-templates-read":      "reads the suite's resource template",
	"resources-subscribe":           "subscribes to the suite's resource",
	"resources-unsubscribe":         "unsubscribes from the suite's resource",
	"prompts-get-simple":            "gets the suite's prompt test_simple_prompt",
	"prompts-get-with-args":         "gets the suite's prompt test_prompt_with_arguments",
	"prompts-get-embedded-resource": "gets the suite's prompt test_prompt_with_embedded_resource",
	"prompts-get-with-image":        "gets the suite's prompt test_prompt_with_image",
}

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
// port) over a fresh json-server.
func startConformanceGateway(t testing.TB) *Gateway {
	t.Helper()
	js := startJSONServer(t, hotelDB)
	port := freePort(t)
	return startGatewayFile(t, filepath.Join(repoRoot, "integration", "testdata", "mcp", "conformance.Caddyfile"), fmt.Sprintf("127.0.0.1:%d", port), []string{
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("RCNS_PORT=%d", port),
		"HOTEL_ADDR=" + js.Addr,
	})
}

// scenarioLine is one "  - name [versions]" line of `conformance list`.
var scenarioLine = regexp.MustCompile(`^\s+- ([a-z0-9-]+) \[`)

// TestMCPConformance runs every server scenario of the official MCP
// conformance suite that does not assume the suite's own test server,
// each against the door with the expected-failures baseline (a
// scenario in it that passes fails the run, as a failure outside it
// does). Every scenario the suite lists is either run or in notRun.
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
	var run []string
	for _, s := range scenarios {
		if _, skip := notRun[s]; !skip {
			run = append(run, s)
		}
	}
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
