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
// store.MaxTaskPoll): on Redis one pipeline a tick, however many tasks
// run, where each task polled on its own before (a round trip each,
// four a second). Its goroutine runs while a task is watched and ends
// when none is, so it outlives the door's configuration as its tasks
// do. The zero value is ready to use.
type taskPoller struct {
	mu      sync.Mutex
	tasks   store.Tasks // the store of the tasks watched
	log     *zap.Logger
	watched map[string]chan taskPollResult // by task id
	running bool                           // the goroutine runs
}

// taskPollResult is one tick's poll of one task: err when the store did
// not answer (the task's node then tries its renewal all the same).
type taskPollResult struct {
	poll store.TaskPoll
	err  error
}

// watch starts polling task id in tasks: each tick's result arrives on
// the channel (the latest one only, when the task has not read the one
// before). The func stops it.
func (p *taskPoller) watch(tasks store.Tasks, log *zap.Logger, id string) (<-chan taskPollResult, func()) {
	ch := make(chan taskPollResult, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watched == nil {
		p.watched = map[string]chan taskPollResult{}
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
	var chans []chan taskPollResult
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
		for at := 0; at < len(ids); at += store.MaxTaskPoll {
			end := min(at+store.MaxTaskPoll, len(ids))
			polls, err := pollOnce(tasks, log, ids[at:end])
			for i, ch := range chans[at:end] {
				r := taskPollResult{err: err}
				if err == nil {
					r.poll = polls[i]
				}
				deliver(ch, r)
			}
		}
	}
}

// pollOnce is tasks.Poll(ids); a panic in it (a defect in the store) is
// logged at ERROR and is this tick's error, not the end of every task's
// polling.
func pollOnce(tasks store.Tasks, log *zap.Logger, ids []string) (polls []store.TaskPoll, err error) {
	defer func() {
		if v := recover(); v != nil {
			recovered.Log(log, "panic polling MCP tasks", v, zap.Int("tasks", len(ids)))
			polls, err = nil, fmt.Errorf("panic polling MCP tasks: %v", v)
		}
	}()
	polls, err = tasks.Poll(context.Background(), ids)
	if err == nil && len(polls) != len(ids) {
		err = fmt.Errorf("the store answered %d polls for %d tasks", len(polls), len(ids))
	}
	return polls, err
}

// deliver puts r on ch, replacing a result the task has not read.
func deliver(ch chan taskPollResult, r taskPollResult) {
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
