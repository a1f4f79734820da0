// Command loadcmp is the load comparison of docs/performance.md: it
// starts the bench upstream and one Caddy (scripts/bench/Caddyfile) on
// loopback, then measures with vegeta, in interleaved rounds:
//
//	(a)  the upstream directly
//	(b)  a plain reverse_proxy to it
//	(b2) a non-AGTP request through the gateway site (passthrough)
//	(bh) a plain reverse_proxy that also sends the AGTP response headers
//	     a Tier B answer carries (static values of the same sizes): the
//	     wire cost of those headers alone, for reference
//	(bd) the exchange of (d) with no gateway work: the bench build's
//	     bench_exchange handler (scripts/bench/benchref) reads the
//	     request body, makes the same upstream GET and answers with (d)'s
//	     AGTP headers and envelope, static values; a lower bound of what
//	     any gateway serving (d)'s exchange costs, for reference
//	(c)  a Tier B endpoint (FETCH → GET)
//	(d)  a contract presentation, one step
//	(e)  a contract presentation, one vs three parallel 20 ms steps
//	(f)  a gate refusal (464 composition-impossible)
//	(g)  an optimistic synthesis (263) including contract creation
//
// (c)–(g) without a record key and with an Ed25519 key; (f), (g) also
// under fsync group. Throughput phase: closed loop, -workers requests in
// flight. Fixed-rate phase: open loop at -rate (-slow-rate for (e)).
// Every run is bounded in requests and time. Results go to -out
// (results.json, report.md, profiles/).
//
// Run it through scripts/bench/load.sh (or make bench), which builds
// the binaries.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
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
)

type driver struct {
	caddy, upstream, vegeta, caddyfile, docs, keyPath string
	work, out                                         string
	admin                                             string
	ports                                             map[string]int // variant → port
	upAddr                                            string
	delay, maxTotal                                   time.Duration
	log                                               io.Writer
	procs                                             []*proc
	caddyProc, upProc                                 *proc
	vegetaVersion                                     string
	seq                                               int
}

func (d *driver) url(variant string, direct bool) string {
	if direct {
		return "http://" + d.upAddr
	}
	return fmt.Sprintf("http://127.0.0.1:%d", d.ports[variant])
}

func (d *driver) base(s *scenario) string { return d.url(s.Variant, s.Letter == "a") }

// tag returns a fresh run tag (unique paths per run).
func (d *driver) tag(phase string) string {
	d.seq++
	return fmt.Sprintf("%s%d", phase, d.seq)
}

