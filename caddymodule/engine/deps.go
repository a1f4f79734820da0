package engine

import (
	"context"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Deps are what an engine takes from its host (the Caddy module, or a
// test): every one a narrow interface or a value, none of them Caddy's.
type Deps struct {
	// Logger receives the engine's log lines. Nil: none.
	Logger *zap.Logger
	// Metrics is the Prometheus registry the engine registers its
	// collectors on (docs/metrics.md). The Caddy module passes Caddy's
	// registry of the configuration being loaded. Nil: a private
	// registry nobody scrapes.
	Metrics prometheus.Registerer
	// Events receives the contract lifecycle events (spec §17.1) as they
	// are written to the lifecycle log. Nil: none.
	Events EventSink
	// State is the name's State, shared by every engine of one
	// Config.Name across reloads. Nil: a State of its own (NewState).
	State *State
	// DataDir is where records_dir defaults to: <DataDir>/rcns/<name>.
	// Empty: records_dir must be set (a directory, or "off").
	DataDir string
	// Hosted are the manifest's hosted_protocols entries of the host's
	// other doors (the MCP door's, spec §9.2), published as given.
	Hosted []map[string]any
	// NodeID names this node in Attribution-Records, idempotency claims
	// and lifecycle events (the store's node_id; docs/cluster.md).
	NodeID string
	// Clock stamps Attribution-Records, contracts, attempt records and
	// the manifest (wall-clock times the agent reads). Nil: time.Now.
	// Latencies are measured on the monotonic clock, and the stores
	// keep their own clocks (Redis's TIME in store redis).
	Clock func() time.Time
}

// EventSink receives the contract lifecycle events (spec §17.1: the
// event type, such as "contract.created", and its fields). The Caddy
// module forwards them to Caddy's events app. Emit must not block the
// request for long: it runs on the request path.
type EventSink interface {
	Emit(eventType string, data map[string]any)
}

// Store is the shared state an engine runs on (Attach): the store set,
// and what the engine asks of it beyond the set.
type Store struct {
	// Set is the store's idempotency records, limiters, contracts,
	// attempts, replay cache and retained records (required).
	Set store.Set
	// Memory is the memory store behind Set (store memory): its gauges
	// are counted on each change. Nil for a shared store.
	Memory *store.Memory
	// Shared is the health of a store shared across processes (store
	// redis). Nil for the memory store.
	Shared SharedStore
}

// SharedStore is a store shared across processes (store redis): whether
// it answers, and the background retry of an answer it failed to store.
type SharedStore interface {
	// Down reports whether the store is known not to answer (its last
	// round trip or health check failed).
	Down() bool
	// RetryComplete keeps trying, in the background, to store resp
	// under claim c after its Complete failed with the store
	// unavailable, logging to logger. It reports false, and starts
	// nothing, when it cannot take one more (its bound is reached).
	RetryComplete(c store.Claim, resp idempotency.Response, logger *zap.Logger) bool
	// RetryAbandon keeps trying, in the background, to release claim c
	// (a request that did not reach execution) after its Abandon failed
	// with the store unavailable, logging to logger; false, starting
	// nothing, when its bound is reached.
	RetryAbandon(c store.Claim, logger *zap.Logger) bool
	// SettleLater runs settle, which stores the answer of agent's
	// Idempotency-Key key (or releases its claim, for a request that
	// did not reach execution), beside the answer instead of before it
	// (issue 32: a keyed request's answer waits for one round trip, its
	// claim), marking the key settling on this node until settle
	// returns (AwaitSettling). size is the bytes of the answer settle
	// holds (its body). It reports false, and runs nothing, when it
	// cannot take one more (its bounds are reached, or it is closing):
	// the caller then settles the key itself before answering.
	SettleLater(agent, key string, size int, settle func()) bool
	// AwaitSettling returns once SettleLater is not settling agent's
	// key on this node, or ctx ends: a repeat of the key on this node
	// then finds the answer stored and replays it (or finds the key
	// free) instead of getting 409 in flight.
	AwaitSettling(ctx context.Context, agent, key string)
	// Enter marks a request of the engine running on the store until
	// its Exit (Engine.Serve): a reload that ends the last
	// configuration using the store closes its client only once the
	// requests it counted have exited (bounded by the longest lease),
	// so that a request the reload overtook (Caddy does not wait for
	// them) still stores its key's answer and keeps its records.
	Enter()
	// Exit ends an Enter.
	Exit()
}

// now is the engine's wall clock (Deps.Clock).
func (h *Engine) now() time.Time {
	if h.clock != nil {
		return h.clock()
	}
	return time.Now()
}

// MaxLease is the longest Idempotency-Key lease this configuration
// gives: its longest plan (composition_timeout, or the longest call
// timeout of an endpoint agents call directly) plus
// idempotency_lease_margin. A Redis restart refuses keyed requests that
// long (the restart quarantine, docs/cluster.md).
func (h *Engine) MaxLease() time.Duration {
	run := time.Duration(h.CompositionTimeout)
	for _, ep := range h.set.Endpoints {
		if !ep.Internal {
			run = max(run, ep.Timeout())
		}
	}
	return h.leaseFor(run)
}

// StoreLimits is the store.Limits of this configuration: the bounds the
// host's store is built with (or, for the memory store, given to).
func (h *Engine) StoreLimits() store.Limits {
	return store.Limits{Idempotency: h.idempotencyLimits(), Contracts: h.storeLimits(), Attempts: h.AttemptBuffer,
		ReplayEntries: h.ReplayCacheSize, RecordRetention: time.Duration(h.RecordRetention), MaxRecords: h.MaxRetainedRecords}
}

// Restorer binds contracts' captured plans to this configuration's
// upstreams; a shared store restores contracts through it.
func (h *Engine) Restorer() *recipes.Restorer { return h.restorer }

// storeDown reports whether the shared store is known not to answer
// (the Redis store's last round trip failed); the memory store never is.
func (h *Engine) storeDown() bool { return h.shared != nil && h.shared.Down() }

// RefreshStoreGauges sets the gauges counted from the store (live
// contracts, idempotency records, attempt records). The memory store
// counts in memory, on each change; the host calls it for a shared
// store after each successful health check.
func (h *Engine) RefreshStoreGauges(ctx context.Context) {
	stamp := gaugeStamp()
	if n, err := h.sto.Contracts.Len(ctx); err == nil {
		h.metrics.setActiveContracts(stamp, n)
	}
	stamp = gaugeStamp()
	if n, err := h.sto.Idempotency.Len(ctx); err == nil && n >= 0 {
		h.metrics.setIdempotencyRecords(stamp, n)
	}
	stamp = gaugeStamp()
	if n, err := h.sto.Attempts.Len(ctx); err == nil {
		h.metrics.setAttemptRingSize(stamp, n)
	}
}
