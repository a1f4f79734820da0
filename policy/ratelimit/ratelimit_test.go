package ratelimit

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/dunglas/httpsfv"
)

// fakeClock is a settable clock for the Limiter's now func.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newLimiter(t *testing.T, b Budget, maxAgents int64, clk *fakeClock) *Limiter {
	t.Helper()
	l, err := New(b, maxAgents, clk.Now)
	if err != nil {
		t.Fatalf("New(%+v): %v", b, err)
	}
	t.Cleanup(l.Close)
	return l
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name      string
		budget    Budget
		maxAgents int64
		wantErr   bool
	}{
		{name: "spec default", budget: Budget{Name: "rcns", Burst: 10, PerMinute: 10}},
		{name: "fractional rate", budget: Budget{Name: "invocation", Burst: 1, PerMinute: 0.5}},
		{name: "empty name", budget: Budget{Burst: 10, PerMinute: 10}, wantErr: true},
		{name: "control char in name", budget: Budget{Name: "rc\nns", Burst: 10, PerMinute: 10}, wantErr: true},
		{name: "non-ASCII name", budget: Budget{Name: "rcns\u00e9", Burst: 10, PerMinute: 10}, wantErr: true},
		{name: "zero burst", budget: Budget{Name: "rcns", Burst: 0, PerMinute: 10}, wantErr: true},
		{name: "negative burst", budget: Budget{Name: "rcns", Burst: -1, PerMinute: 10}, wantErr: true},
		{name: "zero rate", budget: Budget{Name: "rcns", Burst: 10, PerMinute: 0}, wantErr: true},
		{name: "negative rate", budget: Budget{Name: "rcns", Burst: 10, PerMinute: -1}, wantErr: true},
		{name: "NaN rate", budget: Budget{Name: "rcns", Burst: 10, PerMinute: math.NaN()}, wantErr: true},
		{name: "infinite rate", budget: Budget{Name: "rcns", Burst: 10, PerMinute: math.Inf(1)}, wantErr: true},
		{name: "window too large", budget: Budget{Name: "rcns", Burst: 10, PerMinute: 1e-15}, wantErr: true},
		{name: "negative max agents", budget: Budget{Name: "rcns", Burst: 10, PerMinute: 10}, maxAgents: -1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(tt.budget, tt.maxAgents, nil)
			if tt.wantErr {
				if err == nil {
					l.Close()
					t.Fatalf("New(%+v) = nil error, want error", tt.budget)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v): %v", tt.budget, err)
			}
			defer l.Close()
			if l.maxAgents != DefaultMaxAgents {
				t.Errorf("maxAgents = %d, want %d", l.maxAgents, DefaultMaxAgents)
			}
		})
	}
}

func TestBurstThenRefusal(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Budget{Name: "rcns", Burst: 3, PerMinute: 1}, 0, clk)
	want := []Decision{
		{Allowed: true, Remaining: 2, Reset: time.Minute},
		{Allowed: true, Remaining: 1, Reset: 2 * time.Minute},
		{Allowed: true, Remaining: 0, Reset: 3 * time.Minute},
		{Allowed: false, Remaining: 0, RetryAfter: time.Minute, Reset: 3 * time.Minute},
		{Allowed: false, Remaining: 0, RetryAfter: time.Minute, Reset: 3 * time.Minute},
	}
	for i, w := range want {
		if got := l.Allow("agent-a"); got != w {
			t.Errorf("request %d: Allow = %+v, want %+v", i+1, got, w)
		}
	}
}

