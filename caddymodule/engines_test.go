package caddymodule

import (
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// TestLookupEngineByLoad: the native door reaches the engine its own
// configuration load provisioned, not a newer load's (one still loading,
// or one that failed), and nothing for a load without that name.
func TestLookupEngineByLoad(t *testing.T) {
	running, loading := make(chan struct{}), make(chan struct{})
	old, next := new(engine.Engine), new(engine.Engine)
	const name = "lookup-by-load"
	register(name, old, (<-chan struct{})(running))
	register(name, next, (<-chan struct{})(loading))
	defer unregister(name, old)
	defer unregister(name, next)

	if got := lookupEngine(name, (<-chan struct{})(running)); got != old {
		t.Fatalf("the running load's lookup got %p, want its own engine %p (the newer load's is %p)", got, old, next)
	}
	if got := lookupEngine(name, (<-chan struct{})(loading)); got != next {
		t.Fatalf("the new load's lookup got %p, want %p", got, next)
	}
	if got := lookupEngine(name, (<-chan struct{})(make(chan struct{}))); got != nil {
		t.Fatalf("a load without the name got %p, want nil", got)
	}
	if got := lookupEngine(name, nil); got != next {
		t.Fatalf("no load: got %p, want the newest %p", got, next)
	}
	unregister(name, next) // the new load failed and was cleaned up
	if got := lookupEngine(name, (<-chan struct{})(running)); got != old {
		t.Fatalf("after the failed load's cleanup: got %p, want %p", got, old)
	}
}
