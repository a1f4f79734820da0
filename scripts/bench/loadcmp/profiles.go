package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// profiles runs each listed load scenario closed loop, alone, while
// Caddy's admin endpoint records a CPU profile of -profile-seconds, and
// writes the profile and its `go tool pprof -top -cum` text to
// profiles/ in the results dir, with summary.txt holding each one's
// lines of this module's frames: where a scenario's CPU per request
// goes, stage by stage.
func (d *driver) profiles(ctx context.Context, scens []*scenario, keys []string, res *results) error {
	dir := filepath.Join(d.out, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var sum strings.Builder
	sum.WriteString("CPU profiles of the Caddy process, one closed-loop run per scenario (alone, no (b) around it).\n" +
		"flat/cum are CPU seconds of the profile; divide by the run's requests for seconds per request.\n\n")
	for _, k := range keys {
		var s *scenario
		for _, c := range scens {
			if c.Key == k {
				s = c
			}
		}
		if s == nil {
			continue // not in this run (-only)
		}
		name := strings.ReplaceAll(s.Key, "/", "-")
		say("==> profile %s (%ds)", s.Key, d.o.ProfileSecs)
		secs := time.Duration(d.o.ProfileSecs) * time.Second
		done := make(chan error, 1)
		var st *stats
		go func() {
			var err error
			st, err = d.one(ctx, s, "p", secs+time.Second)
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		file := filepath.Join(dir, name+".cpu.pprof")
		perr := d.fetch(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", d.o.ProfileSecs), file, secs+30*time.Second)
		if err := <-done; err != nil {
			return fmt.Errorf("profile run %s: %v", s.Key, err)
		}
		if perr != nil {
			return perr
		}
		top := d.pprofTop(ctx, "-top", "-cum", "-nodecount=400", file)
		_ = os.WriteFile(filepath.Join(dir, name+".cpu.cum.txt"), []byte(top), 0o644)
		fmt.Fprintf(&sum, "== %s: %.0f req/s, Caddy CPU %.1f µs/request over the run\n", s.Key, st.Tput, st.CaddyCPU)
		if res.Profiles == nil {
			res.Profiles = map[string][]frame{}
		}
		res.Profiles[s.Key] = moduleFrames(top, st.CaddyCPU, maxFrames)
		if res.Costs == nil {
			res.Costs = map[string][]frame{}
		}
		res.Costs[s.Key] = costFrames(top, st.CaddyCPU)
		for i, l := range strings.Split(top, "\n") {
			if i < 6 && strings.Contains(l, "Duration") || interesting.MatchString(l) {
				sum.WriteString(l + "\n")
			}
		}
		sum.WriteString("\n")
	}
	return os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(sum.String()), 0o644)
}

// frame is one function of a CPU profile with the CPU per request
// spent in it and what it calls (pprof's cum), µs.
type frame struct {
	Name string  `json:"name"`
	US   float64 `json:"us"`
}

// maxFrames bounds the frames kept per profiled scenario.
const maxFrames = 8

// modulePrefix is this module's import path, with the slash after it.
const modulePrefix = "github.com/caddy-rcns/caddy-rcns/"

// moduleFrames returns the first n of this module's functions in the
// text of `go tool pprof -top -cum` (largest cum first), each with its
// cum share of the profile times cpu, the run's Caddy CPU per request
// in µs. Nested functions overlap: a caller's µs hold its callees'.
func moduleFrames(top string, cpu float64, n int) []frame {
	var out []frame
	for _, l := range strings.Split(top, "\n") {
		f := strings.Fields(l)
		// flat flat% sum% cum cum% name [(inline)]
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") || !strings.HasPrefix(f[5], modulePrefix) {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err != nil {
			continue
		}
		out = append(out, frame{Name: strings.TrimPrefix(f[5], modulePrefix), US: pct / 100 * cpu})
		if len(out) == n {
			break
		}
	}
	return out
}

// costFrame selects the functions costFrames keeps: this module's,
// go-redis's client calls, and the runtime's allocation, GC and
// syscall totals.
var costFrame = regexp.MustCompile(`^(github\.com/caddy-rcns/caddy-rcns/|github\.com/redis/go-redis/v9\.\(\*baseClient\)\.(process|_process|processPipeline)$|github\.com/redis/go-redis/v9\.\(\*Script\)\.Run$|runtime\.mallocgc$|runtime\.gcBgMarkWorker$|internal/runtime/syscall/linux\.Syscall6$)`)

// costFrames returns every function of `go tool pprof -top -cum` text
// that costFrame selects, each with its cum share of the profile times
// cpu (µs per request), largest first.
func costFrames(top string, cpu float64) []frame {
	var out []frame
	for _, l := range strings.Split(top, "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") || !costFrame.MatchString(f[5]) {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err != nil {
			continue
		}
		out = append(out, frame{Name: strings.TrimPrefix(f[5], modulePrefix), US: pct / 100 * cpu})
	}
	return out
}

// stageFrame selects, of costFrames, the functions a compared
// breakdown shows: the store's (caddymodule/store/...), go-redis's
// calls and the runtime's totals. Their callers in the engine and the
// doors grow by the same µs, which says nothing of where they went.
var stageFrame = regexp.MustCompile(`^(caddymodule/store/|github\.com/redis/go-redis/|runtime\.|internal/runtime/)`)

// costDiff is one function's µs per request in two profiles.
type costDiff struct {
	Name          string
	Key, Of, Diff float64
}

// runtimeTotal selects the runtime's totals among stageFrame's: every
// scenario spends them, so one missing from a profile was not sampled
// in its seconds (a GC cycle that did not come, with the memory
// store's large heap), not absent from the scenario.
var runtimeTotal = regexp.MustCompile(`^(runtime\.|internal/runtime/)`)

// diffCosts returns the functions stageFrame selects whose µs per
// request grew most from of to key (at most n, largest growth first):
// where a target judged against another scenario loses its µs, stage
// by stage. A function of the store or go-redis in only one profile
// counts 0 in the other (the memory store has none); a runtime total
// in only one is left out, unknown (helper-63: dk/redis showed GC at
// +202.5 µs against a dk/nokey profile of 4 s that held no GC cycle).
func diffCosts(key, of []frame, n int) []costDiff {
	byName := map[string]*costDiff{}
	seen := map[string]int{} // 1: in key, 2: in of, 3: both
	var order []string
	add := func(fs []frame, isKey bool) {
		for _, f := range fs {
			if !stageFrame.MatchString(f.Name) {
				continue
			}
			d := byName[f.Name]
			if d == nil {
				d = &costDiff{Name: f.Name}
				byName[f.Name] = d
				order = append(order, f.Name)
			}
			if isKey {
				d.Key = f.US
				seen[f.Name] |= 1
			} else {
				d.Of = f.US
				seen[f.Name] |= 2
			}
		}
	}
	add(key, true)
	add(of, false)
	out := make([]costDiff, 0, len(order))
	for _, name := range order {
		if runtimeTotal.MatchString(name) && seen[name] != 3 {
			continue
		}
		d := byName[name]
		d.Diff = d.Key - d.Of
		out = append(out, *d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Diff > out[j].Diff })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// interesting selects the lines of `pprof -top -cum` kept in
// summary.txt: this module's frames, Caddy's server and reverse proxy
// entry points, and the runtime's allocation, GC and syscall totals.
var interesting = regexp.MustCompile(`caddy-rcns|reverseproxy\.\(\*Handler\)\.ServeHTTP$|caddyhttp\.\(\*Server\)\.ServeHTTP$|runtime\.gcBgMarkWorker$|runtime\.mallocgc$|syscall\.Syscall6?$|internal/runtime/syscall`)

func (d *driver) fetch(ctx context.Context, path, to string, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+d.admin+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("admin %s: %s: %s", path, resp.Status, b)
	}
	f, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pprofTop returns `go tool pprof ARGS CADDY PROFILE` (the last arg is
// the profile); a failure is logged and returns "".
func (d *driver) pprofTop(ctx context.Context, args ...string) string {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	full := append([]string{"tool", "pprof"}, args[:len(args)-1]...)
	full = append(full, d.caddy, args[len(args)-1])
	out, err := exec.CommandContext(cctx, "go", full...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(d.log, "go %s: %v\n%s\n", strings.Join(full, " "), err, out)
		return ""
	}
	return string(out)
}
