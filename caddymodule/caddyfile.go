package caddymodule

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("rcns", parseCaddyfile)
	// Before rewrite, so before uri, encode, handle, route, respond,
	// reverse_proxy and file_server (ARCHITECTURE.md "Caddyfile").
	httpcaddyfile.RegisterDirectiveOrder("rcns", httpcaddyfile.Before, "rewrite")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. The
// grammar is documented in docs/configuration.md:
//
//	rcns {
//	    name <string>
//	    server_id <string>
//	    identity header|mtls|signature|oauth...
//	    oauth {
//	        issuer <url>
//	        resource <url>
//	        jwks_uri <url>
//	        introspection_endpoint <url>
//	        client_id <id>
//	        client_secret <secret>
//	        algorithms <alg>...
//	        clock_skew <duration>
//	        allow_no_expiry [true|false]
//	        require_at_jwt [true|false]
//	        scope <oauth-scope> <agtp-scope>...
//	        unnamed_clients <agent name or id>
//	        jwks_max_age <duration>
//	        jwks_min_refresh <duration>
//	        introspection_cache_ttl <duration>
//	        introspection_cache_size <n>
//	        timeout <duration>
//	    }
//	    signature_max_age <duration>
//	    signature_skew <duration>
//	    signature_authorities <host[:port]>...
//	    replay_cache_size <n>
//	    enabled [true|false]
//	    mode confirm-first|optimistic
//	    min_trust_tier <1..3>
//	    max_synthesis_depth <n>
//	    synthesis_enabled true|false
//	    scope_required_for_invocation true|false
//	    anonymous_discovery true|false
//	    strict_identifiers [true|false]
//	    allow_persistent [true|false]
//	    contract_ttl <duration>
//	    tombstone_ttl <duration>
//	    max_contracts <n>
//	    max_contracts_per_agent <n>
//	    max_request_body <size>
//	    max_upstream_response <size>
//	    refused_body_drain <size>
//	    refused_body_drain_timeout <duration>
//	    composition_timeout <duration>
//	    attempt_buffer <n>
//	    rate_limit rcns|invocation <per_minute> [<burst>]
//	    rate_limit_agents <n>
//	    idempotency_window <duration>
//	    idempotency_lease_margin <duration>
//	    idempotency_max_records <n>
//	    idempotency_max_per_agent <n>
//	    agents <path>...
//	    endpoints <path>...
//	    recipes <path>...
//	    catalog <path>
//	    on_policy_change grandfather|invalidate
//	    record_keys <ed25519-pem>...|off
//	    records_dir <path>|off
//	    fsync always|group|off
//	    record_retention <duration>
//	    max_retained_records <n>
//	    audit_read_acl agent_only|operator_only|public
//	    upstream <name> <url> {
//	        timeout <d>; max_conns <n>; insecure_http
//	        credentials token_exchange { issuer <url>; client_id <id>; client_secret <secret>; ... }
//	        credentials assertion { issuer <url>; audience <uri>; ttl <d>; header <name>; keys <pem>... }
//	        credentials static|per_agent|per_owner {
//	            header <name> <value-template>   # repeatable
//	            dir <path>                       # per_agent / per_owner: a file per id
//	            file <path>                      # per_agent / per_owner: a YAML/JSON mapping
//	        }
//	    }
//	    legacy NONE|*|<VERB>...
//	    alias <FROM> <TO>
//	    no_aliases
//	    allow *|<METHOD>...
//	    disallow <METHOD>...
//	    redirect <from_method> <from_path|*> <to_method> <to_path|*>
//	    passthrough_methods <METHOD>...
//	    store memory|redis { … }         (storecaddyfile.go)
//	    store_required on|off
//	    node_id <name>
//	    mcp [<path>] {
//	        include_tools <glob>...
//	        exclude_tools <glob>...
//	        rename <tool> <name>
//	        allowed_origins <origin>...
//	        dns_rebinding_protection true|false
//	        max_request_body <size>
//	        max_json_depth <n>
//	        max_batch <n>
//	        timeout <duration>
//	        page_size <n>
//	        test_agent <agent name or id>
//	        identity <mode>...
//	        max_result_bytes <size>
//	        max_result_text <size>
//	        meta_attribution_record [true|false]
//	        fast_path on|off
//	    }
//	    operator_page [<path>] {            (operatorpage.go)
//	        allow <cidr|address>...
//	        bearer <token>
//	        basic <user> <password>
//	        operator <name>
//	        max_rows <n>
//	        dns_rebinding_protection true|false
//	    }
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	// Single-valued knobs given twice are refused rather than letting the
	// last one win silently; list knobs (agents, allow, upstream…) add up.
	seen := map[string]bool{}
	recordKeysOff := false
	for d.NextBlock(0) {
		key := d.Val()
		switch key {
		case "agents", "endpoints", "recipes", "record_keys", "legacy", "allow", "disallow", "passthrough_methods",
			"signature_authorities", "upstream", "alias", "redirect", "rate_limit":
		default:
			if seen[key] {
				return d.Errf("%s is set twice; give it once", key)
			}
			seen[key] = true
		}
		switch key {
		case "identity":
			v, err := identityArgs(d, "identity")
			if err != nil {
				return err
			}
			h.Identity = v
		case "oauth":
			o, err := parseOAuth(d)
			if err != nil {
				return err
			}
			h.OAuth = o
		case "name", "server_id", "mode", "catalog", "on_policy_change", "records_dir", "fsync", "audit_read_acl":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			// In JSON "" means unset (the default); a Caddyfile line
			// with an empty value is a mistake, not a request for it.
			if v == "" {
				return d.Errf("%s: empty value; leave the line out for the default", key)
			}
			switch key {
			case "name":
				h.Name = v
			case "server_id":
				h.ServerID = v
			case "mode":
				if v != engine.ModeConfirmFirst && v != engine.ModeOptimistic {
					return d.Errf("mode: %q is not confirm-first or optimistic", v)
				}
				h.Mode = v
			case "catalog":
				h.Catalog = v
			case "on_policy_change":
				if v != "grandfather" && v != "invalidate" {
					return d.Errf("on_policy_change: %q is not grandfather or invalidate", v)
				}
				h.OnPolicyChange = v
			case "records_dir":
				h.RecordsDir = v
			case "fsync":
				if v != "always" && v != "group" && v != "off" {
					return d.Errf("fsync: %q is not always, group or off", v)
				}
				h.Fsync = v
			case "audit_read_acl":
				if v != engine.ACLAgentOnly && v != engine.ACLOperatorOnly && v != engine.ACLPublic {
					return d.Errf("audit_read_acl: %q is not agent_only, operator_only or public", v)
				}
				h.AuditReadACL = v
			}
		case "enabled":
			b, err := optBool(d)
			if err != nil {
				return err
			}
			h.Enabled = b
		case "no_aliases":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.NoAliases = true
		case "synthesis_enabled", "scope_required_for_invocation", "anonymous_discovery":
			b, err := optBool(d)
			if err != nil {
				return err
			}
			switch key {
			case "synthesis_enabled":
				h.SynthesisEnabled = &b
			case "scope_required_for_invocation":
				h.ScopeRequiredForInvocation = &b
			case "anonymous_discovery":
				h.AnonymousDiscovery = &b
			}
		case "strict_identifiers", "allow_persistent":
			b, err := optBool(d)
			if err != nil {
				return err
			}
			if key == "strict_identifiers" {
				h.StrictIdentifiers = b
			} else {
				h.AllowPersistent = b
			}
		case "min_trust_tier", "max_synthesis_depth", "max_contracts", "max_contracts_per_agent", "attempt_buffer",
			"rate_limit_agents", "idempotency_max_records", "idempotency_max_per_agent", "replay_cache_size", "max_retained_records":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			n, err := positiveInt(d, key, v)
			if err != nil {
				return err
			}
			if key == "min_trust_tier" && n > 3 {
				return d.Errf("min_trust_tier: %d is not a trust tier (1..3)", n)
			}
			if key == "rate_limit_agents" {
				h.RateLimitAgents = int64(n)
				break
			}
			*map[string]*int{
				"min_trust_tier": &h.MinTrustTier, "max_synthesis_depth": &h.MaxSynthesisDepth,
				"max_contracts": &h.MaxContracts, "max_contracts_per_agent": &h.MaxContractsPerAgent,
				"attempt_buffer": &h.AttemptBuffer, "idempotency_max_records": &h.IdempotencyMaxRecords,
				"idempotency_max_per_agent": &h.IdempotencyMaxPerAgent, "replay_cache_size": &h.ReplayCacheSize,
				"max_retained_records": &h.MaxRetainedRecords,
			}[key] = n
		case "contract_ttl", "tombstone_ttl", "composition_timeout", "signature_max_age", "signature_skew", "record_retention",
			"refused_body_drain_timeout":
			dur, err := positiveDuration(d)
			if err != nil {
				return err
			}
			switch key {
			case "contract_ttl":
				h.ContractTTL = engine.Duration(dur)
			case "tombstone_ttl":
				h.TombstoneTTL = engine.Duration(dur)
			case "composition_timeout":
				h.CompositionTimeout = engine.Duration(dur)
			case "signature_max_age":
				h.SignatureMaxAge = engine.Duration(dur)
			case "signature_skew":
				h.SignatureSkew = engine.Duration(dur)
			case "record_retention":
				h.RecordRetention = engine.Duration(dur)
			case "refused_body_drain_timeout":
				h.RefusedBodyDrainTimeout = engine.Duration(dur)
			}
		case "max_request_body", "max_upstream_response", "refused_body_drain":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n == 0 {
				return d.Errf("%s: %q is not a size (e.g. 1MiB)", key, v)
			}
			switch key {
			case "max_request_body":
				h.MaxRequestBody = int64(n)
			case "max_upstream_response":
				h.MaxUpstreamResponse = int64(n)
			default:
				h.RefusedBodyDrain = int64(n)
			}
		case "rate_limit":
			args := d.RemainingArgs()
			if len(args) < 2 || len(args) > 3 {
				return d.Errf("rate_limit: want rcns|invocation <per_minute> [<burst>]")
			}
			rate, err := strconv.ParseFloat(args[1], 64)
			if err != nil || rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
				// NaN and Inf parse, and then broke the adapted JSON
				// (helper-150: "module name not specified").
				return d.Errf("rate_limit: %q is not a positive number of tokens per minute", args[1])
			}
			if rate > engine.MaxRatePerMinute {
				return d.Errf("rate_limit: %q tokens per minute is over %g", args[1], float64(engine.MaxRatePerMinute))
			}
			if rate < engine.MinRatePerMinute {
				return d.Errf("rate_limit: %q tokens per minute is under %g", args[1], float64(engine.MinRatePerMinute))
			}
			burst := 0
			if len(args) == 3 {
				if burst, err = positiveInt(d, "rate_limit: burst", args[2]); err != nil {
					return err
				}
			}
			if seen["rate_limit "+args[0]] {
				return d.Errf("rate_limit %s is set twice; give it once", args[0])
			}
			seen["rate_limit "+args[0]] = true
			switch args[0] {
			case "rcns":
				h.RateLimitPerMinute, h.RateLimitBurst = rate, burst
			case "invocation":
				h.InvocationRateLimitPerMinute, h.InvocationRateLimitBurst = rate, burst
			default:
				return d.Errf("rate_limit: budget %q is not rcns or invocation", args[0])
			}
		case "idempotency_window":
			dur, err := positiveDuration(d)
			if err != nil {
				return err
			}
			h.IdempotencyWindow = engine.Duration(dur)
		case "idempotency_lease_margin":
			dur, err := positiveDuration(d)
			if err != nil {
				return err
			}
			h.IdempotencyLeaseMargin = engine.Duration(dur)
		case "agents", "endpoints", "recipes", "record_keys", "legacy", "allow", "disallow", "passthrough_methods":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			if slices.Contains(args, "") {
				return d.Errf("%s: empty value; leave the line out for the default", key)
			}
			// record_keys off is the default (unsigned records) said
			// out loud, so that {$VAR:off} can leave a key out.
			if key == "record_keys" && (recordKeysOff || slices.Contains(args, "off")) {
				if recordKeysOff || len(args) != 1 || len(h.RecordKeys) > 0 {
					return d.Errf("record_keys: off stands alone: give key files or off, not both")
				}
				recordKeysOff = true
				continue
			}
			list := map[string]*[]string{
				"agents": &h.Agents, "endpoints": &h.Endpoints, "recipes": &h.Recipes, "record_keys": &h.RecordKeys,
				"legacy": &h.Legacy, "allow": &h.Allow, "disallow": &h.Disallow, "passthrough_methods": &h.PassthroughMethods,
			}[key]
			*list = append(*list, args...)
		case "signature_authorities":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			for _, a := range args {
				if err := engine.CheckAuthority(a); err != nil {
					return d.Errf("signature_authorities: %q %v", a, err)
				}
			}
			h.SignatureAuthorities = append(h.SignatureAuthorities, args...)
		case "upstream":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("upstream: want <name> <base-url>, got %d arguments", len(args))
			}
			if err := recipes.CheckUpstreamName(args[0]); err != nil {
				return d.Errf("%v", err)
			}
			uc := &engine.UpstreamConfig{URL: args[1]}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				switch d.Val() {
				case "timeout":
					v, err := oneArg(d)
					if err != nil {
						return err
					}
					dur, err := parseDuration(v)
					if errors.Is(err, errNotDuration) {
						return d.Errf("upstream %s: timeout: %q %v", args[0], v, err)
					}
					if err != nil || dur < recipes.MinCallTimeout || dur > recipes.MaxCallTimeout {
						return d.Errf("upstream %s: timeout: %q is out of range: the allowed range is %s to %s", args[0], v,
							agtp.FormatDuration(recipes.MinCallTimeout), agtp.FormatDuration(recipes.MaxCallTimeout))
					}
					uc.Timeout = engine.Duration(dur)
				case "max_conns":
					v, err := oneArg(d)
					if err != nil {
						return err
					}
					n, err := strconv.Atoi(v)
					if err != nil || n < 1 {
						return d.Errf("max_conns: %q is not a positive integer", v)
					}
					uc.MaxConns = n
				case "insecure_http":
					if d.NextArg() {
						return d.ArgErr()
					}
					uc.InsecureHTTP = true
				case "credentials":
					if uc.Credentials != nil {
						return d.Errf("upstream %s: credentials is given twice", args[0])
					}
					cc, err := parseCredentials(d, args[0])
					if err != nil {
						return err
					}
					uc.Credentials = cc
				default:
					return d.Errf("upstream: unknown subdirective %q", d.Val())
				}
			}
			if h.Upstreams == nil {
				h.Upstreams = map[string]*engine.UpstreamConfig{}
			}
			if _, dup := h.Upstreams[args[0]]; dup {
				return d.Errf("upstream %q declared twice", args[0])
			}
			h.Upstreams[args[0]] = uc
		case "alias":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("alias: want <FROM> <TO>")
			}
			if h.Aliases == nil {
				h.Aliases = map[string]string{}
			}
			if _, dup := h.Aliases[args[0]]; dup {
				return d.Errf("alias %s declared twice", args[0])
			}
			h.Aliases[args[0]] = args[1]
		case "redirect":
			args := d.RemainingArgs()
			if len(args) != 4 {
				return d.Errf("redirect: want <from_method> <from_path|*> <to_method> <to_path|*>")
			}
			star := func(s string) string {
				if s == "*" {
					return ""
				}
				return s
			}
			h.Redirects = append(h.Redirects, engine.RedirectConfig{FromMethod: args[0], FromPath: star(args[1]), ToMethod: args[2], ToPath: star(args[3])})
		case "store", "store_required", "node_id":
			if err := h.parseStore(d, key); err != nil {
				return err
			}
		case "mcp":
			m, err := parseMCP(d)
			if err != nil {
				return err
			}
			h.MCP = m
		case "operator_page":
			c, err := parseOperatorPage(d)
			if err != nil {
				return err
			}
			h.OperatorPage = c
		default:
			return d.Errf("unknown subdirective %q", key)
		}
	}
	return nil
}

