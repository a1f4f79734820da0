// Package oppage is the operator page of an rcns handler
// (docs/operator-guide.md "The operator page"): one server-rendered
// HTML page (html/template, no script) on a path the operator opts
// into, behind an access rule the operator configures, that shows the
// engine's live contracts by agent and owner, this node's in-flight
// Idempotency-Key claims, the Attribution-Record chain heads per node,
// the store's health and the recent refusals by reason, and revokes a
// contract through the engine's REVOKE path (engine.OperatorRevoke).
//
// The package imports no caddy: the Caddy handler (caddymodule) builds
// a Page from its Config, hands it the client address Caddy computed
// (trusted_proxies applied) and the store's health.
package oppage

import (
	"fmt"
	"net/netip"
	"strings"
)

// Config is the operator_page block of an rcns handler (JSON
// "operator_page"; absent: no page, the default).
type Config struct {
	// Path is where the page is served: GET Path shows it, POST
	// Path+"/revoke" revokes a contract. It must start with "/" and
	// not end with "/". Default DefaultPath.
	Path string `json:"path,omitempty"`
	// Allow is the client address ranges (CIDR, or a single address)
	// the page answers; every other client gets 403. The client address
	// is Caddy's (the connection's peer, or, from a trusted proxy, the
	// forwarded one: the server's trusted_proxies). Default loopback only
	// (127.0.0.0/8 and ::1).
	Allow []string `json:"allow,omitempty"`
	// BearerToken, when set, is also required: the request must carry
	// "Authorization: Bearer <token>". A placeholder
	// ({env.RCNS_OPERATOR_TOKEN}) is replaced at provision, never
	// written into the JSON config.
	BearerToken string `json:"bearer_token,omitempty"`
	// BasicUser and BasicPassword, when set, are also required: HTTP
	// Basic authentication (RFC 7617), which browsers prompt for. The
	// password may be a placeholder, replaced at provision. The user
	// is recorded as the revoking operator.
	BasicUser     string `json:"basic_user,omitempty"`
	BasicPassword string `json:"basic_password,omitempty"`
	// Operator is the actor recorded for a revoke from the page when
	// no basic-auth user names one (the negotiation record's and the
	// rcns_revoke event's "actor"). Default "operator".
	Operator string `json:"operator,omitempty"`
	// MaxRows is the most rows each section lists; the rest is
	// counted. Default 50, at most 1000.
	MaxRows int `json:"max_rows,omitempty"`
	// DNSRebindingProtection refuses (403) a request that reached the
	// page on a loopback address naming a Host other than localhost,
	// 127.0.0.1 or [::1]: a web page whose name an attacker rebinds to
	// 127.0.0.1 would otherwise read the page and, its Origin matching
	// that Host, revoke from it. Default true; false for a reverse proxy
	// on the same machine that forwards the public Host over loopback
	// (which must then be the one to refuse foreign Hosts).
	DNSRebindingProtection *bool `json:"dns_rebinding_protection,omitempty"`
}

// rebindingProtected reports whether DNSRebindingProtection is on.
func (c *Config) rebindingProtected() bool {
	return c.DNSRebindingProtection == nil || *c.DNSRebindingProtection
}

// Defaults of Config.
const (
	// DefaultPath is where the page is served when Path is not set.
	DefaultPath = "/rcns/operator"
	// DefaultOperator is the recorded actor without a basic-auth user.
	DefaultOperator = "operator"
	// DefaultMaxRows is the rows a section lists.
	DefaultMaxRows = 50
	// MaxMaxRows bounds MaxRows.
	MaxMaxRows = 1000
)

// DefaultAllow is the client ranges the page answers by default:
// loopback only.
var DefaultAllow = []string{"127.0.0.0/8", "::1/128"}

// SetDefaults fills the unset fields.
func (c *Config) SetDefaults() {
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if len(c.Allow) == 0 {
		c.Allow = append([]string(nil), DefaultAllow...)
	}
	if c.Operator == "" {
		c.Operator = DefaultOperator
	}
	if c.MaxRows == 0 {
		c.MaxRows = DefaultMaxRows
	}
}

// Validate checks the values (after SetDefaults): the path's form,
// every range, the rows bound, and that basic_user and basic_password
// come together.
func (c *Config) Validate() error {
	if !strings.HasPrefix(c.Path, "/") || len(c.Path) < 2 || strings.HasSuffix(c.Path, "/") ||
		strings.ContainsAny(c.Path, "?#*{} \t") {
		return fmt.Errorf("operator_page: path %q must start with /, not end with /, and hold no ?, #, *, {, } or spaces", c.Path)
	}
	if _, err := parseAllow(c.Allow); err != nil {
		return err
	}
	if c.MaxRows < 1 || c.MaxRows > MaxMaxRows {
		return fmt.Errorf("operator_page: max_rows %d is not in 1..%d", c.MaxRows, MaxMaxRows)
	}
	if (c.BasicUser == "") != (c.BasicPassword == "") {
		return fmt.Errorf("operator_page: basic needs both a user and a password")
	}
	if strings.Contains(c.BasicUser, ":") {
		return fmt.Errorf("operator_page: the basic user may not contain ':' (RFC 7617)")
	}
	return nil
}

// parseAllow parses the allowed ranges: CIDR prefixes or single
// addresses.
func parseAllow(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("operator_page: allow %q is neither a CIDR range nor an address", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
