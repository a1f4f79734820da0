package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// watchCount runs c.WatchManifest until the test ends and counts its
// calls; stopped reports when it has returned.
func watchCount(t *testing.T, c *Client) (calls func() int64, stopped <-chan struct{}) {
	t.Helper()
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WatchManifest(ctx, func() { n.Add(1) })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return n.Load, done
}

// waitCalls waits, up to 10 s, for calls to reach want.
func waitCalls(t *testing.T, calls func() int64, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for calls() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := calls(); got < want {
		t.Fatalf("%s: the watch was called %d times, want %d", what, got, want)
	}
}

// manifestNode is a client and its manifest versions, on cfg with prefix.
func manifestNode(t *testing.T, cfg Config, prefix string) (*Client, store.ManifestVersions) {
	t.Helper()
	cfg.KeyPrefix = prefix
	c, set := newSet(t, cfg)
	return c, set.Manifest
}

// TestWatchManifest: a manifest given a new last version on one node is
// published on the manifest's channel, one message per new version (a
// version already given publishes nothing), and WatchManifest on
// another node hears it, on single Redis, Cluster and Sentinel; it is
// called once on subscribing (to catch up), and it returns when its
// context ends or its client is closed.
func TestWatchManifest(t *testing.T) {
	topologies := []struct {
		name string
		cfg  func(t *testing.T) Config
	}{
		{"single", func(t *testing.T) Config { return Config{Addrs: []string{redistest.StartServer(t).Addr()}} }},
		{"cluster", func(t *testing.T) Config {
			return Config{Mode: ModeCluster, Addrs: redistest.StartCluster(t, 3).Addrs()}
		}},
		{"sentinel", func(t *testing.T) Config {
			g := redistest.StartSentinel(t)
			return Config{Mode: ModeSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName}
		}},
	}
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			cfg := tp.cfg(t)
			ctx := context.Background()
			prefix := fmt.Sprintf("t%d:", prefixes.Add(1))
			a, _ := manifestNode(t, cfg, prefix)
			b, mb := manifestNode(t, cfg, prefix)

			// The channel's own messages: the versions published, in order.
			raw := b.rdb.Subscribe(ctx, b.manifestChannel())
			defer raw.Close()
			if _, err := raw.Receive(ctx); err != nil { // the subscription
				t.Fatal(err)
			}
			calls, _ := watchCount(t, a)
			waitCalls(t, calls, 1, "subscribing")

			for _, v := range []struct {
				hash      string
				floor     int
				floorHash string
			}{{"H1", 0, ""}, {"H1", 1, "H1"}, {"H2", 1, "H1"}} {
				if _, err := mb.Version(ctx, v.hash, v.floor, v.floorHash); err != nil {
					t.Fatal(err)
				}
			}
			for _, want := range []string{"1", "2"} { // "H1" again gave no new version
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				msg, err := raw.ReceiveMessage(rctx)
				cancel()
				if err != nil || msg.Payload != want {
					t.Fatalf("the channel's message = %v, %v; want %s", msg, err, want)
				}
			}
			waitCalls(t, calls, 3, "two new versions")
		})
	}

	t.Run("ends", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c, _ := manifestNode(t, Config{Addrs: []string{srv.Addr()}}, fmt.Sprintf("t%d:", prefixes.Add(1)))
		calls, stopped := watchCount(t, c)
		waitCalls(t, calls, 1, "subscribing")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("WatchManifest did not return after its client was closed")
		}
	})
}

