package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// sharedGauge is one unlabelled gauge series that every rcns handler
// of a config load sets (they share one registry, so one series), and
// whose value each scrape combines from theirs instead of showing the
// last one written: handlers with different names have different
// state (their own memory store, or their own key_prefix on Redis), so
// one handler's health check must not overwrite another's reading.
//
// Each handler (its *metrics) keeps its own value under its state's
// group (the *State handlers of one name share); a group counts once,
// with the value set last in it, and the groups' values are folded with
// combine: sumGauge for counts of what a store holds, minGauge for
// caddy_rcns_store_up (0 while any handler's store is down), maxGauge
// for the quarantine's seconds and the node_id conflict. A handler's
// value is dropped when its engine is closed (forget); with none set
// the series is not exported.
type sharedGauge struct {
	desc    *prometheus.Desc
	combine func(a, b float64) float64

	mu   sync.Mutex
	seq  uint64
	vals map[*metrics]sharedValue
}

// sharedValue is one handler's value of a sharedGauge: its group, the
// value, and when it was set (sharedGauge.seq).
type sharedValue struct {
	group any
	v     float64
	seq   uint64
}

var (
	sumGauge = func(a, b float64) float64 { return a + b }
	minGauge = func(a, b float64) float64 { return min(a, b) }
	maxGauge = func(a, b float64) float64 { return max(a, b) }
)

// newSharedGauge is a sharedGauge named caddy_rcns_<name>, folding its
// groups' values with combine.
func newSharedGauge(name, help string, combine func(a, b float64) float64) *sharedGauge {
	return &sharedGauge{
		desc:    prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, name), help, nil, nil),
		combine: combine,
		vals:    map[*metrics]sharedValue{},
	}
}

// Describe (prometheus.Collector) sends the gauge's one descriptor.
func (g *sharedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect (prometheus.Collector) sends the combined value, when any
// handler has set one.
func (g *sharedGauge) Collect(ch chan<- prometheus.Metric) {
	if v, ok := g.value(); ok {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
	}
}

// value is the combined value, and false when no handler has one.
func (g *sharedGauge) value() (float64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	latest := make(map[any]sharedValue, len(g.vals))
	for _, sv := range g.vals {
		if cur, ok := latest[sv.group]; !ok || sv.seq > cur.seq {
			latest[sv.group] = sv
		}
	}
	var out float64
	first := true
	for _, sv := range latest {
		if first {
			out, first = sv.v, false
		} else {
			out = g.combine(out, sv.v)
		}
	}
	return out, !first
}

// set records m's value v under m's group.
func (g *sharedGauge) set(m *metrics, v float64) {
	g.mu.Lock()
	g.seq++
	g.vals[m] = sharedValue{group: m.group, v: v, seq: g.seq}
	g.mu.Unlock()
}

// regroup moves m's value, if it has one, to group.
func (g *sharedGauge) regroup(m *metrics, group any) {
	g.mu.Lock()
	if sv, ok := g.vals[m]; ok {
		sv.group = group
		g.vals[m] = sv
	}
	g.mu.Unlock()
}

// forget drops m's value.
func (g *sharedGauge) forget(m *metrics) {
	g.mu.Lock()
	delete(g.vals, m)
	g.mu.Unlock()
}
