package main

import (
	"net/http"
	"strings"
	"testing"
)

// ms returns n latencies of v milliseconds, in ns.
func ms(n int, v float64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(v * 1e6)
	}
	return out
}

func TestPercentileAndPool(t *testing.T) {
	l := pool(append(ms(98, 1), ms(2, 9)...), nil)
	if got := percentile(l, 0.50); got != 1 {
		t.Errorf("p50 = %v, want 1", got)
	}
	if got := percentile(l, 0.98); got != 1 {
		t.Errorf("p98 = %v, want 1 (nearest rank: the 98th of 100)", got)
	}
	if got := percentile(l, 0.99); got != 9 {
		t.Errorf("p99 = %v, want 9", got)
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
	p := pool([]int64{1, 5, 9}, []int64{2, 3}, nil, []int64{4})
	if want := []int64{1, 2, 3, 4, 5, 9}; len(p) != len(want) {
		t.Fatalf("pool = %v, want %v", p, want)
	} else {
		for i := range want {
			if p[i] != want[i] {
				t.Fatalf("pool = %v, want %v", p, want)
			}
		}
	}
}

// The p99 targets are judged on the pooled difference: one round whose
// scenario run caught a stall moves the per-round median, but not the
// p99 over all rounds' requests when that stall is under 1 % of them.
func TestPooledP99Target(t *testing.T) {
	r := &results{Meta: map[string]any{}, Runs: map[string][]*runResult{}}
	b := &scenario{Key: "b", Letter: "b", Rate: 1000}
	d := &scenario{Key: "d/nokey", Letter: "d", Variant: vNoKey, Rate: 1000}
	for round := range 4 {
		prev := &stats{lats: ms(1000, 1), P50: 1, P99: 1}
		next := &stats{lats: ms(1000, 1), P50: 1, P99: 1}
		// Each run: 1000 requests at 1.2 ms; rounds 0 and 1 also have
		// 15 requests at 30 ms (1.5 % of the run, 0.75 % of the pool).
		l := ms(1000, 1.2)
		if round < 2 {
			copy(l[985:], ms(15, 30))
		}
		l = pool(l)
		st := &stats{lats: l, P50: percentile(l, 0.5), P99: percentile(l, 0.99)}
		r.add("fixed", b, round, prev, nil)
		r.add("fixed", d, round, st, meanStats(prev, next))
	}
	r.summarize([]*scenario{b, d})
	sm := r.Summary["d/nokey"]
	if sm.PoolN != 4000 || sm.PoolRefN != 8000 {
		t.Fatalf("pools of %d and %d requests, want 4000 and 8000", sm.PoolN, sm.PoolRefN)
	}
	if got := sm.PoolP99B; got < 0.19 || got > 0.21 {
		t.Errorf("pooled p99 added = %v ms, want 0.2", got)
	}
	if got := sm.AddP99B; got.Lo > 0.21 || got.Hi < 28 {
		t.Errorf("per-round p99 added = %+v, want from 0.2 to 29", got)
	}
	var v *verdict
	for _, tv := range r.Targets {
		if strings.HasPrefix(tv.Target, "(d) no key: p99 added") {
			v = tv
		}
	}
	if v == nil {
		t.Fatalf("no (d) p99 verdict in %+v", r.Targets)
	}
	if !v.Met || v.Value != sm.PoolP99B || !strings.Contains(v.Measured, "4000 requests") {
		t.Errorf("verdict %+v, want met on the pooled value over 4000 requests", v)
	}
	if md := r.markdown([]*scenario{b, d}); !strings.Contains(md, "| 0.20 |") {
		t.Errorf("report does not show the pooled difference 0.20:\n%s", md)
	}
}

// TestVerdictNearTheLimit: a value that misses its limit by less than
// what two decimals show is printed with three, and its verdict does not
// read "misses the limit by 0.00" (a row read "0.70 | 0.70 | not met").
func TestVerdictNearTheLimit(t *testing.T) {
	r := &results{Meta: map[string]any{}, Targets: []*verdict{
		{Target: "x", Measured: "m", Value: 0.6981, Limit: 0.7, Met: false},
		{Target: "y", Measured: "m", Value: 0.64, Limit: 0.7, Met: false},
	}}
	md := r.markdown(nil)
	if !strings.Contains(md, "| 0.698 | 0.70 | **not met** (misses the limit by less than 0.01) |") ||
		!strings.Contains(md, "| 0.64 | 0.70 | **not met** (misses the limit by 0.06) |") || strings.Contains(md, "by 0.00") {
		t.Errorf("targets table:\n%s", md)
	}
}

// TestWireReferenceNote: the (d) throughput targets quote (bd), and the
// (c) target (bh); with (d) not run (-only c,bd), no other target takes
// (bd)'s note.
func TestWireReferenceNote(t *testing.T) {
	tput := func(keys ...string) *results {
		r := &results{Meta: map[string]any{}, Runs: map[string][]*runResult{}}
		b := &scenario{Key: "b", Letter: "b"}
		ratio := map[string]float64{"c/nokey": 0.9, "d/nokey": 0.75, "d/ed25519": 0.65, "bh": 0.88, "bd": 0.74}
		for round := range 3 {
			ref := &stats{Tput: 1000}
			r.add("tput", b, round, ref, nil)
			for _, k := range keys {
				letter, variant, _ := strings.Cut(k, "/")
				r.add("tput", &scenario{Key: k, Letter: letter, Variant: variant}, round, &stats{Tput: 1000 * ratio[k]}, ref)
			}
		}
		var scens []*scenario
		for _, k := range append([]string{"b"}, keys...) {
			letter, variant, _ := strings.Cut(k, "/")
			scens = append(scens, &scenario{Key: k, Letter: letter, Variant: variant})
		}
		r.summarize(scens)
		return r
	}
	find := func(r *results, prefix string) *verdict {
		for _, v := range r.Targets {
			if strings.HasPrefix(v.Target, prefix) {
				return v
			}
		}
		return nil
	}
	r := tput("c/nokey", "d/nokey", "d/ed25519", "bh", "bd")
	for prefix, want := range map[string]string{
		"(c) no key: throughput": "(bh), (c)'s AGTP response headers through a plain reverse_proxy with static values and no gateway work: 0.88 (rounds 0.88–0.88)",
		"(d) no key: throughput": "(bd), (d)'s whole exchange with static values and no gateway work: 0.74 (rounds 0.74–0.74)",
	} {
		if v := find(r, prefix); v == nil || !strings.Contains(v.Measured, want) {
			t.Errorf("%s: %+v, want its measured text to contain %q", prefix, v, want)
		}
	}
	if v := find(r, "(d) Ed25519: throughput"); v == nil || strings.Contains(v.Measured, "(bd)") {
		t.Errorf("(d) Ed25519: %+v, want a verdict without (bd)'s note ((bd) is the unsigned exchange)", v)
	}
	r = tput("c/nokey", "bd")
	if v := find(r, "(c) no key: throughput"); v == nil || strings.Contains(v.Measured, "(bd)") || strings.Contains(v.Measured, "(bh)") {
		t.Errorf("(c) without (bh) run: %+v, want no reference note", v)
	}
	if v := find(r, "(d) no key: throughput"); v != nil {
		t.Errorf("(d) not run, yet a verdict: %+v", v)
	}
}

// TestReferenceSizes: a reference row whose static response headers
// drifted more than 10% from the answer it imitates stops the run
// before any measurement; within 10%, or with either side not run, it
// passes.
func TestReferenceSizes(t *testing.T) {
	h := http.Header{"Date": {"Mon, 30 Nov 2026 07:04:28 GMT"}, "Agent-Id": {"abc"}}
	if got, want := headerBytes(h), len("Agent-Id")+len("abc")+4; got != want {
		t.Errorf("headerBytes = %d, want %d (Date excluded)", got, want)
	}
	for _, tc := range []struct {
		sizes map[string]int
		ok    bool
	}{
		{map[string]int{"bh": 1000, "c/nokey": 1050, "bd": 1300, "d/nokey": 1250}, true},
		{map[string]int{"bd": 1300}, true},
		{map[string]int{"bh": 700, "c/nokey": 1050}, false},
		{map[string]int{"bd": 1500, "d/nokey": 1250}, false},
	} {
		err := checkReferenceSizes(tc.sizes)
		if (err == nil) != tc.ok {
			t.Errorf("%v: err = %v, want ok %v", tc.sizes, err, tc.ok)
		}
	}
}

// TestSummarizeWithoutTargets: a run of scenarios no target judges
// (-only bh, bd, b2, e1/nokey, g/nokey…) summarizes and reports
// without a verdict (it crashed with an index out of range, and the
// report was lost).
func TestSummarizeWithoutTargets(t *testing.T) {
	for _, keys := range [][]string{{"bh"}, {"bd"}, {"b2"}, {"g/nokey"}, {"f/ed25519"}, {"g/ed25519"}} {
		r := &results{Meta: map[string]any{}, Runs: map[string][]*runResult{}}
		b := &scenario{Key: "b", Letter: "b"}
		scens := []*scenario{b}
		for round := range 2 {
			ref := &stats{Tput: 1000}
			r.add("tput", b, round, ref, nil)
			for _, k := range keys {
				letter, variant, _ := strings.Cut(k, "/")
				s := &scenario{Key: k, Letter: letter, Variant: variant}
				if round == 0 {
					scens = append(scens, s)
				}
				r.add("tput", s, round, &stats{Tput: 900}, ref)
			}
		}
		r.summarize(scens)
		md := r.markdown(scens)
		if judged := len(r.Targets) > 0; judged != strings.Contains(md, "| target |") || !judged && !strings.Contains(md, "None of the project's performance targets (issue 7 in its tracker) applies") {
			t.Errorf("-only %v: %d targets, report:\n%s", keys, len(r.Targets), md)
		}
		for _, v := range r.Targets {
			if !v.Reference {
				t.Errorf("-only %v: a judged target %q from scenarios that have none", keys, v.Target)
			}
		}
	}
}

// The machine-time table splits each throughput scenario's CPUs ÷
// throughput into the processes' CPU per request, other work and idle,
// and reads nproc as results.json gives it back (a float64) as well.
func TestMachineTime(t *testing.T) {
	for _, nproc := range []any{2, 2.0} {
		r := &results{Meta: map[string]any{"nproc": nproc}, Runs: map[string][]*runResult{}}
		b := &scenario{Key: "b", Letter: "b"}
		d := &scenario{Key: "d/nokey", Letter: "d", Variant: vNoKey}
		// 8000 req/s on 2 CPUs: 250 µs of machine per request; 0.2 idle
		// cores and 0.04 of other work are 25 and 5 µs of it.
		r.add("tput", b, 0, &stats{Tput: 8000, CaddyCPU: 100, UpstreamCPU: 40, VegetaCPU: 80, IdleCores: 0.2, ForeignCores: 0.04}, nil)
		r.add("tput", d, 0, &stats{Tput: 5000, CaddyCPU: 150, UpstreamCPU: 45, VegetaCPU: 90, IdleCores: 0.3}, nil)
		var sb strings.Builder
		r.machineTime(&sb, []*scenario{b, d})
		out := sb.String()
		for _, want := range []string{
			"the 2 CPUs' time per answered request (2 ÷ throughput)",
			"| b | — | 250 | 100 | 40 | 80 | 5 | 25 |",
			"| d | nokey | 400 | 150 | 45 | 90 | 0 | 60 |",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("nproc %T: machine-time table lacks %q:\n%s", nproc, want, out)
			}
		}
	}
	var sb strings.Builder
	(&results{Meta: map[string]any{}, Runs: map[string][]*runResult{}}).machineTime(&sb, nil)
	if sb.Len() != 0 {
		t.Errorf("no nproc and no runs: want no table, got %q", sb.String())
	}
}

