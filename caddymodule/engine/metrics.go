package engine

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Metric names and label sets (docs/metrics.md describes each one). Every
// label value is bounded: closed enumerations are mapped to "other" when a
// caller passes a value outside them, and recipe, step, upstream and budget
// are operator-configured names. No metric is labelled by agent id,
// Idempotency-Key, path or synthesis id (ARCHITECTURE.md "Metrics").
const (
	metricsNamespace = "caddy"
	metricsSubsystem = "rcns"

	// labelOther replaces a value outside a closed enumeration.
	labelOther = "other"
	// labelNone is the reason of an accepted gate evaluation.
	labelNone = "none"
	// methodOther is the method label of a method that is neither in the
	// AGTP floor nor configured (as Caddy labels unknown HTTP methods).
	methodOther = "OTHER"
	// maxReasonLen bounds a reason token's length; longer values become
	// "other".
	maxReasonLen = 64
)

// durationBuckets suit durations from about 1 ms to 30 s (composition,
// upstream calls and steps share them so panels can be compared).
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// requestBuckets suit a whole AGTP request in the engine, from 100 µs
// (a built-in or an early refusal) to 30 s (a plan's upstream calls);
// from 1 ms up they are durationBuckets, so panels can be compared.
var requestBuckets = append([]float64{0.0001, 0.00025, 0.0005}, durationBuckets...)

// storeBuckets suit store round trips, from 100 µs (loopback Redis) to
// the read timeout and beyond.
var storeBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// floorMethods are the 18 AGTP floor methods, always their own method
// label value.
var floorMethods = [...]string{
	"QUERY", "DISCOVER", "DESCRIBE", "INSPECT", "SUMMARIZE", "PLAN",
	"PROPOSE", "EXECUTE", "DELEGATE", "ESCALATE", "CONFIRM", "SUSPEND",
	"NOTIFY", "ACTIVATE", "DEACTIVATE", "REINSTATE", "REVOKE", "DEPRECATE",
}

// Closed label enumerations. Values outside them are counted as "other".
var (
	gateOutcomes         = enumOf("accepted", "refused")
	lockNames            = enumOf("server_policy", "caller_opt_in", "caller_scope", "trust_tier")
	synthesisModes       = enumOf("confirm-first", "optimistic", "propose")
	synthesisOutcomes    = enumOf("previewed", "executed", "failed")
	presentationOutcomes = enumOf("executed", "failed", "not_run", "not_found", "not_yours", "revoked")
	presentationVia      = enumOf(viaSynthesisID, viaPair)
	upstreamClasses      = enumOf("ok", "upstream_timeout", "upstream_connection_error", "upstream_malformed_response", "upstream_authentication_failed", "upstream_error", "mapped")
	idempotencyEvents    = enumOf("replay", "conflict", "in_flight", "outcome_unknown", "store_full")
	storeOps             = func() enum {
		ops := make([]string, len(store.Ops))
		for i, op := range store.Ops {
			ops[i] = string(op)
		}
		return enumOf(ops...)
	}()
)

