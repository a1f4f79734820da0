package recipes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/caddy-rcns/caddy-rcns/internal/httpbody"
	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"go.opentelemetry.io/otel/attribute"
)

// Upstream error codes every external_service endpoint must declare
// (spec §7.3).
const (
	ErrUpstreamTimeout        = "upstream_timeout"
	ErrUpstreamConnection     = "upstream_connection_error"
	ErrUpstreamMalformed      = "upstream_malformed_response"
	ErrUpstreamAuthentication = "upstream_authentication_failed"
	ErrUpstream               = "upstream_error"
	// ErrCompositionFailed is the error every composition endpoint must
	// declare (spec §7.3).
	ErrCompositionFailed = "composition_failed"
	// ErrInvalidInput is the reason of a 422 for input that fails the
	// endpoint's input_schema (spec §7.1).
	ErrInvalidInput = "invalid-input"
)

// UpstreamErrors lists the five upstream_* codes in spec order.
var UpstreamErrors = []string{ErrUpstreamTimeout, ErrUpstreamConnection, ErrUpstreamMalformed, ErrUpstreamAuthentication, ErrUpstream}

// Endpoint is a Tier B endpoint: one AGTP (method, path) bound to one
// call on a named upstream (spec §7, ARCHITECTURE.md "Upstreams and
// Tier B endpoints"). Built once at load; safe for concurrent use.
type Endpoint struct {
	// Method and Path are the AGTP pair; Path is the template as declared.
	Method, Path string
	// Template is the parsed AGTP path template.
	Template *policy.PathTemplate
	// Description is the operator's description.
	Description string
	// MaxResultBytes is the endpoint's max_result_bytes (0: the MCP
	// door's own bound applies).
	MaxResultBytes int64
	// Semantic is the semantic block (spec §7.2).
	Semantic schema.SemanticDoc
	// RequiredScopes are the tokens a caller must carry (spec §11.5).
	RequiredScopes []policy.Scope
	// Internal endpoints serve only as recipe steps.
	Internal bool
	// Deprecated is the deprecation block, nil when not deprecated.
	Deprecated *schema.DeprecatedDoc
	// File is the document the endpoint came from.
	File string

	projection map[string]any
	// doc is the endpoint document as validated (schema.Document.Value),
	// before ${ENV} references are resolved: what a captured plan
	// carries (capture.go).
	doc any
	// unavailable marks an endpoint of a captured plan a Restorer
	// rebuilt whose (method, path) the running configuration no longer
	// declares with the same step terms (stepTerms): it has no current
	// call settings, every call of it fails, and the recipe names it in
	// UnavailableEndpoints.
	unavailable bool
	errors      map[string]bool
	input       *compiledSchema
	output      *compiledSchema
	svc         *externalService
	// textTypes are the scalar types query and path values convert to
	// (ConvertText).
	textTypes textTypes
}

// BuildEndpoint turns a validated endpoint document into an Endpoint.
// mp checks the method and the AGTP path grammar; upstreams resolves
// external_service.upstream. Errors are located in doc (file, line,
// JSON pointer). Spec §7, §8.4, §9 (reserved DISCOVER paths), §24 items
// 84–87b.
func BuildEndpoint(doc *schema.Document, mp *policy.MethodPolicy, upstreams map[string]*Upstream) (*Endpoint, error) {
	return buildBoundEndpoint(doc, mp, upstreams, false)
}

