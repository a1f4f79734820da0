package recipes

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestExecuteRunsIndependentStepsConcurrently(t *testing.T) {
	b := &barrier{n: 3, release: make(chan struct{})}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: a, method: FETCH, path: /alpha, input: '{}'}
  - {name: b, method: FETCH, path: /beta, input: '{}'}
  - {name: c, method: FETCH, path: /gamma, input: '{}'}
output: '{a: $a.id, b: $b.id, c: $c.id}'
`
	r, _ := buildSet(t, up, recipe,
		endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
		endpointDoc("FETCH", "/beta", "GET", "/b", ""),
		endpointDoc("FETCH", "/gamma", "GET", "/c", ""))
	for _, s := range r.Steps {
		if len(s.Deps) != 0 {
			t.Fatalf("step %s deps = %v, want none", s.Name, s.Deps)
		}
	}
	out, _, cf := r.Execute(context.Background(), map[string]any{}, 10*time.Second)
	if cf != nil {
		t.Fatalf("Execute: %v (sequential execution cannot pass the barrier)", cf)
	}
	want := map[string]any{"a": "a", "b": "b", "c": "c"}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("output = %v, want %v", out, want)
	}
}

func TestExecuteFailureStopsLaterSteps(t *testing.T) {
	var calls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Store(r.URL.Path, true)
		if r.URL.Path == "/fail" {
			w.WriteHeader(500)
			return
		}
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: first, method: FETCH, path: /alpha, input: '{id: $input.id}'}
  - {name: second, method: FETCH, path: /beta, input: '{id: $first.id}'}
  - {name: third, method: FETCH, path: /gamma, input: '{id: $second.id}'}
output: '$third'
`
	r, _ := buildSet(t, up, recipe,
		endpointDoc("FETCH", "/alpha", "GET", "/ok", ""),
		endpointDoc("FETCH", "/beta", "GET", "/fail", ""),
		endpointDoc("FETCH", "/gamma", "GET", "/never", ""))
	if fmt.Sprint(r.Steps[1].Deps, r.Steps[2].Deps) != "[0] [1]" {
		t.Fatalf("deps = %v %v, want [0] [1]", r.Steps[1].Deps, r.Steps[2].Deps)
	}
	_, reports, cf := r.Execute(context.Background(), map[string]any{"id": "x"}, 10*time.Second)
	if cf == nil {
		t.Fatal("Execute succeeded, want composition failure")
	}
	if cf.FailedStep.Name != "second" || cf.Cause.Code != ErrUpstream || cf.Cause.UpstreamStatus != 500 {
		t.Fatalf("failure = step %s cause %+v", cf.FailedStep.Name, cf.Cause)
	}
	states := []string{reports[0].State, reports[1].State, reports[2].State}
	if fmt.Sprint(states) != "[succeeded failed not-started]" {
		t.Fatalf("states = %v", states)
	}
	// The succeeded and the failed step called their upstream; the one
	// never started did not (upstream metrics count exactly these).
	if called := []bool{reports[0].Called, reports[1].Called, reports[2].Called}; fmt.Sprint(called) != "[true true false]" {
		t.Fatalf("called = %v, want [true true false]", called)
	}
	if _, called := calls.Load("/never"); called {
		t.Fatal("a step after the failed one was called")
	}
	d := cf.Details()
	if d["failed_step"] != "second" || d["failed_step_method"] != "FETCH" || d["underlying_status"] != 500 {
		t.Fatalf("details = %v", d)
	}
	if capt := d["captured"].(map[string]any); capt["first"] == nil {
		t.Fatalf("captured = %v, want first's output", capt)
	}
}

// TestExecuteOneStepHonorsCompositionTimeout: the composition deadline
// bounds a one-step plan's mappings too, not only its upstream call (a
// runaway output expression ends at the deadline, with a failure).
func TestExecuteOneStepHonorsCompositionTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"id":"ok"}`) }))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{n: ([limit(80000000; repeat(1))] | length)}'
`
	// The step's own call timeout (0.1 s) is within the plan's (0.2 s):
	// the plan deadline must still bound the mappings around the call.
	r, _ := buildSet(t, up, recipe, endpointDoc("FETCH", "/alpha", "GET", "/a", "  timeout_seconds: 0.1\n"))
	done := make(chan *CompositionFailure, 1)
	go func() {
		_, _, cf := r.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
		done <- cf
	}()
	select {
	case cf := <-done:
		if cf == nil || !strings.Contains(cf.Cause.Explanation, "deadline") || cf.Cause.Code != ErrUpstreamTimeout {
			t.Fatalf("Execute = %+v, want an upstream_timeout naming the deadline", cf)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a one-step plan ran past its 200ms composition timeout for 20 s")
	}
}

