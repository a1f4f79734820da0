package recovered

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sync/singleflight"
)

// TestIntoSingleflight: a panic in a singleflight.DoChan function,
// which the package re-panics in a goroutine of its own (ending the
// process), becomes the callers' error with Into.
func TestIntoSingleflight(t *testing.T) {
	var g singleflight.Group
	r := <-g.DoChan("k", func() (v any, err error) {
		defer Into(&err)
		panic("fetch defect")
	})
	var p *Panic
	if !errors.As(r.Err, &p) || p.Value != "fetch defect" || !strings.Contains(string(p.Stack), "TestIntoSingleflight") {
		t.Fatalf("DoChan's result %v, want a *Panic with the value and the stack", r.Err)
	}
	if msg := p.Error(); msg != "a panic in the gateway (a defect): fetch defect" {
		t.Fatalf("Error() = %q", msg)
	}
	var err error
	func() { defer Into(&err) }()
	if err != nil {
		t.Fatalf("no panic gave %v", err)
	}
}
