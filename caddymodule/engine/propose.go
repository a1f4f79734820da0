package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// propose serves PROPOSE (spec §15.3 order; ARCHITECTURE.md "PROPOSE").
func (h *Engine) propose(x *exchange, req *request, p map[string]any) {
	agent := req.caller.Agent.ID
	negID, rejections, err := h.negotiationTurn(x, agent)
	hdr := map[string]string{"Negotiation-ID": negID}
	var rd string              // requested_duration, once read
	var grantedDuration string // the answer's granted_duration, once granted
	// A turn past the budget is kept in the negotiation (counted, when
	// rejected) as its answer goes; one refused before it keeps nothing.
	counted, rejected := false, false
	x.beforeWrite = func(int) {
		if x.replayed {
			return
		}
		if counted {
			h.recordTurn(x, agent, negID, rejected)
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
	if err != nil { // the store did not answer: no negotiation was begun or continued
		h.storeFailed(x, err)
		return
	}
	reject := func(e *agtp.Error) {
		rejected = true
		x.fail(e)
	}
	if !h.synthesisEnabled() {
		reject(agtp.ProposalSynthesisOff.New("this server does not synthesize endpoints (RCNS is disabled or policies.synthesis_enabled is false)"))
		return
	}
	if rejections >= 3 {
		reject(agtp.ProposalPolicyRefused.New("this negotiation was rejected three times; ESCALATE instead of proposing again (agtp-09 §8.4.1)"))
		return
	}
	ep, hasEP := p["endpoint"]
	_, hasName := p["name"]
	if hasEP && hasName {
		x.fail(agtp.AmbiguousBody.New("a proposal carries either endpoint (wrapped form) or name (legacy form), not both"))
		return
	}
	var prop map[string]any
	switch {
	case hasEP:
		obj, ok := ep.(map[string]any)
		if !ok {
			x.fail(agtp.InvalidProposal.New("endpoint must be a JSON object"))
			return
		}
		prop = obj
	case hasName:
		prop = p
	default:
		x.fail(agtp.InvalidProposal.New("a proposal needs endpoint (wrapped form) or name, method and path (legacy form)"))
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
		x.fail(agtp.InvalidProposal.New("the proposed endpoint needs method and path as strings: " + strings.Join(probs, "; ")))
		return
	}
	// A proposed path is bounded as a DISCOVER body target is: a
	// request-line path is bounded by the header limit, this one only by
	// the body's, and it is echoed in every error answer below.
	if len(path) > MaxTargetBytes {
		x.fail(agtp.InvalidProposal.New(fmt.Sprintf("the proposed path is %d bytes; at most %d are accepted", len(path), MaxTargetBytes)))
		return
	}
	// The error body's method and path are the request's own (PROPOSE
	// and "/", spec §19); from here on every error answer names the
	// proposal's pair in fields of its own (a method longer than a
	// method token can be is cut, as in explanations).
	x.failFields["proposed_method"], x.failFields["proposed_path"] = textcut.Clip(method), path
	// The other parameters are read before anything is spent (the
	// Idempotency-Key claim, the rcns budget).
	rd, e := typedString(p, "PROPOSE", "requested_duration", agtp.InvalidDuration)
	var persistent bool
	if e == nil {
		persistent, e = boolParam(p, "PROPOSE", "persistent")
	}
	if e != nil {
		x.fail(e)
		return
	}
	if given(p, "session_id") { // agtp-09 §8.5.3: below the Session-ID header and the envelope's
		sid, e := agtp.SessionValue(p["session_id"], "PROPOSE: parameter session_id")
		if e != nil {
			x.fail(e)
			return
		}
		x.adoptSession(sid, sessionFromParameters)
	}
	var requested time.Duration
	if given(p, "requested_duration") {
		d, err := agtp.ParseRequestedDuration(rd)
		switch {
		case err != nil:
			x.fail(agtp.InvalidDuration.New("requested_duration must be " + agtp.DurationForms))
			return
		case d < agtp.MinRequestedDuration:
			x.fail(agtp.InvalidDuration.New(fmt.Sprintf("requested_duration must be at least %v: a shorter contract would expire before it could be presented", agtp.MinRequestedDuration)))
			return
		}
		requested = d
	}
	if !h.claim(x, req, 0) {
		return
	}
	if !h.spend(x, req, h.gateRL) {
		return
	}
	counted = true
	// Step 1: method. A token outside the lexical rule is named as such,
	// as the same token sent as the request method is (ResolveMethod).
	if !policy.ValidMethodToken(method) {
		x.fail(agtp.InvalidMethodToken.WithFields(fmt.Sprintf("proposed method %q is not a valid AGTP method token (3 to 32 uppercase ASCII letters)", textcut.Clip(method)), map[string]any{"method": textcut.Clip(method), "catalog_version": h.methods.Catalog.Version()}))
		return
	}
	if !h.methods.IsMethod(method) {
		x.fail(agtp.MethodNotInCatalog.WithFields(fmt.Sprintf("proposed method %s is not in catalog %s nor a custom method (%s)", textcut.Clip(method), h.methods.Catalog.Version(), policy.CatalogRule), map[string]any{"method": textcut.Clip(method), "catalog_version": h.methods.Catalog.Version()}))
		return
	}
	// Step 2: path grammar. The refusal's "path" field would be the
	// proposed path where the request's belongs: proposed_path has it.
	if ref := h.methods.CheckPath(path); ref != nil {
		e := agtp.FromRefusal(ref)
		delete(e.Fields, "path")
		e.Explanation = fmt.Sprintf("proposed path %q: %s", textcut.Clip(path), ref.Explanation)
		if strings.ContainsAny(path, "{}") {
			// A template segment: a contract serves one concrete pair.
			e.Explanation = strings.TrimSuffix(e.Explanation, ".") + "; a proposal names the concrete pair it will call (/guests/g-1, not /guests/{guest_id}): path templates are for the operator's endpoints"
		}
		x.fail(e)
		return
	}
	// Step 3: semantic block.
	sem, given := prop["semantic"]
	if !given {
		x.fail(agtp.InvalidSemantic.WithFields("the semantic block is invalid: the proposed endpoint has no semantic block (an object of seven fields: intent, actor, outcome, capability, confidence, impact, is_idempotent)", map[string]any{"problems": []string{"missing semantic block"}}))
		return
	}
	if probs := schema.ValidateSemantic(sem); len(probs) > 0 {
		x.fail(agtp.InvalidSemantic.WithFields("the semantic block is invalid: "+strings.Join(probs, "; "), map[string]any{"problems": probs}))
		return
	}
	// Step 4: schemas. A compile error is quoted in at most
	// maxSchemaErrorBytes (the schema is the caller's).
	for _, k := range []string{"input_schema", "output_schema"} {
		if v, ok := prop[k]; ok {
			obj, isObj := v.(map[string]any)
			if !isObj {
				x.fail(agtp.InvalidSchema.New(k + " must be a JSON Schema object"))
				return
			}
			// Bounded in shape before the compile, whose cost grows
			// about cubically with nesting depth.
			if err := recipes.CheckProposedSchema(obj); err != nil {
				x.fail(agtp.InvalidSchema.WithFields(fmt.Sprintf("%s is refused: %v", k, err), map[string]any{"schema": k, "limit_depth": recipes.MaxProposedSchemaDepth, "limit_nodes": recipes.MaxProposedSchemaNodes}))
				return
			}
			if _, err := recipes.CompileSchema(obj); err != nil {
				x.fail(agtp.InvalidSchema.New(fmt.Sprintf("%s is not a valid JSON Schema: %s", k, recipes.SchemaErrorText(err, MaxSchemaErrorBytes))))
				return
			}
		}
	}
	if h.scopeRequired() && !req.caller.Scoped() {
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
		x.fail(agtp.FromRefusal(ref))
		return
	}
	// Step 6: capability envelope.
	if recipe == nil {
		reject(agtp.ProposalNotComposable.New(fmt.Sprintf("no recipe can build %s %s from this server's endpoints; see DISCOVER /patterns", method, path)))
		return
	}
	if recipe.Depth() > h.MaxSynthesisDepth {
		reject(agtp.ProposalNotComposable.New(fmt.Sprintf("recipe %s needs %d steps; max_synthesis_depth is %d", recipe.Name, recipe.Depth(), h.MaxSynthesisDepth)))
		return
	}
	// Step 7: policy: the trust tier bar of gate lock 4, then the recipe's own switch.
	var states policy.LockStates
	if ref := h.gate.Locks34(req.caller, &states); ref != nil {
		reject(agtp.ProposalPolicyRefused.New("the agent's trust tier does not meet this server's min_trust_tier for synthesis"))
		return
	}
	if !recipe.Propose {
		reject(agtp.ProposalPolicyRefused.New(fmt.Sprintf("the operator does not allow PROPOSE for %s %s", method, path)))
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
	if errors.Is(err, store.ErrUnavailable) {
		h.storeFailed(x, err)
		return
	}
	if err != nil {
		reject(agtp.ProposalPolicyRefused.New(err.Error()))
		return
	}
	x.executed = true
	if granting {
		// A persistent synthesis changes the manifest: rebuild it, which
		// bumps AGTP-API-Version (spec §14.2, §15.4).
		if err := h.buildManifest(); err != nil {
			x.log().Error("rebuilding the manifest after a persistent synthesis", zap.Error(err))
		}
	}
	x.minted = c
	h.lifecycleEvent(records.EventProposeAccepted, c, req.caller.Agent.ID, "", "")
	h.metrics.synthesis(recipe.Name, "propose", "previewed")
	if persistent && !granting {
		if l := x.agentLog("persistent-downgraded"); l != nil {
			l.Info("persistent synthesis requested but not offered: granted a session-scoped contract (downgrade recorded)",
				zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID))
		}
	}
	if l := x.agentLog("proposal-accepted"); l != nil {
		l.Info("rcns proposal accepted", zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
			zap.String("recipe", recipe.Name), zap.String("negotiation_id", negID), zap.Bool("persistent_requested", persistent))
	}
	body := contractBody(c)
	body.Members["status"] = policy.StatusProposalApproved
	body.Members["persistent"] = granting
	body.Members["negotiation_id"] = negID
	if granted > 0 {
		grantedDuration = agtp.FormatDuration(granted)
		body.Members["granted_duration"] = grantedDuration
	}
	if x.taskID != "" {
		body.Members["task_id"] = x.taskID
	}
	x.write(policy.StatusProposalApproved, agtp.MediaEndpoint, body, hdr)
}

// MaxSchemaErrorBytes bounds the compiler's message a PROPOSE
// invalid-schema answer quotes (bytes).
const MaxSchemaErrorBytes = 512

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

// negotiationTurn begins x's turn in its negotiation (store.Negotiations,
// spec OP-35): the Negotiation-ID it echoed, in its canonical form, when
// the store keeps that negotiation for agent, with its count of
// rejected turns; else a new UUID (kept once the turn gets past the
// budget: recordTurn) and 0. An echoed value that is no UUID begins a
// new negotiation without a store lookup; one in another form (upper
// case, braces, urn:uuid:) is read as the UUID it writes. On a store
// error the ID returned is the echoed UUID (or the new one), for the
// 503's Negotiation-ID.
func (h *Engine) negotiationTurn(x *exchange, agent string) (string, int, error) {
	fresh := uuid.NewString()
	u, err := uuid.Parse(x.in.Get("Negotiation-ID"))
	if err != nil {
		return fresh, 0, nil
	}
	echoed := u.String()
	n, kept, err := h.sto.Negotiations.Turn(x.ctx(), agent, echoed)
	switch {
	case err != nil:
		return echoed, 0, err
	case !kept:
		return fresh, 0, nil
	}
	return echoed, n, nil
}

// recordTurn keeps agent's negotiation id after a turn past the budget,
// counting it when rejected. A store error is logged and the answer goes
// on: a new negotiation is then not kept (a later turn echoing it begins
// another), and a rejected turn not counted (the negotiation may take
// one more before its 463 policy-refused).
func (h *Engine) recordTurn(x *exchange, agent, id string, rejected bool) {
	if _, err := h.sto.Negotiations.Record(x.ctx(), agent, id, rejected); err != nil {
		x.log().Warn("a PROPOSE turn was not kept in its negotiation: the store did not take it", zap.String("agent_id", agent),
			zap.String("negotiation_id", id), zap.Bool("rejected", rejected), zap.Error(err))
	}
}
