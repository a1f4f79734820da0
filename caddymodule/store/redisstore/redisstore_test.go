package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
	"github.com/caddy-rcns/caddy-rcns/internal/redisinfo"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

var prefixes atomic.Int64

// harness runs each suite test on its own key prefix of one deployment,
// with two Clients (two nodes).
func harness(base Config, totals bool) storetest.Harness {
	return storetest.Harness{
		Totals: totals,
		New: func(t *testing.T, cfg storetest.Config) (store.Set, store.Set) {
			prefix := fmt.Sprintf("t%d:", prefixes.Add(1))
			node := func() store.Set {
				c := base
				c.KeyPrefix, c.Now = prefix, cfg.Now
				client, err := New(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = client.Close() })
				set, err := client.Set(cfg.Limits, cfg.Restorer)
				if err != nil {
					t.Fatal(err)
				}
				return set
			}
			return node(), node()
		},
	}
}

func TestSuiteSingle(t *testing.T) {
	srv := redistest.StartServer(t)
	h := harness(Config{Addrs: []string{srv.Addr()}}, true)
	storetest.Run(t, h)
	t.Run("gate-miss", func(t *testing.T) { storetest.RunGateMiss(t, h) })
}

func TestSuiteCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	h := harness(Config{Mode: ModeCluster, Addrs: c.Addrs()}, false)
	storetest.Run(t, h)
	t.Run("gate-miss", func(t *testing.T) { storetest.RunGateMiss(t, h) })
}

func TestSuiteSentinel(t *testing.T) {
	g := redistest.StartSentinel(t)
	h := harness(Config{Mode: ModeSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName}, true)
	storetest.Run(t, h)
	t.Run("gate-miss", func(t *testing.T) { storetest.RunGateMiss(t, h) })
}

// counter counts round trips by operation.
type counter struct {
	mu  sync.Mutex
	ops map[store.Op]int
}

func (c *counter) Observe(op store.Op, _ time.Duration, _ error) {
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
}

func (c *counter) take() map[store.Op]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = map[store.Op]int{}
	return out
}

// TestCountsAreNotRequestOps: the sizes the health check reads for the
// gauges (and the operator page) are op count, so the round-trip metric
// of keyed claims, attempt records and contract lists counts requests
// only (helper-65: an idle node showed a claim every health interval).
func TestCountsAreNotRequestOps(t *testing.T) {
	srv := redistest.StartServer(t)
	cnt := &counter{ops: map[store.Op]int{}}
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}, Observer: cnt})
	ctx := context.Background()
	cnt.take()
	for _, l := range []interface {
		Len(context.Context) (int, error)
	}{set.Contracts, set.Idempotency, set.Attempts} {
		if n, err := l.Len(ctx); err != nil || n != 0 {
			t.Fatalf("Len = %d, %v; want 0", n, err)
		}
	}
	if got := cnt.take(); len(got) != 1 || got[store.OpCount] != 3 {
		t.Fatalf("three Len calls observed %v, want count 3 and nothing else", got)
	}
}

