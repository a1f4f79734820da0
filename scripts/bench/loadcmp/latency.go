package main

import (
	"fmt"
	"strconv"
)

// latencyStage breaks a missed p50 target (kindP50Vs) down by where a
// request's time went in Key's runs and in Of's, from the rounds
// themselves (stats), not from a profile: the closed loop's latency,
// the time in the rcns engine and its wait for the store, and the CPU
// per request of every process of the run. In a closed loop of W
// connections on C shared CPUs that the processes keep busy, a request
// waits for W/C times the machine's CPU per request, so CPU added by
// any process (redis-server's, the load generator's) shows in the
// latency, multiplied: the Bound row says how much.
type latencyStage struct {
	Key  string
	V    verdict
	Rows []latencyRow
	// Workers and CPUs are W and C above.
	Workers, CPUs int
}

// latencyRow is one stage: Key's and Of's medians over the rounds that
// have both, and the median over those rounds of Key's minus Of's.
type latencyRow struct {
	Name          string
	Unit          string // "ms", "µs" or "" (a count)
	Key, Of, Diff float64
	// Commandstats: a row from redis-server's INFO commandstats.
	Commandstats bool
	// Engine: a row from the rcns engine's metrics.
	Engine bool
}

// latencyRows lists the stages of latencyStage, each with its measure
// of one run; bound is set per run from the others. A commandstats row
// is redis-server's own count (stats.setRedis): results recorded
// before it have none, and the table leaves it out when it is zero on
// both sides of every stage (latencyTableOf).
var latencyRows = []struct {
	name, unit   string
	of           func(st *stats, workers, cpus int) float64
	commandstats bool
	// engine: a row from the rcns engine's metrics, which the floor
	// (not a gateway) has none of.
	engine bool
}{
	{name: "closed-loop p50", unit: "ms", of: func(st *stats, _, _ int) float64 { return st.P50 }},
	{name: "closed-loop mean (connections ÷ req/s)", unit: "ms", of: func(st *stats, w, _ int) float64 { return meanLatency(st, w) }},
	{name: "in the rcns engine (mean of `caddy_rcns_request_duration_seconds`)", unit: "ms", engine: true, of: func(st *stats, _, _ int) float64 { return st.EngineMS }},
	{name: "of it, waiting for the store's round trips before the answer", unit: "ms", engine: true, of: func(st *stats, _, _ int) float64 { return st.StoreWaitMS }},
	{name: "store round trips before the answer, per request", engine: true, of: func(st *stats, _, _ int) float64 { return st.StoreTrips }},
	{name: "CPU: Caddy", unit: "µs", of: func(st *stats, _, _ int) float64 { return st.CaddyCPU }},
	{name: "CPU: redis-server", unit: "µs", of: func(st *stats, _, _ int) float64 { return st.RedisCPU }},
	{name: "redis-server: commands run per request (inside its scripts or not, `INFO commandstats`)", commandstats: true,
		of: func(st *stats, _, _ int) float64 { return st.RedisCommands }},
	{name: "redis-server: scripts called per request", commandstats: true,
		of: func(st *stats, _, _ int) float64 { return st.RedisScripts }},
	{name: "redis-server: time in scripts per request (wall, `INFO commandstats`)", unit: "µs", commandstats: true,
		of: func(st *stats, _, _ int) float64 { return st.RedisScriptUS }},
	{name: "of it and beside it: time in the commands themselves", unit: "µs", commandstats: true,
		of: func(st *stats, _, _ int) float64 { return st.RedisCommandUS }},
	{name: "CPU: the upstream", unit: "µs", of: func(st *stats, _, _ int) float64 { return st.UpstreamCPU }},
	{name: "CPU: the load generator", unit: "µs", of: func(st *stats, _, _ int) float64 { return st.DriverCPU }},
	{name: "CPU: all four", unit: "µs", of: func(st *stats, _, _ int) float64 { return allCPU(st) }},
	{name: "CPU-bound latency (all four × connections ÷ CPUs)", unit: "ms", of: func(st *stats, w, c int) float64 {
		return allCPU(st) * float64(w) / float64(c) / 1e3
	}},
}

