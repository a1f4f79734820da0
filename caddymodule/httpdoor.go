package caddymodule

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// ianaMethods are the methods of the IANA HTTP Method Registry; without
// Agent-ID they are never AGTP (ARCHITECTURE.md "Which requests are
// AGTP").
var ianaMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "CONNECT": true,
	"OPTIONS": true, "TRACE": true, "PATCH": true, "QUERY": true, "ACL": true,
	"BASELINE-CONTROL": true, "BIND": true, "CHECKIN": true, "CHECKOUT": true, "COPY": true,
	"LABEL": true, "LINK": true, "LOCK": true, "MERGE": true, "MKACTIVITY": true,
	"MKCALENDAR": true, "MKCOL": true, "MKREDIRECTREF": true, "MKWORKSPACE": true, "MOVE": true,
	"ORDERPATCH": true, "PRI": true, "PROPFIND": true, "PROPPATCH": true, "REBIND": true,
	"REPORT": true, "SEARCH": true, "UNBIND": true, "UNCHECKOUT": true, "UNLINK": true,
	"UNLOCK": true, "UPDATE": true, "UPDATEREDIRECTREF": true, "VERSION-CONTROL": true,
}

// isAGTP reports whether r is an AGTP request: it carries Agent-ID, or
// its method is a catalog or custom method outside the IANA registry
// and not a configured passthrough method.
func (h *engine) isAGTP(r *http.Request) bool {
	if _, ok := r.Header["Agent-Id"]; ok {
		return true
	}
	m := r.Method
	if ianaMethods[m] || h.passthru[m] {
		return false
	}
	return h.methods.IsMethod(m)
}

// ServeHTTP is the HTTP binding's door (spec §2.3): an AGTP request
// goes to the engine and its answer is written back; every other
// request goes to next unchanged. A request for the MCP path goes to
// the MCP door, whatever it carries, and never to next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	e := h.eng
	e.activate()
	if h.mcp != nil && r.URL.Path == h.mcp.cfg.Path {
		h.mcp.ServeHTTP(w, r)
		return nil
	}
	if !e.isAGTP(r) {
		if r.RequestURI == "*" && r.Method == http.MethodOptions {
			answerOptionsStar(w, r)
			return nil
		}
		return next.ServeHTTP(w, r)
	}
	in := &agtp.Request{
		Binding: agtp.BindingHTTP, Method: r.Method, Target: r.RequestURI, URL: r.URL, Host: r.Host,
		Header: r.Header, ContentLength: r.ContentLength, Chunked: len(r.TransferEncoding) > 0,
		TLS: r.TLS, Context: r.Context(),
	}
	if r.ContentLength != 0 {
		in.Body = r.Body
	}
	if e.Identity == IdentityHeader {
		in.Loopback = localIsLoopback(r) // a walk up the request's context chain: only where it counts
	}
	resp := e.serve(in)
	writeHTTP(w, r, resp)
	if resp.Close {
		refusedBodyDrain(e).drainHTTP(w, r)
	}
	return nil
}

// writeHTTP writes an engine answer on the HTTP binding: the fields in
// their AGTP spelling (the header map's keys as given, not
// canonicalized), the status code (Go writes "status code 263" for the
// AGTP codes it has no phrase for), and the body, never chunked.
func writeHTTP(w http.ResponseWriter, r *http.Request, resp *agtp.Response) {
	hd := w.Header()
	// One backing array for the header values instead of a slice per
	// field; each field gets a one-element, capacity-capped window.
	vals := make([]string, len(resp.Header), len(resp.Header)+1)
	for i, f := range resp.Header {
		vals[i] = f.Value
		hd[f.Name] = vals[i : i+1 : i+1]
	}
	if len(resp.Body) == 0 {
		delete(hd, "Content-Type")
	}
	if resp.Close && r.ProtoMajor == 1 {
		// A refusal before the declared body was read: net/http would
		// otherwise try to discard the unread body before finishing the
		// answer, which for a body that never comes waits out the
		// server's read timeout. With Connection: close it skips the
		// discard and the answer leaves at once. HTTP/1 only: on HTTP/2
		// the header would shut the whole connection down, and a
		// stream's unread body is reset instead. ServeHTTP then drains
		// what the client still sends of the body (drainHTTP), so the
		// close resets nothing.
		hd["Connection"] = []string{"close"}
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 && r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// httpView is the request as policy/httpsig reads it for RFC 9421
// derived components: @method, @authority (Host), @path and @query from
// the target, the header fields, and whether it has a body (then
// content-type and content-digest must be covered; the body's bytes go
// to httpsig.VerifyOptions.Body). Every door's request has one.
func httpView(in *agtp.Request) *http.Request {
	r := &http.Request{Method: in.Method, Host: in.Host, Header: in.Header, RequestURI: in.Target, URL: in.URL, TLS: in.TLS,
		ContentLength: in.ContentLength, Body: http.NoBody}
	if in.ContentLength != 0 {
		r.Body = io.NopCloser(strings.NewReader(""))
	}
	if r.URL == nil {
		r.URL = &url.URL{}
	}
	if in.Binding == agtp.BindingNative {
		// @authority drops the scheme's default port: 4480 for agtp and
		// agtps (policy/httpsig), as 80 and 443 for http and https.
		u := *r.URL
		u.Scheme = "agtp"
		if in.TLS != nil {
			u.Scheme = "agtps"
		}
		r.URL = &u
	}
	return r
}

func localIsLoopback(r *http.Request) bool {
	addr, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if addr == nil {
		return false
	}
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
