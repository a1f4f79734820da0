package caddymodule

import (
	"fmt"
	"math"
	"math/bits"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// params returns a built-in's parameters: the envelope's "parameters"
// merged with top-level body keys (spec OP-25); a key given both ways
// with different values is 400.
func params(req *request) (map[string]any, *wireError) {
	out, e := envelopeParameters(req)
	if e != nil {
		return nil, e
	}
	for k, v := range req.body {
		if envelopeKeys[k] {
			continue
		}
		if prev, ok := out[k]; ok && fmt.Sprint(prev) != fmt.Sprint(v) {
			return nil, errorf(400, "parameter-conflict", fmt.Sprintf("parameter %q is given twice with different values", textcut.Clip(k)))
		}
		out[k] = v
	}
	return out, nil
}

// envelopeParameters returns the envelope's "parameters" object (a new
// empty map when absent or null); 400 invalid-envelope when it is not an
// object. The map is the decoded body's own, which this request alone
// holds: callers add the query, path and top-level parameters to it in
// place instead of copying it.
func envelopeParameters(req *request) (map[string]any, *wireError) {
	p, ok := req.body["parameters"]
	if !ok || p == nil {
		return map[string]any{}, nil
	}
	obj, ok := p.(map[string]any)
	if !ok {
		return nil, errorf(400, "invalid-envelope", "\"parameters\" must be a JSON object")
	}
	return obj, nil
}

// Parameter readers. Every built-in parameter is read by the one reader
// of its type, so a bad value is refused the same way wherever it
// appears. A parameter with a reason of its own (limit: invalid-limit,
// cursor: invalid-cursor, requested_duration: invalid-duration,
// synthesis_id: invalid-synthesis-id, mode: invalid-mode) reports every
// bad value, wrong JSON type included, with it; any other parameter
// reports 400 invalid-parameter. Absent and JSON null both mean "not
// given".

// given reports whether parameter name is present and not null.
func given(p map[string]any, name string) bool {
	v, ok := p[name]
	return ok && v != nil
}

// typedString reads the optional string parameter name of the
// built-in what: "" when not given; 400 reason when given as another
// JSON type.
func typedString(p map[string]any, what, name, reason string) (string, *wireError) {
	v := p[name]
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", errorf(400, reason, fmt.Sprintf("%s: parameter %s must be a string, not %s", what, name, schema.JSONTypeName(v)))
	}
	return s, nil
}

// strParam reads an optional string parameter: "" when not given, 400
// invalid-parameter when another JSON type (so a target of 5 is not
// reported as a missing target).
func strParam(p map[string]any, what, name string) (string, *wireError) {
	return typedString(p, what, name, "invalid-parameter")
}

// boolParam reads an optional boolean parameter: false when not given,
// 400 invalid-parameter when another JSON type ("true" is not true).
func boolParam(p map[string]any, what, name string) (bool, *wireError) {
	v := p[name]
	if v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, errorf(400, "invalid-parameter", fmt.Sprintf("%s: parameter %s must be true or false, not %s", what, name, schema.JSONTypeName(v)))
	}
	return b, nil
}

// agentParam reads an optional agent_id parameter: "" when not given,
// 400 invalid-parameter unless a canonical Agent-ID (64 lowercase hex).
// The check is syntax only: it says nothing of which agents exist.
func agentParam(p map[string]any, what string) (string, *wireError) {
	id, e := strParam(p, what, "agent_id")
	if e != nil || !given(p, "agent_id") {
		return "", e
	}
	if !policy.ValidAgentID(id) {
		return "", errorf(400, "invalid-parameter", what+": parameter agent_id must be a canonical Agent-ID (64 lowercase hexadecimal characters)")
	}
	return id, nil
}

// sessionParam reads a session_id parameter: "" when not given (absent
// or null), else 400 invalid-session-id unless it is a string of the
// Session-ID form, the same refusal as the header and the envelope's
// session_id (no contract can belong to any other value).
func sessionParam(p map[string]any, what string) (string, *wireError) {
	if !given(p, "session_id") {
		return "", nil
	}
	return sessionValue(p["session_id"], what+": parameter session_id")
}

// invalidLimit is the refusal of every bad limit.
func invalidLimit() *wireError {
	return errorf(400, "invalid-limit", fmt.Sprintf("limit must be a positive integer (at most %d entries are served: a larger limit is served as %d)", maxPageLimit, maxPageLimit))
}

