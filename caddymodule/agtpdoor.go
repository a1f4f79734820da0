package caddymodule

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/httpdoor"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	caddytracing "github.com/caddyserver/caddy/v2/modules/caddyhttp/tracing"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

func init() {
	caddy.RegisterModule(AGTPApp{})
}

// AGTPApp is the native AGTP/1.0 door (Caddy app "agtp"): listeners
// that speak the AGTP wire itself (spec §2.1: `AGTP/1.0 METHOD PATH`,
// Content-Length framing, persistent connections, the spec's reason
// phrases), on TLS 1.3 with ALPN agtp or, on loopback only, in plain
// text. Each request goes to the engine of the rcns handler named by
// its server, the same engine and state as that handler's HTTP door.
// Listeners come from Caddy's listener pool, so a config reload keeps
// the socket; connections outlive a reload and are served by the new
// configuration's engine from their next request.
type AGTPApp struct {
	// Servers are the native listeners; each names the rcns handler
	// whose engine serves it.
	Servers []*AGTPServer `json:"servers,omitempty"`

	ctx    caddy.Context
	logger *zap.Logger
}

// AGTPServer is one set of native AGTP/1.0 listeners and their limits.
// Every limit the HTTP door has is here, with the HTTP door's default
// where it has one.
type AGTPServer struct {
	// Listen are the network addresses (Caddy's syntax: "127.0.0.1:4480",
	// ":4480", "tcp6/[::1]:4480"). Without TLS every one must be a
	// loopback address (or a unix socket): agtp:// in plain text leaves
	// the host only through a TLS listener.
	Listen []string `json:"listen"`
	// Handler is the name of the rcns handler (its `name`) whose engine
	// serves this listener. Default "default".
	Handler string `json:"handler,omitempty"`
	// TLS turns on agtps://: TLS 1.3 or higher only (TLS 1.2 and below
	// are refused; Go's server never accepts early data), ALPN "agtp",
	// certificates from Caddy's tls app. Nil: plain text, loopback only.
	TLS *AGTPTLS `json:"tls,omitempty"`
	// ReadHeaderTimeout bounds reading a request's line and header
	// fields once its first byte came, and, for a new connection's
	// first request, from the connection's start (after the TLS
	// handshake), its first byte included, as net/http counts it.
	// Default 1m (Caddy's HTTP default).
	ReadHeaderTimeout caddy.Duration `json:"read_header_timeout,omitempty"`
	// ReadTimeout bounds reading one whole request, body included, from
	// its first byte; a stalled client is cut there (400 invalid-body,
	// or 408 request-timeout in the head). Default 1m.
	ReadTimeout caddy.Duration `json:"read_timeout,omitempty"`
	// WriteTimeout bounds writing one answer. Default 1m.
	WriteTimeout caddy.Duration `json:"write_timeout,omitempty"`
	// IdleTimeout is how long a kept-alive connection waits for its
	// next request (a new connection's first waits ReadHeaderTimeout).
	// Default 60s (the bindings draft's).
	IdleTimeout caddy.Duration `json:"idle_timeout,omitempty"`
	// MaxHeaderBytes bounds the request line and header fields, in
	// bytes (431 header-too-large above). Default 32 KiB: never
	// stricter than the HTTP door, whose Caddy default of 16 KiB lets
	// noticeably more through (net/http reads past its limit). At
	// least 1 KiB.
	MaxHeaderBytes int `json:"max_header_bytes,omitempty"`
	// MaxHeaderLines bounds the number of header fields (431
	// too-many-headers above). Default 100.
	MaxHeaderLines int `json:"max_header_lines,omitempty"`
	// MaxConnections bounds the connections served at once on this
	// server; a further one waits in the listen backlog until one ends.
	// Default 10000.
	MaxConnections int `json:"max_connections,omitempty"`
	// MaxRequestsPerConnection closes a connection after this many
	// requests (the last answer says Connection: close). Default 0: no
	// bound, as on the HTTP door.
	MaxRequestsPerConnection int `json:"max_requests_per_connection,omitempty"`
	// AccessLog writes one "handled request" line per request at INFO
	// to the logger agtp.log.access, as the HTTP door's `log` directive
	// does to http.log.access: the remote address, the method and
	// target, the Host, the Agent-ID, the status, the answer's body size
	// in bytes and the duration in seconds. No other header is logged
	// (Authority-Scope, Idempotency-Key and signatures stay out). Off by
	// default, as in Caddy.
	AccessLog bool `json:"access_log,omitempty"`
	// Tracing traces this server's requests with Caddy's own tracing
	// module (http.handlers.tracing, its JSON and Caddyfile as on a
	// site): the same tracer provider, exporter (the OTEL_* environment
	// variables) and W3C trace context propagation as the HTTP
	// binding. Each native request gets that module's server span,
	// parented by the request's traceparent, and the engine's spans
	// beneath it (docs/operator-guide.md "Tracing"). Nil: not traced.
	Tracing *caddytracing.Tracing `json:"tracing,omitempty"`

	accessLog *zap.Logger
	addrs     []caddy.NetworkAddress
	tlsConfig *tls.Config
	limits    wire.Limits
	sockets   []*nativeSocket
	open      int           // connections counted against MaxConnections (nativeSockets held)
	wake      chan struct{} // closed, and replaced, when one of them ends (nativeSockets held)
	tracing   bool          // Tracing provisioned: Cleanup releases it
	load      any           // the configuration load (loadOf): its rcns engines serve
	logger    *zap.Logger   // the agtp app's, of this configuration
	// tlsKey is TLS as configured (JSON, before provisioning): a kept
	// connection made under other TLS settings ends at its next request.
	tlsKey string
}

