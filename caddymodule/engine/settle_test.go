package engine

import (
	"strings"
	"testing"
	"time"
)

// TestSettleKeyAnswersStateAfter: REVOKE target=idempotency-key answers
// the key's state after it settled it, naming the state it settled in
// settled_state (helper-144: the answer said outcome-unknown, the state
// before): resolve gives answered, the stored status and the stored
// answer's expiry (the window from the settle, as INSPECT then reads
// it); release gives released, with no expiry, and INSPECT then finds
// no record.
func TestSettleKeyAnswersStateAfter(t *testing.T) {
	te := settleEngine(t)
	orphan := func(key string) {
		srHeld(t, te, key, "FETCH", "/items/1", "", time.Millisecond)
		time.Sleep(20 * time.Millisecond)
	}
	str := func(a *srAnswer, name string) string { s, _ := a.body[name].(string); return s }

	orphan("settle-resolve")
	before := time.Now()
	a := srCall("REVOKE", "/", srOp(), srParams(map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": "settle-resolve",
		"action": "resolve", "status": 201, "result": map[string]any{"ok": true}}))(t, te)
	if a.Status != 200 || str(a, "state") != "answered" || str(a, "settled_state") != "outcome-unknown" || a.body["stored_status"] != float64(201) ||
		str(a, "node_id") != "other-node" || str(a, "action") != "resolve" {
		t.Fatalf("resolve: %s\nwant 200, state answered, settled_state outcome-unknown, stored_status 201, node_id other-node", a)
	}
	exp, err := time.Parse(time.RFC3339Nano, str(a, "expires_at"))
	if err != nil || exp.Before(before.Add(time.Duration(te.IdempotencyWindow))) {
		t.Fatalf("resolve: expires_at %q (%v), want the window (%v) from the settle", str(a, "expires_at"), err, time.Duration(te.IdempotencyWindow))
	}
	in := srCall("INSPECT", "/", srOp(), srKeyOp("settle-resolve", ""))(t, te)
	if in.Status != 200 || str(in, "state") != "answered" || str(in, "expires_at") != str(a, "expires_at") {
		t.Fatalf("INSPECT after resolve: %s\nwant answered, expires_at %s", in, str(a, "expires_at"))
	}

	orphan("settle-release")
	r := srCall("REVOKE", "/", srOp(), srKeyOp("settle-release", "release"))(t, te)
	if _, has := r.body["expires_at"]; r.Status != 200 || str(r, "state") != "released" || str(r, "settled_state") != "outcome-unknown" || has {
		t.Fatalf("release: %s\nwant 200, state released, settled_state outcome-unknown, no expires_at", r)
	}
	if in := srCall("INSPECT", "/", srOp(), srKeyOp("settle-release", ""))(t, te); in.Status != 404 {
		t.Fatalf("INSPECT after release: %s\nwant 404 record-not-found", in)
	}
}

// TestStateChangingBuiltinsRefuseUnknownParams: REVOKE (each target)
// and SUSPEND refuse a parameter they do not read, 400
// invalid-parameter naming it, and change nothing (helper-148: a
// resolve whose "stauts" and "reslut" were misspelt stored 200 and a
// null result, which a second settle could not correct).
func TestStateChangingBuiltinsRefuseUnknownParams(t *testing.T) {
	te := settleEngine(t)
	srHeld(t, te, "settle-typo", "FETCH", "/items/1", "", time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	refused := func(t *testing.T, a *srAnswer, name string) {
		t.Helper()
		if a.Status != 400 || a.str("reason") != "invalid-parameter" || !strings.Contains(a.str("explanation"), ` parameter "`+name+`"`) {
			t.Fatalf("%s\nwant 400 invalid-parameter naming %q", a, name)
		}
	}
	syn := "syn-" + strings.Repeat("A", 22)
	for _, tc := range []struct {
		name, method string
		body         string
		unknown      string
		target       string // "/" when empty
	}{
		{"resolve, status in the query", "REVOKE", srKeyOp("settle-typo", "resolve"), "status", "/?status=201"},
		{"release, unknown query key", "REVOKE", srKeyOp("settle-typo", "release"), "zzz", "/?zzz=1"},
		{"resolve misspelt", "REVOKE", srParams(map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": "settle-typo", "action": "resolve", "stauts": 201, "reslut": map[string]any{"x": 1}}), "reslut", ""},
		{"release with actor", "REVOKE", srParams(map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": "settle-typo", "action": "release", "actor": "sre"}), "actor", ""},
		{"release, top-level", "REVOKE", `{"target":"idempotency-key","agent_id":"` + testAgent + `","key":"settle-typo","action":"release","zzz":1}`, "zzz", ""},
		{"revoke contract misspelt", "REVOKE", srParams(map[string]any{"target": "contract", "synthesisid": syn}), "synthesisid", ""},
		{"stale sweep misspelt", "REVOKE", srParams(map[string]any{"target": "stale-contracts", "mdoe": "invalidate"}), "mdoe", ""},
		{"suspend misspelt", "SUSPEND", srParams(map[string]any{"synthesis_id": syn, "reasons": "done"}), "reasons", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if target == "" {
				target = "/"
			}
			refused(t, srCall(tc.method, target, srOp(), tc.body)(t, te), tc.unknown)
		})
	}
	// Nothing changed: the key is still outcome-unknown, and the settle
	// spelt right goes through.
	if in := srCall("INSPECT", "/", srOp(), srKeyOp("settle-typo", ""))(t, te); in.Status != 200 || in.str("state") != "outcome-unknown" {
		t.Fatalf("INSPECT after the refusals: %s\nwant outcome-unknown", in)
	}
	a := srCall("REVOKE", "/", srOp(), srParams(map[string]any{"target": "idempotency-key", "agent_id": testAgent, "key": "settle-typo",
		"action": "resolve", "status": 201, "result": map[string]any{"x": 1}, "reason": "checked"}))(t, te)
	if a.Status != 200 || a.str("state") != "answered" || a.body["stored_status"] != float64(201) {
		t.Fatalf("resolve spelt right: %s\nwant 200 answered, stored_status 201", a)
	}
}

// settleEngine is an engine serving the stage-refusal documents over a
// loopback upstream, for the settle tests.
func settleEngine(t *testing.T) *testEngine {
	t.Helper()
	agentsDir, endpointsDir, recipesDir := srDocs(t)
	upstream := srUpstream(t)
	return newTestEngine(t, func(c *Config) {
		c.Agents = append(c.Agents, agentsDir)
		c.Endpoints = append(c.Endpoints, endpointsDir)
		c.Recipes = append(c.Recipes, recipesDir)
		c.Upstreams = map[string]*UpstreamConfig{"bench": {URL: upstream}}
	})
}
