package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// MaxQueuedRecords bounds the Attribution-Records (and the other writes
// gathered with them: settles made beside the answer, attempt records,
// undone index writes) a Client holds queued for Redis (recordWriter):
// a Retain that finds it full waits for room
// at most the write and read timeouts, then is refused
// (store.ErrUnavailable, counted as a failed op record) and the record
// is not retained, as when Redis does not answer. At 1 KiB a record it
// is about 4 MiB; queued settles hold their answers besides, which the
// engine's SettleLater bounds (64 MiB).
const MaxQueuedRecords = 4096

// maxRecordBatch bounds the records one pipeline writes, so that a
// batch's write fits its timeouts on a slow link too.
const maxRecordBatch = 512

// RecordBatchDelay is how long the record writer lets records gather
// after the first one of a batch is queued before it writes them: under
// load one round trip then carries the records of many answers instead
// of one or two (the pipeline's write and read cost the node CPU per
// round trip, not per record). The batch goes at once when it reaches
// maxRecordBatch, when a reader on this node waits for it (INSPECT
// target=audit, chain_head), and when the Client closes. Another node
// reads a record at most this much later than without the delay.
const RecordBatchDelay = 2 * time.Millisecond

// errRecordQueueFull is the cause of a Retain refused at
// MaxQueuedRecords.
var errRecordQueueFull = errors.New("the queue of records waiting for Redis is full")

// queuedRecord is one record's writes, made at Retain, or, with call
// set, one script call (an attempt record's, attempts.AddLater; a
// settle's, recordWriter.call), or, with undo set, the undoing of a
// Cluster gate synthesis's owner and global index writes whose script
// did not mint (presenter.ResolvePair).
type queuedRecord struct {
	key       string // P{r:AUDIT-ID}
	raw       []byte // JSON of store.Record
	heads     string // P{a:AGENT}:h
	node      string
	head      string // "AUDIT-ID KEPT-MS"
	retention time.Duration
	call      *queuedCall
	undo      *queuedUndo // a gate synthesis's writes beside a script that did not mint
}

// queuedCall is a script call written with a batch: EVALSHA in the
// pipeline, run again with Script.Run when Redis did not know the
// script (NOSCRIPT: before it was loaded, or after a restart or SCRIPT
// FLUSH). With done set, its reply (val, err) is delivered by closing
// done, and the caller counts its own op; without, it is counted with
// the batch (op record), as an attempt record is.
type queuedCall struct {
	script *redis.Script
	keys   []string
	args   []any
	done   chan struct{}
	val    any
	err    error
}

// deliver sets q's reply and wakes its caller.
func (q *queuedCall) deliver(val any, err error) {
	if q.done != nil {
		q.val, q.err = val, err
		close(q.done)
	}
}

// recordWriter writes retained Attribution-Records to Redis off the
// answer path (issue 32): Retain queues the record's writes and returns;
// one goroutine per Client lets records gather for RecordBatchDelay,
// writes everything queued in one pipeline, then everything queued
// meanwhile in the next (group commit: one round trip per batch, a
// batch as large as the load makes it). Records
// retained by one Client reach Redis in the order they were retained
// (the engine retains a chain's records outside its chain lock, so two
// answers of one agent finishing together may be retained out of chain
// order, and the head kept be the one before the newest until the
// next). Get and Heads on the same
// Client first wait for the records queued before them (a node reads
// its own records); another node reads a record once its batch is
// written, normally within RecordBatchDelay and a round trip of the
// answer. A batch that
// fails is dropped and counted (op record), as a failed Retain was.
//
// A panic (a defect) while a batch is written is recovered with that
// batch (writeQueued): logged at ERROR with the batch's counts
// ("panic writing a batch of records to Redis"), its records counted as
// written for the readers waiting for them though they may or may not
// have reached Redis (never written twice), its settles not yet
// answered failed with store.ErrUnavailable (their callers hand them
// to the background retries, as any unanswered settle), and the next
// batch is written as always. A panic elsewhere in the loop is logged
// ("panic in the record writer's loop", at most once a minute while it
// recurs) and the loop starts again a second later (run). Records go
// on being written, and Close still drains and returns
// (TestPanicInRecordBatch, TestPanicInRecordLoop).
type recordWriter struct {
	c *Client
	// loopPanics throttles the lines of a loop that panics on every
	// pass (a defect): one a minute.
	loopPanics recovered.Throttle

	mu    sync.Mutex
	queue []queuedRecord
	// settles are queued calls whose caller waits (recordWriter.call):
	// each batch takes them first, so a settle does not wait behind a
	// queue full of records. They count towards MaxQueuedRecords.
	settles []queuedRecord
	queued  uint64        // records queued so far (settles not counted)
	written uint64        // records whose batch ended (written or dropped)
	batched uint64        // settles sent with a batch, counted before their callers wake (tests)
	settled uint64        // settles queued so far (tests)
	flushed chan struct{} // closed, and replaced, when written advances
	kick    chan struct{} // cap 1: the queue is not empty
	urgent  chan struct{} // cap 1: write the batch now, do not wait
	delay   time.Duration // Config.RecordBatchDelay; <= 0: no gathering
}

