package recipes

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// UpstreamOptions are the knobs of one named upstream (Caddyfile
// `upstream` block).
type UpstreamOptions struct {
	// Timeout is the per-call timeout used when an endpoint sets no
	// timeout_seconds. Zero means 30 s (spec §7.3 default); otherwise it
	// must be within MinCallTimeout and MaxCallTimeout.
	Timeout time.Duration
	// MaxConns caps concurrent connections to the upstream host. Zero
	// means 64.
	MaxConns int
	// InsecureHTTP allows an http:// base URL to a non-loopback host
	// (ARCHITECTURE.md "Upstreams"; spec OP-29).
	InsecureHTTP bool
	// MaxResponseBytes bounds each upstream response body read. Zero
	// means 8 MiB.
	MaxResponseBytes int64
}

// MinCallTimeout and MaxCallTimeout bound every per-call upstream
// timeout: an upstream's Timeout and an endpoint's timeout_seconds (whose
// bounds in seconds are schema.MinTimeoutSeconds and
// schema.MaxTimeoutSeconds). docs/configuration.md documents them.
const (
	// MinCallTimeout is the shortest per-call timeout: 1 ms.
	MinCallTimeout = time.Millisecond
	// MaxCallTimeout is the longest per-call timeout: 1 h.
	MaxCallTimeout = time.Hour
)

// Upstream is one legacy REST service the Tier B endpoints call: a base
// URL and a tuned, keep-alive HTTP client that never follows redirects
// and never uses a proxy from the environment.
type Upstream struct {
	// Name is the Caddyfile name of the upstream.
	Name string
	// Base is the parsed base URL; endpoint paths are appended to its path.
	Base *url.URL
	// Timeout is the default per-call timeout.
	Timeout time.Duration
	// MaxResponseBytes bounds each response body read.
	MaxResponseBytes int64
	// Insecure reports that plain HTTP to a non-loopback host was allowed
	// by the operator; callers log a warning at start.
	Insecure bool

	// basePath is Base's escaped path without a trailing slash.
	basePath string
	// transport sends the requests (RoundTrip: no redirect following,
	// no cookie jar, as reverse_proxy uses its transport).
	transport *http.Transport
	// unconfigured marks the placeholder of an upstream the running
	// configuration does not declare (unconfiguredUpstream): no Base,
	// no transport, never called.
	unconfigured bool
	// closed is set by Close: a call that ends after it (it ran across
	// a configuration reload) closes the connection it leaves idle.
	closed atomic.Bool
}

// unconfiguredUpstream is the placeholder a Restorer binds a captured
// step to when the running configuration no longer declares its
// upstream: it carries the name (for refusals and the stale sweep) and
// the default timeout, and Endpoint.InvokeValidated refuses to call it.
func unconfiguredUpstream(name string) *Upstream {
	return &Upstream{Name: name, Timeout: 30 * time.Second, unconfigured: true}
}

// CheckUpstreamName refuses an upstream name that no endpoint could
// name: one not matching schema.UpstreamNamePattern, the pattern of an
// endpoint's external_service.upstream (empty, or with white space or
// braces).
func CheckUpstreamName(name string) error {
	if !schema.ValidUpstreamName(name) {
		return fmt.Errorf("upstream %q: the name must match %s (not empty, no white space or braces), as an endpoint's external_service.upstream must, or no endpoint could use it", name, schema.UpstreamNamePattern())
	}
	return nil
}

// shownURL is raw as an error message shows it: with its user info, if
// any, replaced by "xxxxx", so that a password written into an upstream's
// URL reaches neither the log nor the admin API's answer.
func shownURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		switch {
		case u.User != nil:
			u.User = url.User("xxxxx")
			return u.String()
		case u.Host != "":
			return raw // an @ after the host is not user info
		}
	}
	// Unparsed, or parsed without a host ("svc:pass@host" reads as an
	// opaque URL): anything before an @ may be a credential.
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	if s := strings.Index(raw, "://"); s >= 0 && s < at {
		return raw[:s+3] + "xxxxx" + raw[at:]
	}
	return "xxxxx" + raw[at:]
}