// codeLabels holds the code label of every status 100–999 so request
// does not allocate; other statuses are labelled "other".
var codeLabels = func() (t [1000]string) {
	for i := 100; i < len(t); i++ {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// metrics holds the gateway's collectors for one config load.
//
// Every method is safe for concurrent use and does nothing on a nil
// *metrics, so request-path code may call them unconditionally.
type metrics struct {
	// registry is the private registry used when newMetrics was given no
	// registerer (tests); nil otherwise.
	registry *prometheus.Registry
	// methods are the method label values kept as themselves (the AGTP
	// floor plus the configured methods), each with its request counter
	// cache; other is OTHER's. Read-only after newMetrics.
	methods map[string]*methodCounters
	other   *methodCounters

	gateEvaluations    *prometheus.CounterVec   // outcome, reason
	lockRefusals       *prometheus.CounterVec   // lock
	syntheses          *prometheus.CounterVec   // recipe, mode, outcome
	presentations      *prometheus.CounterVec   // outcome
	activeContracts    gaugeCell                // summed over states
	compositionSeconds *prometheus.HistogramVec // recipe
	upstreamSeconds    *prometheus.HistogramVec // upstream
	upstreamErrors     *prometheus.CounterVec   // upstream, class
	credentialRefusals *prometheus.CounterVec   // upstream, reason
	stepSeconds        *prometheus.HistogramVec // recipe, step
	rateLimitRefusals  *prometheus.CounterVec   // budget
	idempotencyEvents  *prometheus.CounterVec   // event
	idempotencyRecords gaugeCell                // summed over states
	attemptRecords     gaugeCell                // summed over states
	requests           *prometheus.CounterVec   // method, code, binding
	mcpRequests        *prometheus.CounterVec   // code
	requestSeconds     *prometheus.HistogramVec // binding, kind, outcome
	storeSeconds       *prometheus.HistogramVec // op
	storeErrors        *prometheus.CounterVec   // op
	storeUp            gaugeCell                // the lowest: 0 while any store is down
	storeQuarantine    gaugeCell                // seconds left of the restart quarantine (the longest)
	nodeIDConflict     gaugeCell                // 1 while another live process uses a node_id of this load's

	// presented holds the presentation counters started at zero below,
	// by via (0: synthesis_id, 1: pair) and presentationOutcomes index;
	// nil where a series is left to its first event.
	presented [2][6]prometheus.Counter
	// series memoizes the histogram children of a recipe's or an
	// endpoint's labels (*recipes.Recipe → *recipeSeries,
	// *recipes.Endpoint → prometheus.Observer), resolved at first use:
	// WithLabelValues hashes and compares every label on each call.
	series sync.Map
	// durations are the request duration histogram's children, by
	// bindings, requestKinds and requestOutcomes index, each resolved at
	// its first observation (requestDuration).
	durations [len(bindings)][len(requestKinds)][len(requestOutcomes)]lazyObserver
}

// recipeSeries are one recipe's histogram children: its composition,
// and each step's duration and upstream call, by step index. A step's
// children are resolved at its first observation, so a series appears
// only once it has a sample, as with WithLabelValues at each event.
type recipeSeries struct {
	composition prometheus.Observer
	steps       []lazyObserver
	upstreams   []lazyObserver
}

// lazyObserver is a histogram child resolved at first use. Two first
// uses at once may both resolve it: WithLabelValues gives both the same
// child.
type lazyObserver struct {
	p atomic.Pointer[prometheus.Observer]
}

// get returns the child of vec for the label value a, or a and b when
// two (vec has two labels), resolving it the first time. A slot always
// stands for the same label values (one step of one recipe), so the
// values of later calls are not compared.
func (l *lazyObserver) get(vec *prometheus.HistogramVec, a, b string, two bool) prometheus.Observer {
	if o := l.p.Load(); o != nil {
		return *o
	}
	var o prometheus.Observer
	if two {
		o = vec.WithLabelValues(a, b)
	} else {
		o = vec.WithLabelValues(a)
	}
	l.p.Store(&o)
	return o
}

// newMetrics registers every collector on reg (reusing existing ones on
// AlreadyRegisteredError) and returns them. reg may be nil (tests): then a
// private registry is used. methods are the configured endpoint and recipe
// methods; with the 18 AGTP floor methods they are the values the method
// label of caddy_rcns_requests_total may take, any other method being
// counted as "OTHER".
//
// In Caddy, pass ctx.GetMetricsRegistry(): Caddy builds a fresh registry
// at every config load, so call newMetrics from New, never cache the
// result across loads, and expect counters to restart at zero after a
// reload. Several handlers provisioned in one load share the collectors.
func newMetrics(reg prometheus.Registerer, methods []string) (*metrics, error) {
	m := &metrics{methods: make(map[string]*methodCounters, len(floorMethods)+len(methods)), other: newMethodCounters(methodOther)}
	if r, ok := reg.(*prometheus.Registry); reg == nil || (ok && r == nil) {
		m.registry = prometheus.NewRegistry()
		reg = m.registry
	}
	for _, name := range floorMethods {
		m.methods[name] = newMethodCounters(name)
	}
	for _, name := range methods {
		if name != "" {
			m.methods[name] = newMethodCounters(name)
		}
	}

	var errs []error
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c, err := registerCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help,
		}, labels))
		errs = append(errs, err)
		return c
	}
	histogramVec := func(name, help string, labels ...string) *prometheus.HistogramVec {
		h, err := registerCollector(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help,
			Buckets: durationBuckets,
		}, labels))
		errs = append(errs, err)
		return h
	}
	// A gauge is the handler's cell of a series every handler of the
	// load sets (sharedGauge; grouped: a count, one value per store),
	// counted under the handler's own group until setGroup; initial is
	// its value until set.
	gauge := func(name, help string, combine func(a, b float64) float64, grouped bool, initial float64) gaugeCell {
		g, err := registerCollector(reg, newSharedGauge(name, help, combine, grouped))
		errs = append(errs, err)
		return gaugeCell{g, g.cell(m, initial)}
	}

	m.gateEvaluations = counterVec("gate_evaluations_total",
		"RCNS four-lock gate evaluations by outcome (accepted, refused) and refusal reason token (none when accepted).",
		"outcome", "reason")
	m.lockRefusals = counterVec("lock_refusals_total",
		"RCNS gate refusals by the lock that refused (server_policy, caller_opt_in, caller_scope, trust_tier).",
		"lock")
	m.syntheses = counterVec("syntheses_total",
		"Contract syntheses by recipe, mode (confirm-first, optimistic, propose) and outcome (previewed, executed, failed).",
		"recipe", "mode", "outcome")
	m.presentations = counterVec("contract_presentations_total",
		"Contract presentations, each counted once, by how the contract was found (via: synthesis_id, pair) and outcome (executed, failed, not_run, not_found, not_yours, revoked).",
		"via", "outcome")
	m.activeContracts = gauge("active_contracts",
		"Live synthesized contracts currently held, summed over the handlers' stores.", sumGauge, true, 0)
	m.compositionSeconds = histogramVec("composition_duration_seconds",
		"Duration of a recipe composition (all its steps), by recipe.",
		"recipe")
	m.upstreamSeconds = histogramVec("upstream_request_duration_seconds",
		"Duration of calls sent to upstream REST services, by configured upstream, whatever their result (requests refused before any call are not counted).",
		"upstream")
	m.upstreamErrors = counterVec("upstream_errors_total",
		"Failed upstream calls by configured upstream and error class (upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error, mapped).",
		"upstream", "class")
	m.credentialRefusals = counterVec("upstream_credential_refusals_total",
		"Calls refused before any step ran because an upstream's credential could not be had, by configured upstream and reason token (upstream-credential-missing, upstream-credential-unavailable, token-exchange-refused, token-exchange-misconfigured, issuer-unavailable).",
		"upstream", "reason")
	m.stepSeconds = histogramVec("step_duration_seconds",
		"Duration of one recipe step, by recipe and step name.",
		"recipe", "step")
	m.rateLimitRefusals = counterVec("rate_limit_refusals_total",
		"Requests refused by a per-agent rate limit, by budget name.",
		"budget")
	m.idempotencyEvents = counterVec("idempotency_events_total",
		"Idempotency-Key events by kind (replay, conflict, in_flight, outcome_unknown, store_full).",
		"event")
	m.idempotencyRecords = gauge("idempotency_records",
		"Idempotency records currently held (stored and in flight), summed over the handlers' stores.", sumGauge, true, 0)
	m.attemptRecords = gauge("attempt_records",
		"RCNS attempt records currently held for INSPECT target=rcns-attempt, summed over the handlers' stores.", sumGauge, true, 0)
	m.mcpRequests = counterVec("mcp_http_requests_total",
		"HTTP requests the MCP door answered on its path, whatever they held (tool calls, protocol messages, malformed JSON-RPC, refusals), by response status code.",
		"code")
	m.requests = counterVec("requests_total",
		"AGTP requests handled by the gateway, by method (AGTP floor or configured, else OTHER), response status code and the door (binding) it came through: http, agtp or mcp.",
		"method", "code", "binding")

	requestHist, err := registerCollector(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "request_duration_seconds",
		Help:    "Duration of an AGTP request in the engine, from its arrival to its answer (the door's framing and write excluded), by the door (binding: http, agtp, mcp), what answered it (kind: unrouted, builtin, tier_b, contract, gate; passthrough for a legacy request passed to the next handler, timed there) and outcome (success, negotiated, refused, error).",
		Buckets: requestBuckets,
	}, []string{"binding", "kind", "outcome"}))
	errs = append(errs, err)
	m.requestSeconds = requestHist

	storeHist, err := registerCollector(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "store_round_trip_duration_seconds",
		Help:    "Duration of one round trip to the shared state store (store redis), by operation (docs/cluster.md).",
		Buckets: storeBuckets,
	}, []string{"op"}))
	errs = append(errs, err)
	m.storeSeconds = storeHist
	m.storeErrors = counterVec("store_errors_total",
		"Round trips to the shared state store that failed (unreachable, timed out, refused), by operation.",
		"op")
	m.storeUp = gauge("store_up",
		"1 while the shared state store answers (always with store memory), 0 while it does not: requests that need state then answer 503 store-unavailable. With several handlers, 0 while any handler's store does not answer.", minGauge, false, 1)
	m.storeQuarantine = gauge("store_quarantine_seconds",
		"Seconds left of the Redis restart quarantine, during which requests with an Idempotency-Key answer 503 store-unavailable; 0 outside it (always with store memory). With several handlers, the longest.", maxGauge, false, 0)
	m.nodeIDConflict = gauge("store_node_id_conflict",
		"1 while another live gateway process uses this node's node_id on the same Redis and key_prefix (their record chains interleave), else 0 (always with store memory). With several handlers, 1 while any of their node_ids is in conflict. Checked by the health check every 5 s.", maxGauge, false, 0)

	if err := errors.Join(errs...); err != nil {
		m.release() // the cells added to gauges registered before the error
		return nil, err
	}
	for _, op := range store.Ops {
		m.storeErrors.WithLabelValues(string(op))
	}

	// Start the series of closed enumerations at zero so rate() and ratio
	// queries see them before the first event.
	m.gateEvaluations.WithLabelValues("accepted", labelNone)
	for _, v := range lockNames.values {
		m.lockRefusals.WithLabelValues(v)
	}
	for i, v := range presentationOutcomes.values {
		m.presented[0][i] = m.presentations.WithLabelValues(viaSynthesisID, v)
	}
	for i, v := range presentationOutcomes.values[:3] { // executed, failed, not_run: the outcomes a contract found by pair can have
		m.presented[1][i] = m.presentations.WithLabelValues(viaPair, v)
	}
	for _, v := range idempotencyEvents.values {
		m.idempotencyEvents.WithLabelValues(v)
	}
	return m, nil
}

