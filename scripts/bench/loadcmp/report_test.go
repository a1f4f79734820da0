package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// fixture builds results over rounds: each load scenario's per-round
// Caddy CPU over a (b) of 100 µs, each slow scenario's per-round p50.
func fixture(over map[string][]float64, p50 map[string][]float64) *results {
	r := &results{Meta: map[string]string{"date": "2026-12-02 10:00 UTC", "source": "commit abc1234", "elapsed": "9m30s",
		"nproc": "2", "cpu": "Test CPU", "kernel": "Linux 6.1", "go": "go1.26.8", "caddy": "v2.11.9", "loadavg": "0.10 0.20 0.30 1/100 7"},
		Options: options{Rounds: 4, Workers: 16, LoadRequests: 40000, SlowRate: 200}}
	b := scenarios()[0]
	r.Scenarios = []*scenario{b}
	for _, s := range scenarios()[1:] {
		if over[s.Key] != nil || p50[s.Key] != nil {
			r.Scenarios = append(r.Scenarios, s)
		}
	}
	for _, s := range r.Scenarios[1:] {
		for round, v := range over[s.Key] {
			ref := &stats{CaddyCPU: 100, Tput: 5000}
			r.add(b, round, &stats{CaddyCPU: 100, Tput: 5000, Requests: 10000, OK: 10000}, nil)
			r.add(s, round, &stats{CaddyCPU: 100 + v, Tput: 5000 * 100 / (100 + v), Requests: 9000, OK: 9000, CPUSource: "schedstat"}, ref)
		}
		for round, v := range p50[s.Key] {
			r.add(s, round, &stats{P50: v, P99: v + 3, Requests: 600, OK: 600}, nil)
		}
	}
	return r
}

func verdictOf(t *testing.T, r *results, key string) verdict {
	t.Helper()
	for _, v := range r.judge() {
		if v.T.Key == key {
			return v
		}
	}
	t.Fatalf("no target on %s", key)
	return verdict{}
}

func TestJudge(t *testing.T) {
	r := fixture(map[string][]float64{
		"c/nokey":   {10, 12, 25, 8},  // median 11 ≤ 15
		"d/nokey":   {20, 22, 18, 30}, // median 21 > 15
		"c/ed25519": {30, 30, 29, 31}, // median 30 = limit: at most, met
		"f/nokey":   {0, -1, 1, 0},    // median 0: not less than (b)
		"f/ed25519": {-20, -25, -18, -30},
	}, map[string][]float64{
		"e1/nokey": {22, 22, 23, 22}, "e3/nokey": {22.5, 22, 27, 23}, // ratios 1.023 1 1.174 1.045: median 1.034
		"e1/ed25519": {20, 20, 20, 20}, "e3/ed25519": {25, 23, 30, 20}, // 1.25 1.15 1.5 1: median 1.2
	})
	for _, tc := range []struct {
		key      string
		med      float64
		met      bool
		verdict  string
		measured bool
	}{
		{"c/nokey", 11, true, "met; 1 of 4 rounds was over the limit", true},
		{"d/nokey", 21, false, "**not met**: 6.0 µs over the limit", true},
		{"c/ed25519", 30, true, "met; 1 of 4 rounds was over the limit", true},
		{"d/ed25519", 0, false, "not measured in this run", false},
		{"f/nokey", 0, false, "**not met**: less than 0.1 µs over the limit; 1 of 4 rounds was within it", true},
		{"f/ed25519", -22.5, true, "met", true},
		{"e3/nokey", (22.5/22 + 23.0/22) / 2, true, "met; 1 of 4 rounds was over the limit", true},
		{"e3/ed25519", 1.2, false, "**not met**: 0.05 over the limit; 2 of 4 rounds were within it", true},
	} {
		v := verdictOf(t, r, tc.key)
		if v.Measured != tc.measured || v.Met != tc.met || v.VerdictText() != tc.verdict {
			t.Errorf("%s: measured %v met %v %q; want %v %v %q", tc.key, v.Measured, v.Met, v.VerdictText(), tc.measured, tc.met, tc.verdict)
		}
		if d := v.Value.Med - tc.med; tc.measured && (d > 1e-9 || d < -1e-9) {
			t.Errorf("%s: median %v, want %v", tc.key, v.Value.Med, tc.med)
		}
	}
	if v := verdictOf(t, r, "d/nokey"); v.ValueText() != "+21.0 µs (rounds +18.0 to +30.0)" || v.LimitText() != "≤ +15 µs" {
		t.Errorf("d/nokey: %q, %q", v.ValueText(), v.LimitText())
	}
	if v := verdictOf(t, r, "f/nokey"); v.LimitText() != "< 0 µs" {
		t.Errorf("f/nokey limit %q, want < 0 µs", v.LimitText())
	}
}

