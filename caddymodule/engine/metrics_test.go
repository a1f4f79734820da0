package engine

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// touchAllMetrics records one event on every metric so every family is
// gathered (vectors without children are not).
func touchAllMetrics(m *metrics) {
	m.gateEvaluation("accepted", "")
	m.gateEvaluation("refused", "rcns-disabled")
	m.lockRefusal("server_policy")
	m.synthesis("book-trip", "confirm-first", "previewed")
	m.presentation(viaSynthesisID, "executed")
	m.setActiveContracts(gaugeStamp(), 3)
	m.recipeRun(bookTrip, 0.042, []recipes.StepReport{
		{Name: "reserve", Upstream: "flights", State: recipes.StepSucceeded, Called: true, Duration: 10 * time.Millisecond},
		{Name: "pay", Upstream: "flights", State: recipes.StepFailed, Error: recipes.ErrUpstreamTimeout, Called: true, Duration: 5 * time.Second},
	})
	m.credentialRefusal("flights", "upstream-credential-unavailable")
	m.rateLimited("rcns")
	m.idempotency("replay")
	m.setIdempotencyRecords(gaugeStamp(), 7)
	m.setAttemptRingSize(gaugeStamp(), 11)
	m.request("QUERY", 200, "http")
	m.mcpRequest(400)
	m.requestDuration("http", kindBuiltin, 200, "", 0.0003)
	m.storeRoundTrip(store.OpClaim, time.Millisecond, nil)
	m.setStoreUp(true)
}

// bookTrip is the recipe the metrics tests observe runs of (only its
// identity and name matter to the metrics).
var bookTrip = &recipes.Recipe{Name: "book-trip"}

// registeredMetricNames gathers g and returns the metric family names.
func registeredMetricNames(t *testing.T, g prometheus.Gatherer) map[string]bool {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	names := make(map[string]bool, len(mfs))
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

var allMetricNames = []string{
	"caddy_rcns_gate_evaluations_total",
	"caddy_rcns_lock_refusals_total",
	"caddy_rcns_syntheses_total",
	"caddy_rcns_contract_presentations_total",
	"caddy_rcns_active_contracts",
	"caddy_rcns_composition_duration_seconds",
	"caddy_rcns_upstream_request_duration_seconds",
	"caddy_rcns_upstream_errors_total",
	"caddy_rcns_upstream_credential_refusals_total",
	"caddy_rcns_step_duration_seconds",
	"caddy_rcns_rate_limit_refusals_total",
	"caddy_rcns_idempotency_events_total",
	"caddy_rcns_idempotency_records",
	"caddy_rcns_attempt_records",
	"caddy_rcns_requests_total",
	"caddy_rcns_mcp_http_requests_total",
	"caddy_rcns_request_duration_seconds",
	"caddy_rcns_store_round_trip_duration_seconds",
	"caddy_rcns_store_errors_total",
	"caddy_rcns_store_up",
	"caddy_rcns_store_quarantine_seconds",
	"caddy_rcns_store_node_id_conflict",
}

func TestMetricsRegistersEveryCollectorAndLints(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, []string{"BOOK"})
	if err != nil {
		t.Fatalf("newMetrics: %v", err)
	}
	touchAllMetrics(m)

	names := registeredMetricNames(t, reg)
	for _, want := range allMetricNames {
		if !names[want] {
			t.Errorf("metric %s not registered", want)
		}
	}
	if len(names) != len(allMetricNames) {
		t.Errorf("registered %d families, want %d: %v", len(names), len(allMetricNames), names)
	}

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	for name, c := range map[string]prometheus.Collector{
		"gate":     m.gateEvaluations,
		"lock":     m.lockRefusals,
		"upstream": m.upstreamSeconds,
		"requests": m.requests,
		"duration": m.requestSeconds,
	} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatalf("CollectAndLint(%s): %v", name, err)
		}
		for _, p := range problems {
			t.Errorf("lint %s: %s", p.Metric, p.Text)
		}
	}
}

