package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
)

// gateway handles an unregistered pair (spec §10 step 9, §11).
func (h *Engine) gateway(x *exchange, req *request) {
	optIn := policy.AllowRCNS(x.in.Get("Allow-RCNS"))
	if optIn {
		defer func() {
			switch {
			case x.replayed, x.keyRefused:
			case x.minted != nil, x.joined != nil:
				h.metrics.gateEvaluation("accepted", "")
			default:
				h.metrics.gateEvaluation("refused", x.reason)
			}
		}()
	}
	if optIn {
		x.beforeWrite = func(int) {
			if x.replayed || x.keyRefused { // not evaluated: no record, whichever path a racer took
				return
			}
			requested := map[string]any{"method": x.method, "path": x.path, "allow_rcns": true}
			if c := cmp.Or(x.minted, x.joined); c != nil {
				h.negotiationRecord(x, records.KindGate, records.OutcomeAccepted, "", requested, grantedOf(c, false))
				return
			}
			h.negotiationRecord(x, records.KindGate, records.OutcomeRefused, x.reason, requested, nil)
		}
	}
	states, proceed, ref := h.gate.Locks12(optIn)
	if ref != nil {
		h.refuse(x, req, &states, agtp.FromRefusal(ref))
		return
	}
	if !proceed {
		h.metrics.lockRefusal(policy.LockCallerOptIn.String())
		var hint string
		if v, sent := x.in.Value("Allow-RCNS"); sent && !policy.KnownAllowRCNS(v) {
			hint = allowRCNSHint(v)
		}
		if len(h.set.MethodsForPath(x.path)) > 0 {
			x.fail(h.methodNotAllowed(x, fmt.Sprintf("no endpoint serves %s %s; the path is served under other methods%s", x.method, x.path, hint)))
			return
		}
		x.fail(agtp.NotFound.New(fmt.Sprintf("no endpoint serves %s %s%s", x.method, x.path, hint)))
		return
	}
	// Locks 1–2 are open: idempotent replay first, then the RCNS budget,
	// then locks 3–4 (spec §11.2, OP-4).
	if !h.claim(x, req, 0) {
		return
	}
	if h.scopeRequired() && !req.caller.Scoped() {
		x.fail(scopeHeaderRequired())
		return
	}
	if !h.spend(x, req, h.gateRL) {
		return
	}
	recipe, e := h.gateRefusal(x, req, &states)
	if e != nil {
		h.refuse(x, req, &states, e)
		return
	}
	in, e := x.input(req, nil, recipe)
	if e != nil {
		x.fail(e)
		return
	}
	if f := recipe.ValidateInput(in); f != nil {
		x.fail(failureError(f))
		return
	}
	c := x.premintC // built by gateMiss, minted by the pair's store call
	if x.premint == nil || c == nil || c.Recipe != recipe {
		x.premint = nil
		var err error
		if c, err = h.contractFor(recipe, x.method, x.path, x, req, recipes.OriginGate, time.Duration(h.ContractTTL), false); err != nil {
			h.refuse(x, req, &states, agtp.SynthesisError.New(err.Error()))
			return
		}
	}
	// Optimistic delivery runs the plan at once: every step's upstream
	// credential first, so a refusal mints nothing and runs nothing
	// (confirm-first resolves when the contract is presented).
	var creds recipes.Credentials
	if h.Mode != ModeConfirmFirst {
		var ok bool
		if creds, ok = h.resolveCredentials(x, req, recipeSteps(recipe), c.SynthesisID, true); !ok {
			h.unmint(x, c)
			return
		}
	}
	c, joined, err := h.gateContract(c, x)
	if errors.Is(err, store.ErrUnavailable) {
		h.storeFailed(x, err)
		return
	}
	if err != nil {
		h.refuse(x, req, &states, agtp.SynthesisError.New(err.Error()))
		return
	}
	if joined != "" {
		h.joinContract(x, req, c, joined)
		return
	}
	x.executed = true
	x.minted = c
	h.lifecycleEvent(records.EventProposeAccepted, c, req.caller.Agent.ID, "", "")
	if l := x.agentLog("synthesized"); l != nil {
		l.Info("rcns contract synthesized", zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
			zap.String("recipe", recipe.Name), zap.String("recipe_version", recipe.Version), zap.String("mode", h.Mode))
	}
	body := contractBody(c)
	if h.Mode == ModeConfirmFirst {
		h.metrics.synthesis(recipe.Name, ModeConfirmFirst, "previewed")
		body.Members["status"] = policy.StatusContractAvailable
		x.write(policy.StatusContractAvailable, agtp.MediaEndpoint, body, nil)
		return
	}
	x.contract = contractRef(c)
	x.stateChanging = c.Recipe.StateChanging()
	out, ok := h.execute(x, c, recipe, in, creds)
	if !ok {
		h.metrics.synthesis(recipe.Name, ModeOptimistic, "failed")
		return
	}
	h.metrics.synthesis(recipe.Name, ModeOptimistic, "executed")
	body.Members["status"] = policy.StatusProposalApproved
	body.Members["result"] = out
	if x.taskID != "" {
		body.Members["task_id"] = x.taskID
	}
	x.write(policy.StatusProposalApproved, agtp.MediaEndpoint, body, nil)
}

