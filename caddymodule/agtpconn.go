package caddymodule

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	caddytracing "github.com/caddyserver/caddy/v2/modules/caddyhttp/tracing"
)

// nativeSocket is one native listen address's socket, shared by every
// started configuration that listens there, so a reload keeps the very
// socket (and its accept queue) instead of opening a second
// SO_REUSEPORT socket whose closing would reset the connections queued
// on the old one. The newest serving configuration (currentLocked) sets
// the limits, TLS and engine of requests from then on; the socket
// closes when the last configuration releases it.
//
// A configuration that starts on a socket another one serves is
// pending until that one is released: Caddy stops the old
// configuration only once every app of the new one has started, and a
// new one whose start fails (another app's) is released without ever
// serving here.
type nativeSocket struct {
	key     string
	ln      net.Listener
	servers []*AGTPServer // started configurations, oldest first
	pending map[*AGTPServer]bool
	conns   map[*nativeConn]struct{}
	// changed is closed, and replaced, when servers changes: the accept
	// loop's wait for a connection slot then reads the newest
	// configuration's limit again.
	changed chan struct{}
}

// nativeSockets are the open native sockets by address.
var nativeSockets = struct {
	sync.Mutex
	byKey map[string]*nativeSocket
}{byKey: map[string]*nativeSocket{}}

// acquireSocket returns the socket of na with s among its
// configurations, opening it (through Caddy's listener pool) and
// starting its accept loop when no configuration listens there yet.
func acquireSocket(ctx caddy.Context, na caddy.NetworkAddress, s *AGTPServer) (*nativeSocket, error) {
	key := na.String()
	nativeSockets.Lock()
	defer nativeSockets.Unlock()
	if sock := nativeSockets.byKey[key]; sock != nil {
		sock.addLocked(s)
		return sock, nil
	}
	if !ownPortLocked(na) {
		if err := probeUnshared(na); err != nil {
			return nil, err
		}
	}
	lnAny, err := na.Listen(ctx, 0, net.ListenConfig{})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %v", key, err)
	}
	ln, ok := lnAny.(net.Listener)
	if !ok {
		_ = closeListener(lnAny)
		return nil, fmt.Errorf("listen %s: not a stream listener", key)
	}
	sock := &nativeSocket{key: key, ln: ln, servers: []*AGTPServer{s}, pending: map[*AGTPServer]bool{}, conns: map[*nativeConn]struct{}{}, changed: make(chan struct{})}
	nativeSockets.byKey[key] = sock
	go sock.accept()
	return sock, nil
}

// probeUnshared refuses a TCP address another process listens on,
// before Caddy's listener pool opens it. Caddy listens with
// SO_REUSEPORT (so that a reload keeps serving), which the kernel also
// grants a second process beside the first (one of the same user): a
// second gateway started on a native port would share its connections,
// silently, each process serving some with its own configuration and
// state. A plain bind (SO_REUSEADDR, as Go sets it, and no
// SO_REUSEPORT) fails wherever a socket listens, of whatever process.
// It is called only for a port this process has no native socket on
// (acquireSocket, ownPortLocked); another error, or a port 0, is left
// to Caddy's own listen.
func probeUnshared(na caddy.NetworkAddress) error {
	if !strings.HasPrefix(na.Network, "tcp") || na.StartPort == 0 {
		return nil
	}
	addr := na.JoinHostPort(0)
	ln, err := net.Listen(na.Network, addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listen %s: the address is in use by another process (another gateway? Caddy listens with SO_REUSEPORT, so two processes on one port would each serve some of its connections); stop it, or listen elsewhere", addr)
		}
		return nil
	}
	return ln.Close()
}