// buildBoundEndpoint is BuildEndpoint; with unbound set, an upstream name
// that upstreams lacks is bound to an unconfigured placeholder
// (Restorer: a captured plan rebuilt after its upstream was removed)
// instead of failing.
func buildBoundEndpoint(doc *schema.Document, mp *policy.MethodPolicy, upstreams map[string]*Upstream, unbound bool) (*Endpoint, error) {
	var d schema.EndpointDoc
	if err := doc.Decode(&d); err != nil {
		return nil, doc.Errorf("", "%v", err)
	}
	if !mp.IsMethod(d.Method) {
		return nil, doc.Errorf("/method", "method %s is neither in the catalog %s nor a custom method (%s)", d.Method, mp.Catalog.Version(), policy.CatalogRule)
	}
	if policy.IsLegacyVerb(d.Method) {
		return nil, doc.Errorf("/method", "legacy verb %s must not be used in an endpoint definition (use its AGTP alias)", d.Method)
	}
	tmpl, err := mp.ParsePathTemplate(d.Path)
	if err != nil {
		return nil, doc.Errorf("/path", "%v", err)
	}
	if d.Method == "DISCOVER" {
		if seg := reservedDiscoverSegment(d.Path); seg != "" {
			return nil, doc.Errorf("/path", "DISCOVER %s collides with the reserved built-in %q (spec §9)", d.Path, seg)
		}
	}
	if d.Method == "DISCOVER" && d.Path == "/" {
		return nil, doc.Errorf("/path", "DISCOVER / is the built-in manifest and cannot be registered")
	}
	e := &Endpoint{
		Method: d.Method, Path: d.Path, Template: tmpl, Description: d.Description,
		Semantic: d.Semantic, Internal: d.Internal, Deprecated: d.Deprecated, File: doc.File, MaxResultBytes: d.MaxResultBytes,
		errors: map[string]bool{}, doc: doc.Value,
	}
	for _, c := range d.Errors {
		e.errors[c] = true
	}
	for i, s := range d.RequiredScopes {
		sc, err := policy.ParseScope(s)
		if err != nil {
			return nil, doc.Errorf(fmt.Sprintf("/required_scopes/%d", i), "%v", err)
		}
		e.RequiredScopes = append(e.RequiredScopes, sc)
	}
	if err := checkInputSchema(d.InputSchema); err != nil {
		return nil, doc.Errorf("/input_schema", "%v", err)
	}
	if e.input, err = compileSchema(d.InputSchema); err != nil {
		return nil, doc.Errorf("/input_schema", "invalid JSON Schema: %v", err)
	}
	if e.output, err = compileSchema(d.OutputSchema); err != nil {
		return nil, doc.Errorf("/output_schema", "invalid JSON Schema: %v", err)
	}
	e.textTypes = textTypesOf(d.InputSchema)
	props, _ := d.InputSchema["properties"].(map[string]any)
	for _, p := range tmpl.Params() {
		if _, ok := props[p]; !ok {
			return nil, doc.Errorf("/path", "template parameter {%s} is not a property of input_schema (spec §6)", p)
		}
	}
	if d.ExternalService == nil {
		return nil, doc.Errorf("", "endpoint has no external_service binding")
	}
	for _, c := range UpstreamErrors {
		if !e.errors[c] {
			return nil, doc.Errorf("/errors", "external_service endpoints must list %s in errors (spec §7.1)", c)
		}
	}
	svc, err := buildExternalService(doc, d.ExternalService, e, d.InputSchema, upstreams, unbound)
	if err != nil {
		return nil, err
	}
	e.svc = svc
	e.projection = map[string]any{
		"method":        d.Method,
		"path":          d.Path,
		"description":   d.Description,
		"semantic":      semanticMap(d.Semantic),
		"input_schema":  d.InputSchema,
		"output_schema": d.OutputSchema,
		"errors":        append([]string{}, d.Errors...),
		"handler":       map[string]any{"type": "external_service"},
		"tier":          "B",
	}
	if len(d.RequiredScopes) > 0 {
		e.projection["required_scopes"] = append([]string{}, d.RequiredScopes...)
	}
	if d.Deprecated != nil {
		e.projection["deprecated"] = d.Deprecated
	}
	return e, nil
}

// reservedDiscoverSegment returns the reserved built-in name that the
// first segment of path equals or starts with, or "" (spec §9).
func reservedDiscoverSegment(path string) string {
	first := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 2)[0]
	first = strings.ToLower(first)
	for _, r := range []string{"methods", "agents", "genesis", "tools", "apis", "patterns", "contracts"} {
		if strings.HasPrefix(first, r) {
			return r
		}
	}
	return ""
}

func semanticMap(s schema.SemanticDoc) map[string]any {
	return map[string]any{
		"intent": s.Intent, "actor": s.Actor, "outcome": s.Outcome, "capability": s.Capability,
		"confidence": s.Confidence, "impact": s.Impact, "is_idempotent": s.IsIdempotent,
	}
}

// Projection returns the endpoint in manifest-projection form (spec
// §8.2: handler reduced to its type). The map is shared: do not modify.
func (e *Endpoint) Projection() map[string]any { return e.projection }

// Timeout is the endpoint's call timeout: the longest an invocation
// runs, its query and body mappings included.
func (e *Endpoint) Timeout() time.Duration { return e.svc.timeout }

// UpstreamName is the name of the upstream the endpoint calls.
func (e *Endpoint) UpstreamName() string { return e.svc.up.Name }

