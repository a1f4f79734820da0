package recipes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/workers"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"go.opentelemetry.io/otel/trace"
)

// Step states reported in a composition_failed body (ARCHITECTURE.md
// "Composition").
const (
	StepSucceeded  = "succeeded"
	StepFailed     = "failed"
	StepCancelled  = "cancelled"
	StepNotStarted = "not-started"
)

// StepReport is one step's state after a plan run.
type StepReport struct {
	Name   string `json:"name"`
	Method string `json:"method"`
	Path   string `json:"path"`
	State  string `json:"state"`
	// Output is the captured output of a succeeded step.
	Output any `json:"output,omitempty"`
	// Error is the failure code of a failed step.
	Error string `json:"error,omitempty"`
	// Credential is the kind of credential the step's upstream request
	// carried ("static", "per_agent", "per_owner", "exchanged",
	// "assertion"; WithCredentials), never its value; "" when the run
	// was given no credentials.
	Credential string `json:"credential,omitempty"`
	// Upstream is the name of the upstream the step calls.
	Upstream string `json:"-"`
	// Duration is how long the step ran (0 when it did not start).
	Duration time.Duration `json:"-"`
	// Called reports that the step's upstream call was sent (it succeeded,
	// or failed with Failure.Sent): false when the step failed before
	// calling or did not start.
	Called bool `json:"-"`
}

// CompositionFailure is a failed plan run: 422 composition_failed
// naming the first failed step in declared order, its method, the
// underlying status and error, and every step's state and output
// (spec §7.3, ARCHITECTURE.md "Composition").
type CompositionFailure struct {
	// Recipe is the recipe name and version that ran.
	Recipe Lineage
	// FailedStep is the first failed step in declared order, nil when
	// the failure is in the output mapping or the overall deadline.
	FailedStep *Step
	// Cause is the failed step's failure (or a synthetic one).
	Cause *Failure
	// Steps reports every step.
	Steps []StepReport
	// SideEffectFree reports that no non-idempotent step may have acted.
	SideEffectFree bool
}

// Details returns the error body's details object.
func (f *CompositionFailure) Details() map[string]any {
	d := map[string]any{
		"recipe":         f.Recipe,
		"steps":          f.Steps,
		"underlying":     f.Cause.Code,
		"explanation":    f.Cause.Explanation,
		"captured":       captured(f.Steps),
		"upstream_error": f.Cause.Code,
	}
	if f.FailedStep != nil {
		d["failed_step"] = f.FailedStep.Name
		d["failed_step_index"] = f.FailedStep.Index
		d["failed_step_method"] = f.FailedStep.Endpoint.Method
		d["failed_step_path"] = f.FailedStep.Endpoint.Path
	}
	if f.Cause.UpstreamStatus != 0 {
		d["underlying_status"] = f.Cause.UpstreamStatus
	}
	return d
}

func captured(steps []StepReport) map[string]any {
	out := map[string]any{}
	for _, s := range steps {
		if s.State == StepSucceeded {
			out[s.Name] = s.Output
		}
	}
	return out
}

// Error implements error: "composition_failed: " and the Explanation.
func (f *CompositionFailure) Error() string {
	return "composition_failed: " + f.Explanation()
}

// Explanation is the failure's sentence for the error body, without
// its reason token (the body carries that as its reason): "step NAME
// (METHOD path): " and the cause's explanation, or the cause's alone
// when no step failed (the output mapping, the deadline).
func (f *CompositionFailure) Explanation() string {
	if f.FailedStep != nil {
		return fmt.Sprintf("step %s (%s %s): %s", f.FailedStep.Name, f.FailedStep.Endpoint.Method, f.FailedStep.Endpoint.Path, f.Cause.Explanation)
	}
	return f.Cause.Explanation
}

type stepResult struct {
	idx      int
	out      any
	f        *Failure
	d        time.Duration
	panicked *StepPanic
}

// StepPanic is what Execute panics with, in its caller's goroutine,
// when a step running in a goroutine of its own panicked (a defect): a
// panic in that goroutine could not be recovered by the request's
// server (net/http, the native door, the MCP door) and would end the
// whole process. Value is the step's panic value, Stack that goroutine's
// stack when it panicked. The other steps are cancelled, not waited
// for. (http.ErrAbortHandler is panicked again as it is.)
type StepPanic struct {
	Step  string
	Value any
	Stack []byte
}

