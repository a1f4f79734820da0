package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMCPFrameworksHandTheModelTheResult runs three agent frameworks' MCP
// clients at their default settings against the hotel gateway's MCP door
// (integration/testdata/mcp/frameworks/*.mjs, installed by make deps:
// @ai-sdk/mcp 2.0.99 with ai 7.0.173, @openai/agents 0.20.0,
// @langchain/mcp-adapters 1.1.4 with @langchain/core 1.4.0 and
// @langchain/langgraph 1.7.3). Each script lists the tools, calls
// fetch_guest for g-1 and then with an unknown argument (colour), through
// the framework's own path from tool result to model input, and prints
// the string the model would be handed for each call. The success string
// holds the guest's fields. The bad argument reaches the model as the
// gateway's invalid-input message saying how to fix the call, except
// with LangChain: its DynamicStructuredTool checks the arguments against
// the door's inputSchema itself and the model gets LangChain's own
// "Received tool input did not match expected schema" (the call never
// reaches the gateway); what LangChain hands on from a gateway isError
// result is shown by a call for a guest that does not exist.
func TestMCPFrameworksHandTheModelTheResult(t *testing.T) {
	nm := filepath.Dir(mustTool(t, "node_modules/.bin"))
	bun := mustTool(t, "node_modules/.bin/bun")
	mustTool(t, "node_modules/@ai-sdk/mcp/package.json")
	mustTool(t, "node_modules/@openai/agents/package.json")
	mustTool(t, "node_modules/@langchain/mcp-adapters/package.json")
	w := startHotel(t, hotelOpts{Extra: "\t\tmcp"})
	url := w.GW.URL + "/mcp"
	dir := filepath.Join(repoRoot, "integration", "testdata", "mcp", "frameworks")

	type out struct {
		Error   string
		Tools   []string
		OK      string
		Bad     string
		Missing string
	}
	for _, tc := range []struct {
		name, bin, script string
		// gatewayBad: the bad argument reaches the model as the
		// gateway's own message; otherwise badWant is what the
		// framework says instead.
		gatewayBad bool
		badWant    string
	}{
		// @ai-sdk/mcp and ai declare engines node >= 22: run under bun.
		{name: "ai-sdk", bin: bun, script: "ai-sdk.mjs", gatewayBad: true},
		{name: "openai-agents", bin: "node", script: "openai-agents.mjs", gatewayBad: true},
		{name: "langchain", bin: "node", script: "langchain.mjs", badWant: "Received tool input did not match expected schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			text, code := runTool(t, t.TempDir(), tc.bin, filepath.Join(dir, tc.script), nm, url, agentA1, scopeAll)
			t.Logf("%s ran in %s", tc.script, time.Since(start).Round(time.Millisecond))
			lines := strings.Split(strings.TrimSpace(text), "\n")
			var res out
			if code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &res) != nil || res.Error != "" {
				t.Fatalf("%s (exit %d): %s\n%s", tc.script, code, res.Error, text)
			}
			if !strings.Contains(strings.Join(res.Tools, " "), "fetch_guest") {
				t.Errorf("tools = %v, want fetch_guest among them", res.Tools)
			}
			for _, want := range []string{"Ada Lovelace", "ada@example.com"} {
				if !strings.Contains(res.OK, want) {
					t.Errorf("the success string does not hold %q: %q", want, res.OK)
				}
			}
			if tc.gatewayBad {
				for _, want := range []string{"invalid-input", "Fix the arguments"} {
					if !strings.Contains(res.Bad, want) {
						t.Errorf("the bad-argument string does not hold %q: %q", want, res.Bad)
					}
				}
			} else if !strings.Contains(res.Bad, tc.badWant) || strings.Contains(res.Bad, "Fix the arguments") {
				t.Errorf("the bad-argument string = %q, want the framework's own %q (if it now holds the gateway's message, make gatewayBad true)", res.Bad, tc.badWant)
			}
			if tc.name == "langchain" && (!strings.Contains(res.Missing, "guest_not_found") || !strings.Contains(res.Missing, "returned an error")) {
				t.Errorf("the string for a missing guest = %q, want the gateway's guest_not_found message", res.Missing)
			}
			t.Logf("success: %.160q", res.OK)
			t.Logf("bad argument: %.200q", res.Bad)
		})
	}
}
