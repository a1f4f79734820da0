package main

import (
	"strings"
	"testing"
)

// scrape is a slice of Caddy's /metrics as the gateway writes it.
const scrape = `# HELP caddy_rcns_request_duration_seconds Duration.
# TYPE caddy_rcns_request_duration_seconds histogram
caddy_rcns_request_duration_seconds_bucket{binding="http",kind="contract",outcome="success",le="+Inf"} 30
caddy_rcns_request_duration_seconds_sum{binding="http",kind="contract",outcome="success"} 0.06
caddy_rcns_request_duration_seconds_count{binding="http",kind="contract",outcome="success"} 30
caddy_rcns_request_duration_seconds_bucket{binding="http",kind="gate",outcome="refused",le="+Inf"} 10
caddy_rcns_request_duration_seconds_sum{binding="http",kind="gate",outcome="refused"} 0.01
caddy_rcns_request_duration_seconds_count{binding="http",kind="gate",outcome="refused"} 10
# HELP caddy_rcns_store_round_trip_duration_seconds Duration.
# TYPE caddy_rcns_store_round_trip_duration_seconds histogram
caddy_rcns_store_round_trip_duration_seconds_bucket{op="present",le="+Inf"} 30
caddy_rcns_store_round_trip_duration_seconds_sum{op="present"} 0.03
caddy_rcns_store_round_trip_duration_seconds_count{op="present"} 30
caddy_rcns_store_round_trip_duration_seconds_bucket{op="resolve_pair",le="+Inf"} 10
caddy_rcns_store_round_trip_duration_seconds_sum{op="resolve_pair"} 0.005
caddy_rcns_store_round_trip_duration_seconds_count{op="resolve_pair"} 10
caddy_rcns_store_round_trip_duration_seconds_bucket{op="record",le="+Inf"} 4
caddy_rcns_store_round_trip_duration_seconds_sum{op="record"} 0.5
caddy_rcns_store_round_trip_duration_seconds_count{op="record"} 4
caddy_rcns_store_round_trip_duration_seconds_bucket{op="idempotency_complete",le="+Inf"} 4
caddy_rcns_store_round_trip_duration_seconds_sum{op="idempotency_complete"} 0.5
caddy_rcns_store_round_trip_duration_seconds_count{op="idempotency_complete"} 4
`