func main() {
	var (
		d           driver
		rounds      = flag.Int("rounds", 5, "interleaved rounds")
		tputDur     = flag.Duration("tput-duration", 1500*time.Millisecond, "length of one throughput run")
		fixedDur    = flag.Duration("fixed-duration", 2*time.Second, "length of one fixed-rate run")
		slowDur     = flag.Duration("slow-duration", 3*time.Second, "length of one fixed-rate run of (e)")
		rate        = flag.Int("rate", 1000, "fixed rate (requests/s) of the fixed-rate phase")
		slowRate    = flag.Int("slow-rate", 200, "fixed rate (requests/s) of (e)")
		workers     = flag.Int("workers", 16, "requests in flight in the throughput phase")
		maxReq      = flag.Int("max-requests", 150000, "upper bound of requests in one run")
		profileSecs = flag.Int("profile-seconds", 5, "CPU profile length per profiled scenario (0: no profiles)")
		profileKeys = flag.String("profile", "b,c/nokey,d/nokey,f/nokey,g/nokey,c/ed25519,d/ed25519,g/ed25519", "scenarios to profile")
		only        = flag.String("only", "", "comma-separated scenario keys, letters or variants to run (a and b always run)")
		keepWork    = flag.Bool("keep-work", false, "keep the work dir (logs, records)")
	)
	flag.StringVar(&d.caddy, "caddy", "", "Caddy binary with the rcns module")
	flag.StringVar(&d.upstream, "upstream", "", "bench upstream binary (scripts/bench/upstream)")
	flag.StringVar(&d.vegeta, "vegeta", "vegeta", "vegeta binary")
	flag.StringVar(&d.vegetaVersion, "vegeta-version", "", "vegeta version for the report (default: what `vegeta -version` says)")
	flag.StringVar(&d.caddyfile, "caddyfile", "scripts/bench/Caddyfile", "Caddyfile")
	flag.StringVar(&d.docs, "docs", "scripts/bench/docs", "operator documents")
	flag.StringVar(&d.out, "out", "", "results dir (default: a new temp dir)")
	flag.DurationVar(&d.delay, "delay", 20*time.Millisecond, "delay of the upstream's /slow route")
	flag.DurationVar(&d.maxTotal, "max-total", 40*time.Minute, "hard bound of the whole comparison")
	flag.Parse()
	if d.caddy == "" || d.upstream == "" {
		fmt.Fprintln(os.Stderr, "loadcmp: -caddy and -upstream are required (use scripts/bench/load.sh)")
		os.Exit(2)
	}
	// Every bound is checked before anything starts: a zero or negative
	// one would run unbounded (vegeta reads -duration=0 as "forever") or
	// leave nothing to compare.
	var bad []string
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"-rounds must be at least 1", *rounds >= 1},
		{"-rate must be at least 1 (requests/s)", *rate >= 1},
		{"-slow-rate must be at least 1 (requests/s)", *slowRate >= 1},
		{"-workers must be at least 1", *workers >= 1},
		{"-max-requests must be at least 500", *maxReq >= 500},
		{"-tput-duration must be positive", *tputDur > 0},
		{"-fixed-duration must be positive", *fixedDur > 0},
		{"-slow-duration must be positive", *slowDur > 0},
		{"-delay must be positive", d.delay > 0},
		{"-max-total must be positive", d.maxTotal > 0},
		{"-profile-seconds must not be negative", *profileSecs >= 0},
	} {
		if !c.ok {
			bad = append(bad, c.name)
		}
	}
	if _, err := filterScenarios(scenarios(*rate, *slowRate), *only); err != nil {
		bad = append(bad, err.Error())
	}
	if err := checkProfileKeys(scenarios(*rate, *slowRate), *profileKeys); err != nil {
		bad = append(bad, err.Error())
	}
	if flag.NArg() > 0 {
		bad = append(bad, fmt.Sprintf("unexpected arguments %q (every option is a -flag; see -h)", flag.Args()))
	}
	if len(bad) > 0 {
		fmt.Fprintln(os.Stderr, "loadcmp: "+strings.Join(bad, "; "))
		os.Exit(2)
	}
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, d.maxTotal)
	defer cancel()

	defer func() {
		if p := recover(); p != nil { // stop what was started, then crash as before
			for i := len(d.procs) - 1; i >= 0; i-- {
				d.procs[i].stop()
			}
			panic(p)
		}
	}()
	err := d.run(ctx, runOpts{rounds: *rounds, tput: *tputDur, fixed: *fixedDur, slow: *slowDur, rate: *rate, slowRate: *slowRate,
		workers: *workers, maxReq: *maxReq, profileSecs: *profileSecs, profileKeys: *profileKeys, only: *only})
	for i := len(d.procs) - 1; i >= 0; i-- {
		d.procs[i].stop()
	}
	switch {
	case d.work == "":
	case *keepWork || err != nil && len(d.procs) > 0:
		// Logs and records of a run that started something are kept
		// for a look at what went wrong.
		fmt.Fprintf(os.Stderr, "loadcmp: work dir kept: %s\n", d.work)
	default:
		_ = os.RemoveAll(d.work)
	}
	if err != nil && d.out != "" {
		// A failed run's results dir holds its log (loadcmp.log) and any
		// partial output: named, so it is neither lost nor left unseen.
		fmt.Fprintf(os.Stderr, "loadcmp: results dir (log of this run): %s\n", d.out)
	}
	switch {
	case err != nil && sigCtx.Err() != nil:
		fmt.Fprintln(os.Stderr, "loadcmp: interrupted; every process it started is stopped")
		os.Exit(130)
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(os.Stderr, "loadcmp: stopped after -max-total %s\n", d.maxTotal)
		os.Exit(1)
	case err != nil:
		fmt.Fprintf(os.Stderr, "loadcmp: %v\n", err)
		os.Exit(1)
	}
}

