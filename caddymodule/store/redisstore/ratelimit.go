package redisstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
)

// limiters builds redis_rate limiters: one GCRA key per agent and
// budget, "rate:P{a:AGENT}:rl:NAME:BURST/PERMINUTE" (redis_rate adds the
// "rate:" in front), which expires when the agent's budget is full
// again. A changed budget starts on a new key, full, as the memory
// store's new limiter does.
type limiters struct{ c *Client }

// Limiter returns the shared limiter of b; maxAgents has no effect here
// (every agent's key expires once its budget is full again). Errors are
// ratelimit.New's (the budget is checked the same way).
// A Client keeps one limiter per budget configuration, so config
// reloads reuse them; Client.Close releases them.
func (l limiters) Limiter(b ratelimit.Budget, _ int64) (store.Limiter, error) {
	name := fmt.Sprintf("rl:%s:%d/%g", b.Name, b.Burst, b.PerMinute)
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if lim, ok := c.limiters[name]; ok {
		return lim, nil
	}
	// The header renderer and the budget checks are policy/ratelimit's:
	// a one-bucket Limiter provides them; it never holds an agent's
	// budget.
	h, err := ratelimit.New(b, 1, nil)
	if err != nil {
		return nil, err
	}
	// Burst b.Burst, one request each 60/PerMinute seconds: the same
	// bucket as golang.org/x/time/rate's in GCRA form.
	period := time.Duration(math.Round(60 / b.PerMinute * float64(time.Second)))
	lim := &limiter{c: c, h: h, rl: redis_rate.NewLimiter(c.rdb),
		limit: redis_rate.Limit{Rate: 1, Burst: b.Burst, Period: period}, name: name}
	c.limiters[name] = lim
	return lim, nil
}

type limiter struct {
	c     *Client
	h     *ratelimit.Limiter
	rl    *redis_rate.Limiter
	limit redis_rate.Limit
	name  string
}

// Allow spends one request of agentID's budget (one EVALSHA).
func (l *limiter) Allow(ctx context.Context, agentID string) (ratelimit.Decision, error) {
	start := time.Now()
	res, err := l.rl.Allow(ctx, l.c.agentKey(agentID, l.name), l.limit)
	if err = l.c.done(store.OpRateLimit, start, err); err != nil {
		return ratelimit.Decision{}, err
	}
	d := ratelimit.Decision{Allowed: res.Allowed > 0, Remaining: max(res.Remaining, 0), Reset: max(res.ResetAfter, 0)}
	if !d.Allowed {
		// redis_rate truncates its float seconds to the nanosecond: one
		// microsecond more keeps Retry-After at or after the refill.
		d.RetryAfter = max(res.RetryAfter, 0) + time.Microsecond
		d.Remaining = 0
	}
	return d, nil
}

func (l *limiter) Budget() ratelimit.Budget                    { return l.h.Budget() }
func (l *limiter) PolicyHeader() string                        { return l.h.PolicyHeader() }
func (l *limiter) RateLimitHeader(d ratelimit.Decision) string { return l.h.RateLimitHeader(d) }