// ownPortLocked reports whether one of this process's native sockets
// listens on na's port, under another spelling of its address
// ("localhost:4480" for "127.0.0.1:4480", a reload's new form): that
// socket would fail probeUnshared's bind, so the probe is not made, and
// Caddy's listen opens the address beside it as it did before the probe
// (helper-128: such a reload was refused as "another process").
// nativeSockets is held.
func ownPortLocked(na caddy.NetworkAddress) bool {
	for _, sock := range nativeSockets.byKey {
		if a, ok := sock.ln.Addr().(*net.TCPAddr); ok && a.Port == int(na.StartPort) {
			return true
		}
	}
	return false
}

// addLocked adds s, a configuration that started listening on the
// socket: pending while another serves it. nativeSockets is held.
func (sock *nativeSocket) addLocked(s *AGTPServer) {
	if sock.currentLocked() != nil {
		sock.pending[s] = true
	}
	sock.servers = append(sock.servers, s)
	sock.changedLocked()
}

// removeLocked removes s. The release of a serving configuration (the
// old one of a reload, which Caddy stops once the new one has started)
// makes the pending ones serve; a pending one's release (its load
// failed to start) changes nothing else. nativeSockets is held.
func (sock *nativeSocket) removeLocked(s *AGTPServer) {
	for i, x := range sock.servers {
		if x == s {
			sock.servers = append(sock.servers[:i:i], sock.servers[i+1:]...)
			break
		}
	}
	if sock.pending[s] {
		delete(sock.pending, s)
	} else {
		clear(sock.pending)
		// The serving configuration counts the socket's connections
		// against its max_connections, those of earlier ones included.
		if cur := sock.currentLocked(); cur != nil {
			for c := range sock.conns {
				if c.counted != cur {
					c.moveLocked(cur)
				}
			}
		}
	}
	sock.changedLocked()
}

// currentLocked is the newest configuration serving the socket (not
// pending); nil once the socket is closed. nativeSockets is held.
func (sock *nativeSocket) currentLocked() *AGTPServer {
	for i := len(sock.servers) - 1; i >= 0; i-- {
		if s := sock.servers[i]; !sock.pending[s] {
			return s
		}
	}
	return nil
}

// changedLocked wakes the accept loop's wait for a slot (servers
// changed). nativeSockets is held.
func (sock *nativeSocket) changedLocked() {
	close(sock.changed)
	sock.changed = make(chan struct{})
}

// logger is the socket's logger under the configuration s: its logs
// go where that configuration sends them.
func (sock *nativeSocket) loggerOf(s *AGTPServer) *zap.Logger {
	return s.logger.With(zap.String("listen", sock.key))
}

// release removes s from the socket's configurations; with none left,
// the socket closes, its connections end after their current answer,
// and it returns them (their done channels close as they end).
func (sock *nativeSocket) release(s *AGTPServer) []*nativeConn {
	nativeSockets.Lock()
	sock.removeLocked(s)
	var ending []*nativeConn
	if len(sock.servers) == 0 {
		delete(nativeSockets.byKey, sock.key)
		for c := range sock.conns {
			ending = append(ending, c)
		}
		_ = sock.ln.Close()
	}
	nativeSockets.Unlock()
	for _, c := range ending {
		c.end()
	}
	return ending
}

