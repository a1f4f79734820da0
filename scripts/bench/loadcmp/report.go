package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func b64url(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

type runResult struct {
	Round int    `json:"round"`
	Stats *stats `json:"stats"`
	// Ref is the mean of the (b) runs just before and after this one
	// (nil for (b) itself and for (e)).
	Ref *stats `json:"b_ref,omitempty"`
}

type results struct {
	Meta    map[string]any          `json:"meta"`
	Runs    map[string][]*runResult `json:"runs"` // "phase|key" → one per round
	Summary map[string]*summary     `json:"summary"`
	Targets []*verdict              `json:"targets"`
}

type summary struct {
	Key, Letter, Variant, Label string
	Want                        int
	// Throughput phase (medians over rounds).
	Tput, TP50, TP99 float64
	RatioB, RatioA   spread  // per-round throughput ratios
	CPU              float64 // Caddy CPU µs per request (throughput phase)
	CPUAddB          spread  // per-round CPU difference to (b), µs
	// Fixed-rate phase.
	Rate             int
	FP50, FP99       float64
	AddP50B, AddP99B spread // per-round latency differences to (b), ms
	// Pooled: the percentile over every request of the scenario's
	// fixed-rate runs (all rounds) minus the same percentile over every
	// request of the (b) runs around them, ms. A per-round p99 of 2,000
	// requests rests on its 20 slowest; the pooled one on 4 × as many.
	PoolP50B, PoolP99B float64
	PoolN, PoolRefN    int // requests in the two pools
	Rounds             int
}

// spread is the median of per-round values with their range.
type spread struct {
	Med, Lo, Hi float64
	N           int
}

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return spread{Med: median(s), Lo: s[0], Hi: s[len(s)-1], N: len(s)}
}