// registerCollector registers c on reg. When an equal collector is already
// registered (a second handler in the same config load) it returns the
// existing one so both handlers count into the same series.
func registerCollector[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
		return c, fmt.Errorf("rcns metrics: a collector of another type is registered as %T: %w", are.ExistingCollector, err)
	}
	return c, fmt.Errorf("rcns metrics: %w", err)
}

// gateEvaluation counts one RCNS gate evaluation. outcome is "accepted" or
// "refused"; reason is the spec reason token of a refusal ("" → "none").
func (m *metrics) gateEvaluation(outcome, reason string) {
	if m == nil {
		return
	}
	m.gateEvaluations.WithLabelValues(gateOutcomes.label(outcome), reasonLabel(reason)).Inc()
}

// lockRefusal counts a gate refusal by the lock that refused:
// server_policy, caller_opt_in, caller_scope or trust_tier (policy.Lock's
// String).
func (m *metrics) lockRefusal(lock string) {
	if m == nil {
		return
	}
	m.lockRefusals.WithLabelValues(lockNames.label(lock)).Inc()
}

// synthesis counts one contract synthesis. mode is confirm-first,
// optimistic or propose; outcome is previewed, executed or failed.
func (m *metrics) synthesis(recipe, mode, outcome string) {
	if m == nil {
		return
	}
	m.syntheses.WithLabelValues(recipe, synthesisModes.label(mode), synthesisOutcomes.label(outcome)).Inc()
}

