package engine

// The request series of the metrics (metrics.go): requests by method,
// status and door, the request-duration histogram by door, kind and
// outcome, pass-through timing, and the bounded label helpers they use.

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// request counts one handled request by method (bucketed by
// methodSeries), final status code and binding (the door: agtp.BindingHTTP,
// BindingNative or BindingMCP; anything else counts as http).
func (m *metrics) request(method string, status int, binding string) {
	if m == nil {
		return
	}
	b := bindingIndex(binding)
	lc := &m.methodSeries(method)[b]
	code := codeLabel(status)
	if c := lc.last.Load(); c != nil && c.code == code {
		c.counter.Inc()
		return
	}
	c := &codeCounter{code: code, counter: m.requests.WithLabelValues(lc.label, code, bindings[b])}
	lc.last.Store(c)
	c.counter.Inc()
}

// MCPAnswered counts one HTTP request the MCP door answered on its
// path with status (the status written; 0, nothing written, is 200) in
// caddy_rcns_mcp_http_requests_total: every message an agent sends the
// door is counted there, the malformed ones that reach neither the
// engine nor caddy_rcns_requests_total included (a JSON-RPC body that
// does not parse is a 400 of the MCP SDK).
func (h *Engine) MCPAnswered(status int) { h.metrics.mcpRequest(status) }

// mcpRequest counts one HTTP request the MCP door answered with status
// (MCPAnswered).
func (m *metrics) mcpRequest(status int) {
	if m == nil {
		return
	}
	m.mcpRequests.WithLabelValues(codeLabel(status)).Inc()
}

// requestKind is what answered an AGTP request: the kind label of
// caddy_rcns_request_duration_seconds, set by the stage that answered
// (dispatch). Its values index requestKinds.
type requestKind uint8

// The request kinds, in requestKinds order.
const (
	// kindUnrouted: answered before the request reached a built-in, an
	// endpoint, a contract or the gate (the framing, method, path,
	// identity and Idempotency-Key checks, a door's own refusal, a store
	// failure while looking the pair up).
	kindUnrouted requestKind = iota
	// kindBuiltin: a Tier A built-in (DISCOVER, PROPOSE, INSPECT, REVOKE,
	// SUSPEND), anonymous DISCOVER included.
	kindBuiltin
	// kindTierB: a registered Tier B endpoint (§10 step 8).
	kindTierB
	// kindContract: served under an existing contract, presented by
	// synthesis id (step 7) or found by pair (Tier C, step 8b).
	kindContract
	// kindGate: the RCNS gate for an unserved pair (step 9), a synthesis
	// or its refusal.
	kindGate
	// kindPassthrough: not an AGTP request: a legacy request the rcns
	// handler passed to the next handler (PassedThrough), on the HTTP
	// binding only.
	kindPassthrough
)

// requestKinds are the kind label's values, in requestKind order.
var requestKinds = [...]string{"unrouted", "builtin", "tier_b", "contract", "gate", "passthrough"}

// requestOutcomes are the outcome label's values, in outcomeIndex order.
var requestOutcomes = [...]string{"success", "negotiated", "refused", "error"}

// outcomeIndex classes an answer, by its final status (0 is 200, as
// codeLabel has it) and the reason token of a refusal ("" for none),
// into requestOutcomes: success (1xx-3xx but 262 and 263), negotiated
// (263 Proposal Approved and 461 Contract Available: a contract was
// issued), error (5xx, a status outside 100-599, and the 422s of a
// failed upstream call or plan: the upstream_* codes and
// composition_failed of spec §7.3, the gateway's side failing rather
// than the caller's request) and refused (every other 4xx, 262
// Authorization Required, and the MCP door's 501
// no-authorization-server: an answer the gateway gives by design to a
// client looking for an OAuth server, not a failure).
func outcomeIndex(status int, reason string) int {
	switch {
	case reason == agtp.NoAuthorizationServer.Token:
		return 2
	case status == 0:
		return 0
	case status == 263 || status == 461:
		return 1
	case status == 262:
		return 2
	case status >= 100 && status < 400:
		return 0
	case status >= 400 && status < 500:
		switch reason {
		case recipes.ErrUpstreamTimeout, recipes.ErrUpstreamConnection, recipes.ErrUpstreamMalformed,
			recipes.ErrUpstreamAuthentication, recipes.ErrUpstream, recipes.ErrCompositionFailed:
			return 3
		}
		return 2
	}
	return 3
}

