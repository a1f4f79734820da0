package engine

import (
	"net/http"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
)

// TestStageRefusals: each named stage of the spec §10 order (stages)
// refuses what it checks, and the stages run in the order listed: a
// request that several stages would refuse is refused by the earliest.
// The engine runs without Caddy: a door's agtp.Request straight to
// Serve.
func TestStageRefusals(t *testing.T) {
	te := newTestEngine(t)
	agent := agentHeader
	tests := []struct {
		stage, method, target string
		hdr                   http.Header
		body                  string
		reason                string
	}{
		{"task-id", "FETCH", "/items/1", agent("Task-ID", "not a task id"), "", agtp.InvalidTaskID.Token},
		{"singletons", "FETCH", "/items/1", agent("Agent-ID", testAgent), "", agtp.DuplicateHeader.Token},
		{"framing", "FETCH", "/items/1", agent("Content-Type", "application/json"), "[1]", agtp.InvalidJSON.Token},
		{"method", "FOO-BAR", "/items/1", agent(), "", "invalid-method-token"},
		{"path", "FETCH", "/items/BOOK", agent(), "", "path-grammar-violation"},
		{"identity", "FETCH", "/items/1", http.Header{"Authority-Scope": {testScope}}, "", agtp.AgentUnauthenticated.Token},
		{"idempotency-key", "FETCH", "/items/1", agent("Idempotency-Key", "\"unterminated"), "", agtp.InvalidIdempotencyKey.Token},
		{"built-in", "INSPECT", "/", agent("Content-Type", "application/json"), `{"parameters":{"target":"nothing"}}`, agtp.UnknownTarget.Token},
		{"presentation", "FETCH", "/items/1", agent("Contract-Synthesized", "bad id!"), "", agtp.InvalidSynthesisID.Token},
		{"tier-b", "FETCH", "/items/1", agent("Content-Type", "application/json"), `{"parameters":{"nope":1}}`, agtp.InvalidInput.Token},
		{"pair", "LOOKUP", "/nothing/here", agent(), "", agtp.NotFound.Token},
	}
	if len(tests) != len(stages) {
		t.Fatalf("%d cases for %d stages", len(tests), len(stages))
	}
	for i, tt := range tests {
		if stages[i].name != tt.stage {
			t.Fatalf("stage %d is %q, the table says %q: keep them in the stages' order", i, stages[i].name, tt.stage)
		}
		t.Run(tt.stage, func(t *testing.T) {
			a := te.serve(t, tt.method, tt.target, tt.hdr, tt.body)
			if got := a.str("reason"); got != tt.reason {
				t.Fatalf("%s %s: reason %q, want %q: %s", tt.method, tt.target, got, tt.reason, a)
			}
		})
	}
}