func TestRoundTripsPerOperation(t *testing.T) {
	srv := redistest.StartServer(t)
	cnt := &counter{ops: map[store.Op]int{}}
	f := storetest.NewFixture(t)
	// A restorer, as every gateway has: the node's contract cache takes a
	// Set asynchronously (ristretto), so a presentation just after the
	// mint may miss it and decode the contract from the script's reply.
	// The longest lease: the presentation within it comes right after
	// the one that took it.
	c, set := newRestoredSet(t, Config{Addrs: []string{srv.Addr()}, Observer: cnt, ContractLease: MaxContractLease}, f.Restorer(t))
	ctx := context.Background()
	cnt.take() // the PING of New
	agent := "a"
	minted := f.Contract(t, time.Now(), agent, "/trip", "rcns-gate", time.Hour)
	lim, err := set.Limiters.Limiter(ratelimit.Budget{Name: "rcns", Burst: 10, PerMinute: 10}, 0)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func() error
		want map[store.Op]int
		// cmds is the most commands Redis may run for it, inside its
		// scripts or not (INFO commandstats; docs/cluster.md "Commands
		// per request kind"): an index's expiry moved later costs one
		// command, two when the index is new or its expiry already as
		// late (a record of the same millisecond). The most is
		// counted.
		cmds int
	}{
		{"claim", func() error {
			got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agent, Key: "k", Fingerprint: "fp"})
			if err == nil {
				err = got.Claim.Complete(ctx, idempotency.Response{Status: 200})
			}
			return err
		}, map[store.Op]int{store.OpClaim: 1, store.OpComplete: 1}, 21},
		{"replay", func() error {
			_, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agent, Key: "k", Fingerprint: "fp"})
			return err
		}, map[store.Op]int{store.OpClaim: 1}, 2},
		{"rate limit", func() error { _, err := lim.Allow(ctx, agent); return err }, map[store.Op]int{store.OpRateLimit: 1}, 3},
		// A PROPOSE turn: its read, then its record (a new
		// negotiation, rejected), then the next turn's read.
		{"negotiation turn", func() error {
			_, _, err := set.Negotiations.Turn(ctx, agent, "neg-1")
			return err
		}, map[store.Op]int{store.OpNegotiation: 1}, 1},
		{"negotiation turn recorded", func() error {
			_, err := set.Negotiations.Record(ctx, agent, "neg-1", true)
			return err
		}, map[store.Op]int{store.OpNegotiation: 1}, 2},
		{"negotiation turn continued", func() error {
			n, kept, err := set.Negotiations.Turn(ctx, agent, "neg-1")
			if err == nil && (!kept || n != 1) {
				err = fmt.Errorf("the turn read %d, %v; want 1, kept", n, kept)
			}
			return err
		}, map[store.Op]int{store.OpNegotiation: 1}, 2},
		{"signature", func() error {
			_, err := set.Replay.Seen(ctx, agent, []byte("s"), time.Now().Add(time.Minute))
			return err
		}, map[store.Op]int{store.OpReplay: 1}, 1},
		// Off the answer path: queued, then one batch (waited for here).
		{"record", func() error {
			if err := set.Records.Retain(ctx, store.Record{AuditID: "x", AgentID: agent, NodeID: "n"}); err != nil {
				return err
			}
			return c.recs.wait(ctx)
		}, map[store.Op]int{store.OpRecord: 1}, 3},
		{"attempt", func() error {
			return set.Attempts.Add(ctx, store.Attempt{ID: "rcns-trip-0", Reason: "contract-expired"})
		}, map[store.Op]int{store.OpAttempt: 1}, 2},
		// An attempt record the engine keeps outside the gate's script (a
		// presentation's refusal; a gate's in Cluster mode) is queued with
		// the records: one batch, off the answer path.
		{"attempt later", func() error {
			if err := set.Attempts.(store.AttemptsLater).AddLater(ctx, store.Attempt{ID: "rcns-trip-00", Reason: "contract-expired"}); err != nil {
				return err
			}
			return c.recs.wait(ctx)
		}, map[store.Op]int{store.OpRecord: 1}, 2},
		{"pair miss", func() error { _, err := set.Contracts.ActiveFor(ctx, agent, "BOOK", "/x"); return err }, map[store.Op]int{store.OpContractPair: 1}, 1},
		{"mint", func() error { _, err := set.Contracts.Mint(ctx, minted, store.ModeConfirmFirst); return err }, map[store.Op]int{store.OpContractMint: 1}, 18},
		{"keyed presentation", func() error {
			p, err := set.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: minted.SynthesisID, Method: "BOOK", Path: "/trip", Key: "k2", Fingerprint: "fp", Claim: true})
			if err == nil && (p.Claimed == nil || p.Claimed.Outcome != idempotency.Execute) {
				err = fmt.Errorf("presentation claimed %+v", p.Claimed)
			}
			return err
		}, map[store.Op]int{store.OpPresent: 1}, 13},
		{"activate", func() error { _, err := set.Contracts.Activate(ctx, minted); return err }, map[store.Op]int{store.OpContractUpdate: 1}, 2},
		// An unkeyed presentation of an active contract takes a lease
		// on it: the next ones on this node make no round trip while it
		// lasts (docs/cluster.md "Presentation leases").
		{"unkeyed presentation", func() error { return presentActive(ctx, set, agent, minted) }, map[store.Op]int{store.OpPresent: 1}, 2},
		{"unkeyed presentation within its lease", func() error { return presentActive(ctx, set, agent, minted) }, map[store.Op]int{}, 0},
		{"pair hit", func() error {
			// The presentations decoded the contract into this node's
			// cache, which ristretto applies in the background: late on
			// a loaded machine (then the pair hit decodes it again).
			cache := set.Contracts.(*contracts).cache
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if _, ok := cache.Get(minted.SynthesisID); ok {
					break
				}
			}
			_, err := set.Contracts.ActiveFor(ctx, agent, "BOOK", "/trip")
			return err
		}, map[store.Op]int{store.OpContractPair: 1}, 2},
		{"keyed Tier C by pair", func() error {
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/trip", Key: "k4", Fingerprint: "fp", ClaimIfFound: true})
			if err == nil && (r.Contract == nil || r.Claimed == nil || r.Claimed.Outcome != idempotency.Execute) {
				err = fmt.Errorf("resolved %+v", r)
			}
			return err
		}, map[store.Op]int{store.OpResolvePair: 1}, 14},
		{"keyed gate pair miss", func() error {
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/none", Key: "k5", Fingerprint: "fp", ClaimIfMissing: true})
			if err == nil && (r.Contract != nil || r.Claimed == nil || r.Claimed.Outcome != idempotency.Execute) {
				err = fmt.Errorf("resolved %+v", r)
			}
			return err
		}, map[store.Op]int{store.OpResolvePair: 1}, 13},
		// A gate evaluation (engine stagePair with gateMiss): the pair
		// lookup, the key's claim, the RCNS budget and the refusal's
		// attempt record, one script.
		{"gate refusal", func() error {
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/refused", Spend: lim,
				Attempt: &store.Attempt{ID: "rcns-trip-1", Reason: "composition-impossible"}})
			if err == nil && (r.Spent == nil || !r.Spent.Allowed || !r.AttemptKept) {
				err = fmt.Errorf("resolved %+v", r)
			}
			return err
		}, map[store.Op]int{store.OpResolvePair: 1}, 6},
		{"keyed gate refusal", func() error {
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/refused", Key: "k6", Fingerprint: "fp",
				ClaimIfMissing: true, Spend: lim, Attempt: &store.Attempt{ID: "rcns-trip-2", Reason: "composition-impossible"}})
			if err == nil && (r.Claimed == nil || r.Claimed.Outcome != idempotency.Execute || r.Spent == nil || !r.AttemptKept) {
				err = fmt.Errorf("resolved %+v", r)
			}
			return err
		}, map[store.Op]int{store.OpResolvePair: 1}, 17},
		{"gate synthesis", func() error {
			c := f.Contract(t, time.Now(), agent, "/new", "rcns-gate", time.Hour)
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/new", Spend: lim, Mint: c, MintMode: store.ModeOptimistic})
			if err == nil && (r.Spent == nil || !r.Spent.Allowed || r.Minted == nil || r.Minted.Err != nil) {
				err = fmt.Errorf("resolved %+v", r)
			}
			return err
		}, map[store.Op]int{store.OpResolvePair: 1}, 19},
		{"keyed gate synthesis", func() error {
			c := f.Contract(t, time.Now(), agent, "/new2", "rcns-gate", time.Hour)
			r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/new2", Key: "k7", Fingerprint: "fp",
				ClaimIfMissing: true, Spend: lim, Mint: c, MintMode: store.ModeOptimistic})
			if err == nil && (r.Claimed == nil || r.Claimed.Outcome != idempotency.Execute || r.Minted == nil || r.Minted.Err != nil) {
				err = fmt.Errorf("resolved %+v", r)
			}
			return err
		}, map[store.Op]int{store.OpResolvePair: 1}, 30},
		{"unknown presentation", func() error {
			_, err := set.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: "syn-x", Method: "BOOK", Path: "/x", Key: "k3", Fingerprint: "fp", Claim: true})
			return err
		}, map[store.Op]int{store.OpPresent: 1, store.OpContractLookup: 2}, 3},
		{"lookup miss", func() error { _, _, err := set.Contracts.Lookup(ctx, agent, "syn-x"); return err }, map[store.Op]int{store.OpContractLookup: 2}, 2},
	}
	stats := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer stats.Close()
	for _, s := range steps {
		resetCommands(t, stats)
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := cnt.take(); fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("%s: round trips %v, want %v", s.name, got, s.want)
		}
		if got := commandsRun(t, stats); sumCommands(got) > s.cmds {
			t.Errorf("%s: Redis ran %d commands %v, want at most %d", s.name, sumCommands(got), got, s.cmds)
		}
	}
}

