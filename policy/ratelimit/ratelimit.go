// Package ratelimit holds per-agent token buckets for the RCNS gate budget
// and the ordinary invocation budget (RCNS §12.1, OP-4, OP-5) and renders
// them as the RateLimit-Policy and RateLimit header fields of
// draft-ietf-httpapi-ratelimit-headers-10 (§3, §4) plus Retry-After
// (RFC 9110 §10.2.3).
//
// Each Agent-ID gets its own golang.org/x/time/rate bucket of Budget.Burst
// tokens refilled at Budget.PerMinute tokens per minute. Buckets live in a
// bounded github.com/dgraph-io/ristretto/v2 cache: every bucket costs 1,
// the cache's internal per-entry cost is ignored, and the cache holds at
// most maxAgents buckets (about 313 bytes each, TOOLCHAIN.md). When the
// cache is full, ristretto evicts by its TinyLFU/sampled-LFU policy and
// may also refuse to admit a newcomer that is used less often than the
// buckets it would displace. A bucket that is evicted, or was never
// admitted, starts over full the next time its agent is seen: under
// pressure an agent can therefore get more than Burst requests through,
// never fewer. Size maxAgents above the number of registered agents.
//
// The package imports only the standard library, golang.org/x/time,
// ristretto/v2 and github.com/dunglas/httpsfv.
package ratelimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/dunglas/httpsfv"
	"golang.org/x/time/rate"

	"github.com/caddy-rcns/caddy-rcns/internal/closecache"
)

// Budget names commonly configured (RCNS §12.1; ARCHITECTURE.md "Rate
// limits"): the gate budget reported as `scope: "rcns"` and the ordinary
// per-agent budget reported as `scope: "invocation"`.
const (
	// BudgetRCNS is the name of the RCNS gate-evaluation budget.
	BudgetRCNS = "rcns"
	// BudgetInvocation is the name of the ordinary invocation budget.
	BudgetInvocation = "invocation"
)

// DefaultMaxAgents is the number of agent buckets kept when New is given
// maxAgents 0.
const DefaultMaxAgents int64 = 100000

// maxSFInteger is the largest Integer a structured field may carry
// (RFC 8941 §3.3.1: at most 15 digits).
const maxSFInteger = 999_999_999_999_999

// Budget is one token-bucket policy applied per Agent-ID.
type Budget struct {
	// Name identifies the policy in RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-10 §3.1, §4.1), usually
	// BudgetRCNS ("rcns") or BudgetInvocation ("invocation"). It must be
	// non-empty printable ASCII (0x20–0x7E) so it serializes as an
	// RFC 8941 String.
	Name string
	// Burst is the bucket size in requests: how many requests an agent
	// with a full bucket may make at once. Must be ≥ 1. The spec's gate
	// default is 10 (RCNS §12.1, OP-5).
	Burst int
	// PerMinute is the refill rate in tokens (requests) per minute. Must be
	// finite and > 0. The spec's gate default is 10 (RCNS §12.1).
	PerMinute float64
}

// Limiter applies one Budget per Agent-ID. It is safe for concurrent use.
// Create it with New and release it with Close.
type Limiter struct {
	budget    Budget
	perSecond float64
	window    int64 // RateLimit-Policy w, seconds
	maxAgents int64
	now       func() time.Time
	cache     *closecache.Cache[string, *bucket]
	seed      maphash.Seed
	shards    [64]sync.Mutex // serializes bucket creation per agent

	// policyField is the constant RateLimit-Policy value and nameItem
	// the serialized budget name (an sf-string), both rendered with
	// httpsfv once in New; RateLimitHeader appends only its two
	// integers to nameItem per call.
	policyField string
	nameItem    string
}

// bucket is one agent's token bucket. mu makes a take-and-inspect
// sequence atomic so a Decision describes exactly the state it produced.
type bucket struct {
	mu  sync.Mutex
	lim *rate.Limiter
}

// Decision is the outcome of one Allow call.
type Decision struct {
	// Allowed reports whether a token was taken and the request may go on.
	Allowed bool
	// Remaining is the number of whole tokens left in the bucket after
	// this request (floored, ≥ 0). It is the RateLimit "r" parameter.
	Remaining int
	// RetryAfter is, when Allowed is false, the time until the bucket
	// holds one whole token again; a request made that much later is
	// allowed (absent other traffic from the same agent). It is rounded
	// up to the nanosecond and checked against the bucket, so it is never
	// earlier than the refill. Zero when Allowed is true.
	RetryAfter time.Duration
	// Reset is the time until the bucket is full again (Burst tokens).
	Reset time.Duration
}

