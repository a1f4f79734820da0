package engine

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// New builds the engine of cfg with deps. cfg has its defaults applied
// (SetDefaults) and passed Validate; the engine keeps the pointer and
// only reads it. New loads and checks every operator document (agents,
// endpoints, recipes, the method catalog, record keys) and fails with
// the file, line and JSON pointer of a bad one; builds the method
// policy, the upstream clients and the endpoint and recipe set;
// registers the metrics on deps.Metrics (an error if a collector of
// another shape holds a name); and adapts deps.State to cfg (records
// directory, recipe drift). The engine answers nothing until Attach
// gives it its store; Close releases what New opened. On error New
// releases what it opened itself (the State stays the host's).
func New(cfg *Config, deps Deps) (*Engine, error) {
	h := &Engine{Config: cfg, logger: deps.Logger, events: deps.Events, clock: deps.Clock,
		hosted: deps.Hosted, dataDir: deps.DataDir, st: deps.State, nodeID: deps.NodeID}
	if h.logger == nil {
		h.logger = zap.NewNop()
	}
	h.logBudget = newLogBudget(deps.Clock)
	if h.st == nil {
		h.st = NewState(cfg.Name)
	}
	if err := h.provision(deps.Metrics); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// provision is New's work on h.
func (h *Engine) provision(reg prometheus.Registerer) error {
	h.pub = &manifestHolder{}
	h.act = &activation{}
	if !ValidName(h.Name) {
		return fmt.Errorf("rcns: name %q must be 1-64 characters of A-Z a-z 0-9 . _ - and not . or .. (it names the records directory)", h.Name)
	}
	if err := h.checkPaths(); err != nil {
		return err
	}
	if err := h.checkNotNegative(); err != nil {
		return err
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
	oauthResource := ""
	if h.OAuth != nil {
		oauthResource = h.OAuth.Resource
	}
	if h.credPolicies, err = buildCredentialPolicies(h.Upstreams, oauthResource); err != nil {
		return fmt.Errorf("rcns: %v", err)
	}
	if h.OAuth != nil {
		v, err := newOAuthVerifier(h, h.OAuth, h.logger)
		if err != nil {
			return err
		}
		h.oauth = v
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

	if err := h.attachState(); err != nil {
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
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if h.metrics, err = newMetrics(reg, sortedKeys(methodSet)); err != nil {
		return fmt.Errorf("rcns: metrics: %v", err)
	}

	// Every contract, whichever store holds it, runs its captured plan
	// bound to this configuration's upstreams and endpoints through the
	// restorer (bind), so a corrected address, a rotated header (a
	// static upstream credential) or a new timeout serves contracts
	// made before.
	if h.restorer, err = recipes.NewRestorer(h.methods, h.upstreams, h.set.Endpoints, h.set.Recipes, 0); err != nil {
		return fmt.Errorf("rcns: contract plans: %v", err)
	}
	return nil
}

// Attach gives the engine its store (store memory: the State's Memory;
// store redis: the shared client's set) and readies it to answer: the
// rate-limit budgets on the store's limiters and the manifest. It is
// called once, after New; an error (a budget the store refuses, a
// manifest that does not build) leaves the engine unusable, to Close.
func (h *Engine) Attach(s Store) error {
	h.sto, h.mem, h.shared = s.Set, s.Memory, s.Shared
	if err := h.attachLimiters(); err != nil {
		return fmt.Errorf("rcns: %v", err)
	}
	if err := h.buildManifest(); err != nil {
		return fmt.Errorf("rcns: manifest: %v", err)
	}
	h.loadSealKey(true)
	if h.mem != nil {
		h.RefreshStoreGauges(context.Background())
	}
	return nil
}

// Close releases the upstream clients, the plan restorer (kept
// usable, closed, for requests the old configuration still answers) and
// its hold on the store's rate limiters (store.LimiterReleaser).
// The store and the State are the host's to release.
func (h *Engine) Close() {
	h.metrics.release()
	for _, u := range h.upstreams {
		u.Close()
	}
	if h.restorer != nil {
		h.restorer.Close()
	}
	if h.oauth != nil {
		h.oauth.close()
	}
	closeCredentialPolicies(h.credPolicies)
	for _, l := range []store.Limiter{h.gateRL, h.invokeRL} {
		if r, ok := l.(store.LimiterReleaser); ok {
			r.Release()
		}
	}
}

// attachState adapts the shared state to this configuration: the
// records directory and the recipe drift check (a recipe whose name and
// version were seen before with other content is refused).
func (h *Engine) attachState() error {
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	dir := h.RecordsDir
	switch dir {
	case "off":
		dir = ""
	case "":
		if h.dataDir == "" {
			return fmt.Errorf("records_dir is not set and the host gives no data directory: set records_dir (a directory, or off)")
		}
		dir = filepath.Join(h.dataDir, "rcns", h.Name)
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
func (h *Engine) attachLimiters() error {
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
func (h *Engine) loadAgents() ([]policy.Agent, error) {
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
	if h.idents, err = buildIdentities(h.Identity, h.OAuth, docs, ads); err != nil {
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