// agtpALPN is the TLS ALPN protocol id of AGTP over TCP (bindings draft
// §4).
const agtpALPN = "agtp"

// AGTPTLS configures agtps:// for one server.
type AGTPTLS struct {
	// Names are the host names whose certificates Caddy's tls app
	// manages for this listener (its automation policies apply:
	// `local_certs` issues them internally). A name an HTTPS site of the
	// same Caddy already serves needs no entry. The handshake picks the
	// certificate by SNI.
	Names []string `json:"names,omitempty"`
	// ClientAuthentication is Caddy's client_auth (mTLS): with mode
	// verify_if_given a client certificate is verified when sent and
	// identity mtls binds it to the Agent-ID.
	ClientAuthentication *caddytls.ClientAuthentication `json:"client_authentication,omitempty"`
}

// Limit defaults of the native door.
const (
	defaultAGTPReadHeaderTimeout = time.Minute
	defaultAGTPReadTimeout       = time.Minute
	defaultAGTPWriteTimeout      = time.Minute
	defaultAGTPIdleTimeout       = 60 * time.Second
	defaultAGTPMaxHeaderBytes    = 32 << 10
	// maxAGTPMaxHeaderBytes is the most max_header_bytes accepted.
	maxAGTPMaxHeaderBytes = 1 << 30
	// minAGTPMaxHeaderBytes is the least max_header_bytes accepted.
	minAGTPMaxHeaderBytes     = 1 << 10
	defaultAGTPMaxConnections = 10000
)

// CaddyModule returns the Caddy module information.
func (AGTPApp) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "agtp", New: func() caddy.Module { return new(AGTPApp) }}
}