// UpstreamConfigured reports whether the upstream the endpoint calls is
// declared in the configuration it was built against. It is false only
// for an endpoint of a captured plan a Restorer rebuilt after the
// upstream was removed: every call of it fails (Recipe.MissingUpstreams).
func (e *Endpoint) UpstreamConfigured() bool { return !e.svc.up.unconfigured }

// Failure is a failed invocation: an input that fails validation, or a
// named upstream error (spec §7.3, §19 "422 named errors").
type Failure struct {
	// Status is the wire status, 422 for every named error.
	Status int
	// Code is the error code: invalid-input, or an upstream_* code, or a
	// name from the endpoint's error_map.
	Code string
	// Explanation is a human sentence.
	Explanation string
	// UpstreamStatus is the upstream's HTTP status, 0 when none came back.
	UpstreamStatus int
	// Details are structured details for the error body.
	Details map[string]any
	// SideEffectFree reports that the upstream provably did not act (input
	// refused, connection refused, or an idempotent endpoint).
	SideEffectFree bool
	// Internal is the underlying error, for the gateway's logs only: a
	// transport error (it may name hosts and addresses) or a failed jq
	// mapping's error (it quotes the operator's expression). It never
	// reaches agents.
	Internal error
	// Sent reports that the request was handed to the upstream's
	// transport, so the upstream may have seen it. It is false for
	// failures before any call: input, mappings, request building, a
	// deadline that passed first. Upstream metrics count only sent calls.
	Sent bool
	// notStarted: the failure is a step's that never started, its plan's
	// deadline having passed (or the plan stopped) before it: the step
	// is reported not-started, not failed, and named as no failed step.
	notStarted bool
	// mapped: Code is the endpoint's error_map name for UpstreamStatus.
	mapped bool
}

// Error is the failure's error code and its explanation, "CODE:
// EXPLANATION" (the reason and explanation of the error body, spec
// §19, OP-28).
func (f *Failure) Error() string { return f.Code + ": " + f.Explanation }

// Designed reports whether the operator designed this refusal: the
// upstream's status is one the endpoint's error_map names, or a jq
// mapping raised error("…") with a string (its text is for callers).
// Such a failure is the API saying no as intended, not a fault to
// look at: the gateway logs it below WARN.
func (f *Failure) Designed() bool {
	if f == nil {
		return false
	}
	if f.mapped {
		return true
	}
	_, raised := raisedMessage(f.Internal)
	return raised
}

// upstreamDetails is the details object of an upstream failure: the
// upstream's name and, when it answered, its HTTP status
// (upstream_status is left out when none came back: a timeout, a
// refused connection, a mapping stopped before the call).
func upstreamDetails(upstream string, status int) map[string]any {
	d := map[string]any{"upstream": upstream}
	if status != 0 {
		d["upstream_status"] = status
	}
	return d
}

// ValidateInput checks input against the endpoint's input_schema (spec
// §7.1: unknown fields fail). It returns a 422 invalid-input Failure
// naming the first violations and their count (describeViolations), or
// nil.
func (e *Endpoint) ValidateInput(input map[string]any) *Failure {
	return validateInput(e.input, input)
}

// InputValidator checks an input object against a JSON Schema as an
// endpoint's input is checked (ValidateInput), for an input schema the
// gateway itself advertises (the MCP door's built-in listing tools).
type InputValidator struct{ s *compiledSchema }

// NewInputValidator compiles doc, a JSON Schema held as a decoded JSON
// value (CompileSchema's rules).
func NewInputValidator(doc map[string]any) (*InputValidator, error) {
	s, err := compileSchema(doc)
	if err != nil {
		return nil, err
	}
	return &InputValidator{s: s}, nil
}

// Validate returns the 422 invalid-input Failure ValidateInput would
// for input, or nil.
func (v *InputValidator) Validate(input map[string]any) *Failure {
	return validateInput(v.s, input)
}

func validateInput(s *compiledSchema, input map[string]any) *Failure {
	if probs := validateSchema(s, input); probs != nil {
		expl, details := describeViolations("input does not match input_schema", probs)
		return &Failure{Status: 422, Code: ErrInvalidInput, Explanation: expl, Details: details, SideEffectFree: true}
	}
	return nil
}

