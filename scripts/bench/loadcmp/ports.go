package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// givenPorts are the ports freePort has returned: never twice, since
// Caddy binds with SO_REUSEPORT and two of its listeners on one port
// would both bind and share the connections.
var givenPorts = map[int]bool{}

// freePort returns a loopback port that was free a moment ago, that it
// has not returned before, and that lies below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range): the load's own connections take
// their source ports from that range, tens of thousands of them a run,
// and one could take a port between freePort and the server binding it.
// It picks from 10000 up to 20000 or the range's low end; when that
// leaves no room, or 200 picks are taken, a port the kernel picks.
func freePort() (int, error) {
	hi := min(ephemeralLow(), 20000)
	const floor = 10000
	if hi-floor >= 1000 {
		for range 200 {
			port := floor + rand.IntN(hi-floor)
			if givenPorts[port] {
				continue
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				continue // taken
			}
			ln.Close()
			givenPorts[port] = true
			return port, nil
		}
	}
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !givenPorts[port] {
			givenPorts[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port found")
}

// ephemeralLow is the low end of the kernel's ephemeral port range,
// 32768 (Linux's default) when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 {
		return 32768
	}
	return n
}