// TestExecuteOneStepProjectionsWithoutTimer: a one-step plan whose
// mappings are plain projections and whose call timeout is within the
// composition timeout runs without a composition timer (untimedOne); its
// call's own timer still bounds the upstream exchange, and the
// composition deadline is still checked before the call and before the
// output mapping. Any other plan keeps the timer: a call timeout longer
// than the composition timeout is cut at the composition deadline.
func TestExecuteOneStepProjectionsWithoutTimer(t *testing.T) {
	delay := make(chan time.Duration, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case d := <-delay:
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		default:
		}
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	projection := recipeHead + `steps:
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{id: $only.id}'
`
	build := func(recipe, callTimeout string) *Recipe {
		r, _ := buildSet(t, up, recipe, endpointDoc("FETCH", "/alpha", "GET", "/a", "  timeout_seconds: "+callTimeout+"\n"))
		return r
	}
	fast := build(projection, "0.1")
	if !fast.untimedOne(200 * time.Millisecond) {
		t.Fatal("untimedOne = false for a projection plan whose call timeout is within the composition timeout")
	}
	if fast.untimedOne(50 * time.Millisecond) {
		t.Fatal("untimedOne = true for a composition timeout shorter than the call timeout")
	}
	jq := build(strings.Replace(projection, "'{id: $only.id}'", "'{id: ($only.id | ascii_upcase)}'", 1), "0.1")
	if jq.untimedOne(200 * time.Millisecond) {
		t.Fatal("untimedOne = true for an output mapping that is not a plain projection")
	}

	// Untimed and fast: the answer as before.
	out, _, cf := fast.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
	if cf != nil || fmt.Sprint(out) != "map[id:ok]" {
		t.Fatalf("Execute = %v, %+v; want map[id:ok]", out, cf)
	}
	// Untimed, slow upstream: the call's own 0.1 s timer ends it.
	delay <- 5 * time.Second
	start := time.Now()
	_, _, cf = fast.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || time.Since(start) > 3*time.Second {
		t.Fatalf("Execute = %+v after %v, want upstream_timeout from the 0.1 s call timeout", cf, time.Since(start))
	}
	// The composition deadline is checked before the call ...
	past := compositionContext{parent: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	_, reports, cf := fast.executeOne(past, map[string]any{})
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || !strings.Contains(cf.Cause.Explanation, "before the step started") || reports[0].Called {
		t.Fatalf("executeOne past its deadline = %+v (called %v), want upstream_timeout before the step started, no call", cf, reports[0].Called)
	}
	// ... and before the output mapping: a call that answers after the
	// composition deadline (here within its own timeout) fails.
	slow := build(projection, "2")
	delay <- 150 * time.Millisecond
	soon := compositionContext{parent: context.Background(), deadline: time.Now().Add(50 * time.Millisecond)}
	_, reports, cf = slow.executeOne(soon, map[string]any{})
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || !strings.Contains(cf.Cause.Explanation, "before the output mapping") || !reports[0].Called {
		t.Fatalf("executeOne whose call outlived the deadline = %+v, want upstream_timeout before the output mapping", cf)
	}
	// A call timeout (2 s) longer than the composition timeout (0.2 s):
	// the timer plan, cut at the composition deadline.
	if slow.untimedOne(200 * time.Millisecond) {
		t.Fatal("untimedOne = true for a 2 s call under a 0.2 s composition timeout")
	}
	delay <- 5 * time.Second
	start = time.Now()
	_, _, cf = slow.Execute(context.Background(), map[string]any{}, 200*time.Millisecond)
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("Execute = %+v after %v, want upstream_timeout at the 0.2 s composition deadline", cf, time.Since(start))
	}
}

