package recipes

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestObjectKeys(t *testing.T) {
	tests := []struct {
		src  string
		want []string // nil: not a static-key object
	}{
		{`{}`, []string{}},
		{`{a: 1, "b": $input.x, c, $input}`, []string{"a", "b", "c", "input"}},
		{`{id: ($input.id | tostring)}`, []string{"id"}},
		{`{$input: 1}`, nil},
		{`{(.k): 1}`, nil},
		{`{"\(.k)": 1}`, nil},
		{`{a: 1} | .`, nil},
		{`{a: 1} + {b: 2}`, nil},
		{`{a: {b: 1}}.a`, nil},
		{`$input`, nil},
		{`def f: {}; f`, nil},
	}
	for _, tc := range tests {
		got, ok := objectKeys(tc.src)
		if ok != (tc.want != nil) || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("objectKeys(%s) = %v, %v; want %v", tc.src, got, ok, tc.want)
		}
	}
}

// TestMappingDeadlineIsATimeout: a jq mapping stopped by the
// composition deadline (a step's input mapping, the output mapping) or
// by the call's timeout (an endpoint's query or body) fails as
// upstream_timeout, never as invalid-input, which blames the caller,
// and stops there: the upstream is not called.
func TestMappingDeadlineIsATimeout(t *testing.T) {
	var calls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Store(r.URL.Path, true)
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	eps := []string{
		endpointDoc("FETCH", "/alpha", "GET", "/a", ""),
		endpointDoc("FETCH", "/beta", "GET", "/b", ""),
	}
	within := func(t *testing.T, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("a runaway mapping ran past its 200ms deadline for 15 s")
		}
	}
	plans := []struct {
		name, steps, output string
		failedStep          string // "": the output mapping
	}{
		{"one-step input mapping", "  - {name: only, method: FETCH, path: /beta, input: '" + runaway + " as $n | {}'}\n", "'$only'", "only"},
		{"parallel step input mapping", "  - {name: a, method: FETCH, path: /alpha, input: '{}'}\n  - {name: b, method: FETCH, path: /beta, input: '" + runaway + " as $n | {}'}\n", "'$a'", "b"},
		{"multi-step output mapping", "  - {name: a, method: FETCH, path: /alpha, input: '{}'}\n  - {name: b, method: FETCH, path: /alpha, input: '{}'}\n", "'{n: " + runaway + "}'", ""},
	}
	for _, tc := range plans {
		t.Run(tc.name, func(t *testing.T) {
			calls.Delete("/b")
			r, _ := buildSet(t, up, recipeHead+"steps:\n"+tc.steps+"output: "+tc.output+"\n", eps...)
			var reports []StepReport
			var cf *CompositionFailure
			within(t, func() { _, reports, cf = r.Execute(context.Background(), map[string]any{}, 200*time.Millisecond) })
			if cf == nil || cf.Cause.Code != ErrUpstreamTimeout || !strings.Contains(cf.Cause.Explanation, "composition deadline passed during") {
				t.Fatalf("Execute failure = %+v, want upstream_timeout: composition deadline passed during …", cf)
			}
			if tc.failedStep == "" {
				if cf.FailedStep != nil || cf.Details()["underlying"] != ErrUpstreamTimeout {
					t.Fatalf("failed step %v, details %v, want the output mapping's upstream_timeout", cf.FailedStep, cf.Details())
				}
				return
			}
			if cf.FailedStep == nil || cf.FailedStep.Name != tc.failedStep {
				t.Fatalf("failed step = %v, want %s", cf.FailedStep, tc.failedStep)
			}
			rep := reports[cf.FailedStep.Index]
			if rep.State != StepFailed || rep.Error != ErrUpstreamTimeout || rep.Called {
				t.Fatalf("step report = %+v, want failed with upstream_timeout, not called", rep)
			}
			if _, called := calls.Load("/b"); called {
				t.Fatal("the step's upstream was called after its mapping ran out of time")
			}
		})
	}
	for _, field := range []string{"query: {q: '" + runaway + "'}", "body: '" + runaway + "'"} {
		t.Run("endpoint "+field[:strings.Index(field, ":")], func(t *testing.T) {
			calls.Delete("/slow-mapping")
			ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "POST", "/slow-mapping", "  timeout_seconds: 0.2\n  "+field+"\n"), up)
			var f *Failure
			within(t, func() { _, f = ep.Invoke(context.Background(), map[string]any{}) })
			if f == nil || f.Code != ErrUpstreamTimeout || !f.SideEffectFree || f.Sent || !strings.Contains(f.Explanation, "did not finish within 200ms") {
				t.Fatalf("Invoke failure = %+v, want a side-effect-free upstream_timeout naming the 200ms timeout", f)
			}
			if _, has := f.Details["upstream_status"]; has || f.Details["upstream"] != "up" {
				t.Fatalf("details = %v, want upstream up and no upstream_status", f.Details)
			}
			if _, called := calls.Load("/slow-mapping"); called {
				t.Fatal("the upstream was called after the mapping ran out of time")
			}
		})
	}
}

