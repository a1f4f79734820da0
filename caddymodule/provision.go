package caddymodule

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Provision applies the defaults and builds the handler's engine: it
// loads and validates every operator document, builds the method
// policy, the upstream clients, the endpoint and recipe set, and
// attaches the state kept across reloads. A bad document fails the
// config load with its file, line and JSON pointer.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.setDefaults()
	srv, _ := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	passOptionsStar(srv)
	e := &engine{Config: &h.Config}
	// Set before provision so that Cleanup releases what a failed
	// provision attached.
	h.eng = e
	if err := e.provision(ctx); err != nil {
		return err
	}
	e.register()
	if h.MCP != nil {
		d, err := newMCPDoor(e, h.MCP)
		if err != nil {
			return err
		}
		h.mcp = d
	}
	return nil
}

// provision builds the engine from its Config (defaults applied).
func (h *engine) provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.pub = &manifestHolder{}
	h.act = &activation{}
	h.ctx = ctx
	if !validName(h.Name) {
		return fmt.Errorf("rcns: name %q must be 1-64 characters of A-Z a-z 0-9 . _ - and not . or .. (it names the records directory)", h.Name)
	}
	if err := h.checkPaths(); err != nil {
		return err
	}
	if err := h.checkNotNegative(); err != nil {
		return err
	}
	if err := h.validateStore(); err != nil {
		return err
	}
	if ev, err := ctx.App("events"); err == nil {
		h.events, _ = ev.(*caddyevents.App)
	}
	signer, err := loadSigner(h.RecordKeys)
	if err != nil {
		return fmt.Errorf("rcns: %v", err)
	}
	h.signer = signer
	if h.Identity != IdentitySignature && len(h.SignatureAuthorities) > 0 {
		h.logger.Warn("signature_authorities has no effect: it applies to identity signature, and this gateway runs identity " + h.Identity)
	}
	if h.Identity == IdentitySignature && len(h.SignatureAuthorities) == 0 {
		h.logger.Warn("identity signature without signature_authorities: any signed @authority is accepted, so a request an agent signed for another server that trusts the same key can be replayed here once within its validity window; list this gateway's host[:port] names in signature_authorities")
	}
	if !signer.Signed() {
		h.logger.Warn("no record_keys configured: Attribution-Records are unsigned (alg none) and not authoritative")
	}
	cat := policy.DefaultCatalog()
	if h.Catalog != "" {
		raw, err := os.ReadFile(h.Catalog)
		if err != nil {
			return fmt.Errorf("rcns: reading catalog: %v", err)
		}
		if cat, err = policy.LoadCatalog(raw); err != nil {
			return fmt.Errorf("rcns: catalog %s: %v", h.Catalog, err)
		}
	}
	redirects := make([]policy.Redirect, len(h.Redirects))
	for i, r := range h.Redirects {
		redirects[i] = policy.Redirect{FromMethod: r.FromMethod, FromPath: r.FromPath, ToMethod: r.ToMethod, ToPath: r.ToPath}
	}
	h.methods = &policy.MethodPolicy{Catalog: cat, Legacy: h.Legacy, Aliases: h.Aliases, Allow: h.Allow, Disallow: h.Disallow, Redirects: redirects}
	if h.NoAliases {
		h.methods.Aliases = map[string]string{}
	}
	if err := h.methods.Validate(); err != nil {
		return fmt.Errorf("rcns: method policy: %v", err)
	}
	// Entries that load but are skipped (a disallow or redirect naming a
	// method this server does not serve, RCNS §5.4 "skipped with a
	// warning") or act unexpectedly (a legacy verb admitted without an
	// alias) are logged once here, so a typo does not pass silently.
	for _, w := range h.methods.Warnings() {
		h.logger.Warn("method policy", zap.String("warning", w))
	}
	h.passthru = map[string]bool{}
	for i, m := range h.PassthroughMethods {
		// The method-token rule of allow and disallow: a request method is
		// compared as sent, so "fetch" or "12" would never match.
		if !policy.ValidMethodToken(m) {
			return fmt.Errorf("rcns: passthrough_methods[%d] %q does not match ^[A-Z]+$ with length 3..32 (a method token, as in allow and disallow)", i, m)
		}
		h.passthru[m] = true
	}
	h.upstreams = map[string]*recipes.Upstream{}
	names := make([]string, 0, len(h.Upstreams))
	for n := range h.Upstreams {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		uc := h.Upstreams[n]
		if uc == nil {
			return fmt.Errorf("rcns: upstream %q has no configuration", n)
		}
		if uc.Timeout < 0 {
			return fmt.Errorf("rcns: upstream %q: timeout must not be negative (leave it out for the default)", n)
		}
		if uc.MaxConns < 0 {
			return fmt.Errorf("rcns: upstream %q: max_conns must not be negative (leave it out for the default)", n)
		}
		up, err := recipes.NewUpstream(n, uc.URL, recipes.UpstreamOptions{
			Timeout: time.Duration(uc.Timeout), MaxConns: uc.MaxConns, InsecureHTTP: uc.InsecureHTTP,
			MaxResponseBytes: h.MaxUpstreamResponse,
		})
		if err != nil {
			return fmt.Errorf("rcns: %v", err)
		}
		if up.Insecure {
			h.logger.Warn("upstream uses plain http to a non-loopback host (insecure_http)", zap.String("upstream", n), zap.String("url", uc.URL))
		}
		h.upstreams[n] = up
	}
	agents, err := h.loadAgents()
	if err != nil {
		return fmt.Errorf("rcns: %v", err)
	}
	if h.agents, err = policy.NewRegistry(agents); err != nil {
		return fmt.Errorf("rcns: agent registry: %v", err)
	}
	if h.set, err = recipes.Load(h.Endpoints, h.Recipes, h.methods, h.upstreams); err != nil {
		return fmt.Errorf("rcns: %v", err)
	}
	for _, r := range h.set.Recipes {
		if r.Depth() > h.MaxSynthesisDepth {
			h.logger.Warn("recipe has more steps than max_synthesis_depth and will never be synthesized",
				zap.String("recipe", r.Name), zap.Int("steps", r.Depth()), zap.Int("max_synthesis_depth", h.MaxSynthesisDepth))
		}
		for i, s := range r.Steps {
			if !s.Endpoint.Semantic.IsIdempotent && i < len(r.Steps)-1 {
				h.logger.Warn("recipe has a non-idempotent step followed by other steps; there is no rollback, writes belong last",
					zap.String("recipe", r.Name), zap.String("step", s.Name))
			}
		}
	}
	h.gate = policy.Gate{Enabled: h.Enabled, MinTrustTier: policy.TrustTier(h.MinTrustTier)}

	val, _, err := states.LoadOrNew(h.Name, func() (caddy.Destructor, error) {
		return &state{
			recipes:      map[string]string{},
			negotiations: newNegotiations(10000),
			records:      &recordState{name: h.Name},
		}, nil
	})
	if err != nil {
		return fmt.Errorf("rcns: state: %v", err)
	}
	h.st = val.(*state)
	if err := h.attachState(); err != nil {
		states.Delete(h.Name) //nolint:errcheck
		h.st = nil
		return fmt.Errorf("rcns: %v", err)
	}
	methodSet := map[string]bool{}
	for _, e := range h.set.Endpoints {
		methodSet[e.Method] = true
	}
	for _, r := range h.set.Recipes {
		methodSet[r.Method] = true
	}
	for _, m := range h.methods.CustomMethods() {
		methodSet[m] = true
	}
	if h.metrics, err = newMetrics(ctx.GetMetricsRegistry(), sortedKeys(methodSet)); err != nil {
		return fmt.Errorf("rcns: metrics: %v", err)
	}
	if err := h.provisionStore(ctx); err != nil {
		return err
	}
	if err := h.attachLimiters(); err != nil {
		return fmt.Errorf("rcns: %v", err)
	}
	if err := h.buildManifest(); err != nil {
		return fmt.Errorf("rcns: manifest: %v", err)
	}
	if h.mem != nil {
		h.refreshStoreGauges(ctx)
	}
	return nil
}