// limitValue is the one reader of a listing's limit (DISCOVER /methods
// and /contracts, INSPECT target=lifecycle): a positive integer, given as
// decimal digits in the query (inQuery) or as a JSON number in the body
// parameters. A limit above maxPageLimit is served as maxPageLimit;
// anything else (0, negative, fractional, not a number) is 400
// invalid-limit.
func limitValue(v any, inQuery bool) (int, *wireError) {
	var n float64
	switch t := v.(type) {
	case string:
		if !inQuery || t == "" || strings.Trim(t, "0123456789") != "" {
			return 0, invalidLimit()
		}
		i, err := strconv.Atoi(t)
		if err != nil { // digits only: out of int range, so above the maximum
			i = maxPageLimit
		}
		n = float64(i)
	case float64:
		if inQuery || t != math.Trunc(t) {
			return 0, invalidLimit()
		}
		n = t
	default:
		return 0, invalidLimit()
	}
	if n < 1 {
		return 0, invalidLimit()
	}
	return int(min(n, maxPageLimit)), nil
}

// synthesisParam reads a synthesis_id parameter: missing → 400
// parameter-required, malformed → 400 invalid-synthesis-id.
func synthesisParam(x *exchange, p map[string]any, what string) (string, bool) {
	v, present := p["synthesis_id"]
	id, isString := v.(string)
	switch {
	case !present || v == nil:
		x.fail(errorf(400, "parameter-required", what+" needs synthesis_id"))
		return "", false
	case !isString:
		x.fail(errorf(400, "invalid-synthesis-id", fmt.Sprintf("%s: parameter synthesis_id must be a string, not %s", what, schema.JSONTypeName(v))))
		return "", false
	}
	if !recipes.ValidSynthesisID(id) {
		x.fail(errorf(400, "invalid-synthesis-id", "a synthesis id is 1-128 characters of A-Z a-z 0-9 . _ ~ -"))
		return "", false
	}
	return id, true
}

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
func (h *Handler) contractParam(x *exchange, req *request, p map[string]any, a contractAccess) (*recipes.Contract, string, bool) {
	id, ok := synthesisParam(x, p, a.what)
	if !ok {
		return nil, "", false
	}
	c, state, found := h.st.contracts.Inspect(id)
	if !found {
		x.fail(errorf(404, "contract-not-found", "no contract with this synthesis id is known"))
		return nil, "", false
	}
	if c.OriginatingAgentID != req.caller.Agent.ID && !(a.inspectAll && h.inspectAll(req)) {
		who := "the originating agent"
		if a.inspectAll {
			who += " or a caller carrying inspect:all"
		}
		x.fail(errorf(403, "forbidden", fmt.Sprintf("only %s may %s this contract", who, a.verb)))
		return nil, "", false
	}
	return c, state, true
}