// Provision checks every server and builds its TLS configuration. It
// opens nothing: Start listens.
func (a *AGTPApp) Provision(ctx caddy.Context) error {
	a.ctx, a.logger = ctx, ctx.Logger()
	seen := map[string]int{}
	for i, s := range a.Servers {
		if err := s.provision(ctx); err != nil {
			return fmt.Errorf("servers[%d]: %v", i, err)
		}
		for _, addr := range s.addrs {
			k := addr.String()
			if j, dup := seen[k]; dup {
				return fmt.Errorf("servers[%d]: %s is listened on twice (servers[%d] too): give an address once", i, k, j)
			}
			seen[k] = i
		}
	}
	// The http app provisions every rcns handler, which registers its
	// engine by name and configuration load: provisioned first, a
	// handler name no rcns block of this configuration sets is a typo
	// (or a reload renamed the handler away), refused here (and by caddy
	// validate) rather than answered 503 on every request. Only this
	// load's engines count: the running configuration's are still
	// provisioned while a reload is checked.
	if _, err := ctx.AppIfConfigured("http"); err != nil && !errors.Is(err, caddy.ErrNotConfigured) {
		return err
	}
	load := loadOf(ctx)
	for i, s := range a.Servers {
		s.load = load
		if lookupEngine(s.Handler, load) == nil {
			return fmt.Errorf("servers[%d] (%s): handler %q: no rcns handler of this name is configured (the rcns block's `name`, \"default\" when it sets none)",
				i, strings.Join(s.Listen, " "), s.Handler)
		}
		if n := countEngines(s.Handler, load); n > 1 && load != nil {
			// Legitimate for the HTTP door (site blocks of one name
			// share its state), but the native door serves one of them,
			// whichever Caddy provisioned last: no fixed order.
			a.logger.Warn("agtp: several rcns handlers of this configuration share the native door's handler name; it serves one of them, in no fixed order: give that rcns block a name of its own",
				zap.String("handler", s.Handler), zap.Int("handlers", n), zap.Strings("listen", s.Listen))
		}
	}
	return nil
}

func (s *AGTPServer) provision(ctx caddy.Context) error {
	key, err := json.Marshal(s.TLS)
	if err != nil {
		return fmt.Errorf("tls: %v", err)
	}
	s.tlsKey = string(key)
	if s.Handler == "" {
		s.Handler = "default"
	}
	if s.AccessLog {
		s.accessLog = caddy.Log().Named("agtp.log.access")
	}
	if !engine.ValidName(s.Handler) {
		return fmt.Errorf("handler %q is not an rcns name (1-64 characters of A-Z a-z 0-9 . _ -)", s.Handler)
	}
	if len(s.Listen) == 0 {
		return fmt.Errorf("listen: no address")
	}
	for _, k := range []struct {
		name string
		v    caddy.Duration
		def  time.Duration
	}{{"read_header_timeout", s.ReadHeaderTimeout, defaultAGTPReadHeaderTimeout}, {"read_timeout", s.ReadTimeout, defaultAGTPReadTimeout},
		{"write_timeout", s.WriteTimeout, defaultAGTPWriteTimeout}, {"idle_timeout", s.IdleTimeout, defaultAGTPIdleTimeout}} {
		if k.v < 0 {
			return fmt.Errorf("%s must not be negative (leave it out for the default %s)", k.name, k.def)
		}
	}
	for _, k := range []struct {
		name string
		v    int
	}{{"max_header_bytes", s.MaxHeaderBytes}, {"max_header_lines", s.MaxHeaderLines}, {"max_connections", s.MaxConnections},
		{"max_requests_per_connection", s.MaxRequestsPerConnection}} {
		if k.v < 0 {
			return fmt.Errorf("%s must not be negative (leave it out for the default)", k.name)
		}
	}
	if s.ReadHeaderTimeout == 0 {
		s.ReadHeaderTimeout = caddy.Duration(defaultAGTPReadHeaderTimeout)
	}
	if s.ReadTimeout == 0 {
		s.ReadTimeout = caddy.Duration(defaultAGTPReadTimeout)
	}
	if s.WriteTimeout == 0 {
		s.WriteTimeout = caddy.Duration(defaultAGTPWriteTimeout)
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = caddy.Duration(defaultAGTPIdleTimeout)
	}
	if s.MaxHeaderBytes == 0 {
		s.MaxHeaderBytes = defaultAGTPMaxHeaderBytes
	}
	if s.MaxHeaderBytes > maxAGTPMaxHeaderBytes {
		// The Caddyfile's ceiling, in JSON too (helper-151).
		return fmt.Errorf("max_header_size (JSON max_header_bytes) %d bytes is over %d (1GiB)", s.MaxHeaderBytes, maxAGTPMaxHeaderBytes)
	}
	if s.MaxHeaderBytes < minAGTPMaxHeaderBytes {
		return fmt.Errorf("max_header_size (JSON max_header_bytes) %d bytes is below %d: no request line and Agent-ID would fit", s.MaxHeaderBytes, minAGTPMaxHeaderBytes)
	}
	if s.MaxConnections == 0 {
		s.MaxConnections = defaultAGTPMaxConnections
	}
	if s.Tracing != nil {
		if err := s.Tracing.Provision(ctx); err != nil {
			return fmt.Errorf("tracing: %v", err)
		}
		s.tracing = true
	}
	s.limits = wire.Limits{MaxHeaderBytes: s.MaxHeaderBytes, MaxHeaderLines: s.MaxHeaderLines}
	s.addrs = nil
	for _, l := range s.Listen {
		if strings.Contains(l, "://") {
			// Caddy reads "agtps://h:p" as the network "agtps" (helper-150:
			// it passed validate and failed at start, or was refused as
			// plain text off loopback).
			return fmt.Errorf("listen %q: give an address without a scheme (127.0.0.1:4480, :4480, unix//path): the native door speaks agtp://, and agtps:// with tls", l)
		}
		na, err := caddy.ParseNetworkAddress(l)
		if err != nil {
			return fmt.Errorf("listen %q: %v", l, err)
		}
		switch na.Network {
		case "tcp", "tcp4", "tcp6", "unix", "fd":
		default:
			return fmt.Errorf("listen %q: network %q is not a stream the native door can serve (tcp, tcp4, tcp6, unix, fd)", l, na.Network)
		}
		if na.IsUnixNetwork() || na.IsFdNetwork() {
			s.addrs = append(s.addrs, na)
			continue
		}
		if na.StartPort == 0 && !strings.HasSuffix(l, ":0") {
			// Caddy reads "gw" as a host without a port (helper-148: it
			// was then refused as plain text off loopback).
			return fmt.Errorf("listen %q: no port: give host:port (e.g. 127.0.0.1:4480; 4480 is AGTP's)", l)
		}
		if na.PortRangeSize() != 1 {
			return fmt.Errorf("listen %q: give one port, not a range", l)
		}
		if s.TLS == nil && !httpdoor.LoopbackHost(na.Host) {
			return fmt.Errorf("listen %q: plain text (agtp://) is served on loopback addresses only; add tls for agtps://", l)
		}
		s.addrs = append(s.addrs, na)
	}
	if s.TLS != nil {
		pol := &caddytls.ConnectionPolicy{ALPN: []string{agtpALPN}, ProtocolMin: "tls1.3", ClientAuthentication: s.TLS.ClientAuthentication}
		pols := caddytls.ConnectionPolicies{pol}
		if err := pols.Provision(ctx); err != nil {
			return fmt.Errorf("tls: %v", err)
		}
		s.tlsConfig = pols.TLSConfig(ctx)
		s.tlsConfig.MinVersion = tls.VersionTLS13
		s.tlsConfig.NextProtos = []string{agtpALPN}
	}
	return nil
}

