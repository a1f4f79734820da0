package engine

import (
	"fmt"
	"sort"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
)

// contractAccess says who may act on a contract named by synthesis_id.
type contractAccess struct {
	what       string // the request, for messages
	verb       string // what the caller wants to do, for messages
	inspectAll bool   // inspect:all also grants access (else originator only)
}

// contractParam resolves the synthesis_id parameter to a contract the
// caller may act on, answering 400/404/403 itself when not (spec §14.4,
// §17.3). A contract is known, live or ended (expired, revoked or
// released), while its tombstone is kept: INSPECT, REVOKE and SUSPEND
// agree on which ids are unknown (404).
func (h *Engine) contractParam(x *exchange, req *request, p map[string]any, a contractAccess) (*recipes.Contract, string, bool) {
	id, ok := synthesisParam(x, p, a.what)
	if !ok {
		return nil, "", false
	}
	c, state, found, err := h.sto.Contracts.Inspect(x.ctx(), id)
	if err != nil {
		h.storeFailed(x, err)
		return nil, "", false
	}
	if !found {
		x.fail(agtp.ContractNotFound.New("no contract with this synthesis id is known"))
		return nil, "", false
	}
	if c.OriginatingAgentID != req.caller.Agent.ID && !(a.inspectAll && h.inspectAll(req)) {
		who := "the originating agent"
		if a.inspectAll {
			who += " or a caller carrying inspect:all"
		}
		x.fail(agtp.Forbidden.New(fmt.Sprintf("only %s may %s this contract", who, a.verb)))
		return nil, "", false
	}
	return c, state, true
}

// builtin serves INSPECT, REVOKE, SUSPEND and PROPOSE at "/" (spec
// §14.4, §15, §17.3).
func (h *Engine) builtin(x *exchange, req *request) {
	p, e := params(req)
	if e == nil {
		e = queryParams(x.query, p)
	}
	if e != nil {
		x.fail(e)
		return
	}
	switch x.method {
	case "INSPECT":
		h.inspect(x, req, p)
	case "REVOKE":
		h.revoke(x, req, p)
	case "SUSPEND":
		h.suspend(x, req, p)
	case "PROPOSE":
		h.propose(x, req, p)
	}
}

func (h *Engine) inspectAll(req *request) bool {
	return req.caller.Effective().Covers(scopeInspectAll)
}