// presentation counts one contract presentation: via is viaSynthesisID
// or viaPair; outcome is executed, failed, not_run (answered without
// running the plan: a refusal or an idempotent replay), not_found,
// not_yours or revoked.
func (m *metrics) presentation(via, outcome string) {
	if m == nil {
		return
	}
	v := 0
	if via == viaPair {
		v = 1
	}
	if i := slices.Index(presentationOutcomes.values, outcome); i >= 0 && m.presented[v][i] != nil && via == presentationVia.values[v] {
		m.presented[v][i].Inc()
		return
	}
	m.presentations.WithLabelValues(presentationVia.label(via), presentationOutcomes.label(outcome)).Inc()
}

// setActiveContracts sets the number of live contracts, read after
// stamp (gaugeStamp).
func (m *metrics) setActiveContracts(stamp uint64, n int) {
	if m == nil {
		return
	}
	m.activeContracts.setAt(stamp, float64(n))
}

// recipeSeriesOf returns recipe r's histogram children, made at its
// first run with one slot per step report (one per step, in r.Steps
// order).
func (m *metrics) recipeSeriesOf(r *recipes.Recipe, steps int) *recipeSeries {
	if v, ok := m.series.Load(r); ok {
		return v.(*recipeSeries)
	}
	rs := &recipeSeries{composition: m.compositionSeconds.WithLabelValues(r.Name),
		steps: make([]lazyObserver, steps), upstreams: make([]lazyObserver, steps)}
	v, _ := m.series.LoadOrStore(r, rs)
	return v.(*recipeSeries)
}

