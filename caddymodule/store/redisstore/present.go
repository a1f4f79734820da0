package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// presentScript reads a presented contract in the presenter's slot and,
// when it is live and serves the request's pair, claims the request's
// key with the claim logic, the contract's pending state as the claim's:
// a keyed presentation costs one round trip. KEYS: contract, key record,
// agent key index, [global key index]. ARGV: now, claim ("1"/"0"),
// method, path, want meta and plan ("1"/"0"), synthesis id, then the
// claim's fp, hold, max per agent, max records, token, agent-index
// member, global member. Returns {state, exp, at, meta, plan} and, when
// it claimed, the claim's outcome and stored answer.
var presentScript = redis.NewScript(claimFuncLua + `
local c = redis.call('HMGET', KEYS[1], 's', 'exp', 'at', 'm', 'p')
if not c[1] then return {''} end
local out = {c[1], c[2] or '', c[3] or '', '', ''}
if ARGV[5] == '1' then
  local mp = redis.call('HMGET', KEYS[1], 'meta', 'plan')
  out[4], out[5] = mp[1] or '', mp[2] or ''
end
local now = tonumber(ARGV[1])
local live = (c[1] == 'pending' or c[1] == 'active') and tonumber(c[2]) > now
if ARGV[2] == '1' and live and c[4] == ARGV[3] and c[5] == ARGV[4] then
  local pending = '0'
  if c[1] == 'pending' then pending = '1' end
  local r = claim({KEYS[2], KEYS[3], KEYS[4]}, {ARGV[1], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[6], pending, ARGV[12], ARGV[13]})
  out[6], out[7] = r[1], r[2] or ''
end
return out
`)

// resolveScript finds the newest active contract of a pair index (as
// pairScript) and, as asked, claims the request's key with the claim
// logic. KEYS: pair index, key record, agent key index, [global key
// index]. ARGV: now, the agent's contract key prefix, claim if found,
// claim if missing ("1"/"0"), then the claim's fp, hold, max per agent,
// max records, token, agent-index member, global member. Returns {id or
// ""} and, when it claimed, the claim's outcome and stored answer.
var resolveScript = redis.NewScript(claimFuncLua + pairFuncLua + `
local found = newest(KEYS[1], ARGV[2], tonumber(ARGV[1]))
local out = {found}
if (found ~= '' and ARGV[3] == '1') or (found == '' and ARGV[4] == '1') then
  local r = claim({KEYS[2], KEYS[3], KEYS[4]}, {ARGV[1], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], '', '0', ARGV[10], ARGV[11]})
  out[2], out[3] = r[1], r[2] or ''
end
return out
`)

// presenter is the Redis Presenter.
type presenter struct {
	c         *Client
	idem      *idem
	contracts *contracts
}

// Present runs presentScript in the presenter's slot: one round trip.
// A contract that is not there (unknown, or another agent's) is looked
// up as Lookup does (two more) and nothing is claimed.
func (p presenter) Present(ctx context.Context, req store.PresentRequest) (store.Presentation, error) {
	if req.Claim && req.Key != "" {
		if err := p.c.quarantined(); err != nil {
			return store.Presentation{}, err
		}
	}
	_, cached := p.contracts.cache.Get(req.SynthesisID)
	ikeys, member, global := p.idem.keys(req.Presenter, req.Key)
	keys := append([]string{p.contracts.key(req.Presenter, req.SynthesisID)}, ikeys...)
	token := store.NewToken()
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	start := time.Now()
	v, err := presentScript.Run(ctx, p.c.rdb, keys, p.c.nowMS(), flag(req.Claim && req.Key != ""), req.Method, req.Path,
		flag(!cached), req.SynthesisID, req.Fingerprint, p.idem.hold().Milliseconds(), p.idem.limits.MaxPerAgent,
		p.idem.limits.MaxRecords, token, member, global).Slice()
	if err = p.c.done(store.OpPresent, start, err); err != nil {
		return store.Presentation{}, err
	}
	str := func(i int) string {
		if i < len(v) {
			s, _ := v[i].(string)
			return s
		}
		return ""
	}
	if str(0) == "" {
		c, res, err := p.contracts.Lookup(ctx, req.Presenter, req.SynthesisID)
		if err != nil || c == nil {
			return store.Presentation{Lookup: res}, err
		}
		state, err := p.contracts.State(ctx, c)
		return store.Presentation{Contract: c, Lookup: res, State: state}, err
	}
	r := parseRecord(req.Presenter, req.SynthesisID, []any{str(0), str(1), str(2), str(3), str(4)})
	now := p.c.nowMS()
	out := store.Presentation{Lookup: recipes.LookupFound, State: r.state}
	if !live(r, now) {
		out.State, _ = ended(r)
		if out.State == recipes.StateReleased || !p.contracts.tombKept(r, now) {
			return store.Presentation{Lookup: recipes.LookupUnknown}, nil
		}
		out.Lookup = recipes.LookupRevoked
	}
	if len(v) > 5 {
		code, _ := v[5].(int64)
		cl, err := p.idem.claimed(ctx, req.Presenter, req.Key, token, code, str(6))
		if err != nil {
			return store.Presentation{}, err
		}
		out.Claimed = &cl
	}
	c, err := p.contracts.contract(ctx, r)
	if err != nil {
		if out.Claimed != nil && out.Claimed.Claim != nil {
			_ = out.Claimed.Claim.Abandon(ctx)
		}
		return store.Presentation{}, err
	}
	out.Contract = c
	return out, nil
}

// ResolvePair runs resolveScript in the agent's slot: one round trip,
// plus one the first time this node decodes the contract found.
func (p presenter) ResolvePair(ctx context.Context, req store.PairRequest) (store.PairResolution, error) {
	claiming := req.Key != "" && (req.ClaimIfFound || req.ClaimIfMissing)
	if claiming {
		if err := p.c.quarantined(); err != nil {
			return store.PairResolution{}, err
		}
	}
	flag := func(b bool) string {
		if b && req.Key != "" {
			return "1"
		}
		return "0"
	}
	ikeys, member, global := p.idem.keys(req.AgentID, req.Key)
	keys := append([]string{p.contracts.pairKey(req.AgentID, req.Method, req.Path)}, ikeys...)
	token := store.NewToken()
	start := time.Now()
	v, err := resolveScript.Run(ctx, p.c.rdb, keys, p.c.nowMS(), p.c.agentKey(req.AgentID, "c:"), flag(req.ClaimIfFound), flag(req.ClaimIfMissing),
		req.Fingerprint, p.idem.hold().Milliseconds(), p.idem.limits.MaxPerAgent, p.idem.limits.MaxRecords, token, member, global).Slice()
	if err = p.c.done(store.OpResolvePair, start, err); err != nil {
		return store.PairResolution{}, err
	}
	var out store.PairResolution
	if len(v) > 1 {
		code, _ := v[1].(int64)
		raw := ""
		if len(v) > 2 {
			raw, _ = v[2].(string)
		}
		cl, err := p.idem.claimed(ctx, req.AgentID, req.Key, token, code, raw)
		if err != nil {
			return store.PairResolution{}, err
		}
		out.Claimed = &cl
	}
	if id, _ := v[0].(string); id != "" {
		c, err := p.contracts.contract(ctx, record{agent: req.AgentID, id: id})
		if err != nil {
			if out.Claimed != nil && out.Claimed.Claim != nil {
				_ = out.Claimed.Claim.Abandon(ctx)
			}
			return store.PairResolution{}, err
		}
		out.Contract = c
	}
	return out, nil
}
