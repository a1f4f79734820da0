package redisstore

import (
	"context"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// presentScript reads a presented contract in the presenter's slot and,
// when it is live and serves the request's pair, claims the request's
// key with the claim logic, the contract's pending state as the claim's:
// a keyed presentation costs one round trip. KEYS: contract, key record,
// agent key index, [global key index]. ARGV: now, claim ("1"/"0"),
// method, path, want meta and plan ("1"/"0"), synthesis id, then the
// claim's 14 arguments (claimFuncLua's A; its synthesis id and pending
// are the contract's). Returns {state, exp, at, meta, plan} and, when it
// claimed, claim's reply after them.
var presentScript = denyOOM(claimFuncLua + `
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
  local A = {}
  for i = 7, 20 do A[i - 6] = ARGV[i] end
  A[7], A[8] = ARGV[6], pending
  local r = claim({KEYS[2], KEYS[3], KEYS[4]}, A)
  for i = 1, 6 do out[5 + i] = r[i] or '' end
end
return out
`)

// resolveScript finds the newest active contract of a pair index (as
// pairScript) and, as asked, claims the request's key with the claim
// logic. KEYS: pair index, key record, agent key index, [global key
// index]. ARGV: now, the agent's contract key prefix, claim if found,
// claim if missing ("1"/"0"), then the claim's 14 arguments
// (claimFuncLua's A). Returns {id or ""} and, when it claimed, claim's
// reply after it.
var resolveScript = denyOOM(claimFuncLua + pairFuncLua + `
local found = newest(KEYS[1], ARGV[2], tonumber(ARGV[1]))
local out = {found}
if (found ~= '' and ARGV[3] == '1') or (found == '' and ARGV[4] == '1') then
  local A = {}
  for i = 5, 18 do A[i - 4] = ARGV[i] end
  local r = claim({KEYS[2], KEYS[3], KEYS[4]}, A)
  for i = 1, 6 do out[1 + i] = r[i] or '' end
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
	claiming := req.Claim && req.Key != ""
	if claiming {
		if err := p.c.quarantined(); err != nil {
			return store.Presentation{}, err
		}
	}
	_, cached := p.contracts.cache.Get(req.SynthesisID)
	ikeys, _, _ := p.idem.keys(req.Presenter, req.Key)
	keys := append([]string{p.contracts.key(req.Presenter, req.SynthesisID)}, ikeys...)
	token := store.NewToken()
	creq := idempotency.ClaimRequest{AgentID: req.Presenter, Key: req.Key, Fingerprint: req.Fingerprint, SynthesisID: req.SynthesisID,
		Lease: req.Lease, Holder: req.Holder}
	var deadline int64
	if claiming {
		var cancel context.CancelFunc
		ctx, deadline, cancel = p.c.claimDeadline(ctx)
		defer cancel()
	}
	args := append([]any{p.c.nowMS(), flag(claiming), req.Method, req.Path, flag(!cached), req.SynthesisID},
		p.idem.claimArgs(creq, token, deadline)...)
	start := time.Now()
	v, err := presentScript.Run(ctx, p.c.rdb, keys, args...).Slice()
	if err = p.c.done(store.OpPresent, start, err); err != nil {
		if claiming && mayHaveRun(err) {
			p.idem.releaseLater(creq, token)
		}
		return store.Presentation{}, err
	}
	str := func(i int) string { return replyString(v, i) }
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
		cl, err := p.idem.claimed(ctx, creq, token, v[5:])
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

// flag is a script's boolean argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
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
	ikeys, _, _ := p.idem.keys(req.AgentID, req.Key)
	keys := append([]string{p.contracts.pairKey(req.AgentID, req.Method, req.Path)}, ikeys...)
	token := store.NewToken()
	creq := idempotency.ClaimRequest{AgentID: req.AgentID, Key: req.Key, Fingerprint: req.Fingerprint, Lease: req.Lease, Holder: req.Holder}
	var deadline int64
	if claiming {
		var cancel context.CancelFunc
		ctx, deadline, cancel = p.c.claimDeadline(ctx)
		defer cancel()
	}
	args := append([]any{p.c.nowMS(), p.c.agentKey(req.AgentID, "c:"), flag(req.ClaimIfFound && req.Key != ""), flag(req.ClaimIfMissing && req.Key != "")},
		p.idem.claimArgs(creq, token, deadline)...)
	start := time.Now()
	v, err := resolveScript.Run(ctx, p.c.rdb, keys, args...).Slice()
	if err = p.c.done(store.OpResolvePair, start, err); err != nil {
		if claiming && mayHaveRun(err) {
			p.idem.releaseLater(creq, token)
		}
		return store.PairResolution{}, err
	}
	var out store.PairResolution
	if len(v) > 1 {
		cl, err := p.idem.claimed(ctx, creq, token, v[1:])
		if err != nil {
			return store.PairResolution{}, err
		}
		out.Claimed = &cl
	}
	if id := replyString(v, 0); id != "" {
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
