package mcpdoor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"

	"go.uber.org/zap"
)

// taskPoller polls the store for every task a door runs, once each
// TaskPollInterval, in one store.Tasks.Poll of all their ids (a call per
// store.MaxTaskPoll, the calls in parallel, each bounded by
// taskPollTimeout): on Redis one pipeline a tick, however many tasks
// run, where each task polled on its own before (a round trip each,
// four a second). A task whose poll failed reads its Err; a task's
// renewal does not wait for its poll (follow). Its goroutine runs while
// a task is watched and ends when none is, so it outlives the door's
// configuration as its tasks do. The zero value is ready to use.
type taskPoller struct {
	mu      sync.Mutex
	tasks   store.Tasks // the store of the tasks watched
	log     *zap.Logger
	watched map[string]chan store.TaskPoll // by task id
	running bool                           // the goroutine runs
}

// taskPollTimeout bounds one tick's poll: a store (or, on Cluster, a
// node) that answers later fails the tasks it holds for that tick, and
// the others are answered; while a Cluster node stalls, the tasks on
// the healthy ones read their polls this late (a cancel request seen
// within about 1 s rather than 250 ms).
const taskPollTimeout = time.Second

// watch starts polling task id in tasks: each tick's poll arrives on
// the channel (the latest one only, when the task has not read the one
// before). The func stops it. Task ids are unique (128 random bits): a
// second watch of an id replaces the first.
func (p *taskPoller) watch(tasks store.Tasks, log *zap.Logger, id string) (<-chan store.TaskPoll, func()) {
	ch := make(chan store.TaskPoll, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watched == nil {
		p.watched = map[string]chan store.TaskPoll{}
	}
	p.tasks, p.log = tasks, log
	p.watched[id] = ch
	if !p.running {
		p.running = true
		go p.run()
	}
	return ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.watched[id] == ch {
			delete(p.watched, id)
		}
	}
}

// run polls the watched tasks each TaskPollInterval until none is left.
func (p *taskPoller) run() {
	tick := time.NewTicker(TaskPollInterval)
	defer tick.Stop()
	var ids []string
	var chans []chan store.TaskPoll
	for range tick.C {
		p.mu.Lock()
		if len(p.watched) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		ids, chans = ids[:0], chans[:0]
		for id, ch := range p.watched {
			ids, chans = append(ids, id), append(chans, ch)
		}
		tasks, log := p.tasks, p.log
		p.mu.Unlock()
		var wg sync.WaitGroup
		for at := 0; at < len(ids); at += store.MaxTaskPoll {
			end := min(at+store.MaxTaskPoll, len(ids))
			wg.Go(func() {
				for i, r := range pollOnce(tasks, log, ids[at:end]) {
					deliver(chans[at+i], r)
				}
			})
		}
		wg.Wait()
	}
}

// pollOnce is tasks.Poll(ids), within taskPollTimeout: one poll per id.
// A failed call, or a panic in it (a defect in the store: logged at
// ERROR), is every id's Err for this tick, not the end of the polling.
func pollOnce(tasks store.Tasks, log *zap.Logger, ids []string) (polls []store.TaskPoll) {
	defer func() {
		if v := recover(); v != nil {
			recovered.Log(log, "panic polling MCP tasks", v, zap.Int("tasks", len(ids)))
			polls = failedPolls(len(ids), fmt.Errorf("panic polling MCP tasks: %v", v))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), taskPollTimeout)
	defer cancel()
	polls, err := tasks.Poll(ctx, ids)
	if err == nil && len(polls) != len(ids) {
		err = fmt.Errorf("the store answered %d polls for %d tasks", len(polls), len(ids))
	}
	if err != nil {
		return failedPolls(len(ids), err)
	}
	return polls
}

// failedPolls is n polls that failed with err.
func failedPolls(n int, err error) []store.TaskPoll {
	out := make([]store.TaskPoll, n)
	for i := range out {
		out[i].Err = err
	}
	return out
}

// deliver puts r on ch, replacing a poll the task has not read.
func deliver(ch chan store.TaskPoll, r store.TaskPoll) {
	for {
		select {
		case ch <- r:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
