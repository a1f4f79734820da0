package redisstore

// Cluster mode's gate synthesis and its writes in other slots, with
// nodes stalled, killed and restarted (beside.go, present.go).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// TestResolvePairClusterMint: in Cluster mode a gate synthesis is one
// round trip: ResolvePair mints in the agent's slot and writes the
// owner index and the global live index (other slots) in the same
// pipeline; where its script does not mint (the pair is served), those
// writes are undone off the answer path; a node that saw the pair
// served sends none.
func TestResolvePairClusterMint(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	f := storetest.NewFixture(t)
	cnt := &counter{ops: map[store.Op]int{}}
	node := func(obs store.Observer) (*Client, store.Set) {
		return newRestoredSet(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), KeyPrefix: "m:", Observer: obs}, f.Restorer(t))
	}
	a, setA := node(cnt)
	b, setB := node(nil)
	if !setA.FoldsGate {
		t.Fatal("FoldsGate false in Cluster mode")
	}
	ctx := context.Background()
	const agent = "agent-a"
	resolve := func(set store.Set, c *recipes.Contract) store.PairResolution {
		t.Helper()
		r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/trip", Mint: c, MintMode: store.ModeOptimistic})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	listed := func() []string {
		t.Helper()
		all, err := setB.Contracts.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range all {
			ids = append(ids, c.SynthesisID)
		}
		return ids
	}

	c := f.Contract(t, time.Now(), agent, "/trip", recipes.OriginGate, time.Hour)
	cnt.take() // New's PING
	r := resolve(setA, c)
	if r.Minted == nil || r.Minted.Err != nil || r.Minted.Joined != nil || r.Minted.State != recipes.StateActive || r.Contract != nil {
		t.Fatalf("synthesis: %+v minted %+v", r, r.Minted)
	}
	if got := cnt.take(); fmt.Sprint(got) != fmt.Sprint(map[store.Op]int{store.OpResolvePair: 1}) {
		t.Fatalf("synthesis round trips %v, want one resolve_pair", got)
	}
	if got, res, err := setB.Contracts.Lookup(ctx, "agent-b", c.SynthesisID); err != nil || res != recipes.LookupFound || got.OriginatingAgentID != agent {
		t.Fatalf("the minted contract by id from another agent (its owner index): %v %d %v", got, res, err)
	}
	if ids := listed(); fmt.Sprint(ids) != fmt.Sprint([]string{c.SynthesisID}) {
		t.Fatalf("global live index %v, want [%s]", ids, c.SynthesisID)
	}

	// Node b has not seen the pair served: it sends the writes, the
	// script finds c, and the writes are undone.
	d := f.Contract(t, time.Now(), agent, "/trip", recipes.OriginGate, time.Hour)
	if r := resolve(setB, d); r.Contract == nil || r.Contract.SynthesisID != c.SynthesisID || r.Minted != nil {
		t.Fatalf("pair served on node b: %+v", r)
	}
	// The undo is queued once the writes beside the script are done,
	// then written with the next batch.
	eventually(t, 5*time.Second, func() (bool, string) {
		owner, oerr := b.rdb.Exists(ctx, "m:{o:"+d.SynthesisID+"}").Result()
		n, lerr := setB.Contracts.Len(ctx)
		return oerr == nil && lerr == nil && owner == 0 && n == 1,
			fmt.Sprintf("the indexes of a contract not minted: owner index %d (%v), Len %d (%v), want 0 and 1", owner, oerr, n, lerr)
	})
	if ids := listed(); fmt.Sprint(ids) != fmt.Sprint([]string{c.SynthesisID}) {
		t.Fatalf("global live index %v after a pair served, want [%s]", ids, c.SynthesisID)
	}

	// Node a minted for the pair: it sends nothing beside the script.
	setA.Contracts.(*contracts).served.Wait() // the hint's Set is buffered
	a.recs.mu.Lock()
	queued := a.recs.queued
	a.recs.mu.Unlock()
	e := f.Contract(t, time.Now(), agent, "/trip", recipes.OriginGate, time.Hour)
	if r := resolve(setA, e); r.Contract == nil || r.Contract.SynthesisID != c.SynthesisID || r.Minted != nil {
		t.Fatalf("pair served on node a: %+v", r)
	}
	a.recs.mu.Lock()
	after := a.recs.queued
	a.recs.mu.Unlock()
	if after != queued {
		t.Fatalf("node a queued %d undo writes for a pair it saw served", after-queued)
	}
	if n, err := a.rdb.Exists(ctx, "m:{o:"+e.SynthesisID+"}").Result(); err != nil || n != 0 {
		t.Fatalf("owner index written for a pair node a saw served: %d %v", n, err)
	}
}

