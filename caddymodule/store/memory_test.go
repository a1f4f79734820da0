package store_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
)

func TestMemory(t *testing.T) {
	h := storetest.Harness{
		New: func(t *testing.T, cfg storetest.Config) (store.Set, store.Set) {
			m := store.NewMemory(cfg.Limits, cfg.Now)
			t.Cleanup(func() { _ = m.Close() })
			return m.Set(), m.Set()
		},
		Totals:               true,
		ClockDrivesRetention: true,
	}
	storetest.Run(t, h)
	t.Run("gate-miss", func(t *testing.T) { storetest.RunGateMiss(t, h) })
}

// TestLimiterReplacedStaysInForce: a reload that changes a budget builds
// a new limiter while the running configuration still spends its own:
// that one stays in force (a reload that then fails leaves it serving),
// is closed once released, and, closed while requests still spend it,
// harms none of them; a limiter two configurations hold stays open until
// both released it.
func TestLimiterReplacedStaysInForce(t *testing.T) {
	m := store.NewMemory(store.Limits{}, nil)
	lims := m.Set().Limiters
	take := func(l store.Limiter, agent string) bool {
		t.Helper()
		d, err := l.Allow(context.Background(), agent)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	allowed := func(l store.Limiter, agent string, n int) (yes int) {
		t.Helper()
		for range n {
			if take(l, agent) {
				yes++
			}
		}
		return yes
	}
	old, err := lims.Limiter(ratelimit.Budget{Name: "rcns", Burst: 2, PerMinute: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !take(old, "a") {
		t.Fatal("the first request of a burst of 2 was refused")
	}
	reloaded, err := lims.Limiter(ratelimit.Budget{Name: "rcns", Burst: 3, PerMinute: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !take(old, "a") || take(old, "a") {
		t.Fatal("the running configuration's budget, replaced by a reload, no longer holds: its bucket was dropped")
	}
	if !take(reloaded, "a") {
		t.Fatal("the new budget refused a request")
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = old.Allow(context.Background(), "agent-"+strconv.Itoa(i%50))
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	old.(store.LimiterReleaser).Release()
	old.(store.LimiterReleaser).Release() // once per hold
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := allowed(old, "a", 3); n != 3 {
		t.Fatalf("a released, replaced limiter allowed %d of 3 requests of a spent agent: it still remembers buckets, it was not closed", n)
	}

	again, err := lims.Limiter(ratelimit.Budget{Name: "rcns", Burst: 3, PerMinute: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	reloaded.(store.LimiterReleaser).Release()
	if n := allowed(again, "a", 3); n != 2 { // burst 3, one spent above
		t.Fatalf("a limiter still held by a configuration allowed %d of 3, want 2: it lost its buckets when another released it", n)
	}
}

// TestMemoryNegotiationsBound: the memory store keeps the newest
// MaxNegotiations PROPOSE negotiations; the oldest kept is forgotten
// first, and a turn echoing it finds nothing.
func TestMemoryNegotiationsBound(t *testing.T) {
	m := store.NewMemory(store.Limits{}, nil)
	defer m.Close()
	neg := m.Set().Negotiations
	ctx := context.Background()
	for i := range store.MaxNegotiations + 1 {
		if _, err := neg.Record(ctx, "a", "n-"+strconv.Itoa(i), true); err != nil {
			t.Fatal(err)
		}
	}
	if _, kept, _ := neg.Turn(ctx, "a", "n-0"); kept {
		t.Fatalf("the oldest of %d negotiations was kept", store.MaxNegotiations+1)
	}
	if n, kept, _ := neg.Turn(ctx, "a", "n-1"); !kept || n != 1 {
		t.Fatalf("a negotiation within the bound = %d, %v; want 1, kept", n, kept)
	}
}

// TestLimitErrorCounts: a bound of one live contract is said in the
// singular (helper-135: "holds 1 live contracts").
func TestLimitErrorCounts(t *testing.T) {
	for _, c := range []struct {
		err  *store.LimitError
		want string
	}{
		{&store.LimitError{Err: store.ErrAgentFull, Held: 1, Limit: 1}, "the agent already holds 1 live contract; max_contracts_per_agent is 1"},
		{&store.LimitError{Err: store.ErrStoreFull, Held: 1, Limit: 1}, "the gateway holds 1 live contract, its maximum"},
		{&store.LimitError{Err: store.ErrStoreFull, Held: 2, Limit: 2}, "the gateway holds 2 live contracts, its maximum"},
	} {
		if got := c.err.Error(); !strings.Contains(got, c.want) {
			t.Errorf("%q, want %q in it", got, c.want)
		}
	}
}