// accept serves each accepted connection in its own goroutine under the
// newest configuration's limits, at most its MaxConnections at once (a
// further one waits in the backlog), until the socket is closed.
func (sock *nativeSocket) accept() {
	backoff := 5 * time.Millisecond
	for {
		nativeSockets.Lock()
		s := sock.currentLocked()
		if s == nil {
			nativeSockets.Unlock()
			return
		}
		if s.open >= s.MaxConnections {
			// Full: the next connection waits in the backlog until one
			// ends or a reload changes the limit.
			wake, changed := s.wake, sock.changed
			nativeSockets.Unlock()
			select {
			case <-wake:
			case <-changed:
			}
			continue
		}
		s.open++ // the connection Accept brings
		nativeSockets.Unlock()
		c, err := sock.ln.Accept()
		if err != nil {
			nativeSockets.Lock()
			s.endedLocked()
			nativeSockets.Unlock()
			nativeSockets.Lock()
			open := nativeSockets.byKey[sock.key] == sock
			nativeSockets.Unlock()
			if !open {
				return // closed: the last configuration released it
			}
			// Out of file descriptors, or another passing failure: try
			// again after a pause, as net/http does (5 ms, doubling to
			// 1 s), rather than stop accepting on a socket still in use.
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				sock.loggerOf(s).Error("agtp accept failed; retrying", zap.Error(err), zap.Duration("after", backoff))
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		nc := &nativeConn{c: c, sock: sock, srv: s, counted: s, done: make(chan struct{})}
		if !nc.track() {
			_ = c.Close()
			continue
		}
		go func() {
			defer close(nc.done)
			nc.serve()
		}()
	}
}

// testHookNativeServe, set by tests only, runs before each native
// request reaches the engine: a fault injected into the door. Atomic:
// the test sets it while the door's goroutines run.
var testHookNativeServe atomic.Pointer[func(*agtp.Request)]

// recoverPanic ends a connection whose goroutine panicked (a defect in
// the door or the engine) as net/http ends an HTTP one: the panic is
// logged with its stack, at ERROR, and the connection is closed
// without an answer (what the request did is unknown); every other
// connection, and the process, go on. Without it one request on the
// native door could take down the whole server, every site and door
// with it. http.ErrAbortHandler aborts silently, as in net/http. The
// engine has already released the request's Idempotency-Key claim if
// nothing ran (engine.Serve).
func (c *nativeConn) recoverPanic() {
	p := recover()
	if p == nil {
		return
	}
	_ = c.c.Close()
	if p == http.ErrAbortHandler {
		return
	}
	recovered.Log(c.sock.loggerOf(c.srv), "agtp: panic serving a connection; closed it", p, zap.String("remote", c.c.RemoteAddr().String()))
}

// nativeConn is one AGTP/1.0 connection: requests read one after
// another (a pipelined one waits in the read buffer), each answered in
// order before the next is read.
type nativeConn struct {
	c       net.Conn
	sock    *nativeSocket
	srv     *AGTPServer   // the configuration of its current request: its limits
	counted *AGTPServer   // the configuration whose max_connections counts it (nativeSockets held)
	done    chan struct{} // closed when the connection has ended
	mu      sync.Mutex
	ending  bool // end was called: no request after the current one
	reading bool // waiting for a request's first byte (end interrupts it)
}

// config is the configuration a connection's next request is served
// under: the socket's newest (a reload applies from the next request),
// else the one it was accepted under.
func (c *nativeConn) config() *AGTPServer {
	nativeSockets.Lock()
	defer nativeSockets.Unlock()
	if s := c.sock.currentLocked(); s != nil {
		return s
	}
	return c.srv
}

// serving is the configuration a request that has started arriving is
// served under (config) and that configuration's engine (its load's,
// lookupEngine); nil engine when none of the handler's name is
// provisioned. A configuration that a reload stopped and cleaned up
// between the two reads is read again.
func (c *nativeConn) serving() (*AGTPServer, *engine.Engine) {
	s := c.config()
	for range 3 {
		if e := lookupEngine(s.Handler, s.load); e != nil {
			return s, e
		}
		next := c.config()
		if next == s {
			break
		}
		s = next
	}
	return s, nil
}

// track adds c to its socket's live connections; false when the
// socket is closed.
func (c *nativeConn) track() bool {
	nativeSockets.Lock()
	defer nativeSockets.Unlock()
	if nativeSockets.byKey[c.sock.key] != c.sock {
		c.counted.endedLocked()
		return false
	}
	c.sock.conns[c] = struct{}{}
	if cur := c.sock.currentLocked(); cur != c.counted {
		// A reload completed while Accept waited: counted by the
		// configuration serving now.
		c.moveLocked(cur)
	}
	return true
}

// moveLocked counts c against s's max_connections instead of the
// configuration that counted it. nativeSockets is held.
func (c *nativeConn) moveLocked(s *AGTPServer) {
	c.counted.endedLocked()
	s.open++
	c.counted = s
}

// endedLocked uncounts a connection of s and wakes an accept loop
// waiting for room. nativeSockets is held.
func (s *AGTPServer) endedLocked() {
	s.open--
	close(s.wake)
	s.wake = make(chan struct{})
}

func (c *nativeConn) untrack() {
	nativeSockets.Lock()
	defer nativeSockets.Unlock()
	delete(c.sock.conns, c)
	c.counted.endedLocked()
}

// end makes the connection stop after its current request; a wait for
// the next request is cut at once.
func (c *nativeConn) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ending = true
	if c.reading {
		_ = c.c.SetReadDeadline(time.Now())
	}
}