// attachState adapts the shared state to this configuration: the
// records directory and the recipe drift check (a recipe whose name and
// version were seen before with other content is refused).
func (h *engine) attachState() error {
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	dir := h.RecordsDir
	switch dir {
	case "off":
		dir = ""
	case "":
		dir = filepath.Join(caddy.AppDataDir(), "rcns", h.Name)
	}
	// Read-only here: the files are opened (and records_dir created) on
	// the first request, see activate.
	h.recDir, h.recFsync = dir, records.FsyncPolicy(h.Fsync)
	if err := st.records.check(dir, h.recFsync, h.signer); err != nil {
		return err
	}
	if err := h.set.CheckDrift(st.recipes); err != nil {
		return err
	}
	for _, r := range h.set.Recipes {
		st.recipes[r.Name+"@"+r.Version] = r.ContentHash
	}
	return nil
}

// attachLimiters takes the rate-limit budgets from the store: the gate
// budget always, the invocation budget when configured.
func (h *engine) attachLimiters() error {
	var err error
	gate := ratelimit.Budget{Name: ratelimit.BudgetRCNS, Burst: burstOf(h.RateLimitBurst, h.RateLimitPerMinute), PerMinute: h.RateLimitPerMinute}
	if h.gateRL, err = h.sto.Limiters.Limiter(gate, h.RateLimitAgents); err != nil {
		return fmt.Errorf("rate_limit rcns: %v", err)
	}
	if h.InvocationRateLimitPerMinute > 0 {
		inv := ratelimit.Budget{Name: ratelimit.BudgetInvocation, Burst: burstOf(h.InvocationRateLimitBurst, h.InvocationRateLimitPerMinute), PerMinute: h.InvocationRateLimitPerMinute}
		if h.invokeRL, err = h.sto.Limiters.Limiter(inv, h.RateLimitAgents); err != nil {
			return fmt.Errorf("rate_limit invocation: %v", err)
		}
	}
	return nil
}

