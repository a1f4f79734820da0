package engine

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSharedGaugesCombineHandlers: the handlers of one config load share
// one series per gauge (one registry), and each handler's health check
// and counts set it. A scrape shows the gauges combined, not the value
// written last (helper-89: two Redis-backed handlers, one Redis killed,
// made caddy_rcns_store_up read 1 every 5 s while that store was down,
// so a "for: 1m" alert never fired): store_up the lowest, the
// quarantine the longest, the node_id conflict 1 while any handler has
// one (two handlers of one store too), and the counts summed over the
// stores, each store's newest count once (helper-90: taking the larger
// of one store's handlers kept an idle handler's old count). A closed
// handler's values are dropped.
func TestSharedGaugesCombineHandlers(t *testing.T) {
	reg := prometheus.NewRegistry()
	load := func(group any) *metrics {
		t.Helper()
		m, err := newMetrics(reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.setGroup(group)
		return m
	}
	storeA, storeB := NewState("a"), "redis single 127.0.0.1:6379 master=\"\" db=0 key_prefix=\"b:\""
	a, b, a2 := load(storeA), load(storeB), load(storeA) // a2: a second handler on a's store
	read := func(g gaugeCell) float64 { t.Helper(); return testutil.ToFloat64(g) }

	if got := read(a.storeUp); got != 1 {
		t.Fatalf("store_up before any health check = %v, want 1", got)
	}
	a.setStoreUp(true)
	b.setStoreUp(false)
	for i := 0; i < 3; i++ { // whichever handler's check ran last
		a.setStoreUp(true)
		if got := read(b.storeUp); got != 0 {
			t.Fatalf("store_up with b's store down, after a's check = %v, want 0", got)
		}
	}
	b.setStoreUp(true)
	if got := read(a.storeUp); got != 1 {
		t.Fatalf("store_up with both stores up = %v, want 1", got)
	}

	b.setStoreQuarantine(20 * time.Second)
	a.setStoreQuarantine(0)
	if got := read(a.storeQuarantine); got != 20 {
		t.Fatalf("store_quarantine_seconds = %v, want b's 20", got)
	}
	a.setNodeIDConflict(true)
	a2.setNodeIDConflict(false) // the same store, another node_id, checked later
	b.setNodeIDConflict(false)
	if got := read(a.nodeIDConflict); got != 1 {
		t.Fatalf("store_node_id_conflict = %v, want 1 (a's)", got)
	}

	a.setActiveContracts(gaugeStamp(), 6)
	b.setActiveContracts(gaugeStamp(), 3)
	a2.setActiveContracts(gaugeStamp(), 1) // a's store, counted since a's 6: 1, not 6+1 nor the larger
	if got := read(a.activeContracts); got != 4 {
		t.Fatalf("active_contracts = %v, want 1 (store a, newest) + 3 (store b)", got)
	}

	// The newest reading wins, not the last write (helper-92): a count
	// read before a2's and written after it does not replace it, nor
	// does a handler of a's store that joins later with its placeholder.
	early := gaugeStamp()
	a2.setActiveContracts(gaugeStamp(), 2)
	a.setActiveContracts(early, 7)
	late := load(storeA)
	if got := read(a.activeContracts); got != 5 {
		t.Fatalf("active_contracts = %v, want 2 (store a, newest reading) + 3 (store b)", got)
	}
	late.release()
	a2.setActiveContracts(gaugeStamp(), 1)

	b.release()
	if got := read(a.activeContracts); got != 1 {
		t.Fatalf("active_contracts after b closed = %v, want 1", got)
	}
	if got := read(a.storeQuarantine); got != 0 {
		t.Fatalf("store_quarantine_seconds after b closed = %v, want 0", got)
	}
	a.release()
	a2.release()
	if n := testutil.CollectAndCount(reg, "caddy_rcns_store_up"); n != 0 {
		t.Fatalf("store_up exported %d series with every handler closed, want none", n)
	}
}