// TestWatchManifestFaults: the watch outlives Redis restarted and
// stalled: it subscribes again (and is called, to catch up on a
// version given meanwhile) once Redis answers, and hears the next
// version. A stall that holds the connection open is found by the ping
// after manifestWatchIdle without a message.
func TestWatchManifestFaults(t *testing.T) {
	manifestWatchIdle = 300 * time.Millisecond
	t.Cleanup(func() { manifestWatchIdle = 15 * time.Second })
	ctx := context.Background()

	t.Run("restarted", func(t *testing.T) {
		srv := redistest.StartServer(t)
		prefix := fmt.Sprintf("t%d:", prefixes.Add(1))
		a, _ := manifestNode(t, Config{Addrs: []string{srv.Addr()}}, prefix)
		_, mb := manifestNode(t, Config{Addrs: []string{srv.Addr()}}, prefix)
		calls, _ := watchCount(t, a)
		waitCalls(t, calls, 1, "subscribing")
		srv.Restart()
		waitCalls(t, calls, 2, "subscribing again after the restart")
		if _, err := mb.Version(ctx, "H1", 0, ""); err != nil {
			t.Fatal(err)
		}
		waitCalls(t, calls, 3, "a new version after the restart")
	})

	t.Run("stalled", func(t *testing.T) {
		srv := redistest.StartServer(t)
		proxy := redistest.StartProxy(t, srv.Addr())
		prefix := fmt.Sprintf("t%d:", prefixes.Add(1))
		a, _ := manifestNode(t, Config{Addrs: []string{proxy.Addr()}}, prefix)
		_, mb := manifestNode(t, Config{Addrs: []string{srv.Addr()}}, prefix)
		calls, _ := watchCount(t, a)
		waitCalls(t, calls, 1, "subscribing")
		// The watch's connection stops carrying anything, for good, and
		// stays open: its ping goes unanswered, and it subscribes again
		// on a new connection (called, to catch up on the version given
		// meanwhile, which it did not hear), then hears the next.
		proxy.Freeze()
		if _, err := mb.Version(ctx, "H1", 0, ""); err != nil {
			t.Fatal(err)
		}
		waitCalls(t, calls, 2, "subscribing again after its connection stalled")
		if _, err := mb.Version(ctx, "H2", 1, "H1"); err != nil {
			t.Fatal(err)
		}
		waitCalls(t, calls, 3, "a new version after the stall")
	})
}

// TestWatchManifestRefused: under a Redis ACL that does not grant the
// manifest's channel (a configuration written before the channel), the
// version script still numbers the manifest (its PUBLISH refused), and
// the watch logs its refusal once at WARN, keeps trying, and subscribes
// once the channel is granted.
func TestWatchManifestRefused(t *testing.T) {
	srv := redistest.StartServer(t)
	prefix := fmt.Sprintf("t%d:", prefixes.Add(1))
	grant := func(channels string) {
		t.Helper()
		if _, err := redistest.Do(srv.Addr(), "ACL", "SETUSER", "gw", "reset", "on", ">pw", "~*", channels, "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	grant("resetchannels")
	core, logs := observer.New(zap.WarnLevel)
	a, _ := manifestNode(t, Config{Addrs: []string{srv.Addr()}, Username: "gw", Password: "pw", Logger: zap.New(core)}, prefix)
	_, mb := manifestNode(t, Config{Addrs: []string{srv.Addr()}, Username: "gw", Password: "pw"}, prefix)
	calls, _ := watchCount(t, a)
	if v, err := mb.Version(context.Background(), "H1", 0, ""); err != nil || v != 1 {
		t.Fatalf("Version without the channel = %d, %v; want 1", v, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for logs.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(manifestWatchRefusedRetry + manifestWatchRetry) // one more refusal
	if got := logs.FilterMessageSnippet("the manifest watch was refused").Len(); got != 1 || logs.Len() != 1 {
		t.Fatalf("%d WARN lines, %d of them the refusal; want it once: %v", logs.Len(), got, logs.All())
	}
	// Each refusal a new connection: one each manifestWatchRefusedRetry,
	// not each second (helper-141).
	const window = 10 * time.Second
	before := connectionsReceived(t, srv.Addr())
	time.Sleep(window)
	if n := connectionsReceived(t, srv.Addr()) - before; n > 4 {
		t.Fatalf("%d connections in %s while refused, want at most 4 (the watch's and the INFO read's)", n, window)
	}
	if calls() != 0 {
		t.Fatalf("the refused watch was called %d times", calls())
	}
	grant("allchannels")
	waitCalls(t, calls, 1, "subscribing once the channel is granted")
}

// connectionsReceived is INFO stats total_connections_received, read on
// a connection of its own (counted).
func connectionsReceived(t *testing.T, addr string) int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "stats")
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(ln), "total_connections_received:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_connections_received in %q", info)
	return 0
}
