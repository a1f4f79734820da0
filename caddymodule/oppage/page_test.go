package oppage

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// page builds a Page of c without an engine: enough for the access
// rule and the refusals, which answer before the engine is asked.
func page(t *testing.T, c Config) *Page {
	t.Helper()
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	allow, _ := parseAllow(c.Allow)
	return &Page{cfg: c, allow: allow, logger: zap.NewNop()}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want string // "" valid
	}{
		{"defaults", Config{}, ""},
		{"relative path", Config{Path: "ops"}, "must start with /"},
		{"trailing slash", Config{Path: "/ops/"}, "not end with /"},
		{"root", Config{Path: "/"}, "must start with /"},
		{"bad range", Config{Allow: []string{"10.0.0.0/33"}}, "neither a CIDR range nor an address"},
		{"an address", Config{Allow: []string{"192.0.2.1"}}, ""},
		{"basic without password", Config{BasicUser: "sre"}, "both a user and a password"},
		{"basic user with colon", Config{BasicUser: "a:b", BasicPassword: "p"}, "may not contain ':'"},
		{"rows", Config{MaxRows: 1001}, "max_rows 1001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.SetDefaults()
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	c := Config{}
	c.SetDefaults()
	if c.Path != DefaultPath || c.Operator != DefaultOperator || c.MaxRows != DefaultMaxRows || len(c.Allow) != 2 {
		t.Fatalf("defaults = %+v", c)
	}
}

// TestAccessRule: the client ranges come first (403), then every
// configured credential (401 with its challenge).
func TestAccessRule(t *testing.T) {
	loop, other := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.9")
	for _, tc := range []struct {
		name   string
		c      Config
		client netip.Addr
		authz  string
		user   [2]string
		status int
		wwwa   string
	}{
		{"default loopback, outside", Config{}, other, "", [2]string{}, 403, ""},
		{"default loopback, v4-mapped loopback", Config{}, netip.MustParseAddr("::ffff:127.0.0.1"), "", [2]string{}, 405, ""},
		{"an allowed range", Config{Allow: []string{"192.0.2.0/24"}}, other, "", [2]string{}, 405, ""},
		{"invalid client address", Config{}, netip.Addr{}, "", [2]string{}, 403, ""},
		{"bearer missing", Config{BearerToken: "s3cret"}, loop, "", [2]string{}, 401, "Bearer"},
		{"bearer wrong", Config{BearerToken: "s3cret"}, loop, "Bearer nope", [2]string{}, 401, "Bearer"},
		{"bearer right, scheme any case", Config{BearerToken: "s3cret"}, loop, "bearer s3cret", [2]string{}, 405, ""},
		{"bearer right, outside", Config{BearerToken: "s3cret"}, other, "Bearer s3cret", [2]string{}, 403, ""},
		{"basic missing", Config{BasicUser: "sre", BasicPassword: "pw"}, loop, "", [2]string{}, 401, "Basic"},
		{"basic wrong", Config{BasicUser: "sre", BasicPassword: "pw"}, loop, "", [2]string{"sre", "nope"}, 401, "Basic"},
		{"basic right", Config{BasicUser: "sre", BasicPassword: "pw"}, loop, "", [2]string{"sre", "pw"}, 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := page(t, tc.c)
			// PUT: past the access rule it is 405, before any engine call.
			r := httptest.NewRequest(http.MethodPut, p.cfg.Path, nil)
			if tc.authz != "" {
				r.Header.Set("Authorization", tc.authz)
			}
			if tc.user[0] != "" {
				r.SetBasicAuth(tc.user[0], tc.user[1])
			}
			w := httptest.NewRecorder()
			p.ServeHTTP(w, r, tc.client, "")
			if w.Code != tc.status || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), tc.wwwa) {
				t.Fatalf("status %d (WWW-Authenticate %q), want %d %q", w.Code, w.Header().Get("WWW-Authenticate"), tc.status, tc.wwwa)
			}
			if w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("X-Frame-Options") != "DENY" {
				t.Errorf("headers %v lack no-store or DENY", w.Header())
			}
		})
	}
}