// isEnding reports whether end was called.
func (c *nativeConn) isEnding() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ending
}

// waiting marks the start (true) or end of the wait for a request (its
// first byte and head, or the TLS handshake before it), and reports
// whether the connection should stop instead.
func (c *nativeConn) waiting(w bool) (stop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = w
	return c.ending
}

func (c *nativeConn) serve() {
	defer c.untrack()
	defer c.recoverPanic()
	// The newest configuration's TLS: the accept loop read the socket's
	// configuration before it waited in Accept, and a reload may have
	// completed since.
	s := c.config()
	c.srv = s
	madeUnder := s.tlsKey
	conn := c.c
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var tlsState *tls.ConnectionState
	if s.tlsConfig != nil {
		tc := tls.Server(conn, s.tlsConfig)
		_ = tc.SetDeadline(time.Now().Add(time.Duration(s.ReadHeaderTimeout)))
		// No request has started: a stop cuts the handshake (end).
		if c.waiting(true) {
			_ = conn.Close()
			return
		}
		err := tc.HandshakeContext(ctx)
		if c.waiting(false) && err == nil {
			_ = conn.Close()
			return
		}
		if err != nil {
			c.sock.loggerOf(s).Debug("agtp TLS handshake failed", zap.String("remote", conn.RemoteAddr().String()), zap.Error(err))
			_ = conn.Close()
			return
		}
		_ = tc.SetDeadline(time.Time{})
		st := tc.ConnectionState()
		tlsState = &st
		conn = tc
	}
	loopback := addrIsLoopback(conn.LocalAddr())
	br := bufio.NewReaderSize(conn, 4<<10)
	bw := bufio.NewWriterSize(conn, 4<<10)
	closeConn := func(linger bool) {
		if linger {
			_ = wire.LingerClose(conn, 0, 256<<10)
			return
		}
		_ = conn.Close()
	}
	// drain closes after a refusal, reading what the client still sends
	// (the refused body, or what follows a refused head) so that the
	// close resets nothing before the answer is read (cases/05). A stop
	// cuts the drain (end): then only the short linger of closeConn.
	drain := func(e *engine.Engine, req *wire.Request) {
		if c.waiting(true) {
			closeConn(true)
			return
		}
		closeNative(drainBoundsOf(e), conn, req)
		c.waiting(false)
	}
	for n := 1; ; n++ {
		s = c.config()
		c.srv = s
		// The wait for the next request and its head: the idle timeout,
		// then read_header_timeout, both cut short by a stop or a reload
		// that drops this address (end): no request has run, none is
		// answered. The deadline is set first, so an end after it
		// overrides it. A new connection's first request has
		// read_header_timeout from the connection's start (after the
		// TLS handshake) for its first byte and its whole head, as the
		// HTTP door's (net/http) has: a connection that sends nothing is
		// not held for idle_timeout (helper-148: 60 s here, 5 s there).
		wait := time.Now()
		idle := time.Duration(s.IdleTimeout)
		if n == 1 {
			idle = time.Duration(s.ReadHeaderTimeout)
		}
		_ = conn.SetReadDeadline(wait.Add(idle))
		if c.waiting(true) {
			closeConn(false)
			return
		}
		_, err := br.Peek(1)
		if err != nil || c.isEnding() {
			c.waiting(false)
			closeConn(false) // idle timeout, the peer closed, or ending: no request started
			return
		}
		// A reload while the connection waited applies to this request:
		// the newest configuration's limits and its engine. One that
		// changed the address's TLS (turned it on or off, other names,
		// other client authentication) ends a connection made under the
		// old settings instead: the client connects again under the new.
		s, e := c.serving()
		if s.tlsKey != madeUnder {
			c.waiting(false)
			closeConn(true)
			return
		}
		c.srv = s
		start := time.Now()
		headFrom := start
		if n == 1 {
			headFrom = wait
		}
		_ = conn.SetReadDeadline(headFrom.Add(time.Duration(s.ReadHeaderTimeout)))
		if c.isEnding() {
			c.waiting(false)
			closeConn(false)
			return
		}
		req, err := wire.ReadRequest(br, s.limits)
		if cut := c.waiting(false); err != nil && cut {
			closeConn(false) // a stop cut the head: nothing ran
			return
		}
		if err != nil {
			var we *wire.Error
			if errors.As(err, &we) && c.refuse(e, bw, conn, we, tlsState, loopback, ctx, start) {
				// What follows the refused head is unknown: drained as
				// an engine refusal's unread body is.
				drain(e, nil)
				return
			}
			closeConn(true)
			return
		}
		_ = conn.SetReadDeadline(start.Add(time.Duration(s.ReadTimeout)))
		in := &agtp.Request{
			Binding: agtp.BindingNative, Method: req.Method, Target: req.Target, URL: req.URL, Host: req.Header.Get("Host"),
			Header: req.Header, ContentLength: req.ContentLength, TLS: tlsState, Loopback: loopback, Context: ctx,
		}
		if req.ContentLength > 0 {
			in.Body = req.Body
		}
		if h := testHookNativeServe.Load(); h != nil {
			(*h)(in)
		}
		var resp *agtp.Response
		if e == nil {
			resp = &agtp.Response{Status: http.StatusServiceUnavailable, Close: true}
			c.sock.loggerOf(s).Error("agtp: no rcns handler of this name is provisioned", zap.String("handler", s.Handler))
		} else if s.Tracing != nil {
			resp = serveTraced(s.Tracing, e, ctx, in, conn.RemoteAddr())
		} else {
			resp = e.Serve(ctx, in)
		}
		last := resp.Close || (s.MaxRequestsPerConnection > 0 && n >= s.MaxRequestsPerConnection) || clientCloses(req.Header)
		if !resp.Close && req.BodyRemaining() > 0 {
			// The engine answered without reading the whole body (it
			// reads every body it accepts): drain it for the next
			// request, within the read deadline, or close.
			if err := req.DiscardBody(1 << 20); err != nil {
				last = true
			}
		}
		if s.accessLog != nil {
			logAccess(s.accessLog, conn, req.Method, req.Target, req.Header, resp, start)
		}
		err = c.write(bw, conn, resp, last)
		switch {
		case err == nil && resp.Close:
			// Refused before its body was read: drained, then closed
			// (cases/05).
			drain(e, req)
			return
		case err != nil || last:
			closeConn(last && err == nil)
			return
		}
	}
}

