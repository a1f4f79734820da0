package caddymodule

import (
	"runtime"
	"testing"
	"weak"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// A config reload provisions a new handler in a new Caddy server and
// cleans up the old one: once cleaned up, nothing of the package may
// keep the old handler's engine (its recipes, schemas, metrics) alive,
// directly or through the old server, whose routes hold the handler.
func TestCleanupReleasesEngine(t *testing.T) {
	const loads = 10
	var engines []weak.Pointer[engine.Engine]
	for range loads {
		pctx, err := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := caddy.NewContext(pctx)
		h := &Handler{logger: zap.NewNop()}
		h.Name, h.ServerID = "cleanuprelease", "s"
		// The server of this load, whose routes hold h, as Caddy's.
		srv := &caddyhttp.Server{Routes: caddyhttp.RouteList{{Handlers: []caddyhttp.MiddlewareHandler{h}}}}
		ctx = ctx.WithValue(caddyhttp.ServerCtxKey, srv)
		if err := h.Provision(ctx); err != nil {
			t.Fatalf("Provision: %v", err)
		}
		engines = append(engines, weak.Make(h.eng))
		if err := h.Cleanup(); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
		cancel()
	}
	runtime.GC()
	runtime.GC()
	live := 0
	for _, w := range engines {
		if w.Value() != nil {
			live++
		}
	}
	// One may linger in a stale stack slot; a leak keeps every one.
	if live > 1 {
		t.Fatalf("%d of %d engines still reachable after Cleanup (a reload leaks every old configuration's engine)", live, loads)
	}
}
