package integration

// Prometheus metrics as an operator scrapes them (docs/metrics.md): exact
// counter deltas for known flows, behaviour across an admin /load
// reload, and bounded label cardinality under hostile input.

import (
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// rcnsPrefix starts the name of every family the gateway exports.
const rcnsPrefix = "caddy_rcns_"

// scrapeResult is one parsed scrape of admin /metrics.
type scrapeResult struct {
	raw      string
	families map[string]*dto.MetricFamily
	// values holds one sample per series key (see seriesKey): counter,
	// gauge and untyped values, and each histogram child's _count.
	values map[string]float64
}

// scrapeMetrics GETs admin /metrics and parses the text exposition
// format. It fails the test on a non-200 answer, a parse error, a family
// declared twice (# TYPE or # HELP) or a series exported twice.
func scrapeMetrics(t testing.TB, g *Gateway) *scrapeResult {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.AdminURL+"/metrics", nil)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	// Ask for the plain text format (no OpenMetrics, no protobuf).
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", g.AdminURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read admin /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /metrics = %d: %s", resp.StatusCode, body)
	}
	raw := string(body)

	// The parser merges repeated families silently; count the
	// declarations and the sample lines ourselves.
	declared := map[string]int{}
	samples := map[string]int{}
	for _, line := range strings.Split(raw, "\n") {
		switch {
		case strings.HasPrefix(line, "# TYPE "), strings.HasPrefix(line, "# HELP "):
			f := strings.Fields(line)
			if len(f) >= 3 {
				declared[f[1]+" "+f[2]]++
			}
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			// name{labels} value [timestamp]: the series is everything
			// before the last space-separated value field(s).
			if i := strings.LastIndex(line, "} "); i >= 0 {
				samples[line[:i+1]]++
			} else if f := strings.Fields(line); len(f) >= 2 {
				samples[f[0]]++
			}
		}
	}
	for k, n := range declared {
		if n > 1 {
			t.Errorf("admin /metrics declares %q %d times", k, n)
		}
	}
	for k, n := range samples {
		if n > 1 {
			t.Errorf("admin /metrics exports series %s %d times", k, n)
		}
	}

	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(raw))
	if err != nil {
		t.Fatalf("admin /metrics does not parse as the text format: %v\n%s", err, metricLines(raw, rcnsPrefix))
	}
	s := &scrapeResult{raw: raw, families: fams, values: map[string]float64{}}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			key := seriesKey(name, m.GetLabel())
			var v float64
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				v = m.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				key = seriesKey(name+"_count", m.GetLabel())
				v = float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY:
				key = seriesKey(name+"_count", m.GetLabel())
				v = float64(m.GetSummary().GetSampleCount())
			default:
				continue
			}
			if _, dup := s.values[key]; dup {
				t.Errorf("admin /metrics exports %s twice", key)
			}
			s.values[key] = v
		}
	}
	return s
}

// seriesKey renders name{a="x",b="y"} with labels sorted by name, the
// form the tests below spell their expectations in.
func seriesKey(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	pairs := make([]string, 0, len(labels))
	for _, l := range labels {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// value returns the sample of key, 0 when the series is not exported
// (a labelled child appears only once it is first used).
func (s *scrapeResult) value(key string) float64 { return s.values[key] }

// rcnsSeries returns the keys of every caddy_rcns_ child (a histogram
// child counts once), sorted.
func (s *scrapeResult) rcnsSeries() []string {
	var out []string
	for name, mf := range s.families {
		if !strings.HasPrefix(name, rcnsPrefix) {
			continue
		}
		for _, m := range mf.GetMetric() {
			out = append(out, seriesKey(name, m.GetLabel()))
		}
	}
	sort.Strings(out)
	return out
}

// rcnsCounterDeltas returns after - before for every caddy_rcns_ counter
// and histogram _count series that changed. Gauges are left out: they
// report state, not events.
func rcnsCounterDeltas(before, after *scrapeResult) map[string]float64 {
	out := map[string]float64{}
	for name, mf := range after.families {
		if !strings.HasPrefix(name, rcnsPrefix) {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER, dto.MetricType_HISTOGRAM:
		default:
			continue
		}
		suffix := ""
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			suffix = "_count"
		}
		for _, m := range mf.GetMetric() {
			key := seriesKey(name+suffix, m.GetLabel())
			if d := after.value(key) - before.value(key); d != 0 {
				out[key] = d
			}
		}
	}
	return out
}

// metricLines returns the lines of an exposition that contain sub.
func metricLines(raw, sub string) string {
	var out []string
	for _, l := range strings.Split(raw, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// assertDeltas compares the changed counter series with want exactly:
// every series in want moved by exactly its value and nothing else
// moved.
func assertDeltas(t testing.TB, what string, before, after *scrapeResult, want map[string]float64) {
	t.Helper()
	got := rcnsCounterDeltas(before, after)
	keys := slices.Sorted(maps.Keys(want))
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: %s moved by %v, want %v", what, k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected change of %s by %v", what, k, got[k])
		}
	}
	if t.Failed() {
		t.Logf("%s: all caddy_rcns_ counter changes: %v", what, got)
	}
}

