package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
)

// present serves a request that presents a contract (spec §10 step 7,
// §14.1): the gate is skipped and no synthesis starts.
func (h *Engine) present(x *exchange, req *request, id string) {
	pr := store.PresentRequest{Presenter: req.caller.Agent.ID, SynthesisID: id, Method: x.method, Path: x.path,
		Key: req.idemKey, Claim: !h.scopeRequired() || req.caller.ScopeHeader}
	if req.idemKey != "" {
		pr.Fingerprint, pr.Holder = x.fingerprint(req), x.holder()
		h.awaitSettling(x, req.caller.Agent.ID, req.idemKey)
	}
	sp := x.startSpan(SpanPresentation)
	p, err := h.sto.Presenter.Present(x.ctx(), pr)
	sp.end()
	if err != nil {
		h.storeFailed(x, err)
		return
	}
	c, res := p.Contract, p.Lookup
	if res == recipes.LookupUnknown {
		h.metrics.presentation(viaSynthesisID, "not_found")
		x.fail(agtp.ContractNotFound.New("no contract with this synthesis id exists (unknown, released or swept)"))
		return
	}
	// Whose it is comes before how it ended: another agent learns
	// nothing of a contract's state (§10 step 7).
	if c.OriginatingAgentID != req.caller.Agent.ID {
		h.metrics.presentation(viaSynthesisID, "not_yours")
		h.refuse(x, req, nil, agtp.ContractNotYours.New("the contract is bound to another agent"))
		return
	}
	if res == recipes.LookupRevoked {
		h.metrics.presentation(viaSynthesisID, "revoked")
		h.refuse(x, req, nil, agtp.ContractRevoked.New("the contract has expired or was revoked; synthesize a new one"))
		return
	}
	if c.Method != x.method || c.Path != x.path {
		h.metrics.presentation(viaSynthesisID, "not_found")
		x.fail(agtp.ContractNotFound.New(fmt.Sprintf("the presented contract serves %s %s, not this pair", c.Method, c.Path)))
		return
	}
	// Whether it is still pending decides whether running it accepts
	// it (runContract); with a key, the key's stored answer is checked
	// against the presented contract, and a still-pending one's 461 may
	// be confirmed under it (claim, ClaimConfirming).
	x.presentedPending = p.State == recipes.StatePending
	if req.idemKey != "" {
		x.presentedID = c.SynthesisID
	}
	x.preclaimed = p.Claimed
	h.runContract(x, req, c, viaSynthesisID)
}

// How a request found the contract it runs under: its synthesis id
// (Contract-Synthesized, §10 step 7) or its (method, path) pair (Tier C,
// step 8b); the via label of caddy_rcns_contract_presentations_total.
const (
	viaSynthesisID = "synthesis_id"
	viaPair        = "pair"
)

// runContract executes a contract's captured plan and answers 200
// (spec §13.4 "Invocation under a contract"). It counts the
// presentation once: executed, failed, or not_run when it answered
// without running the plan (a refusal, or an idempotent replay).
func (h *Engine) runContract(x *exchange, req *request, c *recipes.Contract, via string) {
	outcome := "not_run"
	defer func() { h.metrics.presentation(via, outcome) }()
	if h.scopeRequired() && !req.caller.Scoped() {
		x.fail(scopeHeaderRequired())
		return
	}
	rec, err := h.bind(c)
	if err != nil {
		h.storeFailed(x, err)
		return
	}
	x.traceRecipe(rec)
	if e := unbound(c, rec); e != nil {
		h.refuse(x, req, nil, e)
		return
	}
	if ref := policy.CheckRequiredScopes(req.caller, rec.RequiredScopes); ref != nil {
		x.fail(agtp.FromRefusal(ref))
		return
	}
	if !h.claim(x, req, 0) { // first, as in invokeEndpoint
		return
	}
	in, e := x.input(req, nil, rec)
	if e != nil {
		x.fail(e)
		return
	}
	if f := rec.ValidateInput(in); f != nil {
		x.fail(failureError(f))
		return
	}
	if !h.spend(x, req, h.invokeRL) {
		return
	}
	// Every step's upstream credential, for the agent and owner that
	// present the contract now (never the minting ones), before any
	// step runs and before a pending contract is accepted: a refusal
	// runs nothing and leaves the contract as it was.
	creds, ok := h.resolveCredentials(x, req, recipeSteps(rec), c.SynthesisID, true)
	if !ok {
		return
	}
	if via == viaSynthesisID && x.presentedPending {
		// Presenting a confirm-first contract accepts it (spec §13.4),
		// but only a presentation that runs it: a refused one (scope,
		// input, budget) leaves it pending, so it still serves no pair.
		// One that was active when presented needs no activation (nor
		// a round trip to a shared store).
		activated, err := h.sto.Contracts.Activate(x.ctx(), c)
		if err != nil {
			h.storeFailed(x, err)
			return
		}
		if preview := claimPreview(x.claim); preview != nil && !activated {
			// This presentation took its key's 461 over to confirm the
			// contract, but another request accepted it meanwhile:
			// the key's preview stays, and is answered, as for a
			// contract already confirmed; nothing runs under the key.
			// (Unlike a replay found by claim, this one comes after the
			// invocation budget was spent: the race is rare, and
			// spending after the activation would let a refused
			// presentation accept the contract.)
			x.renewer.stop()
			h.release(context.WithoutCancel(x.ctx()), x.claim, x.log().With(zap.String("agent_id", x.agentID)))
			x.claim = nil
			h.metrics.idempotency("replay")
			x.replay(preview)
			return
		}
	}
	// Only now does the answer name the contract: every refusal above
	// ran nothing (spec §16.1).
	x.contract = contractRef(c)
	x.executed = true
	x.stateChanging = rec.StateChanging()
	out, ok := h.execute(x, c, rec, in, creds)
	if !ok {
		outcome = "failed"
		return
	}
	outcome = "executed"
	x.write(200, agtp.MediaAGTP, agtp.Envelope{Status: 200, TaskID: x.taskID, Result: out}, nil)
}

