package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// sealKeys keeps the gateway's seal key at P{g}:sealkey (base64url of
// store.SealKeyBytes random bytes, no expiry): created with SET NX by
// the first node that asks, then read back by every node, so all nodes
// of one key prefix seal with the same key, also after restarts.
type sealKeys struct{ c *Client }

// sealKeyName is the key's name under the gateway-wide slot.
const sealKeyName = "sealkey"

// SealKey is two round trips: SET NX of a fresh random key, then GET of
// whichever key won.
func (s sealKeys) SealKey(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, store.SealKeyBytes)
	_, _ = rand.Read(fresh) // crypto/rand.Read does not fail
	k := s.c.globalKey(sealKeyName)
	start := time.Now()
	// SET NX (not SETNX: SET is the command the ACL of docs/cluster.md
	// grants).
	err := s.c.rdb.SetArgs(ctx, k, base64.RawURLEncoding.EncodeToString(fresh), redis.SetArgs{Mode: "NX"}).Err()
	if err = s.c.done(store.OpSealKey, start, err); err != nil {
		return nil, err
	}
	start = time.Now()
	raw, err := s.c.rdb.Get(ctx, k).Result()
	if err = s.c.done(store.OpSealKey, start, err); err != nil {
		return nil, err
	}
	key, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(key) != store.SealKeyBytes {
		return nil, fmt.Errorf("redisstore: %s does not hold a %d-byte base64url key; delete it to have a new one made", k, store.SealKeyBytes)
	}
	return key, nil
}