// errNotDuration and errDurationTooLarge are parseDuration's refusals.
var (
	errNotDuration      = errors.New("is not a duration (e.g. 90s, 15m, 24h, 7d)")
	errDurationTooLarge = fmt.Errorf("is too large: a duration can be at most %s (about 292 years)", agtp.FormatDuration(time.Duration(math.MaxInt64).Truncate(time.Hour)))
)

// durationSyntax is the syntax caddy.ParseDuration reads (Go's duration
// syntax plus d for days), whatever the size of the numbers.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h|d))+$`)

// parseDuration is caddy.ParseDuration telling a value time.Duration
// cannot hold (errDurationTooLarge: written in duration syntax, but
// beyond about 292 years either way) from one that is not a duration
// at all (errNotDuration); the time package reports both as "invalid
// duration".
func parseDuration(v string) (time.Duration, error) {
	dur, err := caddy.ParseDuration(v)
	switch {
	case err == nil:
		return dur, nil
	case durationSyntax.MatchString(v):
		return 0, errDurationTooLarge
	}
	return 0, errNotDuration
}

// positiveDuration reads the one argument of a duration knob that must
// be positive; errors name the knob.
func positiveDuration(d *caddyfile.Dispenser) (time.Duration, error) {
	key := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	dur, err := parseDuration(v)
	switch {
	case strings.HasPrefix(v, "-") && !errors.Is(err, errNotDuration), err == nil && dur <= 0:
		return 0, d.Errf("%s: %q must be a positive duration", key, v)
	case err != nil:
		return 0, d.Errf("%s: %q %v", key, v, err)
	}
	return dur, nil
}

func oneArg(d *caddyfile.Dispenser) (string, error) {
	key := d.Val()
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("%s: want exactly one argument", key)
	}
	return args[0], nil
}

func optBool(d *caddyfile.Dispenser) (bool, error) {
	key := d.Val()
	args := d.RemainingArgs()
	switch len(args) {
	case 0:
		return true, nil
	case 1:
		b, err := strconv.ParseBool(strings.ToLower(args[0]))
		if err != nil {
			return false, d.Errf("%s: %q is not true or false", key, args[0])
		}
		return b, nil
	}
	return false, d.Errf("%s: want at most one argument", key)
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)

// positiveInt reads v, an argument of the knob named key, as an integer
// of at least 1; the error names key and v, and says when v is too
// large for an int (helper-148: "is not a positive integer" for
// 99999999999999999999).
func positiveInt(d *caddyfile.Dispenser, key, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-") {
		return 0, d.Errf("%s: %q is too large (at most %d)", key, v, math.MaxInt)
	}
	if err != nil || n < 1 {
		return 0, d.Errf("%s: %q is not a positive integer", key, v)
	}
	return n, nil
}
