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

// storeSwitch is what a handler's State knows, across reloads, of the
// keyed requests its engines are running and where their
// Idempotency-Keys live (State.SwitchStore, Engine.enterKeyed). Under
// State.mu.
type storeSwitch struct {
	// runs are the keyed requests running, by load and location.
	runs []*keyedRuns
}

// keyedRuns are the keyed requests running in the engines of one
// configuration load that keep their keys at one location.
type keyedRuns struct {
	load any
	loc  StoreLocation
	n    int       // running
	end  time.Time // the latest lease end among them (start + MaxLease)
	// warned: a refusal for these requests was logged.
	warned bool
}

// sameAs reports whether l and o reach the same keys (neither moved
// from the other).
func (l StoreLocation) sameAs(o StoreLocation) bool { return !l.movedFrom(o) }

// engineStore is where one engine keeps its Idempotency-Keys and the
// configuration load it belongs to (SwitchStore), fixed before it serves.
type engineStore struct {
	load  any
	loc   StoreLocation
	lease time.Duration
}

// maxMovedRetryAfter bounds the Retry-After of a keyed request refused
// because the keys moved (enterKeyed): the requests it waits for
// usually end well within their lease.
const maxMovedRetryAfter = 5 * time.Second

// SwitchStore records that e, of the configuration load identified by
// load (a comparable value every handler of one load shares: the host
// passes its Caddy context's Done channel; nil: e alone), keeps its
// Idempotency-Keys at loc. Call it before e serves.
//
// A keyed request e serves while a request of another load of this
// name, keeping its keys elsewhere (StoreLocation.movedFrom), is still
// running is answered 503 store-unavailable (Engine.enterKeyed): it may
// repeat that request, whose key e's store does not know, and must not
// run it a second time. Requests without a key are served, and so are
// keyed requests once no such request runs. Handlers of one name in one
// configuration (which share this State) keep their keys where they
// like without refusing each other; a load that fails never serves and
// refuses nothing. Within one process and one name: a restarted process
// runs nothing of the old one's, and a renamed handler starts a State
// of its own, not compared (docs/cluster.md).
func (s *State) SwitchStore(e *Engine, loc StoreLocation, load any) {
	if load == nil {
		load = e
	}
	e.storeAt = engineStore{load: load, loc: loc, lease: e.MaxLease()}
}

// enterKeyed counts a keyed request of h as running (exitKeyed ends
// it), or returns the store error that refuses it: a keyed request of
// another load of h's name, whose keys live elsewhere, is running
// (SwitchStore). The error's Retry-After is the time left of those
// requests' leases, at most maxMovedRetryAfter.
func (h *Engine) enterKeyed() error {
	at := &h.storeAt
	now := h.now()
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	sw := &h.st.store
	var mine *keyedRuns
	var blocking []*keyedRuns
	for _, r := range sw.runs {
		switch {
		case r.load == at.load && r.loc.sameAs(at.loc):
			mine = r
		case r.load != at.load && !r.loc.sameAs(at.loc):
			blocking = append(blocking, r)
		}
	}
	if len(blocking) > 0 {
		left := time.Second
		for _, r := range blocking {
			left = max(left, r.end.Sub(now))
			if !r.warned {
				r.warned = true
				h.logger.Warn("the Idempotency-Key store changed with a configuration reload: requests with an Idempotency-Key answer 503 store-unavailable while the previous configuration's keyed requests run, whose keys are not seen here (docs/cluster.md, Failure modes)",
					zap.Stringer("running_in", r.loc), zap.Int("running", r.n), zap.Stringer("here", at.loc))
			}
		}
		return &store.RetryAfterError{After: min(left, maxMovedRetryAfter),
			Why: "the gateway's Idempotency-Key store changed with a configuration reload, and requests of the previous configuration, whose keys this one does not see, are still running: this one may repeat one of them, so keyed requests resume once they have ended (requests without an Idempotency-Key are served)"}
	}
	if mine == nil {
		mine = &keyedRuns{load: at.load, loc: at.loc}
		sw.runs = append(sw.runs, mine)
	}
	mine.n++
	if end := now.Add(at.lease); end.After(mine.end) {
		mine.end = end
	}
	return nil
}

// exitKeyed ends a keyed request enterKeyed counted.
func (h *Engine) exitKeyed() {
	at := &h.storeAt
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	sw := &h.st.store
	for i, r := range sw.runs {
		if r.load == at.load && r.loc.sameAs(at.loc) {
			if r.n--; r.n <= 0 {
				sw.runs = slices.Delete(sw.runs, i, i+1)
			}
			return
		}
	}
}
