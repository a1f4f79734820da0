// Package closecache holds a ristretto cache that may be closed while
// calls still use it (a configuration dropped at a reload, with its
// requests, MCP tasks and background work still running). ristretto's
// own Close must not meet a concurrent Set or Del: it closes the
// channel they send on (a panic, "send on closed channel", that ends
// the process). Close here detaches the cache at once, so that Load
// returns nil, on which every ristretto method is a no-op (Get misses,
// Set keeps nothing), and closes it CloseDelay later, when a call that
// loaded it a moment before is long done with it.
package closecache

import (
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// CloseDelay is how long Close waits, once the cache is detached, before
// it closes it (its goroutines stop then).
const CloseDelay = time.Second

// Cache is a ristretto cache that Close detaches before closing it. The
// zero value and a nil *Cache hold none. Safe for concurrent use.
type Cache[K ristretto.Key, V any] struct {
	p atomic.Pointer[ristretto.Cache[K, V]]
}

// New holds c.
func New[K ristretto.Key, V any](c *ristretto.Cache[K, V]) *Cache[K, V] {
	h := &Cache[K, V]{}
	h.p.Store(c)
	return h
}

// Load returns the cache, or nil once Close was called (and for a nil
// Cache): call its methods on the value returned, one load per use.
func (h *Cache[K, V]) Load() *ristretto.Cache[K, V] {
	if h == nil {
		return nil
	}
	return h.p.Load()
}

// Close detaches the cache and closes it CloseDelay later, in the
// background. Safe to call more than once, and on a nil Cache.
func (h *Cache[K, V]) Close() {
	if h == nil {
		return
	}
	if c := h.p.Swap(nil); c != nil {
		time.AfterFunc(CloseDelay, c.Close)
	}
}
