package ratelimit

// Per-stage benchmarks (go test -bench; the load comparison is make bench): the rate-limit stage of a
// gate request, as caddymodule's spend calls it: Allow, then the
// RateLimit-Policy and RateLimit field values it puts on the answer.

import (
	"testing"
	"time"
)

const benchAgent = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"

var (
	sinkDecision Decision
	sinkString   string
)

func benchLimiter(b *testing.B) *Limiter {
	b.Helper()
	// The load test's budget: nothing is refused for rate.
	l, err := New(Budget{Name: BudgetRCNS, Burst: 100000000, PerMinute: 100000000}, DefaultMaxAgents, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	l.Allow(benchAgent) // create the bucket
	return l
}

// BenchmarkRateLimitAllow takes one token from a cached bucket.
func BenchmarkRateLimitAllow(b *testing.B) {
	l := benchLimiter(b)
	b.ReportAllocs()
	for b.Loop() {
		sinkDecision = l.Allow(benchAgent)
	}
}

// BenchmarkRateLimitAllowParallel is Allow from every P at once on one
// agent's bucket (one agent, many requests in flight, as in the load test).
func BenchmarkRateLimitAllowParallel(b *testing.B) {
	l := benchLimiter(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var d Decision
		for pb.Next() {
			d = l.Allow(benchAgent)
		}
		_ = d
	})
}

// BenchmarkRateLimitHeaders renders both answer fields of one decision
// (caddymodule spend renders them on every spend).
func BenchmarkRateLimitHeaders(b *testing.B) {
	l := benchLimiter(b)
	d := l.Allow(benchAgent)
	b.ReportAllocs()
	for b.Loop() {
		sinkString = l.PolicyHeader() + l.RateLimitHeader(d)
	}
}

// BenchmarkRateLimitSpend is the whole stage: Allow plus both fields.
func BenchmarkRateLimitSpend(b *testing.B) {
	l := benchLimiter(b)
	b.ReportAllocs()
	for b.Loop() {
		d := l.Allow(benchAgent)
		sinkString = l.PolicyHeader() + l.RateLimitHeader(d)
	}
}
