package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/closecache"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// A contract is a hash at P{a:AGENT}:c:ID (AGENT its originating
// agent):
//
//	s     state: pending, active, revoked, released or expired
//	exp   ExpiresAt (Unix ms)
//	at    when it ended (Unix ms; absent while live)
//	seq   its issue order among the agent's contracts
//	m, p  its method and path
//	meta  recipes.CapturedContract as JSON
//	plan  its captured plan (recipes.Recipe.Plan)
//
// kept until its tombstone ends (a TTL at exp + TombstoneTTL, or at the
// end + TombstoneTTL once revoked or released). Beside it, in the
// agent's slot: P{a:AGENT}:cz, the agent's live contracts scored by
// exp (the per-agent bound), P{a:AGENT}:cp:METHOD PATH, the pair index
// scored by seq (Tier C by pair), and P{a:AGENT}:cseq. Elsewhere: the
// owner index P{o:ID} → AGENT (a presentation by another agent learns
// whose it is) and the gateway-wide live index P{g}:cl ("AGENT ID"
// scored by exp) that List("") and Len read. Outside Cluster the mint
// script checks the total bound on P{g}:cl; in Cluster mode P{g}:cl is
// written beside the script and the total is not enforced
// (docs/cluster.md).

// mintFuncLua defines mint(K, A, pair_absent), shared by mintScript and
// resolveScript (each starts with timeFuncLua): stores a new
// contract. K: contract, agent live index, pair index, agent
// sequence, [global live index]. A: now, exp, state, meta, plan, max
// per agent, max contracts, kept until, id, global member, method,
// path, join ("1"/"0"), the agent's contract key prefix, deadline
// (Unix ms on Redis's own clock, 0: none). Returns {0} stored, {1,
// held} store full, {2, held} agent full, {3} the id exists, {4, id}
// joined: with join set, the agent holds an active contract for the
// pair (a concurrent first call minted it), and nothing was minted,
// {5} the call reached Redis after its deadline (its caller gave up
// and answered 503) and minted nothing. pair_absent, when true, says
// the pair index K[3] does not exist (a scan in the same script found
// it empty): its expiry is then set without first trying to extend
// one, as it is when join's own scan finds it empty. Index expiries
// only move later (extend: PEXPIREAT GT, then NX for a key without
// one), one command when they do.
const mintFuncLua = `
local function mint(K, A, pair_absent)
  local dl = tonumber(A[15] or 0)
  if dl > 0 and redis_ms() > dl then return {5} end
  local now = tonumber(A[1])
  local function extend(key, at)
    if redis.call('PEXPIREAT', key, at, 'GT') == 0 then redis.call('PEXPIREAT', key, at, 'NX') end
  end
  if redis.call('EXISTS', K[1]) == 1 then return {3} end
  if A[13] == '1' then
    local ids = redis.call('ZREVRANGE', K[3], 0, -1)
    for _, id in ipairs(ids) do
      local r = redis.call('HMGET', A[14] .. id, 's', 'exp')
      if r[1] == 'active' and tonumber(r[2] or 0) > now then return {4, id} end
    end
    pair_absent = #ids == 0
  end
  redis.call('ZREMRANGEBYSCORE', K[2], '-inf', now)
  if K[5] then
    redis.call('ZREMRANGEBYSCORE', K[5], '-inf', now)
    local n = redis.call('ZCARD', K[5])
    if n >= tonumber(A[7]) then return {1, n} end
  end
  local n = redis.call('ZCARD', K[2])
  if n >= tonumber(A[6]) then return {2, n} end
  local seq = redis.call('INCR', K[4])
  redis.call('HSET', K[1], 's', A[3], 'exp', A[2], 'seq', seq, 'm', A[11], 'p', A[12], 'meta', A[4], 'plan', A[5])
  redis.call('PEXPIREAT', K[1], A[8])
  redis.call('ZADD', K[2], A[2], A[9])
  extend(K[2], A[8])
  redis.call('ZADD', K[3], seq, A[9])
  if pair_absent then redis.call('PEXPIREAT', K[3], A[8]) else extend(K[3], A[8]) end
  if K[5] then redis.call('ZADD', K[5], A[2], A[10]) end
  return {0}
end
`

// mintScript stores a new contract: mint(KEYS, ARGV).
var mintScript = denyOOM(timeFuncLua + mintFuncLua + `return mint(KEYS, ARGV)
`)

