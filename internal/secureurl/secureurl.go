// Package secureurl checks a URL the gateway sends a secret to, or
// takes a secret's destination from: an OAuth issuer, a token,
// introspection or JWKS endpoint. Such a URL must be https, or http on
// a loopback host only (RFC 6749 §3.2 and OAuth 2.1 require TLS at the
// token endpoint; RFC 8414 §2 for the issuer; the MCP authorization
// rules), so that no client secret, access token or metadata crosses a
// network in cleartext.
package secureurl

import (
	"errors"
	"net/url"
)

// ErrNotAbsolute is Check's error for a URL that does not parse or has
// no host.
var ErrNotAbsolute = errors.New("is not an absolute URL")

// ErrCleartext is Check's error for an absolute URL that is neither
// https nor http on a loopback host.
var ErrCleartext = errors.New("must be https (http only on localhost, 127.0.0.1 or ::1)")

// Check returns nil for an absolute https URL, or an http URL whose
// host is localhost, 127.0.0.1 or ::1; ErrNotAbsolute or ErrCleartext
// otherwise. The errors read after the quoted URL: `oauth.issuer
// "http://x" must be https (…)`.
func Check(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return ErrNotAbsolute
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if h := u.Hostname(); h == "localhost" || h == "127.0.0.1" || h == "::1" {
			return nil
		}
	}
	return ErrCleartext
}
