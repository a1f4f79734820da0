package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/internal/testwait"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// TestRecordWriter: records retained off the answer path (recordWriter)
// reach Redis in the order they were retained (the chain's head is the
// newest), in no more round trips than records; a node reads its own at
// once and another node once they are written; retained faster than
// Redis takes them, none is dropped (a Retain waits for room); a
// stalled Redis bounds every Retain's wait by the timeouts, and records
// are written again once it answers; Close writes what is queued.
func TestRecordWriter(t *testing.T) {
	srv := redistest.StartServer(t)
	cnt := &counter{ops: map[store.Op]int{}}
	cfg := Config{Addrs: []string{srv.Addr()}, Observer: cnt, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second}
	_, set := newSet(t, cfg)
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

	// Faster than one pipeline a round trip: 4 goroutines retaining in a
	// tight loop against a healthy Redis fill the queue past its bound;
	// a Retain then waits for room instead of dropping its record, and
	// every record is written.
	const writers, each = 4, 3000
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := set.Records.Retain(ctx, store.Record{AuditID: id(100000 + g*each + i), AgentID: "load", NodeID: "n1"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Retain under load against a healthy Redis: %v", err)
	}
	if _, err := set.Records.Heads(ctx, "load"); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{100000, 100000 + writers*each - 1} {
		if _, ok, err := other.Records.Get(ctx, id(i)); err != nil || !ok {
			t.Fatalf("record %d of the load: %v %v", i, ok, err)
		}
	}

	// Stalled: Retain never waits longer than the timeouts for room (a
	// full queue is refused as unavailable, or its batch is dropped),
	// nothing deadlocks, and once Redis answers records are written.
	cfgS := Config{Addrs: []string{srv.Addr()}, ReadTimeout: 150 * time.Millisecond, WriteTimeout: 150 * time.Millisecond}
	_, stalled := newSet(t, cfgS)
	srv.Pause()
	start := time.Now()
	for i := 0; i < MaxQueuedRecords+2*maxRecordBatch; i++ {
		t0 := time.Now()
		err := stalled.Records.Retain(ctx, store.Record{AuditID: id(200000 + i), AgentID: "b", NodeID: "n2"})
		if err != nil && (!errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "queue")) {
			srv.Resume()
			t.Fatalf("Retain %d while Redis stalls: %v, want nil or ErrUnavailable naming the queue", i, err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			srv.Resume()
			t.Fatalf("Retain %d waited %v while Redis stalls", i, d)
		}
		if time.Since(start) > 30*time.Second {
			break
		}
	}
	srv.Resume()
	// Redis first works off what the stall left in its sockets (the
	// batches that timed out), and a batch may time out again meanwhile
	// (150 ms): records retained after the stall are written once it
	// keeps up.
	for i, deadline := 0, time.Now().Add(20*time.Second); ; i++ {
		last := id(300000 + i)
		if err := stalled.Records.Retain(ctx, store.Record{AuditID: last, AgentID: "b", NodeID: "n2"}); err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Retain once Redis answers: %v", err)
		}
		if _, err := stalled.Records.Heads(ctx, "b"); err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Heads after the stall: %v", err)
		}
		r, ok, err := other.Records.Get(ctx, last)
		if err == nil && ok && r.AuditID == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record retained after the stall was written within 20 s: %+v %v %v", r, ok, err)
		}
		time.Sleep(50 * time.Millisecond)
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

