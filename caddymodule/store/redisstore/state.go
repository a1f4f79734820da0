package redisstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// replay is the signature replay cache: P{a:AGENT}:sig:SHA256(sig), set
// with NX and expiring when the signature does (one round trip).
type replay struct{ c *Client }

func (r replay) Seen(ctx context.Context, agentID string, sig []byte, expires time.Time) (bool, error) {
	if !r.c.now().Before(expires) {
		return false, nil // expired: never recorded (Verify refuses it)
	}
	sum := sha256.Sum256(sig)
	start := time.Now()
	ok, err := r.c.rdb.SetArgs(ctx, r.c.agentKey(agentID, "sig:"+hex.EncodeToString(sum[:])), "1",
		redis.SetArgs{Mode: "NX", ExpireAt: expires}).Result()
	if err = r.c.done(store.OpReplay, start, err); err != nil {
		return false, err
	}
	return ok != "OK", nil
}

// attempts keeps attempt records in one slot: P{g}:att (a hash id →
// JSON) and P{g}:atto (ids, newest first), trimmed to size by
// keep_attempt. A gate refusal's record is kept by the gate's own script
// outside Cluster mode (resolveScript); the engine keeps every other
// refusal's (a presentation's, and in Cluster mode, where P{g} is
// another slot than the agent's, the gate's) with AddLater, which
// queues it for the Client's record writer, written with the
// Attribution-Records off the answer path (issue 32: no round trip
// before the answer); Add writes it at once. Get and Len first wait
// for what this Client queued (a node reads its own attempt records at
// once); Get reads once more when it does not find the id, after the
// writer's gathering delay and attemptRecheck, for a record another node
// queued a moment before.
type attempts struct {
	c    *Client
	size int
}

// attemptRecheck is how long attempts.Get waits, beyond the record
// writer's gathering delay (RecordBatchDelay, or Config.RecordBatchDelay:
// every node of a deployment has the same), before it reads a missing
// id once more: another node's writer writes what it queued within that
// delay and a round trip, so an agent that sends INSPECT
// target=rcns-attempt to another node as soon as its 464 arrived still
// finds the record.
const attemptRecheck = 10 * time.Millisecond

// attemptFuncLua defines keep_attempt(hash, order, id, json, size):
// adds one record and drops the oldest past the bound. Shared by
// attemptScript and resolveScript (a gate refusal's record kept in the
// round trip of its pair lookup, outside Cluster mode).
const attemptFuncLua = `
local function keep_attempt(kh, ko, id, raw, size)
  local n
  if redis.call('HSET', kh, id, raw) == 1 then n = redis.call('LPUSH', ko, id) else n = redis.call('LLEN', ko) end
  while n > size do
    redis.call('HDEL', kh, redis.call('RPOP', ko))
    n = n - 1
  end
end
`

// attemptScript adds one record and drops the oldest past the bound.
// KEYS: hash, order list. ARGV: id, JSON, size.
var attemptScript = denyOOM(attemptFuncLua + `
keep_attempt(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3]))
return 1
`)

// keys returns the attempt hash and order list.
func (a attempts) keys() []string { return []string{a.c.globalKey("att"), a.c.globalKey("atto")} }

// Add keeps rec: attemptScript, one round trip.
func (a attempts) Add(ctx context.Context, rec store.Attempt) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	start := time.Now()
	err = attemptScript.Run(ctx, a.c.rdb, a.keys(), rec.ID, raw, a.size).Err()
	return a.c.done(store.OpAttempt, start, err)
}

// AddLater queues rec for the record writer and returns
// (store.AttemptsLater): it is written with the next batch of records,
// normally within RecordBatchDelay, so records several nodes queue
// together reach the bound's order in the order their batches land. It
// fails (store.ErrUnavailable) only when the queue stays full for the
// write and read timeouts (Redis not keeping up) or the Client closed;
// a batch Redis refuses is counted as a failed op record.
func (a attempts) AddLater(ctx context.Context, rec store.Attempt) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return a.c.recs.add(queuedRecord{call: &queuedCall{script: attemptScript, keys: a.keys(), args: []any{rec.ID, raw, a.size}}})
}

