package redisstore

import (
	"context"
	"fmt"
	"runtime/metrics"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
)

// BenchmarkGateRefusal is the store's part of a gate refusal (bench
// scenario (f)) through the Client: "folded" is what the engine does
// (ResolvePair with the budget and the attempt record: one script),
// "separate" what it did before (ResolvePair, redis_rate's Allow,
// Attempts.Add: three round trips). Serially and from 16 goroutines;
// -benchmem gives the client's allocations per request, goroutines/op
// the goroutines started per request (go-redis starts none on a call).
func BenchmarkGateRefusal(b *testing.B) {
	srv := redistest.StartServer(b)
	_, set := newSet(b, Config{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	lim, err := set.Limiters.Limiter(ratelimit.Budget{Name: "rcns", Burst: 100000000, PerMinute: 100000000}, 0)
	if err != nil {
		b.Fatal(err)
	}
	var seq int64
	attempt := func(i int64) *store.Attempt {
		return &store.Attempt{ID: fmt.Sprintf("rcns-bench-%d", i), Method: "LOOKUP", Path: "/nothing", AgentID: "agent",
			Reason: "composition-impossible", Explanation: "no recipe can synthesize LOOKUP /nothing", Locks: map[string]string{"caller-opt-in": "open"}}
	}
	run := map[string]func(i int64) error{
		"folded": func(i int64) error {
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: "agent", Method: "LOOKUP", Path: "/nothing", Spend: lim, Attempt: attempt(i)})
			if err == nil && !r.AttemptKept {
				err = fmt.Errorf("not kept: %+v", r)
			}
			return err
		},
		"separate": func(i int64) error {
			if _, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: "agent", Method: "LOOKUP", Path: "/nothing"}); err != nil {
				return err
			}
			if _, err := lim.Allow(ctx, "agent"); err != nil {
				return err
			}
			return set.Attempts.Add(ctx, *attempt(i))
		},
	}
	for _, name := range []string{"folded", "separate"} {
		f := run[name]
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			defer goroutinesPerOp(b)()
			for b.Loop() {
				seq++
				if err := f(seq); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel16", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			defer goroutinesPerOp(b)()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := f(1_000_000_000 + benchSeq.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// goroutinesPerOp reports the goroutines started per op from its call
// to the call of the function it returns (the benchmark's own 16
// goroutines of RunParallel included: at most 16/b.N).
func goroutinesPerOp(b *testing.B) func() {
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	start := sample[0].Value.Uint64()
	return func() {
		metrics.Read(sample)
		b.ReportMetric(float64(sample[0].Value.Uint64()-start)/float64(b.N), "goroutines/op")
	}
}
