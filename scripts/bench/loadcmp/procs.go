package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// start runs bin with args, its stderr to logFile, env added to ours.
func (d *driver) start(name, logFile string, env []string, bin string, args ...string) (*proc, io.ReadCloser, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = f
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	d.procs = append(d.procs, p)
	fmt.Fprintf(d.log, "started %s (pid %d): %s %s\n", name, cmd.Process.Pid, bin, strings.Join(args, " "))
	return p, stdout, nil
}

// stop sends SIGTERM to the process, then SIGKILL after 5 s.
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

func (p *proc) pid() int { return p.cmd.Process.Pid }

// cpuReading is a process's CPU time at one moment, read two ways:
// Tasks, each thread's time on a CPU in ns (first field of
// /proc/PID/task/TID/schedstat), and Ticks, the whole process's
// user+system time in clock ticks (/proc/PID/stat fields 14 and 15,
// which also hold the threads that have exited).
type cpuReading struct {
	Tasks map[int]int64
	Ticks int64
}

// readCPU reads pid's cpuReading from procRoot (/proc).
func readCPU(procRoot string, pid int) (cpuReading, error) {
	base := filepath.Join(procRoot, strconv.Itoa(pid))
	raw, err := os.ReadFile(filepath.Join(base, "stat"))
	if err != nil {
		return cpuReading{}, err
	}
	ticks, err := parseStatTicks(string(raw))
	if err != nil {
		return cpuReading{}, fmt.Errorf("%s/stat: %v", base, err)
	}
	r := cpuReading{Tasks: map[int]int64{}, Ticks: ticks}
	ents, err := os.ReadDir(filepath.Join(base, "task"))
	if err != nil {
		return cpuReading{}, err
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(base, "task", e.Name(), "schedstat"))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited while the directory was read
		}
		if err != nil {
			return cpuReading{}, err
		}
		ns, err := parseSchedstat(string(raw))
		if err != nil {
			return cpuReading{}, fmt.Errorf("%s/task/%d/schedstat: %v", base, tid, err)
		}
		r.Tasks[tid] = ns
	}
	return r, nil
}

// parseStatTicks returns utime+stime (clock ticks) of a /proc/PID/stat
// line. The command name, in parentheses, may hold spaces and ')'.
func parseStatTicks(s string) (int64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || ut < 0 || st < 0 {
		return 0, fmt.Errorf("utime %q, stime %q are not tick counts", f[11], f[12])
	}
	return ut + st, nil
}

// parseSchedstat returns the first field of a schedstat line: time on
// a CPU in ns.
func parseSchedstat(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, fmt.Errorf("%d fields, want 3", len(f))
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("run time %q is not a count of ns", f[0])
	}
	return ns, nil
}

// cpuSeconds is the CPU time a process spent between readings a and b,
// in seconds, and which reading gave it: "schedstat" (ns) when every
// thread of a is still there in b (a thread started in between counts
// whole), else "stat" (clock ticks of clk per second), since the time
// of a thread that exited is in stat only.
func cpuSeconds(a, b cpuReading, clk float64) (float64, string) {
	var ns int64
	for tid, v := range b.Tasks {
		ns += v - a.Tasks[tid]
	}
	for tid := range a.Tasks {
		if _, ok := b.Tasks[tid]; !ok {
			return float64(b.Ticks-a.Ticks) / clk, "stat"
		}
	}
	return float64(ns) / 1e9, "schedstat"
}

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

// machineBusy returns the CPU seconds all CPUs spent busy (user, nice,
// system, irq, softirq, steal) since boot, from /proc/stat.
func machineBusy() (float64, error) {
	fh, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	line, err := bufio.NewReader(fh).ReadString('\n')
	if err != nil {
		return 0, err
	}
	fl := strings.Fields(line)
	if len(fl) < 9 || fl[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q", line)
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseFloat(fl[i], 64)
		if err != nil {
			return 0, err
		}
		busy += v
	}
	return busy / clockTicks, nil
}

// selfCPU is this process's user+system CPU seconds so far.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// startRedis starts the redis site's redis-server on a free loopback
// port, without persistence (the bench measures the store's round
// trips, not a disk) and with maxmemory-policy noeviction as
// docs/cluster.md asks, and waits until it answers PING.
func (d *driver) startRedis(ctx context.Context) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	say("==> redis-server %s", addr)
	p, stdout, err := d.start("redis", d.work+"/redis.log", nil, d.redisServer,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--maxmemory-policy", "noeviction", "--dir", d.work)
	if err != nil {
		return "", fmt.Errorf("redis-server (-redis-server %s; make deps installs it in .tools/bin): %v", d.redisServer, err)
	}
	d.redisProc = p
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pingRedis(ctx, addr) == nil {
			return addr, nil
		}
		if p.exited() || time.Now().After(deadline) {
			return "", fmt.Errorf("redis-server on %s did not answer PING; see %s/redis.log", addr, d.work)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pingRedis sends one inline PING and wants +PONG.
func pingRedis(ctx context.Context, addr string) error {
	var nd net.Dialer
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := nd.DialContext(cctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
