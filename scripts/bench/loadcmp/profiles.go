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
	"strings"
	"time"
)

// profiles runs each listed scenario closed-loop while Caddy's admin
// endpoint records a CPU profile, and snapshots the allocation profile
// before and after; `go tool pprof -top` summaries go next to them.
func (d *driver) profiles(ctx context.Context, scens []*scenario, o runOpts) error {
	want := map[string]bool{}
	for _, k := range strings.Split(o.profileKeys, ",") {
		want[strings.TrimSpace(k)] = true
	}
	dir := filepath.Join(d.out, "profiles")
	var summary strings.Builder
	summary.WriteString("# CPU profiles of the Caddy process under closed-loop load\n\n" +
		"One profiled run per scenario after the rounds, each alone (no (b) run around it): its req/s is that single run's, " +
		"not comparable with the per-round ratios of the tables above.\n\n")
	for _, s := range scens {
		if !want[s.Key] {
			continue
		}
		name := strings.ReplaceAll(s.Key, "/", "-")
		say("==> profile %s (%ds)", s.Key, o.profileSecs)
		before := filepath.Join(dir, name+".allocs-before.pprof")
		if err := d.fetch(ctx, "/debug/pprof/allocs", before, 30*time.Second); err != nil {
			return err
		}
		dur := time.Duration(o.profileSecs)*time.Second + 1500*time.Millisecond
		done := make(chan error, 1)
		var st *stats
		go func() {
			var err error
			st, err = d.one(ctx, s, "p", 0, o.workers, o.maxReq, dur)
			done <- err
		}()
		time.Sleep(500 * time.Millisecond)
		cpu := filepath.Join(dir, name+".cpu.pprof")
		perr := d.fetch(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", o.profileSecs), cpu, time.Duration(o.profileSecs+30)*time.Second)
		if err := <-done; err != nil {
			return fmt.Errorf("profile run %s: %v", s.Key, err)
		}
		if perr != nil {
			return perr
		}
		after := filepath.Join(dir, name+".allocs-after.pprof")
		if err := d.fetch(ctx, "/debug/pprof/allocs", after, 30*time.Second); err != nil {
			return err
		}
		d.pprofTop(ctx, filepath.Join(dir, name+".cpu.top.txt"), "-top", "-nodecount=40", cpu)
		d.pprofTop(ctx, filepath.Join(dir, name+".cpu.cum.txt"), "-top", "-cum", "-nodecount=60", cpu)
		d.pprofTop(ctx, filepath.Join(dir, name+".alloc_space.top.txt"), "-top", "-nodecount=40", "-sample_index=alloc_space", "-base", before, after)
		d.pprofTop(ctx, filepath.Join(dir, name+".alloc_space.cum.txt"), "-top", "-cum", "-nodecount=60", "-sample_index=alloc_space", "-base", before, after)
		cum := d.pprofTop(ctx, "", "-top", "-cum", "-nodecount=800", cpu)
		fmt.Fprintf(&summary, "## %s — %s\n\n%.0f req/s, Caddy CPU %.0f µs/request (/proc, whole run)\n\n```\n", s.Key, s.Label, st.Tput, st.CaddyCPU)
		for i, l := range strings.Split(cum, "\n") {
			if i < 6 && strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "File:") && !strings.HasPrefix(l, "Build ID") {
				summary.WriteString(l + "\n")
				continue
			}
			if interesting.MatchString(l) {
				summary.WriteString(l + "\n")
			}
		}
		summary.WriteString("```\n\n")
	}
	return os.WriteFile(filepath.Join(dir, "summary.md"), []byte(summary.String()), 0o644)
}

// interesting selects the lines of `pprof -top -cum` kept in summary.md:
// this module's frames, the libraries it calls per request, and the
// runtime's allocation, GC and syscall totals.
var interesting = regexp.MustCompile(`caddy-rcns|gowebpki/jcs\.Transform|jsonschema/v6\.\(\*Schema\)\.Validate$|gojq\.\(\*Code\)|ed25519\.Sign$|zap\.\(\*Logger\)\.(Info|Warn)$|encoding/json\.Marshal$|encoding/json\.\(\*Decoder\)\.Decode$|prometheus.*WithLabelValues$|google/uuid\.NewV7$|runtime\.gcBgMarkWorker$|runtime\.mallocgc$|linux\.Syscall6$|reverseproxy\.\(\*Handler\)\.ServeHTTP$|caddyhttp\.\(\*Server\)\.ServeHTTP$`)

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
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// pprofTop writes `go tool pprof <args>` output (with the Caddy binary
// for symbols) to file (none when file is "") and returns it; failures
// are logged, not fatal.
func (d *driver) pprofTop(ctx context.Context, file string, args ...string) string {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	full := append([]string{"tool", "pprof"}, args[:len(args)-1]...)
	full = append(full, d.caddy, args[len(args)-1])
	out, err := exec.CommandContext(cctx, "go", full...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(d.log, "go %s: %v\n%s\n", strings.Join(full, " "), err, out)
	}
	if file != "" {
		_ = os.WriteFile(file, out, 0o644)
	}
	return string(out)
}
