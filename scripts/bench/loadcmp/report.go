package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// results is everything one comparison measured (results.json).
type results struct {
	Meta      map[string]string `json:"meta"`
	Options   options           `json:"options"`
	Scenarios []*scenario       `json:"scenarios"`
	Runs      []*run            `json:"runs"`
	// Profiles holds, per profiled scenario, this module's heaviest
	// functions in its CPU profile under load (profiles.go).
	Profiles map[string][]frame `json:"profiles,omitempty"`
	// Costs holds, per profiled scenario, the cum µs per request of
	// every function named by costFrames (this module's, go-redis's,
	// and the runtime's allocation, GC and syscall totals): what a
	// target judged against another scenario compares stage by stage.
	Costs map[string][]frame `json:"costs,omitempty"`
}

// run is one recorded run of a scenario.
type run struct {
	Key   string `json:"key"`
	Round int    `json:"round"`
	Stats *stats `json:"stats"`
	// Ref is the mean of the (b) runs just before and after this one
	// (load scenarios other than b only).
	Ref *stats `json:"b_ref,omitempty"`
}

func (r *results) add(s *scenario, round int, st, ref *stats) {
	r.Runs = append(r.Runs, &run{Key: s.Key, Round: round, Stats: st, Ref: ref})
}

// summary is one scenario's line of the results table.
type summary struct {
	S *scenario
	// Load scenarios: Caddy CPU µs per request (median over runs) and
	// its difference to (b) per round; throughput and its ratio to (b)
	// per round.
	CPU, Tput        float64
	CPUOverB, TputB  spread
	StatRuns, Rounds int // runs whose CPU came from /proc/PID/stat ticks; rounds
	// Slow scenarios: p50 and p99 at the fixed rate (medians over runs).
	P50, P99 float64
}

func (r *results) runsOf(key string) []*run {
	var out []*run
	for _, rn := range r.Runs {
		if rn.Key == key {
			out = append(out, rn)
		}
	}
	return out
}

func (r *results) scenario(key string) *scenario {
	for _, s := range r.Scenarios {
		if s.Key == key {
			return s
		}
	}
	return nil
}

// summarize returns one summary per scenario of the run that has runs,
// in table order.
func (r *results) summarize() []*summary {
	var out []*summary
	for _, s := range r.Scenarios {
		runs := r.runsOf(s.Key)
		if len(runs) == 0 {
			continue
		}
		sm := &summary{S: s}
		var cpu, tput, p50, p99, over, ratio []float64
		rounds := map[int]bool{}
		for _, rn := range runs {
			rounds[rn.Round] = true
			cpu, tput = append(cpu, rn.Stats.CaddyCPU), append(tput, rn.Stats.Tput)
			p50, p99 = append(p50, rn.Stats.P50), append(p99, rn.Stats.P99)
			if rn.Stats.CPUSource == "stat" {
				sm.StatRuns++
			}
			if rn.Ref != nil && rn.Ref.Tput > 0 {
				over = append(over, rn.Stats.CaddyCPU-rn.Ref.CaddyCPU)
				ratio = append(ratio, rn.Stats.Tput/rn.Ref.Tput)
			}
		}
		sm.Rounds = len(rounds)
		sm.CPU, sm.Tput, sm.P50, sm.P99 = median(cpu), median(tput), median(p50), median(p99)
		sm.CPUOverB, sm.TputB = spreadOf(over), spreadOf(ratio)
		out = append(out, sm)
	}
	return out
}

// verdict is one target judged on a run.
type verdict struct {
	T        target
	Value    spread // per-round values: µs over (b), or a p50 ratio
	Measured bool   // the run had the scenarios the target needs
	Met      bool
	// Against counts the rounds whose own value goes the other way
	// from the verdict: over the limit for a target met, within it for
	// one not met. A verdict with any is carried by the median alone.
	Against int
}