// TestDNSRebinding: a request that reached the page on a loopback
// address naming another Host (a rebound name) is refused 403 before
// the access rule, on the page and on revoke; localhost, 127.0.0.1 and
// [::1] pass, as does any Host on a non-loopback address or with
// dns_rebinding_protection false.
func TestDNSRebinding(t *testing.T) {
	loop := netip.MustParseAddr("127.0.0.1")
	off := false
	for _, tc := range []struct {
		name   string
		c      Config
		local  net.Addr
		host   string
		path   string
		status int
	}{
		{"rebound name over loopback", Config{}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "evil.example:8080", "", 403},
		{"rebound name, revoke", Config{}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "evil.example:8080", "/revoke", 403},
		{"rebound name over ::1", Config{}, &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, "evil.example", "", 403},
		{"localhost", Config{}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "localhost:8080", "", 405},
		{"127.0.0.1", Config{}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "127.0.0.1:8080", "", 405},
		{"[::1]", Config{}, &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, "[::1]:8080", "", 405},
		{"a name on another address", Config{}, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8080}, "gw.example", "", 405},
		{"protection off", Config{DNSRebindingProtection: &off}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "gw.example", "", 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := page(t, tc.c)
			r := httptest.NewRequest(http.MethodPut, p.cfg.Path+tc.path, nil)
			r.Host = tc.host
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, tc.local))
			w := httptest.NewRecorder()
			p.ServeHTTP(w, r, loop, "")
			if w.Code != tc.status {
				t.Fatalf("status %d (%s), want %d", w.Code, w.Body, tc.status)
			}
			if tc.status == 403 && !strings.Contains(w.Body.String(), "dns_rebinding_protection") {
				t.Errorf("refusal %q does not name the knob", w.Body)
			}
		})
	}
}

// TestCSRFToken: a token verifies for the visitor it was issued to, for
// csrfTTL, and for no other credential.
func TestCSRFToken(t *testing.T) {
	p := page(t, Config{BearerToken: "one"})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer one")
	v, ok := p.authenticate(r, netip.MustParseAddr("127.0.0.1"), "")
	if !ok || v.op.Access != "bearer" || v.op.Name != DefaultOperator {
		t.Fatalf("authenticate = %+v, %v", v, ok)
	}
	now := time.Unix(1_800_000_000, 0)
	tok := csrfToken(v, now)
	if why := checkCSRF(tok, v, now.Add(time.Minute)); why != "" {
		t.Fatalf("fresh token refused: %s", why)
	}
	other := visitor{op: v.op, binding: []byte("another credential")}
	for _, tc := range []struct {
		name string
		tok  string
		v    visitor
		at   time.Time
		want string
	}{
		{"expired", tok, v, now.Add(csrfTTL + time.Second), "expired"},
		{"from the future", tok, v, now.Add(-2 * time.Minute), "expired"},
		{"another credential", tok, other, now, "not issued to this credential"},
		{"empty", "", v, now, "missing or malformed"},
		{"garbage", "!!", v, now, "missing or malformed"},
		{"truncated", tok[:20], v, now, "missing or malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if why := checkCSRF(tc.tok, tc.v, tc.at); !strings.Contains(why, tc.want) || why == "" {
				t.Fatalf("checkCSRF = %q, want %q", why, tc.want)
			}
		})
	}
	// Basic binds the user and password: the same user with another
	// password (after a rotation) gets another binding.
	b := page(t, Config{BasicUser: "sre", BasicPassword: "pw1"})
	r = httptest.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth("sre", "pw1")
	v1, _ := b.authenticate(r, netip.MustParseAddr("127.0.0.1"), "")
	b.cfg.BasicPassword = "pw2"
	r.SetBasicAuth("sre", "pw2")
	v2, _ := b.authenticate(r, netip.MustParseAddr("127.0.0.1"), "")
	if v1.op.Name != "sre" || v1.op.Access != "basic" || checkCSRF(csrfToken(v1, now), v2, now) == "" {
		t.Fatalf("basic: %+v; a token of the old password verifies under the new one", v1.op)
	}
}

