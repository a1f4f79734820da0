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

	"github.com/redis/go-redis/v9"
)

// MaxQueuedRecords bounds the Attribution-Records (and the other writes
// gathered with them: settles made beside the answer, answer-path
// scripts grouped by Client.runNow, attempt records, undone index
// writes) a Client holds queued for Redis (recordWriter):
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
// target=audit, chain_head), when an answer-path script joins it
// (Client.runNow), and when the Client closes. Another node
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
	// For answer-path calls (callNow): taken (a batch holds it), set
	// under recordWriter.mu, and the caller's deadline, past which a
	// batch no longer sends it.
	taken    bool
	deadline time.Time
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
// The same batches carry script calls whose callers wait for their
// reply: settles made beside the answer (call), and answer-path scripts
// made while another is under way (Client.runNow), which send
// their batch at once.
type recordWriter struct {
	c *Client

	mu    sync.Mutex
	queue []queuedRecord
	// settles are queued calls whose caller waits (recordWriter.call):
	// each batch takes them first, so a settle does not wait behind a
	// queue full of records. They count towards MaxQueuedRecords.
	settles []queuedRecord
	// calls are the answer path's grouped script calls (callNow): each
	// batch takes them before the settles. They count towards
	// MaxQueuedRecords too.
	calls   []queuedRecord
	queued  uint64        // records queued so far (settles not counted)
	written uint64        // records whose batch ended (written or dropped)
	batched uint64        // settles sent with a batch, counted before their callers wake (tests)
	carried uint64        // batches that carried settles (tests)
	onWire  atomic.Int64  // when the batch on the wire was sent (Unix ns; 0: none)
	flushed chan struct{} // closed, and replaced, when written advances
	kick    chan struct{} // cap 1: the queue is not empty
	urgent  chan struct{} // cap 1: write the batch now, do not wait
	delay   time.Duration // Config.RecordBatchDelay; <= 0: no gathering
}