// claimPreview is the 461 preview claim took over, nil without a claim.
func claimPreview(c store.Claim) *idempotency.Response {
	if c == nil {
		return nil
	}
	return c.Preview()
}

// contractRef is what an answer produced by running c says of it
// (Contract-Synthesized and the Attribution-Record fields, spec §16.1).
func contractRef(c *recipes.Contract) idempotency.ContractRef {
	return idempotency.ContractRef{SynthesisID: c.SynthesisID, ContractHash: c.ContractHash, NegotiationOrigin: c.NegotiationOrigin}
}

// bind returns the recipe c runs under this configuration: the plan c
// captured (its recipe version and steps, RCNS §13.1) with each step's
// upstream resolved to the address, timeout and clients the running
// configuration gives that name, and each step's call settings (its
// endpoint's headers, the static upstream credential, and its timeout)
// taken from the endpoint the running configuration declares under the
// step's (method, path), whichever configuration or node minted c: a
// contract stores no credential. A plan loaded here resolves to the
// loaded recipe; another is rebuilt once and cached (recipes.Restorer).
// A step whose upstream is no longer declared, or whose endpoint is no
// longer declared with the terms c captured, leaves the recipe's
// MissingUpstreams or UnavailableEndpoints non-empty (the caller
// refuses it, unbound). The error wraps recipes.ErrPlan when the plan
// cannot be rebuilt here.
func (h *Engine) bind(c *recipes.Contract) (*recipes.Recipe, error) {
	plan, hash, err := c.Recipe.Plan()
	if err != nil {
		return nil, fmt.Errorf("%w: contract %s: %v", recipes.ErrPlan, c.SynthesisID, err)
	}
	return h.restorer.Restore(hash, plan)
}

// unbound is the refusal of a contract whose plan (bound to this
// configuration, rec) calls upstreams the running configuration no
// longer declares, or step endpoints it no longer declares with the
// terms the contract captured (removed, or changed in more than their
// headers, timeout or description: recipes.UnavailableEndpoints): 464
// composition-impossible naming them (missing_upstreams,
// unavailable_endpoints; docs/troubleshooting.md), nil when every step
// is bound. Nothing ran; the contract stays live and serves again if
// they are declared again as captured, and the stale sweep lists it.
func unbound(c *recipes.Contract, rec *recipes.Recipe) *agtp.Error {
	missing, gone := rec.MissingUpstreams(), rec.UnavailableEndpoints()
	if missing == nil && gone == nil {
		return nil
	}
	fields := map[string]any{}
	var what []string
	if missing != nil {
		fields["missing_upstreams"] = missing
		what = append(what, named("upstream", missing)+", which the gateway's configuration no longer declares")
	}
	if gone != nil {
		fields["unavailable_endpoints"] = gone
		what = append(what, named("endpoint", gone)+", which the gateway's configuration no longer declares as the contract captured it")
	}
	return agtp.CompositionImpossible.WithFields(fmt.Sprintf("contract %s calls %s; nothing was run: release it (SUSPEND with its synthesis_id) and call the pair again with Allow-RCNS: true, or PROPOSE, to synthesize a new contract; or ask the operator to declare them again",
		c.SynthesisID, strings.Join(what, ", and ")), fields)
}

// named is "KIND a" for one name, "KINDs a, b" for more.
func named(kind string, names []string) string {
	if len(names) == 1 {
		return kind + " " + names[0]
	}
	return kind + "s " + strings.Join(names, ", ")
}