// TestCaddyAuthUser: behind Caddy's basic_auth (no credential of the
// page's own), the user Caddy verified is the operator, and a token is
// bound to that user.
func TestCaddyAuthUser(t *testing.T) {
	p := page(t, Config{})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	addr := netip.MustParseAddr("127.0.0.1")
	alice, _ := p.authenticate(r, addr, "alice")
	bob, _ := p.authenticate(r, addr, "bob")
	if alice.op.Name != "alice" || alice.op.Access != "caddy-auth" {
		t.Fatalf("operator = %+v", alice.op)
	}
	now := time.Now()
	if checkCSRF(csrfToken(alice, now), bob, now) == "" {
		t.Fatal("alice's token verifies for bob")
	}
}

// TestRevokeRefusals: a revoke POST that is cross-site, not a form, or
// without a valid token is refused before the engine is asked.
func TestRevokeRefusals(t *testing.T) {
	p := page(t, Config{})
	client := netip.MustParseAddr("127.0.0.1")
	r0 := httptest.NewRequest(http.MethodGet, "/", nil)
	v, _ := p.authenticate(r0, client, "")
	good := url.Values{"csrf": {csrfToken(v, time.Now())}, "synthesis_id": {"syn-x"}}.Encode()
	for _, tc := range []struct {
		name   string
		method string
		header map[string]string
		body   string
		status int
		want   string
	}{
		{"GET", http.MethodGet, nil, "", 405, "revoke takes POST"},
		{"other origin", http.MethodPost, map[string]string{"Origin": "https://evil.example"}, good, 403, "cross-site"},
		{"origin other port", http.MethodPost, map[string]string{"Origin": "http://example.com:81"}, good, 403, "cross-site"},
		{"origin https", http.MethodPost, map[string]string{"Origin": "https://example.com"}, good, 403, "cross-site"},
		{"origin null", http.MethodPost, map[string]string{"Origin": "null"}, good, 403, "cross-site"},
		{"same-site", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-site"}, good, 403, "cross-site"},
		{"not a form", http.MethodPost, map[string]string{"Content-Type": "application/json"}, `{}`, 415, "form"},
		{"no token", http.MethodPost, map[string]string{"Origin": "http://example.com"}, "synthesis_id=syn-x", 403, "CSRF"},
		{"form too large", http.MethodPost, nil, "reason=" + strings.Repeat("x", maxForm+1), 400, "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, p.cfg.Path+"/revoke", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			p.ServeHTTP(w, r, client, "")
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.want) {
				t.Fatalf("status %d %q, want %d %q", w.Code, w.Body.String(), tc.status, tc.want)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	p := page(t, Config{Path: "/ops"})
	for path, want := range map[string]bool{"/ops": true, "/ops/": true, "/ops/revoke": true, "/ops/x": false, "/opsx": false, "/": false} {
		if p.Match(path) != want {
			t.Errorf("Match(%q) = %v", path, !want)
		}
	}
}

// TestNoticeOnlyFromThePage: the page shows a revoke's outcome only when
// its own redirect wrote it; a crafted link's ?done= or ?error= text,
// or a real outcome with its text changed, shows nothing.
func TestNoticeOnlyFromThePage(t *testing.T) {
	get := func(q url.Values) notice {
		return noticeFrom(httptest.NewRequest(http.MethodGet, "/rcns/operator?"+q.Encode(), nil))
	}
	own := url.Values{"done": {"contract c-1 revoked by sre"}}
	own.Set("sig", noticeMAC(own.Get("done"), ""))
	if n := get(own); n.Done != "contract c-1 revoked by sre" || n.Error != "" {
		t.Fatalf("the page's own outcome: %+v", n)
	}
	crafted := url.Values{"done": {"contract c-1 revoked by sre"}}
	if n := get(crafted); n != (notice{}) {
		t.Fatalf("a crafted ?done= is shown: %+v", n)
	}
	changed := url.Values{"done": {"contract c-2 revoked by sre"}, "sig": {own.Get("sig")}}
	if n := get(changed); n != (notice{}) {
		t.Fatalf("a changed outcome is shown: %+v", n)
	}
	moved := url.Values{"error": {"contract c-1 revoked by sre"}, "sig": {own.Get("sig")}}
	if n := get(moved); n != (notice{}) {
		t.Fatalf("an outcome moved from done to error is shown: %+v", n)
	}
}
