package caddymodule

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/httpdoor"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// ServeHTTP routes one HTTP request: the operator page's paths, when it
// is on, to the page (oppage.Page, behind its access rule); the MCP path to the MCP door,
// whatever it carries (never to next), and with the door on, its
// well-known discovery paths (mcpdoor.Door.WellKnown: the
// protected-resource metadata, and the authorization-server metadata
// an MCP client would otherwise look for on the legacy API) to the
// door too; the upstream JWKS (upstreamauth.JWKSPath) when an upstream
// uses identity assertions; an AGTP request (httpdoor.IsAGTP) to the HTTP binding's
// door (spec §2.3); a plain OPTIONS * as Go would answer it; every
// other request to next, unchanged.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	e := h.eng
	e.Activate()
	if h.page != nil && h.page.Match(r.URL.Path) {
		user := ""
		if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
			user, _ = repl.GetString("http.auth.user.id")
		}
		h.page.ServeHTTP(w, r, clientAddr(r), user)
		return nil
	}
	if h.mcp != nil {
		if r.URL.Path == h.MCP.Path {
			sw := &statusWriter{ResponseWriter: w}
			noteMCPAccess(r, h.mcp.Serve(sw, r))
			e.MCPAnswered(sw.status)
			return nil
		}
		if h.mcp.WellKnown(r.URL.Path) {
			h.mcp.ServeWellKnown(w, r)
			return nil
		}
	}
	if r.URL.Path == upstreamauth.JWKSPath {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if _, ok := e.UpstreamJWKS(); ok {
				refuseJWKSMethod(e, w, r)
				return nil
			}
		} else if e.ServeUpstreamJWKS(w, r) {
			return nil
		}
	}
	if !httpdoor.IsAGTP(e, r) {
		if r.RequestURI == "*" && r.Method == http.MethodOptions {
			answerOptionsStar(w, r)
			return nil
		}
		return passThrough(e, w, r, next)
	}
	noteAccess(r, httpdoor.Serve(e, w, r))
	return nil
}

// refuseJWKSMethod answers a method other than GET and HEAD on
// upstreamauth.JWKSPath as the other well-known paths do (docs/doors.md):
// 405 method-not-allowed in the spec's error body (§19), with Allow:
// GET, HEAD, the AGTP response header and an Attribution-Record.
func refuseJWKSMethod(e *engine.Engine, w http.ResponseWriter, r *http.Request) {
	in := &agtp.Request{Binding: agtp.BindingHTTP, Method: r.Method, Target: r.RequestURI, URL: r.URL, Host: r.Host,
		Header: r.Header, ContentLength: r.ContentLength, TLS: r.TLS, Context: r.Context()}
	w.Header().Set("Allow", "GET, HEAD")
	resp := e.Refuse(in, agtp.MethodNotAllowed.WithFields(
		"the upstream key set "+upstreamauth.JWKSPath+" answers GET and HEAD, not "+r.Method,
		map[string]any{"allowed_methods_for_path": []string{http.MethodGet, http.MethodHead}}), engine.Refusal{BodyRead: r.ContentLength == 0})
	httpdoor.Write(w, r, resp)
	if resp.Close {
		httpdoor.Drain(e.RefusedBodyDrainBounds(), w, r)
	}
}

// passThrough hands the legacy request r to next, unchanged, and
// observes the time next took with the status it answered
// (engine.PassedThrough): the status written, else, when next returned
// an error for Caddy's error routes to answer, the error's status (500
// when it names none), else 200 as net/http sends it. A 101 Switching
// Protocols (a WebSocket passed on) is not observed: its time is the
// connection's life, not a request's.
func passThrough(e *engine.Engine, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	pw := passWriters.Get().(*passWriter)
	pw.ResponseWriter, pw.status = w, 0
	start := time.Now()
	err := next.ServeHTTP(pw, r)
	elapsed := time.Since(start)
	status := pw.status
	if status != http.StatusSwitchingProtocols { // an upgraded connection may outlive next: its writer is not reused
		pw.ResponseWriter = nil
		passWriters.Put(pw)
	}
	if status == 0 {
		status = http.StatusOK
		if err != nil {
			status = http.StatusInternalServerError
			var he caddyhttp.HandlerError
			if errors.As(err, &he) && he.StatusCode != 0 {
				status = he.StatusCode
			}
		}
	}
	if status != http.StatusSwitchingProtocols {
		e.PassedThrough(status, elapsed)
	}
	return err
}

