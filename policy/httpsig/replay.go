package httpsig

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"
)

// ReplayCache remembers accepted signatures until they expire, so each
// is accepted once (ARCHITECTURE.md "Identity"). It is bounded: at max
// entries, expired entries are dropped first, then the oldest-inserted
// one, so max must exceed the signatures accepted within one validity
// window (MaxAge) for the guarantee to hold. Safe for concurrent use.
type ReplayCache struct {
	mu      sync.Mutex
	max     int
	now     func() time.Time
	order   *list.List // of *replayEntry, oldest insert first
	entries map[[sha256.Size]byte]*list.Element
}

// replayEntry is one remembered signature.
type replayEntry struct {
	key     [sha256.Size]byte
	expires time.Time
}

// NewReplayCache returns a cache of at most max entries (max < 1 means
// 1) reading the clock from now (nil means time.Now).
func NewReplayCache(max int, now func() time.Time) *ReplayCache {
	if max < 1 {
		max = 1
	}
	if now == nil {
		now = time.Now
	}
	return &ReplayCache{max: max, now: now, order: list.New(), entries: make(map[[sha256.Size]byte]*list.Element)}
}

// Seen reports whether sig was already recorded and has not expired
// yet (then the request is signature-replayed); otherwise it records
// sig until expires and returns false. A signature whose expires is
// already past is not recorded (Verify refuses it as expired anyway).
func (c *ReplayCache) Seen(sig []byte, expires time.Time) bool {
	k := sha256.Sum256(sig)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if el, ok := c.entries[k]; ok {
		e := el.Value.(*replayEntry)
		if !now.After(e.expires) {
			return true
		}
		c.remove(el)
	}
	if now.After(expires) {
		return false
	}
	// Drop expired entries from the old end; when still full, sweep all
	// expired entries, then drop the oldest.
	for el := c.order.Front(); el != nil && now.After(el.Value.(*replayEntry).expires); el = c.order.Front() {
		c.remove(el)
	}
	if c.order.Len() >= c.max {
		for el := c.order.Front(); el != nil; {
			next := el.Next()
			if now.After(el.Value.(*replayEntry).expires) {
				c.remove(el)
			}
			el = next
		}
	}
	for c.order.Len() >= c.max {
		c.remove(c.order.Front())
	}
	c.entries[k] = c.order.PushBack(&replayEntry{key: k, expires: expires})
	return false
}

// Len returns the number of remembered signatures (expired ones not yet
// dropped included).
func (c *ReplayCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// remove drops el; c.mu is held.
func (c *ReplayCache) remove(el *list.Element) {
	delete(c.entries, el.Value.(*replayEntry).key)
	c.order.Remove(el)
}
