package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process this driver started; stop ends it by its pid.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

func (d *driver) start(name string, logFile string, env []string, bin string, args ...string) (*proc, io.ReadCloser, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = f
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	d.procs = append(d.procs, p)
	fmt.Fprintf(d.log, "started %s (pid %d): %s %s\n", name, cmd.Process.Pid, bin, strings.Join(args, " "))
	return p, stdout, nil
}

// stop sends SIGTERM to the process this driver started, then SIGKILL
// after 5 s.
func (p *proc) stop() {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startUpstream starts the bench upstream and returns its host:port.
func (d *driver) startUpstream() (string, error) {
	p, stdout, err := d.start("upstream", d.work+"/upstream.log", nil, d.upstream,
		"-host", "127.0.0.1", "-port", "0", "-delay", d.delay.String(), "-max-lifetime", d.maxTotal.String())
	if err != nil {
		return "", err
	}
	d.upProc = p
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		p.stop()
		return "", fmt.Errorf("upstream did not print its address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	addr := strings.TrimSpace(line)
	if err := waitHTTP("http://"+addr+"/ready", 10*time.Second); err != nil {
		return "", err
	}
	return addr, nil
}

// startCaddy starts Caddy on scripts/bench/Caddyfile with the ports in env.
func (d *driver) startCaddy(env []string) error {
	env = append(env, "XDG_DATA_HOME="+d.work+"/xdg-data", "XDG_CONFIG_HOME="+d.work+"/xdg-config")
	p, stdout, err := d.start("caddy", d.work+"/caddy.log", env, d.caddy, "run", "--config", d.caddyfile, "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	d.caddyProc = p
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	deadline := time.Now().Add(60 * time.Second)
	for _, u := range []string{"http://" + d.admin + "/config/", d.url(vNone, false) + "/ready", d.url(vNoKey, false) + "/ready",
		d.url(vEd25519, false) + "/ready", d.url(vGroup, false) + "/ready", d.url(vHeaders, false) + "/ready",
		d.url(vExchange, false) + "/ready"} {
		for {
			if p.exited() {
				return fmt.Errorf("caddy exited; see %s/caddy.log", d.work)
			}
			if err := waitHTTP(u, 500*time.Millisecond); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("caddy not ready at %s; see %s/caddy.log", u, d.work)
			}
		}
	}
	return nil
}

func waitHTTP(url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return nil
			}
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// request sends one request with the Go client (contract synthesis and
// sanity checks).
func request(ctx context.Context, method, url string, hdr map[string]string, body string) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, raw, err
}

func itoa(n int) string { return strconv.Itoa(n) }

// clockTicks is USER_HZ, the unit of /proc/PID/stat times.
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || v <= 0 {
		return 100
	}
	return v
}()

// caddyCPU returns the Caddy process's user+system CPU seconds so far,
// or -1.
func (d *driver) caddyCPU() float64 { return procCPU(d.caddyProc) }

// upstreamCPU is caddyCPU for the bench upstream.
func (d *driver) upstreamCPU() float64 { return procCPU(d.upProc) }

// procCPU returns a child's user+system CPU seconds so far, or -1.
func procCPU(p *proc) float64 {
	if p == nil || p.cmd.Process == nil {
		return -1
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (ut + st) / clockTicks
}

// machineBusy returns the CPU seconds all CPUs spent busy (user, nice,
// system, irq, softirq, steal) since boot, from /proc/stat, or -1.
func machineBusy() float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return -1
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return -1
		}
		busy += v
	}
	return busy / clockTicks
}
