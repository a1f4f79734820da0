// Package benchref is the reference handler of the load comparison
// (docs/performance.md, row (bd)): the wire exchange of a contract
// presentation with none of the gateway's work. It exists only in the
// bench build of Caddy (scripts/bench/caddy), never in the product.
//
// For every request it does the I/O any implementation of the exchange
// must do, and nothing else:
//
//  1. reads the request body to its end (an agent's JSON envelope; at
//     most MaxBodyBytes);
//  2. makes one GET to the upstream over a keep-alive transport tuned
//     as the gateway's (recipes.NewUpstream) and reads the answer;
//  3. answers 200 with fixed response headers and a fixed body (the
//     AGTP headers and envelope of a (d) answer, static values of the
//     same sizes).
//
// It decodes no JSON, checks no identity, schema or contract, and
// builds, hashes or signs no record: its cost is a lower bound of what
// any gateway serving the exchange costs on the same machine.
package benchref

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// MaxBodyBytes bounds the request body Exchange reads (1 MiB, the
// gateway's default body limit); a longer body is answered 413.
const MaxBodyBytes = 1 << 20

func init() {
	caddy.RegisterModule(Exchange{})
	httpcaddyfile.RegisterHandlerDirective("bench_exchange", parseCaddyfile)
}

// Exchange is the handler http.handlers.bench_exchange.
type Exchange struct {
	// Upstream is the upstream's host:port (plain HTTP, loopback).
	Upstream string `json:"upstream"`
	// Path is the upstream path every request is sent to with GET.
	Path string `json:"path"`
	// Headers are the fixed response header fields, name → value.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the fixed response body; ContentType its media type.
	Body        string `json:"body"`
	ContentType string `json:"content_type"`

	url       string
	header    http.Header
	transport *http.Transport
}

// CaddyModule returns the Caddy module information.
func (Exchange) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.bench_exchange", New: func() caddy.Module { return new(Exchange) }}
}

// Provision checks the configuration and builds the transport and the
// fixed header; errors name the field.
func (e *Exchange) Provision(caddy.Context) error { return e.setup() }

func (e *Exchange) setup() error {
	host, _, err := net.SplitHostPort(e.Upstream)
	if err != nil {
		return fmt.Errorf("bench_exchange: upstream %q: want host:port: %v", e.Upstream, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("bench_exchange: upstream %q is not a loopback address", e.Upstream)
	}
	if e.Path == "" || e.Path[0] != '/' {
		return fmt.Errorf("bench_exchange: path %q must start with /", e.Path)
	}
	u := url.URL{Scheme: "http", Host: e.Upstream, Path: e.Path}
	e.url = u.String()
	if e.ContentType == "" {
		e.ContentType = "application/json"
	}
	e.header = http.Header{}
	for k, v := range e.Headers {
		e.header.Set(k, v)
	}
	e.header.Set("Content-Type", e.ContentType)
	e.header.Set("Content-Length", strconv.Itoa(len(e.Body)))
	e.transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        128,
		MaxIdleConnsPerHost: 64,
		MaxConnsPerHost:     64,
		IdleConnTimeout:     90 * time.Second,
	}
	return nil
}

// Cleanup closes the transport's idle connections.
func (e *Exchange) Cleanup() error {
	if e.transport != nil {
		e.transport.CloseIdleConnections()
	}
	return nil
}

// ServeHTTP reads the request body, calls the upstream and writes the
// fixed answer. A body over MaxBodyBytes is 413; an upstream failure or
// a non-200 upstream status is 502. It never calls next.
func (e *Exchange) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return caddyhttp.Error(http.StatusBadRequest, err)
	}
	if n > MaxBodyBytes {
		return caddyhttp.Error(http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", MaxBodyBytes))
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, e.url, nil)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	resp, err := e.transport.RoundTrip(req)
	if err != nil {
		return caddyhttp.Error(http.StatusBadGateway, err)
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBodyBytes))
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return caddyhttp.Error(http.StatusBadGateway, fmt.Errorf("upstream: status %d, %v", resp.StatusCode, err))
	}
	h := w.Header()
	for k, v := range e.header {
		h[k] = v
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, e.Body)
	return nil
}

// UnmarshalCaddyfile reads
//
//	bench_exchange {
//		upstream     <host:port>
//		path         <path>
//		body         <text>
//		content_type <media type>
//		header       <name> <value>   (repeatable)
//	}
func (e *Exchange) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		key := d.Val()
		var args []string
		for d.NextArg() {
			args = append(args, d.Val())
		}
		want := 1
		if key == "header" {
			want = 2
		}
		if len(args) != want {
			return d.Errf("bench_exchange %s: want %d argument(s), got %d", key, want, len(args))
		}
		switch key {
		case "upstream":
			e.Upstream = args[0]
		case "path":
			e.Path = args[0]
		case "body":
			e.Body = args[0]
		case "content_type":
			e.ContentType = args[0]
		case "header":
			if e.Headers == nil {
				e.Headers = map[string]string{}
			}
			e.Headers[args[0]] = args[1]
		default:
			return d.Errf("bench_exchange: unknown subdirective %q", key)
		}
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	e := new(Exchange)
	err := e.UnmarshalCaddyfile(h.Dispenser)
	return e, err
}

var (
	_ caddy.Provisioner           = (*Exchange)(nil)
	_ caddy.CleanerUpper          = (*Exchange)(nil)
	_ caddyhttp.MiddlewareHandler = (*Exchange)(nil)
	_ caddyfile.Unmarshaler       = (*Exchange)(nil)
)
