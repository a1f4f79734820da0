package caddymodule

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redisstore"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestNodeIDConflict: two live processes with one node_id on one Redis
// both learn it (a WARN each, caddy_rcns_store_node_id_conflict 1); a
// process that meets the stale hold of a predecessor that died does
// not; the clash clears once the other is gone.
func TestNodeIDConflict(t *testing.T) {
	srv := redistest.StartServer(t)
	up, _ := countingUpstream(t)
	type proc struct {
		p    *pooledRedis
		h    *Handler
		logs *observer.ObservedLogs
	}
	start := func(instance, nodeID string) proc {
		t.Helper()
		core, logs := observer.New(zapcore.InfoLevel)
		p, err := newPooledRedis(context.Background(), redisstore.Config{Addrs: []string{srv.Addr()}, KeyPrefix: "t:"}, true, zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Destruct() })
		p.nodeMu.Lock()
		p.instance = instance
		p.nodeMu.Unlock()
		g := &testGateway{h: benchHandlerWith(t, up, false, "", "", func(h *Handler) { h.NodeID = nodeID })}
		p.join(g.h.eng)
		return proc{p, g.h, logs}
	}
	check := func(ps ...proc) {
		for _, x := range ps {
			time.Sleep(2 * time.Millisecond) // a refresh carries a new time in ms
			x.p.checkNodeIDs(context.Background())
		}
	}
	warned := func(x proc) int {
		return x.logs.FilterMessageSnippet("another live gateway process uses this node_id").Len()
	}
	conflict := func(x proc) float64 { return metricValue(t, x.h, "caddy_rcns_store_node_id_conflict") }

	a, b := start("inst-a", "n1"), start("inst-b", "n1")
	check(a, b) // a holds; b sees a's hold once: not yet known alive
	if warned(a)+warned(b) != 0 || conflict(b) != 0 {
		t.Fatal("a clash reported before the holder was seen refreshing")
	}
	check(a, b) // a refreshed: b knows a is alive
	if warned(b) != 1 || conflict(b) != 1 {
		t.Fatalf("b: %d warnings, gauge %v; want 1 and 1", warned(b), conflict(b))
	}
	check(b, a) // b reports; a reads the marker
	if warned(a) != 1 || conflict(a) != 1 {
		t.Fatalf("a: %d warnings, gauge %v; want 1 and 1", warned(a), conflict(a))
	}
	check(a, b)
	if warned(a) != 1 || warned(b) != 1 {
		t.Fatalf("the clash was logged %d and %d times, want once each", warned(a), warned(b))
	}

	// A predecessor that died left its hold: it never refreshes.
	if _, _, err := a.p.client.HoldNodeID(context.Background(), "n2", "dead", time.Minute, false); err != nil {
		t.Fatal(err)
	}
	c := start("inst-c", "n2")
	check(c, c, c)
	if warned(c) != 0 || conflict(c) != 0 {
		t.Fatalf("a stale hold reported as a live clash: %d warnings, gauge %v", warned(c), conflict(c))
	}

	// a goes away (its hold expires): b takes the id and the clash clears.
	if _, err := redistest.Do(srv.Addr(), "DEL", "t:{n:n1}:holder", "t:{n:n1}:conflict"); err != nil {
		t.Fatal(err)
	}
	check(b)
	if conflict(b) != 0 || b.logs.FilterMessageSnippet("no longer used by another process").Len() != 1 {
		t.Fatalf("after a left: gauge %v, logs %v", conflict(b), b.logs.All())
	}
}
