package caddymodule

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMCPNegotiationsInspect: an initialize asking for 2099-01-01 is
// answered with a version the door speaks, and the caller reads the
// downgrade back through INSPECT target=negotiations (HTTP door) and the
// MCP resource rcns://negotiations; a bad kind or a cursor is 400.
func TestMCPNegotiationsInspect(t *testing.T) {
	_, url := mcpGateway(t)
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	status, _, body := mcpPost(t, url, init, hdr)
	var ir struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &ir); status != 200 || err != nil || ir.Result.ProtocolVersion == "" || ir.Result.ProtocolVersion == "2099-01-01" {
		t.Fatalf("initialize: %d %s", status, body)
	}
	granted := ir.Result.ProtocolVersion

	type negs struct {
		Target  string           `json:"target"`
		AgentID string           `json:"agent_id"`
		Kind    string           `json:"kind"`
		Records []map[string]any `json:"records"`
	}
	wantDowngrade := func(where string, n negs) {
		t.Helper()
		if n.Target != "negotiations" || n.AgentID != benchAgent || len(n.Records) == 0 {
			t.Fatalf("%s: %+v", where, n)
		}
		r := n.Records[0] // newest first
		req, _ := r["requested"].(map[string]any)
		gr, _ := r["granted"].(map[string]any)
		if r["kind"] != "protocol-version" || r["outcome"] != "accepted" || req["protocol_version"] != "2099-01-01" ||
			req["method"] != "initialize" || gr["protocol_version"] != granted || r["agent_id"] != benchAgent || r["at"] == nil {
			t.Errorf("%s: newest record %v, want the downgrade 2099-01-01 → %s", where, r, granted)
		}
	}

	// Over the HTTP door: INSPECT target=negotiations kind=protocol-version.
	base := strings.TrimSuffix(url, "/mcp")
	inspect := func(agent, query string) (int, []byte) {
		req, _ := http.NewRequest("INSPECT", base+"/?target=negotiations"+query, nil)
		req.Header.Set("Agent-ID", agent)
		req.Header.Set("Authority-Scope", "rcns:negotiate, bench:read")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	st, b := inspect(benchAgent, "&kind=protocol-version&limit=5")
	var n negs
	if err := json.Unmarshal(b, &n); st != 200 || err != nil {
		t.Fatalf("INSPECT: %d %s", st, b)
	}
	wantDowngrade("INSPECT", n)
	if n.Kind != "protocol-version" || len(n.Records) > 5 {
		t.Errorf("INSPECT kind/limit not honoured: %s", b)
	}
	if st, b := inspect(benchAgent, "&kind=nope"); st != 400 || !strings.Contains(string(b), "invalid-parameter") {
		t.Errorf("INSPECT kind=nope: %d %s, want 400 invalid-parameter", st, b)
	}
	if st, b := inspect(benchAgent, "&cursor=x"); st != 400 || !strings.Contains(string(b), "invalid-cursor") {
		t.Errorf("INSPECT cursor: %d %s, want 400 invalid-cursor", st, b)
	}

	// Through the MCP door: the resource rcns://negotiations.
	read := `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"rcns://negotiations"}}`
	status, _, body = mcpPost(t, url, read, hdr)
	var rr struct {
		Result struct {
			Contents []struct {
				Text string `json:"text"`
			} `json:"contents"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &rr); status != 200 || err != nil || len(rr.Result.Contents) != 1 {
		t.Fatalf("resources/read rcns://negotiations: %d %s", status, body)
	}
	n = negs{}
	if err := json.Unmarshal([]byte(rr.Result.Contents[0].Text), &n); err != nil {
		t.Fatalf("rcns://negotiations: %v %s", err, rr.Result.Contents[0].Text)
	}
	wantDowngrade("rcns://negotiations", n)
}