// TestResolvePairClusterMintStalled: in Cluster mode, a gate synthesis
// whose owner index node does not answer (SIGSTOP) while the agent's
// slot mints fails with store.ErrUnavailable within the timeouts; its
// claim is released and the contract it minted is released once that
// node answers again, so no request runs under a contract whose answer
// was 503, and the key executes on its next claim. MintForPair, the
// same.
func TestResolvePairClusterMintStalled(t *testing.T) {
	cl, f, c, set := stallableCluster(t, "s:")
	ctx := context.Background()
	const agent = "agent-s"
	// elsewhere is a contract for path whose owner index is on another
	// node than the agent's slot, and that node.
	elsewhere := func(path string) (*recipes.Contract, *redistest.Server) {
		t.Helper()
		return ownedElsewhere(t, cl, c, f, agent, path)
	}
	m, other := elsewhere("/stall")
	// Warm the agent's node (EVALSHA, the cluster's slots), so that the
	// call below meets only the stalled node.
	if _, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/warm"}); err != nil {
		t.Fatal(err)
	}
	req := store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/stall", Key: "stalled", Fingerprint: "fp",
		ClaimIfFound: true, ClaimIfMissing: true, Mint: m, MintMode: store.ModeOptimistic}
	other.Pause()
	_, err := set.Presenter.ResolvePair(ctx, req)
	other.Resume()
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ResolvePair with the owner index's node stopped: %v, want store.ErrUnavailable", err)
	}
	released := func(c *recipes.Contract) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, err := set.Contracts.State(ctx, c)
			if err == nil && st == recipes.StateReleased {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the contract minted for a 503 is %q (%v), want released", st, err)
			}
		}
	}
	released(m)
	deadline := time.Now().Add(10 * time.Second)
	if got, err := set.Contracts.ActiveFor(ctx, agent, "BOOK", "/stall"); err != nil || got != nil {
		t.Fatalf("the pair is served by %v (%v) after a 503", got, err)
	}
	for {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agent, Key: "stalled", Fingerprint: "fp"})
		if err == nil && got.Outcome == idempotency.Execute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key of a 503: %v %v, want it to execute", got.Outcome, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// MintForPair (the mint after a miss on a node that saw the pair
	// served) with its owner index's node stopped: the same.
	m2, other := elsewhere("/stall2")
	other.Pause()
	_, _, err = set.Contracts.MintForPair(ctx, m2, store.ModeOptimistic)
	other.Resume()
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("MintForPair with the owner index's node stopped: %v, want store.ErrUnavailable", err)
	}
	released(m2)

	// The owner index's node down (killed, not stopped): the error is
	// not a timeout, and the claim the script took is still released.
	m3, down := elsewhere("/down")
	down.Stop()
	_, err = set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/down", Key: "down", Fingerprint: "fp",
		ClaimIfFound: true, ClaimIfMissing: true, Mint: m3, MintMode: store.ModeOptimistic})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ResolvePair with the owner index's node down: %v, want store.ErrUnavailable", err)
	}
	down.Restart() // rejoins with its slots (nodes.conf), empty
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agent, Key: "down", Fingerprint: "fp"})
		if err == nil && got.Outcome == idempotency.Execute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key of a 503 with a node down: %v %v, want it to execute", got.Outcome, err)
		}
	}
}

// stallTimeout is the read, write and dial timeout of stallableCluster's
// Client.
const stallTimeout = time.Second