// inspect serves INSPECT target=contract, rcns-attempt, lifecycle,
// negotiations (negrecords.go), audit and chain_head (spec §17.3; audit
// and chain_head in inspectrecords.go).
func (h *Engine) inspect(x *exchange, req *request, p map[string]any) {
	target, e := strParam(p, "INSPECT", "target")
	if e != nil {
		x.fail(e)
		return
	}
	switch target {
	case "contract":
		c, state, ok := h.contractParam(x, req, p, contractAccess{what: "INSPECT target=contract", verb: "inspect", inspectAll: true})
		if !ok {
			return
		}
		body := &agtp.ContractAnswer{Members: c.Summary(), Endpoint: c.EndpointJSON}
		body.Members["target"] = "contract"
		body.Members["state"] = state
		x.write(200, agtp.MediaAGTP, body, nil)
	case "rcns-attempt":
		id, e := strParam(p, "INSPECT target=rcns-attempt", "attempt_id")
		if e != nil {
			x.fail(e)
			return
		}
		if id == "" {
			x.fail(agtp.ParameterRequired.New("INSPECT target=rcns-attempt needs attempt_id"))
			return
		}
		rec, found, err := h.sto.Attempts.Get(x.ctx(), id)
		if err != nil {
			h.storeFailed(x, err)
			return
		}
		if !found {
			x.fail(agtp.AttemptNotFound.New("no attempt record with this id (unknown or evicted from the bounded buffer)"))
			return
		}
		if rec.AgentID != req.caller.Agent.ID && !h.inspectAll(req) {
			x.fail(agtp.Forbidden.New("only the agent that made the attempt or a caller carrying inspect:all may read it"))
			return
		}
		body := map[string]any{"target": "rcns-attempt", "attempt_id": rec.ID, "method": rec.Method, "path": rec.Path,
			"agent_id": rec.AgentID, "trust_tier": rec.TrustTier, "locks": rec.Locks, "reason": rec.Reason,
			"explanation": rec.Explanation, "at": rec.At}
		x.write(200, agtp.MediaAGTP, body, nil)
	case "idempotency-key":
		h.inspectKey(x, req, p)
	case "":
		x.fail(agtp.ParameterRequired.New("INSPECT needs a target"))
	case "lifecycle":
		// Parameters are checked before access: a malformed agent_id
		// or limit is 400 for anyone (a syntax check reveals nothing).
		agent, e := agentParam(p, "INSPECT target=lifecycle")
		if e != nil {
			x.fail(e)
			return
		}
		limit, e := listingParam(x.query, p, "limit", DefaultPageLimit, limitValue)
		if e != nil {
			x.fail(e)
			return
		}
		// The stream is read newest first, limit events at a time,
		// without pages: a cursor would be silently ignored.
		cursor, e := listingParam(x.query, p, "cursor", "", cursorValue)
		if e != nil {
			x.fail(e)
			return
		}
		if cursor != "" {
			x.fail(agtp.InvalidCursor.New(fmt.Sprintf("INSPECT target=lifecycle has no pages: it returns the newest limit events (at most %d); drop cursor", MaxPageLimit)))
			return
		}
		if agent == "" {
			agent = req.caller.Agent.ID
		}
		if agent != req.caller.Agent.ID && !h.inspectAll(req) {
			x.fail(agtp.Forbidden.New("only the agent itself or a caller carrying inspect:all may read its lifecycle stream"))
			return
		}
		entries := h.st.records.lifecycle.List(agent, limit)
		if entries == nil {
			entries = []map[string]any{}
		}
		x.write(200, agtp.MediaAGTP, map[string]any{"target": "lifecycle", "agent_id": agent, "entries": entries}, nil)
	case "negotiations":
		h.inspectNegotiations(x, req, p)
	case "audit":
		h.inspectAudit(x, req, p)
	case "chain_head":
		h.inspectChainHead(x, req, p)
	default:
		x.fail(agtp.UnknownTarget.New(fmt.Sprintf("INSPECT target %q is not known (contract, rcns-attempt, lifecycle, negotiations, audit, chain_head, idempotency-key)", textcut.Clip(target))))
	}
}

