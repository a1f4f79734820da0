// Package httpdoor is the HTTP binding's door (spec §2.3): it frames
// an HTTP request into an agtp.Request for the engine and writes the
// engine's agtp.Response back with net/http. The Caddy handler
// (caddymodule.Handler) routes to it; the MCP door shares its writer,
// its loopback check and its drain of a refused body.
package httpdoor

import (
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// Serve answers the AGTP request r (IsAGTP) through e and writes the
// answer to w; after an answer that closes the connection it drains
// what is left of r's body within e's refused_body_drain bounds. It
// returns the answer, for the access log (its RequestID and Reason).
func Serve(e *engine.Engine, w http.ResponseWriter, r *http.Request) *agtp.Response {
	in := &agtp.Request{
		Binding: agtp.BindingHTTP, Method: r.Method, Target: r.RequestURI, URL: r.URL, Host: r.Host,
		Header: r.Header, ContentLength: r.ContentLength, Chunked: len(r.TransferEncoding) > 0,
		TLS: r.TLS,
	}
	if r.ContentLength != 0 {
		in.Body = r.Body
	}
	if e.TrustsHeader() {
		in.Loopback = LocalIsLoopback(r) // a walk up the request's context chain: only where it counts
	}
	resp := e.Serve(r.Context(), in)
	Write(w, r, resp)
	if resp.Close {
		Drain(e.RefusedBodyDrainBounds(), w, r)
	}
	return resp
}

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

// IsAGTP reports whether r is an AGTP request to e: it carries
// Agent-ID, or its method is a catalog or custom method outside the
// IANA registry and not a configured passthrough method.
func IsAGTP(e *engine.Engine, r *http.Request) bool {
	if _, ok := r.Header["Agent-Id"]; ok {
		return true
	}
	return !ianaMethods[r.Method] && e.IsAGTPMethod(r.Method)
}

// Write writes an engine answer on the HTTP binding: the fields in
// their AGTP spelling (the header map's keys as given, not
// canonicalized), the status code (Go writes "status code 263" for the
// AGTP codes it has no phrase for), and the body, never chunked.
func Write(w http.ResponseWriter, r *http.Request, resp *agtp.Response) {
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

// LocalIsLoopback reports whether r arrived on a loopback local address
// (127.0.0.0/8, ::1, or a Unix socket): identity header serves only
// those (ARCHITECTURE.md "Identity").
func LocalIsLoopback(r *http.Request) bool {
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

// Drain finishes an HTTP/1 answer written before r's body was read
// (it says Connection: close, Write): it sends the answer, then reads
// and discards the rest of the body, at most b.Max bytes within
// b.Timeout, so that net/http closes a connection with nothing unread
// (it shuts its write side down and waits 500 ms first). It reads
// nothing when a body of more than b.Max bytes is declared, which no
// drain can save; when the client sent Expect: 100-continue and was
// never asked for its body, which it then does not send; and on HTTP/2,
// whose unread stream is reset alone.
func Drain(b engine.DrainBounds, w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody || r.ContentLength > b.Max || expectsContinue(r) {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil || rc.SetReadDeadline(time.Now().Add(b.Timeout)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, r.Body, b.Max)
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

// LoopbackHost reports whether a Host header names a loopback host:
// localhost, 127.0.0.1 (any 127/8 address) or [::1], with or without a
// port.
func LoopbackHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