// stallableCluster starts a three-master Cluster and a Client of it
// with keys under prefix and 1 s timeouts, for a test that stalls its
// nodes (SIGSTOP) or kills them.
func stallableCluster(t *testing.T, prefix string) (*redistest.Cluster, *storetest.Fixture, *Client, store.Set) {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	f := storetest.NewFixture(t)
	c, set := newRestoredSet(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), KeyPrefix: prefix,
		ReadTimeout: stallTimeout, WriteTimeout: stallTimeout, DialTimeout: stallTimeout}, f.Restorer(t))
	return cl, f, c, set
}

// clusterNodeOf is the master of cl that serves key, as c routes it.
func clusterNodeOf(t *testing.T, cl *redistest.Cluster, c *Client, key string) *redistest.Server {
	t.Helper()
	m, err := c.rdb.(*redis.ClusterClient).MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		if n.Addr() == m.Options().Addr {
			return n
		}
	}
	t.Fatalf("no node serves %s (%s)", key, m.Options().Addr)
	return nil
}

// TestClusterStalledNodeIsolated (fresh review): in Cluster mode a node
// that stalls does not fail what other nodes serve. A keyed answer's
// store made beside the answer (store.OffAnswerPath) is not gathered
// into the record writer's batch, whose Cluster pipeline would fail
// every command once one node's part times out; a pair a live contract
// serves in the agent's healthy slot is served, though the prepared
// mint's owner index write went to the stalled node; and a synthesis
// whose agent slot stalls past its deadline mints nothing when that
// node wakes and leaves no index behind.
func TestClusterStalledNodeIsolated(t *testing.T) {
	cl, f, c, set := stallableCluster(t, "i:")
	ctx := context.Background()
	const agent = "agent-i"
	own := clusterNodeOf(t, cl, c, c.agentKey(agent, "cz"))
	// Warm the agent's node (EVALSHA, the cluster's slots).
	if _, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/warm"}); err != nil {
		t.Fatal(err)
	}
	// ownerGone waits for the owner index of m, which was not minted, to
	// be undone.
	// ownerGone: m's writes beside its script (its owner index, its
	// member of the global live index) are undone.
	ownerGone := func(t *testing.T, m *recipes.Contract, what string) {
		t.Helper()
		eventually(t, 5*time.Second, func() (bool, string) {
			n, err := c.rdb.Exists(ctx, "i:{o:"+m.SynthesisID+"}").Result()
			_, gerr := c.rdb.ZScore(ctx, c.globalKey("cl"), m.OriginatingAgentID+" "+m.SynthesisID).Result()
			return err == nil && n == 0 && errors.Is(gerr, redis.Nil),
				fmt.Sprintf("the owner index of %s: %d %v; its global live index member: %v (want redis.Nil)", what, n, err, gerr)
		})
	}

	t.Run("settle", func(t *testing.T) {
		var auditID string
		for i := 0; ; i++ {
			if auditID = fmt.Sprintf("%064d", i); clusterNodeOf(t, cl, c, records{c: c}.recordKey(auditID)) != own {
				break
			}
		}
		stalled := clusterNodeOf(t, cl, c, records{c: c}.recordKey(auditID))
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: agent, Key: "settle", Fingerprint: "fp"})
		if err != nil || got.Outcome != idempotency.Execute {
			t.Fatalf("claim: %v %v", got.Outcome, err)
		}
		stalled.Pause()
		_ = set.Records.Retain(ctx, store.Record{AuditID: auditID, AgentID: agent, NodeID: "n"}) // its batch stalls
		err = got.Claim.Complete(store.OffAnswerPath(ctx), idempotency.Response{Status: 200, Body: []byte(`{"s":1}`)})
		stalled.Resume()
		if err != nil {
			t.Fatalf("a settle in the agent's healthy slot with another node stalled: %v", err)
		}
	})

	t.Run("pair served", func(t *testing.T) {
		served := f.Contract(t, time.Now(), agent, "/served", recipes.OriginGate, time.Hour)
		if _, err := set.Contracts.Mint(ctx, served, store.ModeOptimistic); err != nil {
			t.Fatal(err)
		}
		m, other := ownedElsewhere(t, cl, c, f, agent, "/served")
		other.Pause()
		res, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/served", Mint: m, MintMode: store.ModeOptimistic})
		other.Resume()
		if err != nil || res.Contract == nil || res.Contract.SynthesisID != served.SynthesisID {
			t.Fatalf("a pair served in the agent's healthy slot, the prepared mint's owner index node stalled: %v %v", res.Contract, err)
		}
		ownerGone(t, m, "the mint not made")
	})

	t.Run("join", func(t *testing.T) {
		// MintForPair that joins the pair's live contract (the mint after
		// a miss on a node that saw the pair served) with its own owner
		// index's node stalled: served, its writes undone.
		m, other := ownedElsewhere(t, cl, c, f, agent, "/served")
		other.Pause()
		state, joined, err := set.Contracts.MintForPair(ctx, m, store.ModeOptimistic)
		other.Resume()
		if err != nil || joined == nil || joined.SynthesisID == m.SynthesisID || state != recipes.StateActive {
			t.Fatalf("MintForPair joining the pair's contract, its owner index node stalled: %q %v %v", state, joined, err)
		}
		ownerGone(t, m, "the mint that joined")
	})

	t.Run("script late", func(t *testing.T) {
		m := f.Contract(t, time.Now(), agent, "/late", recipes.OriginGate, time.Hour)
		own.Pause()
		_, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/late", Mint: m, MintMode: store.ModeOptimistic})
		// ResolvePair gave up after the read timeout, past the mint's
		// deadline (three quarters of it); the node wakes a little later
		// and runs the script. The whole stall stays within the cluster's
		// node timeout (2 s): longer, the other nodes mark the node failed
		// and the cluster answers CLUSTERDOWN for a while after it wakes.
		time.Sleep(stallTimeout / 4)
		own.Resume()
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("ResolvePair with the agent's node stalled: %v", err)
		}
		ownerGone(t, m, "a mint that reached Redis past its deadline")
		// Past the undo, nothing lands late (besideScript's deadline).
		time.Sleep(2 * stallTimeout)
		ownerGone(t, m, "a mint that reached Redis past its deadline, a while later")
		if st, err := set.Contracts.State(ctx, m); err != nil || st != "" {
			t.Fatalf("a mint that reached Redis past its deadline: state %q (%v), want none", st, err)
		}
	})
}