// activateScript marks a pending contract active. KEYS: contract.
// Returns 1 when it was pending.
var activateScript = denyOOM(`
if redis.call('HGET', KEYS[1], 's') == 'pending' then
  redis.call('HSET', KEYS[1], 's', 'active')
  return 1
end
return 0
`)

// endScript ends a live contract. KEYS: contract, agent live index,
// pair index. ARGV: now, state, kept until, id, end time. Returns {1
// when it was live else 0, the longest lease (ms) a node took on it
// (presentScript's ls; 0: none)}.
var endScript = allowOOM(`
local now = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 's', 'exp', 'ls')
local ls = tonumber(r[3]) or 0
if (r[1] ~= 'pending' and r[1] ~= 'active') or tonumber(r[2]) <= now then return {0, ls} end
redis.call('HSET', KEYS[1], 's', ARGV[2], 'at', ARGV[5])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('ZREM', KEYS[3], ARGV[4])
return {1, ls}
`)

// pairFuncLua defines newest(pair index, contract key prefix, now):
// the newest active contract's id in a pair index, "" for none,
// dropping the ended and expired ones it passes; with "", also the
// number of members left in the index (its live pending contracts: 0
// when the index no longer exists).
const pairFuncLua = `
local function newest(pairKey, prefix, now)
  local ids = redis.call('ZREVRANGE', pairKey, 0, -1)
  local left = 0
  for _, id in ipairs(ids) do
    local r = redis.call('HMGET', prefix .. id, 's', 'exp')
    local live = (r[1] == 'pending' or r[1] == 'active') and tonumber(r[2]) > now
    if not live then
      redis.call('ZREM', pairKey, id)
    elseif r[1] == 'active' then
      return id
    else
      left = left + 1
    end
  end
  return '', left
end
`

// pairScript returns the newest active contract's id of a pair index,
// or nil. KEYS: pair index. ARGV: now, the agent's contract key prefix.
var pairScript = denyOOM(pairFuncLua + `
local id = newest(KEYS[1], ARGV[2], tonumber(ARGV[1]))
if id == '' then return false end
return id
`)

// contracts is the Redis contract store.
type contracts struct {
	c      *Client
	limits recipes.StoreLimits
	rs     *recipes.Restorer
	// cache holds decoded contracts by synthesis id: their immutable
	// part with the compiled plan (the state is always read from Redis).
	cache *closecache.Cache[string, *recipes.Contract]
	// served (Cluster mode only) holds the pairs this node saw served by
	// a live contract ("AGENT\x00METHOD PATH", until that contract's
	// expiry): ResolvePair then does not send a gate synthesis's
	// writes in other slots beside its script (servedHint).
	served *closecache.Cache[string, struct{}]
	// leases holds the active contracts this node read in an unkeyed
	// presentation, by "AGENT\x00ID", each until its lease ends
	// (leasedPresentation): Config.ContractLease after the read was
	// sent. nil when ContractLease is negative.
	leases *closecache.Cache[string, lease]
	// leaseFor is Config.ContractLease (<= 0: no leases).
	leaseFor time.Duration
}

// lease is an active contract read from Redis, answered from this node
// until until (a monotonic reading) and while now < exp (ms).
type lease struct {
	c     *recipes.Contract
	exp   int64
	until time.Time
}

