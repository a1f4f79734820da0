// Command loadcmp is the load comparison behind docs/performance.md.
// It starts the bench upstream and one Caddy on scripts/bench/Caddyfile
// (a plain reverse_proxy site and gateway sites, all on loopback), then
// runs the scenarios of scenarios.go in interleaved rounds with its own
// load generator (load.go, door.go) and reads the Caddy process's CPU
// time from /proc around every run (procs.go). Each load scenario is
// compared with the (b) runs just before and after it in the same
// round; the page reports the median over rounds and the range.
//
// It writes results.json (every run) and report.md (the page) to -out,
// prints the page, and writes it to -page when given. With -render
// FILE it only renders the page from a results.json of an earlier run.
//
// Run it through scripts/bench/load.sh or make bench, which build the
// binaries.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/redisinfo"
)

// options are the bounds and choices of one comparison.
type options struct {
	Rounds       int           `json:"rounds"`
	LoadDuration time.Duration `json:"load_duration_ns"`
	LoadRequests int           `json:"load_requests"`
	Workers      int           `json:"workers"`
	SlowRate     int           `json:"slow_rate"`
	SlowDuration time.Duration `json:"slow_duration_ns"`
	SlowConns    int           `json:"slow_conns"`
	Warmup       time.Duration `json:"warmup_ns"`
	Settle       time.Duration `json:"settle_ns"`
	Delay        time.Duration `json:"delay_ns"`
	MaxTotal     time.Duration `json:"max_total_ns"`
	Only         string        `json:"only,omitempty"`
	Profile      string        `json:"profile,omitempty"`
	ProfileSecs  int           `json:"profile_seconds"`
}

