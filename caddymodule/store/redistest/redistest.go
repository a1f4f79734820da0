// Package redistest starts real Redis processes for tests: a single
// server, a Redis Cluster of masters, or a Sentinel group (a master, a
// replica and three sentinels), each on free loopback ports with its
// files in t.TempDir(), each stopped by t.Cleanup. It finds the binaries
// that `make deps` installs (scripts/install-redis.sh) in the module's
// .tools/bin, else on PATH; a test that cannot find them fails (CI
// installs them), it is never skipped.
//
// Servers run without persistence (no RDB, no AOF), so a restarted
// server starts empty, as a Redis that lost its data would.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/testproc"
)

// startTimeout bounds how long a server, a cluster or a sentinel group
// may take to become ready before the test fails.
const startTimeout = 30 * time.Second

// Binary returns the path of the named Redis binary ("redis-server",
// "redis-cli" or "redis-sentinel"): the module's .tools/bin/NAME when
// present, else NAME on PATH. It fails the test when neither exists and
// says how to install it.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if dir, ok := moduleRoot(); ok {
		p := filepath.Join(dir, ".tools", "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found in .tools/bin or PATH; run `make deps` (scripts/install-redis.sh)", name)
	}
	return p
}

// moduleRoot finds the directory holding go.mod above the working
// directory.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	// Port is the server's TCP port on 127.0.0.1.
	Port int

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// StartServer starts a redis-server with no persistence on a free port,
// plus args (redis.conf directives as flags, e.g. "--requirepass", "x"),
// and waits until it answers PING. It is stopped at the end of the test.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t, "redis-server"), dir: t.TempDir(), Port: freePort(t, false), args: args}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// start runs the process with the server's flags and waits for PING.
func (s *Server) start() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"),
		"--enable-debug-command", "local"}, s.args...)
	cmd := exec.Command(s.bin, args...)
	testproc.DieWithParent(cmd) // gone with a test binary that crashes
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", s.bin, err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	go func() { _ = cmd.Wait() }()
	s.waitPing()
}

