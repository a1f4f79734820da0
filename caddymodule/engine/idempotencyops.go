package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"go.uber.org/zap"
)

// The operator's view of one Idempotency-Key (docs/cluster.md "Failure
// modes"): INSPECT target=idempotency-key reads its state, REVOKE
// target=idempotency-key settles a key whose lease ended with no answer
// (outcome-unknown): action "release" frees it (the operator checked
// that the request did not run), "resolve" stores an answer for it (the
// operator checked what it did). Both need inspect:all and are
// recorded (a negotiation record of kind revoke on the operator's
// chain, and a WARN log line).

// keyParams reads agent_id and key, both required; the error names
// the ones missing (INSPECT has set agent_id to the caller's first).
func keyParams(p map[string]any, what string) (agent, key string, e *agtp.Error) {
	if agent, e = agentParam(p, what); e != nil {
		return "", "", e
	}
	if key, e = strParam(p, what, "key"); e != nil {
		return "", "", e
	}
	switch {
	case agent == "" && key == "":
		return "", "", agtp.ParameterRequired.New(what + " needs agent_id and key")
	case key == "":
		return "", "", agtp.ParameterRequired.New(what + " needs key")
	case agent == "":
		return "", "", agtp.ParameterRequired.New(what + " needs agent_id")
	}
	if _, err := idempotency.ParseKey(key); err != nil {
		return "", "", agtp.InvalidIdempotencyKey.New(what + ": key is not an Idempotency-Key: " + err.Error())
	}
	return agent, key, nil
}

// keyStateBody is the answer's view of st.
func keyStateBody(agent, key string, st idempotency.KeyState) map[string]any {
	body := map[string]any{"agent_id": agent, "key": key, "state": st.State, "expires_at": st.Expires.UTC().Format(time.RFC3339Nano)}
	if st.State == idempotency.StateAnswered {
		body["stored_status"] = st.Status
	}
	if h := st.Hold; h != nil {
		body["node_id"] = h.Node
		body["request"] = h.What
		body["claimed_at"] = h.ClaimedAt.UTC().Format(time.RFC3339Nano)
		body["lease_ends_at"] = h.LeaseEnds.UTC().Format(time.RFC3339Nano)
	}
	return body
}

// inspectKey serves INSPECT target=idempotency-key: the state of the
// caller's own key, or with inspect:all any agent's.
func (h *Engine) inspectKey(x *exchange, req *request, p map[string]any) {
	const what = "INSPECT target=idempotency-key"
	if !given(p, "agent_id") {
		p["agent_id"] = req.caller.Agent.ID
	}
	agent, key, e := keyParams(p, what)
	if e != nil {
		x.fail(e)
		return
	}
	if agent != req.caller.Agent.ID && !h.inspectAll(req) {
		x.fail(agtp.Forbidden.New(what + ": another agent's key needs the inspect:all scope"))
		return
	}
	st, found, err := h.sto.Idempotency.Peek(x.ctx(), agent, key)
	if err != nil {
		h.storeFailed(x, err)
		return
	}
	if !found {
		x.fail(agtp.RecordNotFound.New("no record of this Idempotency-Key (never used, its window passed, or released by an operator)"))
		return
	}
	body := keyStateBody(agent, key, st)
	body["target"] = "idempotency-key"
	x.write(200, agtp.MediaAGTP, body, nil)
}

