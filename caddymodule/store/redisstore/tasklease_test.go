package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/storetest"
)

// TestTaskLeaseLua: lease_ms, the script's reading of a stored task's
// lease_until, gives Go's UnixMilli for times as Go encodes them (every
// fraction length, leap days, century rules, month and year ends), and
// nil for anything else.
func TestTaskLeaseLua(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	script := redis.NewScript(taskLeaseLua + "return lease_ms(ARGV[1])")
	ctx := context.Background()
	for _, tm := range []time.Time{
		time.Now().UTC(),
		time.Date(2026, 12, 7, 0, 16, 45, 261234567, time.UTC),
		time.Date(2026, 12, 7, 0, 16, 45, 0, time.UTC),
		time.Date(2026, 12, 7, 0, 16, 45, 500000000, time.UTC),
		time.Date(2026, 12, 7, 0, 16, 45, 999999999, time.UTC),
		time.Date(2024, 2, 29, 23, 59, 59, 10000000, time.UTC),
		time.Date(2024, 3, 1, 0, 0, 0, 1000000, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 0, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999000000, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2038, 1, 19, 3, 14, 8, 0, time.UTC),
	} {
		raw, _ := json.Marshal(tm)
		var s string
		_ = json.Unmarshal(raw, &s)
		got, err := script.Run(ctx, rdb, nil, s).Int64()
		if err != nil || got != tm.UnixMilli() {
			t.Errorf("lease_ms(%q) = %d, %v; want %d", s, got, err, tm.UnixMilli())
		}
	}
	for _, bad := range []string{"", "2026-12-07", "2026-12-07T00:16:45+01:00", "2026-12-07 00:16:45Z", "x2026-12-07T00:16:45Z", "2026-12-07T00:16:45.Zx"} {
		if v, err := script.Run(ctx, rdb, nil, bad).Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("lease_ms(%q) = %v, %v; want nil", bad, v, err)
		}
	}
}

// TestTaskWritesAtMaxmemory: at Redis's maxmemory (noeviction: writes
// refused) a running task's renewal and end, and a cancel request, are
// still written (allow-oom: an answer already given, a lease, a request
// that stops work), while a new task is refused (store.ErrUnavailable).
func TestTaskWritesAtMaxmemory(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	a, _ := harness(Config{Addrs: []string{srv.Addr()}}, true).New(t, storetest.Config{})
	ctx := context.Background()
	now := time.Now().UTC()
	rec := store.Task{ID: "full", AgentID: "a", NodeID: "n1", Tool: "t", Status: "working", CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}
	if err := a.Tasks.Put(ctx, rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	other := rec
	other.ID = "new"
	if err := a.Tasks.Put(ctx, other, time.Hour); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a new task at maxmemory: %v, want store.ErrUnavailable", err)
	}
	rec.LeaseUntil = now.Add(2 * time.Minute)
	if err := a.Tasks.Update(ctx, rec, time.Hour, now.Add(time.Minute), time.Second); err != nil {
		t.Errorf("a renewal at maxmemory: %v", err)
	}
	if err := a.Tasks.RequestCancel(ctx, rec.ID, time.Hour); err != nil {
		t.Errorf("a cancel request at maxmemory: %v", err)
	}
	if p, err := a.Tasks.Poll(ctx, []string{rec.ID}); err != nil || len(p) != 1 || !p[0].CancelRequested || !p[0].Stored {
		t.Errorf("the task's poll at maxmemory: %+v %v, want its cancel request and record", p, err)
	}
	end := rec
	end.Status, end.LeaseUntil = "cancelled", time.Time{}
	if err := a.Tasks.Update(ctx, end, time.Hour, now.Add(time.Minute), time.Second); err != nil {
		t.Errorf("an end at maxmemory: %v", err)
	}
	if got, ok, err := a.Tasks.Get(ctx, rec.ID); err != nil || !ok || got.Status != "cancelled" {
		t.Errorf("the task: %+v %v %v, want cancelled", got, ok, err)
	}
}
