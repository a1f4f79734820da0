package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
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

// TestSwitchStoreLoads: when a keyed request is refused because a
// reload moved the keys (State.SwitchStore, Engine.enterKeyed): while a
// keyed request of another load of the name runs with its keys
// elsewhere, and only then.
func TestSwitchStoreLoads(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	const name = "switch-loads"
	st := NewState(name)
	mem := StoreLocation{Kind: "memory"}
	red := StoreLocation{Kind: "redis", Mode: "single", Addrs: []string{"127.0.0.1:6379"}, Prefix: "a:"}
	moved := StoreLocation{Kind: "redis", Mode: "single", Addrs: []string{"127.0.0.1:6379"}, Prefix: "b:"}
	load := func(locs ...StoreLocation) []*Engine {
		id := new(int) // one load
		var es []*Engine
		for _, l := range locs {
			cfg := &Config{Limits: Limits{CompositionTimeout: Duration(10 * time.Second)}}
			cfg.Name = name
			e := &Engine{Config: cfg, set: &recipes.Set{}, st: st, logger: zap.NewNop(), clock: func() time.Time { return now }}
			st.SwitchStore(e, l, id)
			es = append(es, e)
		}
		return es
	}
	enter := func(what string, e *Engine) func() {
		t.Helper()
		r, err := e.enterKeyed()
		if err != nil {
			t.Fatalf("%s: refused: %v", what, err)
		}
		return func() { e.exitKeyed(r) }
	}
	refused := func(what string, e *Engine) {
		t.Helper()
		_, err := e.enterKeyed()
		var ra *store.RetryAfterError
		if !errors.As(err, &ra) || ra.After < time.Second || ra.After > maxInFlightRetryAfter {
			t.Fatalf("%s: %v, want refused with a Retry-After of 1-5 s", what, err)
		}
	}

	// Two sites of one name, one configuration, two stores: both run.
	one := load(mem, red)
	endMem1 := enter("first load, memory site", one[0])
	endRed1 := enter("first load, Redis site", one[1])
	// The same configuration reloaded while both run: each new site may
	// repeat a request of the old site in the other store (the runs are
	// the name's, not a site's): refused while those run.
	two := load(mem, red)
	refused("reloaded memory site, the old Redis site's request running", two[0])
	refused("reloaded Redis site, the old memory site's request running", two[1])
	endMem1()
	endRed1()
	endMem2 := enter("reloaded memory site once they ended", two[0])
	endRed2 := enter("reloaded Redis site once they ended", two[1])
	// Sites that swap stores while the previous load's requests run.
	swapped := load(red, mem)
	refused("swapped: Redis site, the old memory site's request running", swapped[0])
	refused("swapped: memory site, the old Redis site's request running", swapped[1])
	endRed2()
	enter("swapped: memory site, only the old memory site's request running", swapped[1])()
	// A load that failed never serves, and refuses nothing.
	_ = load(moved)
	enter("the running configuration after a failed reload", two[1])()
	// Through two reloads: a load in between that moved nothing and
	// served nothing does not hide the request still running from
	// before it.
	_ = load(mem, red)
	three := load(moved)
	refused("a request of two loads ago still running", three[0])
	endMem2()
	end1, end2 := enter("once it ended", three[0]), enter("and again", three[0])
	end1()
	end2()

	// The name left the configuration and came back: a State made
	// afresh has another memory store.
	old := load(mem)
	endOld := enter("memory, before the name left", old[0])
	st = NewState(name)
	back := load(mem)
	refused("memory of a State made afresh, the old State's request running", back[0])
	endOld()
	enter("once it ended", back[0])()

	// Cluster seeds: {1,2} and {2,3} reach the same keys, and so do
	// {2,3} and {3,4}, but not {1,2} and {3,4}. A request leaves the
	// count it entered (review: it left another, and the name stayed
	// refused for good).
	seeds := func(a ...string) StoreLocation {
		return StoreLocation{Kind: "redis", Mode: "cluster", Addrs: a, Prefix: "c:"}
	}
	sites := load(seeds("n1", "n2"), seeds("n3", "n4"), seeds("n2", "n3"))
	e1, e2 := enter("seeds 1,2", sites[0]), enter("seeds 3,4", sites[1])
	enter("seeds 2,3", sites[2])()
	e1()
	e2()
	enter("memory after the cluster's requests ended", load(mem)[0])()

	keyedRuns.Lock()
	left := len(keyedRuns.byName[name])
	keyedRuns.Unlock()
	if left != 0 {
		t.Fatalf("%d run entries left, want none", left)
	}
}

// BenchmarkEnterKeyed is what the keyed-run count adds to every keyed
// request (Engine.enterKeyed and exitKeyed): from 16 goroutines on one
// name, a steady state of requests of one load running.
func BenchmarkEnterKeyed(b *testing.B) {
	st := NewState("bench-enter-keyed")
	cfg := &Config{Limits: Limits{CompositionTimeout: Duration(10 * time.Second)}}
	cfg.Name = "bench-enter-keyed"
	e := &Engine{Config: cfg, set: &recipes.Set{}, st: st, logger: zap.NewNop(), clock: time.Now}
	st.SwitchStore(e, StoreLocation{Kind: "redis", Mode: "single", Addrs: []string{"127.0.0.1:6379"}}, new(int))
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := e.enterKeyed()
			if err != nil {
				b.Error(err)
				return
			}
			e.exitKeyed(r)
		}
	})
}
