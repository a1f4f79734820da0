package engine

import (
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
)

// TestStoreMoved: which reloads move the Idempotency-Keys
// (StoreLocation.movedFrom, State.SwitchStore).
func TestStoreMoved(t *testing.T) {
	mem := StoreLocation{Kind: "memory"}
	one := StoreLocation{Kind: "redis", Mode: "single", Addrs: []string{"127.0.0.1:6379"}, Prefix: "rcns:"}
	seeds := StoreLocation{Kind: "redis", Mode: "cluster", Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}, Prefix: "rcns:"}
	with := func(l StoreLocation, f func(*StoreLocation)) StoreLocation { f(&l); return l }
	for _, c := range []struct {
		name       string
		prev, next StoreLocation
		moved      bool
	}{
		{"memory kept", mem, mem, false},
		{"memory to Redis", mem, one, true},
		{"Redis to memory", one, mem, true},
		{"Redis kept", one, one, false},
		{"another key_prefix", one, with(one, func(l *StoreLocation) { l.Prefix = "other:" }), true},
		{"another db", one, with(one, func(l *StoreLocation) { l.DB = 1 }), true},
		{"another address", one, with(one, func(l *StoreLocation) { l.Addrs = []string{"127.0.0.1:6380"} }), true},
		{"another mode", one, with(one, func(l *StoreLocation) { l.Mode = "cluster" }), true},
		{"a cluster seed added", seeds, with(seeds, func(l *StoreLocation) { l.Addrs = append(l.Addrs, "10.0.0.3:7000") }), false},
		{"a cluster seed removed", seeds, with(seeds, func(l *StoreLocation) { l.Addrs = l.Addrs[1:] }), false},
		{"another cluster", seeds, with(seeds, func(l *StoreLocation) { l.Addrs = []string{"10.0.1.1:7000"} }), true},
		{"another Sentinel master", with(seeds, func(l *StoreLocation) { l.Mode, l.Master = "sentinel", "a" }),
			with(seeds, func(l *StoreLocation) { l.Mode, l.Master = "sentinel", "b" }), true},
	} {
		if got := c.next.movedFrom(c.prev); got != c.moved {
			t.Errorf("%s: moved %v, want %v (%s → %s)", c.name, got, c.moved, c.prev, c.next)
		}
	}
}

// TestSwitchStoreLoads: the loads a name's keyed requests are served
// by, and when they refuse (State.SwitchStore, claimsRefusedErr).
func TestSwitchStoreLoads(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st := NewState("switch")
	engineAt := func() *Engine {
		return &Engine{Config: &Config{Limits: Limits{CompositionTimeout: Duration(10 * time.Second)}}, set: &recipes.Set{},
			st: st, logger: zap.NewNop(), clock: func() time.Time { return now }}
	}
	mem := StoreLocation{Kind: "memory"}
	red := StoreLocation{Kind: "redis", Mode: "single", Addrs: []string{"127.0.0.1:6379"}, Prefix: "a:"}
	moved := StoreLocation{Kind: "redis", Mode: "single", Addrs: []string{"127.0.0.1:6379"}, Prefix: "b:"}
	load := func(locs ...StoreLocation) []*Engine {
		id := new(int) // one load
		var es []*Engine
		for _, l := range locs {
			e := engineAt()
			st.SwitchStore(e, l, id)
			es = append(es, e)
		}
		return es
	}
	served := func(what string, e *Engine) {
		t.Helper()
		if err := e.claimsRefusedErr(); err != nil {
			t.Fatalf("%s: refused: %v", what, err)
		}
	}
	refused := func(what string, e *Engine) {
		t.Helper()
		if err := e.claimsRefusedErr(); err == nil {
			t.Fatalf("%s: served, want refused", what)
		}
	}
	unload := func(es []*Engine) {
		for _, e := range es {
			st.Unload(e)
		}
	}

	// Two stores in one load; only one serves keyed requests at first.
	one := load(mem, red)
	served("first load, Redis handler", one[1])
	// The same configuration again: its memory handler serves first,
	// and the previous load had it too, though it served no keyed one.
	two := load(mem, red)
	served("same configuration reloaded, memory handler first", two[0])
	served("same configuration reloaded, Redis handler", two[1])
	// The old load still answers a request it had: same stores.
	served("previous load, late request", one[0])
	served("current load after the previous one's late request", two[0])
	unload(one)
	// A load that fails after its store was attached serves nothing.
	failed := load(mem, moved)
	unload(failed)
	served("current load after a failed reload that moved a key_prefix", two[1])
	// The same move, loaded: refused; the previous load's late request
	// too; and through a later reload that keeps the new place.
	three := load(mem, moved)
	refused("reload that moved a key_prefix", three[1])
	refused("the reload's memory handler (the name is refused)", three[0])
	refused("previous load, late request", two[1])
	unload(two)
	four := load(mem, moved)
	refused("a later reload within the lease", four[1])
	unload(three)
	now = now.Add(three[1].MaxLease() + time.Second)
	served("after the lease", four[1])
	served("after the lease, memory handler", four[0])

	// A name whose first keyed request is the new load's, then the old
	// load (still running, another key_prefix) serves one: refused.
	st = NewState("switch-late")
	old := load(red)
	fresh := load(moved)
	served("the first keyed request of a name", fresh[0])
	refused("an older load's keyed request in a place the current load lacks", old[0])
	refused("the current load while refused", fresh[0])
}