// nodeCache is one of a node's bounded caches of contracts (decoded,
// leases, served pairs): n entries of cost 1, ristretto's usual ten
// counters per entry.
func nodeCache[V any](n int) (*closecache.Cache[string, V], error) {
	c, err := ristretto.NewCache(&ristretto.Config[string, V]{
		NumCounters: 10 * int64(n), MaxCost: int64(n), BufferItems: 64, IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, err
	}
	return closecache.New(c), nil
}

func newContracts(c *Client, l recipes.StoreLimits, rs *recipes.Restorer) (*contracts, error) {
	n := c.cfg.MaxContractsCached
	decoded, err := nodeCache[*recipes.Contract](n)
	if err != nil {
		return nil, fmt.Errorf("redisstore: contract cache: %w", err)
	}
	s := &contracts{c: c, limits: store.ContractLimits(l), rs: rs, cache: decoded}
	if c.cfg.ContractLease > 0 {
		if s.leases, err = nodeCache[lease](n); err != nil {
			s.close()
			return nil, fmt.Errorf("redisstore: lease cache: %w", err)
		}
		s.leaseFor = c.cfg.ContractLease
	}
	if c.cluster {
		if s.served, err = nodeCache[struct{}](n); err != nil {
			s.close()
			return nil, fmt.Errorf("redisstore: pair cache: %w", err)
		}
	}
	return s, nil
}

// close detaches the caches (store.Set.Close): calls from then on read
// Redis; the caches close once no call holds them (closecache), so that
// a request of the old configuration still running cannot meet
// ristretto's Close.
func (s *contracts) close() {
	s.cache.Close()
	s.served.Close() // nil outside Cluster mode: a no-op
	s.leases.Close() // nil with leases off: a no-op
}

// leaseKey is a lease's cache key.
func leaseKey(agent, id string) string { return agent + "\x00" + id }

// leasedPresentation is the unkeyed presentation of presenter's
// contract id from its lease, when this node holds one that has not
// ended and the contract has not expired: no round trip.
func (s *contracts) leasedPresentation(presenter, id string) (store.Presentation, bool) {
	if s.leaseFor <= 0 {
		return store.Presentation{}, false
	}
	l, ok := s.leases.Get(leaseKey(presenter, id))
	if !ok || !time.Now().Before(l.until) || s.c.nowMS() >= l.exp {
		return store.Presentation{}, false
	}
	return store.Presentation{Contract: l.c, Lookup: recipes.LookupFound, State: recipes.StateActive}, true
}

// ListFence is MaxContractLease (store.LeaseFence): a List does not
// read the contracts a concurrent request ended, nor the leases nodes
// took on them, so the fence is the longest any node may take.
func (s *contracts) ListFence() time.Duration { return MaxContractLease }

// grantLease keeps c, read active and live by a read sent at sent, for
// unkeyed presentations until the lease ends: Config.ContractLease
// after sent, so that it ends before a revoke or release that the read
// did not see has been answered (its request waits LeaseFence after End).
func (s *contracts) grantLease(c *recipes.Contract, exp int64, sent time.Time) {
	until := sent.Add(s.leaseFor)
	if ttl := time.Until(until); ttl > 0 {
		// ristretto applies a Set in the background: Wait, so that the
		// next presentation finds it (once per lease and contract).
		if s.leases.SetWithTTL(leaseKey(c.OriginatingAgentID, c.SynthesisID), lease{c: c, exp: exp, until: until}, 1, ttl) {
			s.leases.Wait()
		}
	}
}

func (s *contracts) Limits() recipes.StoreLimits { return s.limits }

func (s *contracts) key(agent, id string) string { return s.c.agentKey(agent, "c:"+id) }
func (s *contracts) ownerKey(id string) string   { return s.c.prefix + "{o:" + id + "}" }
func (s *contracts) pairKey(agent, method, path string) string {
	return s.c.agentKey(agent, "cp:"+method+" "+path)
}

// keptUntil is when a contract that ends at end (Unix ms) leaves its
// tombstone.
func (s *contracts) keptUntil(end int64) int64 { return end + s.limits.TombstoneTTL.Milliseconds() }

// Mint runs the mint script, the owner index write and (in Cluster mode)
// the global index write in one pipeline: one round trip.
func (s *contracts) Mint(ctx context.Context, c *recipes.Contract, mode string) (string, error) {
	state, _, err := s.mint(ctx, c, mode, false)
	return state, err
}

func (s *contracts) MintForPair(ctx context.Context, c *recipes.Contract, mode string) (string, *recipes.Contract, error) {
	return s.mint(ctx, c, mode, true)
}

// mint is Mint, joining a live contract of the pair when join is set
// (MintForPair).
// mintCall is one mint's keys and arguments (mintFuncLua's K and A).
type mintCall struct {
	state        string
	keys         []string
	args         []any
	member, keep string
}

// mintCall prepares c's mint in mode (join: MintForPair).
func (s *contracts) mintCall(c *recipes.Contract, mode string, join bool) (mintCall, error) {
	state := store.InitialState(c.NegotiationOrigin, mode)
	cc, plan, err := c.Capture()
	if err != nil {
		return mintCall{}, err
	}
	meta, err := cc.Marshal()
	if err != nil {
		return mintCall{}, err
	}
	agent, id := c.OriginatingAgentID, c.SynthesisID
	exp := c.ExpiresAt.UnixMilli()
	keep := s.keptUntil(exp)
	member := agent + " " + id
	keys := []string{s.key(agent, id), s.c.agentKey(agent, "cz"), s.pairKey(agent, c.Method, c.Path), s.c.agentKey(agent, "cseq")}
	if !s.c.cluster {
		keys = append(keys, s.c.globalKey("cl"))
	}
	return mintCall{state: state, keys: keys, member: member, keep: strconv.FormatInt(keep, 10), args: []any{s.c.nowMS(), exp, state, meta, plan,
		s.limits.MaxPerAgent, s.limits.MaxContracts, keep, id, member, c.Method, c.Path, flag(join),
		s.c.agentKey(agent, "c:"), int64(0)}}, nil
}

func (s *contracts) mint(ctx context.Context, c *recipes.Contract, mode string, join bool) (string, *recipes.Contract, error) {
	m, err := s.mintCall(c, mode, join)
	if err != nil {
		return "", nil, err
	}
	state, id := m.state, c.SynthesisID
	// A deadline on Redis's own clock, as a claim's: a mint that reaches
	// Redis after this call gave up mints nothing (the writes beside it
	// are then undone).
	ctx, deadline, cancel := s.c.claimDeadline(ctx)
	defer cancel()
	m.args[len(m.args)-1] = deadline
	start := time.Now()
	if s.c.cluster {
		// The writes in other slots go concurrently, and the call waits
		// for them only when it minted (besideCall).
		b := s.startBeside(ctx, c, m, deadline)
		res, err := mintScript.Run(ctx, s.c.rdb, m.keys, m.args...).Slice()
		minted := err == nil && len(res) > 0 && replyInt(res, 0) == 0
		if berr := s.finishBeside(b, c, m, minted, err); berr != nil {
			err = berr
		}
		if err = s.c.done(store.OpContractMint, start, err); err != nil {
			return "", nil, err
		}
		if minted {
			s.cache.Set(id, c, 1)
			return state, nil, nil
		}
		return s.minted(ctx, c, res, res)
	}
	v, err := s.c.pipeScript(ctx, mintScript, m.keys, m.args, s.besideMint(ctx, c, m))
	if err = s.c.done(store.OpContractMint, start, err); err != nil {
		switch res, _ := v.([]any); {
		case replyInt(res, 0) == 0 && len(res) > 0:
			s.releaseLater(c, 0) // minted, its other writes failed
		case len(res) == 0 && mayHaveRun(err):
			// The script may have minted, its reply lost: release it
			// once its deadline passed (End clears its indexes either
			// way).
			s.releaseLater(c, s.c.cfg.ReadTimeout)
		case len(res) == 0:
			// The script did not run: undo the writes beside it (a
			// panic queuing it is logged; the owner index is then left
			// to its expiry).
			recovered.Go(s.c.log, "panic queuing the undoing of a contract's indexes", func() {
				_ = s.c.recs.add(queuedRecord{undo: s.unmint(c, m)})
			}, zap.String("agent_id", c.OriginatingAgentID), zap.String("synthesis_id", c.SynthesisID))
		}
		return "", nil, err
	}
	res, _ := v.([]any)
	code := int64(-1)
	if len(res) > 0 {
		code, _ = res[0].(int64)
	}
	if code == 0 {
		s.cache.Set(id, c, 1)
		return state, nil, nil
	}
	// Refused: undo the writes made beside the script.
	start = time.Now()
	_, uerr := s.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		s.unmint(c, m).write(ctx, p)
		return nil
	})
	_ = s.c.done(store.OpContractUpdate, start, uerr)
	return s.minted(ctx, c, res, v)
}