// judge returns a verdict for every target, in the order of targets.
func (r *results) judge() []verdict {
	var out []verdict
	for _, t := range targets {
		v := verdict{T: t}
		var vals []float64
		switch t.Kind {
		case kindCPU:
			for _, rn := range r.runsOf(t.Key) {
				if rn.Ref != nil {
					vals = append(vals, rn.Stats.CaddyCPU-rn.Ref.CaddyCPU)
				}
			}
		case kindVs:
			vals = r.perRound(t, cpuOf, difference)
		case kindRatio:
			vals = r.perRound(t, cpuOf, quotient)
		case kindP50Vs:
			vals = r.perRound(t, p50Of, difference)
		case kindSlow:
			vals = r.perRound(t, p50Of, quotient)
		}
		v.Value = spreadOf(vals)
		v.Measured = v.Value.N > 0
		v.Met = v.Measured && t.within(v.Value.Med)
		for _, x := range vals {
			if t.within(x) != v.Met {
				v.Against++
			}
		}
		out = append(out, v)
	}
	return out
}

// Per-round measures and how a target combines Key's with Of's.
var (
	cpuOf      = func(st *stats) float64 { return st.CaddyCPU }
	p50Of      = func(st *stats) float64 { return st.P50 }
	difference = func(k, o float64) (float64, bool) { return k - o, true }
	quotient   = func(k, o float64) (float64, bool) { return k / o, o > 0 }
)

// within reports whether value x meets t's limit (below it, for a
// target marked Below; at most it, otherwise).
func (t target) within(x float64) bool {
	if t.Below {
		return x < t.Limit
	}
	return x <= t.Limit
}

// perRound is, per round, combine(measure of t.Key's run, measure of
// t.Of's run in the same round), for the rounds that have both and
// that combine accepts.
func (r *results) perRound(t target, measure func(*stats) float64, combine func(k, o float64) (float64, bool)) []float64 {
	of := map[int]float64{}
	for _, rn := range r.runsOf(t.Of) {
		of[rn.Round] = measure(rn.Stats)
	}
	var vals []float64
	for _, rn := range r.runsOf(t.Key) {
		if o, ok := of[rn.Round]; ok {
			if v, ok := combine(measure(rn.Stats), o); ok {
				vals = append(vals, v)
			}
		}
	}
	return vals
}

// VerdictText words a verdict: "met", "**not met**: 4.2 µs over the
// limit", or "not measured in this run"; a verdict some rounds go
// against says how many ("met; 2 of 6 rounds were over the limit",
// "...; 1 of 6 rounds was within it").
func (v verdict) VerdictText() string {
	var text string
	switch {
	case !v.Measured:
		return "not measured in this run"
	case v.Met:
		text = "met"
	case v.T.Kind == kindCPU || v.T.Kind == kindVs:
		text = fmt.Sprintf("**not met**: %s µs over the limit", missBy(v.Value.Med-v.T.Limit, 1))
	case v.T.Kind == kindP50Vs:
		text = fmt.Sprintf("**not met**: %s ms over the limit", missBy(v.Value.Med-v.T.Limit, 2))
	default:
		text = fmt.Sprintf("**not met**: %s over the limit", missBy(v.Value.Med-v.T.Limit, 2))
	}
	if v.Against == 0 {
		return text
	}
	verb, side := "were", "within it"
	if v.Against == 1 {
		verb = "was"
	}
	if v.Met {
		side = "over the limit"
		if v.T.Below {
			side = "at or over the limit" // a "<" target: a round at the limit misses it
		}
	}
	return fmt.Sprintf("%s; %d of %d rounds %s %s", text, v.Against, v.Value.N, verb, side)
}

// missBy formats how far a value misses its limit with the given
// decimals, never as zero (a verdict must not read "0.0 over").
func missBy(d float64, decimals int) string {
	least := math.Pow(10, -float64(decimals))
	if d < least {
		return fmt.Sprintf("less than %.*f", decimals, least)
	}
	return fmt.Sprintf("%.*f", decimals, d)
}

