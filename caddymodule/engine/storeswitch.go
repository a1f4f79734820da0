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
// where its configurations keep their Idempotency-Keys (SwitchStore,
// claimsRefusedErr). Under State.mu.
type storeSwitch struct {
	// seq numbers the loads (SwitchStore), from 1.
	seq uint64
	// loads are the locations of the loads whose handlers of this name
	// are provisioned and not yet cleaned up (State.Unload), by load.
	loads map[any]*loadStores
	// cur is the load that served the last keyed request of this name
	// (0: none yet), locs and lease its locations and longest lease.
	cur   uint64
	locs  []StoreLocation
	lease time.Duration
	// prevLocs and prevLease are the same for the load current before
	// it: the configuration whose requests may still run.
	prevLocs  []StoreLocation
	prevLease time.Duration
	// refusedUntil is when keyed requests may run again after a
	// reload moved the keys (zero: not refused).
	refusedUntil time.Time
}

// loadStores are the locations of one load's engines of a name.
type loadStores struct {
	seq   uint64
	locs  []StoreLocation
	lease time.Duration // the longest lease among them
	refs  int           // engines not yet unloaded
}

// sameAs reports whether l and o reach the same keys (neither moved
// from the other).
func (l StoreLocation) sameAs(o StoreLocation) bool { return !l.movedFrom(o) }

// engineStore is where one engine keeps its Idempotency-Keys and the
// configuration load it belongs to (SwitchStore), fixed before it serves.
type engineStore struct {
	load  any
	seq   uint64 // the load's number in its State
	loc   StoreLocation
	lease time.Duration
}

// SwitchStore records that e, of the configuration load identified by
// load (a comparable value every handler of one load shares: the host
// passes its Caddy context's Done channel; nil: e alone), keeps its
// Idempotency-Keys at loc. Call it before e serves, and Unload when its
// handler is cleaned up.
//
// Nothing is decided here: a load that fails after this call never
// serves and leaves nothing behind. The first keyed request served by
// an engine of a load newer than the one that served the last keyed
// request of this name makes that load the current one
// (claimsRefusedErr). When one of its locations is none of the
// previous load's (StoreLocation.movedFrom each), the requests the
// previous configuration may still run hold keys the new namespace
// does not know, and a repeat of one must not run it a second time:
// keyed requests of the name are answered 503 store-unavailable
// (Retry-After: the time left) for the longer of the two loads'
// longest leases (MaxLease), through later reloads too; requests
// without a key are served. Logged at WARN. A keyed request still
// served by an older load's engine whose location the current load
// does not have refuses the same way. Handlers of one name in one
// configuration (which share this State) may keep their keys in
// different places without refusing each other. Within one process
// and one name: a restarted process runs nothing of the old one's, and
// a renamed handler starts a State of its own, not compared
// (docs/cluster.md).
func (s *State) SwitchStore(e *Engine, loc StoreLocation, load any) {
	if load == nil {
		load = e
	}
	lease := e.MaxLease()
	s.mu.Lock()
	defer s.mu.Unlock()
	sw := &s.store
	if sw.loads == nil {
		sw.loads = map[any]*loadStores{}
	}
	p := sw.loads[load]
	if p == nil {
		sw.seq++
		p = &loadStores{seq: sw.seq}
		sw.loads[load] = p
	}
	p.locs = addLocation(p.locs, loc)
	p.lease = max(p.lease, lease)
	p.refs++
	e.storeAt = engineStore{load: load, seq: p.seq, loc: loc, lease: lease}
}

// Unload forgets e's part of its load's locations: the host calls it
// when e's handler is cleaned up (a load that failed, or one replaced).
func (s *State) Unload(e *Engine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.store.loads[e.storeAt.load]; p != nil {
		if p.refs--; p.refs <= 0 {
			delete(s.store.loads, e.storeAt.load)
		}
	}
}

// addLocation is locs with loc added unless one of them is sameAs it.
func addLocation(locs []StoreLocation, loc StoreLocation) []StoreLocation {
	if slices.ContainsFunc(locs, loc.sameAs) {
		return locs
	}
	return append(slices.Clip(locs), loc)
}

// claimsRefusedErr is the store error of a keyed request while a
// reload's move of the keys refuses them (State.SwitchStore), else nil.
// The first keyed request of a newer load makes it the current one.
func (h *Engine) claimsRefusedErr() error {
	at := &h.storeAt
	h.st.mu.Lock()
	sw := &h.st.store
	if at.seq != sw.cur || !slices.ContainsFunc(sw.locs, at.loc.sameAs) {
		h.switchStoreLocked(sw)
	}
	until := sw.refusedUntil
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

// switchStoreLocked handles a keyed request of h when h's load is not
// the current one or h's location is not among its locations: a newer
// load becomes the current one, another engine of the current load adds
// its location, and an older load's engine is compared with the
// current load. A location the other side lacks refuses keyed requests
// (SwitchStore). Under h.st.mu.
func (h *Engine) switchStoreLocked(sw *storeSwitch) {
	at := &h.storeAt
	var from, to []StoreLocation
	switch {
	case at.seq > sw.cur:
		if sw.cur != 0 {
			sw.prevLocs, sw.prevLease = sw.locs, sw.lease
		}
		sw.cur, sw.locs, sw.lease = at.seq, nil, 0
		if p := sw.loads[at.load]; p != nil {
			sw.locs, sw.lease = slices.Clip(p.locs), p.lease
		}
		sw.locs, sw.lease = addLocation(sw.locs, at.loc), max(sw.lease, at.lease)
		from, to = sw.prevLocs, sw.locs
	case at.seq == sw.cur:
		sw.locs, sw.lease = addLocation(sw.locs, at.loc), max(sw.lease, at.lease)
		from, to = sw.prevLocs, []StoreLocation{at.loc}
	default:
		from, to = sw.locs, []StoreLocation{at.loc}
	}
	if len(from) == 0 {
		return
	}
	var moved []string
	for _, l := range to {
		if !slices.ContainsFunc(from, l.sameAs) {
			moved = append(moved, l.String())
		}
	}
	if len(moved) == 0 {
		return
	}
	now := h.now()
	wasRefused := sw.refusedUntil.After(now)
	d := max(sw.prevLease, sw.lease, at.lease)
	if until := now.Add(d); until.After(sw.refusedUntil) {
		sw.refusedUntil = until
	}
	if wasRefused && at.seq < sw.cur {
		return // an older load's requests while refused: logged once
	}
	names := make([]string, len(from))
	for i, p := range from {
		names[i] = p.String()
	}
	h.logger.Warn("the Idempotency-Key store changed with this configuration: keys and stored answers of the previous one are not seen here, so requests with an Idempotency-Key answer 503 store-unavailable until every request the previous configuration may still run has ended (docs/cluster.md, Failure modes)",
		zap.Strings("from", names), zap.Strings("to", moved), zap.Duration("for", d))
}