// settleKey serves REVOKE target=idempotency-key (inspect:all): action
// release or resolve of an outcome-unknown key. resolve takes status
// (a 2xx with a body: 200-299 but 204 and 205; default 200) and result
// (any JSON, default null): the answer later repeats of the key replay,
// marked resolved_by_operator, with the operator's reason as note. A
// request that did not run is released, not resolved.
func (h *Engine) settleKey(x *exchange, req *request, p map[string]any, reason string) {
	const what = "REVOKE target=idempotency-key"
	if !h.inspectAll(req) {
		x.fail(agtp.Forbidden.New(what + " needs the inspect:all scope"))
		return
	}
	if e := onlyParams(p, x.query, what, "target", "agent_id", "key", "action", "status", "result", "reason"); e != nil {
		x.fail(e)
		return
	}
	agent, key, e := keyParams(p, what)
	if e != nil {
		x.fail(e)
		return
	}
	action, e := strParam(p, what, "action")
	if e != nil {
		x.fail(e)
		return
	}
	status := 200
	if v, ok := p["status"]; ok && v != nil {
		f, isNum := v.(float64)
		i := int64(f)
		if !isNum || float64(i) != f || i < 200 || i > 299 || i == 204 || i == 205 {
			x.fail(agtp.InvalidParameter.New(what + ": status must be a 2xx status that carries a body (200-299 but 204 and 205): resolve says the request ran and what it answered; release a key whose request did not run"))
			return
		}
		status = int(i)
	}
	requested := map[string]any{"target": "idempotency-key", "agent_id": agent, "key": key, "action": action}
	var st idempotency.KeyState
	var err error
	switch action {
	case "release":
		if given(p, "status") || given(p, "result") {
			x.fail(agtp.InvalidParameter.New(what + ": status and result go with action resolve"))
			return
		}
		st, err = h.sto.Idempotency.Release(x.ctx(), agent, key)
	case "resolve":
		answer := map[string]any{"status": status, "result": p["result"], "resolved_by_operator": true}
		if reason != "" {
			answer["note"] = reason
		}
		raw, jerr := json.Marshal(answer)
		if jerr != nil {
			x.fail(agtp.InvalidParameter.New(what + ": result is not JSON"))
			return
		}
		requested["status"] = status
		st, err = h.sto.Idempotency.Resolve(x.ctx(), agent, key, idempotency.Response{Status: status, Body: raw,
			Header: map[string]string{"Content-Type": agtp.MediaAGTP}})
	case "":
		x.fail(agtp.ParameterRequired.New(what + " needs action: release (the request did not run) or resolve (store its answer)"))
		return
	default:
		x.fail(agtp.InvalidParameter.New(fmt.Sprintf("%s: action must be release or resolve", what)))
		return
	}
	switch {
	case errors.Is(err, idempotency.ErrNoRecord):
		// Also the answer of the second of two settles sent at once,
		// the first a release (helper-148).
		x.fail(agtp.RecordNotFound.New("no record of this Idempotency-Key (never used, its window passed, or released: by an operator, or by a settle just before this one)"))
		return
	case errors.Is(err, idempotency.ErrAnswered), errors.Is(err, idempotency.ErrLeaseLive):
		body := keyStateBody(agent, key, st)
		expl := "this Idempotency-Key holds a stored answer, which repeats replay; nothing to settle"
		if st.State == idempotency.StateInFlight {
			expl = "the request of this Idempotency-Key is still running under its lease; settle it once the lease ended (lease_ends_at) if it is then outcome-unknown"
		}
		x.fail(agtp.KeyNotSettleable.WithFields(expl, body))
		return
	case err != nil:
		h.storeFailed(x, err)
		return
	}
	x.log().Warn("an operator settled an outcome-unknown Idempotency-Key", zap.String("operator", x.agentID), zap.String("action", action),
		zap.String("agent_id", agent), zap.String("key", key), zap.String("request", holdWhat(st)), zap.String("reason", recordedText(reason)))
	granted := h.settledBody(x, agent, key, action, status, st)
	h.negotiationRecord(x, records.KindRevoke, records.OutcomeAccepted, reason, requested, granted)
	body := maps.Clone(granted)
	body["status"], body["target"], body["action"] = 200, "idempotency-key", action
	x.write(200, agtp.MediaAGTP, body, nil)
}

// settledBody is the key's state after settleKey settled it, st being
// the state it settled (outcome-unknown, whose holder it still names):
// state "answered" with stored_status and the stored answer's
// expires_at (read back: the window runs from the settle) after
// resolve, "released" without expires_at after release (the next
// request with the key runs), and settled_state st's (helper-144: the
// answer said outcome-unknown, the state before).
func (h *Engine) settledBody(x *exchange, agent, key, action string, status int, st idempotency.KeyState) map[string]any {
	body := keyStateBody(agent, key, st)
	body["settled_state"] = st.State
	delete(body, "expires_at")
	if action == "release" {
		body["state"] = "released"
		return body
	}
	body["state"], body["stored_status"] = idempotency.StateAnswered, status
	if now, found, err := h.sto.Idempotency.Peek(x.ctx(), agent, key); err == nil && found && now.State == idempotency.StateAnswered {
		body["expires_at"] = now.Expires.UTC().Format(time.RFC3339Nano)
	}
	return body
}

// holdWhat is the request a key's hold names, "" for none.
func holdWhat(st idempotency.KeyState) string {
	if st.Hold == nil {
		return ""
	}
	return st.Hold.What
}
