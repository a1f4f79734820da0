package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
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
// are the contract's). Without a claim, KEYS and ARGV end before the
// claim's, or with the lease (ms) the node takes when it reads the
// contract active: the script keeps the longest lease any node took
// (field ls), which endScript returns to the node that ends it. Returns
// {state, exp, at, meta, plan} and, when it claimed, claim's reply
// after them.
var presentScript = denyOOM(timeFuncLua + claimFuncLua + `
local c
if ARGV[5] == '1' then
  c = redis.call('HMGET', KEYS[1], 's', 'exp', 'at', 'm', 'p', 'ls', 'meta', 'plan')
else
  c = redis.call('HMGET', KEYS[1], 's', 'exp', 'at', 'm', 'p', 'ls')
end
if not c[1] then return {''} end
if ARGV[2] ~= '1' and ARGV[7] and c[1] == 'active' and tonumber(ARGV[7]) > (tonumber(c[6]) or 0) then
  redis.call('HSET', KEYS[1], 'ls', ARGV[7])
end
local out = {c[1], c[2] or '', c[3] or '', c[7] or '', c[8] or ''}
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
// logic; on a miss whose claim, if any, executed, it then spends the
// gate's budget (gcra, redis_rate's GCRA) and, when that allows it
// (or nothing is spent), keeps the gate refusal's attempt record
// (keep_attempt): the whole of a gate evaluation in one round trip.
// KEYS: pair index, key record, agent key index, rate key (all in the
// agent's slot), then, outside Cluster mode, the global key index and
// the attempt hash and order list where ARGV names them. ARGV: now,
// the agent's contract key prefix, claim if found, claim if missing
// ("1"/"0"), the claim's 14 arguments (claimFuncLua's A), spend
// ("1"/"0"), burst, rate, period (gcra's), the KEYS index of the
// global key index and of the attempt hash ("0": none), the attempt's
// id, JSON and bound, then mint ("1"/"0": when no attempt record is
// kept, the gate synthesis's MintForPair), the KEYS index of the new
// contract's key (the agent's live index and its sequence follow it,
// then, outside Cluster mode, its owner index key and the global live
// index; in Cluster mode, where they are other slots, the caller
// writes them beside the script), the agent, and mint's 15 arguments
// (mintFuncLua's A; its join is not scanned again: newest just found
// no active contract in the same pair index, and tells mint whether
// that index is now absent). Returns {id or "", claimed (1/0),
// claim's reply (6), spent (1/0), gcra's reply (4), attempt kept
// (1/0), minted (1/0), mint's reply (2)}.
var resolveScript = denyOOM(timeFuncLua + claimFuncLua + pairFuncLua + gcraFuncLua + attemptFuncLua + mintFuncLua + `
local found, left = newest(KEYS[1], ARGV[2], tonumber(ARGV[1]))
local out = {found, 0, '', '', '', '', '', '', 0, 0, 0, '', '', 0, 0, 0, ''}
local gidx, aidx = tonumber(ARGV[23]), tonumber(ARGV[24])
local code = 0
if (found ~= '' and ARGV[3] == '1') or (found == '' and ARGV[4] == '1') then
  local A = {}
  for i = 5, 18 do A[i - 4] = ARGV[i] end
  local K = {KEYS[2], KEYS[3]}
  if gidx > 0 then K[3] = KEYS[gidx] end
  local r = claim(K, A)
  out[2] = 1
  for i = 1, 6 do out[2 + i] = r[i] or '' end
  code = r[1]
end
if found == '' and code == 0 then
  local allowed = true
  if ARGV[19] == '1' then
    local g = gcra(KEYS[4], ARGV[20], ARGV[21], ARGV[22], 1, gcra_now(redis_time()))
    out[9] = 1
    for i = 1, 4 do out[9 + i] = g[i] end
    allowed = g[1] > 0
  end
  if allowed and aidx > 0 then
    keep_attempt(KEYS[aidx], KEYS[aidx + 1], ARGV[25], ARGV[26], tonumber(ARGV[27]))
    out[14] = 1
  elseif allowed and ARGV[28] == '1' then
    local m = tonumber(ARGV[29])
    local A = {}
    for i = 31, 45 do A[i - 30] = ARGV[i] end
    A[13] = '0' -- newest() scanned this pair index above and found no active contract: nothing to join
    local r = mint({KEYS[m], KEYS[m + 1], KEYS[1], KEYS[m + 2], KEYS[m + 4]}, A, left == 0)
    if r[1] == 0 and KEYS[m + 3] then redis.call('SET', KEYS[m + 3], ARGV[30], 'PXAT', A[8]) end
    out[15], out[16], out[17] = 1, r[1], r[2] or ''
  end
end
return out
`)

// presenter is the Redis Presenter.
type presenter struct {
	c         *Client
	idem      *idem
	contracts *contracts
	attempts  int // the attempt records kept (store.Limits.Attempts)
}

// Present runs presentScript in the presenter's slot: one round trip.
// A contract that is not there (unknown, or another agent's) is looked
// up as Lookup does (two more) and nothing is claimed. An unkeyed
// presentation of the presenter's own active contract is answered
// from this node's lease on it, when it holds one, with no round trip;
// one that reads the contract active takes a lease (contracts.grantLease).
func (p presenter) Present(ctx context.Context, req store.PresentRequest) (store.Presentation, error) {
	claiming := req.Claim && req.Key != ""
	if claiming {
		if err := p.c.quarantined(); err != nil {
			return store.Presentation{}, err
		}
	} else if out, ok := p.contracts.leasedPresentation(req.Presenter, req.SynthesisID); ok {
		return out, nil
	}
	_, cached := p.contracts.cache.Get(req.SynthesisID)
	keys := append(make([]string, 0, 4), p.contracts.key(req.Presenter, req.SynthesisID)) // the claim's up to 3 follow
	// Room for the lease's argument, when not claiming.
	n := 7
	if claiming {
		n += claimArgsLen // appended below: one allocation for all
	}
	claimAt := p.c.nowMS()
	args := append(make([]any, 0, n), claimAt, flag(claiming), req.Method, req.Path, flag(!cached), req.SynthesisID)
	if !claiming && p.contracts.leaseFor > 0 {
		args = append(args, int64((p.contracts.leaseFor+time.Millisecond-1)/time.Millisecond)) // rounded up: the record may not fall short
	}
	var token string
	var creq idempotency.ClaimRequest
	if claiming {
		// The claim's keys and arguments; a presentation without a key
		// sends the contract's alone (the script reads no more).
		ikeys, member, global := p.idem.keys(req.Presenter, req.Key)
		keys = append(keys, ikeys...)
		token = store.NewToken()
		creq = idempotency.ClaimRequest{AgentID: req.Presenter, Key: req.Key, Fingerprint: req.Fingerprint, SynthesisID: req.SynthesisID,
			Lease: req.Lease, Holder: req.Holder}
		var deadline int64
		var cancel context.CancelFunc
		ctx, deadline, cancel = p.c.claimDeadline(ctx)
		defer cancel()
		args = p.idem.appendClaimArgs(args, creq, token, claimAt, deadline, member, global)
	}
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
	r := recordOf(req.Presenter, req.SynthesisID, str(0), str(1), str(2), str(3), str(4))
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
		cl, err := p.idem.claimed(ctx, creq, token, claimAt, v[5:])
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
	if !claiming && out.Lookup == recipes.LookupFound && r.state == recipes.StateActive {
		p.contracts.grantLease(c, r.exp, start)
	}
	return out, nil
}

// flag is a script's boolean argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ResolvePair runs resolveScript in the agent's slot: one round trip
// for the pair lookup, the claim, the gate's budget (req.Spend, when it
// is this Client's), the refusal's attempt record (outside Cluster
// mode) or the synthesis's mint, plus one the first time this node
// decodes the contract found. A Spend of another store is spent after
// it (store.GateMiss); in Cluster mode the attempt record, kept in the
// gateway-wide slot, is left to the caller (AttemptKept false), and a
// mint's owner index and global live index (other slots) are written in
// the same pipeline, beside the script, concurrently: their writes are
// undone off the answer path (queued with the records) when the script
// did not mint. So that a pair a live contract serves does not pay for
// that, a node that saw a contract serve the pair (servedHint) leaves
// the mint to the caller (MintForPair) instead.
func (p presenter) ResolvePair(ctx context.Context, req store.PairRequest) (store.PairResolution, error) {
	claiming := req.Key != "" && (req.ClaimIfFound || req.ClaimIfMissing)
	if claiming {
		if err := p.c.quarantined(); err != nil {
			return store.PairResolution{}, err
		}
	}
	ikeys, member, global := p.idem.keys(req.AgentID, req.Key)
	keys := make([]string, 0, 7)
	keys = append(keys, p.contracts.pairKey(req.AgentID, req.Method, req.Path), ikeys[0], ikeys[1])
	lim, _ := req.Spend.(*limiter)
	if lim != nil && lim.c != p.c {
		lim = nil
	}
	spend := []any{"0", 0, 0, 0}
	if lim != nil {
		keys = append(keys, lim.key(req.AgentID))
		spend = append([]any{"1"}, lim.gcraArgs()[:3]...)
	} else {
		keys = append(keys, ikeys[1]) // unused: a key of the slot
	}
	gidx, aidx := 0, 0
	if len(ikeys) > 2 {
		keys = append(keys, ikeys[2])
		gidx = len(keys)
	}
	att := []any{"", "", 0}
	foreign := req.Spend != nil && lim == nil
	if req.Attempt != nil && !p.c.cluster && !foreign {
		raw, err := json.Marshal(req.Attempt)
		if err != nil {
			return store.PairResolution{}, err
		}
		a := attempts{c: p.c, size: p.attempts}
		keys = append(keys, a.keys()...)
		aidx = len(keys) - 1
		att = []any{req.Attempt.ID, raw, a.size}
	}
	mintArgs := []any{"0", 0, ""}
	var mc mintCall
	beside := false // Cluster: the mint's writes in other slots go beside the script
	if req.Mint != nil && req.Attempt == nil && !foreign && !p.contracts.servedHint(req.AgentID, req.Method, req.Path) {
		var err error
		if mc, err = p.contracts.mintCall(req.Mint, req.MintMode, true); err == nil {
			mintArgs = []any{"1", len(keys) + 1, req.AgentID}
			mintArgs = append(mintArgs, mc.args...)
			keys = append(keys, mc.keys[0], mc.keys[1], mc.keys[3])
			if p.c.cluster {
				beside = true
			} else {
				keys = append(keys, p.contracts.ownerKey(req.Mint.SynthesisID), mc.keys[4])
			}
		} else {
			mc.keys = nil // left to the caller, whose MintForPair reports the error
		}
	}
	token := "" // the script reads the claim's arguments only when it claims
	if claiming {
		token = store.NewToken()
	}
	creq := idempotency.ClaimRequest{AgentID: req.AgentID, Key: req.Key, Fingerprint: req.Fingerprint, Lease: req.Lease, Holder: req.Holder}
	var deadline int64
	if claiming || mc.keys != nil {
		// A claim, and a mint, that reach Redis after this call gave up
		// write nothing.
		var cancel context.CancelFunc
		ctx, deadline, cancel = p.c.claimDeadline(ctx)
		defer cancel()
	}
	if mc.keys != nil {
		mintArgs[len(mintArgs)-1] = deadline
	}
	args := make([]any, 0, 45)
	claimAt := p.c.nowMS()
	args = append(args, claimAt, p.c.agentKey(req.AgentID, "c:"), flag(req.ClaimIfFound && req.Key != ""), flag(req.ClaimIfMissing && req.Key != ""))
	args = p.idem.appendClaimArgs(args, creq, token, claimAt, deadline, member, global)
	args = append(args, spend...)
	args = append(args, gidx, aidx)
	args = append(args, att...)
	args = append(args, mintArgs...)
	start := time.Now()
	var others besideCall
	if beside {
		// Concurrently with the script (pipeScript says why not one
		// pipeline): the request waits for them only when it minted.
		others = p.contracts.startBeside(ctx, req.Mint, mc, deadline)
	}
	v, err := resolveScript.Run(ctx, p.c.rdb, keys, args...).Slice()
	ran := false // the script ran, and a claim it took is to be released
	if others != nil {
		minted := err == nil && len(v) > 16 && replyInt(v, 14) == 1 && replyInt(v, 15) == 0
		if berr := p.contracts.finishBeside(others, req.Mint, mc, minted, err); berr != nil {
			// Minted, but its other slots' writes failed: the contract
			// is released (finishBeside), and so is the claim the
			// script took.
			err, ran = berr, replyInt(v, 1) == 1
		}
	}
	if err = p.c.done(store.OpResolvePair, start, err); err != nil {
		if claiming && (ran || mayHaveRun(err)) {
			p.idem.releaseLater(creq, token)
		}
		return store.PairResolution{}, err
	}
	if len(v) < 17 {
		return store.PairResolution{}, fmt.Errorf("%w: resolve script returned %d values", store.ErrUnavailable, len(v))
	}
	var out store.PairResolution
	if replyInt(v, 1) == 1 {
		cl, err := p.idem.claimed(ctx, creq, token, claimAt, v[2:8])
		if err != nil {
			if replyInt(v, 14) == 1 && replyInt(v, 15) == 0 {
				// Refused after the script ran (a restart's quarantine
				// began): the contract minted for the request it does
				// not serve is released, so no request runs under it.
				_, _ = p.contracts.End(ctx, req.Mint, recipes.StateReleased)
			}
			return store.PairResolution{}, err
		}
		out.Claimed = &cl
	}
	if replyInt(v, 8) == 1 {
		d, err := gcraReply(v, 9)
		if err != nil {
			return store.PairResolution{}, err
		}
		out.Spent = &d
	}
	out.AttemptKept = replyInt(v, 13) == 1
	if replyInt(v, 14) == 1 {
		m := &store.MintResult{State: mc.state}
		if code := replyInt(v, 15); code == 0 {
			p.contracts.cache.Set(req.Mint.SynthesisID, req.Mint, 1)
			if mc.state == recipes.StateActive {
				p.contracts.noteServed(req.AgentID, req.Method, req.Path, req.Mint.ExpiresAt, false)
			}
		} else {
			m.State, m.Joined, m.Err = p.contracts.minted(ctx, req.Mint, []any{code, v[16]}, v)
		}
		out.Minted = m
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
		p.contracts.noteServed(req.AgentID, req.Method, req.Path, c.ExpiresAt, false)
		return out, nil
	}
	if out.Minted == nil || out.Minted.State != recipes.StateActive || out.Minted.Joined != nil || out.Minted.Err != nil {
		p.contracts.noteServed(req.AgentID, req.Method, req.Path, time.Time{}, true)
	}
	if foreign {
		// A limiter of another store: spent after the round trip, and
		// the attempt record then kept by the caller if allowed.
		if err := store.GateMiss(ctx, req, &out, nil, nil); err != nil {
			return store.PairResolution{}, err
		}
	}
	return out, nil
}