// TestRecordWriterGathers: the writer lets records gather before it
// writes a batch (Config.RecordBatchDelay), so records retained one
// after another share one round trip; a node reading its own records
// does not wait for the delay (an hour here), nor does Close; with the
// default delay another node reads a record without any read on the
// retaining node hurrying it.
func TestRecordWriterGathers(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("%064d", 7_000_000+i) }
	_, other := newSet(t, Config{Addrs: []string{srv.Addr()}})

	cnt := &counter{ops: map[store.Op]int{}}
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, Observer: cnt, RecordBatchDelay: time.Hour})
	cnt.take()
	const n = 50
	for i := 1; i <= n; i++ {
		if err := set.Records.Retain(ctx, store.Record{AuditID: id(i), AgentID: "g", NodeID: "n1"}); err != nil {
			t.Fatalf("Retain %d: %v", i, err)
		}
	}
	// Nothing written yet: the batch is gathering.
	if _, ok, err := other.Records.Get(ctx, id(1)); err != nil || ok {
		t.Fatalf("a record of a gathering batch read on another node: %v %v", ok, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	heads, err := set.Records.Heads(rctx, "g") // hurries the batch
	cancel()
	if err != nil || len(heads) != 1 || heads[0].AuditID != id(n) {
		t.Fatalf("head of %d gathered records: %+v %v", n, heads, err)
	}
	if trips := cnt.take()[store.OpRecord]; trips != 2 { // one batch, one read
		t.Fatalf("%d records retained one after another took %d round trips with the read, want 2", n, trips)
	}
	if err := set.Records.Retain(ctx, store.Record{AuditID: id(n + 1), AgentID: "g", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	testwait.Returns(t, 10*time.Second, c.Close, "Close (waiting for the batch delay?)")
	if _, ok, err := other.Records.Get(ctx, id(n+1)); err != nil || !ok {
		t.Fatalf("a record queued before Close: %v %v", ok, err)
	}

	// The default delay: written without a reader's hurry.
	_, def := newSet(t, Config{Addrs: []string{srv.Addr()}})
	if err := def.Records.Retain(ctx, store.Record{AuditID: id(n + 2), AgentID: "g2", NodeID: "n3"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, ok, err := other.Records.Get(ctx, id(n+2))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a record retained with the default delay (%v) not written within 5 s", RecordBatchDelay)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRecordWriterCloseWritesAll: Close writes every record queued, not
// only the first batch: 2,000 records queued while Redis stalls (four
// batches) are all readable once Redis answers and the Client closed.
func TestRecordWriterCloseWritesAll(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("%064d", 8_000_000+i) }
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	srv.Pause()
	const n = 2000
	for i := 0; i < n; i++ {
		if err := set.Records.Retain(ctx, store.Record{AuditID: id(i), AgentID: "z", NodeID: "n1"}); err != nil {
			srv.Resume()
			t.Fatalf("Retain %d while Redis stalls: %v", i, err)
		}
	}
	srv.Resume()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_, other := newSet(t, Config{Addrs: []string{srv.Addr()}})
	missing := 0
	for i := 0; i < n; i++ {
		if _, ok, err := other.Records.Get(ctx, id(i)); err != nil {
			t.Fatal(err)
		} else if !ok {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d records queued before Close were never written", missing, n)
	}
}

// TestAttemptAddLater: an attempt record queued with AddLater is read at
// once on its own node (Get and Len wait for the queue) and on another
// node, which reads a missing id once more after the gathering delay;
// the bound holds; a record AddLater queued while Redis is down is
// counted lost, not read.
func TestAttemptAddLater(t *testing.T) {
	srv := redistest.StartServer(t)
	sets := make([]store.Set, 2)
	for i := range sets {
		// Node a gathers 40 ms; node b, the other reader, waits longer
		// before its second read (its own delay, 200 ms, and
		// attemptRecheck), so a loaded machine's round trips fit.
		delay := 40 * time.Millisecond
		if i == 1 {
			delay = 200 * time.Millisecond
		}
		c, err := New(context.Background(), Config{Addrs: []string{srv.Addr()}, RecordBatchDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if sets[i], err = c.Set(store.Limits{Attempts: 8}, nil); err != nil {
			t.Fatal(err)
		}
	}
	a, b := sets[0], sets[1]
	ctx := context.Background()
	// Redis learns the script first (the first batch's EVALSHA meets
	// NOSCRIPT and is sent again as EVAL).
	if err := a.Attempts.(store.AttemptsLater).AddLater(ctx, store.Attempt{ID: "rcns-later-warm"}); err != nil {
		t.Fatal(err)
	}
	if _, found, err := a.Attempts.Get(ctx, "rcns-later-warm"); err != nil || !found {
		t.Fatalf("the first attempt record: %v %v", found, err)
	}
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("rcns-later-%d", i)
		rec := store.Attempt{ID: ids[i], AgentID: "a", Method: "BOOK", Path: "/x", Reason: "contract-revoked"}
		if err := a.Attempts.(store.AttemptsLater).AddLater(ctx, rec); err != nil {
			t.Fatal(err)
		}
		reader := b // another node, before the batch (40 ms) is written
		if i%3 == 2 {
			reader = a
		}
		got, found, err := reader.Attempts.Get(ctx, ids[i])
		if err != nil || !found || got.Reason != "contract-revoked" {
			t.Fatalf("attempt %d read right after AddLater: %+v %v %v", i, got, found, err)
		}
	}
	if n, err := a.Attempts.Len(ctx); err != nil || n != 8 {
		t.Fatalf("Len = %d %v, want the bound 8", n, err)
	}
	if _, found, _ := b.Attempts.Get(ctx, ids[0]); found {
		t.Fatal("the oldest attempt outlived the bound")
	}
	srv.Stop()
	if err := a.Attempts.(store.AttemptsLater).AddLater(ctx, store.Attempt{ID: "rcns-later-down"}); err != nil {
		t.Fatalf("AddLater while Redis is down: %v (queued: the batch fails later)", err)
	}
	if _, _, err := a.Attempts.Get(ctx, "rcns-later-down"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get while Redis is down: %v", err)
	}
}

// TestSettlesGathered: Complete and Abandon called off the answer path
// (store.OffAnswerPath) go through the record writer, gathered with the
// records into its batches, and take effect (a repeat replays, a
// released key executes again); called on the answer path they do not.
// While Redis is down they fail (store.ErrUnavailable) instead of
// hanging, and once the Client closes they are refused at once.
func TestSettlesGathered(t *testing.T) {
	srv := redistest.StartServer(t)
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	off := store.OffAnswerPath(ctx)
	queued := func() uint64 { // records and settles through the writer
		c.recs.mu.Lock()
		defer c.recs.mu.Unlock()
		return c.recs.queued + c.recs.batched
	}
	claim := func(key string) store.Claim {
		t.Helper()
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: key, Fingerprint: "fp"})
		if err != nil || got.Outcome != idempotency.Execute {
			t.Fatalf("claim %s: %v %v", key, got.Outcome, err)
		}
		return got.Claim
	}
	const n = 20
	claims := make([]store.Claim, n)
	for i := range claims {
		claims[i] = claim(fmt.Sprintf("k%d", i))
	}
	before := queued()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, cl := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs <- cl.Complete(off, idempotency.Response{Status: 200, Body: []byte(fmt.Sprintf(`{"i":%d}`, i))})
			} else {
				errs <- cl.Abandon(off)
			}
			_ = set.Records.Retain(ctx, store.Record{AuditID: fmt.Sprintf("%064d", i), AgentID: "a", NodeID: "n"})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := queued() - before; got != 2*n {
		t.Fatalf("%d writes went through the record writer, want %d (%d settles and %d records)", got, 2*n, n, n)
	}
	for i := range claims {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "a", Key: fmt.Sprintf("k%d", i), Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 && (got.Outcome != idempotency.Replay || string(got.Response.Body) != fmt.Sprintf(`{"i":%d}`, i)) {
			t.Fatalf("key %d completed off the answer path: %v %q", i, got.Outcome, got.Response.Body)
		}
		if i%2 == 1 && got.Outcome != idempotency.Execute {
			t.Fatalf("key %d abandoned off the answer path: %v", i, got.Outcome)
		}
	}

	// On the answer path: at once, not through the writer.
	cl := claim("direct")
	before = queued()
	if err := cl.Complete(ctx, idempotency.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if queued() != before {
		t.Fatal("a Complete on the answer path went through the record writer")
	}

	down := claim("down")
	srv.Stop()
	if err := down.Complete(off, idempotency.Response{Status: 200}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Complete off the answer path while Redis is down: %v", err)
	}
	_ = c.Close()
	if err := down.Complete(off, idempotency.Response{Status: 200}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Complete off the answer path after Close: %v", err)
	}
}

// TestDrainStopsWhenRedisStalls: settles queued while Redis stalls,
// several batches of them, fail with store.ErrUnavailable once the
// Client closes, and Close tries one batch, not each of them (each try
// waits the timeouts), though a batch of settles only counts no op
// record.
func TestDrainStopsWhenRedisStalls(t *testing.T) {
	srv := redistest.StartServer(t)
	const timeout = 300 * time.Millisecond
	c, set := newSet(t, Config{Addrs: []string{srv.Addr()}, ReadTimeout: timeout, WriteTimeout: timeout})
	ctx := context.Background()
	const n = 6 * maxRecordBatch
	claims := make([]store.Claim, n)
	for i := range claims {
		got, err := set.Idempotency.Claim(ctx, idempotency.ClaimRequest{AgentID: "d", Key: fmt.Sprintf("k%d", i), Fingerprint: "fp"})
		if err != nil || got.Outcome != idempotency.Execute {
			t.Fatalf("claim %d: %v %v", i, got.Outcome, err)
		}
		claims[i] = got.Claim
	}
	srv.Pause()
	defer srv.Resume()
	c.recs.mu.Lock()
	settled0 := c.recs.settled
	c.recs.mu.Unlock()
	errs := make(chan error, n)
	for _, cl := range claims {
		go func() { errs <- cl.Abandon(store.OffAnswerPath(ctx)) }()
	}
	// Until every settle is queued, whatever batches the writer took
	// meanwhile (on a loaded machine one may already have timed out).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		c.recs.mu.Lock()
		queued := c.recs.settled - settled0
		c.recs.mu.Unlock()
		if queued >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d settles queued within 30 s", queued, n)
		}
	}
	c.recs.mu.Lock()
	before := c.recs.batched
	c.recs.mu.Unlock()
	_ = c.Close()
	for range n {
		if err := <-errs; !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a settle queued while Redis stalls, the Client closed: %v", err)
		}
	}
	c.recs.mu.Lock()
	tried := c.recs.batched - before
	c.recs.mu.Unlock()
	if tried > 2*maxRecordBatch { // the batch in flight, and drain's first
		t.Fatalf("from Close on, %d settles were sent to a Redis that did not answer, want at most two batches (%d)", tried, 2*maxRecordBatch)
	}
}

// TestTakeBatchBytes: a batch is cut at maxRecordBatch items and at
// maxBatchBytes (a settle's stored answer counts), always holding at
// least one item, and what is left stays queued in order.
func TestTakeBatchBytes(t *testing.T) {
	big := func(i int) queuedRecord {
		return queuedRecord{call: &queuedCall{args: []any{fmt.Sprint(i), make([]byte, 600<<10)}, done: make(chan struct{})}}
	}
	q := []queuedRecord{big(0), big(1), big(2)}
	budget := maxBatchBytes
	got := take(&q, maxRecordBatch, &budget)
	if len(got) != 1 || len(q) != 2 || q[0].call.args[0] != "1" {
		t.Fatalf("took %d of three 600 KiB settles, %d left (first %v); want 1 and 2", len(got), len(q), q[0].call.args[0])
	}
	budget = 10 // smaller than any item: still one
	if got = take(&q, maxRecordBatch, &budget); len(got) != 1 || len(q) != 1 {
		t.Fatalf("took %d with a budget below one item, want 1", len(got))
	}
	small := make([]queuedRecord, 600)
	for i := range small {
		small[i] = queuedRecord{key: "k", raw: []byte("{}")}
	}
	budget = maxBatchBytes
	if got = take(&small, maxRecordBatch, &budget); len(got) != maxRecordBatch || len(small) != 600-maxRecordBatch {
		t.Fatalf("took %d of 600 small records, want %d", len(got), maxRecordBatch)
	}
}

// lostScripter is a Redis that lost its scripts (EVALSHA: NOSCRIPT) and
// then stops answering (EVAL: a read timeout), or, when answers, runs
// EVAL: the fault of a Redis restarted then stalled, under settleBatch.
type lostScripter struct {
	redis.Scripter
	answers bool
}

func (l lostScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(redis.ErrNoScript)
	return cmd
}

func (l lostScripter) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	if l.answers {
		cmd.SetVal(int64(1))
	} else {
		cmd.SetErr(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
	}
	return cmd
}

// TestSettleBatchRerunUnanswered: a settle whose script Redis did not
// know is run again; when that rerun is not answered, the batch reports
// it lost (so drain stops, TestDrainStopsWhenRedisStalls), its caller
// gets the error, and it is not counted as a failed record; a rerun
// answered is delivered and nothing is lost. A reply of Redis (NOSCRIPT
// itself, an error reply) is never lost.
func TestSettleBatchRerunUnanswered(t *testing.T) {
	ctx := context.Background()
	for _, answers := range []bool{false, true} {
		q := &queuedCall{script: completeScript, keys: []string{"k"}, done: make(chan struct{})}
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(redis.ErrNoScript)
		first, lost := settleBatch(ctx, lostScripter{answers: answers}, []redis.Cmder{cmd}, map[redis.Cmder]*queuedCall{cmd: q})
		<-q.done
		if first != nil {
			t.Errorf("answers %v: counted error %v for a settle with a waiter", answers, first)
		}
		if answers {
			if lost != nil || q.err != nil || q.val != int64(1) {
				t.Errorf("rerun answered: lost %v, delivered %v %v", lost, q.val, q.err)
			}
			continue
		}
		if !errors.Is(lost, os.ErrDeadlineExceeded) || !errors.Is(q.err, os.ErrDeadlineExceeded) {
			t.Errorf("rerun unanswered: lost %v, delivered %v, want the timeout in both", lost, q.err)
		}
	}
	if unanswered(redis.ErrNoScript) || unanswered(nil) || !unanswered(context.DeadlineExceeded) {
		t.Error("unanswered misreads NOSCRIPT, nil or a deadline")
	}
}

// TestRecordBatchChainHeads: a batch of records of several chains (two
// nodes' chains of one agent, another agent's) leaves each chain's head
// at its newest record and each heads hash expiring, as a head set after
// every record would, in one HSET per chain and one PEXPIRE per hash
// (Redis's own command counts), and every record readable.
func TestRecordBatchChainHeads(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("%064d", 9_000_000+i) }
	_, set := newSet(t, Config{Addrs: []string{srv.Addr()}, RecordBatchDelay: time.Hour})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer rdb.Close()
	calls := func(cmd string) int {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				n := 0
				fmt.Sscanf(rest, "%d", &n)
				return n
			}
		}
		return 0
	}
	hset, pexpire := calls("hset"), calls("pexpire")
	const n = 30
	newest := map[string]string{}
	for i := 1; i <= n; i++ {
		agent, node := "h", []string{"n1", "n2"}[i%2]
		if i%3 == 0 {
			agent, node = "h2", "n1"
		}
		if err := set.Records.Retain(ctx, store.Record{AuditID: id(i), AgentID: agent, NodeID: node}); err != nil {
			t.Fatal(err)
		}
		newest[agent+" "+node] = id(i)
	}
	for _, agent := range []string{"h", "h2"} {
		heads, err := set.Records.Heads(ctx, agent) // writes the batch first
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, h := range heads {
			got[agent+" "+h.NodeID] = h.AuditID
		}
		for k, want := range newest {
			if strings.HasPrefix(k, agent+" ") && got[k] != want {
				t.Errorf("head of chain %s: %q, want the newest, %q (heads %+v)", k, got[k], want, heads)
			}
		}
		if ttl, err := rdb.PTTL(ctx, set.Records.(records).c.agentKey(agent, "h")).Result(); err != nil || ttl <= 0 {
			t.Errorf("heads hash of %s: PTTL %v %v, want an expiry", agent, ttl, err)
		}
	}
	if got := calls("hset") - hset; got != 3 {
		t.Errorf("a batch of %d records of 3 chains sent %d HSETs, want 3", n, got)
	}
	if got := calls("pexpire") - pexpire; got != 2 {
		t.Errorf("a batch of %d records in 2 heads hashes sent %d PEXPIREs, want 2", n, got)
	}
	for i := 1; i <= n; i++ {
		if _, ok, err := set.Records.Get(ctx, id(i)); err != nil || !ok {
			t.Fatalf("record %d of the batch: %v %v", i, ok, err)
		}
	}
}
