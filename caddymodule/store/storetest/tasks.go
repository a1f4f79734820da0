package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// The MCP task store's part of the suite (store.Tasks): what one node
// writes another reads, and Update's guards on a running task's writes.

// testTaskUpdates: Update writes over a working task, or one the store
// lost, up to its notAfter and up to the margin before the stored
// lease; a renewal older than the stored one writes nothing (nil);
// late, past the stored lease (a record restored from an older
// snapshot), with a lease of its own already over, or over an ended
// task, it writes nothing (ErrTaskLate). The Redis store judges by
// Redis's clock, the memory store by its own: a minute either way is
// beyond any clock's disagreement.
func testTaskUpdates(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now})
	const margin = time.Second
	id := strings.Repeat("8", 32)
	now := clock.Now().UTC()
	working := func(msg string, lease time.Duration) store.Task {
		return store.Task{ID: id, AgentID: agentA, NodeID: "n1", Tool: "book", Status: "working", StatusMessage: msg,
			CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(lease)}
	}
	inTime, late := now.Add(time.Minute), now.Add(-time.Minute)
	read := func(what string) store.Task {
		t.Helper()
		got, ok, err := b.Tasks.Get(ctx, id)
		if err != nil || !ok {
			t.Fatalf("%s: Get = %v %v", what, ok, err)
		}
		return got
	}
	for _, c := range []struct {
		what     string
		rec      store.Task
		notAfter time.Time
		late     bool   // ErrTaskLate
		stored   string // the stored StatusMessage after it
	}{
		{"a task the store does not hold (lost)", working("created", time.Minute), inTime, false, "created"},
		{"a renewal", working("renewed", 2*time.Minute), inTime, false, "renewed"},
		{"a renewal older than the stored one", working("stale", 90*time.Second), inTime, false, "renewed"},
		{"a write after its notAfter", working("late", 3*time.Minute), late, true, "renewed"},
		{"a renewal whose own lease is over", working("over", -time.Minute), inTime, true, "renewed"},
	} {
		err := a.Tasks.Update(ctx, c.rec, time.Hour, c.notAfter, margin)
		if errors.Is(err, store.ErrTaskLate) != c.late || (err != nil && !c.late) {
			t.Fatalf("%s: Update = %v, want late %v", c.what, err, c.late)
		}
		if got := read(c.what).StatusMessage; got != c.stored {
			t.Fatalf("%s: stored %q, want %q", c.what, got, c.stored)
		}
	}
	// The stored record's lease ends within the margin (a record
	// restored from a snapshot older than the last renewal): readers
	// may count it failed, so nothing is written over it.
	if err := a.Tasks.Put(ctx, working("restored", margin/2), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := a.Tasks.Update(ctx, working("after the restore", 3*time.Minute), time.Hour, inTime, margin); !errors.Is(err, store.ErrTaskLate) || read("restored").StatusMessage != "restored" {
		t.Fatalf("Update over a stored lease that has ended: %v, want ErrTaskLate and nothing written", err)
	}
	if err := a.Tasks.Put(ctx, working("live", 2*time.Minute), time.Hour); err != nil {
		t.Fatal(err)
	}
	end := working("completed", 0)
	end.Status, end.LeaseUntil, end.Result = "completed", time.Time{}, []byte(`{"content":[]}`)
	if err := a.Tasks.Update(ctx, end, time.Hour, inTime, margin); err != nil || read("end").Status != "completed" {
		t.Fatalf("Update writing the end: %v", err)
	}
	if err := a.Tasks.Update(ctx, working("renewal after the end", 3*time.Minute), time.Hour, inTime, margin); !errors.Is(err, store.ErrTaskLate) {
		t.Fatalf("Update over an ended task: %v, want ErrTaskLate", err)
	}
	if got := read("after the refused renewal"); got.Status != "completed" || string(got.Result) != `{"content":[]}` {
		t.Fatalf("the ended task was overwritten: %+v", got)
	}
}