// builtin serves INSPECT, REVOKE, SUSPEND and PROPOSE at "/" (spec
// §14.4, §15, §17.3).
func (h *Handler) builtin(x *exchange, req *request) {
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

// builtinQueryParams are the parameters of INSPECT, REVOKE, SUSPEND
// and PROPOSE that may be given in the query as well as in the body
// (docs/agent-guide.md): the string-valued ones, and persistent, so that
// a query persistent=true is refused as not a boolean instead of being
// ignored. limit and cursor are read from the query by listingParam,
// which parses their string form there. Other query keys are not read.
var builtinQueryParams = []string{"target", "synthesis_id", "attempt_id", "agent_id", "session_id",
	"reason", "actor", "mode", "requested_duration", "persistent"}

// queryParams adds the builtinQueryParams given in the query q (the last
// value of a repeated key, spec §2.1) to the body parameters p. One
// given in both with different values is 400 parameter-conflict, as
// limit and cursor are (listingParam).
func queryParams(q url.Values, p map[string]any) *wireError {
	if len(q) == 0 {
		return nil
	}
	for _, name := range builtinQueryParams {
		qv, ok := queryValue(q, name)
		if !ok {
			continue
		}
		if given(p, name) {
			if !sameParam(name, p[name], qv) {
				return errorf(400, "parameter-conflict", fmt.Sprintf("parameter %q is given in the query and in the body with different values", name))
			}
			continue
		}
		p[name] = qv
	}
	return nil
}

// sameParam reports whether a body value and the query's text of the
// same parameter say the same thing: equal strings, a boolean and its
// "true"/"false", a number and its decimal text, or two
// requested_duration forms of one duration ("1h" and "PT1H"). The body
// value keeps its own type, so a mistyped one is still refused by the
// parameter's own check.
func sameParam(name string, body any, query string) bool {
	switch v := body.(type) {
	case string:
		if v == query {
			return true
		}
		if name == "requested_duration" {
			a, errA := parseRequestedDuration(v)
			b, errB := parseRequestedDuration(query)
			return errA == nil && errB == nil && a == b
		}
		return false
	case bool:
		return strconv.FormatBool(v) == query
	case float64:
		q, err := strconv.ParseFloat(query, 64)
		return err == nil && q == v
	}
	return false
}

func (h *Handler) inspectAll(req *request) bool {
	return req.caller.Effective().Covers(scopeInspectAll)
}

// inspect serves INSPECT target=contract and target=rcns-attempt (spec
// §17.3).
func (h *Handler) inspect(x *exchange, req *request, p map[string]any) {
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
		body := &contractAnswer{members: c.Summary(), endpoint: c.EndpointJSON}
		body.members["target"] = "contract"
		body.members["state"] = state
		x.write(200, mediaAGTP, body, nil)
	case "rcns-attempt":
		id, e := strParam(p, "INSPECT target=rcns-attempt", "attempt_id")
		if e != nil {
			x.fail(e)
			return
		}
		if id == "" {
			x.fail(errorf(400, "parameter-required", "INSPECT target=rcns-attempt needs attempt_id"))
			return
		}
		rec, found := h.st.attempts.get(id)
		if !found {
			x.fail(errorf(404, "attempt-not-found", "no attempt record with this id (unknown or evicted from the bounded buffer)"))
			return
		}
		if rec.AgentID != req.caller.Agent.ID && !h.inspectAll(req) {
			x.fail(errorf(403, "forbidden", "only the agent that made the attempt or a caller carrying inspect:all may read it"))
			return
		}
		body := map[string]any{"target": "rcns-attempt", "attempt_id": rec.ID, "method": rec.Method, "path": rec.Path,
			"agent_id": rec.AgentID, "trust_tier": rec.TrustTier, "locks": rec.Locks, "reason": rec.Reason,
			"explanation": rec.Explanation, "at": rec.At}
		x.write(200, mediaAGTP, body, nil)
	case "":
		x.fail(errorf(400, "parameter-required", "INSPECT needs a target"))
	case "lifecycle":
		// Parameters are checked before access: a malformed agent_id
		// or limit is 400 for anyone (a syntax check reveals nothing).
		agent, e := agentParam(p, "INSPECT target=lifecycle")
		if e != nil {
			x.fail(e)
			return
		}
		limit, e := listingParam(x.query, p, "limit", defaultPageLimit, limitValue)
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
			x.fail(errorf(400, "invalid-cursor", fmt.Sprintf("INSPECT target=lifecycle has no pages: it returns the newest limit events (at most %d); drop cursor", maxPageLimit)))
			return
		}
		if agent == "" {
			agent = req.caller.Agent.ID
		}
		if agent != req.caller.Agent.ID && !h.inspectAll(req) {
			x.fail(errorf(403, "forbidden", "only the agent itself or a caller carrying inspect:all may read its lifecycle stream"))
			return
		}
		entries := h.st.records.lifecycle.List(agent, limit)
		if entries == nil {
			entries = []map[string]any{}
		}
		x.write(200, mediaAGTP, map[string]any{"target": "lifecycle", "agent_id": agent, "entries": entries}, nil)
	case "audit", "chain_head":
		x.fail(errorf(501, "not-implemented", "INSPECT target="+target+" is not implemented by this gateway yet"))
	default:
		x.fail(errorf(400, "unknown-target", fmt.Sprintf("INSPECT target %q is not known (contract, rcns-attempt, lifecycle)", textcut.Clip(target))))
	}
}

// revoke serves REVOKE target=contract and target=stale-contracts
// (spec §14.4 paths 2 and 4).
func (h *Handler) revoke(x *exchange, req *request, p map[string]any) {
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
		c, _, ok := h.contractParam(x, req, p, contractAccess{what: "REVOKE target=contract", verb: "revoke", inspectAll: true})
		if !ok {
			return
		}
		h.endNamed(x, req, c, contractEnd{state: recipes.StateRevoked, reason: reason, operator: actor, via: "REVOKE target=contract",
			requested: map[string]any{"target": "contract", "synthesis_id": c.SynthesisID}})
	case "stale-contracts":
		if !h.inspectAll(req) {
			x.fail(errorf(403, "forbidden", "REVOKE target=stale-contracts needs the inspect:all scope"))
			return
		}
		mode, e := typedString(p, "REVOKE target=stale-contracts", "mode", "invalid-mode")
		if e != nil {
			x.fail(e)
			return
		}
		if !given(p, "mode") {
			mode = h.OnPolicyChange
		}
		if mode != "grandfather" && mode != "invalidate" {
			x.fail(errorf(400, "invalid-mode", fmt.Sprintf("mode %q is not grandfather or invalidate", textcut.Clip(mode))))
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
		for _, c := range h.st.contracts.List("") {
			cur, ok := current[c.Lineage.RecipeName]
			entry := map[string]any{"synthesis_id": c.SynthesisID, "recipe_name": c.Lineage.RecipeName,
				"captured_version": c.Lineage.RecipeVersion, "current_version": nil}
			if ok {
				entry["current_version"] = cur
			}
			switch {
			case ok && cur == c.Lineage.RecipeVersion:
				entry["disposition"] = "unchanged"
			case mode == "grandfather":
				entry["disposition"] = "grandfathered"
			default:
				// Evicted either way: by this sweep, or just before it.
				entry["disposition"] = "evicted"
				if h.endContract(x, req, c, contractEnd{state: recipes.StateReleased, reason: "policy-change-invalidation", operator: operator,
					via: "REVOKE target=stale-contracts", requested: map[string]any{"target": "stale-contracts", "mode": mode, "synthesis_id": c.SynthesisID}}) {
					persistentLeft = persistentLeft || c.Persistent
				}
			}
			list = append(list, entry)
		}
		h.afterEnding(persistentLeft)
		x.write(200, mediaAGTP, map[string]any{"status": 200, "mode": mode, "contracts": list}, nil)
	case "":
		x.fail(errorf(400, "parameter-required", "REVOKE needs a target"))
	default:
		x.fail(errorf(400, "unknown-target", fmt.Sprintf("REVOKE target %q is not known (contract, stale-contracts)", textcut.Clip(target))))
	}
}

