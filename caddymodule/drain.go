package caddymodule

import (
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// A refusal written before the request's declared body was read
// (agtp.Response.Close: 413 body-too-large, a refused head or framing)
// ends the connection. Closing a TCP socket that still holds unread
// input makes the kernel answer with a reset, and a client that writes
// its whole body before it reads (Python's http.client, many SDKs) is
// still writing when the answer leaves: the reset reaches it first and
// takes the answer out of its receive buffer (cases/05). So after such
// an answer each door reads and discards the rest of the body, within
// refused_body_drain bytes and refused_body_drain_timeout, and only then
// closes: the client reads its answer, and nobody holds the connection
// open past those bounds.

// Defaults of refused_body_drain and refused_body_drain_timeout.
const (
	defaultRefusedBodyDrain        = 128 << 20
	defaultRefusedBodyDrainTimeout = 10 * time.Second
)

// drainBounds are the refused_body_drain bounds: at most max bytes, for
// at most timeout after the answer.
type drainBounds struct {
	max     int64
	timeout time.Duration
}

// refusedBodyDrain returns the drain bounds of the engine e; the
// defaults when e is nil (a native listener whose handler is gone).
func refusedBodyDrain(e *engine) drainBounds {
	b := drainBounds{max: defaultRefusedBodyDrain, timeout: defaultRefusedBodyDrainTimeout}
	if e != nil {
		if e.RefusedBodyDrain > 0 {
			b.max = e.RefusedBodyDrain
		}
		if e.RefusedBodyDrainTimeout > 0 {
			b.timeout = time.Duration(e.RefusedBodyDrainTimeout)
		}
	}
	return b
}

// drainHTTP finishes an HTTP/1 answer written before r's body was read
// (it says Connection: close, writeHTTP): it sends the answer, then reads
// and discards the rest of the body, at most b.max bytes within
// b.timeout, so that net/http closes a connection with nothing unread
// (it shuts its write side down and waits 500 ms first). It reads
// nothing when a body of more than b.max bytes is declared, which no
// drain can save; when the client sent Expect: 100-continue and was
// never asked for its body, which it then does not send; and on HTTP/2,
// whose unread stream is reset alone.
func (b drainBounds) drainHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody || r.ContentLength > b.max || expectsContinue(r) {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil || rc.SetReadDeadline(time.Now().Add(b.timeout)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, r.Body, b.max)
}

// expectsContinue reports whether r asked for 100 Continue before
// sending its body (RFC 9110 §10.1.1), as net/http reads it.
func expectsContinue(r *http.Request) bool {
	if !r.ProtoAtLeast(1, 1) {
		return false
	}
	for _, v := range r.Header.Values("Expect") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "100-continue") {
				return true
			}
		}
	}
	return false
}

// closeNative closes a native connection after a written answer that
// refused a request before its body was read. req is the refused
// request, nil when the codec refused its head (what follows is then
// unknown).
//
// With req, on plain TCP the write side is shut down first, so the
// client reads the answer and then EOF while it may still be sending;
// the rest of the declared body is then read and discarded, within
// b.timeout, and the connection closes with wire.LingerClose's default
// linger. A rest over b.max is not read, as no drain can save it. Without
// req, wire.LingerClose reads and discards what the client still sends
// until it closes, b.max bytes, or b.timeout.
func (b drainBounds) closeNative(conn net.Conn, req *wire.Request) {
	switch {
	case req == nil:
		_ = wire.LingerClose(conn, b.timeout, b.max)
		return
	case req.BodyRemaining() > b.max:
		_ = wire.LingerClose(conn, 0, wire.DefaultMaxDrain)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	if conn.SetReadDeadline(time.Now().Add(b.timeout)) != nil || req.DiscardBody(b.max) != nil {
		_ = conn.Close()
		return
	}
	_ = wire.LingerClose(conn, 0, wire.DefaultMaxDrain)
}