// Error gives the step, its panic value and the step goroutine's stack.
func (p *StepPanic) Error() string {
	return fmt.Sprintf("recipe step %q panicked: %v\n\n%s", p.Step, p.Value, p.Stack)
}

// Execute runs the recipe's plan on an input already validated with
// ValidateInput: steps whose dependencies are done start at once and
// run concurrently; the first failure cancels running siblings and no
// later step starts. timeout bounds the whole run (0 = none). The run
// is detached from the caller's cancellation (a client that disconnects
// does not cancel a running plan) but keeps ctx's values. On success it
// returns the output expression's value and the per-step reports.
func (r *Recipe) Execute(ctx context.Context, input map[string]any, timeout time.Duration) (any, []StepReport, *CompositionFailure) {
	if r.untimedOne(timeout) {
		return r.executeOne(compositionContext{parent: ctx, deadline: time.Now().Add(timeout)}, input)
	}
	ctx = context.WithoutCancel(ctx)
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()

	if len(r.Steps) == 1 {
		return r.executeOne(ctx, input)
	}
	n := len(r.Steps)
	reports := make([]StepReport, n)
	outputs := make([]any, n)
	done := make([]bool, n)
	started := make([]bool, n)
	for i, s := range r.Steps {
		reports[i] = StepReport{Name: s.Name, Method: s.Endpoint.Method, Path: s.Endpoint.Path, State: StepNotStarted, Upstream: s.Endpoint.UpstreamName(),
			Credential: CredentialKind(ctx, s.Endpoint)}
	}
	results := make(chan stepResult, n)
	running := 0
	var failed []stepResult

	launch := func() {
		if stopped(ctx) {
			return
		}
		for i, s := range r.Steps {
			if started[i] {
				continue
			}
			ready := true
			for _, d := range s.Deps {
				if !done[d] {
					ready = false
					break
				}
			}
			if !ready {
				continue
			}
			started[i] = true
			running++
			vals := make([]any, 0, 1+i)
			vals = append(vals, input)
			vals = append(vals, outputs[:i]...)
			workers.Go(func() { // a reused goroutine: its stack is grown already (internal/workers)
				defer func() {
					if p := recover(); p != nil {
						results <- stepResult{idx: i, panicked: &StepPanic{Step: s.Name, Value: p, Stack: debug.Stack()}}
					}
				}()
				start := time.Now()
				out, f := s.run(ctx, input, vals)
				results <- stepResult{idx: i, out: out, f: f, d: time.Since(start)}
			})
		}
	}
	launch()
	for running > 0 {
		res := <-results
		running--
		if res.panicked != nil {
			cancel() // results holds n: the others still running never block
			if res.panicked.Value == http.ErrAbortHandler {
				panic(http.ErrAbortHandler) // as is: servers abort on it silently
			}
			panic(res.panicked)
		}
		reports[res.idx].Duration = res.d
		reports[res.idx].Called = res.f == nil || res.f.Sent
		if res.f != nil {
			failed = append(failed, res)
			if res.f.notStarted {
				// The deadline passed before it started: it stays
				// not-started, and did nothing.
				cancel()
				continue
			}
			if failureState(ctx.Err() != nil && len(failed) > 1, res.f) == StepCancelled {
				reports[res.idx].State = StepCancelled
			} else {
				reports[res.idx].State = StepFailed
				reports[res.idx].Error = res.f.Code
			}
			cancel()
			continue
		}
		reports[res.idx].State = StepSucceeded
		reports[res.idx].Output = res.out
		outputs[res.idx] = res.out
		done[res.idx] = true
		if len(failed) == 0 {
			launch()
		}
	}
	if len(failed) == 0 && slices.Contains(done, false) && stopped(ctx) {
		return nil, reports, &CompositionFailure{Recipe: r.Lineage(), Cause: stopFailure(), Steps: reports, SideEffectFree: r.noneActed(started)}
	}
	if len(failed) > 0 {
		// The first failed step in declared order is the one reported; a
		// plan whose deadline passed before a step started, and with no
		// step failed, names none (the cause is the deadline's).
		first := failed[0]
		for _, f := range failed[1:] {
			if reports[f.idx].State == StepFailed && (f.idx < first.idx || reports[first.idx].State != StepFailed) {
				first = f
			}
		}
		var failedStep *Step
		if reports[first.idx].State == StepFailed {
			failedStep = r.Steps[first.idx]
		}
		sideEffectFree := true
		for i, s := range r.Steps {
			if started[i] && reports[i].State != StepNotStarted && !s.Endpoint.Semantic.IsIdempotent && !(reports[i].State == StepFailed && failedFree(failed, i)) {
				sideEffectFree = false
			}
		}
		return nil, reports, &CompositionFailure{Recipe: r.Lineage(), FailedStep: failedStep, Cause: first.f, Steps: reports, SideEffectFree: sideEffectFree}
	}
	vals := make([]any, 0, n+1)
	vals = append(vals, input)
	vals = append(vals, outputs...)
	out, err := r.outExpr.Eval(ctx, input, vals...)
	if err != nil {
		return nil, reports, &CompositionFailure{Recipe: r.Lineage(), Cause: outputMappingFailure(ctx, err), Steps: reports}
	}
	if probs := validateSchema(r.output, out); probs != nil {
		return nil, reports, &CompositionFailure{Recipe: r.Lineage(), Cause: outputSchemaFailure(probs), Steps: reports}
	}
	return out, reports, nil
}

