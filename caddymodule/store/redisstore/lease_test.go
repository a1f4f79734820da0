package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// TestPresentationLease: a node answers an agent's unkeyed
// presentations of its active contract from its lease, and a revoke or
// release answered by any node is seen by every presentation that
// starts after it, on every node (docs/cluster.md "Presentation
// leases"). Two Clients on one Redis are two gateway nodes. The
// engine's side, the answer that waits the fence: caddymodule
// TestEndsReachEveryLease.
func TestPresentationLease(t *testing.T) {
	srv := redistest.StartServer(t)
	f := storetest.NewFixture(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	node := func(d time.Duration) (*counter, store.Set) {
		cnt := &counter{ops: map[store.Op]int{}}
		_, set := newRestoredSet(t, Config{Addrs: []string{srv.Addr()}, KeyPrefix: "lease:", Observer: cnt, ContractLease: d}, f.Restorer(t))
		cnt.take()
		return cnt, set
	}
	cntA, a := node(lease)
	_, b := node(lease)
	const agent = "agent"
	mint := func(t *testing.T, path, mode string, expires time.Time) *recipes.Contract {
		t.Helper()
		now := time.Now()
		c := f.Contract(t, now, agent, path, "rcns-gate", expires.Sub(now.UTC().Truncate(time.Second)))
		if _, err := a.Contracts.Mint(ctx, c, mode); err != nil {
			t.Fatal(err)
		}
		return c
	}
	present := func(t *testing.T, set store.Set, presenter string, c *recipes.Contract) store.Presentation {
		t.Helper()
		p, err := set.Presenter.Present(ctx, store.PresentRequest{Presenter: presenter, SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	presents := func(cnt *counter) int { return cnt.take()[store.OpPresent] }
	hour := func() time.Time { return time.Now().Add(time.Hour) }

	for _, end := range []struct{ state, by string }{{recipes.StateRevoked, "another node"}, {recipes.StateReleased, "the same node"}} {
		t.Run(end.state+" by "+end.by, func(t *testing.T) {
			c := mint(t, "/"+end.state, store.ModeOptimistic, hour())
			for range 3 {
				if err := presentActive(ctx, a, agent, c); err != nil {
					t.Fatal(err)
				}
			}
			if n := presents(cntA); n != 1 {
				t.Fatalf("three presentations made %d round trips, want 1 (then the lease)", n)
			}
			ender := b
			if end.by == "the same node" {
				ender = a
			}
			// The caller answers the fence after End (the engine's
			// afterEnding): by then the lease A took has run out.
			ended, fence, err := ender.Contracts.(store.LeaseFence).EndFenced(ctx, c, end.state)
			if err != nil || !ended {
				t.Fatalf("End = %v, %v", ended, err)
			}
			if fence != lease {
				t.Fatalf("fence = %v, want the lease %v", fence, lease)
			}
			time.Sleep(fence)
			p := present(t, a, agent, c)
			want := recipes.LookupRevoked
			if end.state == recipes.StateReleased {
				want = recipes.LookupUnknown
			}
			if p.Lookup != want || presents(cntA) != 1 {
				t.Fatalf("a presentation after End: lookup %d state %q, want lookup %d read from Redis", p.Lookup, p.State, want)
			}
		})
	}

	t.Run("the lease ends", func(t *testing.T) {
		c := mint(t, "/ends", store.ModeOptimistic, hour())
		if err := presentActive(ctx, a, agent, c); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lease + 50*time.Millisecond)
		if err := presentActive(ctx, a, agent, c); err != nil {
			t.Fatal(err)
		}
		if n := presents(cntA); n != 2 {
			t.Fatalf("%d round trips, want 2: a presentation after the lease reads Redis", n)
		}
	})

	t.Run("the contract expires within the lease", func(t *testing.T) {
		exp := time.Now().Add(200 * time.Millisecond)
		c := mint(t, "/expires", store.ModeOptimistic, exp)
		if err := presentActive(ctx, a, agent, c); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(c.ExpiresAt) + 20*time.Millisecond)
		if p := present(t, a, agent, c); p.Lookup == recipes.LookupFound || p.State == recipes.StateActive {
			t.Fatalf("a presentation after the contract expired: lookup %d state %q", p.Lookup, p.State)
		}
	})

	t.Run("keyed, pending and another agent's presentations read Redis", func(t *testing.T) {
		c := mint(t, "/keyed", store.ModeOptimistic, hour())
		if err := presentActive(ctx, a, agent, c); err != nil {
			t.Fatal(err)
		}
		presents(cntA)
		for i, key := range []string{"k1", "k2"} {
			p, err := a.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path,
				Key: key, Fingerprint: "fp", Claim: true})
			if err != nil || p.Claimed == nil || p.Claimed.Outcome != idempotency.Execute {
				t.Fatalf("keyed presentation %d: %+v, %v", i, p, err)
			}
			_ = p.Claimed.Claim.Abandon(ctx)
		}
		pending := mint(t, "/pending", store.ModeConfirmFirst, hour())
		for range 2 {
			if p := present(t, a, agent, pending); p.State != recipes.StatePending {
				t.Fatalf("pending contract presented: state %q", p.State)
			}
		}
		for range 2 {
			if p := present(t, a, "other-agent", c); p.State == recipes.StateActive && p.Contract != nil && p.Lookup == recipes.LookupFound && p.Claimed != nil {
				t.Fatalf("another agent's presentation claimed: %+v", p)
			}
		}
		if n := presents(cntA); n != 6 {
			t.Fatalf("two keyed, two pending and two other-agent presentations made %d round trips of op present, want 6", n)
		}
	})

	// Redis stalled, then killed and restarted empty, under a lease: the
	// node answers from its lease for at most the lease (documented:
	// "What a lease gives up"), then as without leases (503 while Redis
	// does not answer; unknown once it lost the contract); nothing stays
	// stuck once Redis answers again.
	t.Run("Redis stalled and restarted", func(t *testing.T) {
		cnt, n := node(lease)
		c := mint(t, "/faults", store.ModeOptimistic, hour())
		if err := presentActive(ctx, n, agent, c); err != nil {
			t.Fatal(err)
		}
		srv.Pause()
		paused := time.Now()
		if err := presentActive(ctx, n, agent, c); err != nil && time.Since(paused) < lease {
			t.Fatalf("within the lease, Redis stalled: %v", err)
		}
		time.Sleep(time.Until(paused.Add(lease)))
		if _, err := n.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path}); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("after the lease, Redis stalled: %v, want store.ErrUnavailable", err)
		}
		srv.Resume()
		if err := presentActive(ctx, n, agent, c); err != nil {
			t.Fatalf("Redis answering again: %v", err)
		}
		cnt.take()
		srv.Restart() // killed, back empty: the contract is gone
		restarted := time.Now()
		time.Sleep(time.Until(restarted.Add(lease)))
		var p store.Presentation
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			p, err = n.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path})
			if err == nil || time.Now().After(deadline) {
				break // the client reconnects by itself
			}
		}
		if err != nil || p.Lookup != recipes.LookupUnknown || cnt.take()[store.OpPresent] == 0 {
			t.Fatalf("after the restart and the lease: %+v, %v; want unknown, read from Redis", p, err)
		}
	})

	// Redis full (maxmemory, noeviction) under a lease: a leased
	// presentation is answered from the lease; a revoke on the other
	// node still ends the contract (endScript runs over maxmemory, to
	// free memory); after the fence the leasing node reads Redis, whose
	// refusal (503, nothing run) is not the contract active; once Redis
	// has room the contract reads revoked, nothing stuck.
	t.Run("Redis full", func(t *testing.T) {
		cnt, n := node(lease)
		c := mint(t, "/full", store.ModeOptimistic, hour())
		other := mint(t, "/full-other", store.ModeOptimistic, hour())
		if _, err := redistest.Do(srv.Addr(), "SET", "fill", strings.Repeat("x", 2<<20)); err != nil {
			t.Fatal(err)
		}
		defer emptyRedis(srv.Addr())
		// The lease runs from when its read was sent: taken just before
		// Redis is made full, so that a slow fill does not spend it.
		leased := time.Now()
		if err := presentActive(ctx, n, agent, c); err != nil {
			t.Fatal(err)
		}
		cnt.take()
		if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", strconv.FormatInt(usedMemory(t, srv.Addr())-64<<10, 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: other.SynthesisID, Method: other.Method, Path: other.Path}); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(Cause(err), "OOM") {
			t.Fatalf("an unleased presentation over maxmemory: %v, want an OOM refusal", err)
		}
		if err := presentActive(ctx, n, agent, c); err != nil && time.Since(leased) < lease {
			t.Fatalf("a leased presentation over maxmemory, within the lease: %v", err)
		}
		ended, fence, err := b.Contracts.(store.LeaseFence).EndFenced(ctx, c, recipes.StateRevoked)
		if err != nil || !ended {
			t.Fatalf("End over maxmemory = %v, %v; want the contract ended", ended, err)
		}
		time.Sleep(fence)
		p, err := n.Presenter.Present(ctx, store.PresentRequest{Presenter: agent, SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path})
		if !errors.Is(err, store.ErrUnavailable) || p.State == recipes.StateActive {
			t.Fatalf("after the revoke and its fence, over maxmemory: %+v, %v; want an OOM refusal", p, err)
		}
		if _, err := redistest.Do(srv.Addr(), "DEL", "fill"); err != nil {
			t.Fatal(err)
		}
		if p = present(t, n, agent, c); p.Lookup != recipes.LookupRevoked {
			t.Fatalf("once Redis has room: lookup %d state %q, want revoked", p.Lookup, p.State)
		}
		if err := presentActive(ctx, n, agent, other); err != nil {
			t.Fatalf("once Redis has room, the other contract: %v", err)
		}
	})

	// Nodes whose contract_lease differs (a reload rolling across them,
	// helper-65): a node with leases off, or a shorter lease, that ends
	// the contract, or finds it ended, waits the longest lease any node
	// took on it, which the presentation kept in the contract's record
	// and End read back; its List-based ends wait the longest any node
	// may take (helper-67).
	t.Run("nodes with different leases", func(t *testing.T) {
		for _, ender := range []struct {
			name  string
			lease time.Duration
		}{{"off", -1}, {"shorter", 50 * time.Millisecond}} {
			t.Run(ender.name, func(t *testing.T) {
				_, e := node(ender.lease)
				c := mint(t, "/mixed-"+ender.name, store.ModeOptimistic, hour())
				if err := presentActive(ctx, a, agent, c); err != nil {
					t.Fatal(err)
				}
				ended, fence, err := e.Contracts.(store.LeaseFence).EndFenced(ctx, c, recipes.StateRevoked)
				if err != nil || !ended {
					t.Fatalf("End = %v, %v", ended, err)
				}
				if fence != lease {
					t.Fatalf("the fence of ending a contract node A leased for %v = %v, want %v", lease, fence, lease)
				}
				time.Sleep(fence)
				if p := present(t, a, agent, c); p.Lookup != recipes.LookupRevoked {
					t.Fatalf("node A after the fence: lookup %d state %q, want revoked", p.Lookup, p.State)
				}
				// A noop End (found revoked) reads the lease back too.
				if ended, fence, err := e.Contracts.(store.LeaseFence).EndFenced(ctx, c, recipes.StateRevoked); err != nil || ended || fence != lease {
					t.Fatalf("second End = %v, %v, %v; want a noop fenced %v", ended, fence, err, lease)
				}
				if f := e.Contracts.(store.LeaseFence).ListFence(); f != MaxContractLease {
					t.Fatalf("ListFence = %v, want MaxContractLease", f)
				}
			})
		}
		// A lease under a millisecond is recorded as one, not zero.
		_, sub := node(500 * time.Microsecond)
		_, off := node(-1)
		c := mint(t, "/mixed-sub-ms", store.ModeOptimistic, hour())
		if err := presentActive(ctx, sub, agent, c); err != nil {
			t.Fatal(err)
		}
		if _, fence, err := off.Contracts.(store.LeaseFence).EndFenced(ctx, c, recipes.StateRevoked); err != nil || fence < 500*time.Microsecond {
			t.Fatalf("the fence of a contract leased for 500µs = %v, %v", fence, err)
		}
	})

	t.Run("off", func(t *testing.T) {
		cntOff, off := node(-1)
		c := mint(t, "/off", store.ModeOptimistic, hour())
		for range 2 {
			if err := presentActive(ctx, off, agent, c); err != nil {
				t.Fatal(err)
			}
		}
		if n := presents(cntOff); n != 2 {
			t.Fatalf("with leases off, two presentations made %d round trips, want 2", n)
		}
		if ended, fence, err := off.Contracts.(store.LeaseFence).EndFenced(ctx, c, recipes.StateRevoked); err != nil || !ended || fence != 0 {
			t.Fatalf("End = %v, fence %v, %v; want ended, 0 (no node leased it: nothing to wait for)", ended, fence, err)
		}
	})
}

