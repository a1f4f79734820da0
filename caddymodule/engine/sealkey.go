package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The seal key (docs/cluster.md "The seal key"): the MAC key of state a
// door hands a client and takes back (the MCP door's input_required
// requestState). With store memory it is the State's own random key:
// it outlives reloads, not a restart. With a shared store (store redis,
// store.Set.Seal) it is the gateway's key in the store, made once by
// the first node that asks and read by every node, so a retry is
// accepted on any node and after a restart.
//
// The shared key is read when the engine is attached (Attach), within
// sealLoadTimeout. A store that does not answer then leaves the node
// without a key (WARN): until a later read succeeds the node issues no
// requestState (a client on 2026-07-28 gets the older preview and
// synthesis_id flow, which the store carries to any node) and answers a
// retry carrying one 503 store-unavailable, retryable; it never falls
// back to a key of its own, which other nodes would refuse. The read is
// retried on use, at most once per SealRetryEvery, by one request at a
// time. There is no rotation: the key lives until it is deleted from
// the store (every requestState outstanding is then refused).

// sealLoadTimeout bounds one read of the shared seal key.
const sealLoadTimeout = 2 * time.Second

// SealRetryEvery is the least time between two reads of the shared seal
// key while it is missing; the MCP door gives it, in seconds, as the
// retry_after_seconds of a requestState it cannot check yet.
const SealRetryEvery = 5 * time.Second

// sealHolder is the shared seal key once read, and the throttle of the
// reads before that.
type sealHolder struct {
	key  atomic.Pointer[[]byte]
	mu   sync.Mutex // held by the one read under way
	next time.Time  // earliest next read; guarded by mu
}

// SealKey is the MAC key for state a door hands a client and takes
// back: 32 bytes, the store's shared key with store redis (the same on
// every node and across restarts), else this process's own key (made
// with the State: it outlives reloads but not a restart). Nil when the
// shared key could not be read yet (the store is down) or the engine
// has no State: the caller then seals nothing and verifies nothing.
// Callers must not modify it.
func (h *Engine) SealKey() []byte {
	if h.sto.Seal == nil {
		if h.st == nil {
			return nil
		}
		return h.st.sealKey
	}
	if k := h.seal.key.Load(); k != nil {
		return *k
	}
	h.loadSealKey(false)
	if k := h.seal.key.Load(); k != nil {
		return *k
	}
	return nil
}

// loadSealKey reads the shared seal key once it is due (attach: at
// once); a read under way elsewhere is not waited for. A failure is
// logged (WARN) and retried after SealRetryEvery.
func (h *Engine) loadSealKey(attach bool) {
	if h.sto.Seal == nil || h.seal.key.Load() != nil || !h.seal.mu.TryLock() {
		return
	}
	defer h.seal.mu.Unlock()
	now := time.Now()
	if !attach && now.Before(h.seal.next) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sealLoadTimeout)
	defer cancel()
	k, err := h.sto.Seal.SealKey(ctx)
	if err != nil {
		h.seal.next = time.Now().Add(SealRetryEvery)
		h.logger.Warn("the shared seal key could not be read from the store: until it is, this node issues no MCP input_required requestState (clients on 2026-07-28 get the synthesis_id preview) and answers a retry carrying one 503 store-unavailable; retried on use",
			zap.Error(err), zap.Duration("retry_after", SealRetryEvery))
		return
	}
	h.seal.key.Store(&k)
	if !attach {
		h.logger.Info("the shared seal key was read from the store; MCP input_required is served again")
	}
}