// recipeRun observes one run of recipe r (spec §13.4): how long its
// composition took (seconds) and, from its step reports (in r.Steps
// order, each naming its step and upstream), each succeeded or failed
// step's duration and, for every step whose call was sent (a step
// cancelled after sending included), the upstream call, counted as an
// error of its class (upstreamError) when the step failed.
func (m *metrics) recipeRun(r *recipes.Recipe, seconds float64, reports []recipes.StepReport) {
	if m == nil {
		return
	}
	rs := m.recipeSeriesOf(r, len(reports))
	rs.composition.Observe(seconds)
	for i := range reports {
		rep := &reports[i]
		ran := rep.State == recipes.StepSucceeded || rep.State == recipes.StepFailed
		if ran {
			if i < len(rs.steps) { // always, for one recipe's reports
				rs.steps[i].get(m.stepSeconds, r.Name, rep.Name, true).Observe(rep.Duration.Seconds())
			} else {
				m.stepSeconds.WithLabelValues(r.Name, rep.Name).Observe(rep.Duration.Seconds())
			}
		}
		// Every call sent is an upstream call, a cancelled step's too
		// (stopped when a sibling failed); only a failed step's is an
		// upstream error.
		if !rep.Called {
			continue
		}
		if i < len(rs.upstreams) {
			rs.upstreams[i].get(m.upstreamSeconds, rep.Upstream, "", false).Observe(rep.Duration.Seconds())
		} else {
			m.upstreamSeconds.WithLabelValues(rep.Upstream).Observe(rep.Duration.Seconds())
		}
		if rep.State == recipes.StepFailed {
			m.upstreamError(rep.Upstream, failureClass(&recipes.Failure{Code: rep.Error}))
		}
	}
}

// endpointCall observes one call sent by Tier B endpoint ep to its
// upstream (seconds) and, when class is not "ok", counts it as an error
// of that class (upstreamError). The upstream's child is resolved once
// per endpoint.
func (m *metrics) endpointCall(ep *recipes.Endpoint, class string, seconds float64) {
	if m == nil {
		return
	}
	v, ok := m.series.Load(ep)
	if !ok {
		v, _ = m.series.LoadOrStore(ep, m.upstreamSeconds.WithLabelValues(ep.UpstreamName()))
	}
	v.(prometheus.Observer).Observe(seconds)
	m.upstreamError(ep.UpstreamName(), class)
}

