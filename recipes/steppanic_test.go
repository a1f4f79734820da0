package recipes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// stepPanicCtx panics in Value when asked from inside a step's run
// (Step.run) on another goroutine than the test's own: one the recipe
// runner runs a step on beside another (a reused one,
// internal/workers), a defect inside a step, injected below the
// package's API. Other goroutines that read the context (net/http's
// dialer, say) are left alone.
type stepPanicCtx struct{ context.Context }

func (c stepPanicCtx) Value(k any) any {
	b := make([]byte, 8192)
	if st := string(b[:runtime.Stack(b, false)]); strings.Contains(st, "recipes.(*Step).run(") && !strings.Contains(st, "recipes.TestStepPanicReachesCaller") {
		panic("defect inside a recipe step")
	}
	return c.Context.Value(k)
}

// TestStepPanicReachesCaller: a step running in a goroutine of its own
// that panics does not end the process (nothing above that goroutine
// could recover it): Execute panics in its caller's goroutine with a
// *StepPanic naming the step, carrying the panic value and the step's
// stack, where the request's server recovers it as any other panic of
// the request. Before, the test binary itself died.
func TestStepPanicReachesCaller(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"id":"ok"}`) }))
	defer srv.Close()
	up := newUpstream(t, srv.URL)
	recipe := recipeHead + `steps:
  - {name: a, method: FETCH, path: /alpha, input: '{}'}
  - {name: b, method: FETCH, path: /beta, input: '{}'}
output: '{a: $a.id, b: $b.id}'
`
	r, _ := buildSet(t, up, recipe, endpointDoc("FETCH", "/alpha", "GET", "/a", ""), endpointDoc("FETCH", "/beta", "GET", "/b", ""))
	if out, _, f := r.Execute(context.Background(), map[string]any{}, 10*time.Second); f != nil || out == nil {
		t.Fatalf("the recipe does not run without the defect: %v %v", out, f)
	}
	var got any
	func() {
		defer func() { got = recover() }()
		r.Execute(stepPanicCtx{context.Background()}, map[string]any{}, 10*time.Second)
	}()
	var sp *StepPanic
	if err, ok := got.(error); !ok || !errors.As(err, &sp) {
		t.Fatalf("recovered %v (%T), want a *StepPanic", got, got)
	}
	if sp.Step != "a" && sp.Step != "b" || sp.Value != "defect inside a recipe step" || !strings.Contains(string(sp.Stack), "stepPanicCtx.Value") {
		t.Fatalf("StepPanic %q %v, stack:\n%s\nwant the step's name, its panic value and its goroutine's stack down to the defect", sp.Step, sp.Value, sp.Stack)
	}
	if msg := sp.Error(); !strings.Contains(msg, "panicked: defect inside a recipe step") || !strings.Contains(msg, "stepPanicCtx.Value") {
		t.Fatalf("Error() = %q, want the value and the stack", msg)
	}
}
