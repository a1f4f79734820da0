package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// manifestVersions keeps the gateway's AGTP-API-Version at P{g}:manifest
// (store.ManifestVersions), one hash with no expiry: v and h, the last
// version given and the content hash of the manifest it numbers, and
// n:HASH, the version given to each manifest content (at most
// maxManifestNumbers of them), so that nodes of one configuration get
// one number for one manifest even when a node of another configuration
// numbered its own in between. One key in the gateway-wide slot, so
// Cluster mode keeps it on one master.
type manifestVersions struct{ c *Client }

// manifestKeyName is the key's name under the gateway-wide slot.
const manifestKeyName = "manifest"

// maxManifestNumbers bounds the manifests whose numbers P{g}:manifest
// keeps: past it they are dropped at once but the last one, and a node
// that rebuilds an older manifest gets a new number for it (never a
// lower one), as after an empty restart.
const maxManifestNumbers = 256

// manifestVersionScript is ManifestVersions.Version in one step.
// KEYS[1] the manifest key; ARGV: the manifest's content hash, the
// node's floor version, the content hash that version numbered,
// maxManifestNumbers, and the channel the nodes watch
// (Client.WatchManifest), on which a new last version is published (a
// PUBLISH refused does not fail the script). HGET, HSET, HLEN, DEL and
// PUBLISH only (the ACL of docs/cluster.md).
// allow-oom: a few bytes, and a node that cannot number its manifest
// would serve a number of its own for it.
var manifestVersionScript = allowOOM(`
local h, floor, fh = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local top = tonumber(redis.call('HGET', KEYS[1], 'v')) or 0
local mine = tonumber(redis.call('HGET', KEYS[1], 'n:' .. h))
if mine and (mine > floor or (mine == floor and fh == h)) then
	return mine
end
local v
if fh == h and floor > top then
	v = floor
else
	v = math.max(top, floor) + 1
end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) + 2 then
	redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'v', v, 'h', h, 'n:' .. h, v)
redis.pcall('PUBLISH', ARGV[5], v) -- refused (an ACL without the channel): the health checks find v
return v
`)

// Version is one round trip (the script).
func (m manifestVersions) Version(ctx context.Context, hash string, floor int, floorHash string) (int, error) {
	start := time.Now()
	v, err := manifestVersionScript.Run(ctx, m.c.rdb, []string{m.c.globalKey(manifestKeyName)}, hash, floor, floorHash, maxManifestNumbers, m.c.manifestChannel()).Int()
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
