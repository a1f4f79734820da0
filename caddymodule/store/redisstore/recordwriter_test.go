package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestRecordWriter: records retained off the answer path (recordWriter)
// reach Redis in the order they were retained (the chain's head is the
// newest), in no more round trips than records; a node reads its own at
// once and another node once they are written; a stalled Redis bounds
// the queue at MaxQueuedRecords (the next Retain is refused, nothing
// blocks) and loses nothing queued once it answers again; Close writes
// what is queued.
func TestRecordWriter(t *testing.T) {
	srv := redistest.StartServer(t)
	cnt := &counter{ops: map[store.Op]int{}}
	cfg := Config{Addrs: []string{srv.Addr()}, Observer: cnt, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second}
	c, set := newSet(t, cfg)
	_, other := newSet(t, Config{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("%064d", i) }
	cnt.take()

	const n = 300
	for i := 1; i <= n; i++ {
		if err := set.Records.Retain(ctx, store.Record{AuditID: id(i), AgentID: "a", NodeID: "n1", Compact: "e30.x."}); err != nil {
			t.Fatalf("Retain %d: %v", i, err)
		}
	}
	heads, err := set.Records.Heads(ctx, "a") // waits for its own
	if err != nil || len(heads) != 1 || heads[0].AuditID != id(n) {
		t.Fatalf("head after %d records: %+v %v, want the last", n, heads, err)
	}
	if trips := cnt.take()[store.OpRecord]; trips < 2 || trips > n+1 {
		t.Fatalf("%d records in %d round trips (and the read)", n, trips)
	}
	for _, i := range []int{1, n / 2, n} {
		if r, ok, err := other.Records.Get(ctx, id(i)); err != nil || !ok || r.AuditID != id(i) {
			t.Fatalf("another node reading record %d: %+v %v %v", i, r, ok, err)
		}
	}

	// Stalled: the writer holds one batch; the queue fills to its bound
	// and the next Retain is refused at once.
	srv.Pause()
	if err := set.Records.Retain(ctx, store.Record{AuditID: id(n + 1), AgentID: "b", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		c.recs.mu.Lock()
		inFlight := len(c.recs.queue) == 0
		c.recs.mu.Unlock()
		if inFlight {
			break
		}
		if time.Now().After(deadline) {
			srv.Resume()
			t.Fatal("the writer did not take the first batch")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	for i := 0; i < MaxQueuedRecords; i++ {
		if err := set.Records.Retain(ctx, store.Record{AuditID: id(n + 2 + i), AgentID: "b", NodeID: "n1"}); err != nil {
			srv.Resume()
			t.Fatalf("Retain %d of the bound: %v", i, err)
		}
	}
	err = set.Records.Retain(ctx, store.Record{AuditID: id(0), AgentID: "b", NodeID: "n1"})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "queue") {
		srv.Resume()
		t.Fatalf("Retain past the bound: %v, want ErrUnavailable naming the queue", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("filling the queue took %v: Retain blocked", d)
	}
	srv.Resume()
	// The stalled batch may time out (dropped, counted); what was queued
	// behind it is written once Redis answers.
	last := id(n + 1 + MaxQueuedRecords)
	if _, err := set.Records.Heads(ctx, "b"); err != nil {
		t.Fatalf("Heads after the stall: %v", err)
	}
	if r, ok, err := other.Records.Get(ctx, last); err != nil || !ok || r.AuditID != last {
		t.Fatalf("the last queued record after the stall: %+v %v %v", r, ok, err)
	}

	// Close writes what is queued.
	c2, set2 := newSet(t, Config{Addrs: []string{srv.Addr()}})
	if err := set2.Records.Retain(ctx, store.Record{AuditID: id(99999), AgentID: "c", NodeID: "n2"}); err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	if r, ok, err := other.Records.Get(ctx, id(99999)); err != nil || !ok {
		t.Fatalf("a record queued before Close: %+v %v %v", r, ok, err)
	}
	if err := set2.Records.Retain(ctx, store.Record{AuditID: id(99998), AgentID: "c", NodeID: "n2"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Retain after Close: %v, want ErrUnavailable", err)
	}
}
