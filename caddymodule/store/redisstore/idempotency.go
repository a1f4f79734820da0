package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// An Idempotency-Key record is a hash at P{a:AGENT}:i:KEY:
//
//	fp     the request fingerprint
//	exp    when the record is dropped (Unix ms): the end of the lease
//	       plus the window while no answer is stored, the window from
//	       Complete once one is
//	tok    the fencing token of the claim (absent once answered)
//	lease  when the claim's lease ends (Unix ms; absent once answered):
//	       in flight before, outcome-unknown after
//	at     when the key was claimed (Unix ms)
//	n, w   the node that claimed it and what the request was
//	ct     the token of the claim that completed the record, so that a
//	       retried Complete whose first reply was lost is told apart
//	       from one whose claim lost the key
//	st     the stored answer's status (absent while in flight)
//	r      the stored answer (encodeResponse)
//	pv     the synthesis id a stored 461 previews ("" otherwise)
//	cs     the synthesis id of the contract the stored answer ran
//	ps, pr, ppv, pcs, pexp   a 461 preview a confirmation took over
//
// with a TTL at exp, and its key in the agent's index P{a:AGENT}:iz (a
// sorted set scored by exp) that bounds the agent's records. Outside
// Cluster the gateway-wide index P{g}:iz (members "AGENT KEY") bounds
// the total in the same script; in Cluster mode the total is not
// tracked (docs/cluster.md).
//
// Every script that may grow the data is declared so that a Redis over
// maxmemory refuses it before it runs (denyOOM): a full Redis claims
// nothing, so nothing executes. Complete, Abandon, Renew and the
// operator's settle run even then (allowOOM): they store an answer
// already sent, or free memory.

// claimFuncLua defines claim(K, A), shared by claimScript,
// presentScript and resolveScript (each starts with timeFuncLua). K:
// the record, the agent's index, [the global index]. A: now, fp,
// lease (ms), max per agent, max records, token, presented synthesis
// id ("" for a plain claim), pending ("1"/"0"), the record's member
// in the agent's index, its member in the global index, window (ms),
// deadline (Redis's own clock, Unix ms; "0" none), node, what.
// Returns {outcome, stored answer, lease end, claimed at, node,
// what}; outcomes as idempotency.Outcome, plus 8: the claim reached
// Redis after its deadline and wrote nothing.
const claimFuncLua = `
local function claim(K, A)
  local deadline = tonumber(A[12])
  if deadline > 0 and redis_ms() > deadline then return {8} end
  local now = tonumber(A[1])
  local lease = now + tonumber(A[3])
  local keep = lease + tonumber(A[11])
  local r = redis.call('HMGET', K[1], 'fp', 'st', 'pv', 'cs', 'exp', 'r', 'lease', 'at', 'n', 'w')
  local exp = tonumber(r[5])
  local function index(score)
    redis.call('PEXPIREAT', K[1], score)
    redis.call('ZADD', K[2], score, A[9])
    if redis.call('PEXPIREAT', K[2], score, 'GT') == 0 then redis.call('PEXPIREAT', K[2], score, 'NX') end
    if K[3] then redis.call('ZADD', K[3], score, A[10]) end
  end
  if exp and exp > now then
    local done = r[2] ~= false
    if A[7] ~= '' and r[1] == A[2] and done then
      local pv, cs = r[3] or '', r[4] or ''
      local named = pv
      if named == '' then named = cs end
      if named ~= '' and named ~= A[7] then return {6} end
      if A[8] == '1' and tonumber(r[2]) == 461 and pv == A[7] then
        redis.call('HSET', K[1], 'ps', r[2], 'pr', r[6], 'ppv', pv, 'pcs', cs, 'pexp', r[5], 'tok', A[6],
          'lease', lease, 'at', now, 'n', A[13], 'w', A[14], 'exp', keep)
        redis.call('HDEL', K[1], 'st', 'r', 'pv', 'cs')
        index(keep)
        return {0, r[6]}
      end
    end
    if r[1] ~= A[2] then return {2} end
    if done then return {1, r[6]} end
    local held = tonumber(r[7]) or 0
    local code = 3
    if held <= now then code = 7 end
    return {code, '', held, tonumber(r[8]) or 0, r[9] or '', r[10] or ''}
  end
  redis.call('ZREMRANGEBYSCORE', K[2], '-inf', now)
  if K[3] then
    redis.call('ZREMRANGEBYSCORE', K[3], '-inf', now)
    if redis.call('ZCARD', K[3]) >= tonumber(A[5]) then return {5} end
  end
  if redis.call('ZCARD', K[2]) >= tonumber(A[4]) then return {4} end
  for i = 1, 10 do
    if r[i] then redis.call('DEL', K[1]) break end
  end
  redis.call('HSET', K[1], 'fp', A[2], 'tok', A[6], 'lease', lease, 'at', now, 'n', A[13], 'w', A[14], 'exp', keep)
  index(keep)
  return {0}
end
`

