package engine

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// sharedGauge is one unlabelled gauge series that every rcns handler
// of a config load sets (they share one registry, so one series), and
// whose value each scrape combines from theirs instead of showing the
// last one written: handlers on different stores (their own memory
// store, another Redis deployment, db or key_prefix) must not
// overwrite each other's reading.
//
// Each handler (its *metrics) sets its own cell. The counts of what a
// store holds (grouped) group their cells by the store the handler
// reads (metrics.setGroup: its StoreLocation): handlers of one store
// count one state, and a handler counts only after its own changes
// (or its health check), so a scrape takes each group's newest reading
// (setAt: stamped before the count was read), then sums the groups.
// The other gauges fold every cell: minGauge for caddy_rcns_store_up
// (0 while any handler's store is down), maxGauge for the quarantine's
// seconds and the node_id conflict (two handlers of one store may hold
// different node_ids). A cell is dropped when its engine is closed
// (metrics.release); with none the series is not exported. Setting a
// flag's cell (set) is one atomic store: the store's round trips set
// caddy_rcns_store_up.
type sharedGauge struct {
	desc    *prometheus.Desc
	combine func(a, b float64) float64
	grouped bool // a count: one value per store, not per handler

	mu    sync.Mutex
	cells map[*sharedCell]struct{}
}

// sharedCell is one handler's value of a sharedGauge, under its group
// (guarded by the gauge's mu), with, for a count (setAt), the
// gaugeClock stamp of the reading it holds (0: the placeholder
// newMetrics set, which any reading outranks).
type sharedCell struct {
	group any
	bits  atomic.Uint64 // math.Float64bits of the value
	seq   atomic.Uint64
	mu    sync.Mutex // orders setAt's writes
}

// gaugeClock stamps the shared gauges' readings (gaugeStamp), so that
// of one store's handlers the newest reading wins.
var gaugeClock atomic.Uint64

// gaugeStamp is a stamp for a reading about to be taken: a count read
// after it is newer than any read before it (sharedGauge.setAt).
func gaugeStamp() uint64 { return gaugeClock.Add(1) }

// The folds of a sharedGauge's groups (newSharedGauge's combine).
var (
	sumGauge = func(a, b float64) float64 { return a + b }
	minGauge = func(a, b float64) float64 { return min(a, b) }
	maxGauge = func(a, b float64) float64 { return max(a, b) }
)

// newSharedGauge is a sharedGauge named caddy_rcns_<name>, folding its
// values with combine; grouped (a count of what a store holds) takes
// one value per store.
func newSharedGauge(name, help string, combine func(a, b float64) float64, grouped bool) *sharedGauge {
	return &sharedGauge{
		desc:    prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, name), help, nil, nil),
		combine: combine,
		grouped: grouped,
		cells:   map[*sharedCell]struct{}{},
	}
}

// Describe (prometheus.Collector) sends the gauge's one descriptor.
func (g *sharedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect (prometheus.Collector) sends the combined value, when any
// handler has a cell.
func (g *sharedGauge) Collect(ch chan<- prometheus.Metric) {
	if v, ok := g.value(); ok {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
	}
}

// value is the combined value, and false when no handler has a cell.
func (g *sharedGauge) value() (float64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out float64
	n := 0
	fold := func(v float64) {
		if n++; n == 1 {
			out = v
		} else {
			out = g.combine(out, v)
		}
	}
	if !g.grouped {
		for c := range g.cells {
			fold(c.get())
		}
		return out, n > 0
	}
	newest := make(map[any]*sharedCell, len(g.cells)) // each store's newest reading
	for c := range g.cells {
		if cur, ok := newest[c.group]; !ok || c.seq.Load() > cur.seq.Load() {
			newest[c.group] = c
		}
	}
	for _, c := range newest {
		fold(c.get())
	}
	return out, n > 0
}

// cell adds a handler's cell under group, holding the placeholder v.
func (g *sharedGauge) cell(group any, v float64) *sharedCell {
	c := &sharedCell{group: group}
	c.bits.Store(math.Float64bits(v))
	g.mu.Lock()
	g.cells[c] = struct{}{}
	g.mu.Unlock()
	return c
}

// regroup moves c to group.
func (g *sharedGauge) regroup(c *sharedCell, group any) {
	g.mu.Lock()
	c.group = group
	g.mu.Unlock()
}

// drop removes c: its handler no longer reports.
func (g *sharedGauge) drop(c *sharedCell) {
	g.mu.Lock()
	delete(g.cells, c)
	g.mu.Unlock()
}

// set stores v in c: for the gauges that fold every cell, whose order
// does not matter (caddy_rcns_store_up is set on every round trip).
func (c *sharedCell) set(v float64) { c.bits.Store(math.Float64bits(v)) }

// setAt stores v, a reading taken after stamp (gaugeStamp), unless c
// already holds a newer one: a count read before another handler's and
// written after it does not replace it.
func (c *sharedCell) setAt(stamp uint64, v float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stamp <= c.seq.Load() {
		return
	}
	c.bits.Store(math.Float64bits(v))
	c.seq.Store(stamp)
}

// get loads the value.
func (c *sharedCell) get() float64 { return math.Float64frombits(c.bits.Load()) }

// gaugeCell is a handler's side of a sharedGauge: the gauge (a
// prometheus.Collector, for reading it whole) and the handler's cell.
type gaugeCell struct {
	*sharedGauge
	c *sharedCell
}

// set sets the handler's value.
func (gc gaugeCell) set(v float64) { gc.c.set(v) }

// setAt sets the handler's value to a reading taken after stamp.
func (gc gaugeCell) setAt(stamp uint64, v float64) { gc.c.setAt(stamp, v) }
