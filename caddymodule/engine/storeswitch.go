package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync"
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
	// memory is the State whose memory store holds the keys (Kind
	// "memory"; SwitchStore sets it): a name's State made afresh (the
	// name left the configuration, then came back) is another place.
	memory *State
}

// String is the location for logs (no credentials).
func (l StoreLocation) String() string {
	if l.Kind != "redis" {
		return l.Kind
	}
	return fmt.Sprintf("redis %s %s master=%q db=%d key_prefix=%q", l.Mode, strings.Join(l.Addrs, ","), l.Master, l.DB, l.Prefix)
}

// deployment names the Redis deployment, db and key prefix l reads,
// for grouping the handlers that count one store's keys: l.String(),
// without the addresses in Cluster and Sentinel modes, whose addresses
// are seeds (two handlers seeding one deployment differently read the
// same keys; two deployments alike in all else are taken as one).
func (l StoreLocation) deployment() string {
	if l.Mode == "single" {
		return l.String()
	}
	return fmt.Sprintf("redis %s master=%q db=%d key_prefix=%q", l.Mode, l.Master, l.DB, l.Prefix)
}

// movedFrom reports whether the keys at l are not those at prev: another
// store kind, mode, Sentinel master, db or key prefix, another address
// in single mode, or, in Cluster and Sentinel modes (whose addresses
// are seeds: adding or removing one keeps the deployment), addresses of
// which none is in prev's.
func (l StoreLocation) movedFrom(prev StoreLocation) bool {
	if l.Kind != prev.Kind || l.Mode != prev.Mode || l.Master != prev.Master || l.DB != prev.DB || l.Prefix != prev.Prefix || l.memory != prev.memory {
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

// keyedRuns are the keyed requests running in this process, by rcns
// name (Engine.enterKeyed): kept apart from the name's State, which a
// reload that drops the name destroys while its requests still run.
var keyedRuns = struct {
	sync.Mutex
	byName map[string][]*keyedRun
}{byName: map[string][]*keyedRun{}}

// keyedRun counts the keyed requests running in the engines of one
// configuration load of a name that keep their keys at one location.
type keyedRun struct {
	load any
	loc  StoreLocation
	n    int       // running
	end  time.Time // the latest lease end among them (start + MaxLease)
	// warned: a refusal for these requests was logged.
	warned bool
}

// equal reports whether l and o are written the same (sameAs is
// whether they reach the same keys).
func (l StoreLocation) equal(o StoreLocation) bool {
	return l.Kind == o.Kind && l.Mode == o.Mode && l.Master == o.Master && l.DB == o.DB && l.Prefix == o.Prefix &&
		l.memory == o.memory && slices.Equal(l.Addrs, o.Addrs)
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

// SwitchStore records that e, of the configuration load identified by
// load (a comparable value every handler of one load shares: the host
// passes its Caddy context's Done channel; nil: e alone), keeps its
// Idempotency-Keys at loc (the memory store: this State's). Call it
// before e serves.
//
// A keyed request e serves while a keyed request of another load of
// this name, keeping its keys elsewhere (StoreLocation.movedFrom: another
// store, Redis deployment, db or key prefix, or the memory store of a
// State since made afresh), is still running in this process is
// answered 503 store-unavailable (Engine.enterKeyed): it may repeat
// that request, whose key e's store does not know, and must not run it
// a second time. Requests without a key are served, and so are keyed
// requests once no such request runs. Handlers of one name in one
// configuration keep their keys where they like without refusing each
// other; a load that fails serves nothing. A renamed handler is another
// name, not compared (docs/cluster.md). loc also groups e's store
// gauges with the other handlers of that store (metrics.setGroup).
func (s *State) SwitchStore(e *Engine, loc StoreLocation, load any) {
	if load == nil {
		load = e
	}
	var group any = loc.deployment() // the handlers of one store count it once (sharedGauge)
	if loc.Kind == "memory" {
		loc.memory = s
		group = s
	}
	e.storeAt = engineStore{load: load, loc: loc, lease: e.MaxLease()}
	e.metrics.setGroup(group)
}

// enterKeyed counts a keyed request of h as running and returns its
// count, for exitKeyed; or it returns the store error that refuses it:
// a keyed request of another load of h's name, whose keys live
// elsewhere, is running (SwitchStore). The error's Retry-After is the
// time left of those requests' leases, at least 1 s and at most
// maxInFlightRetryAfter (it waits for running requests, as a 409 in
// flight does).
func (h *Engine) enterKeyed() (*keyedRun, error) {
	at := &h.storeAt
	now := h.now()
	keyedRuns.Lock()
	defer keyedRuns.Unlock()
	runs := keyedRuns.byName[h.Name]
	var mine *keyedRun
	var blocking []*keyedRun
	for _, r := range runs {
		switch {
		case r.load == at.load && r.loc.equal(at.loc):
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
				h.logger.Warn("the Idempotency-Key store changed with a configuration reload (or a site of the same rcns name keeps its keys in another store): requests with an Idempotency-Key answer 503 store-unavailable while the previous configuration's keyed requests run, whose keys are not seen here (docs/cluster.md, Failure modes)",
					zap.Stringer("running_in", r.loc), zap.Int("running", r.n), zap.Stringer("here", at.loc))
			}
		}
		return nil, &store.RetryAfterError{After: min(left, maxInFlightRetryAfter),
			Why: "the gateway's Idempotency-Key store changed with a configuration reload (or a site of the same rcns name keeps its keys in another store), and requests of the previous configuration, whose keys this one does not see, are still running: this one may repeat one of them, so keyed requests resume once they have ended (requests without an Idempotency-Key are served)"}
	}
	if mine == nil {
		mine = &keyedRun{load: at.load, loc: at.loc}
		keyedRuns.byName[h.Name] = append(runs, mine)
	}
	mine.n++
	if end := now.Add(at.lease); end.After(mine.end) {
		mine.end = end
	}
	return mine, nil
}

// exitKeyed ends a keyed request enterKeyed counted in r.
func (h *Engine) exitKeyed(r *keyedRun) {
	keyedRuns.Lock()
	defer keyedRuns.Unlock()
	if r.n--; r.n > 0 {
		return
	}
	runs := slices.DeleteFunc(keyedRuns.byName[h.Name], func(x *keyedRun) bool { return x == r })
	if len(runs) == 0 {
		delete(keyedRuns.byName, h.Name)
		return
	}
	keyedRuns.byName[h.Name] = runs
}
