// Package caddymodule is the Caddy glue of caddy-rcns: the
// http.handlers.rcns module, its JSON config and Caddyfile directive,
// the AGTP dispatch order of spec §10, and the AGTP wire surfaces.
package caddymodule

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
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

// Handler is the rcns HTTP handler (module http.handlers.rcns). It
// serves AGTP requests (spec §2.3) and passes every other request to
// the next handler unchanged.
type Handler struct {
	// Name keys the state kept across config reloads (contracts,
	// tombstones, attempt records, record chains). Handlers with the same
	// name share state, and it names the default records directory
	// (<Caddy data dir>/rcns/<name>): 1-64 characters of A-Z a-z 0-9
	// . _ -, not "." or "..". Default "default".
	Name string `json:"name,omitempty"`
	// ServerID is sent as Server-ID on every AGTP response (spec §4) and
	// published as the manifest's server.server_id: 1-255 visible ASCII
	// characters (no spaces, control characters or non-ASCII bytes).
	// Default "caddy-rcns".
	ServerID string `json:"server_id,omitempty"`
	// Identity selects how Agent-ID is proven (ARCHITECTURE.md
	// "Identity"): "header" (default) trusts the header and serves only
	// requests whose local address is loopback (others: 401
	// identity-mode-refused); "mtls" binds Agent-ID to the SHA-256 of the
	// client certificate's SPKI (configure Caddy's client_auth with mode
	// verify_if_given so certificate-less legacy clients still pass);
	// "signature" verifies RFC 9421 HTTP Message Signatures (label sig1,
	// ed25519 or ecdsa-p256-sha256, keyid = RFC 7638 thumbprint).
	Identity string `json:"identity,omitempty"`
	// SignatureMaxAge bounds expires - created of a signature: at least
	// 1s (created and expires are whole seconds). Default 300s.
	SignatureMaxAge caddy.Duration `json:"signature_max_age,omitempty"`
	// SignatureSkew bounds how far created may be from the gateway clock:
	// at least 1s. Default 60s.
	SignatureSkew caddy.Duration `json:"signature_skew,omitempty"`
	// SignatureAuthorities are the authorities (RFC 9110 host[:port]: a
	// host name, an IPv4 address or a bracketed IPv6 literal, and an
	// optional port) this gateway answers to in identity signature: a
	// signed request whose covered @authority is none of them is refused
	// with 401 authority-mismatch. They are compared case-insensitively,
	// the request scheme's default port (80 for http, 443 for https)
	// removed from both sides. Default: none, which accepts any authority
	// and logs a warning at start: on a site that answers several host
	// names, or every one (http://:8080), a request an agent signed for
	// another server trusting the same key can be replayed here once
	// within its validity window (the replay cache is per gateway).
	SignatureAuthorities []string `json:"signature_authorities,omitempty"`
	// ReplayCacheSize bounds the seen-signature cache that refuses
	// replays within the validity window; it must exceed the signatures
	// accepted per window. Default 1000000.
	ReplayCacheSize int `json:"replay_cache_size,omitempty"`

	// AnonymousDiscovery lets callers without Agent-ID read the manifest
	// and the read-only DISCOVER built-ins (spec §8.1). Default true; when
	// false they get 262 anonymous-discovery-disabled.
	AnonymousDiscovery *bool `json:"anonymous_discovery,omitempty"`
	// StrictIdentifiers requires Owner-ID and Request-ID on every request
	// that carries Agent-ID (400 when missing; spec OP-6, OP-7). Default
	// false: both are optional and validated when present.
	StrictIdentifiers bool `json:"strict_identifiers,omitempty"`

	// Enabled opens RCNS lock 1, server policy (spec §11.1). Default false.
	Enabled bool `json:"enabled,omitempty"`
	// Mode is the RCNS delivery mode: "confirm-first" (default, 461) or
	// "optimistic" (263) (spec §13.4).
	Mode string `json:"mode,omitempty"`
	// MinTrustTier is RCNS lock 4: an agent passes iff its trust tier is
	// numerically <= this (spec OP-2). Default 1.
	MinTrustTier int `json:"min_trust_tier,omitempty"`
	// MaxSynthesisDepth bounds the leaf steps of a synthesized plan
	// (spec §13.2). Default 10.
	MaxSynthesisDepth int `json:"max_synthesis_depth,omitempty"`
	// SynthesisEnabled is the manifest's policies.synthesis_enabled
	// (PROPOSE on/off). Default true.
	SynthesisEnabled *bool `json:"synthesis_enabled,omitempty"`
	// ScopeRequiredForInvocation refuses Tier B, Tier C and gate requests
	// that carry no Authority-Scope header with 262 scope-required
	// (spec OP-9). Default true.
	ScopeRequiredForInvocation *bool `json:"scope_required_for_invocation,omitempty"`
	// ContractTTL is the lifetime of a synthesized contract: at least 1s
	// (contract times are whole seconds). Default 1h.
	ContractTTL caddy.Duration `json:"contract_ttl,omitempty"`
	// TombstoneTTL is how long an expired or revoked contract answers
	// 464 contract-revoked before it becomes unknown (404): at least 1s.
	// Every ended contract, released ones too, stays known this long to
	// INSPECT, REVOKE and SUSPEND (200, noop: true). Default 24h.
	TombstoneTTL caddy.Duration `json:"tombstone_ttl,omitempty"`
	// MaxContracts bounds live contracts in all. Default 100000.
	MaxContracts int `json:"max_contracts,omitempty"`
	// MaxContractsPerAgent bounds live contracts per agent. Default 100.
	// Set, it must not exceed MaxContracts (or MaxContracts' default,
	// 100000, when that is unset); a MaxContracts below 100 with this
	// unset is fine: the total binds first.
	MaxContractsPerAgent int `json:"max_contracts_per_agent,omitempty"`
	// MaxRequestBody bounds request bodies in bytes (413 above).
	// Default 1 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`
	// MaxUpstreamResponse bounds each upstream response body in bytes.
	// Default 8 MiB.
	MaxUpstreamResponse int64 `json:"max_upstream_response,omitempty"`
	// CompositionTimeout bounds one plan execution, jq mappings included.
	// It bounds time, not the memory a mapping allocates: mappings are
	// the operator's and trusted; keep them small. Default 60s.
	CompositionTimeout caddy.Duration `json:"composition_timeout,omitempty"`
	// AllowPersistent lets PROPOSE grant `persistent: true`: the contract
	// does not expire by contract_ttl, and its endpoint joins the manifest
	// (AGTP-API-Version is bumped). Default false: a persistent request is
	// granted as a session contract and the downgrade is recorded (spec
	// §14.2, §15.4).
	AllowPersistent bool `json:"allow_persistent,omitempty"`
	// OnPolicyChange is the default mode of REVOKE
	// target=stale-contracts: "grandfather" (default) or "invalidate"
	// (spec §14.4, §20).
	OnPolicyChange string `json:"on_policy_change,omitempty"`
	// AttemptBuffer is the number of RCNS attempt records kept for
	// INSPECT target=rcns-attempt. Default 1024.
	AttemptBuffer int `json:"attempt_buffer,omitempty"`

	// RateLimitPerMinute is the RCNS gate budget per agent, in tokens
	// per minute; every gate evaluation past locks 1–2 spends one (spec
	// §12.1, OP-4, OP-5). Default 10.
	RateLimitPerMinute float64 `json:"rate_limit_per_minute,omitempty"`
	// RateLimitBurst is the gate budget's bucket size. Default:
	// RateLimitPerMinute rounded up.
	RateLimitBurst int `json:"rate_limit_burst,omitempty"`
	// InvocationRateLimitPerMinute is the ordinary invocation budget per
	// agent (Tier B calls and contract invocations), in tokens per
	// minute. Default 0: off.
	InvocationRateLimitPerMinute float64 `json:"invocation_rate_limit_per_minute,omitempty"`
	// InvocationRateLimitBurst is the invocation budget's bucket size.
	// Default: InvocationRateLimitPerMinute rounded up.
	InvocationRateLimitBurst int `json:"invocation_rate_limit_burst,omitempty"`
	// RateLimitAgents bounds the buckets kept per budget; an evicted
	// bucket restarts full. Default 100000.
	RateLimitAgents int64 `json:"rate_limit_agents,omitempty"`
	// IdempotencyWindow is how long a completed Idempotency-Key record
	// replays (spec §12.2, OP-15): at least 1s. Default 24h.
	IdempotencyWindow caddy.Duration `json:"idempotency_window,omitempty"`
	// IdempotencyMaxRecords bounds idempotency records in all.
	// Default 100000.
	IdempotencyMaxRecords int `json:"idempotency_max_records,omitempty"`
	// IdempotencyMaxPerAgent bounds one agent's idempotency records; an
	// agent over it gets 503 idempotency-store-full. Default 10000. Set,
	// it must not exceed IdempotencyMaxRecords (or its default, 100000,
	// when that is unset); an IdempotencyMaxRecords below 10000 with this
	// unset is fine: the total binds first.
	IdempotencyMaxPerAgent int `json:"idempotency_max_per_agent,omitempty"`

	// RecordKeys are PEM files of Ed25519 private keys (PKCS#8) that sign
	// Attribution-Records and lifecycle events; the first signs, all are
	// published in the manifest (server.record_keys). Without keys,
	// records use the unsigned `alg: none` form and a warning is logged.
	RecordKeys []string `json:"record_keys,omitempty"`
	// RecordsDir holds the durable records: negotiation logs (JSON
	// Lines, one hash chain per agent), Attribution-Record chain heads
	// and AGTP-API-Version. Default: Caddy's data directory
	// (rcns/<name>). "off" keeps everything in memory. A records_dir
	// belongs to one gateway: the handler locks it on its first request
	// (gateway.lock); a handler that finds it locked by another gateway
	// (another process, or another name in this one) logs an error and
	// serves without durable records.
	RecordsDir string `json:"records_dir,omitempty"`
	// Fsync is the negotiation log's durability policy: "always",
	// "group" (default: group commit, concurrent records share one
	// fsync and the response waits for it) or "off".
	Fsync string `json:"fsync,omitempty"`

	// Agents are agent documents: files or directories.
	Agents []string `json:"agents,omitempty"`
	// Endpoints are Tier B endpoint documents: files or directories.
	Endpoints []string `json:"endpoints,omitempty"`
	// Recipes are Tier C recipe documents: files or directories.
	Recipes []string `json:"recipes,omitempty"`
	// Catalog is a method catalog JSON file. Default: the embedded
	// catalog 1.0.0.
	Catalog string `json:"catalog,omitempty"`
	// Upstreams are the named legacy REST services endpoints call.
	Upstreams map[string]*UpstreamConfig `json:"upstreams,omitempty"`

	// Legacy lists the legacy HTTP verbs admitted as AGTP methods: nil or
	// ["NONE"] none (default), ["*"] all five (spec §5.4).
	Legacy []string `json:"legacy,omitempty"`
	// Aliases maps alias → canonical method. Nil means the catalog's
	// GET→FETCH, POST→CREATE, PUT→REPLACE, DELETE→REMOVE, PATCH→MODIFY.
	Aliases map[string]string `json:"aliases,omitempty"`
	// NoAliases disables aliasing.
	NoAliases bool `json:"no_aliases,omitempty"`
	// Allow lists the methods served; nil or ["*"] means every catalog
	// method. Names not in the catalog are custom methods (spec OP-12).
	Allow []string `json:"allow,omitempty"`
	// Disallow lists methods refused with 405 (spec §5.4).
	Disallow []string `json:"disallow,omitempty"`
	// Redirects rewrite (method, path) pairs (spec §5.4).
	Redirects []RedirectConfig `json:"redirects,omitempty"`
	// PassthroughMethods go to the next handler when Agent-ID is absent,
	// even when they are catalog methods (e.g. PURGE). Each is a method
	// token (3 to 32 upper-case letters), as in Allow and Disallow.
	PassthroughMethods []string `json:"passthrough_methods,omitempty"`

	logger    *zap.Logger
	methods   *policy.MethodPolicy
	agents    *policy.Registry
	set       *recipes.Set
	upstreams map[string]*recipes.Upstream
	gate      policy.Gate
	st        *state
	passthru  map[string]bool
	metrics   *metrics
	idents    *identities
	ctx       caddy.Context
	events    *caddyevents.App
	signer    *records.Signer
	// recDir and recFsync are the resolved records_dir ("" memory-only)
	// and fsync policy, opened on the first request (act).
	recDir   string
	recFsync records.FsyncPolicy
	act      *activation
	// published is the current manifest, its ETag and AGTP-API-Version;
	// replaced when a persistent synthesis changes the manifest.
	pub      *manifestHolder
	gateRL   *ratelimit.Limiter
	invokeRL *ratelimit.Limiter
}