// eventually polls check every 10 ms until it reports done, failing the
// test with its last word once within has passed.
func eventually(t *testing.T, within time.Duration, check func() (done bool, why string)) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		done, why := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
	}
}

// ownedElsewhere is a gate contract of agent for path whose owner index
// c routes to another master of cl than the agent's slot, and that
// master.
func ownedElsewhere(t *testing.T, cl *redistest.Cluster, c *Client, f *storetest.Fixture, agent, path string) (*recipes.Contract, *redistest.Server) {
	t.Helper()
	own := clusterNodeOf(t, cl, c, c.agentKey(agent, "cz"))
	for range 1000 {
		m := f.Contract(t, time.Now(), agent, path, recipes.OriginGate, time.Hour)
		if n := clusterNodeOf(t, cl, c, c.prefix+"{o:"+m.SynthesisID+"}"); n != own {
			return m, n
		}
	}
	t.Fatal("no synthesis id found with its owner index on another node")
	return nil, nil
}

// TestSetClose: a Set's Close stops its caches' goroutines (a config
// reload builds a Set, and Caddy's Cleanup closes the old one: without
// it every reload left them running), without harm to calls that use
// the Set meanwhile, and a Set still answers after it, from Redis: its
// contract is found by id and by pair.
func TestSetClose(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	f := storetest.NewFixture(t)
	rs := f.Restorer(t)
	c, set := newRestoredSet(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), KeyPrefix: "s:"}, rs)
	ctx := context.Background()
	con := f.Contract(t, time.Now(), "agent-a", "/trip", recipes.OriginGate, time.Hour)
	if _, err := set.Contracts.Mint(ctx, con, store.ModeOptimistic); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	const reloads = 20
	sets := make([]store.Set, reloads)
	for i := range sets {
		var err error
		if sets[i], err = c.Set(store.Limits{}, rs); err != nil {
			t.Fatal(err)
		}
	}
	// Requests of the old configurations still running while their Sets
	// close (a native-door connection, an MCP task) use the caches
	// throughout: none may meet ristretto's Close (a panic, "send on
	// closed channel", ends the process).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range sets {
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					cs := s.Contracts.(*contracts)
					cs.noteServed("agent-a", con.Method, con.Path, con.ExpiresAt, false) // ResolvePair's served hint
					cs.servedHint("agent-a", con.Method, con.Path)
					cs.cache.Set(con.SynthesisID, con, 1) // a lookup's decoded contract
					cs.cache.Get(con.SynthesisID)
				}
			})
		}
	}
	time.Sleep(100 * time.Millisecond)
	for _, s := range sets {
		s.Close()
	}
	time.Sleep(200 * time.Millisecond) // the calls go on against closed caches
	close(stop)
	wg.Wait()
	set.Close()
	var grown int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if grown = runtime.NumGoroutine() - before; grown < reloads || time.Now().After(deadline) {
			break
		}
	}
	if grown >= reloads {
		t.Fatalf("%d goroutines more after %d Sets built and closed: their caches still run", grown, reloads)
	}
	if got, res, err := set.Contracts.Lookup(ctx, "agent-a", con.SynthesisID); err != nil || res != recipes.LookupFound {
		t.Fatalf("a closed Set's lookup by id: %v %d %v", got, res, err)
	}
	r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: "agent-a", Method: con.Method, Path: con.Path})
	if err != nil || r.Contract == nil || r.Contract.SynthesisID != con.SynthesisID {
		t.Fatalf("a closed Set's lookup by pair: %+v %v", r, err)
	}
}

