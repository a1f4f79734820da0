package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAccessLogJoins runs Caddyfile.example and reads its log: every
// access line of an AGTP request (HTTP door, native door, MCP door)
// carries the request id the engine's own lines about it carry, a
// refusal's line names its reason (one the native codec refused
// included), an MCP tools/call line names the
// tool, and the documented filter drops the Attribution-Record value.
func TestAccessLogJoins(t *testing.T) {
	js := startJSONServer(t, hotelDB)
	site := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	agtpPort := freePort(t)
	g := startGatewayFile(t, filepath.Join(repoRoot, "Caddyfile.example"), site, []string{
		fmt.Sprintf("RCNS_AGTP_PORT=%d", agtpPort),
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		"RCNS_PORT=" + strings.TrimPrefix(site, "127.0.0.1:"),
		"HOTEL_ADDR=" + js.Addr,
	})

	// A synthesis: the engine logs "rcns contract synthesized" with the
	// request id; the access line carries the same one.
	r := g.DoHTTP(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true", "X-Log-Probe", "join-book"), bookBody())
	wantStatus(t, r, 263)
	if r.Header.Get("Attribution-Record") == "" {
		t.Fatalf("the answer has no Attribution-Record:\n%s", r)
	}
	var acc map[string]any
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the BOOK access line", func() bool {
		acc = findAccessLog(g.Output(), "join-book")
		return acc != nil
	})
	id, _ := acc["request_id"].(string)
	if id == "" {
		t.Fatalf("the access line has no request_id: %v", acc)
	}
	if _, ok := acc["reason"]; ok {
		t.Errorf("a 263's access line names a reason: %v", acc)
	}
	if rh, _ := acc["resp_headers"].(map[string]any); rh == nil || rh["Attribution-Record"] != nil {
		t.Errorf("the filter keeps the Attribution-Record value (or resp_headers is gone): %v", acc["resp_headers"])
	}
	eng := findLogLine(g.Output(), "rcns contract synthesized", id)
	if eng == nil {
		t.Fatalf("no engine line \"rcns contract synthesized\" with request_id %s in:\n%s", id, g.Output())
	}

	// A sent Request-ID is the join key as sent.
	r = g.DoHTTP(t, "GET", "/guests/g-1", hdr(agentA1, "", "Request-ID", "01a23c15-0000-7000-8000-000000000001", "X-Log-Probe", "join-refused"), nil)
	wantStatus(t, r, 459)
	reason := str(r.Object(t), "reason")
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the refused request's access line", func() bool {
		acc = findAccessLog(g.Output(), "join-refused")
		return acc != nil
	})
	if acc["request_id"] != "01a23c15-0000-7000-8000-000000000001" || reason == "" || acc["reason"] != reason {
		t.Errorf("refused access line: request_id %v reason %v, want 01a23c15-0000-7000-8000-000000000001 and %q", acc["request_id"], acc["reason"], reason)
	}

	// The native door: the same fields.
	native := *g
	native.AGTPAddr = fmt.Sprintf("127.0.0.1:%d", agtpPort)
	r = native.Do(t, "FETCH", "/nowhere", hdr(agentA1, "hotel:read", "Request-ID", "01a23c15-0000-7000-8000-000000000002"), nil)
	if r.Status < 400 {
		t.Fatalf("FETCH /nowhere was not refused:\n%s", r)
	}
	reason = str(r.Object(t), "reason")
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the native door's access line", func() bool {
		acc = findNativeAccessLog(g.Output(), "/nowhere")
		return acc != nil
	})
	if acc["request_id"] != "01a23c15-0000-7000-8000-000000000002" || reason == "" || acc["reason"] != reason {
		t.Errorf("native access line: request_id %v reason %v, want 01a23c15-0000-7000-8000-000000000002 and %q", acc["request_id"], acc["reason"], reason)
	}

	// A request the native codec refuses (an asterisk target) gets its
	// access line too, with the reason; no uri.
	conn, err := net.DialTimeout("tcp", native.AGTPAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("PURGE * AGTP/1.0\r\nHost: x\r\nAgent-ID: " + agentA1 + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	head, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.HasPrefix(string(head), "AGTP/1.0 400") {
		t.Fatalf("PURGE * answered %q, want AGTP/1.0 400", head)
	}
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the codec refusal's access line", func() bool {
		acc = findNativeAccessLog(g.Output(), "")
		return acc != nil && acc["status"] == float64(400)
	})
	if r, _ := acc["reason"].(string); r == "" || acc["status"] != float64(400) || acc["request_id"] == "" {
		t.Errorf("codec refusal's access line = %v, want status 400, a reason and a request_id", acc)
	}

	// The MCP door: a tools/call line names its tool and the call's id.
	r = mcpRaw(t, g, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_guest","arguments":{"guest_id":"g-1"}}}`,
		hdr(agentA1, "hotel:read", "X-Log-Probe", "join-mcp"))
	wantStatus(t, r, 200)
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the MCP access line", func() bool {
		acc = findAccessLog(g.Output(), "join-mcp")
		return acc != nil
	})
	if tools, _ := acc["tools"].([]any); len(tools) != 1 || tools[0] != "fetch_guest" {
		t.Errorf("MCP access line tools = %v, want [fetch_guest]: %v", acc["tools"], acc)
	}
	if ids, _ := acc["request_ids"].([]any); len(ids) != 1 || ids[0] == "" {
		t.Errorf("MCP access line request_ids = %v, want one id", acc["request_ids"])
	}
}

