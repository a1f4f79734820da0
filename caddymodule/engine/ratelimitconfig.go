package engine

import (
	"fmt"
	"math"
)

// RateLimitConfig is the per-agent budgets (spec §12.1; ARCHITECTURE.md "Rate limits"), shared by every door.
type RateLimitConfig struct {
	// RateLimitPerMinute is the RCNS gate budget per agent, in tokens
	// per minute; every gate evaluation past locks 1–2 spends one (spec
	// §12.1, OP-4, OP-5). Default 10.
	RateLimitPerMinute float64 `json:"rate_limit_per_minute,omitempty"`

	// RateLimitBurst is the gate budget's bucket size. Default:
	// RateLimitPerMinute rounded up.
	RateLimitBurst int `json:"rate_limit_burst,omitempty"`

	// InvocationRateLimitPerMinute is the ordinary invocation budget per
	// agent (Tier B calls and contract invocations), in tokens per
	// minute. Default 0: off.
	InvocationRateLimitPerMinute float64 `json:"invocation_rate_limit_per_minute,omitempty"`

	// InvocationRateLimitBurst is the invocation budget's bucket size.
	// Default: InvocationRateLimitPerMinute rounded up.
	InvocationRateLimitBurst int `json:"invocation_rate_limit_burst,omitempty"`

	// RateLimitAgents bounds the buckets kept per budget; an evicted
	// bucket restarts full. Default 100000.
	RateLimitAgents int64 `json:"rate_limit_agents,omitempty"`
}

// MaxRatePerMinute bounds a rate limit's tokens per minute (rate_limit
// and invocation rate_limit): a billion, past which a budget limits
// nothing a gateway could serve. MinRatePerMinute is the least, one
// token in about two years: below it the budget's window overflows
// what the RateLimit header can carry (helper-151: 1e-300 passed the
// parser and failed at provision with a window of 6e+301 s).
const (
	MaxRatePerMinute = 1e9
	MinRatePerMinute = 1e-6
)

// validate refuses a rate over MaxRatePerMinute, naming its knob: its
// default burst, the rate rounded up, would not fit an int (helper-150:
// "burst -9223372036854775808"); and one under MinRatePerMinute.
// Negative values are refused with the other knobs.
func (c RateLimitConfig) validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"rate_limit_per_minute", c.RateLimitPerMinute}, {"invocation_rate_limit_per_minute", c.InvocationRateLimitPerMinute}} {
		if r.v > MaxRatePerMinute {
			return fmt.Errorf("rcns: %s %g is over %g tokens a minute", r.name, r.v, float64(MaxRatePerMinute))
		}
		if r.v > 0 && r.v < MinRatePerMinute {
			return fmt.Errorf("rcns: %s %g is under %g tokens a minute", r.name, r.v, float64(MinRatePerMinute))
		}
	}
	return nil
}

// burstOf is a budget's bucket size: burst when given, else perMinute
// rounded up.
func burstOf(burst int, perMinute float64) int {
	if burst > 0 {
		return burst
	}
	return int(math.Ceil(perMinute))
}