// Start manages the TLS names and opens every listener. A listener that
// cannot be opened, or that shares a port with one of the http app's
// servers, fails the config load.
func (a *AGTPApp) Start() error {
	if err := a.checkPortsFree(); err != nil {
		return err
	}
	names := map[string]struct{}{}
	for _, s := range a.Servers {
		if s.TLS != nil {
			for _, n := range s.TLS.Names {
				names[n] = struct{}{}
			}
		}
	}
	if len(names) > 0 {
		tlsApp, err := a.ctx.App("tls")
		if err != nil {
			return fmt.Errorf("tls app: %v", err)
		}
		if err := tlsApp.(*caddytls.TLS).Manage(names); err != nil {
			return fmt.Errorf("managing certificates: %v", err)
		}
	}
	for _, s := range a.Servers {
		if err := s.start(a.ctx, a.logger); err != nil {
			a.stopListeners()
			return err
		}
	}
	return nil
}

// Stop releases this configuration's sockets: a socket a newer
// configuration also listens on stays open and keeps its connections;
// one no configuration listens on any more is closed, and its
// connections end after the answer they are writing (their wait for a
// next request is cut). Stop returns once those answers are written (a
// graceful `caddy stop` or a reload that drops the address answers the
// requests running), or after the longest a request may take
// (stopWait) with a WARN.
func (a *AGTPApp) Stop() error {
	a.stopListeners()
	return nil
}