// claimScript claims KEYS[1] (the record) with KEYS[2] (the agent's
// index) and, when given, KEYS[3] (the gateway-wide index); ARGV as
// claim's A.
var claimScript = denyOOM(timeFuncLua + claimFuncLua + `return claim(KEYS, ARGV)
`)

// completeScript stores the answer of the claim whose token is ARGV[2],
// also after its lease ended. KEYS as claimScript. ARGV: now, token,
// window, answer, status, previewed id, contract id, agent-index
// member, global member and, to restore (write afresh a key no record
// is left of), "1" and the claim's fingerprint. Returns 1
// when stored, 2 when this claim stored it before (a retry whose first
// reply was lost), 0 when another claim or answer holds the key, 4
// when no record of the key is left and restore was not asked (an
// operator released it, or Redis lost it: claim.Complete tells which).
// With restore, a key no record is left of is written afresh as
// answered, with the claim's fingerprint (1).
var completeScript = allowOOM(`
local now = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'tok', 'exp', 'st', 'ct')
if r[4] == ARGV[2] then return 2 end
local gone = redis.call('EXISTS', KEYS[1]) == 0
if gone and ARGV[10] ~= '1' then return 4 end
if not gone and (r[1] ~= ARGV[2] or r[3] ~= false or not tonumber(r[2]) or tonumber(r[2]) <= now) then return 0 end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'r', ARGV[4], 'st', ARGV[5], 'pv', ARGV[6], 'cs', ARGV[7], 'exp', exp, 'ct', ARGV[2])
if gone then
  redis.call('HSET', KEYS[1], 'fp', ARGV[11])
else
  redis.call('HDEL', KEYS[1], 'tok', 'lease', 'at', 'n', 'w', 'ps', 'pr', 'ppv', 'pcs', 'pexp')
end
redis.call('PEXPIREAT', KEYS[1], exp)
redis.call('ZADD', KEYS[2], exp, ARGV[8])
if redis.call('PEXPIREAT', KEYS[2], exp, 'GT') == 0 then redis.call('PEXPIREAT', KEYS[2], exp, 'NX') end
if KEYS[3] then redis.call('ZADD', KEYS[3], exp, ARGV[9]) end
return 1
`)

// abandonScript releases the claim whose token is ARGV[2], also after
// its lease ended (nothing ran): a taken-over preview is restored with
// its expiry, any other record is deleted. KEYS as claimScript. ARGV:
// now, token, agent-index member, global member. Returns 0 (no longer
// held), 1 (released) or 2 (preview restored).
var abandonScript = allowOOM(`
local now = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'tok', 'exp', 'st', 'pexp', 'pr', 'ps', 'ppv', 'pcs')
if r[1] ~= ARGV[2] or r[3] ~= false or not tonumber(r[2]) or tonumber(r[2]) <= now then return 0 end
if r[4] then
  local pexp = tonumber(r[4])
  redis.call('HSET', KEYS[1], 'r', r[5], 'st', r[6], 'pv', r[7], 'cs', r[8], 'exp', pexp)
  redis.call('HDEL', KEYS[1], 'tok', 'lease', 'at', 'n', 'w', 'ps', 'pr', 'ppv', 'pcs', 'pexp')
  redis.call('ZADD', KEYS[2], pexp, ARGV[3])
  if KEYS[3] then redis.call('ZADD', KEYS[3], pexp, ARGV[4]) end
  redis.call('PEXPIREAT', KEYS[1], pexp)
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[3])
if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[4]) end
return 1
`)

