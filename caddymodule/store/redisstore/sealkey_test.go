package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestSealKey: two clients of one key prefix (two nodes) get the same
// 32-byte key, a new client after them (a restart) gets it too, another
// prefix gets its own, and a damaged stored value is refused, not used.
func TestSealKey(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	client := func(prefix string) *Client {
		t.Helper()
		c, err := New(ctx, Config{Addrs: []string{srv.Addr()}, KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	key := func(c *Client) []byte {
		t.Helper()
		set, err := c.Set(store.Limits{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		k, err := set.Seal.SealKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	p := fmt.Sprintf("t%d:", prefixes.Add(1))
	a, b := client(p), client(p)
	ka, kb := key(a), key(b)
	if len(ka) != store.SealKeyBytes || !bytes.Equal(ka, kb) {
		t.Fatalf("node keys differ or are not %d bytes: %x %x", store.SealKeyBytes, ka, kb)
	}
	if again := key(client(p)); !bytes.Equal(again, ka) {
		t.Fatalf("a restarted node made a new key: %x, want %x", again, ka)
	}
	q := fmt.Sprintf("t%d:", prefixes.Add(1))
	if other := key(client(q)); bytes.Equal(other, ka) {
		t.Fatal("another key prefix shares the key")
	}
	if err := a.Redis().Set(ctx, a.globalKey(sealKeyName), "short", 0).Err(); err != nil {
		t.Fatal(err)
	}
	set, _ := b.Set(store.Limits{}, nil)
	if k, err := set.Seal.SealKey(ctx); err == nil {
		t.Fatalf("a damaged stored key was used: %x", k)
	}
}
