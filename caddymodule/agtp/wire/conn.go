package wire

import (
	"io"
	"net"
	"time"
)

// DefaultLinger is how long LingerClose waits for the peer to finish
// sending (net/http's rstAvoidanceDelay for the same purpose, 500 ms).
const DefaultLinger = 500 * time.Millisecond

// LingerClose closes a server connection after an answer that ends it
// (a framing refusal, a 413, a body not drained), so that the answer
// is read rather than lost: closing a TCP socket with unread input
// sends a reset, which can discard the answer still in the peer's
// receive buffer. On a plain TCP connection it first shuts down the
// write side (the peer reads the answer, then EOF), as net/http does;
// on any other (TLS: the bindings draft forbids TLS half-close) it
// does not. It then reads and drops what the peer still sends, at most
// max bytes and for at most d (0 means DefaultLinger), and closes c.
func LingerClose(c net.Conn, d time.Duration, max int64) error {
	if d <= 0 {
		d = DefaultLinger
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	if err := c.SetReadDeadline(time.Now().Add(d)); err == nil {
		_, _ = io.CopyN(io.Discard, c, max)
	}
	return c.Close()
}