func (a attempts) Get(ctx context.Context, id string) (store.Attempt, bool, error) {
	records{c: a.c}.own(ctx)
	rec, found, err := a.get(ctx, id)
	if err == nil && !found {
		t := time.NewTimer(max(a.c.recs.delay, 0) + attemptRecheck)
		defer t.Stop()
		select {
		case <-t.C:
			rec, found, err = a.get(ctx, id)
		case <-ctx.Done():
		}
	}
	return rec, found, err
}

// get reads the record id: one round trip.
func (a attempts) get(ctx context.Context, id string) (store.Attempt, bool, error) {
	start := time.Now()
	raw, err := a.c.rdb.HGet(ctx, a.c.globalKey("att"), id).Result()
	if err = a.c.done(store.OpAttempt, start, err); err != nil || raw == "" {
		return store.Attempt{}, false, err
	}
	var rec store.Attempt
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return store.Attempt{}, false, fmt.Errorf("redisstore: attempt %s: %w", id, err)
	}
	return rec, true, nil
}

func (a attempts) Len(ctx context.Context) (int, error) {
	records{c: a.c}.own(ctx)
	start := time.Now()
	n, err := a.c.rdb.HLen(ctx, a.c.globalKey("att")).Result()
	if err = a.c.done(store.OpCount, start, err); err != nil {
		return 0, err
	}
	return int(n), nil
}

// records retains Attribution-Records at P{r:AUDIT-ID} (JSON of
// store.Record, expiring after the retention) and the chain heads in
// P{a:AGENT}:h (node → "AUDIT-ID KEPT-MS", the hash expiring after the
// retention from its last write). Retain queues the writes for the
// Client's recordWriter, which writes them off the answer path, many
// records to a round trip (in Cluster mode a batch may write several
// nodes, concurrently); Get and Heads first wait, at most the read
// timeout, for the records this Client queued before them.
type records struct {
	c         *Client
	retention time.Duration
}

func (r records) recordKey(auditID string) string { return r.c.prefix + "{r:" + auditID + "}" }

func (r records) Retain(ctx context.Context, rec store.Record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return r.c.recs.add(queuedRecord{key: r.recordKey(rec.AuditID), raw: raw,
		heads: r.c.agentKey(rec.AgentID, "h"), node: rec.NodeID,
		head: rec.AuditID + " " + strconv.FormatInt(r.c.nowMS(), 10), retention: r.retention})
}

// own waits for the records this Client queued before the call (a node
// reads its own records), at most the write and read timeouts.
func (r records) own(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.c.cfg.WriteTimeout+r.c.cfg.ReadTimeout)
	defer cancel()
	_ = r.c.recs.wait(ctx)
}

func (r records) Get(ctx context.Context, auditID string) (store.Record, bool, error) {
	r.own(ctx)
	start := time.Now()
	raw, err := r.c.rdb.Get(ctx, r.recordKey(auditID)).Result()
	if err = r.c.done(store.OpRecord, start, err); err != nil || raw == "" {
		return store.Record{}, false, err
	}
	var rec store.Record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: record %s: %w", auditID, err)
	}
	return rec, true, nil
}