// New returns a Limiter applying b to every agent, keeping at most
// maxAgents buckets (0 means DefaultMaxAgents; negative is an error) and
// reading time from now (nil means time.Now).
//
// It returns an error when b.Name is empty or not printable ASCII, when
// b.Burst < 1, when b.PerMinute is not a finite number > 0, when the
// policy window (Burst/PerMinute minutes) exceeds what a structured-field
// Integer can carry, or when the ristretto cache cannot be built.
// RCNS §12.1.
func New(b Budget, maxAgents int64, now func() time.Time) (*Limiter, error) {
	if b.Name == "" {
		return nil, errors.New("ratelimit: budget name is empty")
	}
	for i := 0; i < len(b.Name); i++ {
		if c := b.Name[i]; c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("ratelimit: budget name %q: byte 0x%02x is not printable ASCII", b.Name, c)
		}
	}
	if b.Burst < 1 {
		return nil, fmt.Errorf("ratelimit: budget %q: burst %d, want ≥ 1", b.Name, b.Burst)
	}
	if math.IsNaN(b.PerMinute) || math.IsInf(b.PerMinute, 0) || b.PerMinute <= 0 {
		return nil, fmt.Errorf("ratelimit: budget %q: per_minute %v, want a finite number > 0", b.Name, b.PerMinute)
	}
	if int64(b.Burst) > maxSFInteger {
		return nil, fmt.Errorf("ratelimit: budget %q: burst %d exceeds %d", b.Name, b.Burst, int64(maxSFInteger))
	}
	w := math.Ceil(float64(b.Burst) / b.PerMinute * 60)
	if w > maxSFInteger {
		return nil, fmt.Errorf("ratelimit: budget %q: window %.3g s exceeds %d s", b.Name, w, int64(maxSFInteger))
	}
	if w < 1 {
		w = 1 // draft-10 §3.1.3: w is a non-zero Integer
	}
	switch {
	case maxAgents == 0:
		maxAgents = DefaultMaxAgents
	case maxAgents < 0:
		return nil, fmt.Errorf("ratelimit: budget %q: max agents %d, want ≥ 0", b.Name, maxAgents)
	}
	if now == nil {
		now = time.Now
	}
	cache, err := ristretto.NewCache(&ristretto.Config[string, *bucket]{
		NumCounters:        10 * maxAgents,
		MaxCost:            maxAgents,
		BufferItems:        64,
		IgnoreInternalCost: true, // cost 1 per bucket, not bytes (TOOLCHAIN.md)
	})
	if err != nil {
		return nil, fmt.Errorf("ratelimit: budget %q: %w", b.Name, err)
	}
	l := &Limiter{
		budget:    b,
		perSecond: b.PerMinute / 60,
		window:    int64(w),
		maxAgents: maxAgents,
		now:       now,
		cache:     closecache.New(cache),
		seed:      maphash.MakeSeed(),
	}
	p := httpsfv.NewParams()
	p.Add("q", int64(l.budget.Burst))
	p.Add("w", l.window)
	l.policyField = l.marshal(p)
	if l.nameItem, err = httpsfv.Marshal(httpsfv.Item{Value: b.Name, Params: httpsfv.NewParams()}); err != nil {
		cache.Close()
		return nil, fmt.Errorf("ratelimit: budget %q: %w", b.Name, err)
	}
	return l, nil
}

// Budget returns the budget the Limiter applies.
func (l *Limiter) Budget() Budget { return l.budget }

// Allow takes one token from agentID's bucket when one is available, at
// the time given by the Limiter's clock, and describes the bucket
// afterwards. An agent seen for the first time (or whose bucket was
// evicted) starts with a full bucket. Agents never share a bucket.
// After Close no bucket is remembered: every call sees a full bucket.
// RCNS §12.1 (OP-4, OP-5).
func (l *Limiter) Allow(agentID string) Decision {
	b := l.bucket(agentID)
	now := l.now()

	b.mu.Lock()
	defer b.mu.Unlock()

	allowed := b.lim.AllowN(now, 1)
	tokens := b.lim.TokensAt(now)
	d := Decision{Allowed: allowed}
	if tokens > 0 {
		d.Remaining = int(math.Floor(tokens))
	}
	d.Reset = l.durationFor(float64(l.budget.Burst) - tokens)
	if !allowed {
		ra := l.durationFor(1 - tokens)
		// Guard against float rounding: the bucket must really hold a
		// whole token at now+ra.
		for b.lim.TokensAt(now.Add(ra)) < 1 {
			ra += time.Microsecond
		}
		d.RetryAfter = ra
	}
	return d
}

