package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"
)

// attackSpec is one bounded vegeta run: at most N requests and at most
// Duration of sending (plus the request timeout to drain), killed after
// a hard deadline.
type attackSpec struct {
	URLBase  string // http://127.0.0.1:PORT
	Scen     *scenario
	Tag      string
	N        int
	Duration time.Duration
	Rate     int               // 0: as fast as Workers allow (closed loop)
	Workers  int               // closed-loop workers (Rate 0) or initial workers
	Headers  map[string]string // merged over Scen.Headers (e.g. Contract-Synthesized)
}

// stats summarizes one run.
type stats struct {
	Requests int            `json:"requests"`
	OK       int            `json:"ok"` // status == scenario.Want
	Codes    map[int]int    `json:"codes"`
	Errors   map[string]int `json:"errors,omitempty"`
	Span     float64        `json:"span_s"`
	Tput     float64        `json:"throughput_rps"` // OK / span
	P50      float64        `json:"p50_ms"`
	P90      float64        `json:"p90_ms"`
	P99      float64        `json:"p99_ms"`
	Max      float64        `json:"max_ms"`
	Mean     float64        `json:"mean_ms"`
	// CaddyCPU is the Caddy process's CPU time (user+system, from
	// /proc/PID/stat) per request during the run, in µs.
	CaddyCPU float64 `json:"caddy_cpu_us_per_request"`
	// ForeignCores is the CPU the machine spent during the run on
	// anything but Caddy, the upstream and vegeta (other work on a shared
	// machine), in cores (CPU seconds per second).
	ForeignCores float64 `json:"foreign_cores"`
	// UpstreamCPU and VegetaCPU are the bench upstream's and vegeta's
	// CPU time per request during the run, in µs, as CaddyCPU.
	UpstreamCPU float64 `json:"upstream_cpu_us_per_request"`
	VegetaCPU   float64 `json:"vegeta_cpu_us_per_request"`
	// IdleCores is the CPU the machine left unused during the run, in
	// cores: the number of CPUs minus their busy time per second.
	IdleCores float64 `json:"idle_cores"`
	// lats are the run's latencies in ns, sorted, kept for fixed-rate
	// runs only: their percentiles are also taken over all rounds pooled.
	lats []int64
}

type vegetaTarget struct {
	Method string              `json:"method"`
	URL    string              `json:"url"`
	Body   string              `json:"body,omitempty"`
	Header map[string][]string `json:"header,omitempty"`
}