// TestContractLeaseConfig: a lease over MaxContractLease is refused (a
// revoke waits it), 0 is the default.
func TestContractLeaseConfig(t *testing.T) {
	srv := redistest.StartServer(t)
	if _, err := New(context.Background(), Config{Addrs: []string{srv.Addr()}, ContractLease: 2 * time.Second}); err == nil {
		t.Fatal("a 2s contract lease was taken")
	}
	c, _ := newSet(t, Config{Addrs: []string{srv.Addr()}})
	if c.cfg.ContractLease != DefaultContractLease {
		t.Fatalf("default lease %v, want %v", c.cfg.ContractLease, DefaultContractLease)
	}
}

// TestLeaseFromSend: a lease runs for the lease from when its read was
// sent, not from when the reply came: a read whose reply came after the
// lease takes none, and one whose reply was slow has less of it left.
func TestLeaseFromSend(t *testing.T) {
	srv := redistest.StartServer(t)
	f := storetest.NewFixture(t)
	const lease = 200 * time.Millisecond
	_, set := newRestoredSet(t, Config{Addrs: []string{srv.Addr()}, ContractLease: lease}, f.Restorer(t))
	s := set.Contracts.(*contracts)
	c := f.Contract(t, time.Now(), "agent", "/sent", "rcns-gate", time.Hour)
	exp := c.ExpiresAt.UnixMilli()
	s.grantLease(c, exp, time.Now().Add(-lease-time.Millisecond))
	if _, ok := s.leasedPresentation("agent", c.SynthesisID); ok {
		t.Fatal("a read sent longer ago than the lease took one")
	}
	s.grantLease(c, exp, time.Now().Add(-lease+150*time.Millisecond))
	if p, ok := s.leasedPresentation("agent", c.SynthesisID); !ok || p.Contract != c {
		t.Fatal("a read sent 50 ms ago took no lease")
	}
	if _, ok := s.leasedPresentation("other-agent", c.SynthesisID); ok {
		t.Fatal("another agent's presentation was answered from the lease")
	}
	time.Sleep(160 * time.Millisecond)
	if _, ok := s.leasedPresentation("agent", c.SynthesisID); ok {
		t.Fatal("the lease outlived its read's send time plus the lease")
	}
}
