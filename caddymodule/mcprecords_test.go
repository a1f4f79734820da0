package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// TestMCPDoorRefusalsRecorded: a call the MCP door refuses itself
// (arguments it cannot turn into a request, an Idempotency-Key it
// cannot take, a path off a recipe's pattern) is answered with an
// Attribution-Record as every engine answer is (spec §2.3): the HTTP
// answer carries Attribution-Record and its Audit-ID (sha256 of it),
// the tool result's _meta the same Audit-ID and a Response-ID, and the
// record names the agent, the tool's method and the status, its
// request_hash commits to the tool's method and path and the call's
// arguments as sent (each refusal's its own: helper-128 saw three
// refusals share one), and it chains to the agent's record before it. Before, these tool errors had neither
// (a helper's low finding), unlike the same faults on the other doors.
// Nothing runs upstream.
func TestMCPDoorRefusalsRecorded(t *testing.T) {
	up, calls := countingUpstream(t)
	_, url := mcpGatewayTo(t, up)
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"}
	call := func(id int, name, args string) string {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
			"params": map[string]any{"name": name, "arguments": json.RawMessage(args)}})
		return string(b)
	}
	prev := ""
	hashes := map[string]bool{}
	for i, c := range []struct {
		name, body, reason string
		hdr                map[string]string
		// method, path, args: what the record's method and request_hash
		// commit to, for a call the door refused itself ("" path: the
		// engine refused the request the door made).
		method, path, args string
	}{
		{"arguments a string", call(1, "fetch_item", `"x"`), "invalid-parameter", nil, "FETCH", "/items/{item_id}", `"x"`},
		{"a path parameter missing", call(2, "fetch_item", `{}`), "invalid-parameter", nil, "FETCH", "/items/{item_id}", `{}`},
		{"a path parameter an object", call(3, "fetch_item", `{"item_id":{"a":1}}`), "invalid-parameter", nil, "FETCH", "/items/{item_id}", `{"item_id":{"a":1}}`},
		{"X-Idempotency-Key alone", call(4, "fetch_item", `{"item_id":"1"}`), "invalid-idempotency-key", map[string]string{"X-Idempotency-Key": "k-1"}, "FETCH", "", ""},
		{"a path off the recipe's pattern", call(5, "lookup-item", `{"path":"/elsewhere","item_id":"3"}`), "invalid-parameter", nil, "LOOKUP", "/item/[A-Za-z0-9-]+", `{"path":"/elsewhere","item_id":"3"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{}
			for k, v := range hdr {
				h[k] = v
			}
			for k, v := range c.hdr {
				h[k] = v
			}
			status, rh, body := mcpPost(t, url, c.body, h)
			var ans struct {
				Result struct {
					Meta              map[string]any `json:"_meta"`
					IsError           bool           `json:"isError"`
					StructuredContent struct {
						Error struct{ Code string } `json:"error"`
					} `json:"structuredContent"`
				} `json:"result"`
			}
			if status != 200 || json.Unmarshal([]byte(body), &ans) != nil || !ans.Result.IsError || ans.Result.StructuredContent.Error.Code != c.reason {
				t.Fatalf("answered %d %s, want the tool error %s", status, body, c.reason)
			}
			records, audits := rh.Values("Attribution-Record"), rh.Values("Audit-Id")
			if len(records) != 1 || len(audits) != 1 {
				t.Fatalf("the HTTP answer carries %d Attribution-Record and %d Audit-ID fields, want one of each", len(records), len(audits))
			}
			sum := sha256.Sum256([]byte(records[0]))
			if audits[0] != hex.EncodeToString(sum[:]) {
				t.Errorf("Audit-ID %s is not the sha256 of the record", audits[0])
			}
			if ans.Result.Meta[mcpdoor.MCPMetaAuditID] != audits[0] || ans.Result.Meta[mcpdoor.MCPMetaResponseID] == nil || ans.Result.Meta[mcpdoor.MCPMetaStatus] != float64(400) {
				t.Errorf("_meta %v, want the Audit-ID %s, a Response-ID and agtp-status 400", ans.Result.Meta, audits[0])
			}
			p := recordPayload(t, records[0])
			if p["agent_id"] != benchAgent {
				t.Errorf("the record names agent %v, want %s", p["agent_id"], benchAgent)
			}
			if p["status"] != float64(400) || p["method"] != c.method {
				t.Errorf("the record's status %v and method %v, want 400 and %s", p["status"], p["method"], c.method)
			}
			hash, _ := p["request_hash"].(string)
			if c.path != "" {
				if want := idempotency.Fingerprint(c.method, c.path, []byte(c.args)); hash != want {
					t.Errorf("request_hash %s, want the hash of %s %s and the arguments %s: %s", hash, c.method, c.path, c.args, want)
				}
			}
			if hashes[hash] {
				t.Errorf("request_hash %s repeats an earlier refusal's: it does not tell the calls apart", hash)
			}
			hashes[hash] = true
			if i > 0 && p["previous_audit_id"] != prev {
				t.Errorf("previous_audit_id %v, want the agent's record before, %s", p["previous_audit_id"], prev)
			}
			prev = audits[0]
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the upstream was called %d times; refused calls run nothing", n)
	}
}