// startRecordWriter starts c's writer; it ends when c closes, after
// writing what is queued then.
func startRecordWriter(c *Client) *recordWriter {
	w := &recordWriter{c: c, flushed: make(chan struct{}), kick: make(chan struct{}, 1),
		urgent: make(chan struct{}, 1), delay: c.cfg.RecordBatchDelay, loopPanics: recovered.Throttle{Every: time.Minute}}
	if w.delay == 0 {
		w.delay = RecordBatchDelay
	}
	c.work.Add(1)
	go w.run()
	return w
}

// add queues q. When the queue is full it waits for the writer to make
// room, at most the write and read timeouts (what a record written by
// the answer itself would have waited), and then fails: Redis is not
// keeping up, and the refusal is counted as a failed op record. It also
// fails once the Client closed.
func (w *recordWriter) add(q queuedRecord) error {
	var deadline *time.Timer
	w.mu.Lock()
	for {
		select {
		case <-w.c.closing:
			w.mu.Unlock()
			return store.ErrUnavailable
		default:
		}
		if len(w.queue)+len(w.settles) < MaxQueuedRecords {
			break
		}
		if deadline == nil {
			deadline = time.NewTimer(w.c.cfg.WriteTimeout + w.c.cfg.ReadTimeout)
			defer deadline.Stop()
		}
		ch := w.flushed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			if q.call != nil && q.call.done != nil {
				// A settle: its caller counts it under its own op.
				return fmt.Errorf("%w: %w", store.ErrUnavailable, errRecordQueueFull)
			}
			return w.c.done(store.OpRecord, time.Now(), errRecordQueueFull)
		case <-w.c.closing:
		}
		w.mu.Lock()
	}
	if q.call != nil && q.call.done != nil {
		w.settles = append(w.settles, q)
		w.settled++
	} else {
		w.queue = append(w.queue, q)
		w.queued++
	}
	full := len(w.queue)+len(w.settles) >= maxRecordBatch
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	if full {
		w.hurry()
	}
	return nil
}

// Hurry has the record writer write its batch now instead of waiting
// RecordBatchDelay for more: for a caller that waits for a settle
// gathered into it (store.OffAnswerPath).
func (c *Client) Hurry() {
	if !c.cluster { // in Cluster mode settles do not go through the writer
		c.recs.hurry()
	}
}

// hurry ends the writer's current wait for more records (gather).
func (w *recordWriter) hurry() {
	select {
	case w.urgent <- struct{}{}:
	default:
	}
}

// run writes batches until the Client closes, then writes what is left
// once. After a panic the loop recovered it starts again
// loopRestartPause later, kicked, so what was queued when it panicked
// is written then without waiting for another record; a defect hit on
// every pass restarts it once a second, logged at most once a minute
// (loopPanics), instead of spinning. A panic while the
// Client closes (in the drain, or as it began) is not drained into
// again: what is still queued is dropped as after a failed batch
// (dropQueued), and Close returns.
func (w *recordWriter) run() {
	defer w.c.work.Done()
	for !w.loop() {
		select {
		case <-w.c.closing:
			w.dropQueued(errLoopPanicked)
			return
		default:
		}
		t := time.NewTimer(loopRestartPause)
		select {
		case <-t.C:
			// The panic may have taken the only kick for what is queued.
			select {
			case w.kick <- struct{}{}:
			default:
			}
		case <-w.c.closing:
			t.Stop() // the loop drains at once
		}
	}
}

// loopRestartPause is how long the record writer's loop waits before it
// starts again after a panic.
const loopRestartPause = time.Second