// check names every bound that would leave a run unbounded or nothing
// to compare.
func (o options) check() error {
	var bad []string
	for _, c := range []struct {
		msg string
		ok  bool
	}{
		{"-rounds must be at least 3 (a median over rounds needs a few)", o.Rounds >= 3},
		{"-load-duration must be between 100ms and 1m", o.LoadDuration >= 100*time.Millisecond && o.LoadDuration <= time.Minute},
		{"-load-requests must be between 1000 and 1000000", o.LoadRequests >= 1000 && o.LoadRequests <= 1_000_000},
		{"-workers must be between 1 and 256", o.Workers >= 1 && o.Workers <= 256},
		{"-slow-rate must be between 1 and 10000 requests/s", o.SlowRate >= 1 && o.SlowRate <= 10000},
		{"-slow-duration must be between 100ms and 1m", o.SlowDuration >= 100*time.Millisecond && o.SlowDuration <= time.Minute},
		{"-warmup must be between 0 and 10s", o.Warmup >= 0 && o.Warmup <= 10*time.Second},
		{"-settle must be between 0 and 1s", o.Settle >= 0 && o.Settle <= time.Second},
		{"-delay must be positive", o.Delay > 0},
		{"-max-total must be positive", o.MaxTotal > 0},
		{"-profile-seconds must be between 0 and 60", o.ProfileSecs >= 0 && o.ProfileSecs <= 60},
	} {
		if !c.ok {
			bad = append(bad, c.msg)
		}
	}
	if _, err := filterScenarios(scenarios(), o.Only); err != nil {
		bad = append(bad, err.Error())
	}
	if _, err := profileKeys(o.Profile); err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// profileKeys splits -profile into scenario keys; each must name a
// load scenario.
func profileKeys(list string) ([]string, error) {
	known := map[string]bool{}
	for _, s := range scenarios() {
		known[s.Key] = s.Phase == phaseLoad
	}
	var keys, bad []string
	for _, k := range strings.Split(list, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !known[k] {
			bad = append(bad, strconv.Quote(k))
		}
		keys = append(keys, k)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("-profile: %s names no load scenario", strings.Join(bad, ", "))
	}
	return keys, nil
}

type driver struct {
	o                         options
	caddy, upstream, caddyCfg string
	redisServer               string
	docs, work, out           string
	admin, upAddr             string
	ports                     map[string]int // site → port
	log                       io.Writer
	procs                     []*proc
	caddyProc, upProc         *proc
	redisProc                 *proc
	redisAddr                 string // redis-server's, for its commandstats (redisstats.go)
	seq                       int
	// The oauth site's authorization server (oauth.go): node, the
	// authserver.mjs script, the issuer and the one token every
	// request to an OAuth site carries.
	node, authServer string
	issuer, token    string
}

func main() {
	var d driver
	o := &d.o
	// Runs of 3 s over 6 rounds, not 1 s over 10: a run's fixed cost
	// (Caddy's CPU at its start, the GC cycles a short run does or does
	// not catch) swung single 1 s rounds by hundreds of µs
	// (scripts/bench/README.md "Run length").
	flag.IntVar(&o.Rounds, "rounds", 6, "interleaved rounds")
	flag.DurationVar(&o.LoadDuration, "load-duration", 3*time.Second, "most sending time of one closed-loop run")
	flag.IntVar(&o.LoadRequests, "load-requests", 100000, "most requests of one closed-loop run")
	flag.IntVar(&o.Workers, "workers", 16, "connections, each with one request in flight, of a closed-loop run")
	flag.IntVar(&o.SlowRate, "slow-rate", 200, "requests/s of the (e) runs (open loop)")
	flag.DurationVar(&o.SlowDuration, "slow-duration", 2*time.Second, "length of one (e) run")
	flag.IntVar(&o.SlowConns, "slow-conns", 32, "connections of an (e) run")
	flag.DurationVar(&o.Warmup, "warmup", time.Second, "length of the one unrecorded run per scenario before the rounds")
	flag.DurationVar(&o.Settle, "settle", 20*time.Millisecond, "pause after a run's last answer before its CPU is read")
	flag.DurationVar(&o.Delay, "delay", 20*time.Millisecond, "delay of the upstream's /slow route")
	flag.DurationVar(&o.MaxTotal, "max-total", 45*time.Minute, "hard bound of the whole comparison")
	flag.StringVar(&o.Only, "only", "", "comma-separated scenario keys, letters or sites to run (b always runs)")
	flag.StringVar(&o.Profile, "profile", "b,c/nokey,d/nokey,d/ed25519,f/nokey,g/nokey,c/redis,d/redis,dk/nokey,dk/redis,f/redis,g/redis", "load scenarios to CPU-profile after the rounds")
	flag.IntVar(&o.ProfileSecs, "profile-seconds", 4, "CPU profile length per profiled scenario (0: none)")
	flag.StringVar(&d.caddy, "caddy", "", "Caddy binary with the rcns module")
	flag.StringVar(&d.upstream, "upstream", "", "bench upstream binary (scripts/bench/upstream)")
	flag.StringVar(&d.redisServer, "redis-server", "redis-server", "redis-server binary (Redis 7) for the redis site")
	flag.StringVar(&d.caddyCfg, "caddyfile", "scripts/bench/Caddyfile", "Caddyfile")
	flag.StringVar(&d.node, "node", "node", "node binary (Node.js 20+) for the oauth site's authorization server")
	flag.StringVar(&d.authServer, "authserver", "scripts/oauth/authserver.mjs", "the oauth site's authorization server (oidc-provider; make deps installs it into .tools)")
	flag.StringVar(&d.docs, "docs", "scripts/bench/docs", "operator documents")
	flag.StringVar(&d.out, "out", "", "results dir (default: a new temp dir)")
	page := flag.String("page", "", "also write the page (docs/performance.md) here")
	render := flag.String("render", "", "render the page from this results.json and exit (no run)")
	source := flag.String("source", "", "what was measured, for the page (e.g. the commit)")
	keepWork := flag.Bool("keep-work", false, "keep the work dir (logs, records)")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(2, fmt.Errorf("unexpected arguments %q (every option is a -flag; see -h)", flag.Args()))
	}
	if err := checkScenarios(scenarios()); err != nil {
		fail(2, err)
	}
	if *render != "" {
		if err := renderFile(*render, *page); err != nil {
			fail(1, err)
		}
		return
	}
	if d.caddy == "" || d.upstream == "" {
		fail(2, errors.New("-caddy and -upstream are required (use scripts/bench/load.sh)"))
	}
	if err := o.check(); err != nil {
		fail(2, err)
	}
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, o.MaxTotal)
	defer cancel()
	defer func() {
		if p := recover(); p != nil { // stop what was started, then crash
			d.stopAll()
			panic(p)
		}
	}()
	began := time.Now()
	res, err := d.run(ctx, *source)
	d.stopAll()
	if res != nil {
		res.Meta["elapsed"] = time.Since(began).Round(time.Second).String()
	}
	switch {
	case d.work == "":
	case *keepWork || err != nil && len(d.procs) > 0:
		fmt.Fprintf(os.Stderr, "loadcmp: work dir kept: %s\n", d.work)
	default:
		_ = os.RemoveAll(d.work)
	}
	if err == nil {
		err = writeResults(os.Stdout, res, d.out, *page)
	}
	switch {
	case err != nil && sigCtx.Err() != nil:
		fail(130, errors.New("interrupted; every process it started is stopped"))
	case err != nil && ctx.Err() != nil:
		fail(1, fmt.Errorf("stopped after -max-total %s; log in %s", o.MaxTotal, d.out))
	case err != nil:
		fail(1, fmt.Errorf("%v; log in %s", err, d.out))
	}
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "loadcmp:", err)
	os.Exit(code)
}

