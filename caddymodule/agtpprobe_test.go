//go:build linux

package caddymodule

import (
	"context"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"golang.org/x/sys/unix"
)

// TestNativeAddressOfAnotherProcess: a native listen address another
// process listens on with SO_REUSEPORT (a second gateway, as Caddy
// listens) is refused at start, naming the cause, where the native
// door shared the port with it silently (helper-127: two gateways on
// one port split its connections). The other listener here is this
// process's own but not the door's, as another process's would be. A
// free address, one the door already listens on (a reload), and the
// same port spelt another way (a reload to localhost) start.
func TestNativeAddressOfAnotherProcess(t *testing.T) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	other, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	port := other.Addr().(*net.TCPAddr).Port
	na, err := caddy.ParseNetworkAddress("127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	ctx := benchContext(t)
	if _, err := acquireSocket(ctx, na, &AGTPServer{Handler: "second"}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("listening beside another process's SO_REUSEPORT socket: %v, want refused", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}

	first, second := &AGTPServer{Handler: "first"}, &AGTPServer{Handler: "reload"}
	sock, err := acquireSocket(ctx, na, first)
	if err != nil {
		t.Fatalf("a free address: %v", err)
	}
	if again, err := acquireSocket(ctx, na, second); err != nil || again != sock {
		t.Fatalf("a reload on the door's own socket: %v (same socket: %v)", err, again == sock)
	}
	// A reload that spells the address another way opens it beside the
	// door's own socket, as before the probe (helper-128).
	respelled, err := caddy.ParseNetworkAddress("localhost:" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	third := &AGTPServer{Handler: "respelled"}
	other2, err := acquireSocket(ctx, respelled, third)
	if err != nil {
		t.Fatalf("a reload respelling the door's own address: %v", err)
	}
	other2.release(third)
	sock.release(second)
	sock.release(first)
}