// ValueText is a verdict's value with its range over rounds.
func (v verdict) ValueText() string {
	if !v.Measured {
		return "—"
	}
	if v.T.Kind == kindCPU || v.T.Kind == kindVs {
		return fmt.Sprintf("%+.1f µs (rounds %+.1f to %+.1f)", v.Value.Med, v.Value.Lo, v.Value.Hi)
	}
	if v.T.Kind == kindP50Vs {
		return fmt.Sprintf("%+.2f ms (rounds %+.2f to %+.2f)", v.Value.Med, v.Value.Lo, v.Value.Hi)
	}
	return fmt.Sprintf("%.2f (rounds %.2f to %.2f)", v.Value.Med, v.Value.Lo, v.Value.Hi)
}

func (v verdict) LimitText() string {
	switch {
	case v.T.Kind == kindCPU && v.T.Below:
		return fmt.Sprintf("< %s µs", signed(v.T.Limit))
	case v.T.Kind == kindCPU:
		return fmt.Sprintf("≤ %s µs", signed(v.T.Limit))
	case v.T.Kind == kindVs:
		return fmt.Sprintf("≤ %s µs over %s", signed(v.T.Limit), v.T.Of)
	case v.T.Kind == kindRatio:
		return fmt.Sprintf("≤ %.2f × %s", v.T.Limit, v.T.Of)
	case v.T.Kind == kindP50Vs:
		return fmt.Sprintf("≤ +%.1f ms over %s", v.T.Limit, v.T.Of)
	}
	return fmt.Sprintf("≤ %.2f", v.T.Limit)
}

// signed formats a whole number of µs with its sign, 0 without one.
func signed(v float64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%+.0f", v)
}

// otherLoad is the median and the largest CPU, in cores, that the
// machine spent during the runs on work other than this comparison's.
func (r *results) otherLoad() (med, most float64) {
	var v []float64
	for _, rn := range r.Runs {
		v = append(v, rn.Stats.OtherCores)
	}
	if len(v) == 0 {
		return 0, 0
	}
	sort.Float64s(v)
	return median(v), v[len(v)-1]
}

