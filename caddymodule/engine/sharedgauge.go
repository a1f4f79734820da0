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
// last one written: handlers with different names have different
// state (their own memory store, or their own key_prefix on Redis), so
// one handler's health check must not overwrite another's reading.
//
// Each handler (its *metrics) sets its own cell. Cells are grouped by
// the handler's State (handlers of one name share it, and so their
// store); a scrape folds each group's cells with within, then the
// groups with combine: sumGauge for the counts of what a store holds
// (a group's cells read one store: their largest), minGauge for
// caddy_rcns_store_up (0 while any handler's store is down), maxGauge
// for the quarantine's seconds and the node_id conflict. A cell is
// dropped when its engine is closed (metrics.release); with none the
// series is not exported. Setting a cell is one atomic store: the
// store's round trips set caddy_rcns_store_up.
type sharedGauge struct {
	desc            *prometheus.Desc
	combine, within func(a, b float64) float64

	mu    sync.Mutex
	cells map[*sharedCell]struct{}
}

// sharedCell is one handler's value of a sharedGauge, under its group
// (guarded by the gauge's mu).
type sharedCell struct {
	group any
	bits  atomic.Uint64 // math.Float64bits of the value
}

var (
	sumGauge = func(a, b float64) float64 { return a + b }
	minGauge = func(a, b float64) float64 { return min(a, b) }
	maxGauge = func(a, b float64) float64 { return max(a, b) }
)

// newSharedGauge is a sharedGauge named caddy_rcns_<name>, folding a
// group's cells with within and the groups with combine.
func newSharedGauge(name, help string, combine, within func(a, b float64) float64) *sharedGauge {
	return &sharedGauge{
		desc:    prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, name), help, nil, nil),
		combine: combine,
		within:  within,
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
	groups := make(map[any]float64, len(g.cells))
	for c := range g.cells {
		v := c.get()
		if cur, ok := groups[c.group]; ok {
			v = g.within(cur, v)
		}
		groups[c.group] = v
	}
	var out float64
	first := true
	for _, v := range groups {
		if first {
			out, first = v, false
		} else {
			out = g.combine(out, v)
		}
	}
	return out, !first
}

// cell adds a handler's cell under group, holding v.
func (g *sharedGauge) cell(group any, v float64) *sharedCell {
	c := &sharedCell{group: group}
	c.set(v)
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

// set stores v.
func (c *sharedCell) set(v float64) { c.bits.Store(math.Float64bits(v)) }

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