// resetCommands zeroes Redis's INFO commandstats (CONFIG RESETSTAT).
func resetCommands(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// commandsRun reads INFO commandstats since resetCommands: the calls
// of each command Redis ran, inside a script (Redis 7 counts those) or
// not, without the scripts themselves (EVAL, EVALSHA, SCRIPT), a new
// connection's HELLO and CLIENT (the pool dials when it needs) and the
// test's own INFO and CONFIG.
func commandsRun(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := redisinfo.ParseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for name, c := range cmds {
		base, _, _ := strings.Cut(name, "|")
		switch base {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "script", "info", "config", "hello", "client":
			continue
		}
		out[name] = int(c.Calls)
	}
	return out
}

// sumCommands is the number of commands in m.
func sumCommands(m map[string]int) int {
	n := 0
	for _, k := range m {
		n += k
	}
	return n
}

// presentActive presents c unkeyed as agent and wants it found active.
func presentActive(ctx context.Context, set store.Set, agent string, c *recipes.Contract) error {
	p, err := set.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path})
	if err == nil && (p.Contract == nil || p.Contract.SynthesisID != c.SynthesisID || p.Lookup != recipes.LookupFound || p.State != recipes.StateActive) {
		err = fmt.Errorf("presentation %+v, want %s found active", p, c.SynthesisID)
	}
	return err
}

