package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// An Idempotency-Key record is a hash at P{a:AGENT}:i:KEY:
//
//	fp   the request fingerprint
//	exp  when the record stops holding the key (Unix ms): the claim's
//	     hold while in flight, the window once completed
//	tok  the fencing token of the claim in flight (absent once done)
//	ct   the token of the claim that completed the record, so that a
//	     retried Complete whose first reply was lost is told apart
//	     from one whose claim lost the key
//	st   the stored answer's status (absent while in flight)
//	r    the stored answer (encodeResponse)
//	pv   the synthesis id a stored 461 previews ("" otherwise)
//	cs   the synthesis id of the contract the stored answer ran
//	ps, pr, ppv, pcs, pexp   a 461 preview a confirmation took over
//
// with a TTL at exp, and its key in the agent's index P{a:AGENT}:iz (a
// sorted set scored by exp) that bounds the agent's records. Outside
// Cluster the gateway-wide index P{g}:iz (members "AGENT KEY") bounds
// the total in the same script; in Cluster mode the total is not
// tracked (docs/cluster.md).

// claimScript claims KEYS[1] (the record) with KEYS[2] (the agent's
// index) and, when given, KEYS[3] (the gateway-wide index).
// ARGV: now, fp, hold, max per agent, max records, token, presented
// synthesis id ("" for a plain claim), pending ("1"/"0"), the record's
// member in the agent's index, its member in the global index.
// Returns {outcome} or {outcome, stored answer}; outcomes as
// idempotency.Outcome.
var claimScript = redis.NewScript(claimLua)

// claimFuncLua defines claim(K, A): claimScript's logic with KEYS as K
// and ARGV as A, shared with presentScript.
const claimFuncLua = `
local function claim(K, A)
  local now = tonumber(A[1])
  local hold = now + tonumber(A[3])
  local r = redis.call('HMGET', K[1], 'fp', 'st', 'pv', 'cs', 'exp', 'r')
  local exp = tonumber(r[5])
  local function index(score)
    redis.call('PEXPIREAT', K[1], score)
    redis.call('ZADD', K[2], score, A[9])
    if redis.call('PTTL', K[2]) == -1 then redis.call('PEXPIREAT', K[2], score) else redis.call('PEXPIREAT', K[2], score, 'GT') end
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
        redis.call('HSET', K[1], 'ps', r[2], 'pr', r[6], 'ppv', pv, 'pcs', cs, 'pexp', r[5], 'tok', A[6], 'exp', hold)
        redis.call('HDEL', K[1], 'st', 'r', 'pv', 'cs')
        index(hold)
        return {0, r[6]}
      end
    end
    if r[1] ~= A[2] then return {2} end
    if not done then return {3} end
    return {1, r[6]}
  end
  redis.call('ZREMRANGEBYSCORE', K[2], '-inf', now)
  if K[3] then
    redis.call('ZREMRANGEBYSCORE', K[3], '-inf', now)
    if redis.call('ZCARD', K[3]) >= tonumber(A[5]) then return {5} end
  end
  if redis.call('ZCARD', K[2]) >= tonumber(A[4]) then return {4} end
  redis.call('DEL', K[1])
  redis.call('HSET', K[1], 'fp', A[2], 'tok', A[6], 'exp', hold)
  index(hold)
  return {0}
end
`

// claimLua is claimScript's source.
const claimLua = claimFuncLua + `return claim(KEYS, ARGV)
`