// revoke serves REVOKE target=contract and target=stale-contracts
// (spec §14.4 paths 2 and 4).
func (h *Engine) revoke(x *exchange, req *request, p map[string]any) {
	target, e := strParam(p, "REVOKE", "target")
	var reason, actor string
	if e == nil {
		reason, e = strParam(p, "REVOKE", "reason")
	}
	if e == nil {
		actor, e = strParam(p, "REVOKE", "actor")
	}
	if e != nil {
		x.fail(e)
		return
	}
	switch target {
	case "contract":
		if e := onlyParams(p, x.query, "REVOKE target=contract", "target", "synthesis_id", "reason", "actor"); e != nil {
			x.fail(e)
			return
		}
		c, _, ok := h.contractParam(x, req, p, contractAccess{what: "REVOKE target=contract", verb: "revoke", inspectAll: true})
		if !ok {
			return
		}
		h.endNamed(x, req.caller.Agent.ID, c, contractEnd{state: recipes.StateRevoked, reason: reason, operator: actor, via: "REVOKE target=contract",
			requested: map[string]any{"target": "contract", "synthesis_id": c.SynthesisID}})
	case "stale-contracts":
		if !h.inspectAll(req) {
			x.fail(agtp.Forbidden.New("REVOKE target=stale-contracts needs the inspect:all scope"))
			return
		}
		mode, e := typedString(p, "REVOKE target=stale-contracts", "mode", agtp.InvalidMode)
		if e == nil {
			e = onlyParams(p, x.query, "REVOKE target=stale-contracts", "target", "mode", "reason", "actor")
		}
		if e != nil {
			x.fail(e)
			return
		}
		if !given(p, "mode") {
			mode = h.OnPolicyChange
		}
		if mode != "grandfather" && mode != "invalidate" {
			x.fail(agtp.InvalidMode.New(fmt.Sprintf("mode %q is not grandfather or invalidate", textcut.Clip(mode))))
			return
		}
		current := map[string]string{}
		for _, r := range h.set.Recipes {
			current[r.Name] = r.Version
		}
		operator := actor
		if operator == "" {
			operator = x.agentID
		}
		list := []map[string]any{}
		persistentLeft := false
		live, err := h.sto.Contracts.List(x.ctx(), "")
		if err != nil {
			h.storeFailed(x, err)
			return
		}
		h.fenceLeases(x)
		for _, c := range live {
			cur, ok := current[c.Lineage.RecipeName]
			entry := map[string]any{"synthesis_id": c.SynthesisID, "recipe_name": c.Lineage.RecipeName,
				"captured_version": c.Lineage.RecipeVersion, "current_version": nil}
			if ok {
				entry["current_version"] = cur
			}
			// A contract whose plan calls an upstream this configuration
			// no longer declares, or a step endpoint it no longer
			// declares as captured, is stale too, whatever its version:
			// it is refused when presented (unbound). One whose steps'
			// endpoints changed only their headers or timeout is not:
			// presented, it sends and waits what this configuration
			// says (bind).
			runnable := true
			if rec, err := h.bind(c); err != nil {
				x.log().Warn("stale sweep: a contract's plan cannot be bound to this configuration", zap.String("synthesis_id", c.SynthesisID), zap.Error(err))
				runnable = false
			} else {
				if missing := rec.MissingUpstreams(); missing != nil {
					entry["missing_upstreams"] = missing
					runnable = false
				}
				if gone := rec.UnavailableEndpoints(); gone != nil {
					entry["unavailable_endpoints"] = gone
					runnable = false
				}
			}
			switch {
			case ok && cur == c.Lineage.RecipeVersion && runnable:
				entry["disposition"] = "unchanged"
			case mode == "grandfather":
				entry["disposition"] = "grandfathered"
			default:
				// Evicted either way: by this sweep, or just before it.
				entry["disposition"] = "evicted"
				ended, err := h.endContract(x, req.caller.Agent.ID, c, contractEnd{state: recipes.StateReleased, reason: "policy-change-invalidation", operator: operator,
					via: "REVOKE target=stale-contracts", requested: map[string]any{"target": "stale-contracts", "mode": mode, "synthesis_id": c.SynthesisID}})
				if err != nil {
					h.afterEnding(x, persistentLeft)
					h.storeFailed(x, err)
					return
				}
				persistentLeft = persistentLeft || ended && c.Persistent
			}
			list = append(list, entry)
		}
		h.afterEnding(x, persistentLeft)
		x.write(200, agtp.MediaAGTP, map[string]any{"status": 200, "mode": mode, "contracts": list}, nil)
	case "idempotency-key":
		h.settleKey(x, req, p, reason)
	case "":
		// A misspelt target ("targt") is named (helper-151).
		if e := onlyParams(p, x.query, "REVOKE", "target", "synthesis_id", "mode", "agent_id", "key", "action", "status", "result", "reason", "actor"); e != nil {
			e.Explanation = "REVOKE needs a target (contract, stale-contracts, idempotency-key); " + e.Explanation
			x.fail(e)
			return
		}
		x.fail(agtp.ParameterRequired.New("REVOKE needs a target"))
	default:
		x.fail(agtp.UnknownTarget.New(fmt.Sprintf("REVOKE target %q is not known (contract, stale-contracts, idempotency-key)", textcut.Clip(target))))
	}
}

