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
// negotiation's key; ARGV[1] store.NegotiationIdle in ms. Returns the
// count of rejected turns, -1 when the key is gone. GET and PEXPIRE
// only. allow-oom: it adds nothing, so over maxmemory a PROPOSE is
// still read and answered up to the mint it may need room for (a
// malformed one gets its 400, not a 503).
var negotiationTurnScript = allowOOM(`
local r = redis.call('GET', KEYS[1])
if not r then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return tonumber(r)
`)

// negotiationRecordScript is Negotiations.Record in one step. KEYS[1]
// the negotiation's key; ARGV[1] store.NegotiationIdle in ms, ARGV[2]
// 1 for a rejected turn, else 0. Returns the count. INCRBY and PEXPIRE
// only. deny-oom: it may keep a new negotiation; over maxmemory the
// turn is answered without it (the engine logs it).
var negotiationRecordScript = denyOOM(`
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
`)

// Turn is one round trip (the script).
func (n negotiations) Turn(ctx context.Context, agent, id string) (int, bool, error) {
	start := time.Now()
	v, err := negotiationTurnScript.Run(ctx, n.c.rdb, []string{n.negotiationKey(agent, id)}, store.NegotiationIdle.Milliseconds()).Int()
	if err = n.c.done(store.OpNegotiation, start, err); err != nil {
		return 0, false, err
	}
	if v < 0 {
		return 0, false, nil
	}
	return v, true, nil
}

// Record is one round trip (the script).
func (n negotiations) Record(ctx context.Context, agent, id string, rejected bool) (int, error) {
	start := time.Now()
	inc := 0
	if rejected {
		inc = 1
	}
	v, err := negotiationRecordScript.Run(ctx, n.c.rdb, []string{n.negotiationKey(agent, id)}, store.NegotiationIdle.Milliseconds(), inc).Int()
	if err = n.c.done(store.OpNegotiation, start, err); err != nil {
		return 0, err
	}
	return v, nil
}