func TestRefill(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Budget{Name: "rcns", Burst: 2, PerMinute: 2}, 0, clk) // one token per 30 s
	for range 2 {
		if d := l.Allow("a"); !d.Allowed {
			t.Fatalf("burst request refused: %+v", d)
		}
	}
	steps := []struct {
		name    string
		advance time.Duration
		want    Decision
	}{
		{name: "still empty", advance: 0, want: Decision{Allowed: false, RetryAfter: 30 * time.Second, Reset: time.Minute}},
		{name: "half a token", advance: 15 * time.Second, want: Decision{Allowed: false, RetryAfter: 15 * time.Second, Reset: 45 * time.Second}},
		{name: "one token", advance: 15 * time.Second, want: Decision{Allowed: true, Remaining: 0, Reset: time.Minute}},
		{name: "empty again", advance: 0, want: Decision{Allowed: false, RetryAfter: 30 * time.Second, Reset: time.Minute}},
		{name: "long idle refills to burst only", advance: time.Hour, want: Decision{Allowed: true, Remaining: 1, Reset: 30 * time.Second}},
		{name: "second token after idle", advance: 0, want: Decision{Allowed: true, Remaining: 0, Reset: time.Minute}},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		if got := l.Allow("a"); got != s.want {
			t.Errorf("%s: Allow = %+v, want %+v", s.name, got, s.want)
		}
	}
}

func TestRetryAfterNeverEarlierThanRefill(t *testing.T) {
	tests := []struct {
		name   string
		budget Budget
	}{
		{name: "whole seconds", budget: Budget{Name: "rcns", Burst: 10, PerMinute: 10}},
		{name: "odd rate", budget: Budget{Name: "rcns", Burst: 3, PerMinute: 7}},
		{name: "fast rate", budget: Budget{Name: "invocation", Burst: 5, PerMinute: 6000}},
		{name: "irrational-ish rate", budget: Budget{Name: "rcns", Burst: 1, PerMinute: 1.0 / 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			l := newLimiter(t, tt.budget, 0, clk)
			for range tt.budget.Burst {
				l.Allow("a")
			}
			// Land at a few awkward fractional positions in the refill.
			for _, nudge := range []time.Duration{0, 1, 333 * time.Millisecond, 7 * time.Nanosecond} {
				clk.Advance(nudge)
				d := l.Allow("a")
				if d.Allowed {
					continue
				}
				if d.RetryAfter <= 0 {
					t.Fatalf("refused with RetryAfter %v", d.RetryAfter)
				}
				secs := RetryAfterSeconds(d)
				if time.Duration(secs)*time.Second < d.RetryAfter {
					t.Fatalf("RetryAfterSeconds = %d < RetryAfter %v", secs, d.RetryAfter)
				}
				// A retry exactly RetryAfter later must find a token, and
				// so must one at the advertised whole seconds.
				b := l.bucket("a")
				now := clk.Now()
				if tok := b.lim.TokensAt(now.Add(d.RetryAfter)); tok < 1 {
					t.Fatalf("tokens at now+RetryAfter(%v) = %v, want ≥ 1", d.RetryAfter, tok)
				}
				clk.Advance(time.Duration(secs) * time.Second)
				if got := l.Allow("a"); !got.Allowed {
					t.Fatalf("retry after %d s refused: %+v", secs, got)
				}
			}
		})
	}
}

func TestAgentsIndependent(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Budget{Name: "rcns", Burst: 2, PerMinute: 1}, 0, clk)
	for range 2 {
		l.Allow("agent-a")
	}
	if d := l.Allow("agent-a"); d.Allowed {
		t.Fatalf("agent-a over budget allowed: %+v", d)
	}
	tests := []struct {
		name  string
		agent string
		want  Decision
	}{
		{name: "other agent has a full bucket", agent: "agent-b", want: Decision{Allowed: true, Remaining: 1, Reset: time.Minute}},
		{name: "prefix of agent id", agent: "agent-", want: Decision{Allowed: true, Remaining: 1, Reset: time.Minute}},
		{name: "exhausted agent still refused", agent: "agent-a", want: Decision{Allowed: false, RetryAfter: time.Minute, Reset: 2 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := l.Allow(tt.agent); got != tt.want {
				t.Errorf("Allow(%q) = %+v, want %+v", tt.agent, got, tt.want)
			}
		})
	}
}