func TestParseEngineTimes(t *testing.T) {
	got, err := parseEngineTimes(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	// The records' batches and the answer's store beside it are not
	// waited for: only present and resolve_pair count.
	want := engineTimes{RequestSeconds: 0.07, RequestCount: 40, StoreSeconds: 0.035, StoreCount: 40}
	if !near(got.RequestSeconds, want.RequestSeconds) || got.RequestCount != want.RequestCount ||
		!near(got.StoreSeconds, want.StoreSeconds) || got.StoreCount != want.StoreCount {
		t.Errorf("parseEngineTimes = %+v, want %+v", got, want)
	}

	none, err := parseEngineTimes(strings.NewReader("# no rcns site yet\n"))
	if err != nil || none != (engineTimes{}) {
		t.Errorf("a scrape without the histograms = %+v, %v; want zeros", none, err)
	}
	if _, err := parseEngineTimes(strings.NewReader("caddy_rcns_x{op=\"a\" 1\n")); err == nil {
		t.Error("a malformed scrape parsed")
	}
}

func TestSetEngine(t *testing.T) {
	a := engineTimes{RequestSeconds: 1, RequestCount: 100, StoreSeconds: 0.5, StoreCount: 100}
	b := engineTimes{RequestSeconds: 3, RequestCount: 1100, StoreSeconds: 1.5, StoreCount: 2100}
	st := &stats{Requests: 1000}
	st.setEngine(a, b)
	// 2 s over 1000 engine requests; 1 s of store waits and 2000 round
	// trips over the run's 1000 requests.
	if !near(st.EngineMS, 2) || !near(st.StoreWaitMS, 1) || !near(st.StoreTrips, 2) {
		t.Errorf("setEngine: engine %.3f ms, store %.3f ms, %.2f trips; want 2, 1, 2", st.EngineMS, st.StoreWaitMS, st.StoreTrips)
	}
	restarted := &stats{Requests: 1000}
	restarted.setEngine(b, a)
	if restarted.EngineMS != 0 || restarted.StoreWaitMS != 0 || restarted.StoreTrips != 0 {
		t.Errorf("counters that went down gave %+v, want no values", restarted)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// latencyFixture has d/redis 1 ms over d/nokey at p50 (limit 0.3) with
// the processes' CPU of each run set, and redis-server's commandstats
// of d/redis (withRedis).
func latencyFixture(withProcs, withRedis bool) *results {
	r := fixture(map[string][]float64{"d/nokey": {0, 0, 0}, "d/redis": {50, 60, 40}}, nil)
	for _, rn := range r.Runs {
		st := rn.Stats
		switch rn.Key {
		case "d/nokey":
			st.P50, st.Tput = 3, 5000
			st.EngineMS = 0.5
		case "d/redis":
			st.P50, st.Tput = 4, 4000
			st.EngineMS, st.StoreWaitMS, st.StoreTrips = 1.2, 0.6, 1
			if withProcs {
				st.RedisCPU = 30
			}
			if withRedis {
				st.RedisCommands, st.RedisScripts, st.RedisScriptUS, st.RedisCommandUS = 20, 1, 28, 12
			}
		default:
			continue
		}
		if withProcs {
			st.UpstreamCPU, st.DriverCPU = 40, 60
		}
	}
	return r
}

func TestLatencyBreakdown(t *testing.T) {
	r := latencyFixture(true, true)
	var v verdict
	for _, vv := range r.judge() {
		if vv.T.Key == "d/redis" && vv.T.Kind == kindP50Vs {
			v = vv
		}
	}
	if v.T.Kind != kindP50Vs || v.Met {
		t.Fatalf("fixture: the d/redis p50 target is %+v, want a missed p50 target", v)
	}
	ls, ok := r.latencyBreakdown(v)
	if !ok {
		t.Fatal("no breakdown")
	}
	want := map[string][3]float64{ // key, of, added
		"closed-loop p50":                                              {4, 3, 1},
		"closed-loop mean (connections ÷ req/s)":                       {4, 3.2, 0.8},
		"of it, waiting for the store's round trips before the answer": {0.6, 0, 0.6},
		"CPU: Caddy":        {150, 100, 50},
		"CPU: redis-server": {30, 0, 30},
		"redis-server: commands run per request (inside its scripts or not, `INFO commandstats`)": {20, 0, 20},
		"redis-server: scripts called per request":                                                {1, 0, 1},
		"redis-server: time in scripts per request (wall, `INFO commandstats`)":                   {28, 0, 28},
		"of it and beside it: time in the commands themselves":                                    {12, 0, 12},
		"CPU: all four": {280, 200, 80},
		// 280 µs × 16 connections ÷ 2 CPUs = 2.24 ms; 200 µs: 1.6.
		"CPU-bound latency (all four × connections ÷ CPUs)": {2.24, 1.6, 0.64},
	}
	seen := 0
	for _, row := range ls.Rows {
		w, ok := want[row.Name]
		if !ok {
			continue
		}
		seen++
		if !near(row.Key, w[0]) || !near(row.Of, w[1]) || !near(row.Diff, w[2]) {
			t.Errorf("%s: %v → %v (%+v), want %v → %v (%+v)", row.Name, row.Of, row.Key, row.Diff, w[1], w[0], w[2])
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d stages checked were found: %+v", seen, len(want), ls.Rows)
	}
	// redis-server's commandstats come right after its CPU, in the
	// order of latencyRows.
	var names []string
	for _, row := range ls.Rows {
		names = append(names, row.Name)
	}
	order := strings.Join(names, "\n")
	if !strings.Contains(order, "CPU: redis-server\nredis-server: commands run per request (inside its scripts or not, `INFO commandstats`)\n"+
		"redis-server: scripts called per request\nredis-server: time in scripts per request (wall, `INFO commandstats`)\n"+
		"of it and beside it: time in the commands themselves\nCPU: the upstream\n") {
		t.Errorf("the stages are in the order\n%s", order)
	}

	md := mustRender(t, r)
	pageHas(t, md,
		"Where the closed-loop latency of the missed p50 targets goes",
		"closed loop of 16 connections on 2 shared CPUs",
		"| stage | d/redis against d/nokey |",
		"| CPU: redis-server, µs | +30.0 (0.0 → 30.0) |",
		"| closed-loop p50, ms | +1.00 (3.00 → 4.00) |",
		"| redis-server: commands run per request (inside its scripts or not, `INFO commandstats`) | +20.00 (0.00 → 20.00) |",
		"| redis-server: scripts called per request | +1.00 (0.00 → 1.00) |",
		"| redis-server: time in scripts per request (wall, `INFO commandstats`), µs | +28.0 (0.0 → 28.0) |",
		"| of it and beside it: time in the commands themselves, µs | +12.0 (0.0 → 12.0) |",
		"from its own `INFO commandstats`, reset before each\nrun.",
	)

	// Results recorded before redis-server's commandstats were read:
	// the table without their rows, rather than rows of zeros.
	noStats := latencyFixture(true, false)
	md = mustRender(t, noStats)
	if !strings.Contains(md, "| CPU: redis-server, µs | +30.0 (0.0 → 30.0) |") {
		t.Error("the page has no table for results without commandstats")
	}
	if strings.Contains(md, "redis-server: ") || strings.Contains(md, "of it and beside it") {
		t.Error("the page shows commandstats rows for results without them")
	}
	if ls, ok := noStats.latencyBreakdown(v); !ok || len(ls.Rows) != len(latencyRows) {
		t.Errorf("the breakdown of results without commandstats has %d stages, want all %d", len(ls.Rows), len(latencyRows))
	}

	// Results recorded before the processes were measured: no table.
	old := latencyFixture(false, false)
	if _, ok := old.latencyBreakdown(v); ok {
		t.Error("a breakdown from runs without the processes' CPU")
	}
	if md, _ := renderPage(old); strings.Contains(md, "Where the closed-loop latency") {
		t.Error("the page breaks down a run without the processes' CPU")
	}
}

// TestCommandstatsCellUnmeasured: a commandstats row with nothing on
// either side (a column without a run of the Redis site) reads "–",
// not a measured zero; any other row, or a measured one, keeps its
// numbers.
func TestCommandstatsCellUnmeasured(t *testing.T) {
	for _, c := range []struct {
		row  latencyRow
		want string
	}{
		{latencyRow{Unit: "", Commandstats: true}, "–"},
		{latencyRow{Unit: "µs", Commandstats: true}, "–"},
		{latencyRow{Unit: "", Commandstats: true, Key: 20.13, Diff: 20.13}, "+20.13 (0.00 → 20.13)"},
		{latencyRow{Unit: "µs"}, "+0.0 (0.0 → 0.0)"},
	} {
		if got := c.row.cell(); got != c.want {
			t.Errorf("%+v: cell %q, want %q", c.row, got, c.want)
		}
	}
}

// TestFloorColumn: the floor (bf/floor against (b), each run against
// its own (b) reference, run.Ref) is the last column of the latency
// table beside the missed p50 targets, and a row of the same-round
// table; without its runs, neither.
func TestFloorColumn(t *testing.T) {
	r := latencyFixture(true, true)
	var floor *scenario
	for _, s := range scenarios() {
		if s.Key == floorKey {
			floor = s
		}
	}
	if floor == nil || !siteNamed(floor.Site).Redis {
		t.Fatalf("no floor scenario on a Redis site: %+v", floor)
	}
	r.Scenarios = append(r.Scenarios, floor)
	for round := range 3 {
		// (b) around the floor: 100 µs, p50 2 ms, its processes as
		// latencyFixture's; the floor one round trip more.
		ref := &stats{CaddyCPU: 100, Tput: 5000, P50: 2, P99: 5, UpstreamCPU: 40, DriverCPU: 60}
		r.add(floor, round, &stats{CaddyCPU: 140 + float64(round), Tput: 4000, P50: 2.5, P99: 6, Requests: 9000, OK: 9000,
			RedisCPU: 20, UpstreamCPU: 40, DriverCPU: 60, RedisScripts: 1, RedisScriptUS: 3}, ref)
	}
	md := mustRender(t, r)
	pageHas(t, md,
		"| stage | d/redis against d/nokey | bf/floor against b |",
		"| CPU: Caddy, µs | +50.0 (100.0 → 150.0) | +41.0 (100.0 → 141.0) |",
		"| CPU: redis-server, µs | +30.0 (0.0 → 30.0) | +20.0 (0.0 → 20.0) |",
		"| closed-loop p50, ms | +1.00 (3.00 → 4.00) | +0.50 (2.00 → 2.50) |",
		// 261 µs against 200 (the median round), × 16 ÷ 2.
		"| CPU-bound latency (all four × connections ÷ CPUs), ms | +0.64 (1.60 → 2.24) | +0.49 (1.60 → 2.09) |",
		"The last column is the floor, not a gateway",
		// The engine's rows: the floor is not a gateway.
		"| store round trips before the answer, per request | +1.00 (0.00 → 1.00) | – |",
		"| bf/floor against b | +41.0 (+40.0 to +42.0) | +20.0 (+20.0 to +20.0) | +0.50 (+0.50 to +0.50) | +1.00 (+1.00 to +1.00) |",
	)
	// The same-round table without Redis on either side: no redis-server
	// number, and its text names only what it holds.
	if c := r.appendSameRound(nil, "d/nokey", "b"); len(c) != 1 || c[0].Redis.N != 0 {
		t.Errorf("d/nokey against b: %+v, want one row without redis-server CPU", c)
	}
	// A run of the floor alone: its row, and a text that names only it.
	md = mustRender(t, fixture(map[string][]float64{floorKey: {40, 41, 42}}, nil))
	pageHas(t, md, "Same round, each scenario against the one it names: reported, not judged, the floor against (b)",
		"| bf/floor against b | +41.0 (+40.0 to +42.0) | +0.0 (+0.0 to +0.0) |")
	if strings.Contains(md, "the Redis store against the memory store (redis minus") || strings.Contains(md, "upstream credentials against") {
		t.Error("the same-round text of a floor-only run names comparisons it does not hold")
	}
	if md := mustRender(t, latencyFixture(true, true)); strings.Contains(md, "bf/floor") || strings.Contains(md, "The last column is the floor") {
		t.Error("the page shows a floor that did not run")
	}
}
