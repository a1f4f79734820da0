// Package caddymodule is the Caddy glue of caddy-rcns: the
// http.handlers.rcns module, its JSON config and Caddyfile directive,
// the AGTP dispatch order of spec §10, and the AGTP wire surfaces.

package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Delivery modes (spec §13.4).
const (
	ModeConfirmFirst = "confirm-first"
	ModeOptimistic   = "optimistic"
)

// Identity modes (ARCHITECTURE.md "Identity").
const (
	// IdentityHeader trusts the Agent-ID header; loopback only.
	IdentityHeader = "header"
)

// Handler is the rcns HTTP handler (module http.handlers.rcns): the
// HTTP binding's door (spec §2.3). It serves AGTP requests through its
// engine and passes every other request to the next handler unchanged;
// requests for the MCP path, when configured, go to the MCP door.
type Handler struct {
	Config
	eng *engine
	// mcp is the MCP door at Config.MCP.Path (nil when off).
	mcp *mcpDoor
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rcns",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Cleanup releases the upstream clients and this handler's hold on the
// shared state.
func (h *Handler) Cleanup() error {
	if h.eng == nil {
		return nil
	}
	return h.eng.cleanup()
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