// clientCloses reports whether the request asks for the connection to
// end after its answer (Connection: close, RFC 9110 §7.6.1): the answer
// then says Connection: close too and the connection is closed, so a
// client reading to EOF is not left waiting for the idle timeout.
func clientCloses(h http.Header) bool {
	for _, v := range h.Values("Connection") {
		for _, opt := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(opt), "close") {
				return true
			}
		}
	}
	return false
}

// logAccess writes one AGTPServer.AccessLog line: no header but Host
// and Agent-ID, which identify the request and carry no authority; the
// request_id every engine log line about the request carries, and the
// reason of a refusal, as the HTTP door's access line (accesslog.go).
// method, target and hdr are what was read of the request: a request
// the codec refused may lack any of them.
func logAccess(l *zap.Logger, conn net.Conn, method, target string, hdr http.Header, resp *agtp.Response, start time.Time) {
	host, port, _ := net.SplitHostPort(conn.RemoteAddr().String())
	l.Info("handled request",
		zap.String("remote_ip", host), zap.String("remote_port", port), zap.String("proto", "AGTP/1.0"),
		zap.String("method", method), zap.String("uri", target), zap.String("host", hdr.Get("Host")),
		zap.String("agent_id", accessAgent(hdr, resp)), zap.Int("status", resp.Status),
		zap.Int("size", len(resp.Body)), zap.Float64("duration", time.Since(start).Seconds()),
		zap.String("request_id", resp.RequestID), reasonField(resp.Reason))
}