func (r records) Heads(ctx context.Context, agentID string) ([]store.Head, error) {
	r.own(ctx)
	start := time.Now()
	all, err := r.c.rdb.HGetAll(ctx, r.c.agentKey(agentID, "h")).Result()
	if err = r.c.done(store.OpRecord, start, err); err != nil {
		return nil, err
	}
	oldest := r.c.nowMS() - r.retention.Milliseconds()
	var out []store.Head
	for node, v := range all {
		id, kept, _ := strings.Cut(v, " ")
		if ms, err := strconv.ParseInt(kept, 10, 64); err == nil && ms > oldest {
			out = append(out, store.Head{NodeID: node, AuditID: id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out, nil
}

// tasks keeps MCP tasks at P{t:ID} (JSON of store.Task, expiring after
// its ttl) and their cancel requests at P{t:ID}:c (same slot): one
// round trip each.
type tasks struct{ c *Client }

func (t tasks) key(id string) string { return t.c.prefix + "{t:" + id + "}" }

func (t tasks) Put(ctx context.Context, rec store.Task, ttl time.Duration) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	start := time.Now()
	err = t.c.rdb.Set(ctx, t.key(rec.ID), raw, ttl).Err()
	return t.c.done(store.OpTask, start, err)
}

// taskLeaseLua defines lease_ms(s): a task record's lease_until (Go's
// RFC 3339 encoding of a UTC time: "2006-01-02T15:04:05.999999999Z") as
// Unix ms, or nil when s is not one (days from the civil date, the
// proleptic Gregorian calendar; TestTaskLeaseLua holds it to Go's).
const taskLeaseLua = `
local function lease_ms(s)
  if type(s) ~= 'string' then return nil end
  local y, mo, d, h, mi, sec, frac = string.match(s, '^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.?(%d*)Z$')
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((mo + 9) % 12) + 2) / 5) + d - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  local ms = ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000 + tonumber(sec) * 1000
  if frac ~= '' then ms = ms + math.floor(tonumber(string.sub(frac .. '000', 1, 3))) end
  return ms
end
`

// taskUpdateScript writes a task's record for Tasks.Update: ARGV[1] the
// record, kept ARGV[2] ms; ARGV[3] the last moment of the write (Unix
// ms, Redis's clock); ARGV[4] the margin (ms) before a stored lease;
// ARGV[5] the offset (ms) of Redis's clock over the writer's, in which
// the stored lease is written; ARGV[6] the record's own lease (Unix ms,
// Redis's clock; 0 for an end). 1 when written; 2 when a renewal older
// than the stored one (nothing written); 0 when too late (past ARGV[3],
// its own lease, or the stored lease, less the margin); -1 over an
// ended task; -2 over a working record whose lease it cannot read.
// allow-oom: it stores an answer already given, or extends a lease, as
// Complete and Renew do.
var taskUpdateScript = allowOOM(timeFuncLua + taskLeaseLua + `
local now = redis_ms()
local margin = tonumber(ARGV[4])
local own = tonumber(ARGV[6])
if now > tonumber(ARGV[3]) or (own > 0 and now > own - margin) then
  return 0
end
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, rec = pcall(cjson.decode, cur)
  if not ok or type(rec) ~= 'table' then
    return -2
  end
  if rec.status ~= 'working' then
    return -1
  end
  local stored = lease_ms(rec.lease_until)
  if not stored then
    return -2
  end
  stored = stored + tonumber(ARGV[5])
  if now > stored - margin then
    return 0
  end
  if own > 0 and own <= stored then
    return 2
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

func (t tasks) Update(ctx context.Context, rec store.Task, ttl time.Duration, notAfter time.Time, margin time.Duration) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	offset := t.c.clockOffset.Load()
	var own int64
	if !rec.LeaseUntil.IsZero() {
		own = rec.LeaseUntil.UnixMilli() + offset
	}
	start := time.Now()
	n, err := taskUpdateScript.Run(ctx, t.c.rdb, []string{t.key(rec.ID)}, raw, ttl.Milliseconds(), notAfter.UnixMilli()+offset,
		margin.Milliseconds(), offset, own).Int64()
	if err = t.c.done(store.OpTask, start, err); err != nil {
		return err
	}
	switch n {
	case 1, 2:
		return nil
	case -1:
		return fmt.Errorf("%w: the task had ended", store.ErrTaskLate)
	case -2:
		return fmt.Errorf("%w: the stored task's lease cannot be read", store.ErrTaskLate)
	}
	return fmt.Errorf("%w: the write reached Redis after %s, or within %s of the stored lease (Redis's clock)", store.ErrTaskLate, notAfter.UTC().Format(time.RFC3339Nano), margin)
}

func (t tasks) Get(ctx context.Context, id string) (store.Task, bool, error) {
	start := time.Now()
	raw, err := t.c.rdb.Get(ctx, t.key(id)).Result()
	if err = t.c.done(store.OpTask, start, err); err != nil || raw == "" {
		return store.Task{}, false, err
	}
	var rec store.Task
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return store.Task{}, false, fmt.Errorf("redisstore: task %s: %w", id, err)
	}
	return rec, true, nil
}

// taskCancelScript notes a cancel request (KEYS[1], kept ARGV[1] ms).
// allow-oom: a few bytes that stop work, taken even while Redis is at
// its maxmemory, as the task's own writes are.
var taskCancelScript = allowOOM(`redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return 1
`)

func (t tasks) RequestCancel(ctx context.Context, id string, ttl time.Duration) error {
	start := time.Now()
	err := taskCancelScript.Run(ctx, t.c.rdb, []string{t.key(id) + ":c"}, ttl.Milliseconds()).Err()
	return t.c.done(store.OpTask, start, err)
}

// Poll reads, for each task, whether its record (P{t:ID}) and its
// cancel request (P{t:ID}:c) exist: two EXISTS a task in one pipeline,
// one round trip. On Cluster the tasks are grouped by the master that
// holds them, a pipeline each, in parallel: a go-redis Cluster pipeline
// fails every command once one node's part fails, and a stalled node
// must fail only the tasks it holds (once ctx ends or its timeouts
// pass). EXISTS is a read, served while Redis is at its maxmemory.
func (t tasks) Poll(ctx context.Context, ids []string) ([]store.TaskPoll, error) {
	if len(ids) > store.MaxTaskPoll {
		return nil, fmt.Errorf("redisstore: a task poll of %d ids; at most %d a call", len(ids), store.MaxTaskPoll)
	}
	out := make([]store.TaskPoll, len(ids))
	groups := [][]int{make([]int, len(ids))}
	for i := range ids {
		groups[0][i] = i
	}
	if cc, ok := t.c.rdb.(*redis.ClusterClient); ok && len(ids) > 1 {
		byNode := map[string][]int{}
		for i, id := range ids {
			addr := "" // unknown: with the others whose master is not known
			if m, err := cc.MasterForKey(ctx, t.key(id)); err == nil {
				addr = m.Options().Addr
			}
			byNode[addr] = append(byNode[addr], i)
		}
		groups = groups[:0]
		for _, g := range byNode {
			groups = append(groups, g)
		}
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() { t.pollGroup(ctx, ids, g, out) })
	}
	wg.Wait()
	return out, nil
}

// pollGroup is Poll's pipeline for the tasks ids[i], i in idx, written
// to out[i].
func (t tasks) pollGroup(ctx context.Context, ids []string, idx []int, out []store.TaskPoll) {
	start := time.Now()
	cmds := make([]*redis.IntCmd, 0, 2*len(idx))
	_, err := t.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range idx {
			key := t.key(ids[i])
			cmds = append(cmds, p.Exists(ctx, key), p.Exists(ctx, key+":c"))
		}
		return nil
	})
	_ = t.c.done(store.OpTask, start, err) // counted once a pipeline
	for k, i := range idx {
		rec, cancel := cmds[2*k], cmds[2*k+1]
		if err := cmp.Or(rec.Err(), cancel.Err()); err != nil {
			out[i] = store.TaskPoll{Err: fmt.Errorf("%w: %s: %w", store.ErrUnavailable, store.OpTask, err)}
			continue
		}
		out[i] = store.TaskPoll{Stored: rec.Val() == 1, CancelRequested: cancel.Val() == 1}
	}
}