// Invoke validates input and makes the one upstream call of the
// endpoint, then maps the response (spec §7.3): success returns the
// renamed JSON output (nil for 204 or an empty body, when output_schema
// accepts null); failures return a
// *Failure with the spec's upstream codes. The caller's identity is
// never sent upstream; only configured headers are.
func (e *Endpoint) Invoke(ctx context.Context, input map[string]any) (any, *Failure) {
	if f := e.ValidateInput(input); f != nil {
		return nil, f
	}
	return e.InvokeValidated(ctx, input)
}

// InvokeValidated is Invoke for an input the caller has already checked
// with ValidateInput (handlers never see unvalidated input: spec §7.1).
func (e *Endpoint) InvokeValidated(ctx context.Context, input map[string]any) (any, *Failure) {
	s := e.svc
	if s.up.unconfigured {
		return nil, &Failure{Status: 422, Code: ErrUpstreamConnection, SideEffectFree: true, Details: upstreamDetails(s.up.Name, 0),
			Explanation: fmt.Sprintf("upstream %s is not declared in the running configuration", s.up.Name)}
	}
	if e.unavailable {
		return nil, &Failure{Status: 422, Code: ErrUpstreamConnection, SideEffectFree: true, Details: upstreamDetails(s.up.Name, 0),
			Explanation: fmt.Sprintf("endpoint %s %s is not declared, or was changed, in the running configuration", e.Method, e.Path)}
	}
	// The call's timeout bounds the query and body mappings as well as
	// the upstream exchange: an operator's runaway jq expression ends at
	// it, as upstream_timeout.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sent := false // set when the request goes to the transport
	fail := func(code, expl string, status int) *Failure {
		name, mapped := s.errorMap[status]
		mapped = mapped && status != 0
		if mapped {
			code = name
		}
		return &Failure{Status: 422, Code: code, Explanation: expl, UpstreamStatus: status,
			Details: upstreamDetails(s.up.Name, status), SideEffectFree: e.Semantic.IsIdempotent, Sent: sent, mapped: mapped}
	}
	// Every upstream path parameter is a required input field (checked at
	// load), so validated input has them all. The explanations name the
	// input field, never the upstream path, which is server-internal.
	var small [4]string // the values, in s.params order: no map for a few
	vals := small[:0]
	for _, p := range s.params {
		v, ok := input[p]
		if !ok {
			return nil, &Failure{Status: 422, Code: ErrInvalidInput, Explanation: fmt.Sprintf("input field %q is required", p), SideEffectFree: true}
		}
		sv := scalarString(v)
		if sv == "" || sv == "." || sv == ".." {
			return nil, &Failure{Status: 422, Code: ErrInvalidInput, Explanation: fmt.Sprintf("input field %q cannot be empty, \".\" or \"..\": its value is a path segment", p), SideEffectFree: true}
		}
		vals = append(vals, sv)
	}
	upPath, err := s.path.ExpandParams(vals)
	if err != nil {
		return nil, fail(ErrUpstreamConnection, "cannot build the upstream request", 0)
	}
	// mapFailure classifies a failed query or body mapping: stopped by a
	// deadline, it is upstream_timeout; otherwise invalid-input (the
	// mapping may have failed on the caller's input), explained without
	// the operator's expression, which goes to Internal for the logs.
	mapFailure := func(what string, err error) *Failure {
		expl := fmt.Sprintf("the %s mapping for upstream %s did not finish within %s", what, s.up.Name, s.timeout)
		if parent.Err() != nil || compositionDeadlinePassed(parent) {
			expl = fmt.Sprintf("the composition deadline passed during the %s mapping for upstream %s", what, s.up.Name)
		}
		if f := deadlineFailure(ctx, expl); f != nil {
			f.Details = upstreamDetails(s.up.Name, 0)
			return f
		}
		return &Failure{Status: 422, Code: ErrInvalidInput, SideEffectFree: true, Internal: err,
			Explanation: mappingExplanation("the "+what+" mapping for this endpoint", "the given input", err)}
	}
	var q url.Values // nil without query mappings: Encode gives ""
	if len(s.queryKeys) > 0 {
		q = make(url.Values, len(s.queryKeys))
	}
	for _, k := range s.queryKeys {
		v, err := s.query[k].Eval(ctx, input)
		if err != nil {
			return nil, mapFailure("query", err)
		}
		if v != nil {
			q.Set(k, scalarString(v))
		}
	}
	var body []byte
	switch {
	case s.body != nil:
		v, err := s.body.Eval(ctx, input)
		if err != nil {
			return nil, mapFailure("body", err)
		}
		if body, err = json.Marshal(rename(v, s.inRename)); err != nil {
			return nil, &Failure{Status: 422, Code: ErrInvalidInput, SideEffectFree: true, Internal: err,
				Explanation: "the body mapping for this endpoint produced a value that is not JSON on the given input"}
		}
	case s.method == http.MethodPost || s.method == http.MethodPut || s.method == http.MethodPatch:
		rest := make(map[string]any, len(input))
		for k, v := range input {
			rest[k] = v
		}
		for _, p := range s.params {
			delete(rest, p)
		}
		body, _ = json.Marshal(rename(rest, s.inRename))
	}
	var rdr io.Reader
	if body != nil {
		rdr = bytes.NewReader(body)
	}
	target, err := s.up.requestURL(upPath, q.Encode())
	if err != nil {
		return nil, fail(ErrUpstreamConnection, "cannot build the upstream request", 0)
	}
	req, err := http.NewRequestWithContext(ctx, s.method, "", rdr)
	if err != nil {
		return nil, fail(ErrUpstreamConnection, "cannot build the upstream request", 0)
	}
	req.URL, req.Host = target, target.Host
	cred, _ := credentialFor(ctx, e)
	// Traced, the call's own span is the upstream's parent; else the
	// request's traceparent, when valid, is forwarded as it came.
	tp := TraceParent(ctx)
	span := callSpan(ctx)
	if span != nil {
		tp = traceParentOf(span.SpanContext())
		span.SetAttributes(attribute.String(AttrUpstreamMethod, s.method))
	}
	if body == nil && tp == "" && len(cred.Header) == 0 {
		req.Header = s.plainHeader
	} else {
		for k, v := range s.headers {
			req.Header[k] = v
		}
		// The upstream's credential policy, resolved for the caller
		// before the run (WithCredentials), over the static headers.
		for k, v := range cred.Header {
			req.Header[k] = v
		}
		req.Header["Accept"] = mediaJSONValue // shared: the transport never writes request headers
		if body != nil {
			req.Header["Content-Type"] = mediaJSONValue
		}
		if tp != "" {
			req.Header.Set("Traceparent", tp)
		}
	}
	// The last check before the request leaves: a deadline read from
	// the clock, not from ctx.Err(), which lags while the timer has not
	// fired (a process paused past the deadline resumes here first). A
	// plan's deadline bounds its Idempotency-Key's lease: no call goes
	// out after it, where another node may already answer the key
	// outcome-unknown and the agent try again under a new key.
	if planOver := compositionDeadlinePassed(parent); planOver || compositionDeadlinePassed(ctx) {
		expl := fmt.Sprintf("the call to upstream %s was not sent: its time (%s) ran out before it could start", s.up.Name, s.timeout)
		if planOver {
			expl = fmt.Sprintf("the call to upstream %s was not sent: the composition deadline passed before it could start", s.up.Name)
		}
		f := fail(ErrUpstreamTimeout, expl, 0)
		f.SideEffectFree = true
		return nil, f
	}
	sent = true
	defer s.up.afterCall() // after the body's Close below: the connection is idle by then
	resp, err := s.up.transport.RoundTrip(req)
	if err != nil {
		if isTimeout(ctx, err) {
			// Cut by the composition deadline (parent), or by the call's
			// own timeout: the explanation names the one that ran out.
			expl := fmt.Sprintf("upstream %s did not answer within %s", s.up.Name, s.timeout)
			if compositionDeadlinePassed(parent) {
				expl = fmt.Sprintf("the composition deadline passed during the call to upstream %s", s.up.Name)
			}
			return nil, fail(ErrUpstreamTimeout, expl, 0)
		}
		what := connErrorText(err)
		expl := fmt.Sprintf("cannot reach upstream %s: %s", s.up.Name, what)
		if what == connClosed {
			// The connection was up: the request may have been read,
			// and acted on, before the upstream closed it.
			expl = fmt.Sprintf("upstream %s closed the connection before answering (the request may have reached it)", s.up.Name)
		}
		f := fail(ErrUpstreamConnection, expl, 0)
		f.Internal = err
		if isRefused(err) {
			f.SideEffectFree = true
		}
		return nil, f
	}
	defer resp.Body.Close()
	if span != nil {
		span.SetAttributes(attribute.Int(AttrUpstreamStatus, resp.StatusCode))
	}
	raw, err := httpbody.Read(resp.Body, resp.ContentLength, s.up.MaxResponseBytes)
	if err != nil {
		if isTimeout(ctx, err) {
			expl := fmt.Sprintf("upstream %s did not finish its response within %s", s.up.Name, s.timeout)
			if compositionDeadlinePassed(parent) {
				expl = fmt.Sprintf("the composition deadline passed while upstream %s was sending its response", s.up.Name)
			}
			return nil, fail(ErrUpstreamTimeout, expl, resp.StatusCode)
		}
		return nil, fail(ErrUpstreamConnection, "reading the upstream response failed: "+connErrorText(err), resp.StatusCode)
	}
	if int64(len(raw)) > s.up.MaxResponseBytes {
		return nil, fail(ErrUpstreamMalformed, fmt.Sprintf("upstream %s response exceeds %d bytes", s.up.Name, s.up.MaxResponseBytes), resp.StatusCode)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		code := ErrUpstream
		if resp.StatusCode == 401 || resp.StatusCode == 403 {
			code = ErrUpstreamAuthentication
		}
		return nil, fail(code, fmt.Sprintf("upstream %s answered %d", s.up.Name, resp.StatusCode), resp.StatusCode)
	}
	var out any
	if len(bytes.TrimSpace(raw)) > 0 {
		var err error
		if out, err = decodeUpstream(raw); err != nil {
			var se *jsonv2.SemanticError
			var syn *jsontext.SyntacticError
			switch {
			case errors.As(err, &se):
				return nil, fail(ErrUpstreamMalformed, fmt.Sprintf("upstream %s answered %d with JSON this gateway cannot represent (a number out of range)", s.up.Name, resp.StatusCode), resp.StatusCode)
			case errors.As(err, &syn) && syn.Err != nil && strings.Contains(syn.Err.Error(), "max depth"):
				return nil, fail(ErrUpstreamMalformed, fmt.Sprintf("upstream %s answered %d with JSON nested deeper than 10000 levels", s.up.Name, resp.StatusCode), resp.StatusCode)
			}
			return nil, fail(ErrUpstreamMalformed, fmt.Sprintf("upstream %s answered %d with a body that is not JSON", s.up.Name, resp.StatusCode), resp.StatusCode)
		}
	}
	// An empty 2xx body, 204 No Content included, is null to
	// output_schema (spec §7.1: output validation still runs): an
	// endpoint that promises an object does not deliver one.
	out = rename(out, s.outRename)
	if probs := validateSchema(e.output, out); probs != nil {
		what := "upstream output does not match output_schema"
		if resp.StatusCode == http.StatusNoContent {
			what = "upstream answered 204 No Content, and output_schema does not accept null"
		}
		expl, details := describeViolations(what, probs)
		f := fail(ErrUpstreamMalformed, expl, resp.StatusCode)
		maps.Copy(f.Details, details)
		return nil, f
	}
	return out, nil
}

