package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The newest MCP conformance suite (npm @modelcontextprotocol/conformance
// 0.2.0-alpha.12, which make deps installs into .tools/conformance-next/
// beside the pinned 0.1.16), held to the 2026-07-28 requirement set.

const (
	// mcpRequirements is the spec revision whose requirement set
	// TestMCPConformanceNext runs.
	mcpRequirements = "2026-07-28"
	// mcpNextBaseline is the newest suite's expected-failures file for
	// that revision: the scenarios (or single checks) that run and fail,
	// a reason each.
	mcpNextBaseline = "integration/testdata/mcp/conformance-next-baseline.yml"
)

// notRunNext are the server scenarios of the 2026-07-28 requirement set
// that run but would test nothing: against the door they pass only
// because an answer the door gives to a tool it does not have is among
// the answers they accept. Every other scenario of the set runs; the
// suite's fixture tools a REST gateway can serve are endpoints of the
// conformance gateway (over conformanceFixtures), and the scenarios it
// cannot serve are in conformance-next-baseline.yml, a reason each.
var notRunNext = map[string]string{
	"input-required-result-validate-input": "calls the suite's tool test_input_required_result_elicitation with malformed inputResponses and accepts any error: the door's unknown-tool error passes all three checks without testing them (the tool asks the client for a user_name, which no REST endpoint does)",
}

// requirementLine is one scenario line of `conformance list --server
// --requirements`: "  - name" for a scored scenario, "    - name
// [server]" for one run and reported but not scored.
var requirementLine = regexp.MustCompile(`^\s+- ([a-z0-9-]+)(?: \[server\])?\s*$`)

// TestMCPConformanceNext runs the server scenarios of the newest
// conformance suite's 2026-07-28 requirement set (scored, and the
// extension and pending ones the set runs unscored) but those of
// notRunNext, each against the door with
// conformance-next-baseline.yml (a scenario or check in it that passes
// fails the run, as a failure outside it does). The suite's
// --requirements cannot be combined with --scenario, so each scenario
// runs as that mode runs it: at the revision's wire (--spec-version
// 2026-07-28) and --force. Every scenario the set lists is either run or
// in notRunNext.
func TestMCPConformanceNext(t *testing.T) {
	bun := mustTool(t, "node_modules/.bin/bun")
	suite := mustTool(t, "conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js")
	baseline := filepath.Join(repoRoot, mcpNextBaseline)
	raw, err := os.ReadFile(baseline)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir() // the suite writes its results under the working directory

	out, code := runTool(t, work, bun, suite, "--version")
	if code != 0 || strings.TrimSpace(out) != "0.2.0-alpha.12" {
		t.Fatalf("conformance --version (exit %d): %q, want 0.2.0-alpha.12: run make deps", code, out)
	}
	out, code = runTool(t, work, bun, suite, "list", "--server", "--requirements", mcpRequirements)
	if code != 0 {
		t.Fatalf("conformance list --requirements %s (exit %d):\n%s", mcpRequirements, code, out)
	}
	// Server scenarios only: the list goes on with client scenarios,
	// then the unscored ones of either leg (marked [server] or
	// [client]).
	var scenarios []string
	section := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "Server scenarios"):
			section = "server"
		case strings.HasPrefix(line, "Client scenarios"):
			section = "client"
		case strings.HasPrefix(line, "Run and reported"):
			section = "unscored"
		}
		m := requirementLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if section == "server" || section == "unscored" && strings.HasSuffix(strings.TrimSpace(line), "[server]") {
			scenarios = append(scenarios, m[1])
		}
	}
	for _, must := range []string{"server-stateless", "tools-list", "resources-list", "dns-rebinding-protection", "caching"} {
		if !slices.Contains(scenarios, must) {
			t.Fatalf("the %s requirement set does not list %s; it lists %v", mcpRequirements, must, scenarios)
		}
	}
	for s := range notRunNext {
		if !slices.Contains(scenarios, s) {
			t.Errorf("notRunNext names %s, which the %s requirement set does not list", s, mcpRequirements)
		}
	}
	var run []string
	for _, s := range scenarios {
		if _, skip := notRunNext[s]; !skip {
			run = append(run, s)
		}
	}
	// Entries are "- scenario" or "- scenario:check-id".
	expected := map[string][]string{} // scenario → its entries
	for _, entry := range regexp.MustCompile(`(?m)^\s+- (([a-z0-9-]+)(?::[A-Za-z0-9_.-]+)?)\s*$`).FindAllStringSubmatch(string(raw), -1) {
		if !slices.Contains(run, entry[2]) {
			t.Errorf("%s lists %s, which this test does not run", mcpNextBaseline, entry[1])
		}
		expected[entry[2]] = append(expected[entry[2]], entry[1])
	}
	if t.Failed() {
		return
	}

	g := startConformanceGateway(t)
	wantConformanceFixtures(t, g)
	for _, s := range run {
		t.Run(s, func(t *testing.T) {
			out, code := runTool(t, work, bun, suite, "server", "--url", g.URL+"/mcp", "--scenario", s,
				"--spec-version", mcpRequirements, "--force", "--expected-failures", baseline)
			if code != 0 {
				t.Fatalf("conformance server --scenario %s --spec-version %s --force (exit %d):\n%s", s, mcpRequirements, code, out)
			}
			// The suite flags a listed check that passes, not one that
			// no longer exists: each entry must be reported as an
			// expected failure ("  ~ entry").
			for _, e := range expected[s] {
				if !regexp.MustCompile(`(?m)^\s+~ ` + regexp.QuoteMeta(e) + `\s*$`).MatchString(out) {
					t.Errorf("%s lists %s, which the suite did not report as an expected failure:\n%s", mcpNextBaseline, e, out)
				}
			}
			t.Logf("%s", lastLines(out, 3))
		})
	}
}