// TestUpstreamTimeoutNamesWhatRanOut: a step's upstream call cut off by
// the composition deadline says so, not "did not answer within" the
// call's own (longer) timeout, whether the plan runs under a timer
// context or a compositionContext (untimedOne); a call cut by its own
// timeout, in a plan or a Tier B call, names that timeout. Both are
// upstream_timeout.
func TestUpstreamTimeoutNamesWhatRanOut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fast":
			fmt.Fprint(w, `{"id":"ok"}`)
			return
		case "/stall-body": // headers and part of the body, then nothing
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":`)
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	oneStep := recipeHead + `steps:
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{id: $only.id}'
`
	twoSteps := recipeHead + `steps:
  - {name: a, method: FETCH, path: /beta, input: '{}'}
  - {name: only, method: FETCH, path: /alpha, input: '{}'}
output: '{id: $only.id}'
`
	beta := endpointDoc("FETCH", "/beta", "GET", "/fast", "")
	const (
		composition = "the composition deadline passed during the call to upstream up"
		reading     = "the composition deadline passed while upstream up was sending its response"
	)
	tests := []struct {
		name        string
		recipe      string
		upPath      string
		callTimeout string
		// timeout is the composition timeout of Execute; 0 runs
		// executeOne under a compositionContext whose deadline is
		// deadline from now.
		timeout  time.Duration
		deadline time.Duration
		untimed  bool
		extra    string // more endpoint lines
		want     string
	}{
		{name: "timer plan, cut by the composition deadline", recipe: oneStep, upPath: "/stall", callTimeout: "5", timeout: 200 * time.Millisecond, want: composition},
		{name: "timer plan of two steps, cut by the composition deadline", recipe: twoSteps, upPath: "/stall", callTimeout: "5", timeout: 200 * time.Millisecond, want: composition},
		{name: "timer plan, response cut by the composition deadline", recipe: oneStep, upPath: "/stall-body", callTimeout: "5", timeout: 200 * time.Millisecond, want: reading},
		{name: "compositionContext, its deadline passed during the call", recipe: oneStep, upPath: "/stall", callTimeout: "0.3", deadline: 50 * time.Millisecond, want: composition},
		{name: "compositionContext, response cut after its deadline", recipe: oneStep, upPath: "/stall-body", callTimeout: "0.3", deadline: 50 * time.Millisecond, want: reading},
		{name: "compositionContext, its deadline passed during a query mapping", recipe: oneStep, upPath: "/fast", callTimeout: "0.3", deadline: 50 * time.Millisecond,
			extra: "  query: {q: '" + runaway + "'}\n", want: "the composition deadline passed during the query mapping for upstream up"},
		{name: "untimed plan, cut by the call's own timeout", recipe: oneStep, upPath: "/stall", callTimeout: "0.1", timeout: 5 * time.Second, untimed: true, want: "upstream up did not answer within 100ms"},
		{name: "timer plan of two steps, cut by the call's own timeout", recipe: twoSteps, upPath: "/stall", callTimeout: "0.1", timeout: 5 * time.Second, want: "upstream up did not answer within 100ms"},
		{name: "timer plan, response cut by the call's own timeout", recipe: twoSteps, upPath: "/stall-body", callTimeout: "0.1", timeout: 5 * time.Second, want: "upstream up did not finish its response within 100ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := buildSet(t, up, tc.recipe, endpointDoc("FETCH", "/alpha", "GET", tc.upPath, "  timeout_seconds: "+tc.callTimeout+"\n"+tc.extra), beta)
			if tc.timeout > 0 && r.untimedOne(tc.timeout) != tc.untimed {
				t.Fatalf("untimedOne(%v) = %v, want %v", tc.timeout, !tc.untimed, tc.untimed)
			}
			var cf *CompositionFailure
			if tc.timeout > 0 {
				_, _, cf = r.Execute(context.Background(), map[string]any{}, tc.timeout)
			} else {
				_, _, cf = r.executeOne(compositionContext{parent: context.Background(), deadline: time.Now().Add(tc.deadline)}, map[string]any{})
			}
			if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || cf.Cause.Explanation != tc.want {
				t.Fatalf("Execute failure = %+v, want upstream_timeout %q", cf, tc.want)
			}
		})
	}

	// A Tier B call has no composition deadline: its own timeout.
	ep := buildEndpoint(t, endpointDoc("FETCH", "/alpha", "GET", "/stall", "  timeout_seconds: 0.1\n"), up)
	if _, f := ep.InvokeValidated(context.WithoutCancel(context.Background()), map[string]any{}); f == nil || f.Code != ErrUpstreamTimeout || f.Explanation != "upstream up did not answer within 100ms" {
		t.Fatalf("Tier B failure = %+v, want upstream_timeout naming the 100ms call timeout", f)
	}
}