// renewScript extends the lease of the claim whose token is ARGV[2];
// when the key has no record at all (Redis restarted without its data,
// or the record was dropped), it writes the claim again, in flight, so
// a request still running keeps its key. KEYS as claimScript. ARGV:
// now, token, lease (ms), window (ms), agent-index member, global
// member, fp, claimed at (ms), node, what. Returns 1 when renewed, 2
// when written again, 0 when another claim or an answer holds the key.
var renewScript = allowOOM(`
local now = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'tok', 'exp', 'st')
local lease = now + tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local keep = lease + tonumber(ARGV[4])
  redis.call('HSET', KEYS[1], 'fp', ARGV[7], 'tok', ARGV[2], 'lease', lease, 'at', ARGV[8], 'n', ARGV[9], 'w', ARGV[10], 'exp', keep)
  redis.call('PEXPIREAT', KEYS[1], keep)
  redis.call('ZADD', KEYS[2], keep, ARGV[5])
  if redis.call('PEXPIREAT', KEYS[2], keep, 'GT') == 0 then redis.call('PEXPIREAT', KEYS[2], keep, 'NX') end
  if KEYS[3] then redis.call('ZADD', KEYS[3], keep, ARGV[6]) end
  return 2
end
if r[1] ~= ARGV[2] or r[3] ~= false or not tonumber(r[2]) or tonumber(r[2]) <= now then return 0 end
redis.call('HSET', KEYS[1], 'lease', lease)
local keep = lease + tonumber(ARGV[4])
if keep > tonumber(r[2]) then
  redis.call('HSET', KEYS[1], 'exp', keep)
  redis.call('PEXPIREAT', KEYS[1], keep)
  redis.call('ZADD', KEYS[2], keep, ARGV[5])
  redis.call('PEXPIREAT', KEYS[2], keep, 'GT')
  if KEYS[3] then redis.call('ZADD', KEYS[3], keep, ARGV[6]) end
end
return 1
`)

// settleScript is the operator's release ("release") or resolve (any
// other action: store ARGV[3] with status ARGV[4]) of an
// outcome-unknown key. KEYS as claimScript. ARGV: now, action, answer,
// status, window (ms), agent-index member, global member, deadline
// (Redis's own clock, Unix ms: claimDeadline). Returns {0} no record,
// {1, status, exp} answered, then {2 live | 3 settled, lease end,
// claimed at, node, what, exp}; {4} when it reached Redis after its
// deadline and wrote nothing (helper-149: a settle answered 503 while
// Redis stalled took effect once it resumed, unrecorded, and a second
// settle was refused).
var settleScript = allowOOM(timeFuncLua + `
if redis_ms() > tonumber(ARGV[8]) then return {4} end
local now = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'exp', 'st', 'lease', 'at', 'n', 'w')
local exp = tonumber(r[1])
if not exp or exp <= now then return {0} end
if r[2] then return {1, tonumber(r[2]), exp} end
local lease = tonumber(r[3]) or 0
local out = {2, lease, tonumber(r[4]) or 0, r[5] or '', r[6] or '', exp}
if lease > now then return out end
out[1] = 3
if ARGV[2] == 'release' then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[6])
  if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[7]) end
  return out
end
local keep = now + tonumber(ARGV[5])
redis.call('HSET', KEYS[1], 'r', ARGV[3], 'st', ARGV[4], 'pv', '', 'cs', '', 'exp', keep)
redis.call('HDEL', KEYS[1], 'tok', 'lease', 'at', 'n', 'w', 'ps', 'pr', 'ppv', 'pcs', 'pexp', 'ct')
redis.call('PEXPIREAT', KEYS[1], keep)
redis.call('ZADD', KEYS[2], keep, ARGV[6])
redis.call('PEXPIREAT', KEYS[2], keep, 'GT')
if KEYS[3] then redis.call('ZADD', KEYS[3], keep, ARGV[7]) end
return out
`)

// idem is the Redis Idempotency-Key store.
type idem struct {
	c      *Client
	limits idempotency.Limits
}

func newIdempotency(c *Client, l idempotency.Limits) *idem {
	// idempotency.NewStore owns the defaults; a throwaway store applies
	// them.
	return &idem{c: c, limits: idempotency.NewStore(l, nil).Limits()}
}