// TestMetricsCounterDeltas drives one flow per instrumented path against
// the lab world (optimistic mode) and checks that exactly the expected
// counters move, each by exactly the expected amount; then it reloads the
// same config through admin /load (forced) and checks that the families
// are declared once, counters restarted, gauges report the surviving
// state, and the new collectors count.
func TestMetricsCounterDeltas(t *testing.T) {
	w := startLab(t, "optimistic", "")
	g := w.GW
	const readScope = "hotel:read"

	s0 := scrapeMetrics(t, g)
	// The closed enumerations start at zero (docs/metrics.md).
	for _, k := range []string{
		`caddy_rcns_lock_refusals_total{lock="caller_scope"}`,
		`caddy_rcns_idempotency_events_total{event="replay"}`,
		`caddy_rcns_gate_evaluations_total{outcome="accepted",reason="none"}`,
	} {
		if _, ok := s0.values[k]; !ok {
			t.Errorf("fresh gateway does not export %s at 0:\n%s", k, metricLines(s0.raw, rcnsPrefix))
		}
	}

	// 1. One optimistic synthesis (263): the gate accepts, book-room runs
	// its three steps on the hotel upstream.
	r := g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
	wantStatus(t, r, 263)
	s1 := scrapeMetrics(t, g)
	assertDeltas(t, "optimistic synthesis", s0, s1, map[string]float64{
		`caddy_rcns_gate_evaluations_total{outcome="accepted",reason="none"}`:                 1,
		`caddy_rcns_syntheses_total{mode="optimistic",outcome="executed",recipe="book-room"}`: 1,
		`caddy_rcns_composition_duration_seconds_count{recipe="book-room"}`:                   1,
		`caddy_rcns_step_duration_seconds_count{recipe="book-room",step="guest"}`:             1,
		`caddy_rcns_step_duration_seconds_count{recipe="book-room",step="property"}`:          1,
		`caddy_rcns_step_duration_seconds_count{recipe="book-room",step="reservation"}`:       1,
		`caddy_rcns_upstream_request_duration_seconds_count{upstream="hotel"}`:                3,
		requestSeries("263", "BOOK"):         1,
		durationSeries("gate", "negotiated"): 1,
	})
	if got := s1.value("caddy_rcns_active_contracts"); got != 1 {
		t.Errorf("caddy_rcns_active_contracts = %v after one synthesis, want 1", got)
	}

	// 2. One lock-3 refusal: the agent opts in but holds no
	// rcns:negotiate (262 scope-required).
	r = g.Do(t, "BOOK", "/room", hdr(agentA2, scopeNoRCNS, "Allow-RCNS", "true"), bookBody())
	assertErrorBody(t, r, 262, "scope-required")
	s2 := scrapeMetrics(t, g)
	assertDeltas(t, "lock-3 refusal", s1, s2, map[string]float64{
		`caddy_rcns_lock_refusals_total{lock="caller_scope"}`:                          1,
		`caddy_rcns_gate_evaluations_total{outcome="refused",reason="scope-required"}`: 1,
		requestSeries("262", "BOOK"):                                                   1,
		durationSeries("gate", "refused"):                                              1,
	})

	// 3. One idempotent replay of a Tier B call: the first call executes
	// (one upstream call), the repeat replays (no upstream call).
	key := fmt.Sprintf("metrics-%d", time.Now().UnixNano())
	first := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, readScope, "Idempotency-Key", key), nil)
	wantStatus(t, first, 200)
	s3a := scrapeMetrics(t, g)
	assertDeltas(t, "Tier B first execution", s2, s3a, map[string]float64{
		`caddy_rcns_upstream_request_duration_seconds_count{upstream="hotel"}`: 1,
		requestSeries("200", "FETCH"):                                          1,
		durationSeries("tier_b", "success"):                                    1,
	})
	again := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, readScope, "Idempotency-Key", key), nil)
	assertReplay(t, first, again)
	s3 := scrapeMetrics(t, g)
	assertDeltas(t, "idempotent replay", s3a, s3, map[string]float64{
		`caddy_rcns_idempotency_events_total{event="replay"}`: 1,
		requestSeries("200", "FETCH"):                         1,
		durationSeries("tier_b", "success"):                   1,
	})
	if got := s3.value("caddy_rcns_idempotency_records"); got != 1 {
		t.Errorf("caddy_rcns_idempotency_records = %v with one stored key, want 1", got)
	}

	// 4. One upstream timeout: FETCH /slow calls go-httpbin /delay/3 with
	// timeout_seconds 1 (integration/testdata/lab/endpoints/fetch-slow.yaml).
	r = g.Do(t, "FETCH", "/slow", hdr(agentA1, readScope), nil)
	assertNamedError(t, r, "upstream_timeout")
	s4 := scrapeMetrics(t, g)
	assertDeltas(t, "upstream timeout", s3, s4, map[string]float64{
		`caddy_rcns_upstream_errors_total{class="upstream_timeout",upstream="bin"}`: 1,
		`caddy_rcns_upstream_request_duration_seconds_count{upstream="bin"}`:        1,
		requestSeries("422", "FETCH"):                                               1,
		durationSeries("tier_b", "error"):                                           1,
	})

	// 5. Reload the same config through admin /load (forced, so Caddy
	// provisions a new handler and a new metrics registry).
	if status, body := adminLoad(t, g, g.Caddyfile); status != http.StatusOK {
		t.Fatalf("admin /load = %d: %s", status, body)
	}
	s5 := scrapeMetrics(t, g) // fails on duplicated families or series
	// A labelled child appears only once it is used, so a fresh registry
	// exports the gauges and the zero-initialized enumerations only; those
	// must be back.
	for _, k := range []string{
		`caddy_rcns_active_contracts`,
		`caddy_rcns_idempotency_records`,
		`caddy_rcns_attempt_records`,
		`caddy_rcns_gate_evaluations_total{outcome="accepted",reason="none"}`,
		`caddy_rcns_lock_refusals_total{lock="server_policy"}`,
		`caddy_rcns_lock_refusals_total{lock="caller_opt_in"}`,
		`caddy_rcns_lock_refusals_total{lock="caller_scope"}`,
		`caddy_rcns_lock_refusals_total{lock="trust_tier"}`,
		`caddy_rcns_contract_presentations_total{outcome="executed",via="pair"}`,
		`caddy_rcns_contract_presentations_total{outcome="not_found",via="synthesis_id"}`,
		`caddy_rcns_idempotency_events_total{event="replay"}`,
		`caddy_rcns_idempotency_events_total{event="store_full"}`,
	} {
		if _, ok := s5.values[k]; !ok {
			t.Errorf("%s is not exported after the reload:\n%s", k, metricLines(s5.raw, rcnsPrefix))
		}
	}
	// Counters restart at zero (docs/metrics.md "Reloads restart counters").
	for _, k := range []string{
		`caddy_rcns_syntheses_total{mode="optimistic",outcome="executed",recipe="book-room"}`,
		`caddy_rcns_lock_refusals_total{lock="caller_scope"}`,
		`caddy_rcns_idempotency_events_total{event="replay"}`,
		`caddy_rcns_upstream_errors_total{class="upstream_timeout",upstream="bin"}`,
	} {
		if got := s5.value(k); got != 0 {
			t.Errorf("%s = %v right after the reload, want 0 (a fresh registry)", k, got)
		}
	}
	// State survives, and the gauges report it from Provision on.
	if got := s5.value("caddy_rcns_active_contracts"); got != 1 {
		t.Errorf("caddy_rcns_active_contracts = %v after the reload, want 1 (the contract survives)", got)
	}
	if got := s5.value("caddy_rcns_idempotency_records"); got != 1 {
		t.Errorf("caddy_rcns_idempotency_records = %v after the reload, want 1", got)
	}

	// The new collectors count: the same refusal and replay again.
	r = g.Do(t, "BOOK", "/room", hdr(agentA2, scopeNoRCNS, "Allow-RCNS", "true"), bookBody())
	assertErrorBody(t, r, 262, "scope-required")
	assertReplay(t, first, g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, readScope, "Idempotency-Key", key), nil))
	s6 := scrapeMetrics(t, g)
	assertDeltas(t, "after reload", s5, s6, map[string]float64{
		`caddy_rcns_lock_refusals_total{lock="caller_scope"}`:                          1,
		`caddy_rcns_gate_evaluations_total{outcome="refused",reason="scope-required"}`: 1,
		requestSeries("262", "BOOK"):                                                   1,
		`caddy_rcns_idempotency_events_total{event="replay"}`:                          1,
		requestSeries("200", "FETCH"):                                                  1,
		durationSeries("gate", "refused"):                                              1,
		durationSeries("tier_b", "success"):                                            1,
	})

	out := g.Output()
	for _, bad := range []string{"panic", "AlreadyRegistered", "duplicate metrics collector"} {
		if strings.Contains(out, bad) {
			t.Errorf("caddy output contains %q:\n%s", bad, g.proc.tail(logTailLines))
		}
	}
}