// gateRefusal is locks 3-4, the recipe match and its bounds: the
// refusal a gate request whose budget allowed it gets before its input
// is read, or the recipe it synthesizes from.
func (h *Engine) gateRefusal(x *exchange, req *request, states *policy.LockStates) (*recipes.Recipe, *agtp.Error) {
	if ref := h.gate.Locks34(req.caller, states); ref != nil {
		return nil, agtp.FromRefusal(ref)
	}
	recipe := h.set.Match(x.method, x.path)
	if recipe == nil {
		return nil, agtp.CompositionImpossible.Newf("no recipe can synthesize %s %s", x.method, x.path)
	}
	x.traceRecipe(recipe)
	if recipe.Depth() > h.MaxSynthesisDepth {
		return nil, agtp.CompositionImpossible.Newf("recipe %s needs %d steps; max_synthesis_depth is %d", recipe.Name, recipe.Depth(), h.MaxSynthesisDepth)
	}
	// Authority preservation, before any upstream call (spec §13.3).
	if ref := policy.CheckRequiredScopes(req.caller, recipe.RequiredScopes); ref != nil {
		return nil, agtp.FromRefusal(ref)
	}
	return recipe, nil
}

// credentialsFree reports whether the gate can run recipe's synthesis
// without resolving a credential that may refuse or call out: under
// confirm-first (resolved when presented), or when every step's
// upstream has no credential policy or a static one. Only then does
// gateMiss have the contract minted in the pair's store call: a
// credential refusal mints nothing.
func (h *Engine) credentialsFree(recipe *recipes.Recipe) bool {
	if h.Mode == ModeConfirmFirst {
		return true
	}
	for _, s := range recipe.Steps {
		switch h.credPolicies[s.Endpoint.UpstreamName()].(type) {
		case nil, upstreamauth.Static:
		default:
			return false
		}
	}
	return true
}

// unmint releases c when the pair's store call minted it for a request
// then refused (it serves no request), and forgets it.
func (h *Engine) unmint(x *exchange, c *recipes.Contract) {
	if m := x.premint; m != nil && x.premintC == c && m.Err == nil && m.Joined == nil {
		if _, err := h.sto.Contracts.End(context.WithoutCancel(x.ctx()), c, recipes.StateReleased); err != nil {
			x.log().Warn("releasing a contract minted for a refused request failed", zap.String("synthesis_id", c.SynthesisID), zap.Error(err))
		}
	}
	x.premint = nil
}

// gateInputValid reports whether gateway will take the request's input
// for recipe (x.input, then recipe.ValidateInput), computed on a copy
// of the envelope's parameters: x.input adds the query's values to the
// parameters it reads and converts text in place, which gateway, or
// the contract a pair lookup finds, then does on the request's own.
func (x *exchange) gateInputValid(req *request, recipe *recipes.Recipe) bool {
	cp := *req
	if req.body != nil {
		cp.body = maps.Clone(req.body)
		if p, ok := cp.body["parameters"].(map[string]any); ok {
			cp.body["parameters"] = maps.Clone(p)
		}
	}
	in, e := x.input(&cp, nil, recipe)
	return e == nil && recipe.ValidateInput(in) == nil
}

