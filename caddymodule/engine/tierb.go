package engine

import (
	"context"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// invokeEndpoint serves a Tier B endpoint (spec §10 step 8).
func (h *Engine) invokeEndpoint(x *exchange, req *request, ep *recipes.Endpoint, params map[string]string) {
	extra := map[string]string{}
	if ep.Deprecated != nil {
		extra["AGTP-Endpoint-Warning"] = EndpointWarning(ep)
	}
	if h.scopeRequired() && !req.caller.Scoped() {
		e := scopeHeaderRequired()
		x.failWith(e, extra)
		return
	}
	if ref := policy.CheckRequiredScopes(req.caller, ep.RequiredScopes); ref != nil {
		x.failWith(agtp.FromRefusal(ref), extra)
		return
	}
	// The Idempotency-Key first (spec §11.2 order): a key reused for
	// another request is that, whatever its input; a claim that ends in
	// a refusal below is released, not stored.
	if !h.claim(x, req, h.leaseFor(h.CallBound(ep))) { // a token exchange's wait included
		return
	}
	in, e := x.input(req, params, ep)
	if e != nil {
		x.failWith(e, extra)
		return
	}
	if f := ep.ValidateInput(in); f != nil {
		x.failWith(failureError(f), extra)
		return
	}
	if !h.spend(x, req, h.invokeRL) {
		return
	}
	// The upstream's credential for this caller, before the call: a
	// refusal runs nothing.
	creds, ok := h.resolveCredentials(x, req, endpointSteps(ep), "", false)
	if !ok {
		return
	}
	x.executed = true
	x.stateChanging = schema.StateChanging(ep.Semantic.Impact)
	sp := x.startSpan(SpanUpstream)
	sp.set(AttrUpstream, ep.UpstreamName())
	ctx := recipes.WithTraceParent(context.WithoutCancel(x.upstreamContext()), traceParent(x.in))
	ctx = recipes.WithCredentials(ctx, creds)
	start := time.Now()
	out, f := ep.InvokeValidated(ctx, in)
	if f != nil {
		sp.fail(f.Code)
	}
	sp.end()
	if f == nil || f.Sent {
		h.metrics.endpointCall(ep, failureClass(f), time.Since(start).Seconds())
	}
	if f != nil {
		switch {
		case f.Code != recipes.ErrInvalidInput:
			status := zap.Skip() // no upstream status came back (a timeout, a refused connection)
			if f.UpstreamStatus != 0 {
				status = zap.Int("upstream_status", f.UpstreamStatus)
			}
			if l := x.agentLog(f.Code); l != nil {
				l.Log(failureLevel(f), "upstream failure", zap.String("agent_id", x.agentID), zap.String("endpoint", ep.Method+" "+ep.Path),
					zap.String("upstream", ep.UpstreamName()), zap.String("reason", f.Code), status,
					zap.NamedError("cause", f.Internal))
			}
		case f.Internal != nil:
			// An operator's query or body mapping failed on this input:
			// the agent sees which mapping, the operator needs the jq
			// error (with the expression), which only the log carries.
			if l := x.agentLog(f.Code); l != nil {
				l.Log(failureLevel(f), "endpoint mapping failed", zap.String("agent_id", x.agentID), zap.String("endpoint", ep.Method+" "+ep.Path),
					zap.String("upstream", ep.UpstreamName()), zap.NamedError("cause", f.Internal))
			}
		}
		x.failWith(failureError(f), extra)
		return
	}
	x.write(200, agtp.MediaAGTP, agtp.Envelope{Status: 200, TaskID: x.taskID, Result: out}, extra)
}

// failureLevel is the log level of an endpoint or recipe failure: INFO
// for a refusal the operator designed (an error_map status, a jq
// error("…"): recipes.Failure.Designed), which needs no person; WARN
// for the rest (an upstream down or answering 5xx unmapped, a mapping
// that broke on its input).
func failureLevel(f *recipes.Failure) zapcore.Level {
	if f.Designed() {
		return zapcore.InfoLevel
	}
	return zapcore.WarnLevel
}

// failureClass is the metrics class of an endpoint outcome.
func failureClass(f *recipes.Failure) string {
	if f == nil {
		return "ok"
	}
	for _, c := range recipes.UpstreamErrors {
		if f.Code == c {
			return c
		}
	}
	return "mapped"
}

// EndpointWarning is the AGTP-Endpoint-Warning value of a deprecated
// endpoint ep: "deprecated", then "; successor=METHOD /path" and
// "; removed_in=VERSION" when its document names them. The MCP door
// starts a deprecated tool's description with it.
func EndpointWarning(ep *recipes.Endpoint) string {
	s := "deprecated"
	if d := ep.Deprecated; d != nil {
		if d.Successor != nil {
			s += "; successor=" + d.Successor.Method + " " + d.Successor.Path
		}
		if d.RemovedIn != "" {
			s += "; removed_in=" + d.RemovedIn
		}
	}
	return s
}

// transient reports whether retrying the same request may succeed: an
// upstream timeout, a connection failure, or an unmapped 5xx/429.
func transient(f *recipes.Failure) bool {
	switch f.Code {
	case recipes.ErrUpstreamTimeout, recipes.ErrUpstreamConnection:
		return true
	case recipes.ErrUpstream:
		return f.UpstreamStatus >= 500 || f.UpstreamStatus == 429
	}
	return false
}

// failureError maps an endpoint Failure to the §19 body of a named 422.
func failureError(f *recipes.Failure) *agtp.Error {
	details := f.Details
	if details == nil {
		details = map[string]any{}
	}
	retryable := f.SideEffectFree && transient(f)
	return &agtp.Error{Status: f.Status, Reason: f.Code, Explanation: f.Explanation, Retryable: retryable,
		Fields: map[string]any{"error": map[string]any{"code": f.Code, "details": details}}}
}

func scopeHeaderRequired() *agtp.Error {
	return agtp.ScopeRequired.WithFields("this server requires an Authority-Scope header on invocations (scope_required_for_invocation)", map[string]any{"type": "scope-required"})
}