// writeResults writes results.json and report.md (the page) to dir,
// prints the page to w, and writes it to page too when given.
func writeResults(w io.Writer, r *results, dir, page string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), raw, 0o644); err != nil {
		return err
	}
	md, err := renderPage(r)
	if err != nil {
		return err
	}
	fmt.Fprint(w, "\n"+md)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if page != "" {
		if err := os.WriteFile(page, []byte(md), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n==> results: %s (results.json, report.md, loadcmp.log, profiles/)\n", dir)
	return nil
}

// renderFile renders the page from a results.json to page (stdout
// when "").
func renderFile(file, page string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var r results
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	if len(r.Scenarios) == 0 || len(r.Runs) == 0 {
		return fmt.Errorf("%s: no scenarios or no runs", file)
	}
	if r.Scenarios[0].Key != "b" {
		return fmt.Errorf("%s: the first scenario is %q, want the reference b", file, r.Scenarios[0].Key)
	}
	for _, s := range r.Scenarios {
		if letters[s.Letter] == "" {
			return fmt.Errorf("%s: scenario %q: letter %q has no description", file, s.Key, s.Letter)
		}
	}
	for _, rn := range r.Runs {
		if rn.Stats == nil || r.scenario(rn.Key) == nil {
			return fmt.Errorf("%s: a run of %q without stats or scenario", file, rn.Key)
		}
	}
	md, err := renderPage(&r)
	if err != nil {
		return err
	}
	if page == "" {
		_, err = fmt.Print(md)
		return err
	}
	return os.WriteFile(page, []byte(md), 0o644)
}

// storeCmp is one scenario on the redis site against the same scenario
// on nokey (the memory store), per round: Caddy CPU µs per request, and
// the closed-loop p50 and p99 in ms, each redis minus nokey.
type storeCmp struct {
	Key, Of       string
	CPU, P50, P99 spread
	// Redis: redis-server's CPU per request, µs, Key's minus Of's; no
	// rounds (N 0, shown "—") when neither side's site talks to it.
	Redis spread
}

// storeComparisons pairs every load scenario of the redis site with its
// letter's scenario on nokey, round by round (issue 21: the Redis store
// against the memory store, in one run).
func (r *results) storeComparisons() []storeCmp {
	var out []storeCmp
	for _, s := range r.Scenarios {
		if s.Site == "redis" && s.Phase == phaseLoad {
			out = r.appendSameRound(out, s.Key, s.Letter+"/nokey")
		}
	}
	return out
}

// credentialComparisons pairs every load scenario of a site with a
// credential policy (site.StaticOf) with its letter's scenario on the
// static twin site, round by round (issue 31: the Caddy CPU of a cached
// exchanged token and of an assertion against static headers, in one
// run). Reported, not judged.
func (r *results) credentialComparisons() []storeCmp {
	var out []storeCmp
	for _, s := range r.Scenarios {
		if st := siteNamed(s.Site); st != nil && st.StaticOf != "" && s.Phase == phaseLoad {
			out = r.appendSameRound(out, s.Key, s.Letter+"/"+st.StaticOf)
		}
	}
	return out
}

// floorKey is the floor scenario: (b) after one Redis round trip.
const floorKey = "bf/floor"

// floorComparisons is the floor against (b), round by round: what one
// Redis round trip adds to a Caddy request on this machine, the least a
// request kind of the redis site that makes one can add (issue 32).
// Reported, not judged.
func (r *results) floorComparisons() []storeCmp {
	return r.appendSameRound(nil, floorKey, "b")
}

// appendSameRound appends key against of, from the rounds that ran
// both (pairsOf): per round, key's Caddy CPU per request, p50 and p99
// minus of's. Nothing is appended when no round ran both.
func (r *results) appendSameRound(out []storeCmp, key, of string) []storeCmp {
	var cpu, p50, p99, rs []float64
	for _, p := range r.pairsOf(key, of) {
		cpu = append(cpu, p[0].CaddyCPU-p[1].CaddyCPU)
		p50 = append(p50, p[0].P50-p[1].P50)
		p99 = append(p99, p[0].P99-p[1].P99)
		rs = append(rs, p[0].RedisCPU-p[1].RedisCPU)
	}
	// redis-server runs through every run; it is this comparison's only
	// when a side's site talks to it.
	redis := false
	for _, k := range []string{key, of} {
		if s := r.scenario(k); s != nil {
			if st := siteNamed(s.Site); st != nil && st.Redis {
				redis = true
			}
		}
	}
	if len(cpu) == 0 {
		return out
	}
	c := storeCmp{Key: key, Of: of, CPU: spreadOf(cpu), P50: spreadOf(p50), P99: spreadOf(p99)}
	if redis {
		c.Redis = spreadOf(rs)
	}
	return append(out, c)
}

// pairsOf gives, for each run of key, that run's stats and of's in the
// same round; rounds without of are left out. Against (b), which runs
// before and after every scenario, of's stats are the run's own
// reference (run.Ref: the mean of the (b) runs around it).
func (r *results) pairsOf(key, of string) [][2]*stats {
	same := map[int]*stats{}
	if of != "b" {
		for _, rn := range r.runsOf(of) {
			same[rn.Round] = rn.Stats
		}
	}
	var pairs [][2]*stats
	for _, rn := range r.runsOf(key) {
		o, ok := same[rn.Round]
		if of == "b" {
			o, ok = rn.Ref, rn.Ref != nil
		}
		if ok {
			pairs = append(pairs, [2]*stats{rn.Stats, o})
		}
	}
	return pairs
}
