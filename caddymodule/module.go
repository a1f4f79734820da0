// Package caddymodule is the Caddy glue of caddy-rcns: the
// http.handlers.rcns module and the agtp app (the native AGTP/1.0
// door), their JSON config and Caddyfile directives, Provision,
// Validate and Cleanup, the state and the Redis clients shared across
// reloads (caddy.UsagePool), lifecycle events to Caddy's events app and
// metrics on Caddy's registry. It builds the engine
// (caddymodule/engine, the spec §10 order) and the doors
// (caddymodule/httpdoor, caddymodule/mcpdoor, and the native door's
// files here: agtpdoor.go, agtpconn.go).
package caddymodule

import (
	"fmt"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/oppage"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Identity modes (ARCHITECTURE.md "Identity"), as the engine names them.
const (
	IdentityHeader    = engine.IdentityHeader
	IdentityMTLS      = engine.IdentityMTLS
	IdentitySignature = engine.IdentitySignature
)

// Handler is the rcns HTTP handler (module http.handlers.rcns). It
// serves AGTP requests through its engine (the HTTP binding's door,
// spec §2.3) and passes every other request to the next handler
// unchanged; requests for the MCP path, when configured, go to the MCP
// door. Its JSON config is flat: the engine's knobs, the store's, and
// "mcp".
type Handler struct {
	engine.Config
	StoreConfig
	// MCP turns on the MCP door (docs/doors.md "MCP door"):
	// the Tier B endpoints and recipes as MCP tools over Streamable
	// HTTP at one path of this handler. Nil (default): off.
	MCP *mcpdoor.Config `json:"mcp,omitempty"`
	// OperatorPage turns on the operator page (docs/operator-guide.md
	// "The operator page"): an HTML page of the gateway's state, with a
	// contract revoke, at one path of this handler, behind an access
	// rule. Nil (default): off.
	OperatorPage *oppage.Config `json:"operator_page,omitempty"`

	eng *engine.Engine
	// mcp is the MCP door at MCP.Path (nil when off).
	mcp *mcpdoor.Door
	// page is the operator page at OperatorPage.Path (nil when off).
	page *oppage.Page
	// redis (with its pool key) is the pooled client of store redis,
	// else nil; state is its name's State while this handler holds it.
	redis    *pooledRedis
	redisKey string
	// closeSet releases the store Set's own caches (store.Set.Close) at
	// Cleanup; nil when it holds none.
	closeSet func()
	state    *engine.State
	// srv is the Caddy server passOptionsStar hooked for this handler
	// (nil outside a server), forgotten at Cleanup.
	srv *caddyhttp.Server
	// logger, when set before Provision, replaces Caddy's logger for
	// the engine and the doors (the package's tests observe it).
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rcns",
		New: func() caddy.Module { return new(Handler) },
	}
}

// setDefaults applies the defaults of every knob (engine, store, MCP).
func (h *Handler) setDefaults() {
	h.Config.SetDefaults()
	h.setStoreDefaults()
	if h.MCP != nil {
		h.MCP.SetDefaults(&h.Config)
	}
	if h.OperatorPage != nil {
		h.OperatorPage.SetDefaults()
	}
}

// Validate checks the configuration's values (Provision does the
// loading): the engine's, the MCP door's and the store's.
func (h *Handler) Validate() (err error) {
	defer func() { err = moduleError(err) }()
	if err := h.Config.Validate(); err != nil {
		return err
	}
	if h.MCP != nil {
		if err := h.MCP.Validate(h.Identity); err != nil {
			return err
		}
	}
	if h.OperatorPage != nil {
		if err := h.OperatorPage.Validate(); err != nil {
			return err
		}
		if h.MCP != nil && h.OperatorPage.Path == h.MCP.Path {
			return fmt.Errorf("rcns: operator_page path %s is the mcp path", h.MCP.Path)
		}
	}
	return h.validateStore()
}

// moduleError is err, from Validate or Provision, without the "rcns: "
// the gateway's own errors begin with: Caddy names the module before
// it ("provision http.handlers.rcns: "), which made it "rcns: rcns: ".
// errors.Is and errors.As see err as before. Nil stays nil.
func moduleError(err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), "rcns: ") {
		return err
	}
	return unprefixedError{err}
}

// unprefixedError is an error whose text drops a leading "rcns: ".
type unprefixedError struct{ err error }

func (e unprefixedError) Error() string { return strings.TrimPrefix(e.err.Error(), "rcns: ") }
func (e unprefixedError) Unwrap() error { return e.err }

// states are the engines' States by rcns name, kept across reloads.
var states = caddy.NewUsagePool()

// stateHolder makes an engine.State a caddy.Destructor.
type stateHolder struct{ *engine.State }

