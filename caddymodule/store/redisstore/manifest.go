package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// manifestVersions keeps the gateway's AGTP-API-Version at P{g}:manifest
// (store.ManifestVersions): a hash of v, the version, and h, the content
// hash of the manifest it numbers, with no expiry. One key in the
// gateway-wide slot, so Cluster mode keeps it on one master.
type manifestVersions struct{ c *Client }

// manifestKeyName is the key's name under the gateway-wide slot.
const manifestKeyName = "manifest"

// manifestVersionScript is ManifestVersions.Version in one step.
// KEYS[1] the manifest key; ARGV: the manifest's content hash, the
// node's floor version and the content hash that version numbered.
// allow-oom: a few bytes, and a node that cannot number its manifest
// would serve an older number for it.
var manifestVersionScript = allowOOM(`
local cur = redis.call('HMGET', KEYS[1], 'v', 'h')
local sv = tonumber(cur[1]) or 0
local h, floor, fh = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if cur[2] == h and (sv > floor or (sv == floor and fh == h)) then
	return sv
end
local v
if fh == h and floor > sv then
	v = floor
else
	v = math.max(sv, floor) + 1
end
redis.call('HSET', KEYS[1], 'v', v, 'h', h)
return v
`)

// Version is one round trip (the script).
func (m manifestVersions) Version(ctx context.Context, hash string, floor int, floorHash string) (int, error) {
	start := time.Now()
	v, err := manifestVersionScript.Run(ctx, m.c.rdb, []string{m.c.globalKey(manifestKeyName)}, hash, floor, floorHash).Int()
	if err = m.c.done(store.OpManifest, start, err); err != nil {
		return 0, err
	}
	return v, nil
}

// Current is one round trip (HMGET).
func (m manifestVersions) Current(ctx context.Context) (int, string, error) {
	start := time.Now()
	vals, err := m.c.rdb.HMGet(ctx, m.c.globalKey(manifestKeyName), "v", "h").Result()
	if err = m.c.done(store.OpManifest, start, err); err != nil {
		return 0, "", err
	}
	vs, _ := vals[0].(string)
	hash, _ := vals[1].(string)
	v, _ := strconv.Atoi(vs) // none stored: 0
	return v, hash, nil
}