// TestSlowTargetPairsRounds: (e) divides p50s of the same round, so a
// slow round of e1 alone does not make e3 look fast.
func TestSlowTargetPairsRounds(t *testing.T) {
	r := fixture(nil, map[string][]float64{"e1/nokey": {20, 40, 20}, "e3/nokey": {22, 44, 22}})
	if v := verdictOf(t, r, "e3/nokey"); v.Value.Med < 1.0999 || v.Value.Med > 1.1001 || v.Value.Lo < 1.0999 {
		t.Errorf("e3/nokey: %+v, want every round at 1.10", v.Value)
	}
}

func TestSummarize(t *testing.T) {
	r := fixture(map[string][]float64{"c/nokey": {10, 20, 30}}, nil)
	r.Runs[1].Stats.CPUSource = "stat"
	sms := r.summarize()
	if len(sms) != 2 || sms[0].S.Key != "b" || sms[1].S.Key != "c/nokey" {
		t.Fatalf("summaries %v, want b then c/nokey", sms)
	}
	c := sms[1]
	if c.CPU != 120 || c.CPUOverB.Med != 20 || c.CPUOverB.Lo != 10 || c.CPUOverB.Hi != 30 || c.Rounds != 3 || c.StatRuns != 1 {
		t.Errorf("c/nokey summary %+v", c)
	}
	if c.TputB.Med < 0.833 || c.TputB.Med > 0.834 {
		t.Errorf("c/nokey × (b) = %v, want 100/120", c.TputB.Med)
	}
}

func TestModuleFrames(t *testing.T) {
	raw, err := os.ReadFile("testdata/d-nokey.cpu.cum.txt")
	if err != nil {
		t.Fatal(err)
	}
	fr := moduleFrames(string(raw), 200, 3)
	want := []frame{{"caddymodule.(*Handler).ServeHTTP", 55.88}, {"caddymodule.(*Handler).serve", 52.94}, {"caddymodule.(*Handler).present", 50}}
	if len(fr) != len(want) {
		t.Fatalf("frames %v, want %v", fr, want)
	}
	for i := range want {
		if fr[i].Name != want[i].Name || fr[i].US < want[i].US-0.01 || fr[i].US > want[i].US+0.01 {
			t.Errorf("frame %d = %+v, want %+v", i, fr[i], want[i])
		}
	}
	if fr := moduleFrames("no profile here", 200, 3); len(fr) != 0 {
		t.Errorf("frames of nothing: %v", fr)
	}
}

func TestMissBy(t *testing.T) {
	for _, tc := range []struct {
		d    float64
		dec  int
		want string
	}{{6, 1, "6.0"}, {0.04, 1, "less than 0.1"}, {0, 2, "less than 0.01"}, {0.034, 2, "0.03"}} {
		if got := missBy(tc.d, tc.dec); got != tc.want {
			t.Errorf("missBy(%v, %d) = %q, want %q", tc.d, tc.dec, got, tc.want)
		}
	}
}

