package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
)

// twinScript runs gcraFuncLua's gcra as resolveScript does, but on the
// clock ARGV[5] (seconds), ARGV[6] (microseconds) in place of TIME:
// gcra_now gets the same {seconds, microseconds} pair either way.
var twinScript = gcraFuncLua + `
return gcra(KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), gcra_now({tonumber(ARGV[5]), tonumber(ARGV[6])}))
`

// twinRedis is what redis_rate talks to in TestGCRAMatchesRedisRate: a
// real Redis, with redis_rate's own script text, in which the one
// redis.call("TIME") is replaced by the test's clock (EVALSHA is
// answered NOSCRIPT, so go-redis sends the text with EVAL). Each of
// redis_rate's calls runs in one MULTI/EXEC with gcra on the twin key
// at the same clock and reads of both keys after: Redis does not expire
// keys in the middle of an EXEC, so both see the same state however
// the wall clock moves between steps (the keys' EX is real time).
type twinRedis struct {
	rdb        *redis.Client
	sec, usec  int64
	mineKey    string
	mineArgs   []any
	mine       []any     // gcra's reply
	tat        [2]string // the oracle's and the twin's stored state after the step
	ttl        [2]time.Duration
	rewrites   int
	evalShaRun int
}

func (t *twinRedis) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if n := strings.Count(script, `redis.call("TIME")`); n != 1 {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("redis_rate's script calls TIME %d times, not once: the test's clock cannot replace it", n))
		return cmd
	}
	t.rewrites++
	src := strings.Replace(script, `redis.call("TIME")`, fmt.Sprintf("{%d, %d}", t.sec, t.usec), 1)
	var oracle, mine *redis.Cmd
	var gets [2]*redis.StringCmd
	var ttls [2]*redis.DurationCmd
	_, err := t.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		oracle = p.Eval(ctx, src, keys, args...)
		mine = p.Eval(ctx, twinScript, []string{t.mineKey}, append(append([]any{}, t.mineArgs...), t.sec, t.usec)...)
		for i, k := range []string{keys[0], t.mineKey} {
			gets[i] = p.Get(ctx, k)
			ttls[i] = p.TTL(ctx, k)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	t.mine, _ = mine.Slice()
	for i := range gets {
		t.tat[i], _ = gets[i].Result()
		t.ttl[i], _ = ttls[i].Result()
	}
	return oracle
}

func (t *twinRedis) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	t.evalShaRun++
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(redis.ErrNoScript)
	return cmd
}

func (t *twinRedis) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return t.Eval(ctx, script, keys, args...)
}

func (t *twinRedis) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return t.EvalSha(ctx, sha, keys, args...)
}

func (t *twinRedis) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return t.rdb.ScriptExists(ctx, hashes...)
}

func (t *twinRedis) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return t.rdb.ScriptLoad(ctx, script)
}

func (t *twinRedis) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return t.rdb.Del(ctx, keys...)
}