func (s *idem) Limits() idempotency.Limits { return s.limits }

// lease is the lease of a claim asking for l (0: the store's).
func (s *idem) lease(l time.Duration) time.Duration {
	if l > 0 {
		return l
	}
	return s.limits.Lease
}

// keys returns the record, agent-index and (outside Cluster)
// global-index keys, and the record's members in the two indexes.
func (s *idem) keys(agentID, key string) (keys []string, member, global string) {
	keys = []string{s.c.agentKey(agentID, "i:"+key), s.c.agentKey(agentID, "iz")}
	if !s.c.cluster {
		keys = append(keys, s.c.globalKey("iz"))
	}
	return keys, key, agentID + " " + key
}

// appendClaimArgs appends to dst claim's A (claimFuncLua) for req and
// token, now (Unix ms: the claim's at, which claimed is given too), the
// deadline given, the record's index members given (keys' member and
// global): the ARGV claimScript takes, and the tail presentScript and
// resolveScript pass on. It allocates only when dst has less than
// claimArgsLen spare capacity.
func (s *idem) appendClaimArgs(dst []any, req idempotency.ClaimRequest, token string, now, deadline int64, member, global string) []any {
	p := "0"
	if req.Pending {
		p = "1"
	}
	return append(dst, now, req.Fingerprint, s.lease(req.Lease).Milliseconds(), s.limits.MaxPerAgent, s.limits.MaxRecords,
		token, req.SynthesisID, p, member, global, s.limits.Window.Milliseconds(), deadline, req.Holder.Node, req.Holder.What)
}

// claimArgsLen is the number of arguments appendClaimArgs appends.
const claimArgsLen = 14

func (s *idem) Claim(ctx context.Context, req idempotency.ClaimRequest) (store.Claimed, error) {
	if err := s.c.quarantined(); err != nil {
		return store.Claimed{}, err
	}
	keys, member, global := s.keys(req.AgentID, req.Key)
	token := store.NewToken()
	ctx, deadline, cancel := s.c.claimDeadline(ctx)
	defer cancel()
	start := time.Now()
	now := s.c.nowMS()
	args := s.appendClaimArgs(make([]any, 0, claimArgsLen), req, token, now, deadline, member, global)
	v, err := claimScript.Run(ctx, s.c.rdb, keys, args...).Slice()
	if err = s.c.done(store.OpClaim, start, err); err != nil {
		if mayHaveRun(err) {
			s.releaseLater(req, token)
		}
		return store.Claimed{}, err
	}
	return s.claimed(ctx, req, token, now, v)
}

// claimed turns claim's reply (outcome code, stored answer, and the
// hold met) into a Claimed; now is the claim's A[1] (its at). A claim made while a restarted server's
// quarantine started (the connection that ran it found the new run) is
// released and refused; one that reached Redis past its deadline is
// store.ErrUnavailable (it wrote nothing).
func (s *idem) claimed(ctx context.Context, req idempotency.ClaimRequest, token string, now int64, v []any) (store.Claimed, error) {
	if len(v) == 0 {
		return store.Claimed{}, fmt.Errorf("%w: claim script returned nothing", store.ErrUnavailable)
	}
	code, _ := v[0].(int64)
	// A restart seen before this point quarantines the claim (below)
	// unless the quarantine is off; either way, one seen after it is
	// one the claim's key may have been lost with.
	gen := s.c.restarts.Load()
	if err := s.c.quarantined(); err != nil {
		if code == 0 {
			_ = (&claim{s: s, agent: req.AgentID, key: req.Key, token: token}).Abandon(ctx)
		}
		return store.Claimed{}, err
	}
	raw := replyString(v, 1)
	var stored *idempotency.Response
	if raw != "" {
		var err error
		if stored, err = idempotency.DecodeResponse([]byte(raw)); err != nil {
			return store.Claimed{}, fmt.Errorf("%w: stored answer of key %q: %v", store.ErrUnavailable, req.Key, err)
		}
	}
	switch code {
	case 0:
		cl := &claim{s: s, agent: req.AgentID, key: req.Key, token: token, preview: stored,
			fp: req.Fingerprint, lease: req.Lease, holder: req.Holder, at: now, gen: gen}
		s.c.live.Store(token, cl)
		return store.Claimed{Outcome: idempotency.Execute, Claim: cl}, nil
	case 1:
		return store.Claimed{Outcome: idempotency.Replay, Response: stored}, nil
	case 2:
		return store.Claimed{Outcome: idempotency.Mismatch}, nil
	case 3, 7:
		o := idempotency.InFlight
		if code == 7 {
			o = idempotency.OutcomeUnknown
		}
		return store.Claimed{Outcome: o, Hold: replyHold(v, 2)}, nil
	case 4:
		return store.Claimed{Outcome: idempotency.AgentFull}, nil
	case 5:
		return store.Claimed{Outcome: idempotency.StoreFull}, nil
	case 6:
		return store.Claimed{Outcome: idempotency.OtherContract}, nil
	case 8:
		return store.Claimed{}, fmt.Errorf("%w: the claim reached Redis after the gateway stopped waiting for it, and wrote nothing", store.ErrUnavailable)
	}
	return store.Claimed{}, fmt.Errorf("%w: claim script returned outcome %d", store.ErrUnavailable, code)
}