// gateMiss is what gateway will do for a request whose pair no active
// contract serves and whose claim, if any, executes, up to its first
// store write of its own: the budget it spends (nil: none) and the
// refusal whose attempt record it keeps (nil: none), so that the
// pair's store call (ResolvePair) does both with the lookup and the
// claim, in one round trip. It follows gateway's order: locks 1-2 (a
// refusal there spends nothing), the scope_required check (answered
// before the budget, keeping no record), the budget, then gateRefusal.
// Without a refusal, the contract a synthesis mints (mint: nil when
// its input is refused, a 400 or 422 that keeps no record) is made
// here too, for the call to mint it. gateway uses what the call did
// (x.prepaid, x.keptAttempt, x.premint). The attempt record and the
// contract are prepared only for a store that folds them into the call
// (store.Set.FoldsGate; the record not for one that leaves it,
// store.Set.LeavesAttempt): elsewhere they would be built, unused, on every
// request an active contract serves by pair (BenchmarkServe/e-pair).
func (h *Engine) gateMiss(x *exchange, req *request) (spend store.Limiter, attempt *store.Attempt, mint *recipes.Contract) {
	states, proceed, ref := h.gate.Locks12(policy.AllowRCNS(x.in.Get("Allow-RCNS")))
	var e *agtp.Error
	switch {
	case ref != nil:
		e = agtp.FromRefusal(ref)
	case !proceed, h.scopeRequired() && !req.caller.Scoped():
		return nil, nil, nil
	default:
		if h.gateRL != nil {
			spend = h.gateRL
		}
		var recipe *recipes.Recipe
		if recipe, e = h.gateRefusal(x, req, &states); e == nil {
			if h.sto.FoldsGate && h.credentialsFree(recipe) && x.gateInputValid(req, recipe) {
				mint, _ = h.contractFor(recipe, x.method, x.path, x, req, recipes.OriginGate, time.Duration(h.ContractTTL), false)
			}
			return spend, nil, mint
		}
	}
	if !h.sto.FoldsGate || h.sto.LeavesAttempt {
		return spend, nil, nil
	}
	rec := h.attemptRecord(x, req, &states, e)
	return spend, &rec, nil
}

// gateContract mints c, the gate synthesis's contract (contractFor), or
// finds the active one of the pair a concurrent first call of the same
// agent minted meanwhile (store.Contracts.MintForPair: a request a
// moment later would have run under it by pair, §10 step 8b), returned
// with its state in joined ("" when c was minted here).
func (h *Engine) gateContract(c *recipes.Contract, x *exchange) (_ *recipes.Contract, joined string, err error) {
	var state string
	var other *recipes.Contract
	if m := x.premint; m != nil && x.premintC == c {
		// The pair's store call minted it (gateMiss).
		state, other, err = m.State, m.Joined, m.Err
		x.premint = nil
	} else {
		state, other, err = h.sto.Contracts.MintForPair(x.ctx(), c, h.Mode)
	}
	if err != nil {
		return nil, "", err
	}
	if other != nil {
		return other, state, nil
	}
	h.contractsChanged(x.ctx())
	return c, "", nil
}

// joinContract serves a gate request with the active contract c (in
// state) a concurrent first call of the same agent for the same pair
// minted: it runs under it, as Tier C by pair would. No second contract
// is minted. A contract that ended meanwhile (state not active) is a
// 409 synthesis-in-flight: the retry synthesizes or finds the next.
func (h *Engine) joinContract(x *exchange, req *request, c *recipes.Contract, state string) {
	x.joined = c
	if l := x.agentLog("joined"); l != nil {
		l.Info("rcns gate request joined the contract a concurrent request minted", zap.String("agent_id", x.agentID),
			zap.String("synthesis_id", c.SynthesisID), zap.String("state", state))
	}
	if state == recipes.StateActive {
		h.runContract(x, req, c, viaPair)
		return
	}
	x.failWith(agtp.SynthesisInFlight.WithFields("a contract for this pair was synthesized for you by a concurrent request and ended before this one could run under it; nothing was executed; retry",
		map[string]any{"retry_after_seconds": 1, "synthesis_id": c.SynthesisID}), map[string]string{"Retry-After": "1"})
}