// TestFailureState: after the plan was cancelled, a failure the
// upstream answered is the step's own; one without an answer is the
// cancellation's.
func TestFailureState(t *testing.T) {
	for _, tt := range []struct {
		afterCancel bool
		status      int
		want        string
	}{
		{false, 0, StepFailed},
		{false, 404, StepFailed},
		{true, 404, StepFailed},
		{true, 0, StepCancelled},
	} {
		if got := failureState(tt.afterCancel, &Failure{UpstreamStatus: tt.status}); got != tt.want {
			t.Errorf("failureState(%v, status %d) = %s, want %s", tt.afterCancel, tt.status, got, tt.want)
		}
	}
}

// TestExecuteSimultaneousFailures: two parallel steps whose upstream
// answers 404 at the same moment. Which answer the plan reads first is
// up to the scheduler, and the other call may be cut before its answer
// is read; whatever happens, the step reported is the first failed one
// in declared order, every failed step carries its upstream error, and
// a cancelled one was called and carries none.
func TestExecuteSimultaneousFailures(t *testing.T) {
	for run := range 10 {
		release := make(chan struct{})
		var mu sync.Mutex
		waiting := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if waiting++; waiting == 2 {
				close(release)
			}
			mu.Unlock()
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			w.WriteHeader(404)
		}))
		up := newUpstream(t, srv.URL)
		recipe := recipeHead + `steps:
  - {name: a, method: FETCH, path: /alpha, input: '{}'}
  - {name: b, method: FETCH, path: /beta, input: '{}'}
output: '{a: $a, b: $b}'
`
		r, _ := buildSet(t, up, recipe,
			endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
			endpointDoc("FETCH", "/beta", "GET", "/b", ""))
		_, reports, cf := r.Execute(context.Background(), map[string]any{}, 10*time.Second)
		srv.Close()
		if cf == nil || cf.FailedStep == nil {
			t.Fatalf("run %d: failure %v, want a failed step", run, cf)
		}
		firstFailed := ""
		for _, rep := range reports {
			switch {
			case rep.State == StepFailed && rep.Error == ErrUpstream && rep.Called:
				if firstFailed == "" {
					firstFailed = rep.Name
				}
			case rep.State == StepCancelled && rep.Error == "" && rep.Called:
			default:
				t.Fatalf("run %d: step %s state %s error %q called %v", run, rep.Name, rep.State, rep.Error, rep.Called)
			}
		}
		if cf.FailedStep.Name != firstFailed {
			t.Fatalf("run %d: failed step %s, want %s (the first failed in declared order; states %s %s)", run, cf.FailedStep.Name, firstFailed, reports[0].State, reports[1].State)
		}
	}
}

// TestExecuteStopBetweenSteps: a plan stopped (WithStop) while its
// first step runs lets that step finish and keep its answer, starts no
// later step, and fails with StopCode naming which steps ran.
func TestExecuteStopBetweenSteps(t *testing.T) {
	var calls sync.Map
	entered, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Store(r.URL.Path, true)
		if r.URL.Path == "/ok" {
			close(entered)
			<-release
		}
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: first, method: FETCH, path: /alpha, input: '{id: $input.id}'}
  - {name: second, method: FETCH, path: /beta, input: '{id: $first.id}'}
  - {name: third, method: FETCH, path: /gamma, input: '{id: $second.id}'}