// replyString is v[i] as a string, "" when absent.
func replyString(v []any, i int) string {
	if i < len(v) {
		s, _ := v[i].(string)
		return s
	}
	return ""
}

// replyInt is v[i] as an integer, 0 when absent.
func replyInt(v []any, i int) int64 {
	if i < len(v) {
		n, _ := v[i].(int64)
		return n
	}
	return 0
}

// replyHold reads {lease end, claimed at, node, what} from v at i.
func replyHold(v []any, i int) *idempotency.Hold {
	return &idempotency.Hold{Holder: idempotency.Holder{Node: replyString(v, i+2), What: replyString(v, i+3)},
		ClaimedAt: time.UnixMilli(replyInt(v, i+1)), LeaseEnds: time.UnixMilli(replyInt(v, i))}
}

// mayHaveRun reports whether a call that failed with err may have run
// at Redis: false when it was never sent (no connection could be made
// or taken from the pool, or the client is closed) or Redis answered
// with an error reply (it refused the script), true otherwise (a
// timeout or a connection lost after the command was written).
func mayHaveRun(err error) bool {
	var op *net.OpError
	var re redis.Error
	switch {
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	case errors.As(err, &re):
		return false
	}
	return true
}

// releaseLater releases, in the background, a claim whose script call
// failed: it may have run at Redis (its reply lost), and the engine
// answered 503 "nothing was executed", so the key must be free for the
// retry (store.ErrUnavailable).
func (s *idem) releaseLater(req idempotency.ClaimRequest, token string) {
	cl := &claim{s: s, agent: req.AgentID, key: req.Key, token: token}
	s.c.background("releasing a claim whose script call failed", s.lease(req.Lease), backgroundFirst, func(ctx context.Context) error { return cl.Abandon(ctx) },
		zap.String("agent_id", req.AgentID), zap.String("key", req.Key))
}