// refuse answers e, a gate or presentation refusal, and keeps its
// attempt record (spec §17.3): a 464 carries the record's id in
// RCNS-Attempt-Id (spec §11.1).
func (h *Engine) refuse(x *exchange, req *request, states *policy.LockStates, e *agtp.Error) {
	rec := h.attemptRecord(x, req, states, e)
	if states != nil {
		for i, st := range states {
			if st == policy.LockClosed {
				h.metrics.lockRefusal(policy.Lock(i + 1).String())
			}
		}
	}
	if k := x.keptAttempt; k != nil && sameAttempt(k, &rec) {
		// The pair's store call kept it (gateMiss).
		rec = *k
	} else if err := h.addAttempt(x.ctx(), rec); err != nil {
		// The refusal stands; only its record is missing.
		x.log().Warn("keeping an RCNS attempt record failed", zap.String("attempt_id", rec.ID), zap.Error(err))
	}
	x.keptAttempt = nil
	h.attemptsChanged(x.ctx())
	if e.Status == policy.StatusNoContract {
		e.AttemptID = rec.ID
	}
	if l := x.agentLog(e.Reason); l != nil {
		l.Info("rcns refusal", zap.String("agent_id", rec.AgentID), zap.String("attempt_id", rec.ID),
			zap.String("method", x.method), zap.String("reason", e.Reason))
	}
	x.fail(e)
}

// addAttempt keeps rec: off the answer path when the store can
// (store.AttemptsLater), else at once.
func (h *Engine) addAttempt(ctx context.Context, rec store.Attempt) error {
	if l, ok := h.sto.Attempts.(store.AttemptsLater); ok {
		return l.AddLater(ctx, rec)
	}
	return h.sto.Attempts.Add(ctx, rec)
}

// attemptRecord is the attempt record of refusal e (a new id, now).
func (h *Engine) attemptRecord(x *exchange, req *request, states *policy.LockStates, e *agtp.Error) store.Attempt {
	rec := store.Attempt{ID: recipes.NewAttemptID(), Method: x.method, Path: x.path, Reason: e.Reason,
		Explanation: e.Explanation, At: h.now().UTC().Format(time.RFC3339)}
	if req.caller != nil {
		rec.AgentID = req.caller.Agent.ID
		rec.TrustTier = int(req.caller.Agent.TrustTier)
	}
	if states != nil {
		rec.Locks = states.Map()
	}
	return rec
}

// sameAttempt reports whether the kept record k records the refusal
// of rec (all but the id and the time).
func sameAttempt(k, rec *store.Attempt) bool {
	return k.Method == rec.Method && k.Path == rec.Path && k.Reason == rec.Reason && k.Explanation == rec.Explanation &&
		k.AgentID == rec.AgentID && k.TrustTier == rec.TrustTier && maps.Equal(k.Locks, rec.Locks)
}

// spend takes one token of budget l for the caller (nil l: no budget).
// On refusal it answers 429 with Retry-After, RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers-10) and the §12.1 body.
func (h *Engine) spend(x *exchange, req *request, l store.Limiter) bool {
	if l == nil {
		return true
	}
	var d ratelimit.Decision
	if x.prepaid != nil {
		// Spent by the pair's store call (gateMiss).
		d, x.prepaid = *x.prepaid, nil
	} else {
		var err error
		if d, err = l.Allow(x.ctx(), req.caller.Agent.ID); err != nil {
			h.storeFailed(x, err)
			return false
		}
	}
	x.rateHeaders = map[string]string{"RateLimit-Policy": l.PolicyHeader(), "RateLimit": l.RateLimitHeader(d)}
	if d.Allowed {
		return true
	}
	h.metrics.rateLimited(l.Budget().Name)
	secs := ratelimit.RetryAfterSeconds(d)
	x.rateHeaders["Retry-After"] = strconv.Itoa(secs)
	scope := l.Budget().Name
	if l := x.agentLog(agtp.RateLimited.Token); l != nil {
		l.Info("rate limited", zap.String("agent_id", x.agentID), zap.String("budget", scope), zap.String("method", x.method))
	}
	x.fail(agtp.RateLimited.WithFields(fmt.Sprintf("the %s budget of this agent is spent; retry in %d s", scope, secs), map[string]any{"scope": scope, "retry_after_seconds": secs}))
	return false
}

// allowRCNSHint ends the explanation of the 404/405 answered for a
// pair no endpoint serves when Allow-RCNS has a value other than
// policy.AllowRCNSValues: the answer is the absent header's (RCNS §10
// step 9, §24 item 18: status, reason and no RCNS signal), and its
// explanation says the value was not read as an opt-in and names the
// accepted values (cases/04: the reference client's "optimistic" got a
// bare 404). It names neither the server's RCNS posture nor its mode.
func allowRCNSHint(v string) string {
	return fmt.Sprintf(`; Allow-RCNS %q is not a value this gateway understands and was read as no opt-in, like an absent header: the accepted values are "true" (let the gateway negotiate a contract for a pair no endpoint serves) and "false", case-sensitive`, textcut.Clip(v))
}