// errLoopPanicked is the error of what the record writer dropped after
// its loop panicked while the Client closed.
var errLoopPanicked = fmt.Errorf("%w: the record writer panicked while the client closed (a defect)", store.ErrUnavailable)

// testHookLoop, set by tests only (nil otherwise), runs each time the
// record writer's loop is woken (a kick, or the Client closing), before
// it writes: a fault injected outside a batch's own recovery.
var testHookLoop atomic.Pointer[func()]

// loop is run's loop: true once the Client closed and what was queued
// is written, false after a panic (recovered and logged).
func (w *recordWriter) loop() (closed bool) {
	defer w.loopPanics.IntoLog(nil, w.c.log, "panic in the record writer's loop; it starts again in a second (while the client closes, what is queued is dropped)")
	var timer *time.Timer
	if w.delay > 0 {
		timer = time.NewTimer(w.delay)
		timer.Stop()
	}
	for {
		select {
		case <-w.kick:
			w.loopHook()
			if timer != nil {
				w.gather(timer)
			}
			select {
			case <-w.c.closing: // drain, which stops at a failed batch
				w.drain()
				return true
			default:
			}
			_ = w.writeQueued() // a failed batch is counted (op record)
		case <-w.c.closing:
			w.loopHook()
			w.drain()
			return true
		}
	}
}

// loopHook runs testHookLoop, if set.
func (w *recordWriter) loopHook() {
	if h := testHookLoop.Load(); h != nil {
		(*h)()
	}
}

// gather waits RecordBatchDelay for more records to join the batch, or
// less when hurried or closing.
func (w *recordWriter) gather(timer *time.Timer) {
	w.mu.Lock()
	full := len(w.queue)+len(w.settles) >= maxRecordBatch
	w.mu.Unlock()
	if full {
		return
	}
	timer.Reset(w.delay)
	select {
	case <-timer.C:
	case <-w.urgent:
		timer.Stop()
	case <-w.c.closing:
		timer.Stop()
	}
}

// drain writes everything queued when the Client closes, a batch at a
// time; once a batch fails (a batch of settles only: Redis did not
// answer it), the rest is not tried (Redis is not answering: each try
// would wait the timeouts), its settles fail with store.ErrUnavailable
// and its records are counted as one failed op record. A batch that
// panicked (logged by writeQueued) does not stop it: Redis may answer.
func (w *recordWriter) drain() {
	for {
		var p *recovered.Panic
		if err := w.writeQueued(); err != nil && !errors.As(err, &p) {
			w.dropQueued(err)
			return
		}
		w.mu.Lock()
		left := len(w.queue) + len(w.settles)
		w.mu.Unlock()
		if left == 0 {
			return
		}
	}
}

// dropQueued ends everything still queued without writing it, err
// being why: its settles fail with store.ErrUnavailable, its records
// count as written for the readers waiting for them (they are not in
// Redis) and as one failed op record.
func (w *recordWriter) dropQueued(err error) {
	w.mu.Lock()
	n := len(w.queue)
	for _, q := range append(w.settles, w.queue...) {
		if q.call != nil {
			q.call.deliver(nil, store.ErrUnavailable)
		}
	}
	w.written += uint64(len(w.queue))
	w.queue, w.settles = nil, nil
	close(w.flushed)
	w.flushed = make(chan struct{})
	w.mu.Unlock()
	if n > 0 {
		_ = w.c.done(store.OpRecord, time.Now(), err)
	}
}