// findLogLine returns the JSON log line with message msg and request_id
// id, nil when there is none.
func findLogLine(output, msg, id string) map[string]any {
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, id) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg && m["request_id"] == id {
			return m
		}
	}
	return nil
}

// TestMCPFloodLogBounded: a flood of malformed JSON-RPC on /mcp from
// one agent through a real Caddy (payloads that do not parse, invalid
// requests, unknown methods and tools, and requests with a malformed
// Agent-ID) writes a bounded number of the gateway's own log lines
// (engine.LogBurst, 5, per agent and reason per 10 s; the MCP SDK's per
// level) and no WARN or ERROR line per request, while the access log
// has one line per request and caddy_rcns_mcp_http_requests_total
// counts every one. MCP is served over HTTP: the test runs in the HTTP
// door's pass only.
func TestMCPFloodLogBounded(t *testing.T) {
	w := startHotel(t, hotelOpts{Door: "http", Extra: "\t\tmcp"})
	g := w.GW
	const n = 100
	bodies := []string{`{`, `{"jsonrpc":"2.0"}`, `{"jsonrpc":"2.0","id":1,"method":"nope"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}`}
	before := len(strings.Split(g.Output(), "\n"))
	agent := hdr(agentA1, "hotel:read")
	malformed := map[string]string{"Agent-ID": strings.Repeat("Z", 64)}
	sent := 0
	for i := range n {
		for _, b := range bodies {
			if r := mcpRaw(t, g, "/mcp", b, agent); r.Status != 400 && r.Status != 200 {
				t.Fatalf("request %d %s = %d:\n%s", i, b, r.Status, r)
			}
			sent++
		}
		if r := mcpRaw(t, g, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, malformed); r.Status != 400 {
			t.Fatalf("request %d with a malformed Agent-ID = %d:\n%s", i, r.Status, r)
		}
		sent++
	}
	var access int
	waitFor(t, 5*time.Second, 100*time.Millisecond, "every access line", func() bool {
		access = 0
		for _, line := range strings.Split(g.Output(), "\n")[before-1:] {
			if strings.Contains(line, `"logger":"http.log.access`) && strings.Contains(line, `"uri":"/mcp"`) {
				access++
			}
		}
		return access >= sent
	})
	own := map[string]int{}
	total := 0
	for _, line := range strings.Split(g.Output(), "\n")[before-1:] {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		logger, _ := m["logger"].(string)
		if strings.HasPrefix(logger, "http.log.access") {
			continue
		}
		if lvl, _ := m["level"].(string); lvl == "warn" || lvl == "error" {
			own[lvl+" "+str(m, "msg")]++
		}
		total++
	}
	t.Logf("%d requests: %d access lines, %d other lines; warn/error by message: %v", sent, access, total, own)
	if total > 4*5 {
		t.Errorf("%d gateway lines for a flood of %d malformed MCP requests, want at most 20", total, sent)
	}
	for k, c := range own {
		if c > 5 {
			t.Errorf("%d lines %q for the flood, want at most 5", c, k)
		}
	}
	s := scrapeMetrics(t, g)
	counted := 0.0
	for k, v := range s.values {
		if strings.HasPrefix(k, "caddy_rcns_mcp_http_requests_total{") {
			counted += v
		}
	}
	if counted != float64(sent) {
		t.Errorf("caddy_rcns_mcp_http_requests_total counts %v requests, want %d:\n%s", counted, sent, metricLines(s.raw, "caddy_rcns_mcp"))
	}
}