// Len counts the records outside Cluster mode (the global index); -1 in
// Cluster mode, where no gateway-wide index is kept.
func (s *idem) Len(ctx context.Context) (int, error) {
	if s.c.cluster {
		return -1, nil
	}
	start := time.Now()
	n, err := s.c.rdb.ZCount(ctx, s.c.globalKey("iz"), "("+strconv.FormatInt(s.c.nowMS(), 10), "+inf").Result()
	if err = s.c.done(store.OpCount, start, err); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Peek reads the record of (agentID, key).
func (s *idem) Peek(ctx context.Context, agentID, key string) (idempotency.KeyState, bool, error) {
	keys, _, _ := s.keys(agentID, key)
	start := time.Now()
	v, err := s.c.rdb.HMGet(ctx, keys[0], "exp", "st", "lease", "at", "n", "w").Result()
	if err = s.c.done(store.OpSettle, start, err); err != nil {
		return idempotency.KeyState{}, false, err
	}
	num := func(i int) int64 {
		str, _ := v[i].(string)
		n, _ := strconv.ParseInt(str, 10, 64)
		return n
	}
	now := s.c.nowMS()
	exp := num(0)
	if exp <= now {
		return idempotency.KeyState{}, false, nil
	}
	st := idempotency.KeyState{Expires: time.UnixMilli(exp)}
	if v[1] != nil {
		st.State, st.Status = idempotency.StateAnswered, int(num(1))
		return st, true, nil
	}
	str := func(i int) string { x, _ := v[i].(string); return x }
	st.Hold = &idempotency.Hold{Holder: idempotency.Holder{Node: str(4), What: str(5)},
		ClaimedAt: time.UnixMilli(num(3)), LeaseEnds: time.UnixMilli(num(2))}
	st.State = idempotency.StateInFlight
	if num(2) <= now {
		st.State = idempotency.StateOutcomeUnknown
	}
	return st, true, nil
}

// Release drops an outcome-unknown record (settleScript).
func (s *idem) Release(ctx context.Context, agentID, key string) (idempotency.KeyState, error) {
	return s.settle(ctx, agentID, key, "release", idempotency.Response{})
}

// Resolve stores resp as an outcome-unknown key's answer (settleScript).
func (s *idem) Resolve(ctx context.Context, agentID, key string, resp idempotency.Response) (idempotency.KeyState, error) {
	return s.settle(ctx, agentID, key, "resolve", resp)
}

func (s *idem) settle(ctx context.Context, agentID, key, action string, resp idempotency.Response) (idempotency.KeyState, error) {
	keys, member, global := s.keys(agentID, key)
	var raw []byte
	if action != "release" {
		raw = idempotency.EncodeResponse(resp)
	}
	// Bounded as a claim is: a settle the operator was answered 503 for
	// (nothing was settled) must not take effect when a stalled Redis
	// resumes, unrecorded, and leave a second settle refused.
	ctx, deadline, cancel := s.c.claimDeadline(ctx)
	defer cancel()
	start := time.Now()
	v, err := settleScript.Run(ctx, s.c.rdb, keys, s.c.nowMS(), action, raw, resp.Status, s.limits.Window.Milliseconds(), member, global, deadline).Slice()
	if err = s.c.done(store.OpSettle, start, err); err != nil {
		return idempotency.KeyState{}, err
	}
	switch replyInt(v, 0) {
	case 4:
		return idempotency.KeyState{}, fmt.Errorf("%w: the settle reached Redis after the gateway stopped waiting for it, and wrote nothing", store.ErrUnavailable)
	case 0:
		return idempotency.KeyState{}, idempotency.ErrNoRecord
	case 1:
		return idempotency.KeyState{State: idempotency.StateAnswered, Status: int(replyInt(v, 1)), Expires: time.UnixMilli(replyInt(v, 2))}, idempotency.ErrAnswered
	case 2:
		return idempotency.KeyState{State: idempotency.StateInFlight, Hold: replyHold(v, 1), Expires: time.UnixMilli(replyInt(v, 5))}, idempotency.ErrLeaseLive
	}
	return idempotency.KeyState{State: idempotency.StateOutcomeUnknown, Hold: replyHold(v, 1), Expires: time.UnixMilli(replyInt(v, 5))}, nil
}

// claim is a Redis claim, fenced by its random token.
type claim struct {
	s          *idem
	agent, key string
	token      string
	preview    *idempotency.Response
	// fp, lease, holder and at are what Renew writes again when Redis
	// lost the record.
	fp     string
	lease  time.Duration
	holder idempotency.Holder
	at     int64
	// gen is the client's restarts when the claim was taken: a
	// Complete that finds no record of the key left writes its answer
	// afresh when a restart was seen since (Redis lost the key with its
	// data, and nothing else holds it), not when none was (an operator
	// released the key: its repeat runs).
	gen int64
	// mu orders Renew against Complete and Abandon: once either was
	// called (ended), Renew writes nothing, so a renewal in flight can
	// never bring back a key the request released.
	mu    sync.Mutex
	ended bool
	// settled: a Complete or Abandon returned nil (took effect, or
	// found the key no longer held). A call that failed leaves it
	// unset, so the call may be retried (the scripts are fenced by the
	// token: a retry after one that took effect, its reply lost, is a
	// no-op).
	settled bool
}

// end marks c ended (Complete or Abandon called) and drops it from the
// client's live claims.
func (c *claim) end() {
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	c.s.c.live.Delete(c.token)
}

// restoreTries and restoreWait bound Complete's restore of a key Redis
// lost in a restart while another node's claim, refused by that node's
// quarantine, still holds it: at most 5 tries 100 ms apart.
const (
	restoreTries = 5
	restoreWait  = 100 * time.Millisecond
)

// Complete stores resp for replay: completeScript, fenced by the claim's
// token. Called off the answer path (store.OffAnswerPath, a settle), it
// is gathered with the records and other settles into one batch of the
// record writer (Client.run).
func (c *claim) Complete(ctx context.Context, resp idempotency.Response) error {
	c.end()
	if c.settled {
		return nil
	}
	keys, member, global := c.s.keys(c.agent, c.key)
	raw := idempotency.EncodeResponse(resp)
	previewed, contract := resp.Previewed, resp.Contract.SynthesisID
	start := time.Now()
	n, err := c.s.c.run(ctx, completeScript, keys, c.s.c.nowMS(), c.token, c.s.limits.Window.Milliseconds(),
		raw, resp.Status, previewed, contract, member, global).Int()
	if err == nil && (n == 0 || n == 4) && c.s.c.restarts.Load() > c.gen {
		// Redis restarted (or failed over) since the claim, and the key
		// is no longer this claim's: Redis lost it with its data (the
		// claim had ended, so reassert did not write it again). The
		// request ran; its answer is written afresh, so a repeat after
		// the restart's quarantine replays it instead of running the
		// key a second time. Another node's claim may hold the key for
		// a moment: one that met the restart in its own call releases
		// it at once (idem.claimed), so the restore is tried again
		// while it does.
		for i := 1; ; i++ {
			n, err = c.s.c.run(ctx, completeScript, keys, c.s.c.nowMS(), c.token, c.s.limits.Window.Milliseconds(),
				raw, resp.Status, previewed, contract, member, global, "1", c.fp).Int()
			if err != nil || n != 0 || i == restoreTries {
				break
			}
			t := time.NewTimer(restoreWait)
			select {
			case <-ctx.Done():
				t.Stop()
				err = ctx.Err()
			case <-t.C:
			}
			if err != nil {
				break
			}
		}
	}
	err = c.s.c.done(store.OpComplete, start, err)
	c.settled = err == nil
	if err == nil && (n == 0 || n == 4) {
		return store.ErrClaimLost
	}
	return err
}

// Abandon releases the key: abandonScript, fenced by the token; off the
// answer path, gathered as Complete is.
func (c *claim) Abandon(ctx context.Context) error {
	c.end()
	if c.settled {
		return nil
	}
	keys, member, global := c.s.keys(c.agent, c.key)
	start := time.Now()
	_, err := c.s.c.run(ctx, abandonScript, keys, c.s.c.nowMS(), c.token, member, global).Result()
	err = c.s.c.done(store.OpAbandon, start, err)
	c.settled = err == nil
	return err
}

func (c *claim) Renew(ctx context.Context, lease time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return store.ErrClaimLost
	}
	if lease <= 0 {
		lease = c.lease
	}
	keys, member, global := c.s.keys(c.agent, c.key)
	start := time.Now()
	n, err := renewScript.Run(ctx, c.s.c.rdb, keys, c.s.c.nowMS(), c.token, c.s.lease(lease).Milliseconds(),
		c.s.limits.Window.Milliseconds(), member, global, c.fp, c.at, c.holder.Node, c.holder.What).Int()
	if err = c.s.c.done(store.OpRenew, start, err); err != nil {
		return err
	}
	if n == 0 {
		return store.ErrClaimLost
	}
	return nil
}

func (c *claim) Preview() *idempotency.Response {
	if c.preview == nil {
		return nil
	}
	cp := *c.preview
	cp.Body = slices.Clone(c.preview.Body)
	return &cp
}

func (c *claim) Key() (string, string) { return c.agent, c.key }
func (c *claim) Token() string         { return c.token }

// ClaimedAt (store.Claim) is the record's at, to the millisecond: the
// Hold.ClaimedAt a request that finds the key in flight reads.
func (c *claim) ClaimedAt() time.Time { return time.UnixMilli(c.at) }