// suspend serves SUSPEND with synthesis_id (caller release, spec §14.4
// path 1) or session_id (end a session's contracts, OP-20).
func (h *Engine) suspend(x *exchange, req *request, p map[string]any) {
	reason, e := strParam(p, "SUSPEND", "reason")
	if e == nil {
		_, e = sessionParam(p, "SUSPEND")
	}
	if e == nil {
		e = onlyParams(p, x.query, "SUSPEND", "synthesis_id", "session_id", "reason")
	}
	if e == nil && given(p, "synthesis_id") && given(p, "session_id") {
		e = agtp.InvalidParameter.New("SUSPEND takes synthesis_id (one contract) or session_id (a session's contracts), not both")
	}
	if e != nil {
		x.fail(e)
		return
	}
	if given(p, "synthesis_id") {
		c, _, ok := h.contractParam(x, req, p, contractAccess{what: "SUSPEND", verb: "release"})
		if !ok {
			return
		}
		h.endNamed(x, req.caller.Agent.ID, c, contractEnd{state: recipes.StateReleased, reason: reason, via: "SUSPEND synthesis_id",
			requested: map[string]any{"target": "contract", "synthesis_id": c.SynthesisID}})
		return
	}
	if sid, _ := sessionParam(p, "SUSPEND"); sid != "" {
		// Each of the caller's contracts created under the session ends
		// exactly as a release by synthesis_id does (spec §14.4 path 1,
		// OP-20): one rcns_release and one negotiation record each.
		ids := []string{}
		persistentLeft := false
		held, err := h.sto.Contracts.List(x.ctx(), req.caller.Agent.ID)
		if err != nil {
			h.storeFailed(x, err)
			return
		}
		h.fenceLeases(x)
		for _, c := range held {
			if c.SessionID != sid {
				continue
			}
			ended, err := h.endContract(x, req.caller.Agent.ID, c, contractEnd{state: recipes.StateReleased, reason: reason, via: "SUSPEND session_id",
				requested: map[string]any{"target": "session", "session_id": sid, "synthesis_id": c.SynthesisID}})
			if err != nil {
				h.afterEnding(x, persistentLeft)
				h.storeFailed(x, err)
				return
			}
			if ended {
				ids = append(ids, c.SynthesisID)
				persistentLeft = persistentLeft || c.Persistent
			}
		}
		sort.Strings(ids)
		h.afterEnding(x, persistentLeft)
		x.write(200, agtp.MediaAGTP, map[string]any{"status": 200, "result": map[string]any{"session_id": sid, "released": ids}}, nil)
		return
	}
	if x.sessionID != "" {
		// The request's own session (the Session-ID header, the
		// envelope's session_id) names what it belongs to, not what to
		// end (helper-150: told it had none).
		x.fail(agtp.ParameterRequired.New("SUSPEND needs synthesis_id or session_id as a parameter (under \"parameters\", or in the query): the Session-ID header and the envelope's session_id name the request's own session, not the one to end"))
		return
	}
	x.fail(agtp.ParameterRequired.New("SUSPEND needs synthesis_id or session_id"))
}

// contractEnd says how a contract ends: the state it ends in and what
// its lifecycle event, negotiation record and log line carry.
type contractEnd struct {
	state     string         // recipes.StateReleased or recipes.StateRevoked
	reason    string         // the reason given, "" for none
	operator  string         // the operator named as actor, "" for none
	via       string         // the request that ended it, for the log line
	requested map[string]any // the requested side of the negotiation record
}

// endContract ends the live contract c as e says. Every request that
// ends contracts (SUSPEND by synthesis_id or by session_id, REVOKE, the
// stale sweep, the operator page's revoke) ends them here, so each gets one lifecycle event
// (rcns_release or rcns_revoke on the originator's stream, spec §14.4,
// §18), one negotiation record and one log line (held to the log budget
// when an agent's request ends it). It returns false, and
// records nothing, when c was no longer live (ended meanwhile), and the
// store's error when it could not end it. The caller then calls
// afterEnding once. actor is the Agent-ID of the caller that ends it
// (the event's actor_agent_id), "" for the operator page (x.operator).
func (h *Engine) endContract(x *exchange, actor string, c *recipes.Contract, e contractEnd) (bool, error) {
	// The reason and actor given are cut once, here, for the event, the
	// record and the log line alike (recordtext.go).
	e.reason, e.operator = recordedText(e.reason), recordedText(e.operator)
	var ended bool
	var err error
	if lf, ok := h.sto.Contracts.(store.LeaseFence); ok {
		// afterEnding waits for the fence, also when c had ended
		// already: a concurrent request may have ended it a moment ago
		// and still be waiting for its own (helper-62).
		var fence time.Duration
		ended, fence, err = lf.EndFenced(x.ctx(), c, e.state)
		if err == nil {
			x.fenceFor(fence)
		}
	} else {
		ended, err = h.sto.Contracts.End(x.ctx(), c, e.state)
	}
	if err != nil {
		return false, err
	}
	if !ended {
		return false, nil
	}
	event, kind := records.EventRelease, records.KindRelease
	if e.state == recipes.StateRevoked {
		event, kind = records.EventRevoke, records.KindRevoke
	}
	h.lifecycleEvent(event, c, actor, e.reason, e.operator)
	h.negotiationRecord(x, kind, records.OutcomeAccepted, e.reason, e.requested,
		map[string]any{"synthesis_id": c.SynthesisID, "state": e.state})
	// An agent's request ends contracts at the rate it sends them: its
	// lines are held to the log budget. The operator page's are not.
	l := x.log()
	if x.operator == nil {
		l = x.agentLog("contract-" + e.state)
	}
	if l != nil {
		l.Info("rcns contract "+e.state, zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
			zap.String("originating_agent_id", c.OriginatingAgentID), zap.String("via", e.via), zap.String("reason", e.reason))
	}
	return true, nil
}