// execute runs rec, the plan of c bound to this configuration (bind),
// with each step's upstream credential creds (resolveCredentials); on
// failure it writes the 422 composition_failed answer and returns
// false.
func (h *Engine) execute(x *exchange, c *recipes.Contract, rec *recipes.Recipe, in map[string]any, creds recipes.Credentials) (any, bool) {
	sp := x.startSpan(SpanRecipe)
	sp.set(AttrRecipe, rec.Name)
	ctx := recipes.WithCredentials(recipes.WithTraceParent(x.upstreamContext(), traceParent(x.in)), creds)
	start := time.Now()
	timeout := time.Duration(h.CompositionTimeout)
	if !x.planDeadline.IsZero() {
		// Resolving a credential took a call, and the deadline began
		// before it: the plan has what is left (at least 1 ns: 0 is no
		// deadline to Execute), and starts no step once it is gone.
		timeout = max(time.Until(x.planDeadline), time.Nanosecond)
	}
	out, reports, cf := rec.Execute(ctx, in, timeout)
	if cf != nil {
		sp.fail(cf.Cause.Code)
	}
	sp.end()
	h.metrics.recipeRun(rec, time.Since(start).Seconds(), reports)
	if cf != nil {
		fields := []zap.Field{zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
			zap.String("recipe", c.Lineage.RecipeName), zap.String("reason", cf.Cause.Code)}
		if cf.FailedStep != nil {
			fields = append(fields, zap.String("step", cf.FailedStep.Name), zap.String("upstream", cf.FailedStep.Endpoint.UpstreamName()))
		}
		if cf.Cause.Internal != nil {
			// A transport error or an operator's mapping error: for the
			// log only, never the answer (it may name hosts or jq).
			fields = append(fields, zap.NamedError("cause", cf.Cause.Internal))
		}
		if l := x.agentLog(cf.Cause.Code); l != nil {
			l.Log(failureLevel(cf.Cause), "composition failed", fields...)
		}
		details := cf.Details()
		body := map[string]any{"error": map[string]any{"code": recipes.ErrCompositionFailed, "details": details}}
		if cf.FailedStep != nil {
			body["failed_step"] = cf.FailedStep.Name
		}
		// The contract stays after a failed run (an optimistic one
		// included): it is the caller's to present again or release.
		// The answer says so itself, so that the 422 alone tells the
		// agent what it holds (cases/03).
		body["synthesis_id"] = c.SynthesisID
		state, err := h.sto.Contracts.State(x.ctx(), c)
		if err != nil {
			state = "unknown"
		}
		body["contract_state"] = state
		e := agtp.CompositionFailed.WithFields(cf.Explanation(), body)
		e.Retryable = cf.SideEffectFree && transient(cf.Cause)
		x.fail(e)
		return nil, false
	}
	return out, true
}

// mintContract mints and stores a contract with lifetime ttl.
func (h *Engine) mintContract(r *recipes.Recipe, method, path string, x *exchange, req *request, origin string, ttl time.Duration, persistent bool) (*recipes.Contract, error) {
	c, err := h.contractFor(r, method, path, x, req, origin, ttl, persistent)
	if err != nil {
		return nil, err
	}
	if _, err := h.sto.Contracts.Mint(x.ctx(), c, h.Mode); err != nil {
		// A *store.LimitError's text is the explanation; an error
		// wrapping store.ErrUnavailable is answered 503 by the caller.
		return nil, err
	}
	h.contractsChanged(x.ctx())
	return c, nil
}

// contractFor builds a new contract of r for (method, path) with
// lifetime ttl, not yet stored.
func (h *Engine) contractFor(r *recipes.Recipe, method, path string, x *exchange, req *request, origin string, ttl time.Duration, persistent bool) (*recipes.Contract, error) {
	hash, epJSON, err := r.ContractHashFor(method, path)
	if err != nil {
		return nil, fmt.Errorf("contract hash: %v", err)
	}
	now := h.now().UTC().Truncate(time.Second)
	return &recipes.Contract{
		SynthesisID: recipes.NewSynthesisID(), Method: method, Path: path, Recipe: r, EndpointJSON: epJSON,
		Lineage: r.Lineage(), ContractHash: hash, OriginatingAgentID: req.caller.Agent.ID, NegotiationOrigin: origin,
		IssuedAt: now, ExpiresAt: now.Add(ttl), SessionID: x.sessionID, Persistent: persistent,
	}, nil
}

// contractBody is the §13.4 body shared by 461 and 263.
func contractBody(c *recipes.Contract) *agtp.ContractAnswer {
	return &agtp.ContractAnswer{Endpoint: c.EndpointJSON, Members: map[string]any{
		"synthesis_id":       c.SynthesisID,
		"method":             c.Method,
		"path":               c.Path,
		"recipe_lineage":     c.Lineage,
		"contract_hash":      c.ContractHash,
		"negotiation_origin": c.NegotiationOrigin,
		"issued_at":          c.IssuedAt.Format(time.RFC3339),
		"expires_at":         c.ExpiresAt.Format(time.RFC3339),
	}}
}