// Provision applies the defaults and builds the handler's engine and
// doors: engine.New loads and validates every operator document (a bad
// one fails the config load with its file, line and JSON pointer), the
// store is attached (the name's memory store, or a pooled Redis
// client), the engine is registered under its name for the native
// door, and the MCP door is built when configured.
func (h *Handler) Provision(ctx caddy.Context) (err error) {
	defer func() { err = moduleError(err) }()
	h.setDefaults()
	srv, _ := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	passOptionsStar(srv)
	h.srv = srv
	if err := h.validateStore(); err != nil {
		return err
	}
	if !engine.ValidName(h.Name) {
		return fmt.Errorf("rcns: name %q must be 1-64 characters of A-Z a-z 0-9 . _ - and not . or .. (it names the records directory)", h.Name)
	}
	val, _, err := states.LoadOrNew(h.Name, func() (caddy.Destructor, error) {
		return stateHolder{engine.NewState(h.Name)}, nil
	})
	if err != nil {
		return fmt.Errorf("rcns: state: %v", err)
	}
	h.state = val.(stateHolder).State
	logger := h.logger
	if logger == nil {
		logger = ctx.Logger()
	}
	deps := engine.Deps{
		Logger: logger, Metrics: ctx.GetMetricsRegistry(), State: h.state,
		DataDir: caddy.AppDataDir(), NodeID: h.NodeID,
	}
	if ev, err := ctx.App("events"); err == nil {
		if app, ok := ev.(*caddyevents.App); ok {
			deps.Events = caddyEvents{ctx: ctx, app: app}
		}
	}
	if h.MCP != nil {
		deps.Hosted = append(deps.Hosted, mcpdoor.ManifestEntry(h.MCP))
	}
	if h.OAuth != nil {
		// The introspection secret may be a placeholder
		// ({env.RCNS_OAUTH_SECRET}), replaced here, never in the JSON.
		o := *h.OAuth
		o.ClientSecret = caddy.NewReplacer().ReplaceAll(o.ClientSecret, "")
		h.OAuth = &o
	}
	if len(h.Upstreams) > 0 {
		// A token exchange's client secret may be a placeholder
		// ({env.NAME}, {file.PATH}), replaced here, never in the JSON.
		ups := make(map[string]*engine.UpstreamConfig, len(h.Upstreams))
		for n, uc := range h.Upstreams {
			if uc != nil && uc.Credentials != nil && uc.Credentials.TokenExchange != nil {
				u, cc, te := *uc, *uc.Credentials, *uc.Credentials.TokenExchange
				te.ClientSecret = caddy.NewReplacer().ReplaceAll(te.ClientSecret, "")
				cc.TokenExchange, u.Credentials = &te, &cc
				uc = &u
			}
			ups[n] = uc
		}
		h.Upstreams = ups
	}
	e, err := engine.New(&h.Config, deps)
	if err != nil {
		return err
	}
	// Set before the store is attached, so that Cleanup releases what
	// a failed provision attached.
	h.eng = e
	st, err := h.provisionStore(ctx, e)
	if err != nil {
		return err
	}
	if err := e.Attach(st); err != nil {
		return err
	}
	if h.redis != nil {
		h.redis.join(e)
	}
	register(h.Name, e, loadOf(ctx))
	if h.MCP != nil {
		d, err := mcpdoor.New(e, h.MCP)
		if err != nil {
			return err
		}
		h.mcp = d
	}
	if h.OperatorPage != nil {
		// The credentials may be placeholders
		// ({env.RCNS_OPERATOR_TOKEN}), replaced here, never in the JSON.
		o := *h.OperatorPage
		repl := caddy.NewReplacer()
		o.BearerToken = repl.ReplaceAll(o.BearerToken, "")
		o.BasicPassword = repl.ReplaceAll(o.BasicPassword, "")
		if h.OperatorPage.BearerToken != "" && o.BearerToken == "" || h.OperatorPage.BasicPassword != "" && o.BasicPassword == "" {
			return fmt.Errorf("rcns: operator_page: a credential's placeholder is empty (an unset environment variable?): the page would be open to every allowed address")
		}
		p, err := oppage.New(o, e, h.storeHealth)
		if err != nil {
			return fmt.Errorf("rcns: %v", err)
		}
		h.page = p
	}
	return nil
}

// caddyEvents forwards the engine's lifecycle events to Caddy's events
// app (engine.EventSink).
type caddyEvents struct {
	ctx caddy.Context
	app *caddyevents.App
}

// Emit emits one event on the events app.
func (c caddyEvents) Emit(eventType string, data map[string]any) {
	c.app.Emit(c.ctx, eventType, data)
}

// Cleanup releases the upstream clients, the store and this handler's
// hold on the shared state (the last holder of a name destructs it).
func (h *Handler) Cleanup() error {
	if h.srv != nil {
		// The server goes away with its configuration; the map must not
		// keep it (and, through its routes, this handler and its engine).
		optionsStarServers.Delete(h.srv)
		h.srv = nil
	}
	if h.mcp != nil && h.eng != nil && caddy.Exiting() {
		// A graceful stop: let running MCP tasks end and store their ends
		// (at most one composition_timeout, the longest a plan runs).
		if !mcpdoor.WaitTasks(time.Duration(h.CompositionTimeout) + 5*time.Second) {
			h.eng.Logger().Warn("MCP tasks still running at exit: their leases will end and they will read failed")
		}
	}
	if h.eng != nil {
		unregister(h.Name, h.eng)
		h.eng.Close()
	}
	h.releaseStore()
	if h.state != nil {
		h.state = nil
		_, err := states.Delete(h.Name)
		return err
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ engine.EventSink            = caddyEvents{}
)