// TestClusterGlobalIndexStalled: the global live index's node stalls
// (SIGSTOP, shorter than the cluster's node timeout, raised to 15 s as
// in production) through a synthesis that mints in the agent's healthy
// slot: the answer is 503, the contract is released, and once the node
// wakes and runs what was queued for it (the mint's global index write,
// the release's undoing of it, sent again while it slept), the contract
// is not in the live index, then or a while later.
func TestClusterGlobalIndexStalled(t *testing.T) {
	cl, f, c, set := stallableCluster(t, "l:")
	for _, n := range cl.Nodes {
		if _, err := redistest.Do(n.Addr(), "CONFIG", "SET", "cluster-node-timeout", "15000"); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	g := clusterNodeOf(t, cl, c, c.globalKey("cl"))
	agent := ""
	for i := 0; agent == ""; i++ {
		if a := "agent-" + strconv.Itoa(i); clusterNodeOf(t, cl, c, c.agentKey(a, "cz")) != g {
			agent = a
		}
	}
	// Warm every node (EVALSHA of the scripts, the cluster's slots).
	warm := f.Contract(t, time.Now(), agent, "/warm", recipes.OriginGate, time.Hour)
	if r, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/warm", Mint: warm, MintMode: store.ModeOptimistic}); err != nil || r.Minted == nil || r.Minted.Err != nil {
		t.Fatalf("warming: %+v %v", r, err)
	}
	member := func(m *recipes.Contract) error {
		_, err := c.rdb.ZScore(ctx, c.globalKey("cl"), m.OriginatingAgentID+" "+m.SynthesisID).Result()
		return err
	}
	m := f.Contract(t, time.Now(), agent, "/late", recipes.OriginGate, time.Hour)
	g.Pause()
	_, err := set.Presenter.ResolvePair(ctx, store.PairRequest{AgentID: agent, Method: "BOOK", Path: "/late", Mint: m, MintMode: store.ModeOptimistic})
	if !errors.Is(err, store.ErrUnavailable) {
		g.Resume()
		t.Fatalf("a synthesis whose global index node stalls: %v, want store unavailable", err)
	}
	time.Sleep(3 * stallTimeout) // the release's undoing is sent, and sent again, to the stalled node
	g.Resume()
	eventually(t, 10*time.Second, func() (bool, string) {
		st, serr := set.Contracts.State(ctx, m)
		merr := member(m)
		return serr == nil && st == recipes.StateReleased && errors.Is(merr, redis.Nil),
			fmt.Sprintf("a contract minted while its global index write stalled: state %q (%v), its live index member: %v (want redis.Nil)", st, serr, merr)
	})
	time.Sleep(2 * stallTimeout)
	if err := member(m); !errors.Is(err, redis.Nil) {
		t.Fatalf("the released contract's live index member, a while after the node woke: %v, want redis.Nil", err)
	}
}