// requestDuration observes one AGTP request's time in the engine
// (seconds) by binding (bindingIndex), what answered it (kind) and the
// outcome of its final status and refusal reason (outcomeIndex). Each
// child is resolved once.
func (m *metrics) requestDuration(binding string, kind requestKind, status int, reason string, seconds float64) {
	if m == nil {
		return
	}
	k := int(kind)
	if k >= int(kindPassthrough) {
		k = int(kindUnrouted)
	}
	m.observeRequest(bindingIndex(binding), k, outcomeIndex(status, reason), seconds)
}

// observeRequest observes seconds in the request duration child of
// bindings[b], requestKinds[k] and requestOutcomes[o], resolving it the
// first time.
func (m *metrics) observeRequest(b, k, o int, seconds float64) {
	l := &m.durations[b][k][o].p
	if p := l.Load(); p != nil {
		(*p).Observe(seconds)
		return
	}
	obs := m.requestSeconds.WithLabelValues(bindings[b], requestKinds[k], requestOutcomes[o])
	l.Store(&obs)
	obs.Observe(seconds)
}

// PassedThrough observes one legacy request the rcns handler passed to
// the next handler (no Agent-ID, an HTTP or pass-through method; spec
// §2.3) in caddy_rcns_request_duration_seconds, with binding http and
// kind passthrough, so that legacy latency is told from agent latency
// (Caddy's own caddy_http_* series label both handler="rcns"). status
// is the final status the next handler wrote (0: none, as when it
// returned an error for Caddy's error routes to answer; then the
// error's caddyhttp status, passed by the caller); elapsed is the time
// the next handler took. The outcome is success below 400, refused for
// a 4xx, error for a 5xx or none.
func (h *Engine) PassedThrough(status int, elapsed time.Duration) {
	m := h.metrics
	if m == nil {
		return
	}
	o := 0
	switch {
	case status >= 100 && status < 400:
	case status >= 400 && status < 500:
		o = 2
	default:
		o = 3
	}
	m.observeRequest(0, int(kindPassthrough), o, elapsed.Seconds())
}

// bindings are the binding label's values, in bindingIndex order.
var bindings = [...]string{agtp.BindingHTTP, agtp.BindingNative, agtp.BindingMCP}

// bindingIndex is binding's index in bindings (0, http, for an unknown
// one: the label stays bounded).
func bindingIndex(binding string) int {
	for i, b := range bindings {
		if b == binding {
			return i
		}
	}
	return 0
}

// lastCounter is one method label's caddy_rcns_requests_total child for
// the status code it last counted: a request with the same code (most
// of them) skips WithLabelValues.
type lastCounter struct {
	label string
	last  atomic.Pointer[codeCounter]
}

// methodCounters are one method label's request counter caches, one
// per binding.
type methodCounters [len(bindings)]lastCounter

func newMethodCounters(label string) *methodCounters {
	var mc methodCounters
	for i := range mc {
		mc[i].label = label
	}
	return &mc
}

// codeCounter is the requests_total child of one method label and code.
type codeCounter struct {
	code    string
	counter prometheus.Counter
}

// methodSeries returns the request counter cache of method's label:
// method itself when it is an AGTP floor method or one passed to
// newMetrics, else "OTHER".
func (m *metrics) methodSeries(method string) *methodCounters {
	if lc, ok := m.methods[method]; ok {
		return lc
	}
	return m.other
}

// codeLabel returns the code label of an HTTP status; 0 (nothing written)
// is 200 as net/http would send it, and values outside 100–999 are "other".
func codeLabel(status int) string {
	if status == 0 {
		status = 200
	}
	if status < 100 || status >= len(codeLabels) {
		return labelOther
	}
	return codeLabels[status]
}

// reasonLabel returns the reason label: "none" for "", the token itself
// when it looks like a spec reason token (lowercase letters, digits, '-'
// and '_', at most maxReasonLen bytes), else "other" — so free text
// passed by mistake cannot create series.
func reasonLabel(reason string) string {
	if reason == "" {
		return labelNone
	}
	if len(reason) > maxReasonLen {
		return labelOther
	}
	for i := 0; i < len(reason); i++ {
		c := reason[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return labelOther
		}
	}
	return reason
}

// enum is a closed set of label values.
type enum struct {
	values []string
	set    map[string]struct{}
}

func enumOf(values ...string) enum {
	e := enum{values: values, set: make(map[string]struct{}, len(values))}
	for _, v := range values {
		e.set[v] = struct{}{}
	}
	return e
}

// label returns v when it is in the set, else "other".
func (e enum) label(v string) string {
	if _, ok := e.set[v]; ok {
		return v
	}
	return labelOther
}
