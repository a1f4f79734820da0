package caddymodule

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// recordPayload decodes a JWS Compact record's payload (signed or not,
// unverified).
func recordPayload(t *testing.T, compact string) map[string]any {
	t.Helper()
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		t.Fatalf("record %q is not JWS Compact", compact)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// operatorAgent is a registered agent carrying inspect:all (withOperator).
var operatorAgent = strings.Repeat("0f", 32)

// withOperator registers operatorAgent, with inspect:all, besides the
// bench agent.
func withOperator(t *testing.T) func(*Handler) {
	dir := t.TempDir()
	doc := "agent_id: " + operatorAgent + "\nname: operator\nowner_id: ops\ntrust_tier: 1\nstatus: active\nscopes:\n  - inspect:all\n"
	if err := os.WriteFile(filepath.Join(dir, "operator.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(h *Handler) { h.Agents = append(h.Agents, dir) }
}

// inspectAs sends INSPECT / with params as agent (scope).
func (g *testGateway) inspectAs(t *testing.T, agent, scope string, params map[string]any) *answer {
	t.Helper()
	return g.do(t, "INSPECT", "/", map[string]any{"parameters": params}, "Agent-ID", agent, "Authority-Scope", scope)
}

// recordsScript checks INSPECT target=audit and target=chain_head on
// g, whose node is node: the retained record is the one sent, its ACL
// and its errors. bounds is what record-not-found says bounds the
// retained records on g's store.
func recordsScript(t *testing.T, g *testGateway, node, bounds string) {
	t.Helper()
	a := g.do(t, "FETCH", "/items/1", nil)
	if a.status != 200 || a.hdr("Audit-ID") == "" {
		t.Fatalf("Tier B: %s", a)
	}
	payload := recordPayload(t, a.hdr("Attribution-Record"))
	if payload["node_id"] != node {
		t.Fatalf("record node_id %v, want %s", payload["node_id"], node)
	}
	got := g.builtin(t, "INSPECT", map[string]any{"target": "audit", "audit_id": a.hdr("Audit-ID")})
	if got.status != 200 || got.str("record") != a.hdr("Attribution-Record") || got.str("agent_id") != benchAgent ||
		got.str("node_id") != node || got.str("format") != "jws" || got.str("issued_at") == "" {
		t.Fatalf("INSPECT target=audit: %s", got)
	}
	// The INSPECT answer itself is the chain's newest record.
	head := g.builtin(t, "INSPECT", map[string]any{"target": "chain_head"})
	if head.status != 200 || head.str("agent_id") != benchAgent || head.str("audit_id") != got.hdr("Audit-ID") || head.str("node_id") != node {
		t.Fatalf("INSPECT target=chain_head after %s: %s", got.hdr("Audit-ID"), head)
	}
	if hs, _ := head.body["heads"].([]any); len(hs) != 1 {
		t.Fatalf("heads %v, want one", head.body["heads"])
	}
	wantError(t, g.builtin(t, "INSPECT", map[string]any{"target": "audit", "audit_id": strings.Repeat("a", 64)}), 404, "record-not-found", "no retained Attribution-Record has this Audit-ID ("+bounds+")")
	wantError(t, g.builtin(t, "INSPECT", map[string]any{"target": "audit", "audit_id": "nope"}), 400, "invalid-parameter", "Audit-ID")
	wantError(t, g.builtin(t, "INSPECT", map[string]any{"target": "audit"}), 400, "parameter-required", "audit_id")
	wantError(t, g.builtin(t, "INSPECT", map[string]any{"target": "chain_head", "agent_id": otherAgent}), 403, "forbidden", "agent_only")
	// The manifest's record is anonymous: only inspect:all reads it.
	m := g.anonymous(t, "DISCOVER", "/", nil)
	wantError(t, g.builtin(t, "INSPECT", map[string]any{"target": "audit", "audit_id": m.hdr("Audit-ID")}), 403, "forbidden", "agent_only")
	op := g.inspectAs(t, operatorAgent, "inspect:all", map[string]any{"target": "audit", "audit_id": m.hdr("Audit-ID")})
	if op.status != 200 || op.body["agent_id"] != nil || op.str("record") != m.hdr("Attribution-Record") {
		t.Fatalf("inspect:all reading an anonymous record: %s", op)
	}
	if a := g.inspectAs(t, operatorAgent, "inspect:all", map[string]any{"target": "chain_head", "agent_id": benchAgent}); a.status != 200 {
		t.Fatalf("inspect:all reading another agent's chain head: %s", a)
	}
	wantError(t, g.inspectAs(t, operatorAgent, "inspect:all", map[string]any{"target": "chain_head", "agent_id": otherAgent}), 404, "record-not-found", "no Attribution-Record of this agent is retained ("+bounds+")")
}

// TestInspectRecordsMemory: INSPECT target=audit and chain_head on the
// memory store.
func TestInspectRecordsMemory(t *testing.T) {
	g := &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, true, "", "", withOperator(t), func(h *Handler) { h.NodeID = "solo" })}
	recordsScript(t, g, "solo", "records are kept 24h, at most the newest 100000")
}

// TestInspectRecordsRedis: the same on Redis, and across two nodes: a
// record retained by one node is read on the other once written (off
// the answer path), and the agent's chain heads are one per node.
func TestInspectRecordsRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	up, _ := countingUpstream(t)
	a := redisGateway(t, up, srv.Addr(), withOperator(t), func(h *Handler) { h.NodeID = "node-a" })
	recordsScript(t, a, "node-a", "records are kept 24h")
	b := redisGateway(t, up, srv.Addr(), withOperator(t), func(h *Handler) { h.NodeID, h.Name = "node-b", "node-b" })
	onB := b.do(t, "FETCH", "/items/2", nil)
	// B writes its records off the answer path: A reads this one once
	// it is written (normally within 2 ms and a round trip of the answer).
	got := a.builtin(t, "INSPECT", map[string]any{"target": "audit", "audit_id": onB.hdr("Audit-ID")})
	for deadline := time.Now().Add(5 * time.Second); got.status == 404 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		got = a.builtin(t, "INSPECT", map[string]any{"target": "audit", "audit_id": onB.hdr("Audit-ID")})
	}
	if got.status != 200 || got.str("node_id") != "node-b" || got.str("record") != onB.hdr("Attribution-Record") {
		t.Fatalf("node A reading node B's record: %s", got)
	}
	head := b.builtin(t, "INSPECT", map[string]any{"target": "chain_head"})
	hs, _ := head.body["heads"].([]any)
	if head.status != 200 || len(hs) != 2 || head.body["audit_id"] != nil {
		t.Fatalf("chain heads over two nodes: %s", head)
	}
	for i, want := range []string{"node-a", "node-b"} {
		if h, _ := hs[i].(map[string]any); h["node_id"] != want {
			t.Fatalf("heads %v, want node-a then node-b", hs)
		}
	}
}

// TestInspectRecordsACL: operator_only refuses an agent its own
// records; public lets any agent read any.
func TestInspectRecordsACL(t *testing.T) {
	for _, tc := range []struct {
		acl    string
		status int
	}{{engine.ACLOperatorOnly, 403}, {engine.ACLPublic, 200}} {
		t.Run(tc.acl, func(t *testing.T) {
			g := &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, false, "", "", func(h *Handler) { h.AuditReadACL = tc.acl })}
			m := g.anonymous(t, "DISCOVER", "/", nil)
			a := g.builtin(t, "INSPECT", map[string]any{"target": "audit", "audit_id": m.hdr("Audit-ID")})
			if a.status != tc.status {
				t.Fatalf("audit_read_acl %s: %s", tc.acl, a)
			}
			if tc.status == 403 && a.body["acl"] != tc.acl {
				t.Fatalf("the refusal does not name the mode: %s", a)
			}
		})
	}
}
