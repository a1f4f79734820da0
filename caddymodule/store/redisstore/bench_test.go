package redisstore

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/internal/cputime"
)

// The benchmarks below chose the client and the record-chain design
// (docs/cluster.md "Choices and measurements"). Each starts its own
// redis-server on loopback.

var benchSeq atomic.Int64

// claimArgs are the claim script's arguments for a new key n.
func claimArgs(n int64) (keys []string, args []string) {
	k := "bench:{a:agent}:i:" + strconv.FormatInt(n, 10)
	return []string{k, "bench:{a:agent}:iz"}, []string{"1700000000000", "fp", "60000", "1000000000", "1000000000", "tok", "", "0", k, "m", "86400000", "0", "node", "BENCH /"}
}

func anyArgs(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// BenchmarkClientClaim runs the claim script on a new key per call,
// serially and from 16 goroutines, with each client.
func BenchmarkClientClaim(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer gr.Close()
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ru.Close()
	rs := rueidis.NewLuaScript("#!lua\n" + timeFuncLua + claimFuncLua + "return claim(KEYS, ARGV)\n")
	ap, err := gr.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	run := map[string]func() error{
		"go-redis-autopipeline": func() error {
			keys, args := claimArgs(benchSeq.Add(1))
			return claimScript.Run(ctx, ap, keys, anyArgs(args)...).Err()
		},
		"go-redis": func() error {
			keys, args := claimArgs(benchSeq.Add(1))
			return claimScript.Run(ctx, gr, keys, anyArgs(args)...).Err()
		},
		"rueidis": func() error {
			keys, args := claimArgs(benchSeq.Add(1))
			return rs.Exec(ctx, ru, keys, args).Error()
		},
	}
	for _, name := range []string{"go-redis", "go-redis-autopipeline", "rueidis"} {
		f := run[name]
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, par := range []int{1, 2, 8} {
			b.Run(name+"/parallel"+strconv.Itoa(2*par), func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				b.SetParallelism(par) // par × GOMAXPROCS (2 here) goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := f(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkClientRateLimit is redis_rate's Allow (GCRA, go-redis only:
// redis_rate takes a go-redis client) against a plain EVALSHA of a
// one-key script of the same size on rueidis, the client's own cost.
func BenchmarkClientRateLimit(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer gr.Close()
	lim := redis_rate.NewLimiter(gr)
	limit := redis_rate.Limit{Rate: 1, Burst: 1 << 30, Period: 1}
	b.Run("go-redis+redis_rate/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := lim.Allow(ctx, "bench:{a:agent}:rl", limit); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-redis+redis_rate/parallel16", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			i := benchSeq.Add(1)
			for pb.Next() {
				if _, err := lim.Allow(ctx, "bench:{a:agent"+strconv.FormatInt(i%16, 10)+"}:rl", limit); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// casLua makes ARGV[2] the head of the chain KEYS[1] when the head is
// ARGV[1] (ARGV[1] "" for a new chain) and retains the record
// (KEYS[2] = ARGV[3] for ARGV[4] ms); else it returns the current head.
// Only the chain benchmark uses it: the store keeps one chain per
// (agent, node) instead (docs/cluster.md).
const casLua = `
local head = redis.call('GET', KEYS[1]) or ''
if head ~= ARGV[1] then return {0, head} end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return {1}
`

// chainNode is one gateway node appending to agents' chains: records of
// one agent are serialized on the node (as records.Chains does), and
// the node remembers the last head it saw.
type chainNode struct {
	rdb    redis.UniversalClient
	key    ed25519.PrivateKey
	chains sync.Map // agent → *agentChain
	// roundTrips and retries count what the appends cost.
	roundTrips, retries atomic.Int64
}

// agentChain serializes one agent's appends on a node and keeps the
// head the node last saw.
type agentChain struct {
	mu   sync.Mutex
	head string
}

func (n *chainNode) chain(agent string) *agentChain {
	c, _ := n.chains.LoadOrStore(agent, &agentChain{})
	return c.(*agentChain)
}

var casScript = redis.NewScript(casLua)

// sign stands for building and signing one Attribution-Record: an
// Ed25519 signature over the previous head and a counter.
func (n *chainNode) sign(prev string, i int64) (compact, auditID string) {
	msg := prev + strconv.FormatInt(i, 10)
	sig := ed25519.Sign(n.key, []byte(msg))
	compact = msg + "." + hex.EncodeToString(sig)
	sum := sha256.Sum256([]byte(compact))
	return compact, hex.EncodeToString(sum[:])
}

// appendCAS appends with a compare-and-set on the shared head: one
// round trip when the node's last seen head is current, one more (and
// a new signature) per conflict.
func (n *chainNode) appendCAS(ctx context.Context, agent string, i int64) error {
	ch := n.chain(agent)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	prev := ch.head
	for {
		compact, id := n.sign(prev, i)
		n.roundTrips.Add(1)
		v, err := casScript.Run(ctx, n.rdb, []string{"bench:{a:" + agent + "}:head", "bench:{a:" + agent + "}:r:" + id}, prev, id, compact, 86400000).Slice()
		if err != nil {
			return err
		}
		if ok, _ := v[0].(int64); ok == 1 {
			ch.head = id
			return nil
		}
		n.retries.Add(1)
		prev, _ = v[1].(string)
	}
}

// appendLocal appends to the node's own chain and retains the record
// and the head (the per-(agent, node) design): always one round trip,
// never a conflict.
func (n *chainNode) appendLocal(ctx context.Context, agent, node string, i int64) error {
	ch := n.chain(agent)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	compact, id := n.sign(ch.head, i)
	ch.head = id
	n.roundTrips.Add(1)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "bench:{r:"+id+"}", compact, 0)
		p.HSet(ctx, "bench:{a:"+agent+"}:h", node, id)
		return nil
	})
	return err
}

// BenchmarkChainAppend appends records of one agent (the worst case:
// every append contends) or of 64 agents from two nodes, 16 goroutines
// in all, with each design. It reports round trips and retries per
// append.
func BenchmarkChainAppend(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	_, key, _ := ed25519.GenerateKey(nil)
	for _, design := range []string{"cas", "per-node"} {
		for _, agents := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/agents=%d", design, agents), func(b *testing.B) {
				prefix := strconv.FormatInt(benchSeq.Add(1), 10)
				nodes := [2]*chainNode{}
				for i := range nodes {
					nodes[i] = &chainNode{rdb: redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true}), key: key}
					defer nodes[i].rdb.Close()
				}
				var seq, goroutines atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(8)
				var latMu sync.Mutex
				var lat []time.Duration
				b.RunParallel(func(pb *testing.PB) {
					g := goroutines.Add(1)
					n := nodes[g%2]
					var mine []time.Duration
					defer func() {
						latMu.Lock()
						lat = append(lat, mine...)
						latMu.Unlock()
					}()
					for pb.Next() {
						start := time.Now()
						i := seq.Add(1)
						agent := prefix + "-" + strconv.FormatInt(i%int64(agents), 10)
						var err error
						if design == "cas" {
							err = n.appendCAS(ctx, agent, i)
						} else {
							err = n.appendLocal(ctx, agent, strconv.FormatInt(g%2, 10), i)
						}
						if err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(start))
					}
				})
				slices.Sort(lat)
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
				}
				rt := nodes[0].roundTrips.Load() + nodes[1].roundTrips.Load()
				re := nodes[0].retries.Load() + nodes[1].retries.Load()
				b.ReportMetric(float64(rt)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(re)/float64(b.N), "retries/op")
			})
		}
	}
}

