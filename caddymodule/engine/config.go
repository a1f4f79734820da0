package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Delivery modes (spec §13.4).
const (
	ModeConfirmFirst = "confirm-first"
	ModeOptimistic   = "optimistic"
)

// IdentityHeader is the identity mode that trusts the Agent-ID header,
// on loopback only (ARCHITECTURE.md "Identity"; IdentityMTLS and
// IdentitySignature are the verified modes).
const IdentityHeader = "header"

// Config is the engine's configuration: every knob of the rcns handler
// but the store and the MCP door (the host's), with its unit and
// default (docs/configuration.md has the Caddyfile syntax).
// Its groups are embedded, so the JSON config stays flat ("mode", not
// "synthesis": {"mode"}).
type Config struct {
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
	IdentityConfig
	SynthesisConfig
	Limits
	RateLimitConfig
	IdempotencyConfig
	RecordsConfig
	DocumentsConfig
	MethodsConfig
}

// IdentityConfig is how callers are identified (ARCHITECTURE.md "Identity", spec §3): the identity mode, the RFC 9421 signature checks and the identifier rules.
type IdentityConfig struct {
	// Identity selects how Agent-ID is proven (ARCHITECTURE.md
	// "Identity"): "header" (default) trusts the header and serves only
	// requests whose local address is loopback (others: 401
	// identity-mode-refused); "mtls" binds Agent-ID to the SHA-256 of the
	// client certificate's SPKI (configure Caddy's client_auth with mode
	// verify_if_given so certificate-less legacy clients still pass);
	// "signature" verifies RFC 9421 HTTP Message Signatures (label sig1,
	// ed25519 or ecdsa-p256-sha256, keyid = RFC 7638 thumbprint).
	//
	// It may name several modes, separated by spaces ("signature
	// oauth"): the credential a request carries picks its mode, and a
	// request whose credentials name two different agents is refused
	// (identity-conflict). In a list, header still trusts the bare
	// Agent-ID only on loopback, for requests with no other credential.
	// "oauth" verifies an OAuth 2.1 bearer access token (OAuth).
	Identity string `json:"identity,omitempty"`

	// OAuth configures identity oauth: the authorization server, this
	// gateway's resource identifier, the scope map (OAuthConfig).
	// Required when Identity names oauth.
	OAuth *OAuthConfig `json:"oauth,omitempty"`

	// SignatureMaxAge bounds expires - created of a signature: at least
	// 1s (created and expires are whole seconds). Default 300s.
	SignatureMaxAge Duration `json:"signature_max_age,omitempty"`

	// SignatureSkew bounds how far created may be from the gateway clock:
	// at least 1s. Default 60s.
	SignatureSkew Duration `json:"signature_skew,omitempty"`

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
}

// SynthesisConfig is the RCNS gate and delivery (spec §11, §13, §15): lock 1 and lock 4, the delivery mode, PROPOSE.
type SynthesisConfig struct {
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
}

// Limits bounds every request and the state it leaves (ARCHITECTURE.md "Bounds and defaults"): bodies, times, contracts, attempt records.
type Limits struct {
	// MaxRequestBody bounds request bodies in bytes (413 above).
	// Default 1 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`

	// RefusedBodyDrain bounds, in bytes, how much of a request's body
	// the gateway reads and discards after answering a refusal given
	// before the body was read (413 body-too-large, a malformed header,
	// a framing error), before it closes the connection: a connection
	// closed with unread input is reset, and a client that writes its
	// whole body before reading (Python's http.client, many SDKs) would
	// get the reset instead of the answer. A declared body whose rest is
	// larger is not read at all: the connection closes at once. Both
	// doors (HTTP/1 and native AGTP/1.0; HTTP/2 resets the stream
	// only). Default 128 MiB.
	RefusedBodyDrain int64 `json:"refused_body_drain,omitempty"`

	// RefusedBodyDrainTimeout bounds how long that drain may last, from
	// the answer on; the connection then closes, whatever is left
	// unread. Default 10s.
	RefusedBodyDrainTimeout Duration `json:"refused_body_drain_timeout,omitempty"`

	// MaxUpstreamResponse bounds each upstream response body in bytes.
	// Default 8 MiB.
	MaxUpstreamResponse int64 `json:"max_upstream_response,omitempty"`

	// CompositionTimeout bounds one plan execution, jq mappings included.
	// It bounds time, not the memory a mapping allocates: mappings are
	// the operator's and trusted; keep them small. Default 60s.
	CompositionTimeout Duration `json:"composition_timeout,omitempty"`

	// ContractTTL is the lifetime of a synthesized contract: at least 1s
	// (contract times are whole seconds). Default 1h.
	ContractTTL Duration `json:"contract_ttl,omitempty"`

	// TombstoneTTL is how long an expired or revoked contract answers
	// 464 contract-revoked before it becomes unknown (404): at least 1s.
	// Every ended contract, released ones too, stays known this long to
	// INSPECT, REVOKE and SUSPEND (200, noop: true). Default 24h.
	TombstoneTTL Duration `json:"tombstone_ttl,omitempty"`

	// MaxContracts bounds live contracts in all. Default 100000.
	MaxContracts int `json:"max_contracts,omitempty"`

	// MaxContractsPerAgent bounds live contracts per agent. Default 100.
	// Set, it must not exceed MaxContracts (or MaxContracts' default,
	// 100000, when that is unset); a MaxContracts below 100 with this
	// unset is fine: the total binds first.
	MaxContractsPerAgent int `json:"max_contracts_per_agent,omitempty"`

	// AttemptBuffer is the number of RCNS attempt records kept for
	// INSPECT target=rcns-attempt. Default 1024.
	AttemptBuffer int `json:"attempt_buffer,omitempty"`
}