func TestMetricsCountersMove(t *testing.T) {
	m, err := newMetrics(nil, []string{"BOOK"})
	if err != nil {
		t.Fatalf("newMetrics(nil): %v", err)
	}
	if m.registry == nil {
		t.Fatal("newMetrics(nil) did not use a private registry")
	}

	m.gateEvaluation("accepted", "")
	m.gateEvaluation("refused", "rcns-disabled")
	m.gateEvaluation("refused", "rcns-disabled")
	m.gateEvaluation("bogus", "Free text: not a token")
	if got := testutil.ToFloat64(m.gateEvaluations.WithLabelValues("accepted", "none")); got != 1 {
		t.Errorf("accepted/none = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.gateEvaluations.WithLabelValues("refused", "rcns-disabled")); got != 2 {
		t.Errorf("refused/rcns-disabled = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.gateEvaluations.WithLabelValues("other", "other")); got != 1 {
		t.Errorf("other/other = %v, want 1 (unbounded values must be folded)", got)
	}

	m.lockRefusal("trust_tier")
	m.lockRefusal("lock(9)")
	if got := testutil.ToFloat64(m.lockRefusals.WithLabelValues("trust_tier")); got != 1 {
		t.Errorf("lock trust_tier = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.lockRefusals.WithLabelValues("other")); got != 1 {
		t.Errorf("lock other = %v, want 1", got)
	}
	// The closed lock set starts at zero.
	if got := testutil.CollectAndCount(m.lockRefusals); got != 5 {
		t.Errorf("lock series = %d, want 4 pre-initialized + other", got)
	}

	m.synthesis("book-trip", "optimistic", "executed")
	if got := testutil.ToFloat64(m.syntheses.WithLabelValues("book-trip", "optimistic", "executed")); got != 1 {
		t.Errorf("syntheses = %v, want 1", got)
	}

	m.presentation(viaSynthesisID, "not_yours")
	if got := testutil.ToFloat64(m.presentations.WithLabelValues(viaSynthesisID, "not_yours")); got != 1 {
		t.Errorf("presentations not_yours = %v, want 1", got)
	}

	m.setActiveContracts(gaugeStamp(), 5)
	m.setActiveContracts(gaugeStamp(), 4)
	if got := testutil.ToFloat64(m.activeContracts); got != 4 {
		t.Errorf("active contracts = %v, want 4", got)
	}

	run := func(state, code string, called bool) {
		m.recipeRun(bookTrip, 0.2, []recipes.StepReport{
			{Name: "reserve", Upstream: "flights", State: state, Error: code, Called: called, Duration: 100 * time.Millisecond},
			{Name: "notify", Upstream: "mail", State: recipes.StepNotStarted},
		})
	}
	run(recipes.StepSucceeded, "", true)
	run(recipes.StepFailed, recipes.ErrUpstreamTimeout, true)
	run(recipes.StepFailed, recipes.ErrInvalidInput, true)  // a mapped failure after the call
	run(recipes.StepFailed, recipes.ErrInvalidInput, false) // refused before any call: no upstream observation
	run(recipes.StepCancelled, "", true)                    // sent, then stopped when a sibling failed: a call, not an error
	if got := testutil.CollectAndCount(m.upstreamSeconds); got != 1 {
		t.Errorf("upstream histogram series = %d, want 1 (a step that did not start calls nothing)", got)
	}
	if got := histogramCount(t, m.upstreamSeconds.WithLabelValues("flights")); got != 4 {
		t.Errorf("flights calls observed = %d, want 4 (every call sent, the cancelled one's too; not the call refused before sending)", got)
	}
	if got := histogramCount(t, m.stepSeconds.WithLabelValues("book-trip", "reserve")); got != 4 {
		t.Errorf("reserve step observations = %d, want 4 (the steps that ran to an outcome)", got)
	}
	if got := testutil.ToFloat64(m.upstreamErrors.WithLabelValues("flights", "upstream_timeout")); got != 1 {
		t.Errorf("upstream_timeout errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.upstreamErrors.WithLabelValues("flights", "mapped")); got != 1 {
		t.Errorf("mapped errors = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.upstreamErrors); got != 2 {
		t.Errorf("upstream error series = %d, want 2 (ok is not an error)", got)
	}

	if got := testutil.CollectAndCount(m.compositionSeconds); got != 1 {
		t.Errorf("composition series = %d, want 1", got)
	}
	if got := histogramCount(t, m.compositionSeconds.WithLabelValues("book-trip")); got != 5 {
		t.Errorf("book-trip compositions = %d, want 5", got)
	}
	if got := testutil.CollectAndCount(m.stepSeconds); got != 1 {
		t.Errorf("step series = %d, want 1 (a step that did not start is not observed)", got)
	}

	m.rateLimited("invocation")
	if got := testutil.ToFloat64(m.rateLimitRefusals.WithLabelValues("invocation")); got != 1 {
		t.Errorf("rate limit refusals = %v, want 1", got)
	}

	m.idempotency("conflict")
	m.idempotency("store_full")
	m.setIdempotencyRecords(gaugeStamp(), 12)
	m.setAttemptRingSize(gaugeStamp(), 1024)
	if got := testutil.ToFloat64(m.idempotencyEvents.WithLabelValues("conflict")); got != 1 {
		t.Errorf("idempotency conflict = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.idempotencyEvents.WithLabelValues("replay")); got != 0 {
		t.Errorf("idempotency replay = %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.idempotencyRecords); got != 12 {
		t.Errorf("idempotency records = %v, want 12", got)
	}
	if got := testutil.ToFloat64(m.attemptRecords); got != 1024 {
		t.Errorf("attempt records = %v, want 1024", got)
	}

	m.request("BOOK", 200, "http")
	m.request("QUERY", 262, "http")
	m.request("QUERY", 0, "http")
	if got := testutil.ToFloat64(m.requests.WithLabelValues("BOOK", "200", "http")); got != 1 {
		t.Errorf("BOOK 200 = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("QUERY", "262", "http")); got != 1 {
		t.Errorf("QUERY 262 = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("QUERY", "200", "http")); got != 1 {
		t.Errorf("QUERY 0→200 = %v, want 1", got)
	}
	// The per-method cache holds the last code: alternating codes miss
	// it and still count each request once, under its own code.
	for _, code := range []int{200, 464, 200, 200, 464, 262} {
		m.request("QUERY", code, "http")
	}
	for code, want := range map[string]float64{"200": 4, "464": 2, "262": 2} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("QUERY", code, "http")); got != want {
			t.Errorf("QUERY %s = %v, want %v", code, got, want)
		}
	}

	problems, err := testutil.GatherAndLint(m.registry)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsMethodBucketing(t *testing.T) {
	m, err := newMetrics(nil, []string{"BOOK", "RESERVE", ""})
	if err != nil {
		t.Fatalf("newMetrics: %v", err)
	}
	for _, tt := range []struct{ method, want string }{
		{"QUERY", "QUERY"},
		{"DEPRECATE", "DEPRECATE"},
		{"BOOK", "BOOK"},
		{"RESERVE", "RESERVE"},
		{"FROBNICATE", "OTHER"},
		{"query", "OTHER"},
		{"GET", "OTHER"},
		{"", "OTHER"},
	} {
		if got := m.methodSeries(tt.method)[0].label; got != tt.want {
			t.Errorf("methodSeries(%q).label = %q, want %q", tt.method, got, tt.want)
		}
	}
	for _, name := range floorMethods {
		if got := m.methodSeries(name)[0].label; got != name {
			t.Errorf("floor method %s labelled %q", name, got)
		}
	}
	if len(floorMethods) != 18 {
		t.Errorf("floor has %d methods, want 18", len(floorMethods))
	}

	m.request("FROBNICATE", 459, "http")
	m.request("FLUMMOX", 459, "http")
	if got := testutil.ToFloat64(m.requests.WithLabelValues("OTHER", "459", "http")); got != 2 {
		t.Errorf("OTHER 459 = %v, want 2", got)
	}
	if got := testutil.CollectAndCount(m.requests); got != 1 {
		t.Errorf("request series = %d, want 1", got)
	}
	// The binding label: the three doors, and an unknown one counted as
	// http (bounded).
	m.request("FROBNICATE", 459, "agtp")
	m.request("FROBNICATE", 459, "mcp")
	m.request("FROBNICATE", 459, "carrier-pigeon")
	for b, want := range map[string]float64{"http": 3, "agtp": 1, "mcp": 1} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("OTHER", "459", b)); got != want {
			t.Errorf("OTHER 459 binding %s = %v, want %v", b, got, want)
		}
	}
	if got := testutil.CollectAndCount(m.requests); got != 3 {
		t.Errorf("request series = %d, want 3", got)
	}

	for _, tt := range []struct {
		status int
		want   string
	}{{0, "200"}, {200, "200"}, {262, "262"}, {464, "464"}, {99, "other"}, {1000, "other"}, {-1, "other"}} {
		if got := codeLabel(tt.status); got != tt.want {
			t.Errorf("codeLabel(%d) = %q, want %q", tt.status, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { m.request("QUERY", 262, "http") }); n != 0 {
		t.Errorf("request allocates %v times, want 0", n)
	}
}

func TestMetricsRegisterTwiceReusesCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := newMetrics(reg, nil)
	if err != nil {
		t.Fatalf("first newMetrics: %v", err)
	}
	second, err := newMetrics(reg, []string{"BOOK"})
	if err != nil {
		t.Fatalf("second newMetrics on the same registry: %v", err)
	}
	if first.gateEvaluations != second.gateEvaluations || first.activeContracts.sharedGauge != second.activeContracts.sharedGauge ||
		first.upstreamSeconds != second.upstreamSeconds || first.requests != second.requests ||
		first.attemptRecords.sharedGauge != second.attemptRecords.sharedGauge || first.requestSeconds != second.requestSeconds {
		t.Fatal("second newMetrics did not reuse the registered collectors")
	}
	first.presentation(viaSynthesisID, "revoked")
	second.presentation(viaSynthesisID, "revoked")
	if got := testutil.ToFloat64(first.presentations.WithLabelValues(viaSynthesisID, "revoked")); got != 2 {
		t.Errorf("shared presentations revoked = %v, want 2", got)
	}
	// Method sets stay per instance.
	if first.methodSeries("BOOK")[0].label != "OTHER" || second.methodSeries("BOOK")[0].label != "BOOK" {
		t.Error("method sets leaked between instances")
	}
}

func TestMetricsFreshRegistryPerLoad(t *testing.T) {
	// Caddy builds a new registry at every config load; the new load must
	// register cleanly and start from zero.
	load1 := prometheus.NewRegistry()
	m1, err := newMetrics(load1, nil)
	if err != nil {
		t.Fatalf("load 1: %v", err)
	}
	m1.rateLimited("rcns")
	m1.rateLimited("rcns")

	load2 := prometheus.NewRegistry()
	m2, err := newMetrics(load2, nil)
	if err != nil {
		t.Fatalf("load 2: %v", err)
	}
	m2.rateLimited("rcns")
	if got := testutil.ToFloat64(m2.rateLimitRefusals.WithLabelValues("rcns")); got != 1 {
		t.Errorf("load 2 rcns refusals = %v, want 1 (fresh counters)", got)
	}
	if got := testutil.ToFloat64(m1.rateLimitRefusals.WithLabelValues("rcns")); got != 2 {
		t.Errorf("load 1 rcns refusals = %v, want 2", got)
	}
	touchAllMetrics(m2)
	if n := len(registeredMetricNames(t, load2)); n != len(allMetricNames) {
		t.Errorf("load 2 registered %d families, want %d", n, len(allMetricNames))
	}
}

// TestMetricsReload registers on two successive pedantic registries,
// as the Caddy module does across a config reload (each load's
// caddy.Context has its own pedantic registry), with two handlers in
// the first load.
func TestMetricsReload(t *testing.T) {
	reg1 := prometheus.NewPedanticRegistry()
	a, err := newMetrics(reg1, []string{"BOOK"})
	if err != nil {
		t.Fatalf("load 1 handler a: %v", err)
	}
	b, err := newMetrics(reg1, nil)
	if err != nil {
		t.Fatalf("load 1 handler b: %v", err)
	}
	if a.requests != b.requests {
		t.Error("handlers of one load do not share collectors")
	}
	touchAllMetrics(a)
	touchAllMetrics(b)
	if got := testutil.ToFloat64(b.requests.WithLabelValues("QUERY", "200", "http")); got != 2 {
		t.Errorf("load 1 QUERY 200 = %v, want 2", got)
	}
	if _, err := reg1.Gather(); err != nil {
		t.Fatalf("pedantic gather, load 1: %v", err)
	}

	reg2 := prometheus.NewPedanticRegistry()
	c, err := newMetrics(reg2, nil)
	if err != nil {
		t.Fatalf("load 2: %v", err)
	}
	if got := testutil.ToFloat64(c.requests.WithLabelValues("QUERY", "200", "http")); got != 0 {
		t.Errorf("load 2 QUERY 200 = %v, want 0 (fresh registry)", got)
	}
	touchAllMetrics(c)
	if _, err := reg2.Gather(); err != nil {
		t.Fatalf("pedantic gather, load 2: %v", err)
	}
}

func TestMetricsConflictingCollectorIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	// Same name, different label set: not reusable.
	if err := reg.Register(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caddy_rcns_lock_refusals_total", Help: "Clash.",
	}, []string{"agent"})); err != nil {
		t.Fatal(err)
	}
	if _, err := newMetrics(reg, nil); err == nil {
		t.Fatal("newMetrics succeeded over a conflicting collector")
	}
}

func TestMetricsNilSafe(t *testing.T) {
	var m *metrics
	touchAllMetrics(m) // must not panic
	m.presentation(viaPair, "executed")
	m.synthesis("r", "propose", "failed")
	m.idempotency("in_flight")
}

func TestMetricsTypedNilRegistryUsesPrivate(t *testing.T) {
	var reg *prometheus.Registry
	m, err := newMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.registry == nil {
		t.Fatal("typed nil registry did not fall back to a private one")
	}
}

// metricNameRE matches a metric name of this module in dashboards and
// rules. Recording rules (caddy_rcns:...) do not match.
var metricNameRE = regexp.MustCompile(`caddy_rcns_[a-z_]+`)

// TestMetricsNamesInDashboardAndAlerts checks that the Grafana dashboard
// and the Prometheus rules query only metrics newMetrics registers.
func TestMetricsNamesInDashboardAndAlerts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	touchAllMetrics(m)
	registered := registeredMetricNames(t, reg)

	dashboard := filepath.Join("..", "..", "docs", "grafana", "caddy-rcns.json")
	rules := filepath.Join("..", "..", "docs", "prometheus", "alerts.yml")
	used := map[string]bool{}
	for _, path := range []string{dashboard, rules} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		switch filepath.Ext(path) {
		case ".json":
			var v map[string]any
			if err := json.Unmarshal(data, &v); err != nil {
				t.Fatalf("%s is not JSON: %v", path, err)
			}
		case ".yml":
			var v struct {
				Groups []struct {
					Name  string `yaml:"name"`
					Rules []struct {
						Alert string `yaml:"alert"`
						Expr  string `yaml:"expr"`
					} `yaml:"rules"`
				} `yaml:"groups"`
			}
			if err := yaml.Unmarshal(data, &v); err != nil {
				t.Fatalf("%s is not YAML: %v", path, err)
			}
			if len(v.Groups) == 0 {
				t.Fatalf("%s has no rule groups", path)
			}
		}
		found := metricNameRE.FindAllString(string(data), -1)
		if len(found) == 0 {
			t.Errorf("%s queries no caddy_rcns_ metric", path)
		}
		for _, name := range found {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(name, suffix); ok {
					base = s
					break
				}
			}
			used[base] = true
			if !registered[base] {
				t.Errorf("%s queries %s (as %s), which newMetrics does not register", path, base, name)
			}
		}
	}
	var unused []string
	for name := range registered {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Logf("registered but neither charted nor alerted on: %v", unused)
	}
	if !used["caddy_rcns_gate_evaluations_total"] {
		t.Error("dashboard and rules never query caddy_rcns_gate_evaluations_total")
	}
}

// TestAlertRulesPromtool checks docs/prometheus/alerts.yml with promtool
// (installed into .tools/bin by make deps) and runs its unit tests.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := filepath.Abs("../../.tools/bin/promtool")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(promtool); err != nil {
		t.Fatalf("promtool is missing (%v): run make deps", err)
	}
	out, err := exec.Command(promtool, "check", "rules", "../../docs/prometheus/alerts.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool output lacks SUCCESS:\n%s", out)
	}
	// The rules' unit tests (docs/prometheus/alerts_test.yml).
	out, err = exec.Command(promtool, "test", "rules", "../../docs/prometheus/alerts_test.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules failed: %v\n%s", err, out)
	}
}

