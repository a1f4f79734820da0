package engine

import (
	"context"

	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the engine's spans (and of
// the upstream step spans the recipes package starts beneath them).
const TracerName = "github.com/caddy-rcns/caddy-rcns"

// Span names and attribute keys of the engine's OpenTelemetry spans
// (docs/operator-guide.md "Tracing"). The request span is named
// "AGTP <method> <path template>" ("AGTP <method>" when no template is
// known); its children are named by the stage.
const (
	SpanIdentity     = "rcns.identity"
	SpanPresentation = "rcns.presentation"
	SpanPair         = "rcns.pair"
	SpanClaim        = "rcns.claim"
	SpanGate         = "rcns.gate"
	SpanRecipe       = "rcns.recipe"
	SpanUpstream     = "rcns.upstream"
	SpanRecordSign   = "rcns.record.sign"

	AttrDoor         = "rcns.door"
	AttrMethod       = "rcns.method"
	AttrPathTemplate = "rcns.path_template"
	AttrAgentID      = "rcns.agent_id"
	AttrKind         = "rcns.kind"
	AttrStatus       = "rcns.status"
	AttrOutcome      = "rcns.outcome"
	AttrReason       = "rcns.reason"
	AttrContractID   = "rcns.contract_id"
	AttrRecipe       = "rcns.recipe"
	AttrUpstream     = "rcns.upstream"
)

// startRequestSpan starts the span of one AGTP request as a child of
// the span ctx carries, when that span is recording: Caddy's tracing
// handler's server span on the HTTP binding and the MCP door, the
// native door's (AGTPServer.Tracing). It returns ctx with the new span
// current, or ctx and nil when nothing records (no tracing configured,
// or the trace not sampled): the untraced path starts nothing.
func startRequestSpan(ctx context.Context) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx) // a no-op span for a nil or bare ctx
	if !parent.IsRecording() {
		return ctx, nil
	}
	return parent.TracerProvider().Tracer(TracerName).Start(ctx, "AGTP", trace.WithSpanKind(trace.SpanKindInternal))
}

// endRequestSpan names and ends x's request span with what the answer
// was: door, method, path template, agent, kind, status, outcome,
// reason and contract id.
func (x *exchange) endRequestSpan() {
	if x.tr == nil {
		return
	}
	sp, tr := x.tr.span, x.tr
	m := x.method
	if m == "" {
		m = x.in.Method
	}
	name := "AGTP " + m
	if tr.template != "" {
		name += " " + tr.template
	}
	sp.SetName(name)
	k := int(x.kind)
	if k >= len(requestKinds) {
		k = int(kindUnrouted)
	}
	attrs := []attribute.KeyValue{
		attribute.String(AttrDoor, x.in.Binding),
		attribute.String(AttrMethod, m),
		attribute.String(AttrKind, requestKinds[k]),
		attribute.Int(AttrStatus, x.status),
		attribute.String(AttrOutcome, requestOutcomes[outcomeIndex(x.status, x.reason)]),
	}
	if tr.template != "" {
		attrs = append(attrs, attribute.String(AttrPathTemplate, tr.template))
	}
	if x.agentIDValid {
		attrs = append(attrs, attribute.String(AttrAgentID, x.agentID))
	}
	if x.reason != "" {
		attrs = append(attrs, attribute.String(AttrReason, x.reason))
	}
	if id := x.contractID(); id != "" {
		attrs = append(attrs, attribute.String(AttrContractID, id))
	}
	if tr.recipe != "" {
		attrs = append(attrs, attribute.String(AttrRecipe, tr.recipe))
	}
	sp.SetAttributes(attrs...)
	if x.status >= 500 || x.status == 0 {
		sp.SetStatus(codes.Error, x.reason)
	}
	sp.End()
}

// exchangeTrace is a traced request's state: its span; the context
// whose current span parents the next stage span (the request span, or
// an open stage span); and the path template and recipe the span names,
// when known.
type exchangeTrace struct {
	span     trace.Span
	ctx      context.Context
	template string
	recipe   string
}

// traceTemplate records the request's path template for its span.
func (x *exchange) traceTemplate(t string) {
	if x.tr != nil {
		x.tr.template = t
	}
}

// traceRecipe records the recipe the request runs or synthesizes
// under, and its path pattern as the template, for its span.
func (x *exchange) traceRecipe(rec *recipes.Recipe) {
	if x.tr != nil {
		x.tr.template, x.tr.recipe = recipeTemplate(rec), rec.Name
	}
}

// contractID is the synthesis id of the contract the request ran under,
// minted or joined: "" when none.
func (x *exchange) contractID() string {
	switch {
	case x.contract.SynthesisID != "":
		return x.contract.SynthesisID
	case x.minted != nil:
		return x.minted.SynthesisID
	case x.joined != nil:
		return x.joined.SynthesisID
	}
	return ""
}

// stageSpan is a child span of the request span that is the current
// parent until end: spans started meanwhile (the recipe's steps under
// rcns.gate) nest under it.
type stageSpan struct {
	tr   *exchangeTrace
	span trace.Span
	prev context.Context
}

// startSpan starts the stage span name beneath x's current span; nil
// (and nothing allocated) when x is not traced. end is nil-safe.
func (x *exchange) startSpan(name string) *stageSpan {
	tr := x.tr
	if tr == nil {
		return nil
	}
	ctx, sp := tr.span.TracerProvider().Tracer(TracerName).Start(tr.ctx, name)
	s := &stageSpan{tr: tr, span: sp, prev: tr.ctx}
	tr.ctx = ctx
	return s
}

// set adds the string attribute key to s; nil-safe, and nothing is
// allocated when s is nil (no variadic slice to escape).
func (s *stageSpan) set(key, value string) {
	if s != nil {
		s.span.SetAttributes(attribute.String(key, value))
	}
}

// fail marks s failed with reason; nil-safe.
func (s *stageSpan) fail(reason string) {
	if s != nil {
		s.span.SetStatus(codes.Error, reason)
	}
}

// end ends s and makes its parent current again; nil-safe.
func (s *stageSpan) end() {
	if s == nil {
		return
	}
	s.span.End()
	s.tr.ctx = s.prev
}

// upstreamContext is the context of the request's upstream calls: the
// request's (its values, the traceparent to forward, and the current
// span, beneath which the recipes package starts each step's span).
func (x *exchange) upstreamContext() context.Context {
	if x.tr != nil {
		return x.tr.ctx
	}
	return x.in.Context
}

// recipeTemplate is the path pattern of rec, the request's path template
// under a contract or the gate: its exact path, or its whole-path
// regular expression; never the request's own path, which may hold ids.
func recipeTemplate(rec *recipes.Recipe) string {
	if rec.PathExact != "" {
		return rec.PathExact
	}
	if rec.PathRegex != nil {
		return rec.PathRegex.String()
	}
	return ""
}
