package engine

import (
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
)

// This file is the engine's read-only views for the doors: what a door
// needs to frame its wire (the tools to list, the identity mode, the
// registry to resolve a caller, the drain bounds) without reaching an
// unexported field. A view is the engine's own value: a door reads it
// and never changes it.

// Refusal is what a door knows of a request it refuses itself, before
// the engine ran it (Refuse).
type Refusal struct {
	// Agent is the caller the door identified (VerifyTransport, then
	// AgentRegistry), nil when it did not get that far: the answer then names
	// the caller as an unverified request's would.
	Agent *policy.Agent
	// Body is the request's body as the door read it, and BodyRead
	// whether it read all of it: the Attribution-Record then hashes the
	// body, and the answer keeps the connection open.
	Body     []byte
	BodyRead bool
	// Method is the AGTP method the refused request named, when the
	// door knows one (the MCP door's refusal of a tool call: the tool's
	// method): the Attribution-Record's method, as a dispatched
	// request's. "" leaves it out.
	Method string
}

// Refuse is the AGTP answer to r that a door refused itself with e (the
// MCP door's body, depth, batch and identity checks): e with every AGTP
// response header and an Attribution-Record, in the body of spec §19,
// counted in the requests metric as any other answer.
func (h *Engine) Refuse(r *agtp.Request, e *agtp.Error, how Refusal) *agtp.Response {
	start := time.Now()
	h.Activate()
	x := h.newExchange(r)
	x.bodyRead, x.rawBody = how.BodyRead, how.Body
	x.method = how.Method
	if how.Agent != nil {
		h.setRecordAgent(x)
		x.identifiedAs(how.Agent)
	}
	x.fail(e)
	return h.finish(x, start)
}

// CallBound is the longest a Tier B call of ep runs once started: its
// upstream credential's resolution (a token exchange's own timeout,
// upstreamauth.Waiting; none for the others) and then the endpoint's
// call timeout.
func (h *Engine) CallBound(ep *recipes.Endpoint) time.Duration {
	bound := ep.Timeout()
	if w, ok := h.credPolicies[ep.UpstreamName()].(upstreamauth.Waiting); ok {
		bound += w.MaxWait()
	}
	return bound
}

// AgentRegistry is the agent registry (the agents documents): a door resolves
// the caller it verified through it (policy.ResolveCaller).
func (h *Engine) AgentRegistry() *policy.Registry { return h.agents }

// RecipeSet is the loaded endpoint and recipe set: the MCP door lists its
// tools from it.
func (h *Engine) RecipeSet() *recipes.Set { return h.set }

// Methods is the method policy (catalog, legacy verbs, aliases,
// allow/disallow, redirects).
func (h *Engine) Methods() *policy.MethodPolicy { return h.methods }

// Logger is the engine's logger; a door logs its own lines under it.
func (h *Engine) Logger() *zap.Logger { return h.logger }

// IsAGTPMethod reports whether method m is an AGTP method to this
// engine: in the method catalog (or a configured custom method) and not
// a passthrough_methods entry. The HTTP door asks it for a request
// without Agent-ID whose method is not an IANA HTTP method.
func (h *Engine) IsAGTPMethod(m string) bool {
	return !h.passthru[m] && h.methods.IsMethod(m)
}

// StoreMetrics is the engine's store collectors, for the host that
// runs a shared store's client (its round trips, its health check):
// docs/metrics.md "Store".
type StoreMetrics struct{ m *metrics }

// StoreMetrics returns the store collectors of this engine's
// configuration (each configuration registers its own on the registry
// it was given).
func (h *Engine) StoreMetrics() StoreMetrics { return StoreMetrics{h.metrics} }

// RoundTrip records one store round trip of op: its latency and, when
// err is set, an error (caddy_rcns_store_round_trip_duration_seconds,
// caddy_rcns_store_errors_total). An
// op outside store.Ops is counted as "other".
func (s StoreMetrics) RoundTrip(op store.Op, latency time.Duration, err error) {
	s.m.storeRoundTrip(op, latency, err)
}

// Series identifies the store collectors s records into: the engines
// of one config load share them (one registry), so a host recording a
// round trip for several engines records it once per Series.
func (s StoreMetrics) Series() any {
	if s.m == nil {
		return nil
	}
	return s.m.storeSeconds
}

// SetUp sets caddy_rcns_store_up.
func (s StoreMetrics) SetUp(up bool) { s.m.setStoreUp(up) }

// SetQuarantine sets the seconds left of the restart quarantine
// (caddy_rcns_store_quarantine_seconds).
func (s StoreMetrics) SetQuarantine(left time.Duration) { s.m.setStoreQuarantine(left) }

// SetNodeIDConflict sets caddy_rcns_store_node_id_conflict.
func (s StoreMetrics) SetNodeIDConflict(clash bool) { s.m.setNodeIDConflict(clash) }

// NodeID is the node id this engine names itself by (Deps.NodeID).
func (h *Engine) NodeID() string { return h.nodeID }

// Tasks is the store's MCP task state (store.Tasks), shared by every
// node of the store.
func (h *Engine) Tasks() store.Tasks { return h.sto.Tasks }
