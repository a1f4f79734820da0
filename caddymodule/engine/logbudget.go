package engine

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The log lines an agent causes with its own requests (its refusals,
// its malformed input, the refusals the operator designed) are bounded
// per (agent, reason): no agent can raise the log volume by sending
// more. Every request is still counted in the metrics
// (caddy_rcns_requests_total by code and binding, and the counters by
// reason); a line written after some were held back says how many in
// its "suppressed" field. docs/operator-guide.md ("Logs") states the
// bound.
const (
	// LogBurst is how many lines one (agent, reason) key writes per
	// LogWindow; the rest of the window's lines are counted, not
	// written.
	LogBurst = 5
	// LogWindow is the window of LogBurst.
	LogWindow = 10 * time.Second
	// logBudgetKeys bounds the keys tracked; beyond it, keys share one
	// budget (overflowKey) until the stale ones are swept.
	logBudgetKeys = 10000
)

// overflowKey is the shared budget of the keys over logBudgetKeys.
var overflowKey = logKey{agent: "*", reason: "*"}

// logKey is one budget's key: an Agent-ID as sent (clipped) and a
// reason token or message.
type logKey struct{ agent, reason string }

// logCount is one key's window: when it began, the lines written in
// it, and the lines held back since the last one written.
type logCount struct {
	start      time.Time
	written    int
	suppressed int
}

// logBudget is the per-(agent, reason) bound of LogBurst lines per
// LogWindow. Safe for concurrent use.
type logBudget struct {
	mu    sync.Mutex
	keys  map[logKey]*logCount
	clock func() time.Time
}

// newLogBudget is an empty budget reading the time from clock (nil:
// time.Now).
func newLogBudget(clock func() time.Time) *logBudget {
	if clock == nil {
		clock = time.Now
	}
	return &logBudget{keys: map[logKey]*logCount{}, clock: clock}
}

// take reports whether a line for (agent, reason) may be written now
// and, when it may, how many lines of the key were held back since the
// last one written.
func (b *logBudget) take(agent, reason string) (ok bool, suppressed int) {
	if len(agent) > 64 {
		agent = agent[:64] // an Agent-ID is 64 characters; longer ones are malformed
	}
	if len(reason) > 64 {
		reason = reason[:64]
	}
	k := logKey{agent, reason}
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.keys[k]
	if c == nil {
		if len(b.keys) >= logBudgetKeys {
			b.sweep(now)
		}
		if len(b.keys) >= logBudgetKeys {
			k = overflowKey
			c = b.keys[k]
		}
		if c == nil {
			c = &logCount{start: now}
			b.keys[k] = c
		}
	}
	if now.Sub(c.start) >= LogWindow {
		c.start, c.written = now, 0
	}
	if c.written >= LogBurst {
		c.suppressed++
		return false, 0
	}
	c.written++
	suppressed, c.suppressed = c.suppressed, 0
	return true, suppressed
}

// sweep drops the keys whose window ended and that hold nothing back.
func (b *logBudget) sweep(now time.Time) {
	for k, c := range b.keys {
		if now.Sub(c.start) >= LogWindow && c.suppressed == 0 {
			delete(b.keys, k)
		}
	}
}

// logFor is l when the budget of (agent, reason) allows a line now,
// with a "suppressed" field when lines of the key were held back; nil
// when it does not. Callers write nothing when nil.
func (b *logBudget) logFor(l *zap.Logger, agent, reason string) *zap.Logger {
	ok, n := b.take(agent, reason)
	if !ok {
		return nil
	}
	return withSuppressed(l, n)
}

// withSuppressed is l, with a "suppressed" field when n > 0.
func withSuppressed(l *zap.Logger, n int) *zap.Logger {
	if n > 0 {
		return l.With(zap.Int("suppressed", n))
	}
	return l
}

// AgentLog is the engine's logger for one line an agent's own request
// caused (a refusal, malformed input), within the bound of LogBurst
// lines per LogWindow for the key (agentID as sent, reason): nil when
// the key's budget is spent, and the caller then writes nothing. The
// doors use it for the lines they write themselves.
func (h *Engine) AgentLog(agentID, reason string) *zap.Logger {
	return h.logBudget.logFor(h.logger, agentID, reason)
}

// agentLog is AgentLog for the request of x: its logger (log, with
// request_id) within the budget of (x's Agent-ID, reason). The budget
// is asked first: a line held back costs no logger.
func (x *exchange) agentLog(reason string) *zap.Logger {
	ok, n := x.h.logBudget.take(x.agentID, reason)
	if !ok {
		return nil
	}
	return withSuppressed(x.log(), n)
}

// BudgetCore is core with its entries held to the bound of LogBurst
// entries per LogWindow per level, all agents together: for a
// library's log whose lines an agent's input may cause but which name
// no agent (the MCP SDK's). Entries over the bound are dropped.
func (h *Engine) BudgetCore(core zapcore.Core, key string) zapcore.Core {
	return &budgetCore{Core: core, b: h.logBudget, key: key}
}

// budgetCore is BudgetCore.
type budgetCore struct {
	zapcore.Core
	b   *logBudget
	key string
}

// With keeps the budget on the derived core.
func (c *budgetCore) With(fs []zapcore.Field) zapcore.Core {
	return &budgetCore{Core: c.Core.With(fs), b: c.b, key: c.key}
}

// Check adds the core to the entry only within the budget.
func (c *budgetCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.Enabled(e.Level) {
		return ce
	}
	if ok, _ := c.b.take(c.key, e.Level.String()); !ok {
		return ce
	}
	return ce.AddCore(e, c)
}

// Write writes through to the wrapped core (Check has applied the
// budget).
func (c *budgetCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	return c.Core.Write(e, fs)
}
