package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMCPAuthDiscoveryStaysOffTheLegacyAPI runs the MCP TypeScript
// SDK's client with an OAuth provider (as mcp-remote and desktop hosts
// do) against the demo's MCP door without identity headers: the 401
// starts the SDK's authorization discovery, which the gateway answers
// itself (the protected-resource metadata, then 501
// no-authorization-server at the origin's authorization-server
// metadata), so the SDK stops before it registers a client, and the
// legacy API behind the gateway sees no request at all.
func TestMCPAuthDiscoveryStaysOffTheLegacyAPI(t *testing.T) {
	sdk := filepath.Dir(mustTool(t, "node_modules/@modelcontextprotocol/sdk/package.json"))
	// The legacy API: the hotel's json-server (404 on paths it does not
	// have, as the APIs of issue 29 did), behind a counter.
	legacy := startCountingProxy(t, startJSONServer(t, hotelDB).URL)
	site := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	g := startGatewayFile(t, filepath.Join(repoRoot, "Caddyfile.example"), site, []string{
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		"RCNS_PORT=" + strings.TrimPrefix(site, "127.0.0.1:"),
		"HOTEL_ADDR=" + strings.TrimPrefix(legacy.URL, "http://"),
	})
	script := filepath.Join(repoRoot, "integration", "testdata", "mcp", "auth-discovery.mjs")
	out, code := runTool(t, t.TempDir(), "node", script, sdk, g.URL+"/mcp")
	if code != 0 {
		t.Fatalf("auth-discovery.mjs (exit %d):\n%s", code, out)
	}
	var res struct {
		Requests         []string        `json:"requests"`
		Error            string          `json:"error"`
		AuthorizationURL *string         `json:"authorizationURL"`
		Registered       json.RawMessage `json:"registered"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("auth-discovery.mjs output: %v\n%s", err, out)
	}
	t.Logf("the SDK sent:\n  %s\nand stopped with: %s", strings.Join(res.Requests, "\n  "), res.Error)
	for _, want := range []string{
		"POST " + g.URL + "/mcp",
		"GET " + g.URL + "/.well-known/oauth-protected-resource/mcp",
		"GET " + g.URL + "/.well-known/oauth-authorization-server",
	} {
		if !slices.Contains(res.Requests, want) {
			t.Errorf("the SDK did not send %s", want)
		}
	}
	for _, r := range res.Requests {
		for _, p := range []string{"/register", "/authorize", "/token"} {
			if strings.HasSuffix(r, g.URL+p) {
				t.Errorf("the SDK went on to %s", r)
			}
		}
	}
	if !strings.Contains(res.Error, "HTTP 501") {
		t.Errorf("connect failed with %q, want the SDK's HTTP 501 on the authorization-server metadata", res.Error)
	}
	if res.AuthorizationURL != nil || (len(res.Registered) > 0 && string(res.Registered) != "null") {
		t.Errorf("the SDK got as far as authorizing (%v) or registering (%s)", res.AuthorizationURL, res.Registered)
	}
	if n := legacy.Count(); n != 0 {
		t.Fatalf("the legacy API saw %d requests: %+v", n, legacy.Requests())
	}
}

// TestMCPTypeScriptBadArgumentThenPreview: the MCP TypeScript SDK's
// client gets a bad argument back as a tool result with isError, the
// reason and how to fix it (not a JSON-RPC error it would throw), then
// books through the confirm-first preview: the 461 preview ran nothing,
// the confirmation with its synthesis_id booked once.
func TestMCPTypeScriptBadArgumentThenPreview(t *testing.T) {
	sdk := filepath.Dir(mustTool(t, "node_modules/@modelcontextprotocol/sdk/package.json"))
	w := startHotel(t, hotelOpts{Extra: "\t\tmcp"})
	script := filepath.Join(repoRoot, "integration", "testdata", "mcp", "ts-preview.mjs")
	args, err := json.Marshal(bookArgs())
	if err != nil {
		t.Fatal(err)
	}
	out, code := runTool(t, t.TempDir(), "node", script, sdk, w.GW.URL+"/mcp", agentA1, scopeAll, string(args))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	type result struct {
		IsError    bool           `json:"isError"`
		Structured map[string]any `json:"structured"`
		Text       string         `json:"text"`
	}
	var res struct {
		Error                   string
		Bad, Preview, Confirmed result
	}
	if code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &res) != nil || res.Error != "" {
		t.Fatalf("ts-preview.mjs (exit %d): %s\n%s", code, res.Error, out)
	}
	if !res.Bad.IsError || str(res.Bad.Structured, "error", "code") != "invalid-input" || !strings.Contains(res.Bad.Text, "Fix the arguments") {
		t.Errorf("bad argument: %+v, want an isError result invalid-input saying how to fix it", res.Bad)
	}
	if res.Preview.IsError || str(res.Preview.Structured, "outcome") != "preview" || res.Preview.Structured["status"] != float64(461) {
		t.Fatalf("first book-room: %+v, want the 461 preview", res.Preview)
	}
	if res.Confirmed.IsError || str(res.Confirmed.Structured, "outcome") != "succeeded" ||
		str(res.Confirmed.Structured, "synthesis_id") != str(res.Preview.Structured, "synthesis_id") {
		t.Fatalf("confirmation: %+v, want success under the previewed contract", res.Confirmed)
	}
	if !strings.Contains(res.Confirmed.Text, `"reservation_id"`) {
		t.Errorf("the confirmation's text does not hold the result: %q", res.Confirmed.Text)
	}
	w.assertReservations(t, 1)
}