// outputSchemaFailure is the failure of a composed output that does not
// match the recipe's output_schema.
func outputSchemaFailure(probs []string) *Failure {
	expl, _ := describeViolations("composed output does not match output_schema", probs)
	return &Failure{Status: 422, Code: ErrCompositionFailed, Explanation: expl}
}

// executeOne runs a one-step plan on the caller's goroutine: no
// scheduling, no channel (the common recipe shape on the hot path).
func (r *Recipe) executeOne(ctx context.Context, input map[string]any) (any, []StepReport, *CompositionFailure) {
	if stopped(ctx) {
		s := r.Steps[0]
		rep := []StepReport{{Name: s.Name, Method: s.Endpoint.Method, Path: s.Endpoint.Path, State: StepNotStarted, Upstream: s.Endpoint.UpstreamName(),
			Credential: CredentialKind(ctx, s.Endpoint)}}
		return nil, rep, &CompositionFailure{Recipe: r.Lineage(), Cause: stopFailure(), Steps: rep, SideEffectFree: true}
	}
	s := r.Steps[0]
	rep := []StepReport{{Name: s.Name, Method: s.Endpoint.Method, Path: s.Endpoint.Path, Upstream: s.Endpoint.UpstreamName(),
		Credential: CredentialKind(ctx, s.Endpoint)}}
	start := time.Now()
	out, f := s.run(ctx, input, []any{input})
	rep[0].Duration = time.Since(start)
	rep[0].Called = f == nil || f.Sent
	if f != nil && f.notStarted {
		rep[0].State = StepNotStarted
		return nil, rep, &CompositionFailure{Recipe: r.Lineage(), Cause: f, Steps: rep, SideEffectFree: true}
	}
	if f != nil {
		rep[0].State, rep[0].Error = StepFailed, f.Code
		return nil, rep, &CompositionFailure{Recipe: r.Lineage(), FailedStep: s, Cause: f, Steps: rep,
			SideEffectFree: s.Endpoint.Semantic.IsIdempotent || f.SideEffectFree}
	}
	rep[0].State, rep[0].Output = StepSucceeded, out
	if f := deadlineFailure(ctx, "composition deadline passed before the output mapping"); f != nil {
		f.SideEffectFree = false // the step ran
		return nil, rep, &CompositionFailure{Recipe: r.Lineage(), Cause: f, Steps: rep}
	}
	res, err := r.outExpr.Eval(ctx, input, input, out)
	if err != nil {
		return nil, rep, &CompositionFailure{Recipe: r.Lineage(), Cause: outputMappingFailure(ctx, err), Steps: rep}
	}
	if probs := validateSchema(r.output, res); probs != nil {
		return nil, rep, &CompositionFailure{Recipe: r.Lineage(), Cause: outputSchemaFailure(probs), Steps: rep}
	}
	return res, rep, nil
}