// writeQueued writes the records queued so far in one pipeline, at
// most maxRecordBatch of them, and returns the error of its records
// (counted as op record), else that of a command Redis did not answer
// (a settle, or a settle's NOSCRIPT rerun). A panic while the batch is
// written is recovered (abandonBatch) and returned as a
// *recovered.Panic.
func (w *recordWriter) writeQueued() (err error) {
	batch, settles := w.takeBatch()
	if len(batch) == 0 {
		return nil
	}
	ended := false // the batch's end is counted (written, flushed)
	defer func() {
		if v := recover(); v != nil {
			err = w.abandonBatch(v, batch, settles, ended)
		}
	}()
	if h := testHookWriteBatch.Load(); h != nil {
		(*h)(batch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.c.cfg.WriteTimeout+w.c.cfg.ReadTimeout)
	start := time.Now()
	var calls map[redis.Cmder]*queuedCall
	counted := false // the batch holds writes counted as op record
	newest := chainHeads(batch)
	cmds, _ := w.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range batch {
			counted = counted || q.call == nil || q.call.done == nil
			if q.call != nil {
				if calls == nil {
					calls = map[redis.Cmder]*queuedCall{}
				}
				calls[q.call.script.EvalSha(ctx, p, q.call.keys, q.call.args...)] = q.call
				continue
			}
			if q.undo != nil {
				q.undo.write(ctx, p)
				continue
			}
			p.Set(ctx, q.key, q.raw, q.retention)
			if newest[chain{heads: q.heads, node: q.node}] == i {
				p.HSet(ctx, q.heads, q.node, q.head)
			}
			if newest[chain{heads: q.heads, hash: true}] == i {
				p.PExpire(ctx, q.heads, q.retention)
			}
		}
		return nil
	})
	w.mu.Lock()
	w.batched += uint64(settles) // before settleBatch wakes their callers
	w.mu.Unlock()
	err, lost := settleBatch(ctx, w.c.rdb, cmds, calls)
	cancel()
	if counted {
		err = w.c.done(store.OpRecord, start, err)
	} else {
		err = nil // a settle's error is its caller's, who counts it
	}
	if err == nil && lost != nil {
		// Redis did not answer a command the records' error does not
		// show (a settle, or a settle's NOSCRIPT rerun): drain stops on
		// it.
		err = fmt.Errorf("%w: %w", store.ErrUnavailable, lost)
	}
	w.endBatch(len(batch) - settles)
	ended = true
	return err
}

// testHookWriteBatch, set by tests only (nil otherwise), runs before
// each batch is written: a fault injected into the record writer.
// Atomic: the test sets it while the writer runs.
var testHookWriteBatch atomic.Pointer[func([]queuedRecord)]

// takeBatch takes the next batch off the queues (settles first): at
// most maxRecordBatch items and maxBatchBytes, of which settles are
// settles. It kicks the writer again when more is left.
func (w *recordWriter) takeBatch() (batch []queuedRecord, settles int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	budget := maxBatchBytes
	batch = take(&w.settles, maxRecordBatch, &budget)
	settles = len(batch)
	if budget > 0 {
		batch = append(batch, take(&w.queue, maxRecordBatch-len(batch), &budget)...)
	}
	if len(w.queue)+len(w.settles) > 0 {
		select {
		case w.kick <- struct{}{}: // the rest is the next batch
		default:
		}
	}
	return batch, settles
}

// endBatch counts records of a batch as ended (written or dropped) and
// wakes the readers waiting for them.
func (w *recordWriter) endBatch(records int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written += uint64(records) // what readers wait for (queued)
	close(w.flushed)
	w.flushed = make(chan struct{})
}

// abandonBatch ends batch (settles of them settles), whose write
// panicked with v, so that nothing waits for it for ever: logged at
// ERROR, its settles not yet answered fail with store.ErrUnavailable,
// and, unless ended, its records count as ended (they may or may not
// have reached Redis; they are not written again). It returns the
// panic as a *recovered.Panic.
func (w *recordWriter) abandonBatch(v any, batch []queuedRecord, settles int, ended bool) error {
	recovered.Log(w.c.log, "panic writing a batch of records to Redis; its records may be missing from Redis (not written again), its unanswered settles fail as store-unavailable and are retried in the background; the writer goes on", v,
		zap.Int("records", len(batch)-settles), zap.Int("settles", settles))
	for _, q := range batch {
		if q.call == nil || q.call.done == nil {
			continue
		}
		select {
		case <-q.call.done: // answered before the panic
		default:
			q.call.deliver(nil, store.ErrUnavailable)
		}
	}
	if !ended {
		w.endBatch(len(batch) - settles)
	}
	return &recovered.Panic{Value: v}
}

// chain is an agent's heads hash and a node's field in it, or, with
// hash, the hash itself.
type chain struct {
	heads, node string
	hash        bool
}

// chainHeads gives, for each chain whose records batch holds, the index
// of its last record, and, for each heads hash, the index of the last
// record written in it: a batch sets each chain's head once, to the
// newest, and each hash's expiry once, after its last head (what
// setting them after each record leaves, in fewer commands).
func chainHeads(batch []queuedRecord) map[chain]int {
	var newest map[chain]int
	for i, q := range batch {
		if q.call != nil || q.undo != nil {
			continue
		}
		if newest == nil {
			newest = map[chain]int{}
		}
		newest[chain{heads: q.heads, node: q.node}] = i
		newest[chain{heads: q.heads, hash: true}] = i
	}
	return newest
}