// TestUnavailable kills Redis under a client: every call fails with
// store.ErrUnavailable within the timeouts, and the client recovers by
// itself once Redis is back (empty: it has no persistence).
func TestUnavailable(t *testing.T) {
	srv := redistest.StartServer(t)
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	lim, err := set.Limiters.Limiter(ratelimit.Budget{Name: "rcns", Burst: 10, PerMinute: 10}, 0)
	if err != nil {
		t.Fatal(err)
	}
	held, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "before", Fingerprint: "fp"})
	if err != nil || held.Outcome != idempotency.Execute {
		t.Fatalf("claim before the outage: %v %v", held.Outcome, err)
	}
	calls := []struct {
		name string
		run  func() error
	}{
		{"claim", func() error {
			_, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
			return err
		}},
		{"complete", func() error { return held.Claim.Complete(ctx, idempotency.Response{Status: 200}) }},
		{"rate limit", func() error { _, err := lim.Allow(ctx, "a"); return err }},
		{"lookup", func() error { _, _, err := set.Contracts.Lookup(ctx, "a", "syn-1"); return err }},
		{"pair", func() error { _, err := set.Contracts.ActiveFor(ctx, "a", "BOOK", "/x"); return err }},
		{"list", func() error { _, err := set.Contracts.List(ctx, ""); return err }},
		{"replay", func() error {
			_, err := set.Replay.Seen(ctx, "a", []byte("s"), time.Now().Add(time.Minute))
			return err
		}},
		{"attempt", func() error { return set.Attempts.Add(ctx, store.Attempt{ID: "x"}) }},
		// AddLater queues (as Retain); the batch fails, and the record is not read.
		{"attempt later", func() error {
			if err := set.Attempts.(store.AttemptsLater).AddLater(ctx, store.Attempt{ID: "y"}); err != nil {
				return err
			}
			_, _, err := set.Attempts.Get(ctx, "y")
			return err
		}},
		// Retain queues; the batch fails, and the record is not read.
		{"record", func() error {
			if err := set.Records.Retain(ctx, store.Record{AuditID: "x"}); err != nil {
				return err
			}
			_, _, err := set.Records.Get(ctx, "x")
			return err
		}},
		{"ping", func() error { return c.Ping(ctx) }},
	}
	srv.Stop()
	for _, call := range calls {
		start := time.Now()
		err := call.run()
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with Redis down: %v, want ErrUnavailable", call.name, err)
		}
		// Generous: bounded by the timeouts, never by a retry loop.
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %v with Redis down", call.name, d)
		}
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the client did not recover after Redis came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Redis came back empty: the key held before the outage is free
	// again (docs/cluster.md "Redis restarted empty"), and scripts are
	// loaded again (EVALSHA falls back to EVAL).
	got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "before", Fingerprint: "fp"})
	if err != nil || got.Outcome != idempotency.Execute {
		t.Fatalf("claim after the restart: %v %v", got.Outcome, err)
	}
	if d, err := lim.Allow(ctx, "a"); err != nil || !d.Allowed {
		t.Fatalf("rate limit after the restart: %+v %v", d, err)
	}
	// The claim made before the outage cannot complete over the new one,
	// and says so.
	if err := held.Claim.Complete(ctx, idempotency.Response{Status: 500}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("stale Complete: %v, want ErrClaimLost", err)
	}
	if again, _ := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "before", Fingerprint: "fp"}); again.Outcome != idempotency.InFlight {
		t.Fatalf("after the stale Complete: %v, want in flight", again.Outcome)
	}
}