func median(s []float64) float64 {
	if len(s) == 0 {
		return 0
	}
	s = append([]float64(nil), s...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (r *results) add(phase string, s *scenario, round int, st, ref *stats) {
	k := phase + "|" + s.Key
	r.Runs[k] = append(r.Runs[k], &runResult{Round: round, Stats: st, Ref: ref})
}

// byRound returns f of each round's run of (phase, key) (the last one of
// the round for (b), which runs several times a round; use all for it).
func (r *results) byRound(phase, key string, f func(*stats) float64) map[int]float64 {
	out := map[int]float64{}
	for _, rr := range r.Runs[phase+"|"+key] {
		out[rr.Round] = f(rr.Stats)
	}
	return out
}

// all returns f of every run of (phase, key).
func (r *results) all(phase, key string, f func(*stats) float64) []float64 {
	var out []float64
	for _, rr := range r.Runs[phase+"|"+key] {
		out = append(out, f(rr.Stats))
	}
	return out
}

// pooled returns the latencies of every run of (phase, key), and those
// of the (b) runs around them, each pooled over all rounds and sorted.
func (r *results) pooled(phase, key string) (own, ref []int64) {
	var o, f [][]int64
	for _, rr := range r.Runs[phase+"|"+key] {
		if rr.Ref == nil {
			continue
		}
		o, f = append(o, rr.Stats.lats), append(f, rr.Ref.lats)
	}
	return pool(o...), pool(f...)
}

// vsRef returns, per round, f(run, its (b) reference) for (phase, key).
func (r *results) vsRef(phase, key string, f func(s, ref *stats) float64) map[int]float64 {
	out := map[int]float64{}
	for _, rr := range r.Runs[phase+"|"+key] {
		if rr.Ref != nil {
			out[rr.Round] = f(rr.Stats, rr.Ref)
		}
	}
	return out
}

func tputRatio(s, ref *stats) float64 { return s.Tput / ref.Tput }
func p50Diff(s, ref *stats) float64   { return s.P50 - ref.P50 }
func p99Diff(s, ref *stats) float64   { return s.P99 - ref.P99 }
func cpuDiff(s, ref *stats) float64   { return s.CaddyCPU - ref.CaddyCPU }

func vals(m map[int]float64) []float64 {
	var out []float64
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// pairwise combines two per-round series round by round.
func pairwise(x, y map[int]float64, f func(a, b float64) float64) []float64 {
	var out []float64
	for r, a := range x {
		if b, ok := y[r]; ok && b != 0 {
			out = append(out, f(a, b))
		}
	}
	return out
}

func ratio(a, b float64) float64 { return a / b }

func tputOf(s *stats) float64 { return s.Tput }
func p50Of(s *stats) float64  { return s.P50 }
func p99Of(s *stats) float64  { return s.P99 }
func cpuOf(s *stats) float64  { return s.CaddyCPU }

type verdict struct {
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	Limit    float64 `json:"limit"`
	Met      bool    `json:"met"`
	// Reference marks a comparison the project's performance targets
	// (issue 7 in its tracker) set no limit for (the Ed25519 variants of
	// (f) and (g)): reported, not judged.
	Reference bool `json:"reference,omitempty"`
}

func (r *results) summarize(scens []*scenario) {
	r.Summary = map[string]*summary{}
	aRatio := r.vsRef("tput", "a", tputRatio) // a/b per round
	for _, s := range scens {
		sm := &summary{Key: s.Key, Letter: s.Letter, Variant: s.Variant, Label: s.Label, Want: s.Want, Rate: s.Rate}
		if t := r.all("tput", s.Key, tputOf); len(t) > 0 {
			sm.Rounds = len(r.byRound("tput", s.Key, tputOf))
			sm.Tput = median(t)
			sm.TP50 = median(r.all("tput", s.Key, p50Of))
			sm.TP99 = median(r.all("tput", s.Key, p99Of))
			if s.Key == "b" {
				sm.RatioB = spread{Med: 1, Lo: 1, Hi: 1, N: 1}
				sm.RatioA = spreadOf(pairwise(map[int]float64{0: 1}, map[int]float64{0: median(vals(aRatio))}, ratio))
				sm.CPU = median(r.all("tput", "b", cpuOf))
				sm.CPUAddB = spread{N: 1}
			} else {
				rb := r.vsRef("tput", s.Key, tputRatio)
				sm.RatioB = spreadOf(vals(rb))
				// ×(a) = (s/b)/(a/b), both against their own adjacent (b).
				sm.RatioA = spreadOf(pairwise(rb, aRatio, ratio))
				if s.Letter != "a" {
					sm.CPU = median(r.all("tput", s.Key, cpuOf))
					sm.CPUAddB = spreadOf(vals(r.vsRef("tput", s.Key, cpuDiff)))
				}
			}
		}
		if f50 := r.all("fixed", s.Key, p50Of); len(f50) > 0 {
			sm.FP50, sm.FP99 = median(f50), median(r.all("fixed", s.Key, p99Of))
			if s.Key == "b" {
				sm.AddP50B, sm.AddP99B = spread{N: 1}, spread{N: 1}
			} else {
				sm.AddP50B = spreadOf(vals(r.vsRef("fixed", s.Key, p50Diff)))
				sm.AddP99B = spreadOf(vals(r.vsRef("fixed", s.Key, p99Diff)))
				own, ref := r.pooled("fixed", s.Key)
				if len(own) > 0 && len(ref) > 0 {
					sm.PoolN, sm.PoolRefN = len(own), len(ref)
					sm.PoolP50B = percentile(own, 0.50) - percentile(ref, 0.50)
					sm.PoolP99B = percentile(own, 0.99) - percentile(ref, 0.99)
				}
			}
		}
		r.Summary[s.Key] = sm
	}
	r.Targets = nil
	atLeast := func(target, measured string, sp spread, limit float64) *verdict {
		if sp.N == 0 {
			return nil
		}
		v := &verdict{Target: target, Measured: measured + fmt.Sprintf(" (rounds %.2f–%.2f)", sp.Lo, sp.Hi), Value: sp.Med, Limit: limit, Met: sp.Med >= limit}
		r.Targets = append(r.Targets, v)
		return v
	}
	atMost := func(target, measured string, sp spread, limit float64) {
		if sp.N == 0 {
			return
		}
		r.Targets = append(r.Targets, &verdict{Target: target, Measured: measured + fmt.Sprintf(" (rounds %.2f–%.2f)", sp.Lo, sp.Hi), Value: sp.Med, Limit: limit, Met: sp.Med <= limit})
	}
	get := func(k string) *summary {
		if s, ok := r.Summary[k]; ok {
			return s
		}
		return &summary{}
	}
	// wire notes, on a throughput target, the ×(b) of its reference row,
	// which sends static values of the same sizes with no gateway work:
	// (bh), a plain reverse_proxy adding (c)'s response headers to (b)'s
	// GET; (bd), bench_exchange serving (d)'s whole exchange.
	wire := func(t *verdict, ref, what string) {
		sp := get(ref).RatioB
		if t == nil || sp.N == 0 {
			return
		}
		t.Measured += fmt.Sprintf("; (%s), %s with static values and no gateway work: %.2f (rounds %.2f–%.2f)", ref, what, sp.Med, sp.Lo, sp.Hi)
	}
	const (
		bhWhat = "(c)'s AGTP response headers through a plain reverse_proxy"
		bdWhat = "(d)'s whole exchange"
	)
	wire(atLeast("(c) no key: throughput ≥ 0.85×(b)", "median per-round ratio", get("c/nokey").RatioB, 0.85), "bh", bhWhat)
	wire(atLeast("(d) no key: throughput ≥ 0.85×(b)", "median per-round ratio", get("d/nokey").RatioB, 0.85), "bd", bdWhat)
	p99Added := func(key string) {
		sm := get(key)
		if sm.PoolN == 0 {
			return
		}
		r.Targets = append(r.Targets, &verdict{
			Target: fmt.Sprintf("(%s) no key: p99 added over (b) ≤ 1 ms at %d req/s", sm.Letter, get("b").Rate),
			Measured: fmt.Sprintf("p99 of all %d requests of its runs minus p99 of the %d requests of the (b) runs around them, ms (per round: median %.2f, range %.2f–%.2f)",
				sm.PoolN, sm.PoolRefN, sm.AddP99B.Med, sm.AddP99B.Lo, sm.AddP99B.Hi),
			Value: sm.PoolP99B, Limit: 1, Met: sm.PoolP99B <= 1})
	}
	p99Added("c/nokey")
	p99Added("d/nokey")
	atLeast("(c) Ed25519: throughput ≥ 0.7×(b)", "median per-round ratio", get("c/ed25519").RatioB, 0.7)
	// No reference note here: (bd) carries the unsigned exchange of
	// d/nokey, not the EdDSA record of d/ed25519.
	atLeast("(d) Ed25519: throughput ≥ 0.7×(b)", "median per-round ratio", get("d/ed25519").RatioB, 0.7)
	for _, v := range []string{vNoKey, vEd25519} {
		e1 := r.byRound("fixed", "e1/"+v, p50Of)
		e3 := r.byRound("fixed", "e3/"+v, p50Of)
		atMost(fmt.Sprintf("(e) %s: p50 of three parallel 20 ms steps ≤ 1.15× p50 of one", v), "median per-round p50 ratio", spreadOf(pairwise(e3, e1, ratio)), 1.15)
	}
	atLeast("(f) no key: throughput ≥ 1.0×(b)", "median per-round ratio", get("f/nokey").RatioB, 1.0)
	if v := atLeast("(f) Ed25519: throughput ≥ 1.0×(b)", "median per-round ratio", get("f/ed25519").RatioB, 1.0); v != nil {
		v.Reference = true
	}
	for _, v := range []string{vNoKey, vEd25519} {
		// (g/b)/(d/b), each against its own adjacent (b) runs.
		g := r.vsRef("tput", "g/"+v, tputRatio)
		dd := r.vsRef("tput", "d/"+v, tputRatio)
		t := atLeast(fmt.Sprintf("(g) %s: throughput ≥ 0.7×(d) %s", v, v), "median per-round ratio", spreadOf(pairwise(g, dd, ratio)), 0.7)
		if v == vEd25519 && t != nil {
			t.Reference = true
		}
	}
}

func (r *results) write(dir string, scens []*scenario) error {
	r.summarize(scens)
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), raw, 0o644); err != nil {
		return err
	}
	md := r.markdown(scens)
	fmt.Print("\n" + md)
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644)
}