// unanswered reports whether err is not a reply of Redis (a timeout, a
// closed connection).
func unanswered(err error) bool {
	if err == nil {
		return false // before re, which escapes: no allocation per reply
	}
	var re redis.Error
	return !errors.As(err, &re)
}

// maxBatchBytes bounds the bytes one batch writes (records' JSON and
// settles' stored answers), so that a batch of large answers fits its
// timeouts too; a batch holds at least one item.
const maxBatchBytes = 1 << 20

// size is about the bytes q writes.
func (q queuedRecord) size() int {
	n := len(q.raw) + len(q.key) + len(q.head)
	if q.call != nil {
		for _, a := range q.call.args {
			switch v := a.(type) {
			case []byte:
				n += len(v)
			case string:
				n += len(v)
			default:
				n += 8
			}
		}
	}
	return n
}

// take removes and returns the first items of *q: at most n, and no
// more than *budget bytes past the first (*budget is decreased by what
// it takes).
func take(q *[]queuedRecord, n int, budget *int) []queuedRecord {
	k := 0
	for k < len(*q) && k < n {
		b := (*q)[k].size()
		if k > 0 && b > *budget {
			break
		}
		*budget -= b
		k++
	}
	if k == len(*q) {
		out := *q
		*q = nil
		return out
	}
	out := (*q)[:k:k]
	*q = slices.Clone((*q)[k:])
	return out
}

// settleBatch runs again the calls Redis did not know (NOSCRIPT), with
// Script.Run, which loads the script, and delivers each call's reply. It
// returns the first error among the batch's writes counted as op record
// (its records, undos and calls without a waiter), and lost, the first
// error of any command, a rerun included, that Redis did not answer
// (unanswered), each nil if none.
func settleBatch(ctx context.Context, rdb redis.Scripter, cmds []redis.Cmder, calls map[redis.Cmder]*queuedCall) (first, lost error) {
	for _, cmd := range cmds {
		val, err := any(nil), cmd.Err()
		q := calls[cmd]
		if q != nil {
			if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				cmd = q.script.Run(ctx, rdb, q.keys, q.args...)
				err = cmd.Err()
			}
			if c, ok := cmd.(*redis.Cmd); ok {
				val = c.Val()
			}
			q.deliver(val, err)
		}
		if lost == nil && unanswered(err) {
			lost = err
		}
		if q != nil && q.done != nil {
			continue
		}
		if err != nil && !errors.Is(err, redis.Nil) && first == nil {
			first = err
		}
	}
	return first, lost
}

// run runs script: gathered into the record writer's next batch when ctx
// is marked store.OffAnswerPath (recordWriter.call) outside Cluster
// mode, else at once (Script.Run). The reply is a *redis.Cmd either way.
func (c *Client) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if !store.IsOffAnswerPath(ctx) || c.cluster {
		// In Cluster mode a batch spans nodes, and go-redis's Cluster
		// pipeline, once one node stalls past the deadline, marks every
		// command failed: a settle must not wait for, or fail with,
		// another node.
		return script.Run(ctx, c.rdb, keys, args...)
	}
	cmd := redis.NewCmd(ctx)
	val, err := c.recs.call(ctx, script, keys, args...)
	if err != nil {
		cmd.SetErr(err)
	} else {
		cmd.SetVal(val)
	}
	return cmd
}

// call gathers a script call into the next batch (a settle off the
// answer path: store.OffAnswerPath) and returns its reply once that
// batch is written: the write and read syscalls of one round trip
// shared by every call and record of the batch. It fails
// (store.ErrUnavailable) when the queue stays full for the timeouts or
// the Client closed, without running the script, and returns ctx's
// error if ctx ends first (the script may still run).
func (w *recordWriter) call(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	q := &queuedCall{script: script, keys: keys, args: args, done: make(chan struct{})}
	if err := w.add(queuedRecord{call: q}); err != nil {
		return nil, err
	}
	select {
	case <-q.done:
		return q.val, q.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// wait returns once every record queued before the call is written or
// dropped, or ctx ends (its error).
func (w *recordWriter) wait(ctx context.Context) error {
	w.mu.Lock()
	target := w.queued
	if w.written < target {
		w.hurry()
	}
	for w.written < target {
		ch := w.flushed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	return nil
}
