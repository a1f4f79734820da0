package main

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeralRange: the ports the load comparison's
// servers get lie below the kernel's ephemeral range, from which the
// load's own connections take their source ports, are never given
// twice, and were free.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo < 11000 {
		t.Skipf("the ephemeral range starts at %d: no room below it", lo)
	}
	seen := map[int]bool{}
	for range 50 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < 10000 || port >= min(lo, 20000) {
			t.Fatalf("freePort() = %d, want a port in [10000, %d)", port, min(lo, 20000))
		}
		if seen[port] {
			t.Fatalf("freePort() gave %d twice", port)
		}
		seen[port] = true
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d from freePort is not free: %v", port, err)
		}
		ln.Close()
	}
}
