// Package closecache holds a ristretto cache that may be closed while
// calls still use it (a configuration dropped at a reload, with its
// requests, MCP tasks and background work still running). ristretto's
// own Close must not meet a concurrent Set, Del or Wait: it closes the
// channel they send on (a panic, "send on closed channel", that ends
// the process). Every use here holds a read lock for the one ristretto
// call it makes, and Close takes the write lock to detach the cache
// before it closes it: a call that comes after finds none (Get misses,
// Set keeps nothing), and none is still sending when it closes.
// (Until 2026-12-06 Close detached the cache and closed it a second
// later, trusting that no call took that long between loading the
// cache and using it; the race detector found the close unordered with
// such a send, in TestCloseWhileUsed.)
package closecache

import (
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// Cache is a ristretto cache that Close detaches before closing it. The
// zero value and a nil *Cache hold none. Safe for concurrent use.
type Cache[K ristretto.Key, V any] struct {
	mu sync.RWMutex
	c  *ristretto.Cache[K, V] // nil once closed
}

// New holds c.
func New[K ristretto.Key, V any](c *ristretto.Cache[K, V]) *Cache[K, V] {
	return &Cache[K, V]{c: c}
}

// Do runs f with the cache held open: f's calls on it never meet its
// Close. The cache passed is nil once Close was called (and for a nil
// Cache), on which every ristretto method is a no-op. f must not call
// Close on h, and should be short: Close waits for it.
func (h *Cache[K, V]) Do(f func(c *ristretto.Cache[K, V])) {
	if h == nil {
		f(nil)
		return
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	f(h.c)
}

// Get is the cache's Get (a miss once closed).
func (h *Cache[K, V]) Get(key K) (V, bool) {
	if h == nil {
		var zero V
		return zero, false
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.c.Get(key)
}

// Set is the cache's Set with cost (false, nothing kept, once closed).
func (h *Cache[K, V]) Set(key K, value V, cost int64) bool {
	if h == nil {
		return false
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.c.Set(key, value, cost)
}

// SetWithTTL is the cache's SetWithTTL (false once closed).
func (h *Cache[K, V]) SetWithTTL(key K, value V, cost int64, ttl time.Duration) bool {
	if h == nil {
		return false
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.c.SetWithTTL(key, value, cost, ttl)
}

// Del is the cache's Del (nothing once closed).
func (h *Cache[K, V]) Del(key K) {
	if h == nil {
		return
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	h.c.Del(key)
}

// Wait is the cache's Wait: the Sets before it are applied (nothing
// once closed).
func (h *Cache[K, V]) Wait() {
	if h == nil {
		return
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	h.c.Wait()
}

// Close detaches the cache, once no call holds it, and closes it (its
// goroutines stop). Safe to call more than once, and on a nil Cache.
func (h *Cache[K, V]) Close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	c := h.c
	h.c = nil
	h.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
