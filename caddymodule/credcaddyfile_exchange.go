package caddymodule

import (
	"fmt"
	"strconv"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// parseTokenExchange reads the block of `credentials token_exchange`
// inside `upstream NAME URL { … }` (docs/configuration.md "Upstream
// credentials"):
//
//	credentials token_exchange {
//		issuer <url>             # or token_endpoint <url>
//		token_endpoint <url>
//		client_id <id>
//		client_secret <secret>   # a placeholder: {env.NAME}, {file.PATH}
//		resource <uri>           # default: the upstream's URL (when no audience)
//		audience <name>
//		scopes <scope>...        # default: the endpoint's required_scopes
//		header <name>            # default Authorization (Bearer)
//		margin <duration>        # default 10s
//		timeout <duration>       # default 10s
//		cache_size <n>           # default 10000
//	}
func parseTokenExchange(d *caddyfile.Dispenser, upstream string) (*engine.TokenExchangeCredentials, error) {
	c := &engine.TokenExchangeCredentials{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		switch key {
		case "issuer", "token_endpoint", "client_id", "client_secret", "resource", "audience", "header":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			switch key {
			case "issuer":
				c.Issuer = v
			case "token_endpoint":
				c.TokenEndpoint = v
			case "client_id":
				c.ClientID = v
			case "client_secret":
				c.ClientSecret = v
			case "resource":
				c.Resource = v
			case "audience":
				c.Audience = v
			case "header":
				c.Header = v
			}
		case "scopes":
			c.Scopes = d.RemainingArgs()
			if len(c.Scopes) == 0 {
				return nil, d.Errf("upstream %s: token_exchange scopes: want at least one scope", upstream)
			}
		case "margin", "timeout":
			dur, err := blockDuration(d, upstream, "token_exchange")
			if err != nil {
				return nil, err
			}
			if key == "margin" {
				c.Margin = dur
			} else {
				c.Timeout = dur
			}
		case "cache_size":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, d.Errf("upstream %s: token_exchange cache_size: %q is not a positive integer", upstream, v)
			}
			c.CacheSize = n
		default:
			return nil, d.Errf("upstream %s: credentials token_exchange: unknown subdirective %q", upstream, key)
		}
	}
	return c, nil
}

// parseAssertion reads the block of `credentials assertion` (optional:
// every knob has a default):
//
//	credentials assertion {
//		issuer <url>          # iss; default the oauth block's resource
//		audience <uri>        # aud; default the upstream's URL
//		ttl <duration>        # default 60s, at most 10m
//		header <name>         # default Authorization (Bearer)
//		keys <key.pem>...     # Ed25519 or P-256 PKCS#8; first signs, all published
//	}
func parseAssertion(d *caddyfile.Dispenser, upstream string) (*engine.AssertionCredentials, error) {
	c := &engine.AssertionCredentials{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		switch key {
		case "issuer", "audience", "header":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			switch key {
			case "issuer":
				c.Issuer = v
			case "audience":
				c.Audience = v
			case "header":
				c.Header = v
			}
		case "ttl":
			dur, err := blockDuration(d, upstream, "assertion")
			if err != nil {
				return nil, err
			}
			c.TTL = dur
		case "keys":
			c.Keys = d.RemainingArgs()
			if len(c.Keys) == 0 {
				return nil, d.Errf("upstream %s: assertion keys: want at least one key file", upstream)
			}
		default:
			return nil, d.Errf("upstream %s: credentials assertion: unknown subdirective %q", upstream, key)
		}
	}
	return c, nil
}

// blockDuration reads the positive duration of a knob of an upstream's
// credentials block (positiveDuration), its errors naming the upstream
// and the block.
func blockDuration(d *caddyfile.Dispenser, upstream, block string) (engine.Duration, error) {
	dur, err := positiveDuration(d)
	if err != nil {
		return 0, fmt.Errorf("upstream %s: %s %w", upstream, block, err)
	}
	return engine.Duration(dur), nil
}