// IdempotencyConfig is the Idempotency-Key store (spec §12.2, OP-15).
type IdempotencyConfig struct {
	// IdempotencyWindow is how long a completed Idempotency-Key record
	// replays (spec §12.2, OP-15): at least 1s. Default 24h.
	IdempotencyWindow Duration `json:"idempotency_window,omitempty"`

	// IdempotencyLeaseMargin is added to the longest a request can run
	// (its Tier B endpoint's call timeout, or composition_timeout for a
	// contract, a synthesis or PROPOSE) to make its Idempotency-Key
	// lease: how long its claim holds the key before the node running
	// it must renew it (it does, every third of the lease). A lease
	// that ends with no answer stored (the node died) makes the key
	// outcome-unknown; with store redis, a Redis restart refuses keyed
	// requests for the longest lease the configuration gives. It covers
	// the store round trips, record writes and clock skew around the
	// plan: at least 1s. Default 10s.
	IdempotencyLeaseMargin Duration `json:"idempotency_lease_margin,omitempty"`

	// IdempotencyMaxRecords bounds idempotency records in all.
	// Default 100000.
	IdempotencyMaxRecords int `json:"idempotency_max_records,omitempty"`

	// IdempotencyMaxPerAgent bounds one agent's idempotency records; an
	// agent over it gets 503 idempotency-store-full. Default 10000. Set,
	// it must not exceed IdempotencyMaxRecords (or its default, 100000,
	// when that is unset); an IdempotencyMaxRecords below 10000 with this
	// unset is fine: the total binds first.
	IdempotencyMaxPerAgent int `json:"idempotency_max_per_agent,omitempty"`
}

// RecordsConfig is the Attribution-Record keys and the durable records (spec §16; ARCHITECTURE.md "Records").
type RecordsConfig struct {
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

	// RecordRetention is how long every Attribution-Record sent, and
	// each agent's chain heads, are retained in the store for INSPECT
	// target=audit and target=chain_head: at least 1s. Default 24h.
	RecordRetention Duration `json:"record_retention,omitempty"`

	// MaxRetainedRecords bounds the retained Attribution-Records of the
	// memory store (the oldest is dropped first); the Redis store is
	// bounded by RecordRetention and Redis's maxmemory. Default 100000.
	MaxRetainedRecords int `json:"max_retained_records,omitempty"`

	// AuditReadACL is the read ACL of INSPECT target=audit and
	// target=chain_head (spec §17.3): "agent_only" (default: an agent
	// reads its own records and chains, a caller carrying inspect:all
	// any), "operator_only" (inspect:all only) or "public" (every
	// identified agent reads every record). A refusal is 403 naming
	// the mode.
	AuditReadACL string `json:"audit_read_acl,omitempty"`
}

// DocumentsConfig is the operator documents and the upstreams their endpoints call.
type DocumentsConfig struct {
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
}

// MethodsConfig is the method policy (spec §5.4 policies.methods) and which requests are AGTP (ARCHITECTURE.md "Which requests are AGTP").
type MethodsConfig struct {
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
	Timeout Duration `json:"timeout,omitempty"`
	// MaxConns caps concurrent connections to the upstream. Default 64.
	MaxConns int `json:"max_conns,omitempty"`
	// InsecureHTTP allows http:// to a non-loopback host (warns at start).
	InsecureHTTP bool `json:"insecure_http,omitempty"`
	// Credentials is the upstream's credential policy: what every
	// request to it carries besides the endpoint's and step's own
	// headers, resolved for the verified caller when the call runs. Nil
	// is static with no headers of its own (the endpoints' `headers`
	// only). docs/configuration.md "Upstream credentials".
	Credentials *CredentialsConfig `json:"credentials,omitempty"`
}