// suspend serves SUSPEND with synthesis_id (caller release, spec §14.4
// path 1) or session_id (end a session's contracts, OP-20).
func (h *Handler) suspend(x *exchange, req *request, p map[string]any) {
	reason, e := strParam(p, "SUSPEND", "reason")
	if e == nil {
		_, e = sessionParam(p, "SUSPEND")
	}
	if e == nil && given(p, "synthesis_id") && given(p, "session_id") {
		e = errorf(400, "invalid-parameter", "SUSPEND takes synthesis_id (one contract) or session_id (a session's contracts), not both")
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
		h.endNamed(x, req, c, contractEnd{state: recipes.StateReleased, reason: reason, via: "SUSPEND synthesis_id",
			requested: map[string]any{"target": "contract", "synthesis_id": c.SynthesisID}})
		return
	}
	if sid, _ := sessionParam(p, "SUSPEND"); sid != "" {
		// Each of the caller's contracts created under the session ends
		// exactly as a release by synthesis_id does (spec §14.4 path 1,
		// OP-20): one rcns_release and one negotiation record each.
		ids := []string{}
		persistentLeft := false
		for _, c := range h.st.contracts.List(req.caller.Agent.ID) {
			if c.SessionID != sid {
				continue
			}
			if h.endContract(x, req, c, contractEnd{state: recipes.StateReleased, reason: reason, via: "SUSPEND session_id",
				requested: map[string]any{"target": "session", "session_id": sid, "synthesis_id": c.SynthesisID}}) {
				ids = append(ids, c.SynthesisID)
				persistentLeft = persistentLeft || c.Persistent
			}
		}
		sort.Strings(ids)
		h.afterEnding(persistentLeft)
		x.write(200, mediaAGTP, map[string]any{"status": 200, "result": map[string]any{"session_id": sid, "released": ids}}, nil)
		return
	}
	x.fail(errorf(400, "parameter-required", "SUSPEND needs synthesis_id or session_id"))
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
// stale sweep) ends them here, so each gets one lifecycle event
// (rcns_release or rcns_revoke on the originator's stream, spec §14.4,
// §18), one negotiation record and one log line. It returns false, and
// records nothing, when c was no longer live (ended meanwhile). The
// caller then calls afterEnding once.
func (h *Handler) endContract(x *exchange, req *request, c *recipes.Contract, e contractEnd) bool {
	if !h.st.contracts.End(c.SynthesisID, e.state) {
		return false
	}
	event, kind := records.EventRelease, records.KindRelease
	if e.state == recipes.StateRevoked {
		event, kind = records.EventRevoke, records.KindRevoke
	}
	h.lifecycleEvent(event, c, req.caller.Agent.ID, e.reason, e.operator)
	h.negotiationRecord(x, kind, records.OutcomeAccepted, e.reason, e.requested,
		map[string]any{"synthesis_id": c.SynthesisID, "state": e.state})
	h.logger.Info("rcns contract "+e.state, zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
		zap.String("originating_agent_id", c.OriginatingAgentID), zap.String("via", e.via), zap.String("reason", e.reason))
	return true
}

// endNamed ends the contract c a request named by synthesis_id (REVOKE
// target=contract, SUSPEND synthesis_id) and answers 200 with the state
// c is in: e.state, or, when c had already ended (noop: true), the state
// it ended in (revoked, released or expired, as INSPECT reports it),
// never the one this request would have set (spec §14.4).
func (h *Handler) endNamed(x *exchange, req *request, c *recipes.Contract, e contractEnd) {
	noop := !h.endContract(x, req, c, e)
	h.afterEnding(!noop && c.Persistent)
	state := e.state
	if noop {
		state = h.st.contracts.State(c)
	}
	x.write(200, mediaAGTP, map[string]any{"status": 200, "result": map[string]any{"synthesis_id": c.SynthesisID, "state": state, "noop": noop}}, nil)
}

// afterEnding follows endContract calls: it updates the live-contract
// gauge and, when a persistent contract ended (persistentLeft), rebuilds
// the manifest it leaves (which bumps AGTP-API-Version, spec §15.4).
func (h *Handler) afterEnding(persistentLeft bool) {
	if persistentLeft {
		if err := h.buildManifest(); err != nil {
			h.logger.Error("rebuilding the manifest after a persistent contract ended", zap.Error(err))
		}
	}
	h.metrics.setActiveContracts(h.st.contracts.Len())
}

// proposalSummary is the requested side of a PROPOSE negotiation record.
func proposalSummary(p map[string]any) map[string]any {
	out := map[string]any{"persistent": false}
	src := p
	if ep, ok := p["endpoint"].(map[string]any); ok {
		src = ep
	}
	for _, k := range []string{"method", "path", "name", "description"} {
		if v, ok := src[k].(string); ok {
			out[k] = v
		}
	}
	if v, ok := p["name"].(string); ok {
		out["name"] = v
	}
	if v, ok := p["persistent"].(bool); ok {
		out["persistent"] = v
	}
	if v, ok := p["scope_requested"]; ok {
		out["scope_requested"] = v
	}
	return out
}

// persistentTTL is the lifetime of a persistent contract: it ends by
// REVOKE or SUSPEND, not by contract_ttl.
const persistentTTL = 100 * 365 * 24 * time.Hour

// negotiations tracks PROPOSE turns per Negotiation-ID (spec OP-35):
// after three rejections the negotiation keeps answering 463.
type negotiations struct {
	mu    sync.Mutex
	max   int
	order []string
	byID  map[string]*negotiation
}

type negotiation struct {
	agent      string
	rejections int
}

func newNegotiations(max int) *negotiations {
	return &negotiations{max: max, byID: map[string]*negotiation{}}
}

// turn returns the negotiation for id (a Negotiation-ID header echoed by
// agent), or a new one under a fresh UUID.
func (n *negotiations) turn(agent, id string) (string, *negotiation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ng, ok := n.byID[id]; ok && ng.agent == agent {
		return id, ng
	}
	id = uuid.NewString()
	ng := &negotiation{agent: agent}
	n.byID[id] = ng
	n.order = append(n.order, id)
	for len(n.order) > n.max {
		delete(n.byID, n.order[0])
		n.order = n.order[1:]
	}
	return id, ng
}

func (n *negotiations) reject(ng *negotiation) {
	n.mu.Lock()
	ng.rejections++
	n.mu.Unlock()
}

func (n *negotiations) rejections(ng *negotiation) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return ng.rejections
}