// minted reads a mint's refusal (res, code not 0; v the raw reply).
func (s *contracts) minted(ctx context.Context, c *recipes.Contract, res []any, v any) (string, *recipes.Contract, error) {
	agent, id := c.OriginatingAgentID, c.SynthesisID
	code := replyInt(res, 0)
	held := 0
	if len(res) > 1 {
		n, _ := res[1].(int64)
		held = int(n)
	}
	switch code {
	case 1:
		return "", nil, &store.LimitError{Err: store.ErrStoreFull, Held: held, Limit: s.limits.MaxContracts}
	case 2:
		return "", nil, &store.LimitError{Err: store.ErrAgentFull, Held: held, Limit: s.limits.MaxPerAgent}
	case 3:
		return "", nil, fmt.Errorf("redisstore: contract %s already exists", id)
	case 5:
		return "", nil, fmt.Errorf("%w: the mint reached Redis after its deadline and minted nothing", store.ErrUnavailable)
	case 4:
		other, err := s.contract(ctx, record{agent: agent, id: replyString(res, 1)})
		if err != nil {
			return "", nil, err
		}
		st, err := s.State(ctx, other)
		return st, other, err
	}
	return "", nil, fmt.Errorf("%w: mint script returned %v", store.ErrUnavailable, v)
}