// TestNewRefusesUnreachable: New fails when Redis does not answer, and
// NewDegraded starts anyway, failing calls until Redis is there.
func TestNewRefusesUnreachable(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Stop()
	cfg := Config{Addrs: []string{srv.Addr()}, DialTimeout: 200 * time.Millisecond}
	if _, err := New(context.Background(), cfg); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("New with Redis down: %v", err)
	}
	c, err := NewDegraded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set, err := c.Set(store.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("degraded claim: %v", err)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
		if err == nil {
			if got.Outcome != idempotency.Execute {
				t.Fatalf("first claim once up: %v", got.Outcome)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never recovered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestConfigRefusals(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no address", Config{}},
		{"bad address", Config{Addrs: []string{"localhost"}}},
		{"port not a number", Config{Addrs: []string{"127.0.0.1:notaport"}}},
		{"a URL", Config{Addrs: []string{"redis://127.0.0.1:6379"}}},
		{"no host", Config{Addrs: []string{":6379"}}},
		{"port 0", Config{Addrs: []string{"127.0.0.1:0"}}},
		{"port over 65535", Config{Addrs: []string{"127.0.0.1:70000"}}},
		{"two addresses single", Config{Addrs: []string{"a:1", "b:1"}}},
		{"braces in prefix", Config{Addrs: []string{"a:1"}, KeyPrefix: "x{y}"}},
		{"negative timeout", Config{Addrs: []string{"a:1"}, ReadTimeout: -1}},
		{"sentinel without master", Config{Mode: ModeSentinel, Addrs: []string{"a:1"}}},
		{"cluster with DB", Config{Mode: ModeCluster, Addrs: []string{"a:1"}, DB: 2}},
		{"master name in single", Config{Addrs: []string{"a:1"}, MasterName: "m"}},
		{"unknown mode", Config{Mode: "ring", Addrs: []string{"a:1"}}},
		{"missing CA file", Config{Addrs: []string{"a:1"}, CAFile: "/nonexistent/ca.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, err := NewDegraded(tt.cfg); err == nil {
				c.Close()
				t.Fatal("accepted")
			}
		})
	}
}

// TestSentinelFailover kills the master: after Sentinel promotes the
// replica the client finds it by itself, and state replicated before
// the failover is still there.
func TestSentinelFailover(t *testing.T) {
	g := redistest.StartSentinel(t)
	_, set := newSet(t, Config{Mode: ModeSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	first, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || first.Outcome != idempotency.Execute {
		t.Fatal(first.Outcome, err)
	}
	if err := first.Claim.Complete(ctx, idempotency.Response{Status: 201, Body: []byte("made")}); err != nil {
		t.Fatal(err)
	}
	// Wait for the replica to have it (asynchronous replication).
	if _, err := redistest.Do(g.Master.Addr(), "WAIT", "1", "5000"); err != nil {
		t.Fatal(err)
	}
	g.Master.Stop()
	deadline := time.Now().Add(60 * time.Second)
	for {
		addr, err := g.MasterAddr()
		if err == nil && addr == g.Replica.Addr() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinels did not fail over: %v %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
		if err == nil {
			if got.Outcome != idempotency.Replay || string(got.Response.Body) != "made" {
				t.Fatalf("after failover: %v %+v, want the replayed answer", got.Outcome, got.Response)
			}
			break
		}
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("during failover: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client did not follow the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func init() {
	// go-redis logs every failed dial; the fault tests make many.
	redis.SetLogger(quiet{})
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestRestartQuarantine: after Redis restarts empty, claims are refused
// until a request that held a key before the restart has ended, then
// served again.
func TestRestartQuarantine(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := storetest.NewClock()
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}, RestartQuarantine: 2 * time.Minute, Now: clock.Now,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	first, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || first.Outcome != idempotency.Execute {
		t.Fatalf("claim before the restart: %v %v", first.Outcome, err)
	}
	srv.Restart()
	// The first calls after the restart meet broken connections, then
	// the new one finds the new run: either way, nothing executes.
	var last error
	for range 5 {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
		if err == nil {
			t.Fatalf("claim right after the restart: %v, want refused", got.Outcome)
		}
		last = err
	}
	var ra *store.RetryAfterError
	if !errors.Is(last, store.ErrUnavailable) || !strings.Contains(last.Error(), "Redis restarted") || !errors.As(last, &ra) {
		t.Fatalf("claim after the restart: %v, want the quarantine", last)
	}
	// It says how long it lasts (the engine's Retry-After): most of the
	// two minutes, less the server's uptime.
	if ra.After <= time.Minute || ra.After > 2*time.Minute {
		t.Fatalf("quarantine lasts %v, want about 2m", ra.After)
	}
	// Other state is served meanwhile.
	if _, err := set.Replay.Seen(ctx, "a", []byte("s"), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The request that held the key before the restart ends (its claim
	// was written again after the restart, and is released now).
	if err := first.Claim.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"}); err != nil || got.Outcome != idempotency.Execute {
		t.Fatalf("claim after the quarantine: %v %v", got.Outcome, err)
	}
}

// TestRestartReassertsClaims: a request still running when Redis
// restarted without its data keeps its key: the client that made the
// claim writes it again as soon as it meets the new run, so a client
// that never saw the old run (a new gateway node, which has no
// quarantine of its own) meets it in flight instead of running the key
// a second time; the first request's answer is then stored and
// replayed.
func TestRestartReassertsClaims(t *testing.T) {
	srv := redistest.StartServer(t)
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, RestartQuarantine: time.Minute})
	ctx := context.Background()
	running, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp", Lease: time.Minute,
		Holder: idempotency.Holder{Node: "node-a", What: "BOOK /room"}})
	if err != nil || running.Outcome != idempotency.Execute {
		t.Fatalf("claim before the restart: %v %v", running.Outcome, err)
	}
	srv.Restart()
	if keyExists(t, srv.Addr(), "a", "k") {
		t.Fatal("the restarted server kept the claim: this test needs it lost")
	}
	// The node's next round trip (a request, or its health check)
	// meets the new run and writes its live claims again.
	deadline := time.Now().Add(5 * time.Second)
	for !keyExists(t, srv.Addr(), "a", "k") {
		_ = c.Ping(ctx)
		if time.Now().After(deadline) {
			t.Fatal("the running request's claim was not written again after the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, fresh := newSet(t, Config{Addrs: []string{srv.Addr()}, RestartQuarantine: time.Minute})
	got, err := fresh.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || got.Outcome != idempotency.InFlight || got.Hold == nil || got.Hold.Node != "node-a" {
		t.Fatalf("a new node's claim of the key: %v %+v %v, want in flight, held by node-a", got.Outcome, got.Hold, err)
	}
	if err := running.Claim.Complete(ctx, idempotency.Response{Status: 200, Body: []byte("once")}); err != nil {
		t.Fatal(err)
	}
	rep, err := fresh.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || rep.Outcome != idempotency.Replay || string(rep.Response.Body) != "once" {
		t.Fatalf("after the first request's answer: %v %v, want it replayed", rep.Outcome, err)
	}
}

// claimThenRestart claims agent "a"'s key "k" (fingerprint "fp", a
// minute's lease) on a fresh Redis, then restarts it empty.
func claimThenRestart(t *testing.T) (*redistest.Server, store.Claimed) {
	t.Helper()
	srv := redistest.StartServer(t)
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}, RestartQuarantine: time.Minute})
	running, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp", Lease: time.Minute})
	if err != nil || running.Outcome != idempotency.Execute {
		t.Fatalf("claim before the restart: %v %v", running.Outcome, err)
	}
	srv.Restart()
	return srv, running
}

// completeAcrossRestart stores body (status 200) as running's answer. A
// call that met a connection the restart broke took no effect and is
// made again, up to 5 calls in all; ErrClaimLost is returned as is.
func completeAcrossRestart(ctx context.Context, running store.Claimed, body string) error {
	var err error
	for range 5 {
		err = running.Claim.Complete(ctx, idempotency.Response{Status: 200, Body: []byte(body)})
		if err == nil || errors.Is(err, store.ErrClaimLost) {
			return err
		}
	}
	return err
}

// TestRestartCompleteLostClaim: a request whose claim Redis lost when
// it restarted empty, and whose answer is the client's first write
// after the restart (the claim had ended, so no renewal wrote it
// again), stores that answer: a client that never saw the old run (no
// quarantine of its own) replays it instead of running the key a
// second time, and the key keeps its fingerprint. Complete used to find
// the key gone and drop the answer (store.ErrClaimLost; a review ran 5
// of 6 such keys twice). A key an operator released, with no restart
// between, stays released (storetest's testSettle).
func TestRestartCompleteLostClaim(t *testing.T) {
	srv, running := claimThenRestart(t)
	ctx := context.Background()
	if keyExists(t, srv.Addr(), "a", "k") {
		t.Fatal("the restarted server kept the claim: this test needs it lost")
	}
	// The first write may meet a connection the restart broke.
	if err := completeAcrossRestart(ctx, running, "once"); err != nil {
		t.Fatalf("storing the answer of a claim Redis lost: %v", err)
	}
	_, fresh := newSet(t, Config{Addrs: []string{srv.Addr()}, RestartQuarantine: time.Minute})
	rep, err := fresh.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || rep.Outcome != idempotency.Replay || string(rep.Response.Body) != "once" {
		t.Fatalf("a new node's claim of the key: %v %v, want the answer replayed", rep.Outcome, err)
	}
	if got, err := fresh.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "other"}); err != nil || got.Outcome != idempotency.Mismatch {
		t.Fatalf("the key with another fingerprint: %v %v, want a mismatch", got.Outcome, err)
	}
	// A retry of the Complete whose reply was lost changes nothing.
	running.Claim.(*claim).settled = false
	if err := running.Claim.Complete(ctx, idempotency.Response{Status: 500, Body: []byte("twice")}); err != nil {
		t.Fatal(err)
	}
	if rep, err := fresh.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"}); err != nil || string(rep.Response.Body) != "once" {
		t.Fatalf("after a retried Complete: %v %v, want the first answer", rep.Outcome, err)
	}
}

