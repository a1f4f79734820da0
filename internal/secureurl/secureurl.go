// Package secureurl checks a URL the gateway sends a secret to, or
// takes a secret's destination from: an OAuth issuer, a token,
// introspection or JWKS endpoint. Such a URL must be https, or http on
// a loopback host only (RFC 6749 §3.2 and OAuth 2.1 require TLS at the
// token endpoint; RFC 8414 §2 for the issuer; the MCP authorization
// rules), so that no client secret, access token or metadata crosses a
// network in cleartext. It names no user (userinfo) and has no
// fragment (RFC 6749 §3.1 and §3.2 for endpoints); an issuer has no
// query either (RFC 8414 §2).
package secureurl

import (
	"errors"
	"net/url"
	"strings"
)

// ErrNotAbsolute is Check's error for a URL that does not parse or has
// no host.
var ErrNotAbsolute = errors.New("is not an absolute URL")

// ErrCleartext is Check's error for an absolute URL that is neither
// https nor http on a loopback host.
var ErrCleartext = errors.New("must be https (http only on localhost, 127.0.0.1 or ::1)")

// ErrUserinfo is Check's error for a URL with userinfo (user:password@
// before the host): a credential in a URL is logged with it, and the
// gateway authenticates with its configured client credentials.
var ErrUserinfo = errors.New("must not carry userinfo (user:password@ before the host); configure the client credentials instead")

// ErrFragment is Check's error for a URL with a fragment (#…), which
// an OAuth endpoint or issuer never has (RFC 6749 §3.1, §3.2; RFC 8414
// §2).
var ErrFragment = errors.New("must not have a fragment (#…) (RFC 6749 §3.2, RFC 8414 §2)")

// ErrQuery is CheckIssuer's error for an issuer with a query (?…).
var ErrQuery = errors.New("must not have a query (?…): an issuer identifier has none (RFC 8414 §2)")

// Check returns nil for an absolute https URL, or an http URL whose
// host is localhost, 127.0.0.1 or ::1, without userinfo or fragment;
// ErrNotAbsolute, ErrCleartext, ErrUserinfo or ErrFragment otherwise. A
// query is allowed (an endpoint may have one, RFC 6749 §3.2). The
// errors read after the quoted URL: `oauth.issuer "http://x" must be
// https (…)`.
func Check(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return ErrNotAbsolute
	}
	switch {
	case u.User != nil:
		return ErrUserinfo
	case u.Fragment != "" || strings.Contains(s, "#"):
		return ErrFragment
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

// CheckIssuer is Check for an authorization server's issuer identifier,
// which has no query either (RFC 8414 §2): ErrQuery.
func CheckIssuer(s string) error {
	if err := Check(s); err != nil {
		return err
	}
	if u, _ := url.Parse(s); u.RawQuery != "" || u.ForceQuery {
		return ErrQuery
	}
	return nil
}

// Redacted is s with the password of its userinfo, if any, replaced by
// xxxxx (url.URL.Redacted), for an error that quotes a refused URL; s
// itself when it does not parse or has no password (url.URL.String
// would drop an empty fragment's "#", the very thing an error may be
// about).
func Redacted(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
	}
	return s
}