// TestPresentationsCountedOnce: every request served under an existing
// contract is counted once in caddy_rcns_contract_presentations_total,
// by how it found the contract (via) and what happened (outcome). A run
// by pair was counted as both by_pair and executed, and a replay or a
// refusal by pair as by_pair alone, so sum() over outcome overcounted.
func TestPresentationsCountedOnce(t *testing.T) {
	te := newTestEngine(t)
	body := map[string]any{"parameters": map[string]any{"item_id": "1"}}
	syn := te.do(t, "LOOKUP", "/item/m-1", body, "Allow-RCNS", "true")
	if syn.Status != 263 {
		t.Fatalf("synthesis: %s", syn)
	}
	id := syn.header("Contract-Synthesized")
	count := func(via, outcome string) float64 {
		return testutil.ToFloat64(te.metrics.presentations.WithLabelValues(via, outcome))
	}
	total := func() (n float64) {
		for _, via := range presentationVia.values {
			for _, o := range presentationOutcomes.values {
				n += count(via, o)
			}
		}
		return n
	}
	steps := []struct {
		name        string
		kv          []string
		body        any
		status      int
		via, result string
	}{
		{"by id", []string{"Contract-Synthesized", id}, body, 200, viaSynthesisID, "executed"},
		{"by pair", nil, body, 200, viaPair, "executed"},
		{"by pair with Allow-RCNS", []string{"Allow-RCNS", "true"}, body, 200, viaPair, "executed"},
		{"by pair with a key", []string{"Idempotency-Key", `"k-1"`}, body, 200, viaPair, "executed"},
		{"replay by pair", []string{"Idempotency-Key", `"k-1"`}, body, 200, viaPair, "not_run"},
		{"key reused by pair", []string{"Idempotency-Key", `"k-1"`}, map[string]any{"parameters": map[string]any{"item_id": "2"}}, 422, viaPair, "not_run"},
		{"invalid input by id", []string{"Contract-Synthesized", id}, map[string]any{"parameters": map[string]any{"item_id": ""}}, 422, viaSynthesisID, "not_run"},
		{"unknown id", []string{"Contract-Synthesized", "syn-AAAAAAAAAAAAAAAAAAAAAA"}, body, 404, viaSynthesisID, "not_found"},
	}
	for _, st := range steps {
		before, was := total(), count(st.via, st.result)
		a := te.do(t, "LOOKUP", "/item/m-1", st.body, st.kv...)
		if a.Status != st.status {
			t.Fatalf("%s: %s, want %d", st.name, a, st.status)
		}
		if got := total() - before; got != 1 {
			t.Errorf("%s: counted %v times, want once", st.name, got)
		}
		if got := count(st.via, st.result) - was; got != 1 {
			t.Errorf("%s: via=%s outcome=%s went up by %v, want 1", st.name, st.via, st.result, got)
		}
	}
}