// TestRestartCompleteOutwaitsRefusedClaim: after Redis restarted
// empty, another node's claim of the key (taken in the call in which
// that node met the restart, then released by its quarantine) may hold
// the key when the running request's answer arrives: Complete tries
// again while it does, and stores the answer once it is released.
func TestRestartCompleteOutwaitsRefusedClaim(t *testing.T) {
	srv, running := claimThenRestart(t)
	ctx := context.Background()
	_, other := newSet(t, Config{Addrs: []string{srv.Addr()}})
	held, err := other.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || held.Outcome != idempotency.Execute {
		t.Fatalf("the other node's claim: %v %v", held.Outcome, err)
	}
	go func() {
		time.Sleep(2 * restoreWait)
		_ = held.Claim.Abandon(ctx)
	}()
	// The node meets the restart in this call.
	if err := completeAcrossRestart(ctx, running, "once"); err != nil {
		t.Fatalf("storing the answer while the refused claim held the key: %v", err)
	}
	rep, err := other.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || rep.Outcome != idempotency.Replay || string(rep.Response.Body) != "once" {
		t.Fatalf("after the refused claim was released: %v %v, want the answer replayed", rep.Outcome, err)
	}
}

// TestRestartQuarantineAcrossClients: a client that starts after Redis
// restarted (the gateway node restarted, or a reload built a new pool)
// quarantines the restarted server when its RunIDFile knows the run id
// seen before; one without the file takes the new run as its baseline
// and claims at once (the gap the file closes, found by a review: a key
// ran twice through a node reloaded after the restart).
func TestRestartQuarantineAcrossClients(t *testing.T) {
	srv := redistest.StartServer(t)
	file := filepath.Join(t.TempDir(), "runs.json")
	cfg := Config{Addrs: []string{srv.Addr()}, RestartQuarantine: 2 * time.Minute, RunIDFile: file,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}
	ctx := context.Background()
	first, set := newSet(t, cfg)
	if got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"}); err != nil || got.Outcome != idempotency.Execute {
		t.Fatalf("claim before the restart: %v %v", got.Outcome, err)
	}
	_ = first.Close()
	srv.Restart()
	_, set = newSet(t, cfg)
	var ra *store.RetryAfterError
	if _, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"}); !errors.As(err, &ra) {
		t.Fatalf("claim by a client started after the restart, with the run-id file: %v, want the quarantine", err)
	}
	noFile := cfg
	noFile.RunIDFile = ""
	_, set = newSet(t, noFile)
	if got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "b", Key: "k", Fingerprint: "fp"}); err != nil || got.Outcome != idempotency.Execute {
		t.Fatalf("claim by a client without the file: %v %v (it has no baseline)", got.Outcome, err)
	}
}