output: '$third'
`
	r, _ := buildSet(t, up, recipe,
		endpointDoc("FETCH", "/alpha", "GET", "/ok", ""),
		endpointDoc("FETCH", "/beta", "GET", "/second", ""),
		endpointDoc("FETCH", "/gamma", "GET", "/third", ""))
	stop := make(chan struct{})
	go func() {
		<-entered
		close(stop)
		close(release)
	}()
	_, reports, cf := r.Execute(WithStop(context.Background(), stop), map[string]any{"id": "x"}, 10*time.Second)
	if cf == nil || cf.Cause.Code != StopCode || cf.FailedStep != nil {
		t.Fatalf("failure = %+v, want %s", cf, StopCode)
	}
	if states := []string{reports[0].State, reports[1].State, reports[2].State}; fmt.Sprint(states) != "[succeeded not-started not-started]" {
		t.Fatalf("states = %v", states)
	}
	if reports[0].Output == nil {
		t.Fatal("the started step lost its answer")
	}
	for _, p := range []string{"/second", "/third"} {
		if _, called := calls.Load(p); called {
			t.Fatalf("%s was called after the stop", p)
		}
	}
	// A one-step plan stopped before it starts calls nothing.
	one, _ := buildSet(t, up, recipeHead+`steps:
  - {name: only, method: FETCH, path: /beta, input: '{id: $input.id}'}
output: '$only'
`, endpointDoc("FETCH", "/beta", "GET", "/second", ""))
	_, rep, cf := one.Execute(WithStop(context.Background(), stop), map[string]any{"id": "x"}, 10*time.Second)
	if cf == nil || cf.Cause.Code != StopCode || rep[0].State != StepNotStarted {
		t.Fatalf("one-step stopped: %+v %+v", cf, rep)
	}
}

// TestExecuteStopCheck: a plan under WithStopCheck whose check turns
// true while its first step runs (an MCP task's lease passing, its node
// paused past it) starts no later step, as WithStop's; one whose check
// stays false (the caller moved the time on: a renewal) runs to its end.
func TestExecuteStopCheck(t *testing.T) {
	var calls sync.Map
	entered, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Store(r.URL.Path, true)
		if r.URL.Path == "/ok" {
			entered <- struct{}{}
			<-release
		}
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	r := twoSteps(t, up, "/ok", "/second")
	for _, c := range []struct {
		name string
		move func(at *atomic.Int64) // while the first step runs
		stop bool
	}{
		{"passed", func(at *atomic.Int64) { at.Store(time.Now().Add(-time.Millisecond).UnixNano()) }, true},
		{"moved on", func(at *atomic.Int64) { at.Store(time.Now().Add(time.Minute).UnixNano()) }, false},
		{"none", func(at *atomic.Int64) { at.Store(0) }, false},
	} {
		calls.Delete("/second")
		var at atomic.Int64
		at.Store(time.Now().Add(time.Minute).UnixNano())
		go func() {
			<-entered
			c.move(&at)
			release <- struct{}{}
		}()
		over := func() bool { t := at.Load(); return t != 0 && time.Now().UnixNano() > t }
		_, reports, cf := r.Execute(WithStopCheck(context.Background(), over), map[string]any{"id": "x"}, 10*time.Second)
		_, second := calls.Load("/second")
		if c.stop {
			if cf == nil || cf.Cause.Code != StopCode || reports[0].State != StepSucceeded || reports[1].State != StepNotStarted || second {
				t.Errorf("%s: failure %+v, reports %+v, second called %v; want %s, the second step not started", c.name, cf, reports, second, StopCode)
			}
			continue
		}
		if cf != nil || !second {
			t.Errorf("%s: failure %+v, second called %v; want the plan run to its end", c.name, cf, second)
		}
	}
}

// TestExecuteStopCheckFirst: a plan calls its WithStopCheck before it
// reads WithStop's channel, each time it judges whether to start steps:
// a check that brings the stop up to date (closes the channel, a cancel
// just polled) before the second step keeps it from starting; the
// one-step path calls it too.
func TestExecuteStopCheckFirst(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"id":"ok"}`) }))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	r := twoSteps(t, up, "/a", "/b")
	stop := make(chan struct{})
	waits := 0
	ctx := WithStopCheck(WithStop(context.Background(), stop), func() bool {
		if waits++; waits == 2 { // the judgment after the first step
			close(stop)
		}
		return false
	})
	_, reports, cf := r.Execute(ctx, map[string]any{"id": "x"}, 10*time.Second)
	if cf == nil || cf.Cause.Code != StopCode || reports[0].State != StepSucceeded || reports[1].State != StepNotStarted {
		t.Fatalf("failure %+v, reports %+v; want %s after the first step", cf, reports, StopCode)
	}
	one, _ := buildSet(t, up, recipeHead+`steps:
  - {name: only, method: FETCH, path: /alpha, input: '{id: $input.id}'}
output: '$only'
`, endpointDoc("FETCH", "/alpha", "GET", "/a", ""))
	called := false
	if _, _, cf := one.Execute(WithStopCheck(context.Background(), func() bool { called = true; return false }), map[string]any{"id": "x"}, 10*time.Second); cf != nil || !called {
		t.Fatalf("one step: failure %+v, wait called %v; want it run, the wait called", cf, called)
	}
}

