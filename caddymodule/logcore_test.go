package caddymodule

import (
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The engine takes its logger at Provision; a test that reads the log
// lines of a gateway built by benchHandlerWith swaps the core under it
// (setLogCore) instead.

// coreBox holds a zapcore.Core for atomic.Pointer.
type coreBox struct{ zapcore.Core }

// swapCore is a zapcore.Core whose inner core a test may replace.
type swapCore struct{ core atomic.Pointer[coreBox] }

func (s *swapCore) inner() zapcore.Core                             { return s.core.Load().Core }
func (s *swapCore) Enabled(l zapcore.Level) bool                    { return s.inner().Enabled(l) }
func (s *swapCore) With(fs []zapcore.Field) zapcore.Core            { return &withCore{s: s, fields: fs} }
func (s *swapCore) Sync() error                                     { return s.inner().Sync() }
func (s *swapCore) Write(e zapcore.Entry, fs []zapcore.Field) error { return s.inner().Write(e, fs) }
func (s *swapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if s.Enabled(e.Level) {
		return ce.AddCore(e, s)
	}
	return ce
}

// withCore is a swapCore's With: its fields go to whichever core is
// current when it writes.
type withCore struct {
	s      *swapCore
	fields []zapcore.Field
}

func (w *withCore) Enabled(l zapcore.Level) bool { return w.s.Enabled(l) }
func (w *withCore) With(fs []zapcore.Field) zapcore.Core {
	return &withCore{s: w.s, fields: append(append([]zapcore.Field{}, w.fields...), fs...)}
}
func (w *withCore) Sync() error { return w.s.Sync() }
func (w *withCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	return w.s.inner().Write(e, append(append([]zapcore.Field{}, w.fields...), fs...))
}
func (w *withCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if w.Enabled(e.Level) {
		return ce.AddCore(e, w)
	}
	return ce
}

// logCores maps each handler benchHandlerWith built to its swapCore.
var logCores sync.Map // *Handler → *swapCore

// swapLogger gives h, before Provision, a logger that drops its lines
// (JSON encoded, as Caddy's) until setLogCore swaps a core in; a logger
// an adjust function set is kept.
func swapLogger(tb testing.TB, h *Handler) {
	if h.logger != nil {
		return
	}
	sc := &swapCore{}
	sc.core.Store(&coreBox{zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel)})
	h.logger = zap.New(sc)
	logCores.Store(h, sc)
	tb.Cleanup(func() { logCores.Delete(h) })
}

// setLogCore sends the log lines of h (engine and doors) to core from
// now on.
func setLogCore(t testing.TB, h *Handler, core zapcore.Core) {
	t.Helper()
	sc, ok := logCores.Load(h)
	if !ok {
		t.Fatal("setLogCore: the handler was not built by benchHandlerWith")
	}
	sc.(*swapCore).core.Store(&coreBox{core})
}

// registries maps each handler benchHandlerWith built to the metrics
// registry of the caddy.Context it was provisioned with.
var registries sync.Map // *Handler → *prometheus.Registry

// metricValue is the value of the metric name of h's registry whose
// labels include the label pairs kv: a counter's or gauge's value, a
// histogram's sample count; 0 when no such series was written.
func metricValue(t testing.TB, h *Handler, name string, kv ...string) float64 {
	t.Helper()
	reg, ok := registries.Load(h)
	if !ok {
		t.Fatal("metricValue: the handler was not built by benchHandlerWith")
	}
	fams, err := reg.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(kv); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// seriesCount is the number of series of the metric name in h's
// registry.
func seriesCount(t testing.TB, h *Handler, name string) int {
	t.Helper()
	reg, ok := registries.Load(h)
	if !ok {
		t.Fatal("seriesCount: the handler was not built by benchHandlerWith")
	}
	fams, err := reg.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}