// mediaJSONValue is the header value "application/json", shared by
// every upstream request's Accept and Content-Type fields.
var mediaJSONValue = []string{"application/json"}

// upstreamJSON reads upstream bodies as encoding/json did before (a
// legacy service's duplicate keys keep the last value, invalid UTF-8
// becomes U+FFFD).
var upstreamJSON = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// upstreamJSONExact is upstreamJSON with jsonenc.ExactIntegers, merged once.
var upstreamJSONExact = jsonv2.JoinOptions(upstreamJSON, jsonenc.ExactIntegers)

// decodeUpstream decodes one upstream JSON body with encoding/json/v2:
// strict first (the common case, and the cheaper one: options cost a
// merge per call), then, only when that fails, with upstreamJSON's
// leniency, so a legacy service's duplicate keys or invalid UTF-8 are
// read as before instead of failing the call.
func decodeUpstream(raw []byte) (any, error) {
	// Integers beyond ±2^53 (64-bit ids) are kept exactly, as *big.Int;
	// only a body with a 16-digit run can hold one (jsonenc.ExactIntegers).
	var strict []jsonv2.Options // none: the common case, without an option merge
	lenient := upstreamJSON
	if jsonenc.HasLongDigitRun(raw) {
		strict, lenient = []jsonv2.Options{jsonenc.ExactIntegers}, upstreamJSONExact
	}
	var out any
	if err := jsonv2.Unmarshal(raw, &out, strict...); err == nil {
		return out, nil
	}
	out = nil
	err := jsonv2.Unmarshal(raw, &out, lenient)
	return out, err
}

