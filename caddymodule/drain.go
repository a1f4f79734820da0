package caddymodule

import (
	"net"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// The native door drains a refused request's body as the HTTP door
// does (httpdoor.Drain has the why, cases/05), within the same
// refused_body_drain bounds.

// closeNative closes a native connection after a written answer that
// refused a request before its body was read. req is the refused
// request, nil when the codec refused its head (what follows is then
// unknown).
//
// With req, on plain TCP the write side is shut down first, so the
// client reads the answer and then EOF while it may still be sending;
// the rest of the declared body is then read and discarded, within
// b.Timeout, and the connection closes with wire.LingerClose's default
// linger. A rest over b.Max is not read, as no drain can save it. Without
// req, wire.LingerClose reads and discards what the client still sends
// until it closes, b.Max bytes, or b.Timeout.
func closeNative(b engine.DrainBounds, conn net.Conn, req *wire.Request) {
	switch {
	case req == nil:
		_ = wire.LingerClose(conn, b.Timeout, b.Max)
		return
	case req.BodyRemaining() > b.Max:
		_ = wire.LingerClose(conn, 0, wire.DefaultMaxDrain)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	if conn.SetReadDeadline(time.Now().Add(b.Timeout)) != nil || req.DiscardBody(b.Max) != nil {
		_ = conn.Close()
		return
	}
	_ = wire.LingerClose(conn, 0, wire.DefaultMaxDrain)
}