// TestSentinelNoQuarantine: in Sentinel mode the restart quarantine
// looks at the master alone. go-redis also runs the connect hook on its
// connections to the sentinels, whose run ids are not the master's: a
// hook that took them for the master saw it "restart" at once and
// refused every claim for the quarantine (an hour with the engine's
// longest lease) on a healthy group.
func TestSentinelNoQuarantine(t *testing.T) {
	g := redistest.StartSentinel(t)
	_, set := newSet(t, Config{Mode: ModeSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName, RestartQuarantine: time.Hour})
	ctx := context.Background()
	for i := range 5 {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: fmt.Sprintf("k%d", i), Fingerprint: "fp"})
		if err != nil || got.Outcome != idempotency.Execute {
			t.Fatalf("claim %d on a healthy Sentinel group: %v %v", i, got.Outcome, err)
		}
	}
}

// newSet connects a Client with cfg (closed at the end of the test) and
// returns it with its default Set.
func newSet(t testing.TB, cfg Config) (*Client, store.Set) {
	t.Helper()
	return newRestoredSet(t, cfg, nil)
}

// newRestoredSet is newSet whose contracts are restored by rs.
func newRestoredSet(t testing.TB, cfg Config, rs *recipes.Restorer) (*Client, store.Set) {
	t.Helper()
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	set, err := c.Set(store.Limits{}, rs)
	if err != nil {
		t.Fatal(err)
	}
	return c, set
}

// TestAuthentication: an ACL user and password reach a server that
// requires them; a wrong password fails New.
func TestAuthentication(t *testing.T) {
	srv := redistest.StartServer(t, "--user", "gw", "on", ">s3cret", "~*", "&*", "+@all", "--user", "default", "off")
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}, Username: "gw", Password: "s3cret"})
	if got, err := set.Idempotency.Claim(context.Background(), idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"}); err != nil || got.Outcome != idempotency.Execute {
		t.Fatalf("claim as gw: %v %v", got.Outcome, err)
	}
	if _, err := New(context.Background(), Config{Addrs: []string{srv.Addr()}, Username: "gw", Password: "wrong"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("wrong password: %v", err)
	}
}

