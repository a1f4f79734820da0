// Package floor is a bench-only Caddy HTTP handler, bench_redis_floor:
// before passing a request on to the next handler, it makes one round
// trip to Redis on a client built as the rcns Redis store builds its own
// (redisstore.NewDegraded: the same go-redis options, pool and
// timeouts), running a one-line Lua script (EVALSHA of `return 1`, as
// the store runs its scripts, go-redis's Script.Run).
//
// In front of a plain reverse_proxy it is the floor under every rcns
// request kind that makes one Redis round trip: what that round trip
// alone costs a Caddy request, in Caddy's CPU, redis-server's and the
// closed-loop latency, measured in the same rounds as the gateway
// (scripts/bench/Caddyfile, site floor; the page's "floor" column). It
// is compiled into the bench's Caddy only (scripts/bench/caddy), never
// into cmd/caddy.
//
// Caddyfile (ordered before reverse_proxy):
//
//	bench_redis_floor <host:port>
package floor

import (
	"context"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redisstore"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("bench_redis_floor", parseCaddyfile)
	// Before reverse_proxy at the site's top level, as (b)'s
	// reverse_proxy is: no route block of its own to cost a request.
	httpcaddyfile.RegisterDirectiveOrder("bench_redis_floor", httpcaddyfile.Before, "reverse_proxy")
}

// one is the round trip's script: the least a script call can do.
var one = redis.NewScript("return 1")

// Handler makes one Redis round trip per request, then calls the next
// handler. A failed round trip is answered 503 (text/plain) and the
// request goes no further.
type Handler struct {
	// Address is the redis-server, host:port (single mode).
	Address string `json:"address"`

	client *redisstore.Client
}

// CaddyModule returns the module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.bench_redis_floor", New: func() caddy.Module { return new(Handler) }}
}

// Provision builds the client the rcns Redis store would build for the
// same address, with its defaults. It does not dial: the first request
// does, as the store's first call does. An address the store refuses
// (not host:port with a port from 1 to 65535) is an error here, not a
// 503 on every request.
func (h *Handler) Provision(caddy.Context) error {
	c, err := redisstore.NewDegraded(redisstore.Config{Addrs: []string{h.Address}})
	if err != nil {
		return fmt.Errorf("bench_redis_floor: %w", err)
	}
	h.client = c
	return nil
}

// Cleanup closes the client.
func (h *Handler) Cleanup() error {
	if h.client == nil {
		return nil
	}
	return h.client.Close()
}

// ServeHTTP makes the round trip and passes the request on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if err := h.roundTrip(r.Context()); err != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "bench_redis_floor: %v\n", err)
		return nil
	}
	return next.ServeHTTP(w, r)
}

// roundTrip runs the script once: one EVALSHA. The first time on a
// redis-server, the EVALSHA fails NOSCRIPT and go-redis sends an EVAL:
// two round trips, once.
func (h *Handler) roundTrip(ctx context.Context) error {
	return one.Run(ctx, h.client.Redis(), nil).Err()
}

// parseCaddyfile reads `bench_redis_floor <host:port>`.
func parseCaddyfile(hp httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	h := new(Handler)
	if err := h.UnmarshalCaddyfile(hp.Dispenser); err != nil {
		return nil, err
	}
	return h, nil
}

// UnmarshalCaddyfile reads the directive's one argument, the address.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if !d.NextArg() {
		return d.ArgErr()
	}
	h.Address = d.Val()
	if d.NextArg() || d.NextBlock(0) {
		return d.Errf("bench_redis_floor takes one argument, the redis-server's host:port")
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