// NewUpstream checks name with CheckUpstreamName, validates baseURL against the scheme rule (https://, or
// http:// to a loopback host, or http:// with InsecureHTTP) and the
// timeout against MinCallTimeout and MaxCallTimeout, and builds the
// upstream's client. Errors name the upstream and the rule broken.
// A base URL with user info is refused without showing it (shownURL),
// and one with a query without showing the query.
func NewUpstream(name, baseURL string, opts UpstreamOptions) (*Upstream, error) {
	if err := CheckUpstreamName(name); err != nil {
		return nil, err
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		if strings.Contains(baseURL, "@") {
			// The parser's words quote pieces of the URL (`invalid port
			// ":S3cret" after host` for a password holding a slash):
			// none of them is shown where a credential may be.
			return nil, fmt.Errorf("upstream %q: invalid base URL %q: it does not parse (what it holds before the @ is not shown: the base URL must not carry user info)", name, shownURL(baseURL))
		}
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err // without the URL, quoted already
		}
		return nil, fmt.Errorf("upstream %q: invalid base URL %q: %v", name, baseURL, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("upstream %q: base URL %q has no host", name, shownURL(baseURL))
	}
	if u.User != nil {
		return nil, fmt.Errorf("upstream %q: base URL %q must not carry user info: give the upstream its credential with the endpoint's headers or a credentials policy (docs/operator-guide.md \"What the legacy API sees\")", name, shownURL(baseURL))
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		// Not quoted whole: a query may hold a token.
		return nil, fmt.Errorf("upstream %q: base URL %q must not carry a query or fragment (not shown here); give the upstream its credential with the endpoint's headers or a credentials policy", name, u.Scheme+"://"+u.Host+u.EscapedPath())
	}
	insecure := false
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopbackHost(u.Hostname()) {
			if !opts.InsecureHTTP {
				return nil, fmt.Errorf("upstream %q: plain http:// to non-loopback host %q is refused; use https:// or set insecure_http", name, u.Hostname())
			}
			insecure = true
		}
	default:
		return nil, fmt.Errorf("upstream %q: scheme %q is not supported; use https:// (or http:// to a loopback host)", name, u.Scheme)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Timeout < MinCallTimeout || opts.Timeout > MaxCallTimeout {
		return nil, fmt.Errorf("upstream %q: timeout %v is outside the allowed range %v to %v", name, opts.Timeout, MinCallTimeout, MaxCallTimeout)
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 64
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 8 << 20
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          opts.MaxConns * 2,
		MaxIdleConnsPerHost:   opts.MaxConns,
		MaxConnsPerHost:       opts.MaxConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: 0, // bounded by the per-call context instead
	}
	return &Upstream{
		Name:             name,
		Base:             u,
		Timeout:          opts.Timeout,
		MaxResponseBytes: opts.MaxResponseBytes,
		Insecure:         insecure,
		basePath:         strings.TrimSuffix(u.EscapedPath(), "/"),
		transport:        tr, // upstream redirects are answers, never followed
	}, nil
}

// Close releases the upstream's idle connections, and those of calls
// still running as they end: once its configuration is replaced, no
// connection of it stays open for the 90 s idle timeout. The upstream
// may still be called after Close (the next step of a plan of the old
// configuration); each such call closes its connection as it ends
// (afterCall: net/http's transport stops closing newly idle
// connections once a new call asks for one).
func (u *Upstream) Close() {
	if u != nil && u.transport != nil {
		u.closed.Store(true)
		u.transport.CloseIdleConnections()
	}
}

// afterCall is deferred by every call, to run once its response body is
// closed (its connection back in the idle pool): after Close, it closes
// that connection.
func (u *Upstream) afterCall() {
	if u.closed.Load() {
		u.transport.CloseIdleConnections()
	}
}

// requestURL joins the base URL's path with an already-escaped
// upstream path and an encoded query, without re-parsing a string.
func (u *Upstream) requestURL(escapedPath, rawQuery string) (*url.URL, error) {
	raw := u.basePath + escapedPath
	p, err := url.PathUnescape(raw)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: u.Base.Scheme, Host: u.Base.Host, Path: p, RawPath: raw, RawQuery: rawQuery}, nil
}

// isLoopbackHost reports whether h names a loopback address
// (127.0.0.0/8, ::1, localhost).
func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