// RedirectConfig rewrites one (method, path) pair before dispatch
// (spec §5.4 policies.methods.redirects). An empty path matches any path
// (from) or keeps the request path (to). FromPath must be in the RFC
// 3986 normal form request paths are compared in, and a redirect of a
// pair to itself is refused.
type RedirectConfig struct {
	FromMethod string `json:"from_method"`
	FromPath   string `json:"from_path,omitempty"`
	ToMethod   string `json:"to_method"`
	ToPath     string `json:"to_path,omitempty"`
}

// String is the redirect as "FROM_METHOD from_path → TO_METHOD to_path",
// "*" standing for an empty path.
func (r RedirectConfig) String() string {
	star := func(p string) string {
		if p == "" {
			return "*"
		}
		return p
	}
	return r.FromMethod + " " + star(r.FromPath) + " → " + r.ToMethod + " " + star(r.ToPath)
}

// check refuses what the method policy's syntax check lets through but
// can never do anything: a FromPath no request path compares equal to
// (request paths are compared in RFC 3986 normal form, spec §10 step 3,
// before the path grammar of step 4, so a path the grammar refuses, such
// as one ending in "/", can still be redirected), and a redirect of a
// pair to itself.
func (r RedirectConfig) check() error {
	if r.FromPath != "" {
		n, err := policy.NormalizePath(r.FromPath)
		if err != nil {
			return fmt.Errorf("from_path %q never matches: a request for it is refused with 400 invalid-path-encoding (%v)", r.FromPath, err)
		}
		if n != r.FromPath {
			return fmt.Errorf("from_path %q never matches: request paths are compared in RFC 3986 normal form; write %q", r.FromPath, n)
		}
	}
	to := r.FromPath
	if r.ToPath != "" {
		to = r.ToPath
		if n, err := policy.NormalizePath(r.ToPath); err == nil {
			to = n
		}
	}
	if r.FromMethod == r.ToMethod && to == r.FromPath {
		return errors.New("redirects the pair to itself; remove it")
	}
	return nil
}