// twoSteps is a plan of two steps in sequence on up, calling GET first
// then GET second.
func twoSteps(t *testing.T, up *Upstream, first, second string) *Recipe {
	t.Helper()
	r, _ := buildSet(t, up, recipeHead+`steps:
  - {name: first, method: FETCH, path: /alpha, input: '{id: $input.id}'}
  - {name: second, method: FETCH, path: /beta, input: '{id: $first.id}'}
output: '$second'
`, endpointDoc("FETCH", "/alpha", "GET", first, ""), endpointDoc("FETCH", "/beta", "GET", second, ""))
	return r
}

// laggingDeadline is a context whose deadline has passed but whose
// timer has not fired yet: Err is nil and Done never closes, as for a
// process paused past the deadline that resumes before the runtime runs
// the timer (a GC pause, SIGSTOP, a stalled VM). Fault injection below
// the module: the clock is the only witness.
type laggingDeadline struct{ context.Context }

func (laggingDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }

// TestPausedPastDeadlineSendsNothing: a step, or a call, that resumes
// after its plan's deadline (its context's timer not yet fired) sends
// no request and fails upstream_timeout, side-effect free (found by
// review: a node paused for 10 s inside a keyed plan resumed and sent
// the plan's write step 6 s after the composition deadline, 4 s after
// its key's lease ended, while another node had already answered the
// key outcome-unknown and the agent had booked again).
func TestPausedPastDeadlineSendsNothing(t *testing.T) {
	var sent sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Store(r.URL.Path, true)
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: first, method: FETCH, path: /alpha, input: '{}'}
  - {name: book, method: FETCH, path: /beta, input: '{}'}
output: '{a: $first, b: $book}'
`
	r, _ := buildSet(t, up, recipe,
		endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
		endpointDoc("FETCH", "/beta", "POST", "/reserve", ""))
	ctx := laggingDeadline{context.Background()}
	if ctx.Err() != nil {
		t.Fatal("the injected context reports its deadline through Err: it would not lag")
	}
	// The next step, started after the pause.
	in := map[string]any{}
	_, f := r.Steps[1].run(ctx, in, []any{in, map[string]any{"id": "ok"}})
	if f == nil || f.Code != ErrUpstreamTimeout || !f.SideEffectFree || f.Sent {
		t.Fatalf("a step started past its plan's deadline: %+v, want upstream_timeout, side-effect free, not sent", f)
	}
	// The call itself, reached past the deadline (the check before the
	// step passed just before the pause).
	_, f = r.Steps[1].Endpoint.Invoke(ctx, map[string]any{})
	if f == nil || f.Code != ErrUpstreamTimeout || !f.SideEffectFree || f.Sent || !strings.Contains(f.Explanation, "not sent") {
		t.Fatalf("a call reached past its deadline: %+v, want upstream_timeout, side-effect free, not sent", f)
	}
	if _, ok := sent.Load("/reserve"); ok {
		t.Fatal("the write step's request reached the upstream after the deadline")
	}
}

// TestWriteCutByDeadlineNotRetryable: a non-idempotent step whose
// request was sent, and whose response the composition deadline cut
// (or a step started so late that the deadline passed during its call),
// leaves the plan not side-effect free: an agent told "retryable" would
// write twice (found by review: 422 retryable:true with the write's
// underlying_status 201).
func TestWriteCutByDeadlineNotRetryable(t *testing.T) {
	var writes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			time.Sleep(150 * time.Millisecond)
			fmt.Fprint(w, `{"id":"ok"}`)
		case "/loans":
			writes.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: first, method: FETCH, path: /alpha, input: '{}'}
  - {name: loan, method: FETCH, path: /beta, input: '{}'}
output: '{a: $first, b: $loan}'
`
	write := strings.Replace(endpointDoc("FETCH", "/beta", "POST", "/loans", ""), "is_idempotent: true", "is_idempotent: false", 1)
	r, _ := buildSet(t, up, recipe, endpointDoc("FETCH", "/alpha", "GET", "/slow", ""), write)
	if r.Steps[1].Endpoint.Semantic.IsIdempotent {
		t.Fatal("the write endpoint is idempotent")
	}
	_, rep, cf := r.Execute(context.Background(), map[string]any{}, 300*time.Millisecond)
	if writes.Load() != 1 {
		t.Fatalf("%d writes reached the upstream, want 1", writes.Load())
	}
	if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || cf.SideEffectFree || !rep[1].Called {
		t.Fatalf("a write cut by the deadline after it was sent: %+v (reports %+v), want upstream_timeout, not side-effect free", cf, rep)
	}
}

