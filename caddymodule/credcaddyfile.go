package caddymodule

// The upstream credentials and identity oauth blocks of the Caddyfile
// (the grammar in UnmarshalCaddyfile, caddyfile.go).

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// parseCredentials reads an upstream's credentials block (the grammar
// in UnmarshalCaddyfile; the knobs are engine.CredentialsConfig's); the
// dispenser is on "credentials". Whether the knobs fit the policy is
// checked when the engine is built (engine.CredentialsConfig).
func parseCredentials(d *caddyfile.Dispenser, upstream string) (*engine.CredentialsConfig, error) {
	if !d.NextArg() {
		return nil, d.Errf("upstream %s: credentials: want static, per_agent or per_owner", upstream)
	}
	cc := &engine.CredentialsConfig{Policy: d.Val()}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	var err error
	switch cc.Policy {
	case engine.CredentialsTokenExchange:
		cc.TokenExchange, err = parseTokenExchange(d, upstream)
		return cc, err
	case engine.CredentialsAssertion:
		cc.Assertion, err = parseAssertion(d, upstream)
		return cc, err
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch key := d.Val(); key {
		case "header":
			hv := d.RemainingArgs()
			if len(hv) != 2 {
				return nil, d.Errf("upstream %s: credentials: header: want <name> <value-template>", upstream)
			}
			if cc.Header == nil {
				cc.Header = map[string]string{}
			}
			if _, dup := cc.Header[hv[0]]; dup {
				return nil, d.Errf("upstream %s: credentials: header %s is given twice", upstream, hv[0])
			}
			cc.Header[hv[0]] = hv[1]
		case "dir", "file":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			if v == "" {
				return nil, d.Errf("upstream %s: credentials: %s: empty path", upstream, key)
			}
			if *map[string]*string{"dir": &cc.Dir, "file": &cc.File}[key] != "" {
				return nil, d.Errf("upstream %s: credentials: %s is given twice", upstream, key)
			}
			*map[string]*string{"dir": &cc.Dir, "file": &cc.File}[key] = v
		// token_exchange { … } and assertion { … } blocks are read here
		// (their policies' knobs).
		default:
			return nil, d.Errf("upstream %s: credentials: unknown subdirective %q", upstream, key)
		}
	}
	return cc, nil
}

// identityArgs reads the identity modes on the line (one or more),
// checked, as the setting's string ("signature oauth"); what names the
// line in errors.
func identityArgs(d *caddyfile.Dispenser, what string) (string, error) {
	modes := d.RemainingArgs()
	if len(modes) == 0 {
		return "", d.ArgErr()
	}
	v := strings.Join(modes, " ")
	if _, err := engine.ParseIdentityModes(v); err != nil {
		return "", d.Errf("%s: %v", what, err)
	}
	return v, nil
}

// parseOAuth reads the oauth block (the grammar in UnmarshalCaddyfile;
// the knobs are engine.OAuthConfig's); the dispenser is on "oauth".
func parseOAuth(d *caddyfile.Dispenser) (*engine.OAuthConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	o := &engine.OAuthConfig{}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		if key != "scope" && key != "algorithms" {
			if seen[key] {
				return nil, d.Errf("oauth: %s is set twice; give it once", key)
			}
			seen[key] = true
		}
		switch key {
		case "issuer", "resource", "jwks_uri", "introspection_endpoint", "client_id", "client_secret", "unnamed_clients":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			if v == "" {
				return nil, d.Errf("oauth: %s: empty value", key)
			}
			*map[string]*string{"issuer": &o.Issuer, "resource": &o.Resource, "jwks_uri": &o.JWKSURI,
				"introspection_endpoint": &o.IntrospectionEndpoint, "client_id": &o.ClientID,
				"client_secret": &o.ClientSecret, "unnamed_clients": &o.UnnamedClients}[key] = v
		case "algorithms":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			o.Algorithms = append(o.Algorithms, args...)
		case "scope":
			args := d.RemainingArgs()
			if len(args) < 2 {
				return nil, d.Errf("oauth: scope: want <oauth-scope> <agtp-scope>...")
			}
			if o.Scopes == nil {
				o.Scopes = map[string][]string{}
			}
			if _, dup := o.Scopes[args[0]]; dup {
				return nil, d.Errf("oauth: scope %s is given twice", args[0])
			}
			o.Scopes[args[0]] = args[1:]
		case "allow_no_expiry":
			b, err := optBool(d)
			if err != nil {
				return nil, err
			}
			o.AllowNoExpiry = b
		case "require_at_jwt":
			b, err := optBool(d)
			if err != nil {
				return nil, err
			}
			o.RequireATJWT = b
		case "clock_skew", "jwks_max_age", "jwks_min_refresh", "introspection_cache_ttl", "timeout":
			dur, err := positiveDuration(d)
			if err != nil {
				return nil, err
			}
			*map[string]*engine.Duration{"clock_skew": &o.ClockSkew, "jwks_max_age": &o.JWKSMaxAge, "jwks_min_refresh": &o.JWKSMinRefresh,
				"introspection_cache_ttl": &o.IntrospectionCacheTTL, "timeout": &o.Timeout}[key] = engine.Duration(dur)
		case "introspection_cache_size":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, d.Errf("oauth: introspection_cache_size: %q is not a positive integer", v)
			}
			o.IntrospectionCacheSize = n
		default:
			return nil, d.Errf("oauth: unknown subdirective %q", key)
		}
	}
	return o, nil
}