// TestResultsRoundTrip: a results.json renders the same page as the
// run that wrote it.
func TestResultsRoundTrip(t *testing.T) {
	r := fixture(map[string][]float64{"c/nokey": {10, 12, 25, 8}, "d/nokey": {20, 22, 18, 30}}, nil)
	dir := t.TempDir()
	page := dir + "/performance.md"
	if err := writeResults(io.Discard, r, dir, page); err != nil {
		t.Fatal(err)
	}
	again := dir + "/again.md"
	if err := renderFile(dir+"/results.json", again); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(page)
	b, _ := os.ReadFile(again)
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("the page rendered from results.json differs from the run's")
	}
	if err := os.WriteFile(dir+"/bad.json", []byte(`{"scenarios":[],"runs":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := renderFile(dir+"/bad.json", ""); err == nil || !strings.Contains(err.Error(), "no scenarios") {
		t.Errorf("empty results: err = %v", err)
	}
}

// TestJudgeVs: a kindVs target compares Key's Caddy CPU with Of's in
// the same round, not with (b).
func TestJudgeVs(t *testing.T) {
	r := fixture(map[string][]float64{"d/nokey": {20, 22, 18}, "d/agtp": {19, 21, 17}}, nil)
	v := verdictOf(t, r, "d/agtp")
	if !v.Met || v.Value.Med != -1 {
		t.Errorf("d/agtp 1 µs under d/nokey each round: %+v", v)
	}
	r = fixture(map[string][]float64{"d/nokey": {20, 22, 18}, "d/agtp": {24, 26, 22}}, nil)
	if v := verdictOf(t, r, "d/agtp"); v.Met || v.Value.Med != 4 || v.VerdictText() != "**not met**: 4.0 µs over the limit" {
		t.Errorf("d/agtp 4 µs over d/nokey: %+v %q", v, v.VerdictText())
	}
	r = fixture(map[string][]float64{"d/agtp": {25, 26, 24}}, nil)
	if v := verdictOf(t, r, "d/agtp"); v.Measured {
		t.Errorf("without d/nokey the comparison is not measured: %+v", v)
	}
}

// TestJudgeRatio: the MCP door's target is the median over rounds of
// cm/mcp's Caddy CPU per request divided by c/mcp's in the same round.
func TestJudgeRatio(t *testing.T) {
	r := fixture(map[string][]float64{"c/mcp": {0, 0, 0}, "cm/mcp": {80, 100, 120}}, nil) // 180/100 200/100 220/100
	v := verdictOf(t, r, "cm/mcp")
	if !v.Met || v.Value.Med != 2 || v.ValueText() != "2.00 (rounds 1.80 to 2.20)" || v.LimitText() != "≤ 2.00 × c/mcp" {
		t.Errorf("cm/mcp at 2 × c/mcp: %+v %q %q", v, v.ValueText(), v.LimitText())
	}
	r = fixture(map[string][]float64{"c/mcp": {0, 0, 0}, "cm/mcp": {150, 150, 150}}, nil)
	if v := verdictOf(t, r, "cm/mcp"); v.Met || v.VerdictText() != "**not met**: 0.50 over the limit" {
		t.Errorf("cm/mcp at 2.5 × c/mcp: %+v %q", v, v.VerdictText())
	}
	r = fixture(map[string][]float64{"cm/mcp": {80, 100, 120}}, nil)
	if v := verdictOf(t, r, "cm/mcp"); v.Measured {
		t.Errorf("without c/mcp the ratio is not measured: %+v", v)
	}
}

// verdictKind is the verdict of the target on key of kind k.
func verdictKind(t *testing.T, r *results, key string, k targetKind) verdict {
	t.Helper()
	for _, v := range r.judge() {
		if v.T.Key == key && v.T.Kind == k {
			return v
		}
	}
	t.Fatalf("no %s target on %s", k, key)
	return verdict{}
}

// TestJudgeStore: the Redis store's targets (issue 32) compare each
// kind on the redis site with the same kind on nokey in the same round:
// Caddy CPU at most 20 µs more, closed-loop p50 at most 0.3 ms more.
func TestJudgeStore(t *testing.T) {
	r := fixture(map[string][]float64{"d/nokey": {20, 22, 18}, "d/redis": {35, 45, 36}}, nil) // +15 +23 +18: median 18
	p50 := map[string][]float64{"d/nokey": {2.0, 2.1, 1.9}, "d/redis": {2.2, 2.6, 2.0}}       // +0.2 +0.5 +0.1: median 0.2
	for _, rn := range r.Runs {
		if p := p50[rn.Key]; p != nil {
			rn.Stats.P50 = p[rn.Round]
		}
	}
	cpu := verdictKind(t, r, "d/redis", kindVs)
	if !cpu.Met || cpu.Value.Med != 18 || cpu.LimitText() != "≤ +20 µs over d/nokey" {
		t.Errorf("d/redis CPU 18 µs over d/nokey: %+v %q", cpu, cpu.LimitText())
	}
	lat := verdictKind(t, r, "d/redis", kindP50Vs)
	if !lat.Met || lat.Value.Med < 0.199 || lat.Value.Med > 0.201 || lat.ValueText() != "+0.20 ms (rounds +0.10 to +0.50)" || lat.LimitText() != "≤ +0.3 ms over d/nokey" {
		t.Errorf("d/redis p50 0.2 ms over d/nokey: %+v %q %q", lat, lat.ValueText(), lat.LimitText())
	}
	for _, rn := range r.Runs {
		if rn.Key == "d/redis" {
			rn.Stats.P50 += 0.5
		}
	}
	if lat := verdictKind(t, r, "d/redis", kindP50Vs); lat.Met || lat.VerdictText() != "**not met**: 0.40 ms over the limit" {
		t.Errorf("d/redis p50 0.7 ms over d/nokey: %+v %q", lat, lat.VerdictText())
	}
	if v := verdictKind(t, r, "g/redis", kindP50Vs); v.Measured {
		t.Errorf("g/redis without runs is not measured: %+v", v)
	}
}

// TestDiffCosts: a compared breakdown lists the store's, go-redis's and
// the runtime's functions that grew most from one profile to the
// other, a store or go-redis function missing from one counting 0
// there, a runtime total missing from one left out, largest growth
// first, at most n.
func TestDiffCosts(t *testing.T) {
	key := []frame{{"caddymodule.(*Handler).ServeHTTP", 120}, {"caddymodule/store/redisstore.presenter.Present", 60}, {"runtime.mallocgc", 20},
		{"github.com/redis/go-redis/v9.(*baseClient)._process", 30}, {"runtime.gcBgMarkWorker", 200}}
	of := []frame{{"caddymodule.(*Handler).ServeHTTP", 80}, {"caddymodule/store.memPresenter.Present", 5}, {"runtime.mallocgc", 15}}
	got := diffCosts(key, of, 3)
	want := []costDiff{ // the handler, a caller of all of them, is not shown
		{"caddymodule/store/redisstore.presenter.Present", 60, 0, 60},
		{"github.com/redis/go-redis/v9.(*baseClient)._process", 30, 0, 30},
		{"runtime.mallocgc", 20, 15, 5},
	}
	if len(got) != len(want) {
		t.Fatalf("diffs %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("diff %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	top := "      flat  flat%   sum%        cum   cum%\n" +
		"     0.10s  1.00%  1.00%      5.00s 50.00%  github.com/caddy-rcns/caddy-rcns/caddymodule.(*Handler).ServeHTTP\n" +
		"     0.10s  1.00%  2.00%      2.00s 20.00%  github.com/redis/go-redis/v9.(*baseClient)._process\n" +
		"     0.10s  1.00%  3.00%      1.00s 10.00%  internal/runtime/syscall/linux.Syscall6\n" +
		"     0.10s  1.00%  4.00%      1.00s 10.00%  net/http.(*conn).serve\n"
	fr := costFrames(top, 200)
	if len(fr) != 3 || fr[0] != (frame{"caddymodule.(*Handler).ServeHTTP", 100}) || fr[1].Name != "github.com/redis/go-redis/v9.(*baseClient)._process" || fr[2].US != 20 {
		t.Errorf("cost frames %+v", fr)
	}
}