func (a *AGTPApp) stopListeners() {
	var ending []*nativeConn
	var wait time.Duration
	for _, s := range a.Servers {
		if c := s.stop(); len(c) > 0 {
			ending = append(ending, c...)
			wait = max(wait, s.stopWait())
		}
	}
	if len(ending) == 0 {
		return
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for i, c := range ending {
		select {
		case <-c.done:
		case <-timeout.C:
			a.logger.Warn("agtp: native requests still running when the listener stopped; not waited for longer", zap.Int("running", len(ending)-i), zap.Duration("waited", wait))
			return
		}
	}
}

// stopWait is the longest a request running on s can still take: its
// body read (read_timeout), its run (the rcns handler's longest, leases
// included: Engine.MaxLease) and its answer's write (write_timeout).
func (s *AGTPServer) stopWait() time.Duration {
	d := time.Duration(s.ReadTimeout) + time.Duration(s.WriteTimeout)
	if e := lookupEngine(s.Handler, s.load); e != nil {
		d += e.MaxLease()
	}
	return d
}

// checkPortsFree refuses a native listen address whose port an HTTP
// server of this config also listens on (same network, and the same
// host or a wildcard on either side): Caddy opens both with
// SO_REUSEPORT, so both would bind and the kernel would deal each
// connection to one of them at random.
func (a *AGTPApp) checkPortsFree() error {
	appAny, err := a.ctx.AppIfConfigured("http")
	if err != nil {
		return nil // no http app: nothing to collide with
	}
	httpApp, ok := appAny.(*caddyhttp.App)
	if !ok {
		return nil
	}
	for name, srv := range httpApp.Servers {
		for _, l := range srv.Listen {
			hna, err := caddy.ParseNetworkAddress(l)
			if err != nil {
				continue
			}
			for _, s := range a.Servers {
				for _, na := range s.addrs {
					if na.IsUnixNetwork() || hna.IsUnixNetwork() || networkFamily(na.Network) != networkFamily(hna.Network) {
						continue
					}
					if na.StartPort < hna.StartPort || na.StartPort > hna.EndPort {
						continue
					}
					if na.Host == hna.Host || na.Host == "" || hna.Host == "" {
						return fmt.Errorf("listen %s: the http server %q listens on %s too; give the native door a port of its own (4480 is AGTP's)", na, name, l)
					}
				}
			}
		}
	}
	return nil
}

// networkFamily folds tcp4/tcp6 into tcp for the port check.
func networkFamily(n string) string {
	if strings.HasPrefix(n, "tcp") || n == "" {
		return "tcp"
	}
	return n
}

// Cleanup releases each server's tracing (Caddy's tracer provider is
// shared and counted: the last user shuts it down, flushing its spans).
func (a *AGTPApp) Cleanup() error {
	var errs []error
	for _, s := range a.Servers {
		if s.tracing {
			s.tracing = false
			if err := s.Tracing.Cleanup(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

var (
	_ caddy.App          = (*AGTPApp)(nil)
	_ caddy.Provisioner  = (*AGTPApp)(nil)
	_ caddy.CleanerUpper = (*AGTPApp)(nil)
)

func (s *AGTPServer) start(ctx caddy.Context, logger *zap.Logger) error {
	nativeSockets.Lock()
	s.wake = make(chan struct{})
	nativeSockets.Unlock()
	s.logger = logger
	for _, na := range s.addrs {
		sock, err := acquireSocket(ctx, na, s)
		if err != nil {
			return err
		}
		s.sockets = append(s.sockets, sock)
		logger.Info("agtp listener started", zap.String("listen", sock.key), zap.Bool("tls", s.TLS != nil), zap.String("handler", s.Handler))
	}
	return nil
}

// stop releases s's sockets and returns the connections of those that
// closed (ending after their current answer).
func (s *AGTPServer) stop() []*nativeConn {
	var ending []*nativeConn
	for _, sock := range s.sockets {
		ending = append(ending, sock.release(s)...)
	}
	s.sockets = nil
	return ending
}

func closeListener(ln any) error {
	if c, ok := ln.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