func TestConcurrentFirstRequestsShareOneBucket(t *testing.T) {
	clk := newClock()
	const burst = 5
	l := newLimiter(t, Budget{Name: "rcns", Burst: burst, PerMinute: 1}, 0, clk)
	const n = 50
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		allowed int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if l.Allow("same-agent").Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if allowed != burst {
		t.Errorf("allowed %d of %d concurrent first requests, want %d", allowed, n, burst)
	}
}

func TestHeaders(t *testing.T) {
	tests := []struct {
		name       string
		budget     Budget
		decision   Decision
		wantPolicy string
		wantLimit  string
		wantRetry  int
	}{
		{
			name:       "spec default allowed",
			budget:     Budget{Name: "rcns", Burst: 10, PerMinute: 10},
			decision:   Decision{Allowed: true, Remaining: 9, Reset: 6 * time.Second},
			wantPolicy: `"rcns";q=10;w=60`,
			wantLimit:  `"rcns";r=9;t=6`,
			wantRetry:  0,
		},
		{
			name:       "refused uses retry-after for t",
			budget:     Budget{Name: "rcns", Burst: 10, PerMinute: 10},
			decision:   Decision{Allowed: false, Remaining: 0, RetryAfter: 5*time.Second + time.Millisecond, Reset: 59 * time.Second},
			wantPolicy: `"rcns";q=10;w=60`,
			wantLimit:  `"rcns";r=0;t=6`,
			wantRetry:  6,
		},
		{
			name:       "refused sub-second retry is at least 1",
			budget:     Budget{Name: "invocation", Burst: 100, PerMinute: 6000},
			decision:   Decision{Allowed: false, RetryAfter: 10 * time.Millisecond, Reset: time.Second},
			wantPolicy: `"invocation";q=100;w=1`,
			wantLimit:  `"invocation";r=0;t=1`,
			wantRetry:  1,
		},
		{
			name:       "window rounds up",
			budget:     Budget{Name: "invocation", Burst: 7, PerMinute: 3},
			decision:   Decision{Allowed: true, Remaining: 3, Reset: 80*time.Second + 1},
			wantPolicy: `"invocation";q=7;w=140`,
			wantLimit:  `"invocation";r=3;t=81`,
			wantRetry:  0,
		},
		{
			name:       "sub-second window is 1",
			budget:     Budget{Name: "invocation", Burst: 1, PerMinute: 600},
			decision:   Decision{Allowed: true, Remaining: 0, Reset: 100 * time.Millisecond},
			wantPolicy: `"invocation";q=1;w=1`,
			wantLimit:  `"invocation";r=0;t=1`,
			wantRetry:  0,
		},
		{
			name:       "name with quote and backslash is escaped",
			budget:     Budget{Name: `a"b\c`, Burst: 2, PerMinute: 1},
			decision:   Decision{Allowed: true, Remaining: 1, Reset: time.Minute},
			wantPolicy: `"a\"b\\c";q=2;w=120`,
			wantLimit:  `"a\"b\\c";r=1;t=60`,
			wantRetry:  0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(t, tt.budget, 10, newClock())
			if got := l.PolicyHeader(); got != tt.wantPolicy {
				t.Errorf("PolicyHeader() = %s, want %s", got, tt.wantPolicy)
			}
			if got := l.RateLimitHeader(tt.decision); got != tt.wantLimit {
				t.Errorf("RateLimitHeader() = %s, want %s", got, tt.wantLimit)
			}
			if got := RetryAfterSeconds(tt.decision); got != tt.wantRetry {
				t.Errorf("RetryAfterSeconds() = %d, want %d", got, tt.wantRetry)
			}
		})
	}
}

