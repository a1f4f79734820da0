package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
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
	return decision(res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter), nil
}

// decision is the ratelimit.Decision of a GCRA answer (redis_rate's
// Result fields, or gcraFuncLua's read by gcraReply).
func decision(allowed, remaining int, retryAfter, resetAfter time.Duration) ratelimit.Decision {
	d := ratelimit.Decision{Allowed: allowed > 0, Remaining: max(remaining, 0), Reset: max(resetAfter, 0)}
	if !d.Allowed {
		// redis_rate truncates its float seconds to the nanosecond: one
		// microsecond more keeps Retry-After at or after the refill.
		d.RetryAfter = max(retryAfter, 0) + time.Microsecond
		d.Remaining = 0
	}
	return d
}

// key is the limiter's GCRA key of agentID, as redis_rate names it
// ("rate:" in front of the key given to Allow): in the agent's slot,
// so a script that also claims the agent's key can spend it.
func (l *limiter) key(agentID string) string { return "rate:" + l.c.agentKey(agentID, l.name) }

// gcraArgs are gcraFuncLua's burst, rate, period and cost, with the Go
// types and so the text redis_rate sends them in.
func (l *limiter) gcraArgs() []any {
	return []any{l.limit.Burst, l.limit.Rate, l.limit.Period.Seconds(), 1}
}

// gcraFuncLua defines gcra(key, burst, rate, period, cost, now) and
// gcra_now(t): redis_rate v10's allowN script (the GCRA of
// github.com/go-redis/redis_rate/v10, lua.go, after rwz/redis-gcra)
// as a function, so that a script that claims an Idempotency-Key can
// also spend the agent's budget in the same round trip. now is
// gcra_now(redis_time()) (TIME, timeFuncLua), the seconds since 2017-01-01 as
// redis_rate computes them; the state is redis_rate's (the TAT as a
// float string, expiring at the budget's refill), so redis_rate and
// this function spend one budget together. It returns redis_rate's
// reply: {allowed cost, remaining, retry after, reset after} (the two
// durations as float seconds in strings). TestGCRAMatchesRedisRate
// holds it equal to redis_rate's script on the same Redis, for the
// same sequences and clocks. Do not change one without the other.
const gcraFuncLua = `
local function gcra_now(t)
  return (t[1] - 1483228800) + (t[2] / 1000000)
end
local function gcra(rate_limit_key, burst, rate, period, cost, now)
  local emission_interval = period / rate
  local increment = emission_interval * cost
  local burst_offset = emission_interval * burst
  local tat = redis.call("GET", rate_limit_key)
  if not tat then
    tat = now
  else
    tat = tonumber(tat)
  end
  tat = math.max(tat, now)
  local new_tat = tat + increment
  local allow_at = new_tat - burst_offset
  local diff = now - allow_at
  local remaining = diff / emission_interval
  if remaining < 0 then
    local reset_after = tat - now
    local retry_after = diff * -1
    return {0, 0, tostring(retry_after), tostring(reset_after)}
  end
  local reset_after = new_tat - now
  if reset_after > 0 then
    redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
  end
  local retry_after = -1
  return {cost, remaining, tostring(retry_after), tostring(reset_after)}
end
`

// gcraReply reads gcra's reply from v at i as redis_rate's AllowN
// reads it, and returns its decision.
func gcraReply(v []any, i int) (ratelimit.Decision, error) {
	retry, err := strconv.ParseFloat(replyString(v, i+2), 64)
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("%w: rate limit reply: %v", store.ErrUnavailable, err)
	}
	reset, err := strconv.ParseFloat(replyString(v, i+3), 64)
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("%w: rate limit reply: %v", store.ErrUnavailable, err)
	}
	return decision(int(replyInt(v, i)), int(replyInt(v, i+1)), rateDur(retry), rateDur(reset)), nil
}

// rateDur is redis_rate's dur: float seconds, -1 kept as -1.
func rateDur(f float64) time.Duration {
	if f == -1 {
		return -1
	}
	return time.Duration(f * float64(time.Second))
}

func (l *limiter) Budget() ratelimit.Budget                    { return l.h.Budget() }
func (l *limiter) PolicyHeader() string                        { return l.h.PolicyHeader() }
func (l *limiter) RateLimitHeader(d ratelimit.Decision) string { return l.h.RateLimitHeader(d) }