// rename applies a field rename map to a JSON object; other values and
// unmapped fields pass unchanged (spec §7.3 input/output_transform).
func rename(v any, m map[string]string) any {
	obj, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return v
	}
	out := make(map[string]any, len(obj))
	for k, val := range obj {
		if to, ok := m[k]; ok {
			k = to
		}
		out[k] = val
	}
	return out
}

func scalarString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	case *big.Int:
		return x.String()
	case nil:
		return ""
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func isTimeout(ctx context.Context, err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// connClosed is connErrorText's text for a connection the upstream
// closed or reset (after it was established).
const connClosed = "connection closed by the upstream"

// connErrorText classifies a transport error without naming addresses
// or hosts (they stay in the gateway's logs, never in agents' answers).
func connErrorText(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.As(err, &dnsErr):
		return "name resolution failed"
	case strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509:"):
		return "TLS handshake failed"
	case errors.As(err, &opErr) && opErr.Op == "dial":
		if errors.Is(err, syscall.ECONNREFUSED) {
			return "connection refused"
		}
		return "connection failed"
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return connClosed
	default:
		return "transport error"
	}
}

type traceKey struct{}

// UpstreamCredential is the credential one endpoint's upstream request
// carries in a run (caddymodule/upstreamauth resolves it for the caller
// before the run): Header is set over the endpoint's static headers;
// Kind names it for step reports and records, never its value.
type UpstreamCredential struct {
	Header http.Header
	Kind   string
}