func TestHeadersFromAllow(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Budget{Name: "rcns", Burst: 10, PerMinute: 10}, 0, clk)
	steps := []struct {
		name      string
		wantLimit string
		wantRetry int
	}{
		{name: "first", wantLimit: `"rcns";r=9;t=6`},
	}
	for i := 2; i <= 10; i++ {
		steps = append(steps, struct {
			name      string
			wantLimit string
			wantRetry int
		}{name: fmt.Sprintf("request %d", i), wantLimit: fmt.Sprintf(`"rcns";r=%d;t=%d`, 10-i, 6*i)})
	}
	steps = append(steps, struct {
		name      string
		wantLimit string
		wantRetry int
	}{name: "refused", wantLimit: `"rcns";r=0;t=6`, wantRetry: 6})
	for _, s := range steps {
		d := l.Allow("a")
		if got := l.RateLimitHeader(d); got != s.wantLimit {
			t.Errorf("%s: RateLimit = %s, want %s", s.name, got, s.wantLimit)
		}
		if got := RetryAfterSeconds(d); got != s.wantRetry {
			t.Errorf("%s: Retry-After = %d, want %d", s.name, got, s.wantRetry)
		}
	}
}

func TestCapacityBound(t *testing.T) {
	const maxAgents = 100
	clk := newClock()
	l := newLimiter(t, Budget{Name: "rcns", Burst: 1, PerMinute: 1}, maxAgents, clk)
	const agents = 2000
	for i := range agents {
		l.Allow(fmt.Sprintf("agent-%d", i))
	}
	l.cache.Wait()
	l.cache.Do(func(c *ristretto.Cache[string, *bucket]) {
		if got := c.MaxCost(); got != maxAgents {
			t.Fatalf("cache MaxCost = %d, want %d", got, maxAgents)
		}
		if rem := c.RemainingCost(); rem < 0 {
			t.Errorf("cache RemainingCost = %d, want ≥ 0 (cost above MaxCost)", rem)
		}
	})
	held := 0
	for i := range agents {
		if _, ok := l.cache.Get(fmt.Sprintf("agent-%d", i)); ok {
			held++
		}
	}
	if held > maxAgents {
		t.Errorf("cache holds %d buckets, want ≤ %d", held, maxAgents)
	}
	if held == 0 {
		t.Errorf("cache holds no bucket at all")
	}
}

func TestCloseIdempotent(t *testing.T) {
	l, err := New(Budget{Name: "rcns", Burst: 1, PerMinute: 1}, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Allow("a")
	l.Close()
	l.Close()
	if d := l.Allow("a"); !d.Allowed {
		t.Errorf("Allow after Close = %+v, want a fresh full bucket", d)
	}
}

// TestRateLimitHeaderMatchesHTTPSFV holds the hand-appended RateLimit
// field byte-equal to httpsfv's serialization of the same List.
func TestRateLimitHeaderMatchesHTTPSFV(t *testing.T) {
	for _, name := range []string{"rcns", "invocation", `odd "name" \ x`} {
		l, err := New(Budget{Name: name, PerMinute: 60, Burst: 10}, 0, nil)
		if err != nil {
			t.Fatalf("New(%q): %v", name, err)
		}
		defer l.Close()
		for _, d := range []Decision{
			{Allowed: true, Remaining: 9, Reset: time.Second},
			{Allowed: true, Remaining: 0, Reset: 1500 * time.Millisecond},
			{Allowed: false, Remaining: -1, RetryAfter: 2500 * time.Millisecond, Reset: 10 * time.Second},
			{Allowed: true, Remaining: math.MaxInt64, Reset: time.Duration(math.MaxInt64)},
		} {
			tt := int64(ceilSeconds(d.Reset))
			if !d.Allowed {
				tt = int64(RetryAfterSeconds(d))
			}
			p := httpsfv.NewParams()
			p.Add("r", min(max(int64(d.Remaining), 0), maxSFInteger))
			p.Add("t", min(tt, maxSFInteger))
			want, err := httpsfv.Marshal(httpsfv.List{httpsfv.Item{Value: name, Params: p}})
			if err != nil {
				t.Fatal(err)
			}
			if got := l.RateLimitHeader(d); got != want {
				t.Errorf("RateLimitHeader(%+v) = %s, want %s", d, got, want)
			}
		}
	}
}