// reportCPU starts counting this process's CPU time (user+system,
// getrusage) and returns the func that reports it per operation as
// cpu-ns/op: the client's own cost, the Redis server's CPU not in it.
func reportCPU(b *testing.B) func() {
	start := cputime.Process()
	return func() { b.ReportMetric(float64(cputime.Process()-start)/float64(b.N), "cpu-ns/op") }
}

// BenchmarkTaskPoll is one tick of the MCP door's task polls (each
// TaskPollInterval) with 200 tasks running on a node: one Tasks.Poll of
// every id (a pipeline of two EXISTS each, as the door polls now)
// against one call per task, each its own round trip (as each task
// polled before). Per op, one tick: the client's CPU (cpu-ns/op) and
// the server's (redis-cpu-ns/op).
func BenchmarkTaskPoll(b *testing.B) {
	srv := redistest.StartServer(b)
	_, set := newSet(b, Config{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	now := time.Now().UTC()
	var ids []string
	for i := range 200 {
		id := fmt.Sprintf("%032x", i)
		ids = append(ids, id)
		if err := set.Tasks.Put(ctx, store.Task{ID: id, AgentID: "a", NodeID: "n", Tool: "t", Status: store.TaskStatusWorking,
			CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		tick func() error
	}{
		{"one-call/200", func() error { _, err := set.Tasks.Poll(ctx, ids); return err }},
		{"per-task/200", func() error {
			for _, id := range ids {
				if _, err := set.Tasks.Poll(ctx, []string{id}); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			before := srv.Usage()
			defer reportCPU(b)()
			for b.Loop() {
				if err := tc.tick(); err != nil {
					b.Fatal(err)
				}
			}
			before.PerOp(b, srv.Usage(), b.N)
		})
	}
}