// The forms of requested_duration (spec §14.3: agtp-09's "24h" and
// "7d", and ISO 8601 durations): ISO 8601 durations of fixed length, in
// the grammar of RFC 3339 Appendix A (weeks alone, "P2W"; or days and
// time parts, "P1DT2H", "PT90M"), whose last part may carry a decimal
// fraction, with '.' or ',' as ISO 8601 allows ("PT1.5S", "P0,5D");
// whole days ("7d"); and Go durations ("30m", "1h30m", "1.5h"; no
// sign). ISO 8601 years and months are refused: their length varies.
var (
	isoDuration = regexp.MustCompile(`^P(?:(` + isoNumber + `)W|(?:(` + isoNumber + `)D)?(?:T(?:(` + isoNumber + `)H)?(?:(` + isoNumber + `)M)?(?:(` + isoNumber + `)S)?)?)$`)
	dayDuration = regexp.MustCompile(`^(\d+)d$`)
	goDuration  = regexp.MustCompile(`^(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$`)
)

// isoNumber is a number of an ISO 8601 duration part: digits, with an
// optional decimal fraction.
const isoNumber = `\d+(?:[.,]\d+)?`

// durationForms names the accepted requested_duration forms in refusals.
const durationForms = "a Go duration (30m, 1h30m, 1.5h), whole days (7d), or an ISO 8601 duration in weeks (P2W) or days, hours, minutes and seconds (P1DT2H, PT90M, PT1.5S; a fraction on the last part only; no years or months, whose length varies)"

// minRequestedDuration is the shortest requested_duration PROPOSE
// accepts: contract times are whole seconds (issued_at, expires_at), so
// a shorter grant would be expired when issued, yet spend the rcns
// budget.
const minRequestedDuration = time.Second

// maxDuration is the longest time.Duration: a requested_duration beyond
// it is read as maxDuration (and then bounded by contract_ttl like any
// long request), never wrapped around.
const maxDuration = time.Duration(math.MaxInt64)