// waitPing waits until the server answers PING (LOADING and
// authentication errors count as up).
func (s *Server) waitPing() {
	s.t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		reply, err := Do(s.Addr(), "PING")
		if err == nil && (reply == "PONG" || strings.HasPrefix(reply, "NOAUTH")) {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redistest: redis-server on %s did not answer PING within %v (%v %q); log:\n%s", s.Addr(), startTimeout, err, reply, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL, as a crash would) and waits for its
// port to close. Safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts the server again on the same port, empty (no
// persistence).
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Do sends one command to the server at addr over a fresh connection and
// returns its reply as text: a simple string or error (without its "+"
// or "-"), an integer, or a bulk string; arrays are joined with "\n".
// It is for test setup and checks, not for the store under test.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+', '-', ':':
		return line[1:], nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		parts := make([]string, n)
		for i := range parts {
			if parts[i], err = readReply(r); err != nil {
				return "", err
			}
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// freePort returns a TCP port on 127.0.0.1 nobody listens on; with bus,
// port+10000 (a cluster node's bus port) is free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		if lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
			lb.Close()
			return port
		}
	}
	t.Fatal("redistest: no free port pair for a cluster node")
	return 0
}

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	// Nodes are the masters, in creation order.
	Nodes []*Server
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// StartCluster starts n (≥ 3) cluster-enabled servers, joins them with
// `redis-cli --cluster create … --cluster-replicas 0 --cluster-yes`, and
// waits until every node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", n)
	}
	c := &Cluster{}
	bin := Binary(t, "redis-server")
	for range n {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), Port: freePort(t, true)}
		s.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000"}
		s.start()
		t.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(Binary(t, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range c.Nodes {
		for {
			info, err := Do(s.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok within %v: %v %q", s.Addr(), startTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Sentinel is a Sentinel group: a master, one replica and three
// sentinels monitoring the master under MasterName with quorum 2.
type Sentinel struct {
	// MasterName is the monitored master's name.
	MasterName string
	// Master and Replica are the data servers as started (after a
	// failover the replica is the master).
	Master, Replica *Server
	// Sentinels are the sentinel processes.
	Sentinels []*Server
}

// SentinelAddrs returns the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr()
	}
	return out
}

// StartSentinel starts a master, a replica of it, and three sentinels
// that declare the master down after 1 s without answers, and waits
// until every sentinel knows the replica and the other sentinels.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return StartSentinelDownAfter(t, time.Second)
}

// StartSentinelDownAfter is StartSentinel whose sentinels declare the
// master down after downAfter (whole milliseconds) without answers: a
// test that fails the master over wants it short, one that must not
// see a failover on a loaded machine long.
func StartSentinelDownAfter(t testing.TB, downAfter time.Duration) *Sentinel {
	t.Helper()
	g := &Sentinel{MasterName: "rcns-test"}
	g.Master = StartServer(t)
	g.Replica = StartServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(g.Master.Port))
	bin := Binary(t, "redis-server")
	for range 3 {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), Port: freePort(t, false)}
		conf := filepath.Join(s.dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\nsentinel down-after-milliseconds %[1]s %[3]d\nsentinel failover-timeout %[1]s 10000\nsentinel parallel-syncs %[1]s 1\n",
			g.MasterName, g.Master.Port, downAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		// Sentinel rejects --save and --appendonly; the config file comes
		// first, then the mode flag.
		s.startSentinel(conf)
		t.Cleanup(s.Stop)
		g.Sentinels = append(g.Sentinels, s)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range g.Sentinels {
		for {
			info, err := Do(s.Addr(), "SENTINEL", "MASTER", g.MasterName)
			if err == nil && field(info, "num-slaves") == "1" && field(info, "num-other-sentinels") == "2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel %s not ready within %v: %v %q", s.Addr(), startTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return g
}

// startSentinel runs the binary in sentinel mode with conf.
func (s *Server) startSentinel(conf string) {
	s.t.Helper()
	cmd := exec.Command(s.bin, conf, "--sentinel", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "sentinel.log"), "--daemonize", "no")
	testproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start sentinel: %v", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	go func() { _ = cmd.Wait() }()
	s.waitPing()
}

// MasterAddr asks the first sentinel that answers which address the
// master has now.
func (s *Sentinel) MasterAddr() (string, error) {
	var last error
	for _, sn := range s.Sentinels {
		reply, err := Do(sn.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		if err != nil {
			last = err
			continue
		}
		hp := strings.Split(reply, "\n")
		if len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		last = fmt.Errorf("reply %q", reply)
	}
	return "", last
}

// field reads name's value from a flat name\nvalue\n… reply.
func field(reply, name string) string {
	parts := strings.Split(reply, "\n")
	for i := 0; i+1 < len(parts); i += 2 {
		if parts[i] == name {
			return parts[i+1]
		}
	}
	return ""
}

// Pause stops the server process (SIGSTOP): it keeps its connections
// and its socket buffers, and runs what they hold once resumed, as a
// Redis that stalls does. Resume continues it (SIGCONT). A paused server
// is resumed before Stop kills it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		s.t.Fatalf("redistest: the server on %s is not running", s.Addr())
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v to %s: %v", sig, s.Addr(), err)
	}
}

// Usage is what a server has spent since it started, from its INFO:
// CPU is used_cpu_user + used_cpu_sys; Commands the commands it ran,
// inside scripts or not (the sum of commandstats' calls, the INFO that
// reads them included). Benchmarks read it before and after a loop to
// give the server's side per op.
type Usage struct {
	CPU      time.Duration
	Commands int64
}

// Usage reads the server's Usage; it fails the test when INFO does not
// answer or does not parse.
func (s *Server) Usage() Usage {
	s.t.Helper()
	reply, err := Do(s.Addr(), "INFO", "cpu", "commandstats")
	if err != nil {
		s.t.Fatalf("redistest: INFO on %s: %v", s.Addr(), err)
	}
	var u Usage
	for line := range strings.Lines(reply) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			secs, err := strconv.ParseFloat(value, 64)
			if err != nil {
				s.t.Fatalf("redistest: INFO %s: %v", line, err)
			}
			u.CPU += time.Duration(secs * float64(time.Second))
		case strings.HasPrefix(name, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				s.t.Fatalf("redistest: INFO %s: %v", line, err)
			}
			u.Commands += n
		}
	}
	return u
}

// PerOp reports u's growth to after over n ops on b: redis-cpu-ns/op
// and redis-cmds/op.
func (u Usage) PerOp(b *testing.B, after Usage, n int) {
	b.ReportMetric(float64(after.CPU-u.CPU)/float64(n), "redis-cpu-ns/op")
	b.ReportMetric(float64(after.Commands-u.Commands)/float64(n), "redis-cmds/op")
}