// run executes the attack with vegeta and returns its statistics.
func (d *driver) attack(ctx context.Context, a attackSpec) (*stats, error) {
	out := filepath.Join(d.work, "attack.bin")
	defer os.Remove(out)
	args := []string{"attack", "-lazy", "-format=json", "-max-body=0", "-timeout=10s",
		"-duration=" + a.Duration.String(), "-output=" + out}
	if a.Rate > 0 {
		args = append(args, fmt.Sprintf("-rate=%d/1s", a.Rate), fmt.Sprintf("-workers=%d", a.Workers))
	} else {
		args = append(args, "-rate=0", fmt.Sprintf("-workers=%d", a.Workers), fmt.Sprintf("-max-workers=%d", a.Workers))
	}
	hard := a.Duration + 30*time.Second
	cctx, cancel := context.WithTimeout(ctx, hard)
	defer cancel()
	cmd := exec.CommandContext(cctx, d.vegeta, args...)
	cmd.Stderr = d.log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	t0, busy0, caddy0, up0 := time.Now(), machineBusy(), d.caddyCPU(), d.upstreamCPU()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	werr := make(chan error, 1)
	go func() {
		defer stdin.Close()
		w := bufio.NewWriterSize(stdin, 64<<10)
		hdr := map[string][]string{}
		for k, v := range a.Scen.Headers {
			hdr[k] = []string{v}
		}
		for k, v := range a.Headers {
			hdr[k] = []string{v}
		}
		t := vegetaTarget{Method: a.Scen.Method, Header: hdr}
		if a.Scen.Body != "" {
			t.Body = base64.StdEncoding.EncodeToString([]byte(a.Scen.Body))
		}
		// A target whose URL is the same for every request is encoded
		// once and its bytes repeated, so this feed costs every scenario
		// about the same; only per-request paths ((g)) are encoded each.
		var line []byte
		for i := 0; i < a.N; i++ {
			u := a.URLBase + a.Scen.pathFor(a.Tag, i)
			if line == nil || u != t.URL {
				t.URL = u
				b, err := json.Marshal(&t)
				if err != nil {
					werr <- err
					return
				}
				line = append(b, '\n')
			}
			if _, err := w.Write(line); err != nil {
				werr <- nil // vegeta stopped reading (duration reached): fine
				return
			}
		}
		werr <- w.Flush()
	}()
	runErr := cmd.Wait()
	wall, busy1, caddy1, up1 := time.Since(t0).Seconds(), machineBusy(), d.caddyCPU(), d.upstreamCPU()
	<-werr
	if err := ctx.Err(); err != nil {
		return nil, err // interrupted, or -max-total ran out (reported by main)
	}
	if cctx.Err() != nil {
		return nil, fmt.Errorf("vegeta exceeded its hard deadline %s", hard)
	}
	if runErr != nil {
		return nil, fmt.Errorf("vegeta attack: %v", runErr)
	}
	st, err := d.decode(ctx, out, a.Scen.Want)
	if err != nil {
		return nil, err
	}
	if caddy0 >= 0 && caddy1 >= 0 && st.Requests > 0 {
		st.CaddyCPU = (caddy1 - caddy0) / float64(st.Requests) * 1e6
	}
	var vegetaCPU float64
	if cmd.ProcessState != nil {
		vegetaCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		if st.Requests > 0 {
			st.VegetaCPU = vegetaCPU / float64(st.Requests) * 1e6
		}
	}
	if up0 >= 0 && up1 >= 0 && st.Requests > 0 {
		st.UpstreamCPU = (up1 - up0) / float64(st.Requests) * 1e6
	}
	if busy0 >= 0 && busy1 >= 0 {
		st.IdleCores = max(0, float64(runtime.NumCPU())-(busy1-busy0)/wall)
		if caddy0 >= 0 && up0 >= 0 && cmd.ProcessState != nil {
			ours := (caddy1 - caddy0) + (up1 - up0) + vegetaCPU
			st.ForeignCores = max(0, (busy1-busy0)-ours) / wall
		}
	}
	return st, nil
}

// decode reads vegeta's results through `vegeta encode --to csv`.
func (d *driver) decode(ctx context.Context, bin string, want int) (*stats, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, d.vegeta, "encode", "--to=csv", bin)
	cmd.Stderr = d.log
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	st, perr := parseResults(pipe, want)
	_, _ = io.Copy(io.Discard, pipe)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("vegeta encode: %v", err)
	}
	return st, perr
}

func parseResults(r io.Reader, want int) (*stats, error) {
	cr := csv.NewReader(bufio.NewReaderSize(r, 1<<20))
	cr.FieldsPerRecord = 12
	cr.ReuseRecord = true
	st := &stats{Codes: map[int]int{}, Errors: map[string]int{}}
	var lats []int64
	var first, last int64 = math.MaxInt64, 0
	var sum float64
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		ts, _ := strconv.ParseInt(rec[0], 10, 64)
		code, _ := strconv.Atoi(rec[1])
		lat, _ := strconv.ParseInt(rec[2], 10, 64)
		if code == 0 && rec[5] == "no targets to attack" {
			continue // the lazy target stream ended: not a request
		}
		st.Requests++
		st.Codes[code]++
		if code == want {
			st.OK++
		} else if rec[5] != "" && code == 0 {
			st.Errors[rec[5]]++
		}
		lats = append(lats, lat)
		sum += float64(lat)
		first = min(first, ts)
		last = max(last, ts+lat)
	}
	if st.Requests == 0 {
		return st, errors.New("no results")
	}
	slices.Sort(lats)
	st.P50, st.P90, st.P99 = percentile(lats, 0.50), percentile(lats, 0.90), percentile(lats, 0.99)
	st.lats = lats
	st.Max = float64(lats[len(lats)-1]) / 1e6
	st.Mean = sum / float64(len(lats)) / 1e6
	st.Span = float64(last-first) / 1e9
	if st.Span > 0 {
		st.Tput = float64(st.OK) / st.Span
	}
	if len(st.Errors) == 0 {
		st.Errors = nil
	}
	return st, nil
}

// percentile is the p-quantile (0 < p ≤ 1, nearest rank) of latencies
// sorted ascending, in ns, returned in ms; 0 for none.
func percentile(sorted []int64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / 1e6
}

// pool returns the latencies of all lists in one list, sorted ascending.
func pool(lists ...[]int64) []int64 {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]int64, 0, n)
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return out
}
