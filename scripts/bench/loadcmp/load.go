package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// plan bounds one run: at most N requests and at most Duration of
// sending. Rate 0 is a closed loop (Conns requests in flight, each sent
// when the one before it on its connection is answered); Rate > 0 an
// open loop at Rate requests per second over at most Conns connections.
type plan struct {
	N        int
	Duration time.Duration
	Rate     int
	Conns    int
}

func (p plan) check() error {
	switch {
	case p.N < 1:
		return fmt.Errorf("a run needs at least 1 request, got %d", p.N)
	case p.Duration <= 0:
		return fmt.Errorf("a run needs a positive duration, got %s", p.Duration)
	case p.Conns < 1:
		return fmt.Errorf("a run needs at least 1 connection, got %d", p.Conns)
	case p.Rate < 0:
		return fmt.Errorf("negative rate %d", p.Rate)
	}
	return nil
}

// stats summarizes one run.
type stats struct {
	Requests int            `json:"requests"` // sent and answered or failed
	OK       int            `json:"ok"`       // answered with the scenario's status
	Codes    map[int]int    `json:"codes"`    // status → count (0: no answer)
	Errors   map[string]int `json:"errors,omitempty"`
	Span     float64        `json:"span_s"`         // first send to last answer
	Tput     float64        `json:"throughput_rps"` // OK / Span
	P50      float64        `json:"p50_ms"`
	P99      float64        `json:"p99_ms"`
	// CaddyCPU is the Caddy process's CPU time per request over the
	// run, µs (cpuMeter); CPUSource says which reading gave it.
	CaddyCPU  float64 `json:"caddy_cpu_us"`
	CPUSource string  `json:"cpu_source"`
	// OtherCores is the CPU the machine spent during the run on work
	// other than Caddy, the upstream, redis-server and this driver, in
	// cores.
	OtherCores float64 `json:"other_cores"`
	// The other processes of the run, CPU per request in µs: the
	// upstream, redis-server (its site's store; idle otherwise) and this
	// driver (the load generator). With Caddy's, they are the machine's
	// work per request, which a closed loop queues on its shared cores.
	UpstreamCPU float64 `json:"upstream_cpu_us"`
	RedisCPU    float64 `json:"redis_cpu_us"`
	DriverCPU   float64 `json:"driver_cpu_us"`
	// From Caddy's metrics over the run (metrics.go): the mean time of
	// a request in the rcns engine (ms), and per request the store's
	// round trips an answer waits for and their wall time (ms). Zero on
	// a site without rcns.
	EngineMS    float64 `json:"engine_ms"`
	StoreTrips  float64 `json:"store_trips"`
	StoreWaitMS float64 `json:"store_wait_ms"`
	// From redis-server's INFO commandstats over a run of the redis
	// site (redisstats.go, setRedis), per request; zero on other sites
	// and in results recorded before them. RedisCommands: the commands
	// it ran, inside its scripts or not (Redis 7 counts a script's
	// redis.call under the command's name), and RedisCommandUS their
	// time, µs; RedisScripts: the scripts called (EVALSHA, EVAL, their
	// _RO forms, FCALL), and RedisScriptUS their time, µs, which holds
	// the time of the commands they called. Wall-clock times inside
	// redis-server.
	RedisCommands  float64 `json:"redis_commands,omitempty"`
	RedisCommandUS float64 `json:"redis_command_us,omitempty"`
	RedisScripts   float64 `json:"redis_scripts,omitempty"`
	RedisScriptUS  float64 `json:"redis_script_us,omitempty"`
}

// maxErrorKinds bounds the distinct error texts a run keeps.
const maxErrorKinds = 8

// attack runs plan p against addr with clients of dr: request i is
// next(i). It returns the run's statistics; the CPU fields are the
// caller's. A client that cannot connect fails the run.
func attack(ctx context.Context, dr door, addr string, next func(i int) *request, want int, p plan) (*stats, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	conns := make([]client, p.Conns)
	for i := range conns {
		c, err := dr.connect(ctx, addr)
		if err != nil {
			for _, o := range conns[:i] {
				o.close()
			}
			return nil, fmt.Errorf("connect %s: %v", addr, err)
		}
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, p.Duration+2*ioTimeout)
	defer cancel()

	type worker struct {
		lats  []int64
		codes map[int]int
		errs  map[string]int
		last  time.Time
	}
	ws := make([]*worker, p.Conns)
	start := time.Now()
	stop := start.Add(p.Duration)
	one := func(w *worker, c client, i int, sent time.Time) {
		resp, err := c.do(rctx, next(i), false)
		done := time.Now()
		w.lats = append(w.lats, done.Sub(sent).Nanoseconds())
		w.last = done
		if err != nil {
			w.codes[0]++
			if len(w.errs) < maxErrorKinds || w.errs[err.Error()] > 0 {
				w.errs[err.Error()]++
			}
			return
		}
		w.codes[resp.Status]++
	}
	var wg sync.WaitGroup
	var n atomic.Int64
	if p.Rate == 0 {
		for k := range ws {
			w := &worker{codes: map[int]int{}, errs: map[string]int{}}
			ws[k] = w
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rctx.Err() == nil {
					i := int(n.Add(1)) - 1
					now := time.Now()
					if i >= p.N || now.After(stop) {
						return
					}
					one(w, conns[k], i, now)
				}
			}()
		}
	} else {
		// Open loop: request i is due at start + i/Rate; its latency
		// counts from then, so a queue behind busy connections shows.
		due := make(chan int, p.Conns)
		for k := range ws {
			w := &worker{codes: map[int]int{}, errs: map[string]int{}}
			ws[k] = w
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range due {
					one(w, conns[k], i, start.Add(time.Duration(float64(i)*float64(time.Second)/float64(p.Rate))))
				}
			}()
		}
		for i := 0; i < p.N; i++ {
			at := start.Add(time.Duration(float64(i) * float64(time.Second) / float64(p.Rate)))
			if at.After(stop) || rctx.Err() != nil {
				break
			}
			time.Sleep(time.Until(at))
			due <- i
		}
		close(due)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st := &stats{Codes: map[int]int{}, Errors: map[string]int{}}
	var lats []int64
	last := start
	for _, w := range ws {
		lats = append(lats, w.lats...)
		for c, k := range w.codes {
			st.Codes[c] += k
		}
		for e, k := range w.errs {
			if len(st.Errors) < maxErrorKinds || st.Errors[e] > 0 {
				st.Errors[e] += k
			}
		}
		if w.last.After(last) {
			last = w.last
		}
	}
	if len(st.Errors) == 0 {
		st.Errors = nil
	}
	st.Requests, st.OK = len(lats), st.Codes[want]
	if st.Requests == 0 {
		return nil, fmt.Errorf("no request was sent within %s", p.Duration)
	}
	slices.Sort(lats)
	st.P50, st.P99 = percentile(lats, 0.50), percentile(lats, 0.99)
	if st.Span = last.Sub(start).Seconds(); st.Span > 0 {
		st.Tput = float64(st.OK) / st.Span
	}
	return st, nil
}

// percentile is the p-quantile (0 < p ≤ 1, nearest rank) of latencies
// sorted ascending in ns, returned in ms; 0 for none.
func percentile(sorted []int64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / 1e6
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

// median of v (0 for none); v is not changed.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