// record is one contract hash as read.
type record struct {
	agent, id string
	state     string
	exp, at   int64
	meta      string
	plan      string
	found     bool
}

// read fetches the state fields of the contract (agent, id) and, when
// this node has not decoded it yet, its meta and plan: one HMGET.
func (s *contracts) read(ctx context.Context, op store.Op, agent, id string) (record, error) {
	_, cached := s.cache.Get(id)
	fields := []string{"s", "exp", "at"}
	if !cached {
		fields = append(fields, "meta", "plan")
	}
	start := time.Now()
	v, err := s.c.rdb.HMGet(ctx, s.key(agent, id), fields...).Result()
	if err = s.c.done(op, start, err); err != nil {
		return record{}, err
	}
	return parseRecord(agent, id, v), nil
}

// parseRecord is a contract's record from an HMGET of its state, exp,
// at, meta and plan fields (absent fields nil).
func parseRecord(agent, id string, v []any) record {
	str := func(i int) string { return replyString(v, i) }
	return recordOf(agent, id, str(0), str(1), str(2), str(3), str(4))
}

// recordOf is a contract's record from its fields as Redis holds them
// (exp and at: milliseconds, "" read as 0).
func recordOf(agent, id, state, exp, at, meta, plan string) record {
	return record{agent: agent, id: id, state: state, found: state != "", exp: msField(exp), at: msField(at), meta: meta, plan: plan}
}