// TestUnexpectedAndShortRuns: the report says, over all runs, which
// requests did not get their scenario's status (and what they got), or
// that every one did; and how many fixed-rate runs made fewer requests
// than rate × duration, with vegeta's reason (a pool read "15999
// requests of the (b) runs" where 16000 were expected, unexplained).
func TestUnexpectedAndShortRuns(t *testing.T) {
	b := &scenario{Key: "b", Letter: "b", Want: 200, Rate: 1000}
	f := &scenario{Key: "f/nokey", Letter: "f", Variant: vNoKey, Want: 464, Rate: 1000}
	e1 := &scenario{Key: "e1/nokey", Letter: "e1", Variant: vNoKey, Want: 200, Rate: 200}
	scens := []*scenario{b, f, e1}
	build := func(bad bool) *results {
		r := &results{Meta: map[string]any{"fixed_s": 2.0, "slow_s": 3, "rate": 1000}, Runs: map[string][]*runResult{}}
		for round := range 2 {
			r.add("tput", b, round, &stats{Requests: 9000, OK: 9000, Codes: map[int]int{200: 9000}}, nil)
			ft := &stats{Requests: 9000, OK: 9000, Codes: map[int]int{464: 9000}}
			if bad && round == 1 {
				ft = &stats{Requests: 9000, OK: 8990, Codes: map[int]int{464: 8990, 502: 7, 0: 3}, Errors: map[string]int{"read: connection reset | peer": 3}}
			}
			r.add("tput", f, round, ft, nil)
			// (b) around the fixed-rate runs: one run of round 0 is one
			// request short; (e1) makes 200 × 3 s.
			nb := 2000
			if round == 0 {
				nb = 1999
			}
			r.add("fixed", b, round, &stats{Requests: nb, OK: nb, Codes: map[int]int{200: nb}}, nil)
			r.add("fixed", b, round, &stats{Requests: 2000, OK: 2000, Codes: map[int]int{200: 2000}}, nil)
			r.add("fixed", e1, round, &stats{Requests: 600, OK: 600, Codes: map[int]int{200: 600}}, nil)
		}
		return r
	}
	var sb strings.Builder
	r := build(true)
	r.unexpected(&sb, scens)
	r.shortRuns(&sb, scens)
	out := sb.String()
	for _, want := range []string{
		"| | variant | expected | requests | not expected | got instead |",
		"| f | nokey | 464 | 18000 | 10 | no answer ×3; status 502 ×7; `read: connection reset \\| peer` ×3 |",
		"1 of the 6 fixed-rate runs made fewer requests than rate × duration (1 fewer in all, at most 1 in one run)",
		"vegeta checks the duration only before pacing each request",
		"more than one interval late: 1 ms at 1000 req/s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| b |") || strings.Contains(out, "Every request") {
		t.Errorf("(b) had no unexpected answer, yet:\n%s", out)
	}

	sb.Reset()
	r = build(false)
	r.Runs["fixed|b"][0].Stats.Requests, r.Runs["fixed|b"][0].Stats.OK = 2000, 2000
	r.summarize(scens)
	md := r.markdown(scens)
	if !strings.Contains(md, "\nEvery request of every run got its expected status.\n") || strings.Contains(md, "fixed-rate runs made fewer") {
		t.Errorf("a clean run, report:\n%s", md)
	}
}

