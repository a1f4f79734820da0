package mcpdoor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// pollCounter is a store.Tasks whose Poll counts its calls and the ids
// they carry, answers every task stored and none cancelled except those
// in cancel, and panics once when told to.
type pollCounter struct {
	store.Tasks
	mu     sync.Mutex
	calls  int
	sizes  []int
	cancel map[string]bool
	panics int
}

func (c *pollCounter) Poll(_ context.Context, ids []string) ([]store.TaskPoll, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.panics > 0 {
		c.panics--
		panic("injected")
	}
	c.calls++
	c.sizes = append(c.sizes, len(ids))
	out := make([]store.TaskPoll, len(ids))
	for i, id := range ids {
		out[i] = store.TaskPoll{Stored: true, CancelRequested: c.cancel[id]}
	}
	return out, nil
}

// TestTaskPollerOneCallATick: the tasks a door runs are polled together,
// one store call a tick for all of them (on Redis one pipeline, where
// each task made its own round trip before), in calls of at most
// store.MaxTaskPoll ids; each task reads its own answer; a panic in
// the store is logged and is that tick's error, the polling goes on;
// the goroutine ends once no task is watched.
func TestTaskPollerOneCallATick(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	c := &pollCounter{cancel: map[string]bool{"t-7": true}, panics: 1}
	var p taskPoller
	n := store.MaxTaskPoll + 6
	chans := make([]<-chan store.TaskPoll, n)
	stops := make([]func(), n)
	for i := range n {
		chans[i], stops[i] = p.watch(c, zap.New(core), fmt.Sprintf("t-%d", i))
	}
	// Every task reads an answered poll (after the first tick's panic):
	// task 7 its cancel request, the others none.
	deadline := time.After(10 * time.Second)
	for i, ch := range chans {
		for {
			var r store.TaskPoll
			select {
			case r = <-ch:
			case <-deadline:
				t.Fatalf("task %d read no answered poll", i)
			}
			if r.Err != nil {
				continue // the tick whose call panicked
			}
			if !r.Stored || r.CancelRequested != (i == 7) {
				t.Errorf("task %d read %+v", i, r)
			}
			break
		}
	}
	if logs.FilterMessage("panic polling MCP tasks").Len() != 1 {
		t.Errorf("the store's panic was not logged once: %v", logs.All())
	}
	for _, stop := range stops {
		stop()
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		running := p.running
		p.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the poller still runs with no task watched")
		}
	}
	// One call a chunk a tick (the two chunks in parallel; which tasks
	// fall in which chunk changes from tick to tick), counted once the
	// poller has ended, so no tick is half counted: the call that
	// panicked is not counted, so the calls carried MaxTaskPoll and 6
	// ids a tick, one fewer of one of them, never one per task.
	c.mu.Lock()
	sizes := append([]int(nil), c.sizes...)
	c.mu.Unlock()
	big, small := 0, 0
	for _, s := range sizes {
		switch s {
		case store.MaxTaskPoll:
			big++
		case 6:
			small++
		default:
			t.Fatalf("a Poll call carried %d ids (all: %v), want %d or 6", s, sizes, store.MaxTaskPoll)
		}
	}
	if big == 0 || small == 0 || (big-small != 1 && small-big != 1) {
		t.Errorf("Poll calls carried %v ids: want one of %d and one of 6 a tick", sizes, store.MaxTaskPoll)
	}
}