// upstreamError counts a failed upstream call of upstream by class
// (upstream_timeout, upstream_connection_error,
// upstream_malformed_response, upstream_authentication_failed,
// upstream_error or mapped); class "ok" counts nothing.
func (m *metrics) upstreamError(upstream, class string) {
	if class != "ok" {
		m.upstreamErrors.WithLabelValues(upstream, upstreamClasses.label(class)).Inc()
	}
}

// credentialRefusal counts a call refused because upstream's credential
// could not be had, by the refusal's reason token (bounded as every
// reason label is).
func (m *metrics) credentialRefusal(upstream, reason string) {
	if m == nil {
		return
	}
	m.credentialRefusals.WithLabelValues(upstream, reasonLabel(reason)).Inc()
}

// rateLimited counts a request refused by the rate-limit budget named
// budget (ratelimit.Budget.Name, e.g. "rcns" or "invocation").
func (m *metrics) rateLimited(budget string) {
	if m == nil {
		return
	}
	m.rateLimitRefusals.WithLabelValues(budget).Inc()
}

// idempotency counts an Idempotency-Key event: replay, conflict,
// in_flight, outcome_unknown or store_full.
func (m *metrics) idempotency(event string) {
	if m == nil {
		return
	}
	m.idempotencyEvents.WithLabelValues(idempotencyEvents.label(event)).Inc()
}

// setIdempotencyRecords sets the number of idempotency records held,
// read after stamp (gaugeStamp).
func (m *metrics) setIdempotencyRecords(stamp uint64, n int) {
	if m == nil {
		return
	}
	m.idempotencyRecords.setAt(stamp, float64(n))
}

// storeRoundTrip records one round trip to the shared store: its
// latency by op and, when err is set, an error by op. op is one of
// store.Ops (else "other").
func (m *metrics) storeRoundTrip(op store.Op, latency time.Duration, err error) {
	if m == nil {
		return
	}
	label := storeOps.label(string(op))
	m.storeSeconds.WithLabelValues(label).Observe(latency.Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(label).Inc()
	}
}

// setStoreUp sets the store state gauge.
func (m *metrics) setStoreUp(up bool) {
	if m != nil {
		m.storeUp.set(flag(up))
	}
}

// setStoreQuarantine sets the seconds left of the restart quarantine.
func (m *metrics) setStoreQuarantine(left time.Duration) {
	if m == nil {
		return
	}
	m.storeQuarantine.set(left.Seconds())
}

// setNodeIDConflict sets caddy_rcns_store_node_id_conflict.
func (m *metrics) setNodeIDConflict(clash bool) {
	if m != nil {
		m.nodeIDConflict.set(flag(clash))
	}
}

// flag is a 0/1 gauge's value.
func flag(on bool) float64 {
	if on {
		return 1
	}
	return 0
}

// sharedGauges are m's cells of the gauges every handler sets
// (sharedGauge).
func (m *metrics) sharedGauges() []gaugeCell {
	return []gaugeCell{m.activeContracts, m.idempotencyRecords, m.attemptRecords, m.storeUp, m.storeQuarantine, m.nodeIDConflict}
}

// setGroup makes m's values of the shared gauges count under group:
// the store the engine reads (State.SwitchStore: its StoreLocation),
// which other handlers may read too. The values m set before move with
// it.
func (m *metrics) setGroup(group any) {
	if m == nil {
		return
	}
	for _, gc := range m.sharedGauges() {
		gc.regroup(gc.c, group)
	}
}

// release drops m's values of the shared gauges: its engine is closed
// (Engine.Close), so the handler it served no longer reports.
func (m *metrics) release() {
	if m == nil {
		return
	}
	for _, gc := range m.sharedGauges() {
		gc.drop(gc.c)
	}
}

// setAttemptRingSize sets the number of RCNS attempt records held,
// read after stamp (gaugeStamp).
func (m *metrics) setAttemptRingSize(stamp uint64, n int) {
	if m == nil {
		return
	}
	m.attemptRecords.setAt(stamp, float64(n))
}