// untimedOne reports whether a run of r under timeout can go without a
// composition timer: one step, both mappings plain projections (bounded
// work that ctx could not interrupt anyway), and a call timeout that
// ends within the composition timeout, so the call's own timer bounds
// the one blocking part. The composition deadline is then checked
// before the call and before the output mapping (deadlineFailure). It
// saves a second timer and a cancellation link per presentation; a plan
// outside these conditions runs under a timer context as before.
func (r *Recipe) untimedOne(timeout time.Duration) bool {
	if timeout <= 0 || len(r.Steps) != 1 {
		return false
	}
	s := r.Steps[0]
	return s.input.proj != nil && r.outExpr.proj != nil && s.Endpoint.svc != nil && s.Endpoint.svc.timeout <= timeout
}

// compositionContext carries a composition deadline without a timer
// (see untimedOne): it keeps parent's values, is never cancelled (a
// plan is detached from its caller, like context.WithoutCancel), and
// reports no Deadline, so a call's context.WithTimeout under it always
// arms the call's own timer. deadlineFailure reads the deadline.
type compositionContext struct {
	parent   context.Context
	deadline time.Time
}

func (compositionContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (compositionContext) Done() <-chan struct{}       { return nil }
func (compositionContext) Err() error                  { return nil }
func (c compositionContext) Value(key any) any         { return c.parent.Value(key) }
func (c compositionContext) String() string            { return "recipes.compositionContext" }

// failureState is the state reported for a step whose run ended in f:
// StepCancelled when the plan had already been cancelled for an earlier
// failure (afterCancel) and the upstream never answered the step (no
// UpstreamStatus: its call was cut, or never got a response), else
// StepFailed. A step whose upstream answered, a 404 racing a sibling's
// failure, failed on its own: it is reported failed, counted as an
// upstream error, and the first failed step in declared order is chosen
// among such steps, not by which answer the plan read first.
func failureState(afterCancel bool, f *Failure) string {
	if afterCancel && f.UpstreamStatus == 0 {
		return StepCancelled
	}
	return StepFailed
}

func failedFree(failed []stepResult, i int) bool {
	for _, f := range failed {
		if f.idx == i {
			return f.f.SideEffectFree
		}
	}
	return false
}

// deadlineFailure is the Failure of work that ctx stopped (its deadline
// passed, or the plan was cancelled), or nil while ctx is live. It is
// upstream_timeout, whatever error the interrupted jq mapping returned:
// the composition deadline (or a call's timeout) ran out, which is the
// spec's "no reply in time" (§7.3) and never the caller's invalid-input.
// expl says which work stopped.
func deadlineFailure(ctx context.Context, expl string) *Failure {
	if ctx.Err() == nil && !compositionDeadlinePassed(ctx) {
		return nil
	}
	return &Failure{Status: 422, Code: ErrUpstreamTimeout, Explanation: expl, SideEffectFree: true}
}

// compositionDeadlinePassed reports whether the deadline of ctx, the
// context a plan runs its steps under, has passed: a timer context's
// (context.DeadlineExceeded, not a cancellation) or a
// compositionContext's. Under a context without a deadline (a Tier B
// call) it is false. The deadline is read from the clock as well: a
// timer context's Err lags until its timer goroutine runs, and a
// process paused past the deadline (a GC pause, SIGSTOP, a stalled VM)
// would otherwise start the next step first (found by review: a write
// step sent 6 s after the deadline, 4 s after its key's lease ended).
func compositionDeadlinePassed(ctx context.Context) bool {
	if c, ok := ctx.(compositionContext); ok {
		return !time.Now().Before(c.deadline)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// outputMappingFailure is the cause of a failed recipe output mapping:
// upstream_timeout when the composition deadline stopped it, else
// composition_failed (the operator's expression failed).
func outputMappingFailure(ctx context.Context, err error) *Failure {
	if f := deadlineFailure(ctx, "composition deadline passed during the output mapping"); f != nil {
		f.SideEffectFree = false // steps ran; CompositionFailure decides
		return f
	}
	return &Failure{Status: 422, Code: ErrCompositionFailed, Internal: err,
		Explanation: mappingExplanation("the recipe's output mapping", "the input and step outputs", err)}
}

// run maps the step input and invokes the step's endpoint, under a
// step span when the span ctx carries records (runTraced).
func (s *Step) run(ctx context.Context, input any, vals []any) (any, *Failure) {
	if p := trace.SpanFromContext(ctx); p.IsRecording() {
		return s.runTraced(ctx, p, input, vals)
	}
	return s.runPlain(ctx, input, vals)
}

// runPlain is run without a span of its own.
func (s *Step) runPlain(ctx context.Context, input any, vals []any) (any, *Failure) {
	if f := deadlineFailure(ctx, "composition deadline passed before the step started"); f != nil {
		if !compositionDeadlinePassed(ctx) {
			f.Explanation = "the plan stopped before the step started (another step failed, or the plan was cancelled)"
		}
		f.notStarted = true
		return nil, f
	}
	v, err := s.input.Eval(ctx, input, vals...)
	if err != nil {
		if f := deadlineFailure(ctx, "composition deadline passed during the step input mapping"); f != nil {
			return nil, f
		}
		return nil, &Failure{Status: 422, Code: ErrInvalidInput, SideEffectFree: true, Internal: err,
			Explanation: mappingExplanation("the input mapping for step "+s.Name, "the given input", err)}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &Failure{Status: 422, Code: ErrInvalidInput, SideEffectFree: true,
			Explanation: fmt.Sprintf("the input mapping for step %s produced %s on the given input, not an object", s.Name, schema.JSONTypeName(v))}
	}
	nv, err := normalize(obj)
	if err != nil {
		return nil, &Failure{Status: 422, Code: ErrInvalidInput, SideEffectFree: true, Internal: err,
			Explanation: fmt.Sprintf("the input mapping for step %s produced a value that is not JSON on the given input", s.Name)}
	}
	return s.Endpoint.Invoke(ctx, nv.(map[string]any))
}

// StopCode is the failure code of a plan stopped with WithStop before
// every step started (a cancelled MCP task: docs/agent-guide-mcp.md
// "Tasks").
const StopCode = "plan_stopped"

// stopKey is the context key of WithStop.
type stopKey struct{}

// WithStop returns ctx carrying stop: once stop is closed, a plan run
// under it (Execute) starts no further step. Steps already started run to
// their end and keep their answers (reported succeeded or failed); the
// run then fails with StopCode, its reports naming which steps ran and
// which did not start. Execute detaches from ctx's cancellation, not
// from its values, so stop is how a caller stops a plan between steps.
func WithStop(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

// stopCheckKey is the context key of WithStopCheck.
type stopCheckKey struct{}

// WithStopCheck returns ctx carrying check: a plan run under it calls
// check each time it judges whether to start steps, and starts none
// once check reports true, as once WithStop's channel is closed. check
// may read state the caller moves while the plan runs, and may wait a
// bounded time to bring it up to date (an MCP task's node stops the
// plan once the lease it last stored has passed, and first waits a
// moment for a poll of the task's cancel request fresher than a pause
// it has just come back from); the plan waits for it.
func WithStopCheck(ctx context.Context, check func() bool) context.Context {
	return context.WithValue(ctx, stopCheckKey{}, check)
}

// stopped reports whether ctx's WithStopCheck reports true, or its
// WithStop channel is closed.
func stopped(ctx context.Context) bool {
	if check, _ := ctx.Value(stopCheckKey{}).(func() bool); check != nil && check() {
		return true
	}
	ch, _ := ctx.Value(stopKey{}).(<-chan struct{})
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stopFailure is the cause of a plan stopped before every step started.
func stopFailure() *Failure {
	return &Failure{Status: 422, Code: StopCode, Explanation: "the plan was stopped (its task was cancelled, or its lease ended while its node was paused or cut off from the store): the steps not started then were not run; those started ran to their end"}
}

// noneActed reports that no started step may have acted: every started
// step's endpoint is idempotent.
func (r *Recipe) noneActed(started []bool) bool {
	for i, s := range r.Steps {
		if started[i] && !s.Endpoint.Semantic.IsIdempotent {
			return false
		}
	}
	return true
}