// TestBesideWriteLate: a mint's writes in other slots (besideScript)
// that reach Redis past the mint's deadline write nothing, so that one a
// stalled node runs after its undo cannot land (TestClusterGlobalIndexStalled
// shows the stall; which of the queued commands a waking node runs first
// is not for a test to choose, so this sends them late instead); by the
// deadline they write both indexes.
func TestBesideWriteLate(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	f := storetest.NewFixture(t)
	c, set := newRestoredSet(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), KeyPrefix: "w:"}, f.Restorer(t))
	s := set.Contracts.(*contracts)
	ctx := context.Background()
	written := func(m *recipes.Contract) (owner int64, member error) {
		t.Helper()
		owner, err := c.rdb.Exists(ctx, s.ownerKey(m.SynthesisID)).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, member = c.rdb.ZScore(ctx, c.globalKey("cl"), m.OriginatingAgentID+" "+m.SynthesisID).Result()
		return owner, member
	}
	for _, late := range []bool{true, false} {
		m := f.Contract(t, time.Now(), "agent-w", "/w", recipes.OriginGate, time.Hour)
		mc, err := s.mintCall(m, store.ModeOptimistic, false)
		if err != nil {
			t.Fatal(err)
		}
		_, deadline, cancel := c.claimDeadline(ctx)
		if late {
			deadline = c.nowMS() + c.clockOffset.Load() - 1000 // a second ago on Redis's clock
		}
		err = <-s.startBeside(ctx, m, mc, deadline)
		cancel()
		owner, member := written(m)
		switch {
		case late && (!errors.Is(err, errBesideLate) || owner != 0 || !errors.Is(member, redis.Nil)):
			t.Fatalf("writes past their deadline: %v, owner index %d, global member %v; want errBesideLate and nothing written", err, owner, member)
		case !late && (err != nil || owner != 1 || member != nil):
			t.Fatalf("writes by their deadline: %v, owner index %d, global member %v; want both written", err, owner, member)
		}
	}
}

// TestClusterTaskPollStalledNode (helper-124's finding): one Tasks.Poll
// of tasks on every master while one master stalls answers the tasks
// the healthy masters hold (a cancel request seen, the records found)
// and fails only those of the stalled one (TaskPoll.Err), once the
// call's context ends; before, the pipeline's first error failed every
// task of the poll.
func TestClusterTaskPollStalledNode(t *testing.T) {
	cl, _, c, set := stallableCluster(t, "tp:")
	ctx := context.Background()
	now := time.Now().UTC()
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("%032x", 0xc000+i)
		ids = append(ids, id)
		if err := set.Tasks.Put(ctx, store.Task{ID: id, AgentID: "a", NodeID: "n", Tool: "t", Status: store.TaskStatusWorking,
			CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := set.Tasks.RequestCancel(ctx, id, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	stalled := clusterNodeOf(t, cl, c, tasks{c: c}.key(ids[0]))
	onStalled := map[string]bool{}
	for _, id := range ids {
		onStalled[id] = clusterNodeOf(t, cl, c, tasks{c: c}.key(id)) == stalled
	}
	stalled.Pause()
	defer stalled.Resume()
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ps, err := set.Tasks.Poll(pctx, ids)
	if err != nil || len(ps) != len(ids) {
		t.Fatalf("Poll with a master stalled: %d polls, %v", len(ps), err)
	}
	healthy := 0
	for i, p := range ps {
		switch {
		case onStalled[ids[i]]:
			if p.Err == nil || !errors.Is(p.Err, store.ErrUnavailable) {
				t.Errorf("task %d, on the stalled master: %+v, want an ErrUnavailable", i, p)
			}
		case p.Err != nil || !p.Stored || !p.CancelRequested:
			t.Errorf("task %d, on a healthy master: %+v, want its record and cancel request", i, p)
		default:
			healthy++
		}
	}
	if healthy == 0 || healthy == len(ids) {
		t.Fatalf("%d of %d tasks on healthy masters: the test needs both kinds", healthy, len(ids))
	}
}
