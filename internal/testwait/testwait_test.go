package testwait

import (
	"errors"
	"testing"
	"time"
)

// TestReturns: f's error comes back when f returns in time.
func TestReturns(t *testing.T) {
	want := errors.New("closed")
	if err := Returns(t, time.Second, func() error { return want }, "f"); err != want {
		t.Fatalf("Returns = %v, want f's error", err)
	}
}

// fatalRecorder records a Fatalf instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = format
}

// TestReturnsFailsAtBound: a call that does not return fails the test
// at the bound instead of hanging it.
func TestReturnsFailsAtBound(t *testing.T) {
	r := &fatalRecorder{TB: t}
	block := make(chan struct{})
	defer close(block)
	start := time.Now()
	Returns(r, 50*time.Millisecond, func() error { <-block; return nil }, "f")
	if r.msg == "" || time.Since(start) > 5*time.Second {
		t.Fatalf("a call that never returns: failure %q after %s, want a failure at the bound", r.msg, time.Since(start))
	}
}