// TestRequestDurationByKind: caddy_rcns_request_duration_seconds
// observes every AGTP request once, labelled by its door, what answered
// it (the stage that answered) and the outcome class of its status.
func TestRequestDurationByKind(t *testing.T) {
	// The upstream serves /items/{id} and fails /slow/{id} with a 500.
	items := testUpstream(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/slow/") {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		resp, err := http.Get(items + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(up.Close)
	te := newTestEngine(t, func(c *Config) { c.Upstreams["bench"].URL = up.URL })
	body := map[string]any{"parameters": map[string]any{"item_id": "1"}}
	native := func(method, target string, hdr http.Header) *agtp.Response {
		u, _ := url.ParseRequestURI(target)
		return te.Serve(t.Context(), &agtp.Request{Binding: agtp.BindingNative, Method: method, Target: target, URL: u,
			Host: "127.0.0.1", Header: hdr, Loopback: true})
	}
	var id string
	steps := []struct {
		name                   string
		send                   func() int
		status                 int
		binding, kind, outcome string
	}{
		{"built-in", func() int { return te.do(t, "DISCOVER", "/", nil).Status }, 200, "http", "builtin", "success"},
		{"anonymous DISCOVER", func() int { return te.serve(t, "DISCOVER", "/", nil, "").Status }, 200, "http", "builtin", "success"},
		{"built-in refused", func() int { return te.do(t, "INSPECT", "/", nil).Status }, 400, "http", "builtin", "refused"},
		{"Tier B", func() int { return te.do(t, "FETCH", "/items/1", nil).Status }, 200, "http", "tier_b", "success"},
		{"Tier B, native door", func() int { return native("FETCH", "/items/2", agentHeader()).Status }, 200, "agtp", "tier_b", "success"},
		{"Tier B upstream failure", func() int { return te.do(t, "FETCH", "/slow/1", nil).Status }, 422, "http", "tier_b", "error"},
		{"Tier B invalid input", func() int {
			return te.do(t, "FETCH", "/items/1", map[string]any{"parameters": map[string]any{"other": 1}}).Status
		}, 422, "http", "tier_b", "refused"},
		{"synthesis", func() int {
			a := te.do(t, "LOOKUP", "/item/d-1", body, "Allow-RCNS", "true")
			id = a.header("Contract-Synthesized")
			return a.Status
		}, 263, "http", "gate", "negotiated"},
		{"gate without opt-in", func() int { return te.do(t, "LOOKUP", "/item/d-2", body).Status }, 404, "http", "gate", "refused"},
		{"presentation", func() int { return te.do(t, "LOOKUP", "/item/d-1", body, "Contract-Synthesized", id).Status }, 200, "http", "contract", "success"},
		{"by pair", func() int { return te.do(t, "LOOKUP", "/item/d-1", body).Status }, 200, "http", "contract", "success"},
		{"unknown contract", func() int {
			return te.do(t, "LOOKUP", "/item/d-1", body, "Contract-Synthesized", "syn-AAAAAAAAAAAAAAAAAAAAAA").Status
		}, 404, "http", "contract", "refused"},
		{"refused before routing", func() int { return te.serve(t, "FETCH", "/items/1", nil, "").Status }, 401, "http", "unrouted", "refused"},
		{"bad Task-ID, native door", func() int { return native("FETCH", "/items/1", agentHeader("Task-ID", "bad id")).Status }, 400, "agtp", "unrouted", "refused"},
		{"a door's own refusal", func() int {
			return te.Refuse(&agtp.Request{Binding: agtp.BindingMCP, Method: "POST", Target: "/mcp", Header: http.Header{}},
				agtp.BodyTooLarge.New("too large"), Refusal{}).Status
		}, 413, "mcp", "unrouted", "refused"},
		{"bad framing, native door", func() int {
			return te.Answer(&agtp.Request{Binding: agtp.BindingNative, Header: http.Header{}}, agtp.InvalidRequestLine.New("unreadable")).Status
		}, 400, "agtp", "unrouted", "refused"},
	}
	want := map[string]uint64{}
	for _, st := range steps {
		if got := st.send(); got != st.status {
			t.Fatalf("%s: status %d, want %d", st.name, got, st.status)
		}
		want[st.binding+"/"+st.kind+"/"+st.outcome]++
	}

	got := map[string]uint64{}
	var observed uint64
	mfs, err := te.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "caddy_rcns_request_duration_seconds":
			for _, mt := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range mt.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				got[l["binding"]+"/"+l["kind"]+"/"+l["outcome"]] += mt.GetHistogram().GetSampleCount()
				observed += mt.GetHistogram().GetSampleCount()
			}
		case "caddy_rcns_requests_total":
			for _, mt := range mf.GetMetric() {
				observed -= uint64(mt.GetCounter().GetValue())
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("sample counts by binding/kind/outcome:\n got %v\nwant %v", got, want)
	}
	if observed != 0 {
		t.Errorf("the histogram's samples and requests_total differ by %d", int64(observed))
	}
}

