package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// holdNodeScript refreshes this process's hold on a node id. KEYS[1]
// the holder ("<instance>:<now ms>"), KEYS[2] the conflict marker (the
// instance of a process that found the id held by a live other).
// ARGV: instance, now (ms), ttl (ms), "1" to set the marker. The hold
// is taken when free or already ours; otherwise it is left to its
// holder. Returns {holder value when another's, else "";
// marker when another's, else ""}.
var holdNodeScript = allowOOM(`
local v = redis.call('GET', KEYS[1])
local me = ARGV[1] .. ':'
if not v or string.sub(v, 1, #me) == me then
  redis.call('SET', KEYS[1], me .. ARGV[2], 'PX', ARGV[3])
  v = ''
elseif ARGV[4] == '1' then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
end
local c = redis.call('GET', KEYS[2])
if not c or c == ARGV[1] then c = '' end
return {v, c}
`)

// HoldNodeID takes or refreshes, for ttl, the hold of this process
// (instance: a random id unique to the process) on nodeID, which names
// one gateway node in records and chain heads (docs/cluster.md): two
// live processes with one node id interleave their record chains. It
// returns other, the holder's value ("<instance>:<refresh time in Unix
// ms>") when another process holds the id ("" when this one does), and
// conflict, the instance of another process that reported it found
// this one's id held (""): set by a call with report true, which a
// caller makes once it saw other's value refreshed, that is alive.
// Keys live under the client's key prefix, in one Cluster slot per
// node id. Errors wrap store.ErrUnavailable.
func (c *Client) HoldNodeID(ctx context.Context, nodeID, instance string, ttl time.Duration, report bool) (other, conflict string, err error) {
	tag := c.prefix + "{n:" + nodeID + "}:"
	flag := "0"
	if report {
		flag = "1"
	}
	start := time.Now()
	v, err := holdNodeScript.Run(ctx, c.rdb, []string{tag + "holder", tag + "conflict"},
		instance, c.nowMS(), ttl.Milliseconds(), flag).StringSlice()
	if err = c.done(store.OpNodeID, start, err); err != nil {
		return "", "", err
	}
	if len(v) != 2 {
		return "", "", fmt.Errorf("%w: node id script returned %d values", store.ErrUnavailable, len(v))
	}
	return v[0], v[1], nil
}
