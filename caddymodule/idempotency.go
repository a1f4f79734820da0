package caddymodule

import (
	"fmt"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// claim claims the request's Idempotency-Key, if it has one. It returns
// true when the request should go on (it then holds the claim); false
// when it has been answered: a replay, 409 in flight, 422 key reused, or
// 503 store full (spec §12.2, ARCHITECTURE.md "Idempotency").
func (h *engine) claim(x *exchange, req *request) bool {
	if req.idemKey == "" {
		return true
	}
	cl := x.preclaimed
	x.preclaimed = nil
	if cl == nil {
		// A presentation that confirms the 461 its key stored runs the
		// contract under the key instead of replaying the preview
		// (ClaimConfirming); any other presentation is claimed as a
		// repeat.
		c, err := h.sto.Idempotency.ClaimConfirming(x.ctx(), req.caller.Agent.ID, req.idemKey, x.fingerprint(req), x.presentedID, x.presentedPending)
		if err != nil {
			h.storeFailed(x, err)
			return false
		}
		cl = &c
	}
	h.idempotencyChanged(x.ctx())
	switch cl.Outcome {
	case idempotency.Execute:
		x.claim = cl.Claim
		return true
	case idempotency.Replay:
		h.metrics.idempotency("replay")
		x.replay(cl.Response)
	case idempotency.Mismatch:
		h.metrics.idempotency("conflict")
		x.fail(agtp.IdempotencyKeyReused.New("this Idempotency-Key was used for a different request (method, target or body); use a new key"))
	case idempotency.OtherContract:
		h.metrics.idempotency("conflict")
		x.fail(agtp.IdempotencyKeyReused.New("this Idempotency-Key holds the answer for another contract than the one presented (its 461 preview or its result); use a new key"))
	case idempotency.InFlight:
		h.metrics.idempotency("in_flight")
		x.fail(agtp.IdempotencyKeyInFlight.New("a request with this Idempotency-Key is still running; retry after it completes"))
	default: // AgentFull, StoreFull
		h.metrics.idempotency("store_full")
		x.fail(idempotencyStoreFull(cl.Outcome, h.sto.Idempotency.Limits()))
	}
	return false
}

// fingerprint is the request's Idempotency-Key fingerprint
// (ARCHITECTURE.md "Idempotency").
func (x *exchange) fingerprint(req *request) string {
	return idempotency.Fingerprint(x.in.Method, x.fingerprintTarget(), req.raw)
}

// idempotencyStoreFull is the 503 for a Claim answered AgentFull or
// StoreFull (o): it names the bound that was hit, the store's
// (idempotency_max_records, reported when both are) or this agent's
// (idempotency_max_per_agent), with its effective value (defaults
// applied) in limit_records.
func idempotencyStoreFull(o idempotency.Outcome, l idempotency.Limits) *agtp.Error {
	knob, limit := "idempotency_max_per_agent", l.MaxPerAgent
	expl := fmt.Sprintf("this agent holds its maximum of %d idempotency records (idempotency_max_per_agent); retry after some expire", limit)
	if o == idempotency.StoreFull {
		knob, limit = "idempotency_max_records", l.MaxRecords
		expl = fmt.Sprintf("the gateway's idempotency store holds its maximum of %d records for all agents (idempotency_max_records); retry later", limit)
	}
	return agtp.IdempotencyStoreFull.WithFields(expl, map[string]any{"bound": knob, "limit_records": limit})
}