// SetDefaults fills every unset knob with its documented default
// (docs/configuration.md). The host calls it once, before New and
// Validate.
func (h *Config) SetDefaults() {
	if h.Name == "" {
		h.Name = "default"
	}
	if h.ServerID == "" {
		h.ServerID = "caddy-rcns"
	}
	if h.Identity == "" {
		h.Identity = IdentityHeader
	}
	if h.OAuth != nil {
		h.OAuth.setDefaults()
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
		h.ContractTTL = Duration(time.Hour)
	}
	if h.TombstoneTTL == 0 {
		h.TombstoneTTL = Duration(24 * time.Hour)
	}
	if h.MaxRequestBody == 0 {
		h.MaxRequestBody = 1 << 20
	}
	if h.MaxUpstreamResponse == 0 {
		h.MaxUpstreamResponse = 8 << 20
	}
	if h.RefusedBodyDrain == 0 {
		h.RefusedBodyDrain = DefaultRefusedBodyDrain
	}
	if h.RefusedBodyDrainTimeout == 0 {
		h.RefusedBodyDrainTimeout = Duration(DefaultRefusedBodyDrainTimeout)
	}
	if h.CompositionTimeout == 0 {
		h.CompositionTimeout = Duration(60 * time.Second)
	}
	if h.AttemptBuffer == 0 {
		h.AttemptBuffer = 1024
	}
	if h.SignatureMaxAge == 0 {
		h.SignatureMaxAge = Duration(300 * time.Second)
	}
	if h.SignatureSkew == 0 {
		h.SignatureSkew = Duration(60 * time.Second)
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
	if h.AuditReadACL == "" {
		h.AuditReadACL = ACLAgentOnly
	}
}

// DefaultIdempotencyLeaseMargin is IdempotencyLeaseMargin's default.
const DefaultIdempotencyLeaseMargin = 10 * time.Second

// leaseMargin is IdempotencyLeaseMargin with its default.
func (h *Config) leaseMargin() time.Duration {
	if h.IdempotencyLeaseMargin > 0 {
		return time.Duration(h.IdempotencyLeaseMargin)
	}
	return DefaultIdempotencyLeaseMargin
}

// leaseFor is the Idempotency-Key lease of a request that runs at most
// run: run plus the margin.
func (h *Config) leaseFor(run time.Duration) time.Duration { return run + h.leaseMargin() }

func (h *Config) idempotencyLimits() idempotency.Limits {
	// A claim that runs a plan (a contract, a synthesis, PROPOSE) runs
	// at most composition_timeout; a Tier B call names its own lease
	// (invokeEndpoint).
	l := idempotency.Limits{Window: time.Duration(h.IdempotencyWindow), MaxRecords: h.IdempotencyMaxRecords, MaxPerAgent: h.IdempotencyMaxPerAgent,
		Lease: h.leaseFor(time.Duration(h.CompositionTimeout))}
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

func (h *Config) storeLimits() recipes.StoreLimits {
	return recipes.StoreLimits{MaxContracts: h.MaxContracts, MaxPerAgent: h.MaxContractsPerAgent, TombstoneTTL: time.Duration(h.TombstoneTTL)}
}

// recordRetention is RecordRetention with its default.
func (h *Config) recordRetention() time.Duration {
	if h.RecordRetention > 0 {
		return time.Duration(h.RecordRetention)
	}
	return store.DefaultRecordRetention
}

// synthesisEnabled is the manifest's policies.synthesis_enabled: PROPOSE
// synthesizes only when RCNS is enabled (lock 1) and synthesis_enabled
// is not switched off.
func (h *Config) synthesisEnabled() bool {
	return h.Enabled && (h.SynthesisEnabled == nil || *h.SynthesisEnabled)
}

func (h *Config) anonymousDiscovery() bool {
	return h.AnonymousDiscovery == nil || *h.AnonymousDiscovery
}

func (h *Config) scopeRequired() bool {
	return h.ScopeRequiredForInvocation == nil || *h.ScopeRequiredForInvocation
}

// ValidName reports whether n is a safe state and directory name.
func ValidName(n string) bool {
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
func validServerID(id string) bool { return agtp.VisibleASCII(id, 255) }

// Validate checks the configuration's values (New does the
// loading).
func (h *Config) Validate() error {
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
	switch h.AuditReadACL {
	case ACLAgentOnly, ACLOperatorOnly, ACLPublic:
	default:
		return fmt.Errorf("rcns: audit_read_acl must be agent_only, operator_only or public, not %q", h.AuditReadACL)
	}
	if h.OnPolicyChange != "grandfather" && h.OnPolicyChange != "invalidate" {
		return fmt.Errorf("rcns: on_policy_change must be grandfather or invalidate, not %q", h.OnPolicyChange)
	}
	modes, err := ParseIdentityModes(h.Identity)
	if err != nil {
		return fmt.Errorf("rcns: identity: %v", err)
	}
	switch {
	case slices.Contains(modes, IdentityOAuth) && h.OAuth == nil:
		return errors.New("rcns: identity oauth needs an oauth block (issuer, resource)")
	case !slices.Contains(modes, IdentityOAuth) && h.OAuth != nil:
		return fmt.Errorf("rcns: an oauth block is configured, but identity %q does not name oauth", h.Identity)
	case h.OAuth != nil:
		if err := h.OAuth.validate(); err != nil {
			return err
		}
	}
	for i, a := range h.SignatureAuthorities {
		if err := CheckAuthority(a); err != nil {
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

// checkNotNegative refuses a negative bound or duration, naming its
// member: JSON can say what the Caddyfile refuses, and a negative value
// is an error, never the default. New calls it before using any
// of them (a negative attempt_buffer or rate limit would fail there
// first, or worse), Validate again.
func (h *Config) checkNotNegative() error {
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
		{"refused_body_drain", h.RefusedBodyDrain < 0}, {"refused_body_drain_timeout", h.RefusedBodyDrainTimeout < 0},
		{"max_contracts", h.MaxContracts < 0}, {"max_contracts_per_agent", h.MaxContractsPerAgent < 0},
		{"attempt_buffer", h.AttemptBuffer < 0},
		{"idempotency_window", h.IdempotencyWindow < 0}, {"idempotency_max_records", h.IdempotencyMaxRecords < 0},
		{"idempotency_max_per_agent", h.IdempotencyMaxPerAgent < 0},
		{"idempotency_lease_margin", h.IdempotencyLeaseMargin < 0},
		{"contract_ttl", h.ContractTTL < 0}, {"tombstone_ttl", h.TombstoneTTL < 0},
		{"composition_timeout", h.CompositionTimeout < 0},
		{"record_retention", h.RecordRetention < 0}, {"max_retained_records", h.MaxRetainedRecords < 0},
	} {
		if k.negative {
			return fmt.Errorf("rcns: %s must not be negative (leave it out for the default)", k.name)
		}
	}
	return h.RateLimitConfig.validate()
}

// minDuration is the shortest value of the duration knobs that count in
// whole seconds (checkMinDurations): the same second PROPOSE's
// requested_duration must reach.
const minDuration = agtp.MinRequestedDuration

// checkMinDurations refuses a duration knob set below minDuration, where
// a shorter value cannot work: contract times are whole seconds
// (issued_at, expires_at; PROPOSE refuses a requested_duration under
// 1s), and so are a signature's created and expires; a tombstone or an
// idempotency record that lasts under a second is gone before a client
// can come back. Zero (unset) is the default and passes.
func (h *Config) checkMinDurations() error {
	for _, k := range []struct {
		name string
		v    Duration
		why  string
	}{
		{"contract_ttl", h.ContractTTL, "contract times (issued_at, expires_at) are whole seconds, and PROPOSE refuses a requested_duration under 1s"},
		{"tombstone_ttl", h.TombstoneTTL, "a revoked or expired contract must answer 464 long enough for its agent to see it"},
		{"idempotency_window", h.IdempotencyWindow, "a retry comes later than that"},
		{"idempotency_lease_margin", h.IdempotencyLeaseMargin, "the store round trips and record writes around a plan take that long"},
		{"signature_max_age", h.SignatureMaxAge, "a signature's created and expires are whole seconds"},
		{"signature_skew", h.SignatureSkew, "a signature's created is whole seconds"},
		{"record_retention", h.RecordRetention, "a record must stay long enough to be inspected"},
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
func (h *Config) checkPaths() error {
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

// Defaults of refused_body_drain (bytes) and refused_body_drain_timeout.
const (
	DefaultRefusedBodyDrain        = 128 << 20
	DefaultRefusedBodyDrainTimeout = 10 * time.Second
)

// DrainBounds are the refused_body_drain bounds a door reads a refused
// request's unread body within before it closes the connection
// (cases/05): at most Max bytes, for at most Timeout after the answer.
type DrainBounds struct {
	Max     int64
	Timeout time.Duration
}

// RefusedBodyDrainBounds returns the drain bounds of h; the defaults
// for a nil h (a native listener whose handler is gone) and for unset
// knobs.
func (h *Config) RefusedBodyDrainBounds() DrainBounds {
	b := DrainBounds{Max: DefaultRefusedBodyDrain, Timeout: DefaultRefusedBodyDrainTimeout}
	if h != nil {
		if h.RefusedBodyDrain > 0 {
			b.Max = h.RefusedBodyDrain
		}
		if h.RefusedBodyDrainTimeout > 0 {
			b.Timeout = time.Duration(h.RefusedBodyDrainTimeout)
		}
	}
	return b
}