// accessAgent is the agent of an access line: the one the answer names
// (the agent the gateway identified, by a token alone too: helper-149
// found token-only requests logged without one), else the request's
// Agent-ID.
func accessAgent(hdr http.Header, resp *agtp.Response) string {
	if id := resp.Get("Agent-ID"); id != "" {
		return id
	}
	return hdr.Get("Agent-ID")
}

// reasonField is the reason of a refusal for an access line, or no
// field when the answer is not a refusal.
func reasonField(reason string) zap.Field {
	if reason == "" {
		return zap.Skip()
	}
	return zap.String("reason", reason)
}

// write sends one engine answer within the write timeout; last adds
// Connection: close.
func (c *nativeConn) write(bw *bufio.Writer, conn net.Conn, resp *agtp.Response, last bool) error {
	h := c.answerFields(resp)
	if last {
		h["Connection"] = []string{"close"}
	}
	_ = conn.SetWriteDeadline(time.Now().Add(time.Duration(c.srv.WriteTimeout)))
	if err := (&wire.Response{Status: resp.Status, Header: h, Body: resp.Body}).Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// answerFields is resp's header fields for the codec, with room for
// one more (Connection), Content-Length left to the codec. A field
// whose value holds a control character is a defect before the door (a
// value taken from outside unchecked): the codec would refuse the
// whole answer, and the connection close with nothing sent after the
// request ran (helper-149), so the field is left out and the defect
// logged at ERROR.
func (c *nativeConn) answerFields(resp *agtp.Response) http.Header {
	h := make(http.Header, len(resp.Header)+1)
	for _, f := range resp.Header {
		if f.Name == "Content-Length" {
			continue
		}
		if !wire.ValidFieldValue(f.Value) {
			c.sock.loggerOf(c.srv).Error("agtp: an answer's header field carries a control character; it was left out of the answer", zap.String("field", f.Name), zap.Int("status", resp.Status))
			continue
		}
		h[f.Name] = append(h[f.Name], f.Value)
	}
	return h
}

// refuse answers a request the codec could not read (bad framing, a
// head over the limits, a request that stopped arriving) with the
// engine's AGTP error answer, then the connection closes. A head the
// peer ended (400 incomplete-request: it closed, or half-closed, its
// sending side inside the request line or headers) is answered too: a
// half-closed peer still reads the answer, and for one that closed
// altogether the write fails harmlessly. It reports whether it wrote
// the answer (false: the connection was closed on this side, or the
// write failed). Its access line (access_log) has no uri: the codec
// did not read one it could trust.
func (c *nativeConn) refuse(e *engine.Engine, bw *bufio.Writer, conn net.Conn, we *wire.Error, st *tls.ConnectionState, loopback bool, ctx context.Context, start time.Time) bool {
	if errors.Is(we.Err, net.ErrClosed) || errors.Is(we.Err, os.ErrDeadlineExceeded) && we.Status != http.StatusRequestTimeout {
		return false // closed here, or cut by a stop: nothing to answer
	}
	hdr := we.Header
	if hdr == nil {
		hdr = http.Header{}
	}
	in := &agtp.Request{Binding: agtp.BindingNative, Method: we.Method, URL: we.URL, Header: hdr, Host: hdr.Get("Host"), TLS: st, Loopback: loopback, Context: ctx}
	werr := &agtp.Error{Status: we.Status, Reason: we.Reason, Explanation: we.Explanation}
	var resp *agtp.Response
	if e != nil {
		resp = e.Answer(in, werr)
	} else {
		resp = &agtp.Response{Status: we.Status, Reason: we.Reason}
	}
	h := c.answerFields(resp)
	h["Connection"] = []string{"close"}
	_ = conn.SetWriteDeadline(time.Now().Add(time.Duration(c.srv.WriteTimeout)))
	err := (&wire.Response{Proto: we.Proto, Status: resp.Status, Header: h, Body: resp.Body}).Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if c.srv.accessLog != nil {
		logAccess(c.srv.accessLog, conn, we.Method, "", hdr, resp, start)
	}
	c.sock.loggerOf(c.srv).Debug("agtp request refused by the codec", zap.String("reason", we.Reason), zap.Int("status", we.Status),
		zap.String("remote", conn.RemoteAddr().String()), zap.String("explanation", strconv.Quote(we.Explanation)))
	return err == nil
}

// addrIsLoopback reports whether a connection's local address is on
// loopback (or a unix socket).
func addrIsLoopback(a net.Addr) bool {
	switch t := a.(type) {
	case *net.TCPAddr:
		return t.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

// serveTraced serves in through Caddy's tracing module t, as the HTTP
// binding's requests pass through a site's `tracing`: t extracts the
// request's trace context (its traceparent), starts its server span
// with Caddy's tracer provider and puts that span in the context the
// engine's own spans start under. t sees the AGTP request as an HTTP
// request of the same method, target, Host and header fields
// (protocol AGTP/1.0), and the answer's status.
func serveTraced(t *caddytracing.Tracing, e *engine.Engine, ctx context.Context, in *agtp.Request, remote net.Addr) *agtp.Response {
	u := in.URL
	if u == nil {
		u = &url.URL{}
	}
	hr := (&http.Request{Method: in.Method, URL: u, Proto: "AGTP/1.0", ProtoMajor: 1, Header: in.Header, Host: in.Host,
		RequestURI:                                                                    in.Target, TLS: in.TLS, RemoteAddr: remote.String()}).
		WithContext(context.WithValue(ctx, caddy.ReplacerCtxKey, caddy.NewReplacer())) // Caddy's span name formatter reads it
	var resp *agtp.Response
	_ = t.ServeHTTP(discardAnswer{}, hr, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		resp = e.Serve(r.Context(), in)
		w.WriteHeader(resp.Status)
		return nil
	}))
	if resp == nil { // the module did not call on: never expected
		resp = e.Serve(ctx, in)
	}
	return resp
}

// discardAnswer is the http.ResponseWriter the tracing module wraps for
// a native request: it takes the status (the span's) and discards the
// rest; the native door writes the answer itself.
type discardAnswer struct{}

func (discardAnswer) Header() http.Header         { return http.Header{} }
func (discardAnswer) Write(b []byte) (int, error) { return len(b), nil }
func (discardAnswer) WriteHeader(int)             {}

// drainBoundsOf is e's refused-body drain bounds, the defaults when no
// rcns handler of the listener's name is provisioned (e nil: a reload
// removed it; the request was answered 503).
func drainBoundsOf(e *engine.Engine) engine.DrainBounds {
	var c *engine.Config
	if e != nil {
		c = e.Config
	}
	return c.RefusedBodyDrainBounds()
}