// parseRequestedDuration parses a requested_duration in one of the
// forms above. A value too large for time.Duration saturates at
// maxDuration. The caller refuses a duration below
// minRequestedDuration.
func parseRequestedDuration(s string) (time.Duration, error) {
	if m := isoDuration.FindStringSubmatch(s); m != nil && s != "P" && !strings.HasSuffix(s, "T") {
		var d time.Duration
		fraction := false // a part with a fraction must be the last one
		for i, u := range []time.Duration{7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second} {
			if m[i+1] == "" {
				continue
			}
			if fraction {
				return 0, fmt.Errorf("bad duration %q: only the last part may have a fraction", s)
			}
			whole, frac, _ := strings.Cut(strings.Replace(m[i+1], ",", ".", 1), ".")
			d = addSaturated(d, mulSaturated(whole, u))
			if frac != "" {
				fraction = true
				d = addSaturated(d, fractionOf(frac, u))
			}
		}
		return d, nil
	}
	if m := dayDuration.FindStringSubmatch(s); m != nil {
		return mulSaturated(m[1], 24*time.Hour), nil
	}
	if goDuration.MatchString(s) {
		d, err := time.ParseDuration(s)
		if err != nil { // the grammar matched: only an overflow is left
			return maxDuration, nil
		}
		return d, nil
	}
	return 0, fmt.Errorf("bad duration %q", s)
}

// fractionOf is 0.digits × unit, rounded down to the nanosecond (digits
// are decimal digits; those past the 18th are dropped, which can only
// lower the result): a granted duration never exceeds the requested
// one, and a value just under a limit (PT0.999…S) stays under it.
func fractionOf(digits string, unit time.Duration) time.Duration {
	if len(digits) > 18 {
		digits = digits[:18]
	}
	n, _ := strconv.ParseUint(digits, 10, 64) // at most 18 digits: cannot fail
	den := uint64(1)
	for range digits {
		den *= 10
	}
	hi, lo := bits.Mul64(n, uint64(unit))
	q, _ := bits.Div64(hi, lo, den) // n < den, so hi < den and q < unit
	return time.Duration(q)
}

// mulSaturated is the decimal digits times unit, at most maxDuration.
func mulSaturated(digits string, unit time.Duration) time.Duration {
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > int64(maxDuration/unit) { // digits only: err is a range error
		return maxDuration
	}
	return time.Duration(n) * unit
}

// addSaturated is a + b for non-negative durations, at most maxDuration.
func addSaturated(a, b time.Duration) time.Duration {
	if a > maxDuration-b {
		return maxDuration
	}
	return a + b
}

