package recipes

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the step spans: the
// gateway's (caddymodule/engine.TracerName).
const tracerName = "github.com/caddy-rcns/caddy-rcns"

// Attribute keys of a step's span (docs/operator-guide.md "Tracing").
// The span is named "rcns.step <step name>"; the upstream call's own
// attributes are set on the span current in the call's context
// (InvokeValidated): this one under a plan, the engine's rcns.upstream
// span for a Tier B call.
const (
	AttrStep           = "rcns.step"
	AttrStepIndex      = "rcns.step.index"
	AttrUpstream       = "rcns.upstream"
	AttrEndpoint       = "rcns.endpoint"
	AttrUpstreamMethod = "http.request.method"
	AttrUpstreamStatus = "http.response.status_code"
	AttrFailure        = "rcns.reason"
)

// runTraced is run under a step span, a child of parent (recording):
// named for the step, with its upstream and endpoint, marked failed
// with the failure's code. The upstream call beneath makes it the
// parent of the traceparent it sends.
func (s *Step) runTraced(ctx context.Context, parent trace.Span, input any, vals []any) (any, *Failure) {
	ctx, sp := parent.TracerProvider().Tracer(tracerName).Start(ctx, "rcns.step "+s.Name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(AttrStep, s.Name),
			attribute.Int(AttrStepIndex, s.Index),
			attribute.String(AttrUpstream, s.Endpoint.UpstreamName()),
			attribute.String(AttrEndpoint, s.Endpoint.Method+" "+s.Endpoint.Path),
		))
	defer sp.End()
	out, f := s.runPlain(ctx, input, vals)
	if f != nil {
		sp.SetAttributes(attribute.String(AttrFailure, f.Code))
		sp.SetStatus(codes.Error, f.Code)
	}
	return out, f
}

// callSpan is the span current in an upstream call's context when it
// records (the call's traceparent then names it, and it gets the
// upstream method and status), else nil.
func callSpan(ctx context.Context) trace.Span {
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		return sp
	}
	return nil
}

// traceParentOf is the W3C traceparent naming sc as the parent (version
// 00).
func traceParentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}
