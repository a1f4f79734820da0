package redisstore

import (
	"context"
	"fmt"
	"runtime/metrics"
	"testing"

	"github.com/redis/go-redis/v9"

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

// BenchmarkServerSide gives what one serial round trip costs the Redis
// server itself (redis-cpu-ns/op, from its INFO; the client's CPU is
// cpu-ns/op's business elsewhere), from a bare PING up to the gate
// refusal's script (scenario (f)), serially and from 8 goroutines per
// CPU (16 on a 2-CPU machine; the server then reads several commands
// per wake-up), so a target on the server's CPU is
// read against the round trip's own floor (docs/cluster.md "Choices and
// measurements"):
//
//	ping        PING
//	script      an EVALSHA returning 1
//	script+lib  the same with the gate script's Lua functions defined
//	refusal     ResolvePair folded: the pair lookup, the budget's GCRA
//	            and the attempt record (7 to 9 commands in one script)
//
// redis-cmds/op counts the two INFO reads around the loop too (1/b.N).
func BenchmarkServerSide(b *testing.B) {
	srv := redistest.StartServer(b)
	_, set := newSet(b, Config{Addrs: []string{srv.Addr()}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer rdb.Close()
	ctx := context.Background()
	lim, err := set.Limiters.Limiter(ratelimit.Budget{Name: "rcns", Burst: 100000000, PerMinute: 100000000}, 0)
	if err != nil {
		b.Fatal(err)
	}
	bare := redis.NewScript("#!lua\nreturn 1")
	lib := denyOOM(timeFuncLua + claimFuncLua + pairFuncLua + gcraFuncLua + attemptFuncLua + mintFuncLua + "return 1")
	run := []struct {
		name string
		f    func() error
	}{
		{"ping", func() error { return rdb.Ping(ctx).Err() }},
		{"script", func() error { return bare.Run(ctx, rdb, []string{"k"}).Err() }},
		{"script+lib", func() error { return lib.Run(ctx, rdb, []string{"k"}).Err() }},
		{"refusal", func() error {
			seq := benchSeq.Add(1)
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: "agent", Method: "LOOKUP", Path: "/nothing", Spend: lim,
				Attempt: &store.Attempt{ID: fmt.Sprintf("rcns-bench-%d", seq), Method: "LOOKUP", Path: "/nothing", AgentID: "agent",
					Reason: "composition-impossible", Explanation: "no recipe can synthesize LOOKUP /nothing", Locks: map[string]string{"caller-opt-in": "open"}}})
			if err == nil && !r.AttemptKept {
				err = fmt.Errorf("not kept: %+v", r)
			}
			return err
		}},
	}
	for _, r := range run {
		b.Run(r.name+"/serial", func(b *testing.B) {
			before := srv.Usage()
			for b.Loop() {
				if err := r.f(); err != nil {
					b.Fatal(err)
				}
			}
			before.PerOp(b, srv.Usage(), b.N)
		})
		b.Run(r.name+"/parallel16", func(b *testing.B) {
			b.SetParallelism(8)
			before := srv.Usage()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := r.f(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			before.PerOp(b, srv.Usage(), b.N)
		})
	}
}