// TestGCRAMatchesRedisRate holds gcraFuncLua (the GCRA resolveScript
// spends the gate's budget with) equal to redis_rate v10's script, the
// oracle, on the same real Redis: for every budget shape the gateway
// builds (burst 1 to 10^8, refills from 0.1 ms to 2 min), over bursts
// at one instant, steps of 1 µs to past the full refill, steps of
// exactly one emission interval, clock steps backwards (the gateway's
// Redis TIME stepped back by NTP, or a failover to a server whose
// clock is behind) and forwards (a jump past the key's expiry), and a
// seeded random walk mixing them. Each step compares redis_rate's
// Result with gcra's reply read as redis_rate reads it, the stored
// state (the TAT string) and its TTL. The clock is the test's: redis_rate's
// own script text runs with its one TIME call replaced by the step's
// clock (twinRedis), and gcra gets the same clock through gcra_now.
func TestGCRAMatchesRedisRate(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, _ := newSet(t, Config{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	budgets := []ratelimit.Budget{
		{Name: "one", Burst: 1, PerMinute: 1},
		{Name: "ten", Burst: 10, PerMinute: 10},
		{Name: "fast", Burst: 5, PerMinute: 600},
		{Name: "slow", Burst: 3, PerMinute: 0.5},
		{Name: "odd", Burst: 7, PerMinute: 7},
		{Name: "bench", Burst: 100000000, PerMinute: 100000000},
	}
	const epoch = 1_800_000_000 // 2027, well inside redis_rate's float range
	for _, b := range budgets {
		t.Run(b.Name, func(t *testing.T) {
			sl, err := limiters{c}.Limiter(b, 0)
			if err != nil {
				t.Fatal(err)
			}
			lim := sl.(*limiter)
			period := lim.limit.Period
			twin := &twinRedis{rdb: rdb, sec: epoch, usec: 123456, mineKey: "rate:twin:" + b.Name, mineArgs: lim.gcraArgs()}
			oracle := redis_rate.NewLimiter(twin)
			us := func(d time.Duration) int64 { return d.Microseconds() }
			var steps []int64 // clock deltas in µs, applied before each call
			add := func(n int, delta int64) {
				for range n {
					steps = append(steps, delta)
				}
			}
			add(b.Burst%50+3, 0)                 // a burst at one instant, past the budget
			add(3, 1)                            // 1 µs apart
			add(4, us(period))                   // exactly one emission interval
			add(3, us(period)/3)                 // a third of one
			add(2, -us(period)/2)                // the clock steps back half an interval
			add(2, -5_000_000)                   // and 5 s
			add(1, us(period)*int64(b.Burst)*3)  // forward, past the full refill
			add(b.Burst%50+3, 0)                 // a full burst again
			add(1, -us(period)*int64(b.Burst)*2) // far back, below the stored TAT
			add(5, 0)
			rng := rand.New(rand.NewPCG(uint64(b.Burst), 7))
			choices := []int64{0, 0, 0, 1, 999, us(period) / 7, us(period), us(period) - 1, us(period) + 1, -1, -us(period), -us(period) / 3, us(period) * 2}
			for range 300 {
				steps = append(steps, choices[rng.IntN(len(choices))])
			}
			sawRefusal, sawAllow, sawBack := false, false, false
			for i, delta := range steps {
				clock := twin.sec*1_000_000 + twin.usec + delta
				twin.sec, twin.usec = clock/1_000_000, clock%1_000_000
				if twin.usec < 0 {
					twin.sec, twin.usec = twin.sec-1, twin.usec+1_000_000
				}
				res, err := oracle.Allow(ctx, "oracle:"+b.Name, lim.limit)
				if err != nil {
					t.Fatalf("step %d: redis_rate: %v", i, err)
				}
				if len(twin.mine) != 4 {
					t.Fatalf("step %d: gcra replied %v", i, twin.mine)
				}
				got, err := gcraReply(twin.mine, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := decision(res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter)
				mineRetry, mineReset := replyString(twin.mine, 2), replyString(twin.mine, 3)
				if int(replyInt(twin.mine, 0)) != res.Allowed || int(replyInt(twin.mine, 1)) != res.Remaining ||
					rateDurString(mineRetry) != res.RetryAfter || rateDurString(mineReset) != res.ResetAfter || got != want {
					t.Fatalf("step %d (delta %d µs): gcra %v (%+v), redis_rate %+v (%+v)", i, delta, twin.mine, got, res, want)
				}
				if twin.tat[0] != twin.tat[1] || twin.ttl[0] != twin.ttl[1] {
					t.Fatalf("step %d: stored state %q ttl %v, redis_rate's %q ttl %v", i, twin.tat[1], twin.ttl[1], twin.tat[0], twin.ttl[0])
				}
				sawRefusal = sawRefusal || res.Allowed == 0
				sawAllow = sawAllow || res.Allowed == 1
				sawBack = sawBack || delta < 0
			}
			if twin.evalShaRun == 0 || twin.rewrites != len(steps) {
				t.Fatalf("redis_rate ran %d of %d steps through the test's clock", twin.rewrites, len(steps))
			}
			if !sawAllow || (!sawRefusal && b.Burst < 1000) || !sawBack {
				t.Fatalf("the sequence did not cover allow %v, refuse %v, clock back %v", sawAllow, sawRefusal, sawBack)
			}
		})
	}
}

// rateDurString is rateDur of a float string ("" or junk: 0).
func rateDurString(s string) time.Duration {
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		return 0
	}
	return rateDur(f)
}

// TestGateSpendSharesRedisRate spends one agent's budget in turn with
// redis_rate (Limiter.Allow) and with resolveScript's gcra on Redis's
// own clock (ResolvePair with Spend): one budget, the state read and
// written by both, so the burst is spent exactly once between them and
// the refusal's Retry-After agrees. A refused spend keeps no attempt
// record; an allowed one keeps it in the same round trip.
func TestGateSpendSharesRedisRate(t *testing.T) {
	srv := redistest.StartServer(t)
	cnt := &counter{ops: map[store.Op]int{}}
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}, Observer: cnt})
	ctx := context.Background()
	cnt.take()
	// One request a minute: nothing refills during the test.
	lim, err := set.Limiters.Limiter(ratelimit.Budget{Name: "rcns", Burst: 6, PerMinute: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for i := range 10 {
		var d ratelimit.Decision
		var kept bool
		id := fmt.Sprintf("rcns-test-%d", i)
		if i%2 == 0 {
			d, err = lim.Allow(ctx, "a")
		} else {
			var r store.PairResolution
			r, err = set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: "a", Method: "BOOK", Path: "/none", Spend: lim,
				Attempt: &store.Attempt{ID: id, Method: "BOOK", Path: "/none", AgentID: "a", Reason: "composition-impossible"}})
			if err == nil && r.Spent == nil {
				t.Fatalf("call %d: nothing spent: %+v", i, r)
			}
			if r.Spent != nil {
				d, kept = *r.Spent, r.AttemptKept
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
			if d.Remaining != 6-allowed {
				t.Fatalf("call %d: remaining %d after %d allowed", i, d.Remaining, allowed)
			}
		} else if d.RetryAfter < 50*time.Second || d.RetryAfter > 61*time.Second {
			t.Fatalf("call %d: refused with Retry-After %v", i, d.RetryAfter)
		}
		if i%2 == 1 {
			_, found, err := set.Attempts.Get(ctx, id)
			if err != nil || found != d.Allowed || kept != d.Allowed {
				t.Fatalf("call %d (allowed %v): attempt kept %v, found %v (%v)", i, d.Allowed, kept, found, err)
			}
		}
	}
	if allowed != 6 {
		t.Fatalf("%d of 10 allowed, want the burst of 6", allowed)
	}
}