func (d *driver) stopAll() {
	for i := len(d.procs) - 1; i >= 0; i-- {
		d.procs[i].stop()
	}
	d.procs = nil
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func (d *driver) run(ctx context.Context, source string) (*results, error) {
	var err error
	if d.work, err = os.MkdirTemp("", "rcns-bench-work."); err != nil {
		return nil, err
	}
	if d.out == "" {
		if d.out, err = os.MkdirTemp("", "rcns-bench."); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(d.out, 0o755); err != nil {
		return nil, err
	}
	lf, err := os.Create(filepath.Join(d.out, "loadcmp.log"))
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	d.log = lf
	for _, p := range []*string{&d.caddy, &d.upstream, &d.caddyCfg, &d.docs, &d.authServer} {
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, err
		}
	}
	scens, err := filterScenarios(scenarios(), d.o.Only)
	if err != nil {
		return nil, err
	}
	if err := d.startAll(ctx, usesOAuth(scens)); err != nil {
		return nil, err
	}
	if err := d.sanity(ctx, scens); err != nil {
		return nil, err
	}
	res := &results{Meta: d.meta(source), Options: d.o, Scenarios: scens}

	say("==> warm-up (%s per scenario, not recorded)", d.o.Warmup)
	for _, s := range scens {
		if d.o.Warmup == 0 {
			break
		}
		if _, err := d.one(ctx, s, "w", d.o.Warmup); err != nil {
			return nil, fmt.Errorf("warm-up %s: %v", s.Key, err)
		}
	}
	var loads, slows []*scenario
	for _, s := range scens[1:] {
		if s.Phase == phaseLoad {
			loads = append(loads, s)
		} else {
			slows = append(slows, s)
		}
	}
	// Every round runs each scenario once, in an order rotated per
	// round; a load scenario runs between two (b) runs and is compared
	// with their mean, so that drift in the machine's other load
	// cancels as far as it can.
	for r := 0; r < d.o.Rounds; r++ {
		say("==> round %d/%d", r+1, d.o.Rounds)
		prev, err := d.one(ctx, scens[0], "t", d.o.LoadDuration)
		if err != nil {
			return nil, fmt.Errorf("round %d b: %v", r+1, err)
		}
		res.add(scens[0], r, prev, nil)
		for _, s := range rotate(loads, r) {
			st, err := d.one(ctx, s, "t", d.o.LoadDuration)
			if err != nil {
				return nil, fmt.Errorf("round %d %s: %v", r+1, s.Key, err)
			}
			next, err := d.one(ctx, scens[0], "t", d.o.LoadDuration)
			if err != nil {
				return nil, fmt.Errorf("round %d b: %v", r+1, err)
			}
			ref := meanStats(prev, next)
			res.add(s, r, st, ref)
			res.add(scens[0], r, next, nil)
			say("    %-11s cpu %5.1f µs/req (b %5.1f, %+5.1f)  %6.0f req/s (×%.2f b)  other load %.2f cores",
				s.Key, st.CaddyCPU, ref.CaddyCPU, st.CaddyCPU-ref.CaddyCPU, st.Tput, st.Tput/ref.Tput, st.OtherCores)
			prev = next
		}
		for _, s := range rotate(slows, r) {
			st, err := d.one(ctx, s, "e", d.o.SlowDuration)
			if err != nil {
				return nil, fmt.Errorf("round %d %s: %v", r+1, s.Key, err)
			}
			res.add(s, r, st, nil)
			say("    %-11s %d req/s  p50 %6.2f ms  p99 %6.2f ms", s.Key, d.o.SlowRate, st.P50, st.P99)
		}
	}
	if keys, _ := profileKeys(d.o.Profile); d.o.ProfileSecs > 0 && len(keys) > 0 {
		if err := d.profiles(ctx, scens, keys, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func rotate(list []*scenario, r int) []*scenario {
	if len(list) == 0 {
		return nil
	}
	k := r % len(list)
	return append(append([]*scenario(nil), list[k:]...), list[:k]...)
}

// meanStats is the (b) reference of a run from the (b) runs a and b
// around it: the mean of each number.
func meanStats(a, b *stats) *stats {
	return &stats{Requests: a.Requests + b.Requests, OK: a.OK + b.OK, Tput: (a.Tput + b.Tput) / 2,
		P50: (a.P50 + b.P50) / 2, P99: (a.P99 + b.P99) / 2, CaddyCPU: (a.CaddyCPU + b.CaddyCPU) / 2,
		UpstreamCPU: (a.UpstreamCPU + b.UpstreamCPU) / 2, RedisCPU: (a.RedisCPU + b.RedisCPU) / 2,
		DriverCPU: (a.DriverCPU + b.DriverCPU) / 2, OtherCores: (a.OtherCores + b.OtherCores) / 2}
}

// one runs scenario s once for at most dur, bounded by -load-requests
// (load) or rate × dur (slow): it synthesizes the contract s presents,
// then attacks with Caddy's CPU read just before and, after -settle,
// just after.
func (d *driver) one(ctx context.Context, s *scenario, phaseTag string, dur time.Duration) (*stats, error) {
	d.seq++
	tag := fmt.Sprintf("%s%d", phaseTag, d.seq)
	st := siteNamed(s.Site)
	addr := d.addr(s.Site)
	hdr := d.header(s)
	if s.Contract {
		id, err := d.synthesize(ctx, s, tag)
		if err != nil {
			return nil, err
		}
		hdr = map[string]string{"Contract-Synthesized": id}
		for k, v := range d.header(s) {
			hdr[k] = v
		}
	}
	fixed := &request{Method: s.Method, Path: s.path(tag, 0), Header: hdr, Body: s.body(tag, 0)}
	perRequest := s.perRequest()
	next := func(i int) *request {
		if !perRequest {
			return fixed
		}
		h := hdr
		if s.KeyPerRequest {
			h = maps.Clone(hdr)
			h["Idempotency-Key"] = tag + "-" + strconv.Itoa(i)
		}
		return &request{Method: s.Method, Path: s.path(tag, i), Header: h, Body: s.body(tag, i)}
	}
	p := plan{N: d.o.LoadRequests, Duration: dur, Conns: d.o.Workers}
	if s.Phase == phaseSlow {
		p = plan{N: int(math.Ceil(float64(d.o.SlowRate) * dur.Seconds())), Duration: dur, Rate: d.o.SlowRate, Conns: d.o.SlowConns}
	}
	// The metrics are scraped outside the CPU readings: the scrape is
	// Caddy's work, not the run's.
	e0, err := scrapeEngine(ctx, "http://"+d.admin+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("caddy metrics: %v", err)
	}
	// So are redis-server's commandstats, on a run of its site only. They
	// are a diagnostic: one not read is said and left out (zero), the run
	// goes on.
	statsRedis := st.Redis
	if statsRedis {
		if err := resetRedisStats(ctx, d.redisAddr); err != nil {
			fmt.Fprintf(os.Stderr, "loadcmp: %s: redis-server commandstats not reset, left out of this run: %v\n", s.Key, err)
			statsRedis = false
		}
	}
	c0, err := readCPU("/proc", d.caddyProc.pid())
	if err != nil {
		return nil, fmt.Errorf("caddy cpu: %v", err)
	}
	u0, err := readCPU("/proc", d.upProc.pid())
	if err != nil {
		return nil, fmt.Errorf("upstream cpu: %v", err)
	}
	r0, err := readCPU("/proc", d.redisProc.pid())
	if err != nil {
		return nil, fmt.Errorf("redis-server cpu: %v", err)
	}
	busy0, err := machineBusy()
	if err != nil {
		return nil, err
	}
	t0, self0 := time.Now(), selfCPU()
	res, err := attack(ctx, st.Door, addr, next, s.Want, p)
	if err != nil {
		return nil, err
	}
	time.Sleep(d.o.Settle)
	c1, err := readCPU("/proc", d.caddyProc.pid())
	if err != nil {
		return nil, fmt.Errorf("caddy cpu: %v", err)
	}
	u1, err := readCPU("/proc", d.upProc.pid())
	if err != nil {
		return nil, fmt.Errorf("upstream cpu: %v", err)
	}
	r1, err := readCPU("/proc", d.redisProc.pid())
	if err != nil {
		return nil, fmt.Errorf("redis-server cpu: %v", err)
	}
	busy1, err := machineBusy()
	if err != nil {
		return nil, err
	}
	wall, self := time.Since(t0).Seconds(), selfCPU()-self0
	e1, err := scrapeEngine(ctx, "http://"+d.admin+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("caddy metrics: %v", err)
	}
	var cmds map[string]redisinfo.Command
	if statsRedis {
		if cmds, err = redisCommandStats(ctx, d.redisAddr); err != nil {
			fmt.Fprintf(os.Stderr, "loadcmp: %s: redis-server commandstats not read, left out of this run: %v\n", s.Key, err)
			cmds = nil
		}
	}
	caddy, src := cpuSeconds(c0, c1, clockTicks)
	up, _ := cpuSeconds(u0, u1, clockTicks)
	rs, _ := cpuSeconds(r0, r1, clockTicks)
	perReq := 1e6 / float64(res.Requests)
	res.CaddyCPU, res.CPUSource = caddy*perReq, src
	res.UpstreamCPU, res.RedisCPU, res.DriverCPU = up*perReq, rs*perReq, self*perReq
	res.OtherCores = max(0, busy1-busy0-caddy-up-rs-self) / wall
	res.setEngine(e0, e1)
	res.setRedis(cmds)
	if res.OK < res.Requests*99/100 {
		return res, fmt.Errorf("%s: only %d of %d answers had status %d: %v %v", s.Key, res.OK, res.Requests, s.Want, res.Codes, res.Errors)
	}
	return res, nil
}

func (d *driver) addr(siteName string) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(d.ports[siteName]))
}

// send sends one request to a site through its door and keeps the body.
func (d *driver) send(ctx context.Context, siteName string, r *request) (*response, error) {
	c, err := siteNamed(siteName).Door.connect(ctx, d.addr(siteName))
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(ctx, r, true)
}

// synthesize makes the contract s presents: one optimistic synthesis
// (263) on the run's own path.
func (d *driver) synthesize(ctx context.Context, s *scenario, tag string) (string, error) {
	hdr := map[string]string{"Allow-RCNS": "true", "Authority-Scope": scopeNegotiate}
	for k, v := range s.Header {
		if k != "Authority-Scope" {
			hdr[k] = v
		}
	}
	if siteNamed(s.Site).OAuth {
		hdr = withBearer(hdr, d.token) // the token's scopes hold rcns:negotiate
	}
	resp, err := d.send(ctx, s.Site, &request{Method: s.Method, Path: s.path(tag, 0), Header: hdr, Body: s.body(tag, 0)})
	if err != nil {
		return "", fmt.Errorf("synthesis for %s: %v", s.Key, err)
	}
	id := resp.Header.Get("Contract-Synthesized")
	if resp.Status != 263 || id == "" {
		return "", fmt.Errorf("synthesis for %s: %d %s", s.Key, resp.Status, resp.Body)
	}
	return id, nil
}

// sanity sends each scenario once and checks its status and the alg of
// its Attribution-Record against its site.
func (d *driver) sanity(ctx context.Context, scens []*scenario) error {
	say("==> sanity check")
	for _, s := range scens {
		d.seq++
		tag := fmt.Sprintf("s%d", d.seq)
		hdr := d.header(s)
		if s.Contract {
			id, err := d.synthesize(ctx, s, tag)
			if err != nil {
				return err
			}
			hdr = map[string]string{"Contract-Synthesized": id}
			for k, v := range d.header(s) {
				hdr[k] = v
			}
		}
		if s.KeyPerRequest {
			hdr = maps.Clone(hdr)
			hdr["Idempotency-Key"] = tag
		}
		resp, err := d.send(ctx, s.Site, &request{Method: s.Method, Path: s.path(tag, 0), Header: hdr, Body: s.body(tag, 0)})
		if err != nil {
			return fmt.Errorf("%s: %v", s.Key, err)
		}
		if resp.Status != s.Want {
			return fmt.Errorf("%s: status %d, want %d: %s", s.Key, resp.Status, s.Want, resp.Body)
		}
		if s.WantBody != "" && !strings.Contains(string(resp.Body), s.WantBody) {
			return fmt.Errorf("%s: the answer does not contain %s: %s", s.Key, s.WantBody, resp.Body)
		}
		want := siteNamed(s.Site).Alg
		if s.NoRecord {
			want = ""
		}
		if got := recordAlg(resp.Header.Get("Attribution-Record")); got != want {
			return fmt.Errorf("%s: Attribution-Record alg %q, want %q", s.Key, got, want)
		}
		say("    %-11s %d %s %s", s.Key, resp.Status, s.Method, s.path(tag, 0))
	}
	return nil
}

// recordAlg is the "alg" of a JWS compact Attribution-Record, "" for
// none, "?" when it does not decode.
func recordAlg(compact string) string {
	if compact == "" {
		return ""
	}
	head, _, _ := strings.Cut(compact, ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return "?"
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return "?"
	}
	return h.Alg
}

// header is the header fields of a request of s: s.Header, or on an
// OAuth site the same with the bench token in place of the agent's
// header identity.
func (d *driver) header(s *scenario) map[string]string {
	if siteNamed(s.Site).OAuth {
		return withBearer(s.Header, d.token)
	}
	return s.Header
}

// startAll makes the record key and starts the upstream, Caddy and,
// when withOAuth, the oauth site's authorization server (before Caddy),
// and fetches its token.
func (d *driver) startAll(ctx context.Context, withOAuth bool) error {
	key := filepath.Join(d.work, "record-key.pem")
	if out, err := exec.CommandContext(ctx, "openssl", "genpkey", "-algorithm", "ed25519", "-out", key).CombinedOutput(); err != nil {
		return fmt.Errorf("openssl genpkey: %v: %s", err, out)
	}
	assertionKey := filepath.Join(d.work, "assertion-key.pem")
	if out, err := exec.CommandContext(ctx, "openssl", "genpkey", "-algorithm", "ed25519", "-out", assertionKey).CombinedOutput(); err != nil {
		return fmt.Errorf("openssl genpkey: %v: %s", err, out)
	}
	say("==> upstream")
	p, stdout, err := d.start("upstream", d.work+"/upstream.log", nil, d.upstream,
		"-host", "127.0.0.1", "-port", "0", "-delay", d.o.Delay.String(), "-max-lifetime", d.o.MaxTotal.String())
	if err != nil {
		return err
	}
	d.upProc = p
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("upstream did not print its address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	d.upAddr = strings.TrimSpace(line)
	if err := waitHTTP(ctx, "http://"+d.upAddr+"/ready", 10*time.Second, nil); err != nil {
		return err
	}

	redisAddr, err := d.startRedis(ctx)
	if err != nil {
		return err
	}
	d.redisAddr = redisAddr

	port, err := freePort()
	if err != nil {
		return err
	}
	d.admin = fmt.Sprintf("127.0.0.1:%d", port)
	d.ports = map[string]int{}
	var listed, sitePorts []string
	for _, s := range sites {
		if d.ports[s.Name], err = freePort(); err != nil {
			return err
		}
		sitePorts = append(sitePorts, fmt.Sprintf("%s=%d", s.envName(), d.ports[s.Name]))
		listed = append(listed, fmt.Sprintf("%s :%d", s.Name, d.ports[s.Name]))
	}
	// The oauth site's resource is its origin; its issuer is the
	// authorization server on a port reserved here (started only when
	// an OAuth scenario runs: the gateway reads the issuer on first use).
	resource := "http://" + d.addr("oauth")
	asPort, err := freePort()
	if err != nil {
		return err
	}
	d.issuer = fmt.Sprintf("http://127.0.0.1:%d", asPort)
	if withOAuth {
		if err := d.startAuthServer(ctx, asPort, resource); err != nil {
			return err
		}
	}
	env := []string{"BENCH_ADMIN=" + d.admin, "BENCH_UPSTREAM=" + d.upAddr, "BENCH_DOCS=" + d.docs,
		"BENCH_WORK=" + d.work, "BENCH_KEY=" + key, "BENCH_REDIS=" + redisAddr, "BENCH_ASSERTION_KEY=" + assertionKey,
		"BENCH_OAUTH_ISSUER=" + d.issuer, "BENCH_OAUTH_RESOURCE=" + resource,
		"XDG_DATA_HOME=" + d.work + "/xdg-data", "XDG_CONFIG_HOME=" + d.work + "/xdg-config"}
	env = append(env, sitePorts...)
	say("==> caddy (admin %s; %s)", d.admin, strings.Join(listed, ", "))
	p, stdout, err = d.start("caddy", d.work+"/caddy.log", env, d.caddy, "run", "--config", d.caddyCfg, "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	d.caddyProc = p
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if err := waitHTTP(ctx, "http://"+d.admin+"/config/", 60*time.Second, p); err != nil {
		return err
	}
	for _, s := range sites {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := d.send(ctx, s.Name, &request{Method: "GET", Path: "/ready"})
			if err == nil && resp.Status < 500 {
				break
			}
			if p.exited() || time.Now().After(deadline) {
				return fmt.Errorf("site %s not ready (%v); see %s/caddy.log", s.Name, err, d.work)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// waitHTTP waits until url answers below 500, or p (when given) exits.
func waitHTTP(ctx context.Context, url string, within time.Duration, p *proc) error {
	deadline := time.Now().Add(within)
	c := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return nil
			}
			err = errors.New(resp.Status)
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited; see its log in %s", p.name, filepath.Dir(url))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// meta describes the machine and what ran.
func (d *driver) meta(source string) map[string]string {
	return map[string]string{
		"date":    time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		"source":  source,
		"nproc":   strconv.Itoa(runtime.NumCPU()),
		"cpu":     cpuModel(),
		"kernel":  strings.TrimSpace(cmdOut("uname", "-sr")),
		"go":      runtime.Version(),
		"caddy":   strings.TrimSpace(cmdOut(d.caddy, "version")),
		"loadavg": strings.TrimSpace(readFile("/proc/loadavg")),
		"command": strings.Join(os.Args[1:], " "),
	}
}

func cpuModel() string {
	for _, l := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func cmdOut(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	return string(out)
}