// Cardinality bounds for TestMetricsCardinality.
const (
	cardinalityRequests    = 1000
	cardinalityMethods     = 100
	cardinalityWorkers     = 4
	cardinalityMaxNew      = 12 // seen: 8 code, reason and budget values and 2 request duration kind/outcome pairs
	cardinalityTimeLimit   = 20 * time.Second
	cardinalityPathPrefix  = "/cardinality-probe-"
	cardinalityMethodStart = "ZQPROBE"
)

// TestMetricsCardinality sends 1,000 requests with 1,000 distinct
// unregistered (well-formed) Agent-IDs, 1,000 requests from a registered
// agent to 1,000 distinct unserved paths (every tenth with Allow-RCNS, so
// the gate and its rate limit run too), and 100 requests with 100
// distinct unknown method tokens. The number of caddy_rcns_ series may
// grow only by new status-code and reason values and request duration
// kind/outcome pairs (a small constant), and no label anywhere may
// carry one of the ids, paths or methods.
func TestMetricsCardinality(t *testing.T) {
	w := startLab(t, "optimistic", "")
	g := w.GW
	before := scrapeMetrics(t, g)

	unknownAgent := func(i int) string { return agentID(fmt.Sprintf("metrics-cardinality-unknown-%d", i)) }
	probePath := func(i int) string { return fmt.Sprintf("%s%d", cardinalityPathPrefix, i) }
	probeMethod := func(i int) string {
		// Uppercase letters only: a well-formed method token.
		return fmt.Sprintf("%s%c%c", cardinalityMethodStart, 'A'+i/26, 'A'+i%26)
	}

	type job struct {
		method, path string
		h            map[string]string
	}
	var jobs []job
	for i := 0; i < cardinalityRequests; i++ {
		jobs = append(jobs, job{"FETCH", "/guests/g-1", hdr(unknownAgent(i), "hotel:read")})
	}
	for i := 0; i < cardinalityRequests; i++ {
		h := hdr(agentA1, scopeAll)
		if i%10 == 0 {
			h["Allow-RCNS"] = "true"
		}
		jobs = append(jobs, job{"FETCH", probePath(i), h})
	}
	for i := 0; i < cardinalityMethods; i++ {
		jobs = append(jobs, job{probeMethod(i), "/guests/g-1", hdr(agentA1, "hotel:read")})
	}

	start := time.Now()
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan job)
	for range cardinalityWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				r, err := tryDo(g, j.method, j.path, j.h, nil)
				mu.Lock()
				if err != nil {
					statuses[-1]++
				} else {
					statuses[r.Status]++
				}
				mu.Unlock()
			}
		}()
	}
	deadline := time.After(cardinalityTimeLimit)
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-deadline:
			break feed
		}
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d requests in %s; statuses %v", len(jobs), elapsed.Round(time.Millisecond), statuses)
	if elapsed >= cardinalityTimeLimit {
		t.Fatalf("the requests did not finish within %s", cardinalityTimeLimit)
	}
	if statuses[-1] > 0 {
		t.Fatalf("%d requests failed at the transport", statuses[-1])
	}
	total := 0
	for _, n := range statuses {
		total += n
	}
	if total != len(jobs) {
		t.Fatalf("answered %d of %d requests", total, len(jobs))
	}
	// Sanity: the unknown agents were refused, the probes were served by
	// nothing.
	if statuses[200] != 0 || statuses[263] != 0 {
		t.Errorf("some probe succeeded: statuses %v", statuses)
	}

	after := scrapeMetrics(t, g)

	// The requests were counted (each is one caddy_rcns_requests_total
	// event), so the metrics did see the traffic.
	var counted float64
	for k, d := range rcnsCounterDeltas(before, after) {
		if strings.HasPrefix(k, "caddy_rcns_requests_total{") {
			counted += d
		}
	}
	if int(math.Round(counted)) != len(jobs) {
		t.Errorf("caddy_rcns_requests_total grew by %v, want %d", counted, len(jobs))
	}

	// Series growth: only new code/reason/budget values and kind/outcome
	// pairs.
	old := map[string]bool{}
	for _, k := range before.rcnsSeries() {
		old[k] = true
	}
	var added []string
	for _, k := range after.rcnsSeries() {
		if !old[k] {
			added = append(added, k)
		}
	}
	t.Logf("caddy_rcns_ series: %d before, %d after; new: %v", len(old), len(after.rcnsSeries()), added)
	if len(added) > cardinalityMaxNew {
		t.Errorf("%d new caddy_rcns_ series after %d distinct agents, paths and methods (limit %d): %v",
			len(added), len(jobs), cardinalityMaxNew, added)
	}

	// No label value of any family (Caddy's own included) carries a probe.
	leaks := 0
	for name, mf := range after.families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if strings.Contains(v, cardinalityPathPrefix) || strings.Contains(v, cardinalityMethodStart) ||
					hex64.MatchString(v) || strings.Contains(v, agentA1) {
					leaks++
					if leaks <= 5 {
						t.Errorf("%s carries a request value in label %s=%q", name, l.GetName(), v)
					}
				}
			}
		}
	}
	for i := 0; i < cardinalityRequests; i += 97 {
		if strings.Contains(after.raw, unknownAgent(i)) {
			t.Errorf("the exposition contains unknown Agent-ID %s", unknownAgent(i))
		}
	}
	if strings.Contains(after.raw, cardinalityPathPrefix) || strings.Contains(after.raw, cardinalityMethodStart) {
		t.Errorf("the exposition contains a probe path or method:\n%s", metricLines(after.raw, "probe"))
	}
}

// requestSeries is the caddy_rcns_requests_total series of one code and
// method on the door the suite runs over (binding="http" or "agtp").
func requestSeries(code, method string) string {
	return `caddy_rcns_requests_total{binding="` + suiteDoor + `",code="` + code + `",method="` + method + `"}`
}

// durationSeries is the caddy_rcns_request_duration_seconds _count
// series of one kind and outcome on the door the suite runs over.
func durationSeries(kind, outcome string) string {
	return `caddy_rcns_request_duration_seconds_count{binding="` + suiteDoor + `",kind="` + kind + `",outcome="` + outcome + `"}`
}