// passWriters recycles the writers of passThrough: a legacy request
// costs no allocation for its observation.
var passWriters = sync.Pool{New: func() any { return new(passWriter) }}

// passWriter is the writer the next handler gets for a legacy request:
// the response writer as given, noting the final status written (0
// until one is; a 1xx is not final, a Write or ReadFrom without one is
// 200). It unwraps to the writer (http.ResponseController: Flush,
// Hijack, deadlines) and also answers the older interface checks
// (http.Flusher, http.Hijacker, http.Pusher, io.ReaderFrom) by passing
// them on. It must not be used after next returns.
type passWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader notes a final status, then writes code.
func (w *passWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write notes 200 when no status was written, then writes b.
func (w *passWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom notes 200 when no status was written, then copies src
// (with the writer's own ReadFrom when it has one: sendfile).
func (w *passWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(w.ResponseWriter, src)
}

// Flush flushes the writer when it can (streamed legacy answers).
func (w *passWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// FlushError flushes the writer, with its error.
func (w *passWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes over the connection (an upgraded legacy answer).
func (w *passWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Push is the writer's HTTP/2 server push, http.ErrNotSupported
// without one.
func (w *passWriter) Push(target string, opts *http.PushOptions) error {
	if p, ok := w.ResponseWriter.(http.Pusher); ok {
		return p.Push(target, opts)
	}
	return http.ErrNotSupported
}

// Unwrap is the writer (http.ResponseController).
func (w *passWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clientAddr is the request's client address as Caddy determined it
// (the peer, or the forwarded address from a trusted proxy), the
// invalid address when it does not parse (the operator page then
// refuses it).
func clientAddr(r *http.Request) netip.Addr {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if s == "" {
		s, _, _ = net.SplitHostPort(r.RemoteAddr)
	}
	a, _ := netip.ParseAddr(s)
	return a
}

// answerOptionsStar answers a plain (non-AGTP) OPTIONS * as Go's
// net/http answers it when it keeps the request from the handlers: 200
// with Content-Length: 0, its body (up to 4 KiB) discarded. The
// handler sees OPTIONS * at all only because passOptionsStar lets it
// through, so that an AGTP one gets its AGTP refusal.
func answerOptionsStar(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 4<<10))
	}
	w.WriteHeader(http.StatusOK)
}

// optionsStarServers are the Caddy servers passOptionsStar has hooked,
// so that several rcns handlers in one server hook it once.
var optionsStarServers sync.Map // *caddyhttp.Server → struct{}

// passOptionsStar makes the HTTP server that srv starts pass OPTIONS *
// to its handlers (http.Server.DisableGeneralOptionsHandler): Go's
// server otherwise answers it with a bare 200 before any handler runs,
// so an AGTP OPTIONS * (it carries Agent-ID) never got its 400
// invalid-request-line with the AGTP response headers (spec §2.3,
// cases/01). Caddy builds the http.Server only when it starts, so the
// field is set from a connection hook, once, on the first connection:
// before any request of the server is read. It applies to every site
// of that server (listener address); a plain OPTIONS * is then
// answered by answerOptionsStar in rcns, or by a site's own routes
// where that site has no rcns handler.
func passOptionsStar(srv *caddyhttp.Server) {
	if srv == nil {
		return
	}
	if _, loaded := optionsStarServers.LoadOrStore(srv, struct{}{}); loaded {
		return
	}
	var once sync.Once
	srv.RegisterConnContext(func(ctx context.Context, _ net.Conn) context.Context {
		once.Do(func() {
			if hs, ok := ctx.Value(http.ServerContextKey).(*http.Server); ok {
				hs.DisableGeneralOptionsHandler = true
			}
		})
		return ctx
	})
}

// statusWriter is w noting the final status written (0 until one is;
// a Write without WriteHeader is 200), for the MCP door's request
// counter. It flushes (server-sent events) and unwraps
// (http.ResponseController) to w.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader notes code unless it is informational (1xx), then writes
// it.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write notes 200 when no status was written, then writes b.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes w's writer when it can.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is the wrapped writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