// TestTargetsNamed: the report says once what "the targets" are (a
// reader of docs/performance.md met a bare "issue 7" in the verdicts),
// with a targets table and without one.
func TestTargetsNamed(t *testing.T) {
	const named = "the project's performance targets (issue 7 in its tracker)"
	r := &results{Meta: map[string]any{}, Targets: []*verdict{
		{Target: "x", Measured: "m", Value: 1.03, Limit: 1, Met: true, Reference: true},
		{Target: "y", Measured: "m", Value: 0.64, Limit: 0.7, Met: false, Reference: true},
	}}
	md := r.markdown(nil)
	if strings.Count(strings.ToLower(md), "issue 7") != 1 || !strings.Contains(strings.ToLower(md), named) ||
		!strings.Contains(md, "| reference only (the targets set this limit for the no-key variant only); would be met |") ||
		!strings.Contains(md, "| reference only (the targets set this limit for the no-key variant only); 0.06 below |") {
		t.Errorf("targets table:\n%s", md)
	}
	r = &results{Meta: map[string]any{}, Runs: map[string][]*runResult{}}
	r.summarize(nil)
	if md := r.markdown(nil); strings.Count(strings.ToLower(md), "issue 7") != 1 || !strings.Contains(strings.ToLower(md), named) {
		t.Errorf("no targets:\n%s", md)
	}
}