// TestDeadlineBeforeStepsNotStarted: steps that a plan's deadline
// stopped before they started are reported not-started, not failed:
// none is named the failed step, none was called, and the plan is
// side-effect free even where a step is a write. The cause is the
// deadline's upstream_timeout. One step (run on the caller's goroutine)
// and two independent steps (run concurrently).
func TestDeadlineBeforeStepsNotStarted(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	write := strings.Replace(endpointDoc("FETCH", "/beta", "POST", "/loans", ""), "is_idempotent: true", "is_idempotent: false", 1)
	for name, steps := range map[string]string{
		"one step": `steps:
  - {name: loan, method: FETCH, path: /beta, input: '{}'}
output: '{b: $loan}'
`,
		"two steps": `steps:
  - {name: first, method: FETCH, path: /alpha, input: '{}'}
  - {name: loan, method: FETCH, path: /beta, input: '{}'}
output: '{a: $first, b: $loan}'
`,
	} {
		t.Run(name, func(t *testing.T) {
			r, _ := buildSet(t, up, recipeHead+steps, endpointDoc("FETCH", "/alpha", "GET", "/a", ""), write)
			_, rep, cf := r.Execute(context.Background(), map[string]any{}, time.Nanosecond)
			if cf == nil || cf.Cause.Code != ErrUpstreamTimeout {
				t.Fatalf("failure %+v, want upstream_timeout", cf)
			}
			if cf.FailedStep != nil {
				t.Errorf("failed step %s named: no step failed, the deadline passed before any started", cf.FailedStep.Name)
			}
			if !cf.SideEffectFree {
				t.Error("not side-effect free: no step started")
			}
			for _, s := range rep {
				if s.State != StepNotStarted || s.Called || s.Error != "" {
					t.Errorf("step %s: state %q, called %v, error %q; want not-started, not called, no error", s.Name, s.State, s.Called, s.Error)
				}
			}
			if _, ok := cf.Details()["failed_step"]; ok {
				t.Errorf("details name a failed step: %v", cf.Details())
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d upstream calls, want none", n)
	}
}

// TestCompositionFailureExplanation: the error body's explanation of a
// composition failure does not repeat its reason token (the body and a
// tool error carry that as their reason; found by review: an MCP tool
// error read "composition_failed: composition_failed: step …"); Error,
// for logs, leads with it.
func TestCompositionFailureExplanation(t *testing.T) {
	step := &Step{Name: "item", Endpoint: &Endpoint{Method: "FETCH", Path: "/items/{id}"}}
	cause := &Failure{Code: ErrUpstreamTimeout, Explanation: "upstream bench did not answer within 1s"}
	for _, c := range []struct {
		f    *CompositionFailure
		want string
	}{
		{&CompositionFailure{FailedStep: step, Cause: cause}, "step item (FETCH /items/{id}): upstream bench did not answer within 1s"},
		{&CompositionFailure{Cause: cause}, "upstream bench did not answer within 1s"},
	} {
		if got := c.f.Explanation(); got != c.want {
			t.Errorf("Explanation() = %q, want %q", got, c.want)
		}
		if got := c.f.Error(); got != "composition_failed: "+c.want {
			t.Errorf("Error() = %q, want composition_failed: %q", got, c.want)
		}
	}
}