// Credentials maps each endpoint a run calls (a Tier B endpoint, or
// each step's endpoint of a bound recipe) to its credential.
type Credentials map[*Endpoint]UpstreamCredential

type credentialsKey struct{}

// WithCredentials returns ctx carrying creds for the endpoints of one
// run; an endpoint without an entry sends its static headers only.
func WithCredentials(ctx context.Context, creds Credentials) context.Context {
	if len(creds) == 0 {
		return ctx
	}
	return context.WithValue(ctx, credentialsKey{}, creds)
}

// credentialFor is e's credential in ctx, ok false when ctx has none.
func credentialFor(ctx context.Context, e *Endpoint) (UpstreamCredential, bool) {
	creds, _ := ctx.Value(credentialsKey{}).(Credentials)
	c, ok := creds[e]
	return c, ok
}

// CredentialKind is the kind of e's credential in ctx ("" when ctx
// carries none for it).
func CredentialKind(ctx context.Context, e *Endpoint) string {
	c, _ := credentialFor(ctx, e)
	return c.Kind
}

// WithTraceParent returns ctx carrying a W3C traceparent value to
// forward upstream, or ctx unchanged when tp is not a valid traceparent
// (ValidTraceParent): W3C Trace Context §3.2 has an invalid one dropped,
// not propagated.
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if !ValidTraceParent(tp) {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, tp)
}

// MaxTraceParentBytes bounds a traceparent of a version above 00, whose
// fields after the known four W3C Trace Context leaves open: 256 bytes.
const MaxTraceParentBytes = 256

// ValidTraceParent reports whether tp is a traceparent field value as
// W3C Trace Context (Level 1, §3.2.2) defines it: version "-" trace-id
// "-" parent-id "-" trace-flags, in lowercase hex of 2, 32, 16 and 2
// digits, the version not ff, neither id all zeros; version 00 exactly
// that (55 bytes); a later version may go on after a "-" (§3.2.4), up to
// MaxTraceParentBytes of visible ASCII.
func ValidTraceParent(tp string) bool {
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	for _, f := range [...]string{tp[0:2], tp[3:35], tp[36:52], tp[53:55]} {
		for i := 0; i < len(f); i++ {
			if c := f[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	if tp[0:2] == "ff" || strings.Trim(tp[3:35], "0") == "" || strings.Trim(tp[36:52], "0") == "" {
		return false
	}
	if len(tp) == 55 {
		return true
	}
	if tp[0:2] == "00" || tp[55] != '-' || len(tp) > MaxTraceParentBytes {
		return false
	}
	for i := 56; i < len(tp); i++ {
		if tp[i] <= ' ' || tp[i] > '~' {
			return false
		}
	}
	return true
}

// TraceParent returns the traceparent carried by ctx, or "".
func TraceParent(ctx context.Context) string {
	s, _ := ctx.Value(traceKey{}).(string)
	return s
}