// endNamed ends the contract c a request named by synthesis_id (REVOKE
// target=contract, SUSPEND synthesis_id) and answers 200 with the state
// c is in: e.state, or, when c had already ended (noop: true), the state
// it ended in (revoked, released or expired, as INSPECT reports it),
// never the one this request would have set (spec §14.4).
func (h *Engine) endNamed(x *exchange, actor string, c *recipes.Contract, e contractEnd) {
	ended, err := h.endContract(x, actor, c, e)
	if err != nil {
		h.storeFailed(x, err)
		return
	}
	noop := !ended
	h.afterEnding(x, !noop && c.Persistent)
	state := e.state
	if noop {
		if state, err = h.sto.Contracts.State(x.ctx(), c); err != nil {
			h.storeFailed(x, err)
			return
		}
	}
	x.write(200, agtp.MediaAGTP, map[string]any{"status": 200, "result": map[string]any{"synthesis_id": c.SynthesisID, "state": state, "noop": noop}}, nil)
}

// fenceLeases moves x.fence to the store's ListFence from now when it
// keeps leases (store.LeaseFence): afterEnding then waits for it. A
// request that ends the contracts a List finds calls it after the
// List, since a contract a concurrent request ended a moment before is
// not listed, and that request may still be waiting for its leases
// (helper-63: SUSPEND session_id answered "released": [] at once, and
// a leasing node still ran the contract; helper-67: on a node whose
// own lease is shorter than another's). endContract fences each End.
func (h *Engine) fenceLeases(x *exchange) {
	if lf, ok := h.sto.Contracts.(store.LeaseFence); ok {
		x.fenceFor(lf.ListFence())
	}
}

// fenceFor moves x.fence to d from now, unless it is later already.
func (x *exchange) fenceFor(d time.Duration) {
	if d <= 0 {
		return
	}
	if t := time.Now().Add(d); t.After(x.fence) {
		x.fence = t
	}
}

// afterEnding follows endContract calls: it updates the live-contract
// gauge and, when a persistent contract ended (persistentLeft), rebuilds
// the manifest it leaves (which bumps AGTP-API-Version, spec §15.4);
// then it waits until x.fence, the end of any lease a node may hold on
// a contract the calls ended or found ended (store.LeaseFence), so that
// the answer that follows it finds every node refusing the contract.
func (h *Engine) afterEnding(x *exchange, persistentLeft bool) {
	if persistentLeft {
		if err := h.buildManifest(); err != nil {
			h.logger.Error("rebuilding the manifest after a persistent contract ended", zap.Error(err))
		}
	}
	h.contractsChanged(x.ctx())
	// The store's leases on the contracts ended run out before the
	// answer (store.LeaseFence): at most a second
	// (redisstore.MaxContractLease), waited whatever the request's
	// context says (the operator page's has a deadline that must not
	// cut it short).
	if wait := time.Until(x.fence); wait > 0 {
		time.Sleep(wait)
	}
}