func f1(v float64) string { return fmt.Sprintf("%.0f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

func sp2(s spread) string {
	if s.N == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Med, s.Lo, s.Hi)
}

func sp0(s spread) string {
	if s.N == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", s.Med, s.Lo, s.Hi)
}

func (r *results) markdown(scens []*scenario) string {
	var b strings.Builder
	m := r.Meta
	fmt.Fprintf(&b, "Machine: %v CPUs (%v), %v; %v; %v; vegeta %v. Load average at start: %v.\n\n",
		m["nproc"], m["cpu_model"], m["kernel"], m["go"], m["caddy"], m["vegeta"], m["loadavg"])
	fmt.Fprintf(&b, "%v rounds; each round runs every scenario once in an order rotated per round, with a (b) run before the first and after each one (not after (e1) and (e3), compared with each other). "+
		"Throughput: closed loop, %v requests in flight, %vs per run. Fixed rate: %v req/s for %vs ((e): %v req/s for %vs). "+
		"Absolute values are medians over all runs; ×(b), − (b) are medians over rounds of each run against the mean of the two (b) runs around it "+
		"(range over rounds in parentheses); ×(a) is (X/b)/(a/b). p99 − (b) pooled is the p99 over every request of the scenario's fixed-rate runs in all rounds "+
		"minus the p99 over every request of the (b) runs around them; the p99 targets are judged on it. Caddy CPU is the Caddy process's user+system time per request over the run (/proc).\n\n",
		m["rounds"], m["workers"], m["tput_s"], m["rate"], m["fixed_s"], m["slow_rate"], m["slow_s"])
	var foreign []float64
	for _, runs := range r.Runs {
		for _, rr := range runs {
			foreign = append(foreign, rr.Stats.ForeignCores)
		}
	}
	if len(foreign) > 0 {
		sort.Float64s(foreign)
		fmt.Fprintf(&b, "Other work on the machine during the runs (CPU not used by Caddy, the upstream or vegeta): median %.2f cores, 90th percentile %.2f, max %.2f of %v.\n\n",
			median(foreign), foreign[int(0.9*float64(len(foreign)-1))], foreign[len(foreign)-1], m["nproc"])
	}
	b.WriteString("| | scenario | variant | throughput req/s | ×(b) | ×(a) | p50 ms | p99 ms | Caddy CPU µs/req | − (b) µs | fixed rate req/s | p50 ms | p99 ms | p50 − (b) ms | p99 − (b) ms | p99 − (b) pooled ms |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range scens {
		sm := r.Summary[s.Key]
		v := s.Variant
		if v == "" {
			v = "—"
		}
		tput, rb, ra, tp50, tp99, cpu, cpub := "—", "—", "—", "—", "—", "—", "—"
		if sm.Rounds > 0 {
			tput, rb, ra, tp50, tp99 = f1(sm.Tput), sp2(sm.RatioB), sp2(sm.RatioA), f2(sm.TP50), f2(sm.TP99)
			if sm.CPU > 0 {
				cpu, cpub = f1(sm.CPU), sp0(sm.CPUAddB)
			}
		}
		rate, fp50, fp99, a50, a99, p99 := "—", "—", "—", "—", "—", "—"
		if sm.FP50 > 0 {
			rate, fp50, fp99, a50, a99 = itoa(s.Rate), f2(sm.FP50), f2(sm.FP99), sp2(sm.AddP50B), sp2(sm.AddP99B)
			if s.Letter == "e1" || s.Letter == "e3" {
				a50, a99 = "—", "—"
			}
			if s.Key == "b" {
				p99 = "0.00"
			} else if sm.PoolN > 0 {
				p99 = f2(sm.PoolP99B)
			}
		}
		fmt.Fprintf(&b, "| %s | %s (%d) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Letter, s.Label, s.Want, v, tput, rb, ra, tp50, tp99, cpu, cpub, rate, fp50, fp99, a50, a99, p99)
	}
	r.unexpected(&b, scens)
	r.shortRuns(&b, scens)
	r.machineTime(&b, scens)
	if len(r.Targets) == 0 {
		b.WriteString("\nNone of the project's performance targets (issue 7 in its tracker) applies to the scenarios of this run (the targets need c/nokey, d/nokey, c/ed25519, d/ed25519, e1 with e3, f, and g with d).\n")
		return b.String()
	}
	b.WriteString("\nThe project's performance targets (issue 7 in its tracker), judged on this run: throughput against (b) (for (g), against (d)), p99 latency added over (b), and (e)'s three parallel steps against one.\n")
	b.WriteString("\n| target | measured | value | limit | verdict |\n|---|---|---:|---:|---|\n")
	for _, t := range r.Targets {
		verdict := "met"
		switch {
		case t.Reference && t.Met:
			verdict = "reference only (the targets set this limit for the no-key variant only); would be met"
		case t.Reference:
			verdict = fmt.Sprintf("reference only (the targets set this limit for the no-key variant only); %s below", gap(t.Limit-t.Value))
		case !t.Met:
			verdict = fmt.Sprintf("**not met** (misses the limit by %s)", gap(t.Limit-t.Value))
		}
		value := fmt.Sprintf("%.2f", t.Value)
		if d := math.Abs(t.Limit - t.Value); d > 0 && d < 0.005 {
			value = fmt.Sprintf("%.3f", t.Value) // two decimals would print the limit itself
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s |\n", t.Target, t.Measured, value, t.Limit, verdict)
	}
	return b.String()
}

// gap renders how far a value misses its limit: two decimals, as the
// table prints values, and "less than 0.01" when those would show 0.00
// (a verdict must never read "misses by 0.00").
func gap(d float64) string {
	if d = math.Abs(d); d < 0.005 {
		return "less than 0.01"
	}
	return fmt.Sprintf("%.2f", d)
}

// machineTime writes where each throughput scenario's machine time per
// request went: the two cores' time per answered request (CPUs ÷
// throughput), split into Caddy, the upstream, vegeta, other work and
// idle, each the median over the scenario's runs, in µs. The parts are
// medians of different runs' values, so they need not add up exactly.
func (r *results) machineTime(b *strings.Builder, scens []*scenario) {
	ncpu, _ := r.Meta["nproc"].(int)
	if ncpu == 0 {
		if f, ok := r.Meta["nproc"].(float64); ok {
			ncpu = int(f)
		}
	}
	if ncpu == 0 {
		return
	}
	per := func(key string, f func(s *stats) float64) float64 { return median(r.all("tput", key, f)) }
	var rows []string
	for _, s := range scens {
		if len(r.Runs["tput|"+s.Key]) == 0 || s.Letter == "a" {
			continue
		}
		total := per(s.Key, func(st *stats) float64 {
			if st.Tput <= 0 {
				return 0
			}
			return float64(ncpu) / st.Tput * 1e6
		})
		perReq := func(cores func(st *stats) float64) float64 {
			return per(s.Key, func(st *stats) float64 {
				if st.Tput <= 0 {
					return 0
				}
				return cores(st) / st.Tput * 1e6
			})
		}
		v := s.Variant
		if v == "" {
			v = "—"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |", s.Letter, v, total,
			per(s.Key, cpuOf), per(s.Key, func(st *stats) float64 { return st.UpstreamCPU }), per(s.Key, func(st *stats) float64 { return st.VegetaCPU }),
			perReq(func(st *stats) float64 { return st.ForeignCores }), perReq(func(st *stats) float64 { return st.IdleCores })))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nMachine time per request in the throughput runs, µs (medians over runs): the %d CPUs' time per answered request (%d ÷ throughput), and where it went.\n\n", ncpu, ncpu)
	b.WriteString("| | variant | machine | Caddy | upstream | vegeta | other work | idle |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	b.WriteString(strings.Join(rows, "\n") + "\n")
}

// unexpected writes, over every run of the report (both phases; not the
// warm-up, the sanity check or the profiles), the requests that did not
// get their scenario's expected status, per scenario: the statuses they
// got instead and, for those with no answer (status 0), vegeta's errors.
// A run fails outright below 99 % expected answers (driver.one), so up
// to 1 % of a run can go wrong without stopping the comparison; this
// says whether any did.
func (r *results) unexpected(b *strings.Builder, scens []*scenario) {
	var rows []string
	for _, s := range scens {
		n, bad := 0, 0
		codes, errs := map[int]int{}, map[string]int{}
		for _, phase := range []string{"tput", "fixed"} {
			for _, rr := range r.Runs[phase+"|"+s.Key] {
				st := rr.Stats
				n += st.Requests
				bad += st.Requests - st.OK
				for c, k := range st.Codes {
					if c != s.Want {
						codes[c] += k
					}
				}
				for e, k := range st.Errors {
					errs[e] += k
				}
			}
		}
		if bad == 0 {
			continue
		}
		var parts []string
		for _, c := range sortedKeys(codes) {
			if c == 0 {
				parts = append(parts, fmt.Sprintf("no answer ×%d", codes[c]))
				continue
			}
			parts = append(parts, fmt.Sprintf("status %d ×%d", c, codes[c]))
		}
		var es []string
		for e := range errs {
			es = append(es, e)
		}
		sort.Strings(es)
		for _, e := range es {
			parts = append(parts, fmt.Sprintf("`%s` ×%d", strings.NewReplacer("|", "\\|", "`", "'", "\n", " ").Replace(e), errs[e]))
		}
		v := s.Variant
		if v == "" {
			v = "—"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %d | %d | %d | %s |", s.Letter, v, s.Want, n, bad, strings.Join(parts, "; ")))
	}
	if len(rows) == 0 {
		b.WriteString("\nEvery request of every run got its expected status.\n")
		return
	}
	b.WriteString("\nRequests that did not get their scenario's expected status, over all runs of this report (a run with more than 1 % of them stops the comparison):\n\n")
	b.WriteString("| | variant | expected | requests | not expected | got instead |\n|---|---|---:|---:|---:|---|\n")
	b.WriteString(strings.Join(rows, "\n") + "\n")
}

func sortedKeys(m map[int]int) []int {
	var k []int
	for c := range m {
		k = append(k, c)
	}
	sort.Ints(k)
	return k
}

// shortRuns says how many fixed-rate runs made fewer requests than
// rate × duration, and why: vegeta v12.13.0's attack loop (lib/attack.go)
// checks -duration only at the top of each iteration, before its
// constant pacer (lib/pacer.go) says when to send the next request, and
// that pacer sends request i (from 1) at i ÷ rate. The last of rate ×
// duration requests is therefore due just when -duration ends; if the
// request before it left more than one interval late, the check that
// follows already finds the duration past and the run ends short.
func (r *results) shortRuns(b *strings.Builder, scens []*scenario) {
	fixedS, slowS := metaFloat(r.Meta["fixed_s"]), metaFloat(r.Meta["slow_s"])
	runs, short, missing, most := 0, 0, 0, 0
	for _, s := range scens {
		dur := fixedS
		if s.Letter == "e1" || s.Letter == "e3" {
			dur = slowS
		}
		if s.Rate <= 0 || dur <= 0 {
			continue
		}
		want := int(math.Ceil(float64(s.Rate) * dur))
		for _, rr := range r.Runs["fixed|"+s.Key] {
			runs++
			if d := want - rr.Stats.Requests; d > 0 {
				short++
				missing += d
				most = max(most, d)
			}
		}
	}
	if short == 0 {
		return
	}
	rate := metaFloat(r.Meta["rate"])
	interval := ""
	if rate > 0 {
		interval = fmt.Sprintf(": %s ms at %.0f req/s", strconv.FormatFloat(1000/rate, 'g', 3, 64), rate)
	}
	fmt.Fprintf(b, "\n%d of the %d fixed-rate runs made fewer requests than rate × duration (%d fewer in all, at most %d in one run), so a pool of runs can hold fewer requests than rate × duration × runs. "+
		"vegeta's constant pacer sends a run's i-th request at i ÷ rate, so the last one is due just as `-duration` ends, and vegeta checks the duration only before pacing each request: "+
		"when a run is behind that schedule as the duration ends (the request before the last sent more than one interval late%s), that check finds the duration past and the run ends without the requests still due.\n",
		short, runs, missing, most, interval)
}

// metaFloat reads a number of results.Meta as the driver sets it (int or
// float64) or as results.json gives it back (float64); 0 otherwise.
func metaFloat(v any) float64 {
	switch n := v.(type) {
	case int:
		return float64(n)
	case float64:
		return n
	}
	return 0
}