// msField is a millisecond field, 0 when empty or not a number (parsed
// without the error strconv would allocate for "").
func msField(s string) int64 {
	if s == "" {
		return 0
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// contract decodes r's contract: from the node's cache, else from its
// meta and plan (fetched now when read skipped them because the cache
// held the contract then and has dropped it since).
func (s *contracts) contract(ctx context.Context, r record) (*recipes.Contract, error) {
	if c, ok := s.cache.Get(r.id); ok {
		return c, nil
	}
	if r.meta == "" {
		start := time.Now()
		v, err := s.c.rdb.HMGet(ctx, s.key(r.agent, r.id), "meta", "plan").Result()
		if err = s.c.done(store.OpContractLookup, start, err); err != nil {
			return nil, err
		}
		r.meta, r.plan = replyString(v, 0), replyString(v, 1)
		if r.meta == "" {
			return nil, fmt.Errorf("%w: contract %s vanished while read", store.ErrUnavailable, r.id)
		}
	}
	cc, err := recipes.UnmarshalCapturedContract([]byte(r.meta))
	if err != nil {
		return nil, fmt.Errorf("redisstore: contract %s: %w", r.id, err)
	}
	var rec *recipes.Recipe
	if s.rs == nil {
		return nil, fmt.Errorf("%w: contract %s: no restorer configured", recipes.ErrPlan, r.id)
	}
	if rec, err = s.rs.Restore(cc.PlanHash, []byte(r.plan)); err != nil {
		return nil, fmt.Errorf("contract %s: %w", r.id, err)
	}
	c, err := cc.Contract(rec)
	if err != nil {
		return nil, err
	}
	s.cache.Set(r.id, c, 1)
	return c, nil
}

// live reports whether r is a live contract at now (ms).
func live(r record, now int64) bool {
	return (r.state == recipes.StatePending || r.state == recipes.StateActive) && now < r.exp
}

// ended returns the state r ended in and when (ms), for a record that is
// not live.
func ended(r record) (string, int64) {
	if r.state == recipes.StatePending || r.state == recipes.StateActive {
		return recipes.StateExpired, r.exp
	}
	if r.state == recipes.StateExpired && r.at == 0 {
		return r.state, r.exp
	}
	return r.state, r.at
}

// tombKept reports whether the tombstone of an ended r is still kept.
func (s *contracts) tombKept(r record, now int64) bool {
	_, at := ended(r)
	return now-at < s.limits.TombstoneTTL.Milliseconds()
}

// find reads contract id, first in presenter's slot, else in the slot
// its owner index names.
func (s *contracts) find(ctx context.Context, presenter, id string) (record, error) {
	if presenter != "" {
		r, err := s.read(ctx, store.OpContractLookup, presenter, id)
		if err != nil || r.found {
			return r, err
		}
	}
	start := time.Now()
	owner, err := s.c.rdb.Get(ctx, s.ownerKey(id)).Result()
	if err = s.c.done(store.OpContractLookup, start, err); err != nil || owner == "" || owner == presenter {
		return record{}, err
	}
	return s.read(ctx, store.OpContractLookup, owner, id)
}

// Lookup costs one round trip when the presenter is the contract's
// agent, three when it is another agent's.
func (s *contracts) Lookup(ctx context.Context, presenter, id string) (*recipes.Contract, int, error) {
	r, err := s.find(ctx, presenter, id)
	if err != nil || !r.found {
		return nil, recipes.LookupUnknown, err
	}
	now := s.c.nowMS()
	res := recipes.LookupFound
	if !live(r, now) {
		state, _ := ended(r)
		if state == recipes.StateReleased || !s.tombKept(r, now) {
			return nil, recipes.LookupUnknown, nil
		}
		res = recipes.LookupRevoked
	}
	c, err := s.contract(ctx, r)
	if err != nil {
		return nil, recipes.LookupUnknown, err
	}
	return c, res, nil
}

func (s *contracts) Activate(ctx context.Context, c *recipes.Contract) (bool, error) {
	start := time.Now()
	n, err := activateScript.Run(ctx, s.c.rdb, []string{s.key(c.OriginatingAgentID, c.SynthesisID)}).Int()
	if err = s.c.done(store.OpContractUpdate, start, err); err != nil {
		return false, err
	}
	return n == 1, nil
}

// State reads the state: "" once the contract's tombstone is gone.
func (s *contracts) State(ctx context.Context, c *recipes.Contract) (string, error) {
	start := time.Now()
	v, err := s.c.rdb.HMGet(ctx, s.key(c.OriginatingAgentID, c.SynthesisID), "s", "exp", "at").Result()
	if err = s.c.done(store.OpContractLookup, start, err); err != nil {
		return "", err
	}
	r := parseRecord(c.OriginatingAgentID, c.SynthesisID, v)
	if !r.found {
		return "", nil
	}
	if live(r, s.c.nowMS()) {
		return r.state, nil
	}
	state, _ := ended(r)
	return state, nil
}

func (s *contracts) ActiveFor(ctx context.Context, agent, method, path string) (*recipes.Contract, error) {
	start := time.Now()
	id, err := pairScript.Run(ctx, s.c.rdb, []string{s.pairKey(agent, method, path)}, s.c.nowMS(), s.c.agentKey(agent, "c:")).Text()
	if err = s.c.done(store.OpContractPair, start, err); err != nil || id == "" {
		return nil, err
	}
	return s.contract(ctx, record{agent: agent, id: id})
}

func (s *contracts) Inspect(ctx context.Context, id string) (*recipes.Contract, string, bool, error) {
	r, err := s.find(ctx, "", id)
	if err != nil || !r.found {
		return nil, "", false, err
	}
	now := s.c.nowMS()
	state := recipes.StateActive // pending is reported as active (spec OP-33)
	if !live(r, now) {
		if !s.tombKept(r, now) {
			return nil, "", false, nil
		}
		state, _ = ended(r)
	}
	c, err := s.contract(ctx, r)
	if err != nil {
		return nil, "", false, err
	}
	return c, state, true, nil
}

// End runs the end script beside the owner and global index updates:
// one round trip. It drops this node's lease on the contract; a lease
// another node holds lasts EndFenced's fence at most: a caller that
// answers an agent uses EndFenced and answers no sooner than that after
// it (docs/cluster.md "Presentation leases").
func (s *contracts) End(ctx context.Context, c *recipes.Contract, state string) (bool, error) {
	ended, _, err := s.EndFenced(ctx, c, state)
	return ended, err
}

// EndFenced is End, and its fence (store.LeaseFence): the longest lease
// any node took on c, which presentScript keeps in c's record (field
// ls) and endScript returns, even when c had ended already, or this
// node's own lease, whichever is longer; so a node whose
// contract_lease is shorter or off waits the lease another node holds.
func (s *contracts) EndFenced(ctx context.Context, c *recipes.Contract, state string) (bool, time.Duration, error) {
	switch state {
	case recipes.StateRevoked, recipes.StateReleased, recipes.StateExpired:
	default:
		return false, 0, fmt.Errorf("redisstore: End state %q is not revoked, released or expired", state)
	}
	agent, id := c.OriginatingAgentID, c.SynthesisID
	now := s.c.nowMS()
	at := now
	if state == recipes.StateExpired {
		at = c.ExpiresAt.UnixMilli()
	}
	keep := s.keptUntil(at)
	keys := []string{s.key(agent, id), s.c.agentKey(agent, "cz"), s.pairKey(agent, c.Method, c.Path)}
	start := time.Now()
	v, err := s.c.pipeScript(ctx, endScript, keys, []any{now, state, keep, id, at}, func(p redis.Pipeliner) {
		p.PExpireAt(ctx, s.ownerKey(id), time.UnixMilli(keep))
		p.ZRem(ctx, s.c.globalKey("cl"), agent+" "+id)
	})
	if s.leaseFor > 0 {
		s.leases.Del(leaseKey(agent, id))
	}
	if err = s.c.done(store.OpContractUpdate, start, err); err != nil {
		return false, 0, err
	}
	r, _ := v.([]any)
	if len(r) != 2 {
		return false, 0, fmt.Errorf("%w: end script returned %v", store.ErrUnavailable, v)
	}
	fence := s.leaseFor
	if ls, _ := r[1].(int64); time.Duration(ls)*time.Millisecond > fence {
		fence = time.Duration(ls) * time.Millisecond
	}
	n, _ := r[0].(int64)
	return n == 1, max(fence, 0), nil
}

// List reads the live index (the agent's, or the global one for "")
// then every listed contract in one pipeline: two round trips, plus one
// for contracts this node has not decoded yet.
func (s *contracts) List(ctx context.Context, agent string) ([]*recipes.Contract, error) {
	now := s.c.nowMS()
	min := "(" + strconv.FormatInt(now, 10)
	var members []string
	start := time.Now()
	var err error
	if agent != "" {
		var ids []string
		ids, err = s.c.rdb.ZRangeByScore(ctx, s.c.agentKey(agent, "cz"), &redis.ZRangeBy{Min: min, Max: "+inf"}).Result()
		for _, id := range ids {
			members = append(members, agent+" "+id)
		}
	} else {
		members, err = s.c.rdb.ZRangeByScore(ctx, s.c.globalKey("cl"), &redis.ZRangeBy{Min: min, Max: "+inf"}).Result()
	}
	if err = s.c.done(store.OpContractList, start, err); err != nil {
		return nil, err
	}
	type item struct {
		agent, id string
		cmd       *redis.SliceCmd
	}
	items := make([]item, 0, len(members))
	start = time.Now()
	_, err = s.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range members {
			a, id, ok := strings.Cut(m, " ")
			if !ok {
				continue
			}
			fields := []string{"s", "exp", "at"}
			if _, cached := s.cache.Get(id); !cached {
				fields = append(fields, "meta", "plan")
			}
			items = append(items, item{a, id, p.HMGet(ctx, s.key(a, id), fields...)})
		}
		return nil
	})
	if err = s.c.done(store.OpContractList, start, err); err != nil {
		return nil, err
	}
	out := make([]*recipes.Contract, 0, len(items))
	for _, it := range items {
		r := parseRecord(it.agent, it.id, it.cmd.Val())
		if !r.found || !live(r, now) {
			continue
		}
		c, err := s.contract(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].IssuedAt.Equal(out[j].IssuedAt) {
			return out[i].IssuedAt.Before(out[j].IssuedAt)
		}
		return out[i].SynthesisID < out[j].SynthesisID
	})
	return out, nil
}

// Len counts the live index: one round trip.
func (s *contracts) Len(ctx context.Context) (int, error) {
	start := time.Now()
	n, err := s.c.rdb.ZCount(ctx, s.c.globalKey("cl"), "("+strconv.FormatInt(s.c.nowMS(), 10), "+inf").Result()
	if err = s.c.done(store.OpCount, start, err); err != nil {
		return 0, err
	}
	return int(n), nil
}
