package redisstore

import (
	"context"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// negotiations keeps each PROPOSE negotiation (store.Negotiations) at
// P{a:AGENT}:ng:ID, a string holding its count of rejected turns, which
// expires store.NegotiationIdle after its last turn. The key names the
// agent, so another agent echoing the ID finds nothing, and it sits in
// the agent's slot.
type negotiations struct{ c *Client }

// negotiationKey is agent's negotiation id's key.
func (n negotiations) negotiationKey(agent, id string) string {
	return n.c.agentKey(agent, "ng:"+id)
}

// negotiationTurnScript is Negotiations.Turn in one step. KEYS[1] the
// echoed negotiation's key (KEYS[2] again when none was echoed),
// KEYS[2] the fresh one's; ARGV[1] store.NegotiationIdle in ms. Returns
// {1, count} for the echoed negotiation, {0, 0} for the fresh one. GET,
// PEXPIRE, SET only. deny-oom: a fresh negotiation is new state, and the
// PROPOSE that would mint needs room anyway (503 store full).
var negotiationTurnScript = denyOOM(`
if KEYS[1] ~= KEYS[2] then
	local r = redis.call('GET', KEYS[1])
	if r then
		redis.call('PEXPIRE', KEYS[1], ARGV[1])
		return {1, tonumber(r)}
	end
end
redis.call('SET', KEYS[2], 0, 'PX', ARGV[1])
return {0, 0}
`)

// negotiationRejectScript is Negotiations.Reject in one step. KEYS[1]
// the negotiation's key; ARGV[1] store.NegotiationIdle in ms. Returns
// the new count, 0 when the key is gone. EXISTS, INCR, PEXPIRE only.
// allow-oom: it grows no key, and a rejection not counted under
// maxmemory would give the negotiation a turn more.
var negotiationRejectScript = allowOOM(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
`)

// Turn is one round trip (the script).
func (n negotiations) Turn(ctx context.Context, agent, echoed, fresh string) (string, int, error) {
	start := time.Now()
	fk := n.negotiationKey(agent, fresh)
	ek := fk
	if echoed != "" {
		ek = n.negotiationKey(agent, echoed)
	}
	v, err := negotiationTurnScript.Run(ctx, n.c.rdb, []string{ek, fk}, store.NegotiationIdle.Milliseconds()).Int64Slice()
	if err = n.c.done(store.OpNegotiation, start, err); err != nil {
		return "", 0, err
	}
	if len(v) == 2 && v[0] == 1 {
		return echoed, int(v[1]), nil
	}
	return fresh, 0, nil
}

// Reject is one round trip (the script).
func (n negotiations) Reject(ctx context.Context, agent, id string) (int, error) {
	start := time.Now()
	v, err := negotiationRejectScript.Run(ctx, n.c.rdb, []string{n.negotiationKey(agent, id)}, store.NegotiationIdle.Milliseconds()).Int()
	if err = n.c.done(store.OpNegotiation, start, err); err != nil {
		return 0, err
	}
	return v, nil
}