// loadAgents reads agent documents into registry values and indexes
// their certificates and keys for the verified identity modes. An
// agent_id declared in two documents fails with both files named.
func (h *engine) loadAgents() ([]policy.Agent, error) {
	docs, err := schema.LoadPaths(h.Agents, schema.KindAgent)
	if err != nil {
		return nil, err
	}
	out := make([]policy.Agent, 0, len(docs))
	ads := make([]schema.AgentDoc, 0, len(docs))
	first := map[string]*schema.Document{} // agent_id → the document declaring it
	for _, d := range docs {
		var a schema.AgentDoc
		if err := d.Decode(&a); err != nil {
			return nil, d.Errorf("", "%v", err)
		}
		if prev, dup := first[a.AgentID]; dup {
			if prev.File == d.File {
				return nil, d.Errorf("/agent_id", "agent_id %s: this file is loaded twice (agents lists it twice, or it and its directory)", a.AgentID)
			}
			line, _ := prev.Line("/agent_id")
			return nil, d.Errorf("/agent_id", "agent_id %s is already declared in %s:%d", a.AgentID, prev.File, line)
		}
		first[a.AgentID] = d
		ads = append(ads, a)
		ag := policy.Agent{ID: a.AgentID, Name: a.Name, OwnerID: a.OwnerID, TrustTier: policy.TrustTier(a.TrustTier), Status: policy.AgentStatus(a.Status)}
		if ag.Status == "" {
			ag.Status = policy.AgentActive
		}
		for i, s := range a.Scopes {
			sc, err := policy.ParseScope(s)
			if err != nil {
				return nil, d.Errorf(fmt.Sprintf("/scopes/%d", i), "%v", err)
			}
			ag.Scopes = append(ag.Scopes, sc)
		}
		out = append(out, ag)
	}
	if h.idents, err = buildIdentities(h.Identity, docs, ads); err != nil {
		return nil, err
	}
	h.idSteps = h.verifiers()
	return out, nil
}

// loadSigner builds the Attribution-Record signer from the configured
// Ed25519 keys (first signs; all published).
func loadSigner(paths []string) (*records.Signer, error) {
	keys := make([]ed25519.PrivateKey, 0, len(paths))
	for _, p := range paths {
		k, err := records.LoadEd25519Key(p)
		if err != nil {
			return nil, fmt.Errorf("record_keys: %v", err)
		}
		keys = append(keys, k)
	}
	return records.NewSigner(keys)
}
