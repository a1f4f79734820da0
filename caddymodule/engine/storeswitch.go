package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"go.uber.org/zap"
)

// StoreLocation is where a configuration keeps its Idempotency-Keys:
// the memory store (Kind "memory"), or a Redis deployment (Kind
// "redis": Mode "single", "cluster" or "sentinel", its addresses as
// configured, the Sentinel master, the db and the key prefix).
type StoreLocation struct {
	Kind, Mode string
	Addrs      []string
	Master     string
	DB         int
	Prefix     string
}

// String is the location for logs (no credentials).
func (l StoreLocation) String() string {
	if l.Kind != "redis" {
		return l.Kind
	}
	return fmt.Sprintf("redis %s %s master=%q db=%d key_prefix=%q", l.Mode, strings.Join(l.Addrs, ","), l.Master, l.DB, l.Prefix)
}

// movedFrom reports whether the keys at l are not those at prev: another
// store kind, mode, Sentinel master, db or key prefix, another address
// in single mode, or, in Cluster and Sentinel modes (whose addresses
// are seeds: adding or removing one keeps the deployment), addresses of
// which none is in prev's.
func (l StoreLocation) movedFrom(prev StoreLocation) bool {
	if l.Kind != prev.Kind || l.Mode != prev.Mode || l.Master != prev.Master || l.DB != prev.DB || l.Prefix != prev.Prefix {
		return true
	}
	if l.Kind != "redis" {
		return false
	}
	if l.Mode == "single" {
		return !slices.Equal(l.Addrs, prev.Addrs)
	}
	for _, a := range l.Addrs {
		if slices.Contains(prev.Addrs, a) {
			return false
		}
	}
	return true
}

// storeSwitch is what a handler's State remembers, across reloads, of
// where its Idempotency-Keys live (SwitchStore).
type storeSwitch struct {
	// load identifies the configuration load that recorded locs (its
	// Caddy context's Done channel): every handler of one name in one
	// configuration shares it.
	load any
	// locs are where the handlers of this name in that load keep their
	// keys, lease the longest lease among them.
	locs  []StoreLocation
	lease time.Duration
	// prevLocs and prevLease are the same for the load before it: the
	// configuration whose requests may still run.
	prevLocs  []StoreLocation
	prevLease time.Duration
	// refusedUntil is when keyed requests may run again after a
	// reload moved the keys (zero: not refused).
	refusedUntil time.Time
}

// SwitchStore records that the configuration load identified by load
// (any comparable value the handlers of one load share: the host passes
// its Caddy context's Done channel) runs e, which keeps its
// Idempotency-Keys at loc. When the previous load of this handler's
// name kept them elsewhere (StoreLocation.movedFrom each of its
// locations), the requests it may still be running hold keys the new
// namespace does not know, and a repeat of one must not run it a second
// time: keyed requests are answered 503 store-unavailable (Retry-After:
// the time left) for the longer of the two loads' longest leases
// (MaxLease), through later reloads too; requests without a key are
// served. Logged at WARN. Two handlers of one name in one
// configuration (which share this State) may keep their keys in
// different places without refusing each other. Within one process
// only: a restarted process runs nothing of the old one's. A reload
// that fails after this call leaves its locations recorded, so
// switching back costs one more such refusal.
func (s *State) SwitchStore(e *Engine, loc StoreLocation, load any) {
	lease := e.MaxLease()
	s.mu.Lock()
	defer s.mu.Unlock()
	sw := &s.store
	if load == nil || sw.load != load {
		sw.prevLocs, sw.prevLease = sw.locs, sw.lease
		sw.load, sw.locs, sw.lease = load, nil, 0
	}
	if !slices.ContainsFunc(sw.locs, func(l StoreLocation) bool { return !loc.movedFrom(l) && !l.movedFrom(loc) }) {
		sw.locs = append(sw.locs, loc)
	}
	sw.lease = max(sw.lease, lease)
	if len(sw.prevLocs) == 0 || slices.ContainsFunc(sw.prevLocs, func(p StoreLocation) bool { return !loc.movedFrom(p) }) {
		return
	}
	d := max(sw.prevLease, lease)
	if until := e.now().Add(d); until.After(sw.refusedUntil) {
		sw.refusedUntil = until
	}
	from := make([]string, len(sw.prevLocs))
	for i, p := range sw.prevLocs {
		from[i] = p.String()
	}
	e.logger.Warn("the Idempotency-Key store changed with this configuration: keys and stored answers of the previous one are not seen here, so requests with an Idempotency-Key answer 503 store-unavailable until every request the previous configuration may still run has ended (docs/cluster.md, Failure modes)",
		zap.Strings("from", from), zap.Stringer("to", loc), zap.Duration("for", d))
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