// completeScript stores the answer of the claim whose token is ARGV[2].
// KEYS as claimScript. ARGV: now, token, window, answer, status,
// previewed id, contract id, agent-index member, global member.
// Returns 1 when stored, 2 when this claim stored it before (a retry
// whose first reply was lost), 0 when the claim no longer holds the key.
var completeScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'tok', 'exp', 'st', 'ct')
if r[4] == ARGV[2] then return 2 end
if r[1] ~= ARGV[2] or r[3] ~= false or not tonumber(r[2]) or tonumber(r[2]) <= now then return 0 end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'r', ARGV[4], 'st', ARGV[5], 'pv', ARGV[6], 'cs', ARGV[7], 'exp', exp, 'ct', ARGV[2])
redis.call('HDEL', KEYS[1], 'tok', 'ps', 'pr', 'ppv', 'pcs', 'pexp')
redis.call('PEXPIREAT', KEYS[1], exp)
redis.call('ZADD', KEYS[2], exp, ARGV[8])
if redis.call('PTTL', KEYS[2]) == -1 then redis.call('PEXPIREAT', KEYS[2], exp) else redis.call('PEXPIREAT', KEYS[2], exp, 'GT') end
if KEYS[3] then redis.call('ZADD', KEYS[3], exp, ARGV[9]) end
return 1
`)

// abandonScript releases the claim whose token is ARGV[2]: a taken-over
// preview is restored with its expiry, any other record is deleted.
// KEYS as claimScript. ARGV: now, token, agent-index member, global
// member. Returns 0 (no longer held), 1 (released) or 2 (preview
// restored).
var abandonScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'tok', 'exp', 'st', 'pexp', 'pr', 'ps', 'ppv', 'pcs')
if r[1] ~= ARGV[2] or r[3] ~= false or not tonumber(r[2]) or tonumber(r[2]) <= now then return 0 end
if r[4] then
  local pexp = tonumber(r[4])
  redis.call('HSET', KEYS[1], 'r', r[5], 'st', r[6], 'pv', r[7], 'cs', r[8], 'exp', pexp)
  redis.call('HDEL', KEYS[1], 'tok', 'ps', 'pr', 'ppv', 'pcs', 'pexp')
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

// hold is how long a new claim holds its key (idempotency.Store's rule).
func (s *idem) hold() time.Duration { return max(s.limits.Window, s.limits.InFlightHold) }

// keys returns the record, agent-index and (outside Cluster)
// global-index keys, and the record's members in the two indexes.
func (s *idem) keys(agentID, key string) (keys []string, member, global string) {
	keys = []string{s.c.agentKey(agentID, "i:"+key), s.c.agentKey(agentID, "iz")}
	if !s.c.cluster {
		keys = append(keys, s.c.globalKey("iz"))
	}
	return keys, key, agentID + " " + key
}

func (s *idem) Claim(ctx context.Context, agentID, key, fp string) (store.Claimed, error) {
	return s.claim(ctx, agentID, key, fp, "", false)
}

func (s *idem) ClaimConfirming(ctx context.Context, agentID, key, fp, synthesisID string, pending bool) (store.Claimed, error) {
	return s.claim(ctx, agentID, key, fp, synthesisID, pending)
}

func (s *idem) claim(ctx context.Context, agentID, key, fp, synthesisID string, pending bool) (store.Claimed, error) {
	if err := s.c.quarantined(); err != nil {
		return store.Claimed{}, err
	}
	keys, member, global := s.keys(agentID, key)
	token := store.NewToken()
	p := "0"
	if pending {
		p = "1"
	}
	start := time.Now()
	v, err := claimScript.Run(ctx, s.c.rdb, keys, s.c.nowMS(), fp, s.hold().Milliseconds(),
		s.limits.MaxPerAgent, s.limits.MaxRecords, token, synthesisID, p, member, global).Slice()
	if err = s.c.done(store.OpClaim, start, err); err != nil {
		return store.Claimed{}, err
	}
	if len(v) == 0 {
		return store.Claimed{}, fmt.Errorf("%w: claim script returned nothing", store.ErrUnavailable)
	}
	code, _ := v[0].(int64)
	raw := ""
	if len(v) > 1 {
		raw, _ = v[1].(string)
	}
	return s.claimed(ctx, agentID, key, token, code, raw)
}

// claimed turns the claim logic's reply (outcome code, stored answer)
// into a Claimed. A claim made while a restarted server's quarantine
// started (the connection that ran it found the new run) is released
// and refused.
func (s *idem) claimed(ctx context.Context, agentID, key, token string, code int64, raw string) (store.Claimed, error) {
	if err := s.c.quarantined(); err != nil {
		if code == 0 {
			_ = (&claim{s: s, agent: agentID, key: key, token: token}).Abandon(ctx)
		}
		return store.Claimed{}, err
	}
	var stored *idempotency.Response
	if raw != "" {
		var err error
		if stored, err = decodeResponse([]byte(raw)); err != nil {
			return store.Claimed{}, fmt.Errorf("%w: stored answer of key %q: %v", store.ErrUnavailable, key, err)
		}
	}
	switch code {
	case 0:
		return store.Claimed{Outcome: idempotency.Execute, Claim: &claim{s: s, agent: agentID, key: key, token: token, preview: stored}}, nil
	case 1:
		return store.Claimed{Outcome: idempotency.Replay, Response: stored}, nil
	case 2:
		return store.Claimed{Outcome: idempotency.Mismatch}, nil
	case 3:
		return store.Claimed{Outcome: idempotency.InFlight}, nil
	case 4:
		return store.Claimed{Outcome: idempotency.AgentFull}, nil
	case 5:
		return store.Claimed{Outcome: idempotency.StoreFull}, nil
	case 6:
		return store.Claimed{Outcome: idempotency.OtherContract}, nil
	}
	return store.Claimed{}, fmt.Errorf("%w: claim script returned outcome %d", store.ErrUnavailable, code)
}

// Len counts the records outside Cluster mode (the global index); -1 in
// Cluster mode, where no gateway-wide index is kept.
func (s *idem) Len(ctx context.Context) (int, error) {
	if s.c.cluster {
		return -1, nil
	}
	start := time.Now()
	n, err := s.c.rdb.ZCount(ctx, s.c.globalKey("iz"), "("+strconv.FormatInt(s.c.nowMS(), 10), "+inf").Result()
	if err = s.c.done(store.OpClaim, start, err); err != nil {
		return 0, err
	}
	return int(n), nil
}

// claim is a Redis claim, fenced by its random token.
type claim struct {
	s          *idem
	agent, key string
	token      string
	preview    *idempotency.Response
	// settled: a Complete or Abandon returned nil (took effect, or
	// found the key no longer held). A call that failed leaves it
	// unset, so the call may be retried (the scripts are fenced by the
	// token: a retry after one that took effect, its reply lost, is a
	// no-op).
	settled bool
}

func (c *claim) Complete(ctx context.Context, resp idempotency.Response) error {
	if c.settled {
		return nil
	}
	keys, member, global := c.s.keys(c.agent, c.key)
	raw, err := encodeResponse(resp)
	if err != nil {
		c.settled = true
		return err
	}
	previewed, contract := resp.Previewed, resp.Contract.SynthesisID
	start := time.Now()
	n, err := completeScript.Run(ctx, c.s.c.rdb, keys, c.s.c.nowMS(), c.token, c.s.limits.Window.Milliseconds(),
		raw, resp.Status, previewed, contract, member, global).Int()
	err = c.s.c.done(store.OpComplete, start, err)
	c.settled = err == nil
	if err == nil && n == 0 {
		return store.ErrClaimLost
	}
	return err
}

func (c *claim) Abandon(ctx context.Context) error {
	if c.settled {
		return nil
	}
	keys, member, global := c.s.keys(c.agent, c.key)
	start := time.Now()
	_, err := abandonScript.Run(ctx, c.s.c.rdb, keys, c.s.c.nowMS(), c.token, member, global).Result()
	err = c.s.c.done(store.OpAbandon, start, err)
	c.settled = err == nil
	return err
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

// storedHeaders are the header fields a record keeps
// (idempotency.Response.Header).
var storedHeaders = []string{"Content-Type", "Location", "Negotiation-Id"}

// responseHead is the JSON line before a stored answer's body.
type responseHead struct {
	Status    int                     `json:"s"`
	Header    map[string]string       `json:"h,omitempty"`
	Contract  idempotency.ContractRef `json:"c"`
	Previewed string                  `json:"p,omitempty"`
}

// encodeResponse frames resp as one JSON line (status, the kept header
// fields, contract, previewed id) followed by the body as sent.
func encodeResponse(resp idempotency.Response) ([]byte, error) {
	h := responseHead{Status: resp.Status, Contract: resp.Contract, Previewed: resp.Previewed}
	for k, v := range resp.Header {
		k = http.CanonicalHeaderKey(k)
		if slices.Contains(storedHeaders, k) {
			if h.Header == nil {
				h.Header = map[string]string{}
			}
			h.Header[k] = v
		}
	}
	head, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(head)+1+len(resp.Body))
	out = append(append(append(out, head...), '\n'), resp.Body...)
	return out, nil
}

// decodeResponse reads what encodeResponse wrote.
func decodeResponse(raw []byte) (*idempotency.Response, error) {
	head, body, ok := bytes.Cut(raw, []byte("\n"))
	if !ok {
		return nil, fmt.Errorf("no header line")
	}
	var h responseHead
	if err := json.Unmarshal(head, &h); err != nil {
		return nil, err
	}
	r := &idempotency.Response{Status: h.Status, Header: h.Header, Contract: h.Contract, Previewed: h.Previewed}
	if len(body) > 0 {
		r.Body = slices.Clone(body)
	}
	return r, nil
}
