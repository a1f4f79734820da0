package redistest

import (
	"strings"
	"testing"
)

func TestServerRestartsEmpty(t *testing.T) {
	s := StartServer(t)
	if r, err := Do(s.Addr(), "SET", "k", "v"); err != nil || r != "OK" {
		t.Fatalf("SET = %q, %v", r, err)
	}
	s.Restart()
	if r, err := Do(s.Addr(), "EXISTS", "k"); err != nil || r != "0" {
		t.Fatalf("EXISTS after restart = %q, %v; want 0 (no persistence)", r, err)
	}
	s.Stop()
	if _, err := Do(s.Addr(), "PING"); err == nil {
		t.Fatal("a stopped server answers")
	}
}

func TestClusterAndSentinelStart(t *testing.T) {
	c := StartCluster(t, 3)
	info, err := Do(c.Nodes[0].Addr(), "CLUSTER", "INFO")
	if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
		t.Fatalf("CLUSTER INFO = %q, %v", info, err)
	}
	g := StartSentinel(t)
	addr, err := g.MasterAddr()
	if err != nil || addr != g.Master.Addr() {
		t.Fatalf("master = %q, %v; want %s", addr, err, g.Master.Addr())
	}
}