// startRecordWriter starts c's writer; it ends when c closes, after
// writing what is queued then.
func startRecordWriter(c *Client) *recordWriter {
	w := &recordWriter{c: c, flushed: make(chan struct{}), kick: make(chan struct{}, 1),
		urgent: make(chan struct{}, 1), delay: c.cfg.RecordBatchDelay}
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
		if w.lenLocked() < MaxQueuedRecords {
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
	} else {
		w.queue = append(w.queue, q)
		w.queued++
	}
	full := w.lenLocked() >= maxRecordBatch
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
// once.
func (w *recordWriter) run() {
	defer w.c.work.Done()
	var timer *time.Timer
	if w.delay > 0 {
		timer = time.NewTimer(w.delay)
		timer.Stop()
	}
	for {
		select {
		case <-w.kick:
			if timer != nil {
				w.gather(timer)
			}
			select {
			case <-w.c.closing: // drain, which stops at a failed batch
				w.drain()
				return
			default:
			}
			_ = w.writeQueued() // a failed batch is counted (op record)
		case <-w.c.closing:
			w.drain()
			return
		}
	}
}

// gather waits RecordBatchDelay for more records to join the batch, or
// less when hurried or closing.
func (w *recordWriter) gather(timer *time.Timer) {
	w.mu.Lock()
	full := w.lenLocked() >= maxRecordBatch
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
// and its records are counted as one failed op record.
func (w *recordWriter) drain() {
	for {
		if err := w.writeQueued(); err != nil {
			w.mu.Lock()
			n := len(w.queue)
			for _, q := range w.calls {
				q.call.deliver(nil, fmt.Errorf("%w: %w", store.ErrUnavailable, errNotSent))
			}
			for _, q := range append(w.settles, w.queue...) {
				if q.call != nil {
					q.call.deliver(nil, store.ErrUnavailable)
				}
			}
			w.written += uint64(len(w.queue))
			w.queue, w.settles, w.calls = nil, nil, nil
			close(w.flushed)
			w.flushed = make(chan struct{})
			w.mu.Unlock()
			if n > 0 {
				_ = w.c.done(store.OpRecord, time.Now(), err)
			}
			return
		}
		w.mu.Lock()
		left := w.lenLocked()
		w.mu.Unlock()
		if left == 0 {
			return
		}
	}
}

// writeQueued writes the records queued so far in one pipeline, at
// most maxRecordBatch of them, and returns the error of its records
// (counted as op record), else that of a command Redis did not answer
// (a settle, or a settle's NOSCRIPT rerun).
func (w *recordWriter) writeQueued() error {
	w.mu.Lock()
	budget := maxBatchBytes
	now := time.Now()
	w.calls = slices.DeleteFunc(w.calls, func(q queuedRecord) bool {
		if now.Before(q.call.deadline) {
			return false
		}
		q.call.deliver(nil, fmt.Errorf("%w: %w", errNotSent, context.DeadlineExceeded))
		return true
	})
	batch := take(&w.calls, maxRecordBatch, &budget)
	for _, q := range batch {
		q.call.taken = true
	}
	if budget > 0 && len(batch) < maxRecordBatch {
		batch = append(batch, take(&w.settles, maxRecordBatch-len(batch), &budget)...)
	}
	settles := len(batch)
	if budget > 0 && len(batch) < maxRecordBatch {
		batch = append(batch, take(&w.queue, maxRecordBatch-len(batch), &budget)...)
	}
	if w.lenLocked() > 0 {
		select {
		case w.kick <- struct{}{}: // the rest is the next batch
		default:
		}
	}
	w.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.c.cfg.WriteTimeout+w.c.cfg.ReadTimeout)
	start := time.Now()
	var calls map[redis.Cmder]*queuedCall
	counted := false // the batch holds writes counted as op record
	newest := chainHeads(batch)
	w.onWire.Store(start.UnixNano())
	defer w.onWire.Store(0)
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
	if settles > 0 {
		w.carried++
	}
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
	w.mu.Lock()
	w.written += uint64(len(batch) - settles) // what readers wait for (queued)
	close(w.flushed)
	w.flushed = make(chan struct{})
	w.mu.Unlock()
	return err
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
	return cmdOf(c.recs.call(ctx, script, keys, args...))
}

// runNow runs script on the answer path (a claim, a presentation, a
// gate evaluation: the request waits for its reply). When no other
// such call of this Client is under way it goes at once on its own
// connection (Script.Run); when one is, it joins the record writer's
// next batch, which goes at once (call): under load, the calls made
// while a batch is on the wire share the next one's write and read
// (group commit, docs/cluster.md "Client"), instead of one round trip's
// syscalls each on both sides. In Cluster mode it is Script.Run: a
// batch spans nodes (run says why not); and it is Script.Run when the
// writer's batch on the wire has been there longer than groupWait (a
// connection that stopped answering holds no other call up), when a
// batch does not take the call within groupWait, and when the
// writer's queue is full or the Client closing (callNow). A grouped
// call returns as Script.Run does: at its reply, or at ctx's deadline
// (cancelled, it still waits for a reply already on its way), its
// script then perhaps still to run (the claims and mints it carries
// write nothing past their deadline); one whose batch had not taken it
// yet is not sent at all (errNotSent: mayHaveRun is false).
func (c *Client) runNow(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	busy := c.answering.Add(1) > groupFrom
	defer c.answering.Add(-1)
	if busy && !c.cluster && !c.recs.stuck() {
		if val, queued, err := c.recs.callNow(ctx, script, keys, args...); queued {
			return cmdOf(val, err)
		}
	}
	return script.Run(ctx, c.rdb, keys, args...)
}

// groupFrom is how many answer-path calls of a Client must be under way
// already for the next to be grouped (runNow): below it a call goes on
// its own connection. Grouping costs each grouped call the hop to the
// record writer and back, which its share of a batch's syscalls repays
// only when the batch is large: BenchmarkClientClaim, client CPU per
// claim, go-redis against grouped from one call under way, 33 against
// 69 µs with 2 goroutines, 32 against 38 with 4, 27 against 16 with 16.
const groupFrom = 4

// cmdOf is a script call's reply as Script.Run gives it.
func cmdOf(val any, err error) *redis.Cmd {
	cmd := redis.NewCmd(context.Background())
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

// errNotSent is the cause of a grouped answer-path call that never
// reached Redis: its caller's context ended before a batch took it, or
// the Client closed with it queued (mayHaveRun: false).
var errNotSent = errors.New("the call was not sent: it was still queued for the next batch")

// callNow queues an answer-path script call (runNow) ahead of the
// settles and records, has the writer send its batch at once, and
// returns its reply. queued is false, and nothing is sent, when the
// queue is full (MaxQueuedRecords) or the Client closing, or when no
// batch took the call within groupWait: the caller then goes on its
// own connection. Its deadline is its context's, at most the write and
// read timeouts from now (what its own connection would allow). Its
// caller's context ending (cancelled or past its deadline) before a
// batch took the call leaves it unsent (errNotSent), and a batch
// leaves a call past its deadline unsent too; once taken, the call
// waits for the reply, or its deadline (context.DeadlineExceeded: it
// may have run), cancellation alone not ending the wait, as with
// Script.Run.
func (w *recordWriter) callNow(ctx context.Context, script *redis.Script, keys []string, args ...any) (val any, queued bool, err error) {
	deadline := time.Now().Add(w.c.cfg.WriteTimeout + w.c.cfg.ReadTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	q := &queuedCall{script: script, keys: keys, args: args, done: make(chan struct{}), deadline: deadline}
	w.mu.Lock()
	select {
	case <-w.c.closing:
		w.mu.Unlock()
		return nil, false, nil
	default:
	}
	if w.lenLocked() >= MaxQueuedRecords {
		w.mu.Unlock()
		return nil, false, nil
	}
	w.calls = append(w.calls, queuedRecord{call: q})
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	w.hurry()

	timer := time.NewTimer(min(w.groupWait(), time.Until(deadline)))
	defer timer.Stop()
	cancelled := ctx.Done()
	grouping := true // the timer is groupWait's
	for {
		var cause error
		select {
		case <-q.done:
			return q.val, true, q.err
		case <-cancelled:
			cause = ctx.Err()
		case <-timer.C:
			cause = context.DeadlineExceeded
			if grouping && time.Now().Before(deadline) {
				cause = nil // groupWait passed
			}
		}
		w.mu.Lock()
		if !q.taken {
			w.calls = slices.DeleteFunc(w.calls, func(r queuedRecord) bool { return r.call == q })
			w.mu.Unlock()
			if cause == nil {
				return nil, false, nil
			}
			return nil, true, fmt.Errorf("%w: %w", errNotSent, cause)
		}
		w.mu.Unlock()
		switch {
		case cause == nil: // on its way: wait for the reply or the deadline
			grouping = false
			timer.Reset(time.Until(deadline))
		case errors.Is(cause, context.Canceled):
			cancelled = nil // on its way: wait for the reply or the deadline
		default:
			return nil, true, cause
		}
	}
}

// groupWait is how long an answer-path call waits for a batch to take
// it before it goes on its own connection, and how long a batch may be
// on the wire before calls stop joining the next one (stuck): a tenth
// of the read timeout, at least 5 ms (50 ms by default). Under load a
// batch comes back within a few milliseconds; one that does not is on
// a connection that stopped answering, and the other connections may
// still answer.
func (w *recordWriter) groupWait() time.Duration {
	return max(w.c.cfg.ReadTimeout/10, 5*time.Millisecond)
}

// stuck reports whether the batch on the wire has been there longer
// than groupWait.
func (w *recordWriter) stuck() bool {
	sent := w.onWire.Load()
	return sent != 0 && time.Since(time.Unix(0, sent)) > w.groupWait()
}

// lenLocked is what the writer holds queued: records, settles and
// answer-path calls.
func (w *recordWriter) lenLocked() int { return len(w.queue) + len(w.settles) + len(w.calls) }

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