// TestCause: a startup failure names what went wrong, not only that
// Redis is unavailable: an error reply (DB out of range, a wrong
// password), a server that is no Redis, and one that does not answer.
func TestCause(t *testing.T) {
	srv := redistest.StartServer(t, "--user", "gw", "on", ">s3cret", "~*", "&*", "+@all")
	notRedis := httptest.NewServer(http.NotFoundHandler())
	defer notRedis.Close()
	down := redistest.StartServer(t)
	down.Stop()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"DB out of range", Config{Addrs: []string{srv.Addr()}, DB: 99}, "Redis refused: ERR DB index is out of range"},
		{"wrong password", Config{Addrs: []string{srv.Addr()}, Username: "gw", Password: "wrong"}, "Redis refused: WRONGPASS"},
		{"not Redis", Config{Addrs: []string{strings.TrimPrefix(notRedis.URL, "http://")}}, "does not speak the Redis protocol"},
		{"down", Config{Addrs: []string{down.Addr()}, DialTimeout: 200 * time.Millisecond}, "Redis does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(context.Background(), tc.cfg)
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("New: %v, want store.ErrUnavailable", err)
			}
			if got := Cause(err); !strings.HasPrefix(got, tc.want) && !strings.Contains(got, tc.want) {
				t.Fatalf("Cause(%v) = %q, want %q", err, got, tc.want)
			}
		})
	}
	if Cause(nil) != "" {
		t.Fatal("Cause(nil) is not empty")
	}
}

// TestHoldNodeID: the first process holds a node id, a second one sees
// the holder's value (which changes as the holder refreshes), a report
// leaves a marker the holder reads, and a hold that is not refreshed
// expires; in one slot on a Redis Cluster too.
func TestHoldNodeID(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	single := redistest.StartServer(t)
	for name, cfg := range map[string]Config{
		"single":  {Addrs: []string{single.Addr()}},
		"cluster": {Mode: ModeCluster, Addrs: cluster.Addrs()},
	} {
		t.Run(name, func(t *testing.T) {
			var ms atomic.Int64
			ms.Store(1_000_000)
			cfg.KeyPrefix = fmt.Sprintf("t%d:", prefixes.Add(1))
			cfg.Now = func() time.Time { return time.UnixMilli(ms.Add(1)) }
			c, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			hold := func(inst string, report bool) (string, string) {
				t.Helper()
				other, conflict, err := c.HoldNodeID(ctx, "n1", inst, 200*time.Millisecond, report)
				if err != nil {
					t.Fatal(err)
				}
				return other, conflict
			}
			if o, cf := hold("a", false); o != "" || cf != "" {
				t.Fatalf("first hold: other %q conflict %q", o, cf)
			}
			o1, _ := hold("b", false)
			if !strings.HasPrefix(o1, "a:") {
				t.Fatalf("second process sees %q, want a's hold", o1)
			}
			if o, cf := hold("a", false); o != "" || cf != "" {
				t.Fatalf("refresh by the holder: other %q conflict %q", o, cf)
			}
			o2, _ := hold("b", true)
			if o2 == o1 || !strings.HasPrefix(o2, "a:") {
				t.Fatalf("after a's refresh b sees %q (before %q): want a changed value of a", o2, o1)
			}
			if _, cf := hold("a", false); cf != "b" {
				t.Fatalf("the holder sees conflict %q, want b's report", cf)
			}
			if _, cf := hold("b", false); cf != "" {
				t.Fatalf("the reporter sees its own marker as a conflict: %q", cf)
			}
			// A hold not refreshed within its ttl is free again.
			time.Sleep(300 * time.Millisecond)
			if o, cf := hold("b", false); o != "" || cf != "" {
				t.Fatalf("after the ttl: other %q conflict %q, want b holding", o, cf)
			}
		})
	}
}

// TestCompleteReplyLost: a Complete retried after one that took effect
// (its reply lost: the claim is left unsettled) is told apart from one
// whose claim lost its key: the first returns nil and keeps the stored
// answer, the second is ErrClaimLost.
func TestCompleteReplyLost(t *testing.T) {
	srv := redistest.StartServer(t)
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || got.Outcome != idempotency.Execute {
		t.Fatalf("claim: %v %v", got.Outcome, err)
	}
	c := got.Claim.(*claim)
	if err := c.Complete(ctx, idempotency.Response{Status: 200, Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	c.settled = false // as after a call whose reply was lost
	if err := c.Complete(ctx, idempotency.Response{Status: 200, Body: []byte("second")}); err != nil {
		t.Fatalf("retry after a Complete that took effect: %v, want nil", err)
	}
	rep, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k", Fingerprint: "fp"})
	if err != nil || rep.Outcome != idempotency.Replay || string(rep.Response.Body) != "first" {
		t.Fatalf("after the retry: %v %v %+v, want the first answer replayed", rep.Outcome, err, rep.Response)
	}
	lost, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: "k2", Fingerprint: "fp"})
	if err != nil || lost.Outcome != idempotency.Execute {
		t.Fatalf("claim k2: %v %v", lost.Outcome, err)
	}
	if _, err := redistest.Do(srv.Addr(), "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if err := lost.Claim.Complete(ctx, idempotency.Response{Status: 200}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete after Redis lost the claim: %v, want ErrClaimLost", err)
	}
}