// checkProfileKeys: every -profile entry must be a scenario key (such as
// b or c/nokey); an empty list means no profiles.
func checkProfileKeys(all []*scenario, keys string) error {
	known := map[string]bool{}
	for _, s := range all {
		known[s.Key] = true
	}
	var unknown []string
	for _, k := range strings.Split(keys, ",") {
		if k = strings.TrimSpace(k); k != "" && !known[k] {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("-profile: %s names no scenario (scenario keys such as b, c/nokey, d/ed25519)", strings.Join(unknown, ", "))
	}
	return nil
}

type runOpts struct {
	rounds            int
	tput, fixed, slow time.Duration
	rate, slowRate    int
	workers, maxReq   int
	profileSecs       int
	profileKeys, only string
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

func (d *driver) run(ctx context.Context, o runOpts) error {
	var err error
	if d.work, err = os.MkdirTemp("", "rcns-bench-work."); err != nil {
		return err
	}
	if d.out == "" {
		if d.out, err = os.MkdirTemp("", "rcns-bench."); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(d.out, "profiles"), 0o755); err != nil {
		return err
	}
	lf, err := os.Create(filepath.Join(d.out, "loadcmp.log"))
	if err != nil {
		return err
	}
	defer lf.Close()
	d.log = lf
	d.caddy, d.upstream, d.caddyfile, d.docs = abs(d.caddy), abs(d.upstream), abs(d.caddyfile), abs(d.docs)
	if p, err := exec.LookPath(d.vegeta); err == nil {
		d.vegeta = p
	} else {
		return fmt.Errorf("vegeta: %v", err)
	}

	// Ed25519 record key, as an operator makes one.
	d.keyPath = filepath.Join(d.work, "record-key.pem")
	if out, err := exec.CommandContext(ctx, "openssl", "genpkey", "-algorithm", "ed25519", "-out", d.keyPath).CombinedOutput(); err != nil {
		return fmt.Errorf("openssl genpkey: %v: %s", err, out)
	}

	say("==> upstream")
	if d.upAddr, err = d.startUpstream(); err != nil {
		return err
	}
	d.ports = map[string]int{}
	adminPort, err := freePort()
	if err != nil {
		return err
	}
	d.admin = fmt.Sprintf("127.0.0.1:%d", adminPort)
	for _, v := range []string{vNone, vNoKey, vEd25519, vGroup, vHeaders, vExchange} {
		if d.ports[v], err = freePort(); err != nil {
			return err
		}
	}
	env := []string{
		"BENCH_ADMIN=" + d.admin, "BENCH_UPSTREAM=" + d.upAddr, "BENCH_DOCS=" + d.docs, "BENCH_WORK=" + d.work,
		"BENCH_KEY=" + d.keyPath, "BENCH_PROXY_PORT=" + itoa(d.ports[vNone]), "BENCH_GW_PORT=" + itoa(d.ports[vNoKey]),
		"BENCH_GWKEY_PORT=" + itoa(d.ports[vEd25519]), "BENCH_GWGRP_PORT=" + itoa(d.ports[vGroup]),
		"BENCH_HDR_PORT=" + itoa(d.ports[vHeaders]), "BENCH_HDR_RECORD=" + staticRecord(tierBPayload),
		"BENCH_XCHG_PORT=" + itoa(d.ports[vExchange]), "BENCH_XCHG_RECORD=" + staticRecord(presentationPayload), "BENCH_XCHG_SYNTHESIS_ID=" + staticSynthesisID,
	}
	say("==> caddy (admin %s; proxy :%d, gateway :%d, gateway+Ed25519 :%d, gateway fsync group :%d, (bh) headers :%d, (bd) exchange :%d)",
		d.admin, d.ports[vNone], d.ports[vNoKey], d.ports[vEd25519], d.ports[vGroup], d.ports[vHeaders], d.ports[vExchange])
	if err := d.startCaddy(env); err != nil {
		return err
	}

	scens, err := filterScenarios(scenarios(o.rate, o.slowRate), o.only)
	if err != nil {
		return err
	}
	if err := d.sanity(ctx, scens); err != nil {
		return err
	}
	res := &results{Meta: d.meta(o), Runs: map[string][]*runResult{}}

	// Warm-up: one short closed-loop run per scenario sizes the
	// throughput runs (N = 1.5 × rate × duration, bounded).
	say("==> warm-up")
	sizes := map[string]int{}
	for _, s := range scens {
		st, err := d.one(ctx, s, "w", 0, o.workers, min(o.maxReq, 20000), time.Second)
		if err != nil {
			return fmt.Errorf("warm-up %s: %v", s.Key, err)
		}
		sizes[s.Key] = max(500, min(o.maxReq, int(math.Ceil(1.5*st.Tput*o.tput.Seconds()))))
		say("    %-12s %8.0f req/s", s.Key, st.Tput)
	}

	var tputScens, fixedScens []*scenario
	for _, s := range scens {
		if s.Tput {
			tputScens = append(tputScens, s)
		}
		if s.Rate > 0 {
			fixedScens = append(fixedScens, s)
		}
	}
	// Each round runs every scenario once, in an order rotated every round,
	// with a run of (b) before the first and after each one: a scenario is
	// compared with the mean of the two (b) runs around it, so that drift
	// in the machine's other load cancels as far as it can.
	var bScen *scenario
	for _, s := range scens {
		if s.Key == "b" {
			bScen = s
		}
	}
	runB := func(phase string, r int, rate, n int, dur time.Duration) (*stats, error) {
		st, err := d.one(ctx, bScen, phase[:1], rate, o.workers, n, dur)
		if err != nil {
			return nil, fmt.Errorf("round %d b %s: %v", r+1, phase, err)
		}
		res.add(phase, bScen, r, st, nil)
		return st, nil
	}
	for r := 0; r < o.rounds; r++ {
		say("==> round %d/%d", r+1, o.rounds)
		order := rotate(without(tputScens, bScen), r)
		prev, err := runB("tput", r, 0, sizes["b"], o.tput)
		if err != nil {
			return err
		}
		for _, s := range order {
			st, err := d.one(ctx, s, "t", 0, o.workers, sizes[s.Key], o.tput)
			if err != nil {
				return fmt.Errorf("round %d %s throughput: %v", r+1, s.Key, err)
			}
			next, err := runB("tput", r, 0, sizes["b"], o.tput)
			if err != nil {
				return err
			}
			ref := meanStats(prev, next)
			res.add("tput", s, r, st, ref)
			say("    tput  %-12s %8.0f req/s (×%.2f b)  p50 %6.2f ms  p99 %6.2f ms  cpu %4.0f µs/req  other load %.2f cores  ok %d/%d",
				s.Key, st.Tput, st.Tput/ref.Tput, st.P50, st.P99, st.CaddyCPU, st.ForeignCores, st.OK, st.Requests)
			prev = next
		}
		nFixed := int(math.Ceil(float64(o.rate) * o.fixed.Seconds()))
		order = rotate(without(fixedScens, bScen), r)
		if prev, err = runB("fixed", r, o.rate, nFixed, o.fixed); err != nil {
			return err
		}
		for _, s := range order {
			dur := o.fixed
			slow := s.Letter == "e1" || s.Letter == "e3"
			if slow {
				dur = o.slow
			}
			n := int(math.Ceil(float64(s.Rate) * dur.Seconds()))
			st, err := d.one(ctx, s, "r", s.Rate, o.workers, n, dur)
			if err != nil {
				return fmt.Errorf("round %d %s fixed rate: %v", r+1, s.Key, err)
			}
			var ref *stats
			if !slow {
				next, err := runB("fixed", r, o.rate, nFixed, o.fixed)
				if err != nil {
					return err
				}
				ref = meanStats(prev, next)
				prev = next
			}
			res.add("fixed", s, r, st, ref)
			say("    rate  %-12s %5d/s  p50 %6.2f ms  p99 %6.2f ms  other load %.2f cores  ok %d/%d", s.Key, s.Rate, st.P50, st.P99, st.ForeignCores, st.OK, st.Requests)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := res.write(d.out, scens); err != nil {
		return err
	}
	if o.profileSecs > 0 {
		if err := d.profiles(ctx, scens, o); err != nil {
			return err
		}
	}
	if o.profileSecs > 0 {
		say("==> results: %s/report.md, %s/results.json, profiles in %s/profiles", d.out, d.out, d.out)
	} else {
		say("==> results: %s/report.md, %s/results.json (no profiles: -profile-seconds 0)", d.out, d.out)
	}
	return nil
}

// one runs scenario s once: it synthesizes the contract to present (when
// s presents one) and attacks.
func (d *driver) one(ctx context.Context, s *scenario, phase string, rate, workers, n int, dur time.Duration) (*stats, error) {
	tag := d.tag(phase)
	extra := map[string]string{}
	if s.Contract {
		id, err := d.synthesize(ctx, s, tag)
		if err != nil {
			return nil, err
		}
		extra["Contract-Synthesized"] = id
	}
	st, err := d.attack(ctx, attackSpec{URLBase: d.base(s), Scen: s, Tag: tag, N: n, Duration: dur, Rate: rate, Workers: workers, Headers: extra})
	if err != nil {
		return nil, err
	}
	if rate == 0 {
		st.lats = nil // throughput runs: only their summary is used
	}
	if st.OK < st.Requests*99/100 {
		return st, fmt.Errorf("%s: only %d of %d answers had status %d: %v %v", s.Key, st.OK, st.Requests, s.Want, st.Codes, st.Errors)
	}
	return st, nil
}

// synthesize makes the contract s presents: one optimistic synthesis
// (263) on the run's own path.
func (d *driver) synthesize(ctx context.Context, s *scenario, tag string) (string, error) {
	hdr := map[string]string{}
	for k, v := range s.Headers {
		hdr[k] = v
	}
	hdr["Allow-RCNS"] = "true"
	hdr["Authority-Scope"] = scopeNegotiate
	resp, body, err := request(ctx, s.Method, d.base(s)+s.pathFor(tag, -1), hdr, s.Body)
	if err != nil {
		return "", err
	}
	id := resp.Header.Get("Contract-Synthesized")
	if resp.StatusCode != 263 || id == "" {
		return "", fmt.Errorf("synthesis for %s: %d %s", s.Key, resp.StatusCode, body)
	}
	return id, nil
}

// sanity sends each scenario once and checks its status and record form.
func (d *driver) sanity(ctx context.Context, scens []*scenario) error {
	say("==> sanity check")
	sizes := map[string]int{} // key → response header bytes
	for _, s := range scens {
		tag := d.tag("s")
		hdr := map[string]string{}
		for k, v := range s.Headers {
			hdr[k] = v
		}
		if s.Contract {
			id, err := d.synthesize(ctx, s, tag)
			if err != nil {
				return err
			}
			hdr["Contract-Synthesized"] = id
		}
		resp, body, err := request(ctx, s.Method, d.base(s)+s.pathFor(tag, 0), hdr, s.Body)
		if err != nil {
			return fmt.Errorf("%s: %v", s.Key, err)
		}
		if resp.StatusCode != s.Want {
			return fmt.Errorf("%s: status %d, want %d: %s", s.Key, resp.StatusCode, s.Want, body)
		}
		alg := ""
		if rec := resp.Header.Get("Attribution-Record"); rec != "" {
			alg = jwsAlg(rec)
		}
		wantAlg := map[string]string{vNone: "", vNoKey: "none", vEd25519: "EdDSA", vGroup: "none", vHeaders: "none", vExchange: "none"}[s.Variant]
		if s.Letter == "b2" {
			wantAlg = "" // passthrough: not AGTP, no record
		}
		if alg != wantAlg {
			return fmt.Errorf("%s: Attribution-Record alg %q, want %q", s.Key, alg, wantAlg)
		}
		sizes[s.Key] = headerBytes(resp.Header)
		say("    %-12s %d %s %s (response headers %d bytes)", s.Key, resp.StatusCode, s.Method, s.pathFor(tag, 0), sizes[s.Key])
	}
	return checkReferenceSizes(sizes)
}

// referenceOf maps each reference scenario to the gateway scenario whose
// response headers it imitates with static values.
var referenceOf = map[string]string{"bh": "c/nokey", "bd": "d/nokey"}

// checkReferenceSizes fails when a reference site's response headers
// are more than 10% larger or smaller than those of the answer it
// imitates (when both ran): a reference that drifted from the product's
// wire form would no longer measure what its row says.
func checkReferenceSizes(sizes map[string]int) error {
	for ref, of := range referenceOf {
		r, okR := sizes[ref]
		o, okO := sizes[of]
		if !okR || !okO {
			continue
		}
		if diff := math.Abs(float64(r-o)) / float64(o); diff > 0.10 {
			return fmt.Errorf("(%s) answers with %d bytes of response headers, (%s) with %d: more than 10%% apart; update the static values in scripts/bench/Caddyfile and loadcmp", ref, r, of, o)
		}
	}
	return nil
}

// headerBytes is the size of a response's header fields as sent
// ("Name: value\r\n" each), Date excluded (its length never changes).
func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		if k == "Date" {
			continue
		}
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// Payloads of the static Attribution-Records the reference sites send:
// tierBPayload is what a Tier B answer of the nokey site carries ((bh)),
// presentationPayload what a contract presentation's carries ((bd):
// the three RCNS fields added, method LOOKUP), with fixed values of the
// same lengths (agtp-09 §4, RCNS §16).
const (
	tierBPayload = `{"agent_id":"` + agentID + `","audit_record_version":"1","issued_at":"2026-11-30T01:54:16.067513567Z",` +
		`"method":"FETCH","owner_id":"bench-ops","previous_audit_id":"c702104dd51e493b2c6bfaac62a44b4a149fd5fcbc24a638471a96f3a85ea413",` +
		`"request_hash":"9b3e7f0c2d41a8e65f1c0b7d93a2e4f6018c5d7b9e3a6f2c4d8b1e07a5c3f962","request_id":"01a22a28-f182-7dc1-9f6f-6367c011e8a6","response_id":"01a22a28-f183-77c5-aefe-0ada48d5c190",` +
		`"server_id":"rcns-bench-nokey","status":200}`
	presentationPayload = `{"agent_id":"` + agentID + `","audit_record_version":"1",` +
		`"contract_hash":"db24347ca27e259ad43300a35c41542e7ceb507ee667b81f2534ec47d555f843","issued_at":"2026-11-30T07:04:28.328590465Z",` +
		`"method":"LOOKUP","negotiation_origin":"rcns-gate","owner_id":"bench-ops","previous_audit_id":"ea4c142fa5b9829813e808ebcfa88ebd62928b918e73ffbba6da2a64eef2147a",` +
		`"request_hash":"4f0a9c3e7b21d5846e9f1a0c3b7d2e58a6c4f1093e7b5d2a8c6e4f1b3d9a0e72","request_id":"01a22b44-f1a7-7d05-b86c-2351b0307de5","response_id":"01a22b44-f1a8-78f9-a1ba-17ed85b2b939",` +
		`"server_id":"rcns-bench-nokey","status":200,"synthesis_id":"` + staticSynthesisID + `"}`
)

// staticRecord is an unsigned Attribution-Record (JWS compact, alg none)
// of the given payload, as a reference site sends it.
func staticRecord(payload string) string {
	head := `{"alg":"none","typ":"agtp-attribution+jwt"}`
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(head)) + "." + enc([]byte(payload)) + "."
}

func jwsAlg(compact string) string {
	head, _, _ := strings.Cut(compact, ".")
	raw, err := b64url(head)
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

func without(list []*scenario, drop *scenario) []*scenario {
	var out []*scenario
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}

func rotate(list []*scenario, r int) []*scenario {
	if len(list) == 0 {
		return nil
	}
	k := r % len(list)
	return append(append([]*scenario(nil), list[k:]...), list[:k]...)
}

// meanStats is the reference a scenario run is compared with, from the
// (b) runs a and b before and after it: the mean of each number, and the
// latencies of both runs together.
func meanStats(a, b *stats) *stats {
	return &stats{Tput: (a.Tput + b.Tput) / 2, P50: (a.P50 + b.P50) / 2, P90: (a.P90 + b.P90) / 2, P99: (a.P99 + b.P99) / 2,
		Mean: (a.Mean + b.Mean) / 2, CaddyCPU: (a.CaddyCPU + b.CaddyCPU) / 2, ForeignCores: (a.ForeignCores + b.ForeignCores) / 2,
		lats: pool(a.lats, b.lats)}
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// meta describes the machine and the tools.
func (d *driver) meta(o runOpts) map[string]any {
	if d.vegetaVersion == "" {
		d.vegetaVersion = strings.TrimSpace(strings.ReplaceAll(cmdOut(d.vegeta, "-version"), "\n", " "))
	}
	m := map[string]any{
		"date":       time.Now().UTC().Format(time.RFC3339),
		"nproc":      runtime.NumCPU(),
		"cpu_model":  cpuModel(),
		"kernel":     strings.TrimSpace(cmdOut("uname", "-sr")),
		"go":         strings.TrimSpace(cmdOut("go", "version")),
		"caddy":      strings.TrimSpace(cmdOut(d.caddy, "version")),
		"vegeta":     d.vegetaVersion,
		"command":    strings.Join(os.Args, " "),
		"rounds":     o.rounds,
		"workers":    o.workers,
		"rate":       o.rate,
		"slow_rate":  o.slowRate,
		"tput_s":     o.tput.Seconds(),
		"fixed_s":    o.fixed.Seconds(),
		"slow_s":     o.slow.Seconds(),
		"delay":      d.delay.String(),
		"loadavg":    strings.TrimSpace(readFile("/proc/loadavg")),
		"gomaxprocs": runtime.GOMAXPROCS(0),
	}
	return m
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