// propose serves PROPOSE (spec §15.3 order; ARCHITECTURE.md "PROPOSE").
func (h *Handler) propose(x *exchange, req *request, p map[string]any) {
	negID, ng := h.st.negotiations.turn(req.caller.Agent.ID, headerGet(x.r, "Negotiation-ID"))
	hdr := map[string]string{"Negotiation-ID": negID}
	var rd string              // requested_duration, once read
	var grantedDuration string // the answer's granted_duration, once granted
	x.beforeWrite = func(int) {
		if x.replayed {
			return
		}
		requested := proposalSummary(p)
		requested["negotiation_id"] = negID
		if x.minted != nil {
			granted := grantedOf(x.minted, x.minted.Persistent)
			if rd != "" {
				requested["requested_duration"] = rd
			}
			if grantedDuration != "" { // the answer's own value
				granted["granted_duration"] = grantedDuration
			}
			h.negotiationRecord(x, records.KindPropose, records.OutcomeAccepted, "", requested, granted)
			return
		}
		h.negotiationRecord(x, records.KindPropose, records.OutcomeRefused, x.reason, requested, nil)
	}
	// Every error answer of PROPOSE, the budget's and the
	// Idempotency-Key's included, names the negotiation, in its body and
	// its Negotiation-ID header.
	x.failFields = map[string]any{"negotiation_id": negID}
	x.failHeaders = hdr
	reject := func(reason, explanation string) {
		h.st.negotiations.reject(ng)
		x.fail(&wireError{Status: policy.StatusProposalRejected, Reason: reason, Explanation: explanation})
	}
	if !h.synthesisEnabled() {
		reject("synthesis-disabled", "this server does not synthesize endpoints (RCNS is disabled or policies.synthesis_enabled is false)")
		return
	}
	if h.st.negotiations.rejections(ng) >= 3 {
		reject("policy-refused", "this negotiation was rejected three times; ESCALATE instead of proposing again (agtp-09 §8.4.1)")
		return
	}
	ep, hasEP := p["endpoint"]
	_, hasName := p["name"]
	if hasEP && hasName {
		x.fail(errorf(400, "ambiguous-body", "a proposal carries either endpoint (wrapped form) or name (legacy form), not both"))
		return
	}
	var prop map[string]any
	switch {
	case hasEP:
		obj, ok := ep.(map[string]any)
		if !ok {
			x.fail(errorf(400, "invalid-proposal", "endpoint must be a JSON object"))
			return
		}
		prop = obj
	case hasName:
		prop = p
	default:
		x.fail(errorf(400, "invalid-proposal", "a proposal needs endpoint (wrapped form) or name, method and path (legacy form)"))
		return
	}
	method, _ := prop["method"].(string)
	path, _ := prop["path"].(string)
	if method == "" || path == "" {
		// Name what is wrong: a member missing (or empty) reads
		// differently from one of the wrong JSON type.
		var probs []string
		for _, k := range []string{"method", "path"} {
			switch v, ok := prop[k]; {
			case !ok || v == nil || v == "":
				probs = append(probs, k+" is missing")
			default:
				if _, isStr := v.(string); !isStr {
					probs = append(probs, k+" must be a string, not "+schema.JSONTypeName(v))
				}
			}
		}
		x.fail(errorf(400, "invalid-proposal", "the proposed endpoint needs method and path as strings: "+strings.Join(probs, "; ")))
		return
	}
	// A proposed path is bounded as a DISCOVER body target is: a
	// request-line path is bounded by the header limit, this one only by
	// the body's, and it is echoed in every error answer below.
	if len(path) > maxTargetBytes {
		x.fail(errorf(400, "invalid-proposal", fmt.Sprintf("the proposed path is %d bytes; at most %d are accepted", len(path), maxTargetBytes)))
		return
	}
	// The error body's method and path are the request's own (PROPOSE
	// and "/", spec §19); from here on every error answer names the
	// proposal's pair in fields of its own (a method longer than a
	// method token can be is cut, as in explanations).
	x.failFields["proposed_method"], x.failFields["proposed_path"] = textcut.Clip(method), path
	// The other parameters are read before anything is spent (the
	// Idempotency-Key claim, the rcns budget).
	rd, e := typedString(p, "PROPOSE", "requested_duration", "invalid-duration")
	var persistent bool
	if e == nil {
		persistent, e = boolParam(p, "PROPOSE", "persistent")
	}
	if e != nil {
		x.fail(e)
		return
	}
	if given(p, "session_id") { // agtp-09 §8.5.3: below the Session-ID header and the envelope's
		sid, e := sessionValue(p["session_id"], "PROPOSE: parameter session_id")
		if e != nil {
			x.fail(e)
			return
		}
		x.adoptSession(sid, sessionFromParameters)
	}
	var requested time.Duration
	if given(p, "requested_duration") {
		d, err := parseRequestedDuration(rd)
		switch {
		case err != nil:
			x.fail(errorf(400, "invalid-duration", "requested_duration must be "+durationForms))
			return
		case d < minRequestedDuration:
			x.fail(errorf(400, "invalid-duration", fmt.Sprintf("requested_duration must be at least %v: a shorter contract would expire before it could be presented", minRequestedDuration)))
			return
		}
		requested = d
	}
	if !h.claim(x, req) {
		return
	}
	if !h.spend(x, req, h.gateRL) {
		return
	}
	// Step 1: method. A token outside the lexical rule is named as such,
	// as the same token sent as the request method is (ResolveMethod).
	if !policy.ValidMethodToken(method) {
		x.fail(&wireError{Status: policy.StatusMethodViolation, Reason: "invalid-method-token",
			Explanation: fmt.Sprintf("proposed method %q is not a valid AGTP method token (3 to 32 uppercase ASCII letters)", textcut.Clip(method)),
			Fields:      map[string]any{"method": textcut.Clip(method), "catalog_version": h.methods.Catalog.Version()}})
		return
	}
	if !h.methods.IsMethod(method) {
		x.fail(&wireError{Status: policy.StatusMethodViolation, Reason: "method-not-in-catalog",
			Explanation: fmt.Sprintf("proposed method %s is not in catalog %s nor a custom method", textcut.Clip(method), h.methods.Catalog.Version()),
			// A 459 names the method it refuses in "method" (spec §19:
			// 459 adds method, catalog_version): here the proposed one.
			Fields: map[string]any{"method": textcut.Clip(method), "catalog_version": h.methods.Catalog.Version()}})
		return
	}
	// Step 2: path grammar. The refusal's "path" field would be the
	// proposed path where the request's belongs: proposed_path has it.
	if ref := h.methods.CheckPath(path); ref != nil {
		e := fromRefusal(ref)
		delete(e.Fields, "path")
		e.Explanation = fmt.Sprintf("proposed path %q: %s", textcut.Clip(path), ref.Explanation)
		x.fail(e)
		return
	}
	// Step 3: semantic block.
	sem, given := prop["semantic"]
	if !given {
		x.fail(&wireError{Status: 400, Reason: "invalid-semantic", Explanation: "the semantic block is invalid: the proposed endpoint has no semantic block (an object of seven fields: intent, actor, outcome, capability, confidence, impact, is_idempotent)",
			Fields: map[string]any{"problems": []string{"missing semantic block"}}})
		return
	}
	if probs := schema.ValidateSemantic(sem); len(probs) > 0 {
		x.fail(&wireError{Status: 400, Reason: "invalid-semantic", Explanation: "the semantic block is invalid: " + strings.Join(probs, "; "),
			Fields: map[string]any{"problems": probs}})
		return
	}
	// Step 4: schemas. A compile error is quoted in at most
	// maxSchemaErrorBytes (the schema is the caller's).
	for _, k := range []string{"input_schema", "output_schema"} {
		if v, ok := prop[k]; ok {
			obj, isObj := v.(map[string]any)
			if !isObj {
				x.fail(errorf(400, "invalid-schema", k+" must be a JSON Schema object"))
				return
			}
			// Bounded in shape before the compile, whose cost grows
			// about cubically with nesting depth.
			if err := recipes.CheckProposedSchema(obj); err != nil {
				x.fail(&wireError{Status: 400, Reason: "invalid-schema", Explanation: fmt.Sprintf("%s is refused: %v", k, err),
					Fields: map[string]any{"schema": k, "limit_depth": recipes.MaxProposedSchemaDepth, "limit_nodes": recipes.MaxProposedSchemaNodes}})
				return
			}
			if _, err := recipes.CompileSchema(obj); err != nil {
				x.fail(errorf(400, "invalid-schema", fmt.Sprintf("%s is not a valid JSON Schema: %s", k, recipes.SchemaErrorText(err, maxSchemaErrorBytes))))
				return
			}
		}
	}
	if h.scopeRequired() && !req.caller.ScopeHeader {
		x.fail(scopeHeaderRequired())
		return
	}
	recipe := h.set.Match(method, path)
	// Step 5: authority. Negotiating needs rcns:negotiate (as at gate
	// lock 3); when a recipe could build the proposal, its scopes too.
	needs := []policy.Scope{policy.ScopeNegotiate}
	if recipe != nil {
		needs = append(needs, recipe.RequiredScopes...)
	}
	if ref := policy.CheckRequiredScopes(req.caller, needs); ref != nil {
		x.fail(fromRefusal(ref))
		return
	}
	// Step 6: capability envelope.
	if recipe == nil {
		reject("composition-impossible", fmt.Sprintf("no recipe can build %s %s from this server's endpoints; see DISCOVER /patterns", method, path))
		return
	}
	if recipe.Depth() > h.MaxSynthesisDepth {
		reject("composition-impossible", fmt.Sprintf("recipe %s needs %d steps; max_synthesis_depth is %d", recipe.Name, recipe.Depth(), h.MaxSynthesisDepth))
		return
	}
	// Step 7: policy: the trust tier bar of gate lock 4, then the recipe's own switch.
	var states policy.LockStates
	if ref := h.gate.Locks34(req.caller, &states); ref != nil {
		reject("policy-refused", "the agent's trust tier does not meet this server's min_trust_tier for synthesis")
		return
	}
	if !recipe.Propose {
		reject("policy-refused", fmt.Sprintf("the operator does not allow PROPOSE for %s %s", method, path))
		return
	}
	ttl := time.Duration(h.ContractTTL)
	var granted time.Duration
	if requested > 0 { // granted ≤ requested, bounded by contract_ttl (spec §14.3)
		// Contract times are whole seconds (issued_at, expires_at), so
		// the grant is too: a fraction is rounded down, and expires_at
		// − issued_at is exactly granted_duration (PT1.9S is granted 1s;
		// it ran 1.9 s past an issued_at cut to the second).
		ttl = min(ttl, requested).Truncate(time.Second)
		granted = ttl
	}
	granting := persistent && h.AllowPersistent
	if granting {
		ttl = persistentTTL
		granted = 0
	}
	c, err := h.mintContract(recipe, method, path, x, req, recipes.OriginPropose, ttl, granting)
	if err != nil {
		reject("policy-refused", err.Error())
		return
	}
	x.executed = true
	if granting {
		// A persistent synthesis changes the manifest: rebuild it, which
		// bumps AGTP-API-Version (spec §14.2, §15.4).
		if err := h.buildManifest(); err != nil {
			h.logger.Error("rebuilding the manifest after a persistent synthesis", zap.Error(err))
		}
	}
	x.minted = c
	h.lifecycleEvent(records.EventProposeAccepted, c, req.caller.Agent.ID, "", "")
	h.metrics.synthesis(recipe.Name, "propose", "previewed")
	h.metrics.setActiveContracts(h.st.contracts.Len())
	if persistent && !granting {
		h.logger.Info("persistent synthesis requested but not offered: granted a session-scoped contract (downgrade recorded)",
			zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID))
	}
	h.logger.Info("rcns proposal accepted", zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
		zap.String("recipe", recipe.Name), zap.String("negotiation_id", negID), zap.Bool("persistent_requested", persistent))
	body := contractBody(c)
	body.members["status"] = policy.StatusProposalApproved
	body.members["persistent"] = granting
	body.members["negotiation_id"] = negID
	if granted > 0 {
		grantedDuration = shortDuration(granted)
		body.members["granted_duration"] = grantedDuration
	}
	if x.taskID != "" {
		body.members["task_id"] = x.taskID
	}
	x.write(policy.StatusProposalApproved, mediaEndpoint, body, hdr)
}

// maxSchemaErrorBytes bounds the compiler's message a PROPOSE
// invalid-schema answer quotes (bytes).
const maxSchemaErrorBytes = 512