// testTasks: a task written through one store is read through the
// other, replaced by a later Put, gone after its ttl (Poll says so); a
// cancel request made through one is seen through the other.
func testTasks(t *testing.T, h Harness) {
	clock := NewClock()
	a, b := h.New(t, Config{Now: clock.Now})
	id := strings.Repeat("7", 32)
	if _, ok, err := b.Tasks.Get(ctx, id); ok || err != nil {
		t.Fatalf("unknown task: found %v, err %v", ok, err)
	}
	if p, err := poll1(a.Tasks, id); p.Stored || p.CancelRequested || err != nil {
		t.Fatalf("an unknown task's poll: %+v %v, want neither stored nor cancelled", p, err)
	}
	now := clock.Now().UTC()
	rec := store.Task{ID: id, AgentID: agentA, NodeID: "n1", Tool: "book", Status: "working", CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}
	if err := a.Tasks.Put(ctx, rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	got, ok, err := b.Tasks.Get(ctx, id)
	if err != nil || !ok || got.Status != "working" || got.AgentID != agentA || !got.LeaseUntil.Equal(rec.LeaseUntil) {
		t.Fatalf("Get = %+v %v %v", got, ok, err)
	}
	if p, err := poll1(b.Tasks, id); !p.Stored || p.CancelRequested || err != nil {
		t.Fatalf("poll before any cancel request: %+v %v, want stored, no cancel", p, err)
	}
	if err := b.Tasks.RequestCancel(ctx, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	if p, err := poll1(a.Tasks, id); !p.Stored || !p.CancelRequested || err != nil {
		t.Fatalf("cancel request not seen through the other store: %+v %v", p, err)
	}
	rec.Status, rec.Result, rec.Steps = "completed", []byte(`{"content":[]}`), []byte(`[{"name":"s","state":"succeeded"}]`)
	if err := a.Tasks.Put(ctx, rec, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, ok, _ = b.Tasks.Get(ctx, id)
	if !ok || got.Status != "completed" || string(got.Result) != `{"content":[]}` || string(got.Steps) != `[{"name":"s","state":"succeeded"}]` {
		t.Fatalf("replaced task = %+v", got)
	}
	clock.Advance(time.Second) // the memory store's clock; Redis expires on its own
	for i := 0; i < 200; i++ {
		if _, ok, _ = b.Tasks.Get(ctx, id); !ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ok {
		t.Fatal("task kept past its ttl")
	}
	if p, err := poll1(a.Tasks, id); p.Stored || !p.CancelRequested || err != nil {
		t.Fatalf("poll after the task's ttl: %+v %v, want not stored, its cancel request kept", p, err)
	}
}

// poll1 is Tasks.Poll of one id.
func poll1(tasks store.Tasks, id string) (store.TaskPoll, error) {
	ps, err := tasks.Poll(ctx, []string{id})
	if err != nil {
		return store.TaskPoll{}, err
	}
	if len(ps) != 1 {
		return store.TaskPoll{}, fmt.Errorf("a Poll of one id answered %d polls", len(ps))
	}
	return ps[0], nil
}

// testTaskPolls: one Poll answers for many tasks, in the order asked
// (a stored one, an unknown one, one with a cancel request, the same id
// twice), through the other store; no ids is no polls; more than
// MaxTaskPoll is refused, not cut.
func testTaskPolls(t *testing.T, h Harness) {
	a, b := h.New(t, Config{})
	now := time.Now().UTC()
	var ids []string
	for i := range 300 {
		id := fmt.Sprintf("%032x", 0xa000+i)
		ids = append(ids, id)
		if i%3 == 0 {
			continue // never stored
		}
		if err := a.Tasks.Put(ctx, store.Task{ID: id, AgentID: agentA, NodeID: "n1", Tool: "book", Status: store.TaskStatusWorking,
			CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			if err := b.Tasks.RequestCancel(ctx, id, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids = append(ids, ids[2])
	ps, err := b.Tasks.Poll(ctx, ids)
	if err != nil || len(ps) != len(ids) {
		t.Fatalf("Poll of %d ids: %d polls, %v", len(ids), len(ps), err)
	}
	for i, p := range ps {
		j := i % 300
		if i == 300 {
			j = 2
		}
		if want := (store.TaskPoll{Stored: j%3 != 0, CancelRequested: j%3 == 2}); p != want {
			t.Errorf("poll %d (task %d): %+v, want %+v", i, j, p, want)
		}
	}
	if ps, err := a.Tasks.Poll(ctx, nil); err != nil || len(ps) != 0 {
		t.Errorf("Poll of no ids: %v %v", ps, err)
	}
	if _, err := a.Tasks.Poll(ctx, make([]string, store.MaxTaskPoll+1)); err == nil {
		t.Errorf("Poll of %d ids: no error", store.MaxTaskPoll+1)
	}
}
