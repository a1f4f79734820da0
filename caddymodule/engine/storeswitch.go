package engine

import (
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"go.uber.org/zap"
)

// storeSwitch is what a handler's State remembers, across reloads, of
// where its Idempotency-Keys live (SwitchStore).
type storeSwitch struct {
	namespace string        // the store's namespace ("" before the first load)
	lease     time.Duration // the longest lease of the configuration that used it
	// refusedUntil is when keyed requests may run again after a
	// reload moved the keys (zero: not refused).
	refusedUntil time.Time
}

// SwitchStore records that the configuration being loaded by e keeps
// its Idempotency-Keys in namespace (the memory store, or one Redis
// deployment, db and key_prefix). When the previous configuration of
// this handler kept them elsewhere, the requests it may still be
// running hold keys the new namespace does not know, and a repeat of
// one must not run it a second time: keyed requests are answered 503
// store-unavailable (Retry-After: the time left) for the longer of the
// two configurations' longest leases (MaxLease), through later reloads
// too; requests without a key are served. Logged at WARN. Within one
// process only: a restarted process runs nothing of the old one's. A
// reload that fails after this call leaves the namespace recorded, so
// switching back costs one more such refusal.
func (s *State) SwitchStore(e *Engine, namespace string) {
	lease := e.MaxLease()
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.store
	s.store.namespace, s.store.lease = namespace, lease
	if prev.namespace == "" || prev.namespace == namespace {
		return
	}
	d := max(prev.lease, lease)
	if until := e.now().Add(d); until.After(s.store.refusedUntil) {
		s.store.refusedUntil = until
	}
	e.logger.Warn("the Idempotency-Key store changed with this configuration: keys and stored answers of the previous one are not seen here, so requests with an Idempotency-Key answer 503 store-unavailable until every request the previous configuration may still run has ended (docs/cluster.md, Failure modes)",
		zap.String("from", prev.namespace), zap.String("to", namespace), zap.Duration("for", d))
}

// claimsRefusedErr is the store error of a keyed request while a
// reload's move of the keys refuses them (State.SwitchStore), else nil.
func (h *Engine) claimsRefusedErr() error {
	h.st.mu.Lock()
	until := h.st.store.refusedUntil
	h.st.mu.Unlock()
	if until.IsZero() {
		return nil
	}
	left := until.Sub(h.now())
	if left <= 0 {
		return nil
	}
	return &store.RetryAfterError{After: left,
		Why: "the gateway's Idempotency-Key store changed with a configuration reload less than the longest Idempotency-Key lease ago, and a request of the previous configuration may still hold this key: keyed requests resume once every such request has ended (requests without an Idempotency-Key are served)"}
}