func allCPU(st *stats) float64 { return st.CaddyCPU + st.RedisCPU + st.UpstreamCPU + st.DriverCPU }

// meanLatency is Little's law's mean time in the closed loop: W
// requests in flight at Tput answers a second.
func meanLatency(st *stats, workers int) float64 {
	if st.Tput <= 0 {
		return 0
	}
	return float64(workers) / st.Tput * 1e3
}

// latencyBreakdown returns the latencyStage of p50 target v, or false
// when the run has no round with both scenarios or measured none of the
// processes (a results.json from before the stages were recorded).
func (r *results) latencyBreakdown(v verdict) (latencyStage, bool) {
	cpus, _ := strconv.Atoi(r.Meta["nproc"])
	ls := latencyStage{Key: v.T.Key, V: v, Workers: r.Options.Workers, CPUs: cpus}
	if ls.Workers < 1 || ls.CPUs < 1 {
		return ls, false
	}
	pairs := r.pairsOf(v.T.Key, v.T.Of)
	measured := false
	for _, p := range pairs {
		measured = measured || p[0].DriverCPU > 0
	}
	if len(pairs) == 0 || !measured {
		return ls, false
	}
	for _, row := range latencyRows {
		var k, o, d []float64
		for _, p := range pairs {
			kv, ov := row.of(p[0], ls.Workers, ls.CPUs), row.of(p[1], ls.Workers, ls.CPUs)
			k, o, d = append(k, kv), append(o, ov), append(d, kv-ov)
		}
		ls.Rows = append(ls.Rows, latencyRow{Name: row.name, Unit: row.unit, Key: median(k), Of: median(o), Diff: median(d),
			Commandstats: row.commandstats, Engine: row.engine})
	}
	return ls, true
}

// latencyTable is the page's one table of every latencyStage: a column
// per missed p50 target, a line per stage, each cell the added value
// then Of's and Key's ("+0.71 (2.10 → 2.81)").
type latencyTable struct {
	Head          []string // "d/redis against d/nokey"
	Lines         []latencyLine
	Workers, CPUs int
	// Floor: the last column is the floor against (b) (floorKey).
	Floor bool
}

type latencyLine struct {
	Name  string
	Cells []string
}

// latencyTableOf lays out stages; the zero table when there are none.
// A commandstats row zero on both sides of every stage is left out:
// results recorded before redis-server's commandstats were read have
// none, and a 0 there would claim Redis ran nothing.
func latencyTableOf(stages []latencyStage) latencyTable {
	if len(stages) == 0 {
		return latencyTable{}
	}
	t := latencyTable{Workers: stages[0].Workers, CPUs: stages[0].CPUs}
	for _, s := range stages {
		t.Head = append(t.Head, s.Key+" against "+s.V.T.Of)
	}
	t.Floor = stages[len(stages)-1].Key == floorKey
	for i, row := range stages[0].Rows {
		if row.Commandstats && !anyMeasured(stages, i) {
			continue
		}
		name := row.Name
		if row.Unit != "" {
			name += ", " + row.Unit
		}
		ln := latencyLine{Name: name}
		for _, s := range stages {
			if s.Key == floorKey && s.Rows[i].Engine {
				ln.Cells = append(ln.Cells, "–") // not a gateway: no engine to measure
				continue
			}
			ln.Cells = append(ln.Cells, s.Rows[i].cell())
		}
		t.Lines = append(t.Lines, ln)
	}
	return t
}

// anyMeasured tells whether row i of some stage is not zero on Key's
// side or Of's.
func anyMeasured(stages []latencyStage, i int) bool {
	for _, s := range stages {
		if s.Rows[i].Key != 0 || s.Rows[i].Of != 0 {
			return true
		}
	}
	return false
}

// cell formats a row's values: ms and counts with two decimals, µs with
// one.
func (r latencyRow) cell() string {
	if r.Commandstats && r.Key == 0 && r.Of == 0 {
		return "–" // not measured: no run of the Redis site in this column
	}
	if r.Unit == "µs" {
		return fmt.Sprintf("%+.1f (%.1f → %.1f)", r.Diff, r.Of, r.Key)
	}
	return fmt.Sprintf("%+.2f (%.2f → %.2f)", r.Diff, r.Of, r.Key)
}