// TestMappingErrorsKeepExpressionsInternal: a jq mapping that fails on
// the caller's input (an endpoint's query or body, a step's input, a
// recipe's output) is explained in the agent's terms — which mapping
// failed — never with the operator's expression or gojq's own text,
// which go to Failure.Internal for the logs. The message of an
// error("…") the expression raises is the operator's word to callers
// and is passed on.
func TestMappingErrorsKeepExpressionsInternal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t, srv.URL)
	const secret = "SECRET_MARKER"
	raises := `if .name=="bad" then error("boom") else "` + secret + `" end`
	typeErr := `if .name=="bad" then (.name | .x) else "` + secret + `" end` // gojq: expected an object but got: string
	check := func(t *testing.T, f *Failure, code, want, raised string) {
		t.Helper()
		if f == nil || f.Code != code {
			t.Fatalf("failure = %+v, want %s", f, code)
		}
		for _, leak := range []string{secret, "jq", "expected an object", "if .name"} {
			if strings.Contains(f.Explanation, leak) {
				t.Errorf("explanation %q leaks %q", f.Explanation, leak)
			}
		}
		if !strings.Contains(f.Explanation, want) {
			t.Errorf("explanation %q does not say %q", f.Explanation, want)
		}
		if raised != "" && !strings.HasSuffix(f.Explanation, ": "+raised) {
			t.Errorf("explanation %q does not pass on the raised message %q", f.Explanation, raised)
		}
		if raised == "" && strings.Contains(f.Explanation, ": ") {
			t.Errorf("explanation %q carries more than which mapping failed", f.Explanation)
		}
		if f.Internal == nil || !strings.Contains(f.Internal.Error(), secret) {
			t.Errorf("Internal = %v, want the jq error with the expression, for the logs", f.Internal)
		}
	}
	for _, tc := range []struct{ name, extra, want string }{
		{"query", "  query: {x: '%s'}\n", "the query mapping for this endpoint failed on the given input"},
		{"body", "  body: '{x: (%s)}'\n", "the body mapping for this endpoint failed on the given input"},
	} {
		for _, expr := range []struct{ src, raised string }{{raises, "boom"}, {typeErr, ""}} {
			t.Run(tc.name+" "+expr.raised, func(t *testing.T) {
				ep := buildEndpoint(t, endpointDoc("FETCH", "/things", "POST", "/x", fmt.Sprintf(tc.extra, expr.src)), up)
				if _, f := ep.Invoke(context.Background(), map[string]any{"name": "good"}); f != nil {
					t.Fatalf("good input: %+v", f)
				}
				_, f := ep.Invoke(context.Background(), map[string]any{"name": "bad"})
				check(t, f, ErrInvalidInput, tc.want, expr.raised)
				if !f.SideEffectFree || f.Sent {
					t.Errorf("failure = %+v, want side-effect-free and not sent", f)
				}
			})
		}
	}
	eps := []string{endpointDoc("FETCH", "/alpha", "GET", "/a", "")}
	for _, expr := range []struct{ src, raised string }{{raises, "boom"}, {typeErr, ""}} {
		t.Run("step input "+expr.raised, func(t *testing.T) {
			r, _ := buildSet(t, up, recipeHead+"steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{name: ($input | "+expr.src+")}'}\noutput: '$a'\n", eps...)
			_, _, cf := r.Execute(context.Background(), map[string]any{"name": "bad"}, 5*time.Second)
			if cf == nil {
				t.Fatal("Execute succeeded")
			}
			check(t, cf.Cause, ErrInvalidInput, "the input mapping for step a failed on the given input", expr.raised)
		})
		t.Run("output "+expr.raised, func(t *testing.T) {
			r, _ := buildSet(t, up, recipeHead+"steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{}'}\noutput: '{v: ($input | "+expr.src+")}'\n", eps...)
			_, _, cf := r.Execute(context.Background(), map[string]any{"name": "bad"}, 5*time.Second)
			if cf == nil {
				t.Fatal("Execute succeeded")
			}
			check(t, cf.Cause, ErrCompositionFailed, "the recipe's output mapping failed", expr.raised)
		})
	}
}
