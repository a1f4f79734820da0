package engine

import "testing"

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