// UpstreamConfig is one named upstream (ARCHITECTURE.md "Upstreams").
type UpstreamConfig struct {
	// URL is the base URL: https://, or http:// to a loopback host, or
	// http:// with InsecureHTTP.
	URL string `json:"url"`
	// Timeout is the per-call timeout when an endpoint sets none.
	// Default 30s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// MaxConns caps concurrent connections to the upstream. Default 64.
	MaxConns int `json:"max_conns,omitempty"`
	// InsecureHTTP allows http:// to a non-loopback host (warns at start).
	InsecureHTTP bool `json:"insecure_http,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rcns",
		New: func() caddy.Module { return new(Handler) },
	}
}

// state outlives config reloads; it is shared by handlers with the same
// Name through a caddy.UsagePool.
type state struct {
	contracts    *recipes.Store
	idem         *idempotency.Store
	limiters     map[string]*limiterSlot
	negotiations *negotiations
	records      *recordState
	replay       *httpsig.ReplayCache
	attempts     *attemptRing
	mu           sync.Mutex
	recipes      map[string]string // name@version → content hash ever loaded
}

// limiterSlot keeps a budget's limiter across reloads while its
// configuration is unchanged.
type limiterSlot struct {
	sig string
	l   *ratelimit.Limiter
}

// Destruct closes the limiters when the last handler using the state
// goes away.
func (s *state) Destruct() error {
	s.records.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, slot := range s.limiters {
		slot.l.Close()
	}
	return nil
}

// limiter returns the state's limiter for budget b, replacing it when
// its configuration changed.
func (s *state) limiter(b ratelimit.Budget, maxAgents int64) (*ratelimit.Limiter, error) {
	sig := fmt.Sprintf("%d/%g/%d", b.Burst, b.PerMinute, maxAgents)
	if slot, ok := s.limiters[b.Name]; ok {
		if slot.sig == sig {
			return slot.l, nil
		}
		slot.l.Close()
	}
	l, err := ratelimit.New(b, maxAgents, nil)
	if err != nil {
		return nil, err
	}
	s.limiters[b.Name] = &limiterSlot{sig: sig, l: l}
	return l, nil
}

var states = caddy.NewUsagePool()

// Provision loads and validates every operator document, builds the
// method policy, the upstream clients, the endpoint and recipe set, and
// attaches the state kept across reloads. A bad document fails the
// config load with its file, line and JSON pointer.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.pub = &manifestHolder{}
	h.act = &activation{}
	h.ctx = ctx
	h.setDefaults()
	if !validName(h.Name) {
		return fmt.Errorf("rcns: name %q must be 1-64 characters of A-Z a-z 0-9 . _ - and not . or .. (it names the records directory)", h.Name)
	}
	if err := h.checkPaths(); err != nil {
		return err
	}
	if err := h.checkNotNegative(); err != nil {
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
			contracts:    recipes.NewStore(h.storeLimits(), nil),
			attempts:     newAttemptRing(h.AttemptBuffer),
			recipes:      map[string]string{},
			limiters:     map[string]*limiterSlot{},
			negotiations: newNegotiations(10000),
			records:      &recordState{name: h.Name},
			replay:       httpsig.NewReplayCache(h.ReplayCacheSize, nil),
			idem:         idempotency.NewStore(h.idempotencyLimits(), nil),
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
	if err := h.buildManifest(); err != nil {
		return fmt.Errorf("rcns: manifest: %v", err)
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
	h.metrics.setActiveContracts(h.st.contracts.Len())
	h.metrics.setIdempotencyRecords(h.st.idem.Len())
	h.metrics.setAttemptRingSize(h.st.attempts.len())
	return nil
}

// attachState adapts the shared state to this configuration: limits,
// rate-limit buckets, and the recipe drift check (a recipe whose name
// and version were seen before with other content is refused).
func (h *Handler) attachState() error {
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	st.contracts.SetLimits(h.storeLimits())
	st.attempts.resize(h.AttemptBuffer)
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
	if st.idem.Limits() != h.idempotencyLimits() {
		st.idem = idempotency.NewStore(h.idempotencyLimits(), nil)
	}
	var err error
	gate := ratelimit.Budget{Name: ratelimit.BudgetRCNS, Burst: burstOf(h.RateLimitBurst, h.RateLimitPerMinute), PerMinute: h.RateLimitPerMinute}
	if h.gateRL, err = st.limiter(gate, h.RateLimitAgents); err != nil {
		return fmt.Errorf("rate_limit rcns: %v", err)
	}
	if h.InvocationRateLimitPerMinute > 0 {
		inv := ratelimit.Budget{Name: ratelimit.BudgetInvocation, Burst: burstOf(h.InvocationRateLimitBurst, h.InvocationRateLimitPerMinute), PerMinute: h.InvocationRateLimitPerMinute}
		if h.invokeRL, err = st.limiter(inv, h.RateLimitAgents); err != nil {
			return fmt.Errorf("rate_limit invocation: %v", err)
		}
	}
	if err := h.set.CheckDrift(st.recipes); err != nil {
		return err
	}
	for _, r := range h.set.Recipes {
		st.recipes[r.Name+"@"+r.Version] = r.ContentHash
	}
	return nil
}

func (h *Handler) setDefaults() {
	if h.Name == "" {
		h.Name = "default"
	}
	if h.ServerID == "" {
		h.ServerID = "caddy-rcns"
	}
	if h.Identity == "" {
		h.Identity = IdentityHeader
	}
	if h.Mode == "" {
		h.Mode = ModeConfirmFirst
	}
	if h.MinTrustTier == 0 {
		h.MinTrustTier = 1
	}
	if h.MaxSynthesisDepth == 0 {
		h.MaxSynthesisDepth = 10
	}
	if h.ContractTTL == 0 {
		h.ContractTTL = caddy.Duration(time.Hour)
	}
	if h.TombstoneTTL == 0 {
		h.TombstoneTTL = caddy.Duration(24 * time.Hour)
	}
	if h.MaxRequestBody == 0 {
		h.MaxRequestBody = 1 << 20
	}
	if h.MaxUpstreamResponse == 0 {
		h.MaxUpstreamResponse = 8 << 20
	}
	if h.CompositionTimeout == 0 {
		h.CompositionTimeout = caddy.Duration(60 * time.Second)
	}
	if h.AttemptBuffer == 0 {
		h.AttemptBuffer = 1024
	}
	if h.SignatureMaxAge == 0 {
		h.SignatureMaxAge = caddy.Duration(300 * time.Second)
	}
	if h.SignatureSkew == 0 {
		h.SignatureSkew = caddy.Duration(60 * time.Second)
	}
	if h.ReplayCacheSize == 0 {
		h.ReplayCacheSize = 1_000_000
	}
	if h.Fsync == "" {
		h.Fsync = string(records.FsyncGroup)
	}
	if h.OnPolicyChange == "" {
		h.OnPolicyChange = "grandfather"
	}
	if h.RateLimitPerMinute == 0 {
		h.RateLimitPerMinute = 10
	}
	if h.RateLimitAgents == 0 {
		h.RateLimitAgents = ratelimit.DefaultMaxAgents
	}
}

func burstOf(burst int, perMinute float64) int {
	if burst > 0 {
		return burst
	}
	return int(math.Ceil(perMinute))
}

func (h *Handler) idempotencyLimits() idempotency.Limits {
	l := idempotency.Limits{Window: time.Duration(h.IdempotencyWindow), MaxRecords: h.IdempotencyMaxRecords, MaxPerAgent: h.IdempotencyMaxPerAgent,
		// A keyed request runs at most its longest call (at most
		// recipes.MaxCallTimeout) or its plan (composition_timeout):
		// its key stays held that long even when idempotency_window is
		// shorter, so a repeat never runs it a second time.
		InFlightHold: max(time.Duration(h.CompositionTimeout), recipes.MaxCallTimeout) + time.Minute}
	if l.Window <= 0 {
		l.Window = idempotency.DefaultWindow
	}
	if l.MaxRecords <= 0 {
		l.MaxRecords = idempotency.DefaultMaxRecords
	}
	if l.MaxPerAgent <= 0 {
		l.MaxPerAgent = idempotency.DefaultMaxPerAgent
	}
	return l
}

func (h *Handler) storeLimits() recipes.StoreLimits {
	return recipes.StoreLimits{MaxContracts: h.MaxContracts, MaxPerAgent: h.MaxContractsPerAgent, TombstoneTTL: time.Duration(h.TombstoneTTL)}
}

// synthesisEnabled is the manifest's policies.synthesis_enabled: PROPOSE
// synthesizes only when RCNS is enabled (lock 1) and synthesis_enabled
// is not switched off.
func (h *Handler) synthesisEnabled() bool {
	return h.Enabled && (h.SynthesisEnabled == nil || *h.SynthesisEnabled)
}

func (h *Handler) anonymousDiscovery() bool {
	return h.AnonymousDiscovery == nil || *h.AnonymousDiscovery
}

func (h *Handler) scopeRequired() bool {
	return h.ScopeRequiredForInvocation == nil || *h.ScopeRequiredForInvocation
}

// validName reports whether n is a safe state and directory name.
func validName(n string) bool {
	if n == "" || len(n) > 64 || n == "." || n == ".." {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validServerID reports whether id can be sent as the Server-ID header
// and read back unchanged: 1-255 visible ASCII characters (RFC 9110
// VCHAR). A control character (a newline would end the header), a
// non-ASCII byte and a space (recipients trim it at either end; an
// identifier needs none inside) are refused.
func validServerID(id string) bool { return visibleASCII(id, 255) }

// Validate checks the configuration's values (Provision does the
// loading).
func (h *Handler) Validate() error {
	switch h.Mode {
	case ModeConfirmFirst, ModeOptimistic:
	default:
		return fmt.Errorf("rcns: mode must be %q or %q, not %q", ModeConfirmFirst, ModeOptimistic, h.Mode)
	}
	switch records.FsyncPolicy(h.Fsync) {
	case records.FsyncAlways, records.FsyncGroup, records.FsyncOff:
	default:
		return fmt.Errorf("rcns: fsync must be always, group or off, not %q", h.Fsync)
	}
	if h.OnPolicyChange != "grandfather" && h.OnPolicyChange != "invalidate" {
		return fmt.Errorf("rcns: on_policy_change must be grandfather or invalidate, not %q", h.OnPolicyChange)
	}
	switch h.Identity {
	case IdentityHeader, IdentityMTLS, IdentitySignature:
	default:
		return fmt.Errorf("rcns: identity mode %q is not supported (header, mtls, signature)", h.Identity)
	}
	for i, a := range h.SignatureAuthorities {
		if err := checkAuthority(a); err != nil {
			return fmt.Errorf("rcns: signature_authorities[%d] %q %v", i, a, err)
		}
	}
	if !validServerID(h.ServerID) {
		return fmt.Errorf("rcns: server_id %q must be 1-255 visible ASCII characters (no spaces, control characters or non-ASCII): it is sent as the Server-ID response header", h.ServerID)
	}
	if h.MinTrustTier < 1 || h.MinTrustTier > 3 {
		return fmt.Errorf("rcns: min_trust_tier must be 1..3, not %d", h.MinTrustTier)
	}
	if h.MaxSynthesisDepth < 1 {
		return fmt.Errorf("rcns: max_synthesis_depth must be a positive integer")
	}
	if err := h.checkNotNegative(); err != nil {
		return err
	}
	if err := h.checkMinDurations(); err != nil {
		return err
	}
	if err := perAgentBound("max_contracts", h.MaxContracts, recipes.DefaultMaxContracts, "max_contracts_per_agent", h.MaxContractsPerAgent); err != nil {
		return err
	}
	if err := perAgentBound("idempotency_max_records", h.IdempotencyMaxRecords, idempotency.DefaultMaxRecords, "idempotency_max_per_agent", h.IdempotencyMaxPerAgent); err != nil {
		return err
	}
	for i, r := range h.Redirects {
		if err := r.check(); err != nil {
			return fmt.Errorf("rcns: redirects[%d] (%s) %v", i, r, err)
		}
	}
	return nil
}

// perAgentBound refuses a per-agent bound set above the total bound it
// is part of (the total as set, or its default when unset): the
// per-agent bound would never apply. A total set below the default
// per-agent bound is fine: the total then binds first.
func perAgentBound(totalKnob string, total, totalDefault int, perKnob string, per int) error {
	switch {
	case per <= 0:
		return nil
	case total > 0 && per > total:
		return fmt.Errorf("rcns: %s %d is above %s %d, so it would never apply; lower %s or raise %s", perKnob, per, totalKnob, total, perKnob, totalKnob)
	case total <= 0 && per > totalDefault:
		return fmt.Errorf("rcns: %s %d is above the default %s %d; set %s to at least %d, or lower %s", perKnob, per, totalKnob, totalDefault, totalKnob, per, perKnob)
	}
	return nil
}

// Cleanup releases the upstream clients and this handler's hold on the
// shared state.
func (h *Handler) Cleanup() error {
	for _, u := range h.upstreams {
		u.Close()
	}
	if h.st != nil {
		_, err := states.Delete(h.Name)
		return err
	}
	return nil
}

// checkNotNegative refuses a negative bound or duration, naming its
// member: JSON can say what the Caddyfile refuses, and a negative value
// is an error, never the default. Provision calls it before using any
// of them (a negative attempt_buffer or rate limit would fail there
// first, or worse), Validate again.
func (h *Handler) checkNotNegative() error {
	for _, k := range []struct {
		name     string
		negative bool
	}{
		{"signature_max_age", h.SignatureMaxAge < 0}, {"signature_skew", h.SignatureSkew < 0},
		{"replay_cache_size", h.ReplayCacheSize < 0},
		{"rate_limit_per_minute", h.RateLimitPerMinute < 0}, {"rate_limit_burst", h.RateLimitBurst < 0},
		{"invocation_rate_limit_per_minute", h.InvocationRateLimitPerMinute < 0},
		{"invocation_rate_limit_burst", h.InvocationRateLimitBurst < 0},
		{"max_request_body", h.MaxRequestBody < 0}, {"max_upstream_response", h.MaxUpstreamResponse < 0},
		{"max_contracts", h.MaxContracts < 0}, {"max_contracts_per_agent", h.MaxContractsPerAgent < 0},
		{"attempt_buffer", h.AttemptBuffer < 0},
		{"idempotency_window", h.IdempotencyWindow < 0}, {"idempotency_max_records", h.IdempotencyMaxRecords < 0},
		{"idempotency_max_per_agent", h.IdempotencyMaxPerAgent < 0},
		{"contract_ttl", h.ContractTTL < 0}, {"tombstone_ttl", h.TombstoneTTL < 0},
		{"composition_timeout", h.CompositionTimeout < 0},
	} {
		if k.negative {
			return fmt.Errorf("rcns: %s must not be negative (leave it out for the default)", k.name)
		}
	}
	return nil
}

// minDuration is the shortest value of the duration knobs that count in
// whole seconds (checkMinDurations): the same second PROPOSE's
// requested_duration must reach.
const minDuration = minRequestedDuration

// checkMinDurations refuses a duration knob set below minDuration, where
// a shorter value cannot work: contract times are whole seconds
// (issued_at, expires_at; PROPOSE refuses a requested_duration under
// 1s), and so are a signature's created and expires; a tombstone or an
// idempotency record that lasts under a second is gone before a client
// can come back. Zero (unset) is the default and passes.
func (h *Handler) checkMinDurations() error {
	for _, k := range []struct {
		name string
		v    caddy.Duration
		why  string
	}{
		{"contract_ttl", h.ContractTTL, "contract times (issued_at, expires_at) are whole seconds, and PROPOSE refuses a requested_duration under 1s"},
		{"tombstone_ttl", h.TombstoneTTL, "a revoked or expired contract must answer 464 long enough for its agent to see it"},
		{"idempotency_window", h.IdempotencyWindow, "a retry comes later than that"},
		{"signature_max_age", h.SignatureMaxAge, "a signature's created and expires are whole seconds"},
		{"signature_skew", h.SignatureSkew, "a signature's created is whole seconds"},
	} {
		if k.v > 0 && time.Duration(k.v) < minDuration {
			return fmt.Errorf("rcns: %s %s is below the minimum %s: %s", k.name, time.Duration(k.v), minDuration, k.why)
		}
	}
	return nil
}

// checkPaths refuses an empty entry in a list of files or directories
// (agents, endpoints, recipes, record_keys): in JSON "" in a list is not
// "unset", and loading it would fail with an error naming no file.
func (h *Handler) checkPaths() error {
	for _, k := range []struct {
		name  string
		paths []string
	}{{"agents", h.Agents}, {"endpoints", h.Endpoints}, {"recipes", h.Recipes}, {"record_keys", h.RecordKeys}} {
		for i, p := range k.paths {
			if p == "" {
				return fmt.Errorf("rcns: %s[%d]: empty value; give a path or remove the entry", k.name, i)
			}
		}
	}
	return nil
}

// loadAgents reads agent documents into registry values and indexes
// their certificates and keys for the verified identity modes. An
// agent_id declared in two documents fails with both files named.
func (h *Handler) loadAgents() ([]policy.Agent, error) {
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
	return out, nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