// TestOutcomeIndex: the outcome class of each kind of answer.
func TestOutcomeIndex(t *testing.T) {
	for _, tc := range []struct {
		status int
		reason string
		want   string
	}{
		{0, "", "success"}, {200, "", "success"}, {204, "", "success"}, {308, "", "success"},
		{263, "", "negotiated"}, {461, "", "negotiated"},
		{262, "scope-required", "refused"}, {400, "invalid-task-id", "refused"}, {429, "rate-limited", "refused"},
		{463, "policy-refused", "refused"}, {464, "rcns-disabled", "refused"}, {422, "invalid-input", "refused"},
		{422, "", "refused"}, // a replayed 422: its reason is not read again
		{422, "upstream_timeout", "error"}, {422, "upstream_error", "error"}, {422, "composition_failed", "error"},
		{500, "internal-error", "error"}, {502, "", "error"}, {503, "store-unavailable", "error"}, {999, "", "error"}, {42, "", "error"},
		{501, "no-authorization-server", "refused"}, // the MCP door's answer by design to OAuth discovery
	} {
		if got := requestOutcomes[outcomeIndex(tc.status, tc.reason)]; got != tc.want {
			t.Errorf("outcome of %d %q = %s, want %s", tc.status, tc.reason, got, tc.want)
		}
	}
}

// histogramCount is the sample count of one histogram child.
func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	h, ok := o.(prometheus.Histogram)
	if !ok {
		t.Fatalf("%T is not a prometheus.Histogram", o)
	}
	var pb dto.Metric
	if err := h.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount()
}