// durationFor is the time needed to refill tokens tokens, rounded up to
// the nanosecond; 0 for tokens ≤ 0.
func (l *Limiter) durationFor(tokens float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	ns := math.Ceil(tokens / l.perSecond * float64(time.Second))
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}

// bucket returns agentID's bucket, creating and caching a full one when
// the cache has none. Creation is serialized per shard of agent ids and
// waits for ristretto to apply the write, so concurrent first requests of
// one agent share one bucket.
func (l *Limiter) bucket(agentID string) *bucket {
	c := l.cache // once closed, every call misses: each request sees a full bucket
	if b, ok := c.Get(agentID); ok {
		return b
	}
	mu := &l.shards[maphash.String(l.seed, agentID)%uint64(len(l.shards))]
	mu.Lock()
	defer mu.Unlock()
	if b, ok := c.Get(agentID); ok {
		return b
	}
	b := &bucket{lim: rate.NewLimiter(rate.Limit(l.perSecond), l.budget.Burst)}
	if c.Set(agentID, b, 1) {
		c.Wait()
	}
	return b
}

// Close drops every bucket and stops the cache's background goroutine
// (once no call of Allow holds it, closecache: one still running is
// not harmed). It is safe to call more than once.
func (l *Limiter) Close() { l.cache.Close() }

// PolicyHeader returns the RateLimit-Policy field value for the budget,
// one Quota Policy Item serialized as an RFC 8941 List
// (draft-ietf-httpapi-ratelimit-headers-10 §3, §3.1):
//
//	"<name>";q=<Burst>;w=<ceil(Burst/PerMinute*60), at least 1>
//
// e.g. `"rcns";q=10;w=60` for burst 10 refilling 10 per minute. The
// quota unit is the default, requests (§3.1.2), so qu is left out.
func (l *Limiter) PolicyHeader() string {
	return l.policyField
}

// RateLimitHeader returns the RateLimit field value describing d, one
// Service Limit Item serialized as an RFC 8941 List
// (draft-ietf-httpapi-ratelimit-headers-10 §4, §4.1):
//
//	"<name>";r=<Remaining>;t=<seconds>
//
// When d.Allowed, t is d.Reset in whole seconds rounded up (the time
// until the bucket is full). When the request was refused, t is
// RetryAfterSeconds(d) (the time until the next token), because a
// response carrying both fields SHOULD NOT have a Retry-After earlier
// than t (draft-10 §6); the 429 then says the same thing twice.
// E.g. `"rcns";r=0;t=6`.
func (l *Limiter) RateLimitHeader(d Decision) string {
	t := int64(ceilSeconds(d.Reset))
	if !d.Allowed {
		t = int64(RetryAfterSeconds(d))
	}
	r := int64(d.Remaining)
	if r < 0 {
		r = 0
	}
	// An sf-integer parameter serializes as ";key=" and the decimal
	// digits (RFC 8941 §4.1.1.2, §4.1.4); TestRateLimitHeaderMatchesHTTPSFV
	// holds this equal to httpsfv's output.
	b := make([]byte, 0, len(l.nameItem)+48)
	b = append(b, l.nameItem...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, min(r, maxSFInteger), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, min(t, maxSFInteger), 10)
	return string(b)
}

func (l *Limiter) marshal(p *httpsfv.Params) string {
	s, err := httpsfv.Marshal(httpsfv.List{httpsfv.Item{Value: l.budget.Name, Params: p}})
	if err != nil {
		// Unreachable: New checked the name and the integer ranges.
		panic("ratelimit: " + err.Error())
	}
	return s
}

// RetryAfterSeconds returns the Retry-After value (RFC 9110 §10.2.3,
// delay-seconds) for d: d.RetryAfter in whole seconds rounded up, at
// least 1 when d was refused; 0 when d was allowed. RCNS §12.1.
func RetryAfterSeconds(d Decision) int {
	if d.Allowed {
		return 0
	}
	return max(ceilSeconds(d.RetryAfter), 1)
}

// ceilSeconds rounds d up to whole seconds; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return int(s)
}
