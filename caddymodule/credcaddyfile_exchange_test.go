package caddymodule

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// adaptRCNS adapts a site whose rcns block is body and returns the rcns
// handler's JSON.
func adaptRCNS(t *testing.T, body string) (map[string]any, error) {
	t.Helper()
	src := ":8080 {\n\trcns {\n\t\t" + body + "\n\t}\n}\n"
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		return nil, err
	}
	i := strings.Index(string(out), `{"handler":"rcns"`)
	if i < 0 {
		t.Fatalf("no rcns handler in %s", out)
	}
	dec := json.NewDecoder(strings.NewReader(string(out[i:])))
	var h map[string]any
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h, nil
}

// TestCaddyfileTokenExchangeAndAssertion: the credentials blocks of the
// token_exchange and assertion policies adapt to the JSON the engine
// reads, and a wrong knob is a clear error.
func TestCaddyfileTokenExchangeAndAssertion(t *testing.T) {
	h, err := adaptRCNS(t, `upstream legacy https://legacy.example {
			credentials token_exchange {
				issuer https://as.example
				client_id gateway
				client_secret {env.RCNS_EXCHANGE_SECRET}
				resource https://legacy.example/
				audience legacy
				scopes orders:read orders:write
				header X-Upstream-Token
				margin 5s
				timeout 3s
				cache_size 500
			}
		}
		upstream billing https://billing.example {
			credentials assertion {
				issuer https://gateway.example
				audience https://billing.example/
				ttl 30s
				header X-RCNS-Assertion
				keys /k/a.pem /k/b.pem
			}
		}
		upstream plain https://plain.example {
			credentials assertion
		}`)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(h["upstreams"])
	var ups map[string]*engine.UpstreamConfig
	if err := json.Unmarshal(raw, &ups); err != nil {
		t.Fatal(err)
	}
	te := ups["legacy"].Credentials.TokenExchange
	if ups["legacy"].Credentials.Policy != engine.CredentialsTokenExchange || te == nil || !reflect.DeepEqual(*te, engine.TokenExchangeCredentials{
		Issuer: "https://as.example", ClientID: "gateway", ClientSecret: "{env.RCNS_EXCHANGE_SECRET}",
		Resource: "https://legacy.example/", Audience: "legacy", Scopes: []string{"orders:read", "orders:write"},
		Header: "X-Upstream-Token", Margin: engine.Duration(5 * time.Second), Timeout: engine.Duration(3 * time.Second), CacheSize: 500}) {
		t.Errorf("token_exchange: %s", raw)
	}
	as := ups["billing"].Credentials.Assertion
	if ups["billing"].Credentials.Policy != engine.CredentialsAssertion || as == nil || !reflect.DeepEqual(*as, engine.AssertionCredentials{
		Issuer: "https://gateway.example", Audience: "https://billing.example/", TTL: engine.Duration(30 * time.Second),
		Header: "X-RCNS-Assertion", Keys: []string{"/k/a.pem", "/k/b.pem"}}) {
		t.Errorf("assertion: %s", raw)
	}
	if c := ups["plain"].Credentials; c.Policy != engine.CredentialsAssertion || c.Assertion == nil || c.TokenExchange != nil {
		t.Errorf("assertion without a block: %s", raw)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"unknown exchange knob", "credentials token_exchange {\n\t\t\t\tissuer https://as\n\t\t\t\tbogus 1\n\t\t\t}", `credentials token_exchange: unknown subdirective "bogus"`},
		{"exchange margin", "credentials token_exchange {\n\t\t\t\tmargin soon\n\t\t\t}", `token_exchange margin: "soon"`},
		{"exchange cache_size", "credentials token_exchange {\n\t\t\t\tcache_size 0\n\t\t\t}", "not a positive integer"},
		{"exchange scopes", "credentials token_exchange {\n\t\t\t\tscopes\n\t\t\t}", "want at least one scope"},
		{"unknown assertion knob", "credentials assertion {\n\t\t\t\tdir /x\n\t\t\t}", `credentials assertion: unknown subdirective "dir"`},
		{"assertion ttl", "credentials assertion {\n\t\t\t\tttl -1s\n\t\t\t}", `assertion ttl: "-1s" must be a positive duration`},
		{"assertion keys", "credentials assertion {\n\t\t\t\tkeys\n\t\t\t}", "want at least one key file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adaptRCNS(t, "upstream u https://u.example {\n\t\t\t"+tc.body+"\n\t\t}")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestCaddyfileOAuthBlock: the identity oauth block's knobs adapt to
// the JSON the engine reads (require_at_jwt among them), and a bad one
// is a clear error.
func TestCaddyfileOAuthBlock(t *testing.T) {
	h, err := adaptRCNS(t, `identity oauth
		oauth {
			issuer https://as.example
			resource https://gw.example
			allow_no_expiry
			require_at_jwt
			jwks_min_refresh 5s
		}`)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := h["oauth"].(map[string]any)
	want := map[string]any{"issuer": "https://as.example", "resource": "https://gw.example", "allow_no_expiry": true,
		"require_at_jwt": true, "jwks_min_refresh": float64(5 * time.Second)}
	for k, v := range want {
		if !reflect.DeepEqual(o[k], v) {
			t.Errorf("oauth.%s = %#v, want %#v (oauth: %v)", k, o[k], v, o)
		}
	}
	h, err = adaptRCNS(t, "identity oauth\n\t\toauth {\n\t\t\tissuer https://as.example\n\t\t\tresource https://gw.example\n\t\t\trequire_at_jwt false\n\t\t}")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := h["oauth"].(map[string]any); o["require_at_jwt"] != nil {
		t.Errorf("require_at_jwt false adapted to %v, want it left out", o["require_at_jwt"])
	}
	if _, err := adaptRCNS(t, "identity oauth\n\t\toauth {\n\t\t\trequire_at_jwt maybe\n\t\t}"); err == nil || !strings.Contains(err.Error(), "maybe") {
		t.Errorf("require_at_jwt maybe: %v, want an error naming the value", err)
	}
}

// TestTokenExchangeNeedsTLS: the gateway sends its client_secret and
// the caller's access token to the token endpoint, so `caddy validate`
// refuses an http issuer or token_endpoint on a host that is not
// loopback, naming the setting, as for the oauth block (it said "Valid
// configuration", and the gateway would have sent both in cleartext).
func TestTokenExchangeNeedsTLS(t *testing.T) {
	block := func(knob string) string {
		return "upstream legacy https://legacy.example {\n\t\t\tcredentials token_exchange {\n\t\t\t\t" + knob +
			"\n\t\t\t\tclient_id gateway\n\t\t\t\tclient_secret s3cret\n\t\t\t}\n\t\t}"
	}
	js := func(knob, url string) string {
		return `"upstreams":{"legacy":{"url":"https://legacy.example","credentials":{"policy":"token_exchange","token_exchange":{"` +
			knob + `":"` + url + `","client_id":"gateway","client_secret":"s3cret"}}}}`
	}
	runConfigCases(t, []configCase{
		{"https issuer", block("issuer https://auth.example.com"), js("issuer", "https://auth.example.com"), ""},
		{"https token_endpoint", block("token_endpoint https://auth.example.com/token"), js("token_endpoint", "https://auth.example.com/token"), ""},
		{"http issuer on loopback", block("issuer http://127.0.0.1:9000"), js("issuer", "http://localhost:9000"), ""},
		{"http token_endpoint on loopback", block("token_endpoint http://[::1]:9000/token"), js("token_endpoint", "http://127.0.0.1:9000/token"), ""},
		{"http issuer", block("issuer http://auth.example.com"), js("issuer", "http://auth.example.com"),
			`upstream legacy: credentials token_exchange: issuer "http://auth.example.com" must be https (http only on localhost, 127.0.0.1 or ::1)`},
		{"http token_endpoint", block("token_endpoint http://auth.example.com/token"), js("token_endpoint", "http://auth.example.com/token"),
			`upstream legacy: credentials token_exchange: token_endpoint "http://auth.example.com/token" must be https`},
		{"http token_endpoint on a private address", block("token_endpoint http://10.0.0.5/token"), js("token_endpoint", "http://10.0.0.5/token"),
			`token_endpoint "http://10.0.0.5/token" must be https`},
		// No userinfo or fragment (they were accepted), and no query in
		// an issuer (RFC 8414 §2); a token endpoint may have one (RFC
		// 6749 §3.2). The password is not repeated.
		{"issuer with userinfo", block("issuer https://gw:pw@auth.example.com"), js("issuer", "https://gw:pw@auth.example.com"),
			`issuer "https://gw:xxxxx@auth.example.com" must not carry userinfo`},
		{"token_endpoint with userinfo", block("token_endpoint https://gw@auth.example.com/token"), js("token_endpoint", "https://gw@auth.example.com/token"),
			`token_endpoint "https://gw@auth.example.com/token" must not carry userinfo`},
		{"issuer with a fragment", block("issuer https://auth.example.com#x"), js("issuer", "https://auth.example.com#x"),
			`issuer "https://auth.example.com#x" must not have a fragment`},
		{"token_endpoint with a fragment", block("token_endpoint https://auth.example.com/token#x"), js("token_endpoint", "https://auth.example.com/token#x"),
			`token_endpoint "https://auth.example.com/token#x" must not have a fragment`},
		{"issuer with a query", block("issuer https://auth.example.com/?tenant=a"), js("issuer", "https://auth.example.com/?tenant=a"),
			`issuer "https://auth.example.com/?tenant=a" must not have a query`},
		{"token_endpoint with a query", block("token_endpoint https://auth.example.com/token?tenant=a"), js("token_endpoint", "https://auth.example.com/token?tenant=a"), ""},
	})
}

// TestOAuthURLsRefused: the identity oauth block's issuer, jwks_uri and
// introspection_endpoint refuse userinfo and fragments, the issuer a
// query too (RFC 8414 §2), as the token exchange's URLs (they were
// accepted).
func TestOAuthURLsRefused(t *testing.T) {
	block := func(knobs string) string {
		return "identity oauth\n\t\toauth {\n\t\t\tresource https://gw.example\n\t\t\t" + knobs + "\n\t\t}"
	}
	js := func(members string) string {
		return `"identity":"oauth","oauth":{"resource":"https://gw.example",` + members + `}`
	}
	runConfigCases(t, []configCase{
		{"plain", block("issuer https://as.example"), js(`"issuer":"https://as.example"`), ""},
		{"issuer with userinfo", block("issuer https://u:pw@as.example"), js(`"issuer":"https://u:pw@as.example"`),
			`oauth.issuer "https://u:xxxxx@as.example" must not carry userinfo`},
		{"issuer with a fragment", block("issuer https://as.example/#f"), js(`"issuer":"https://as.example/#f"`),
			`oauth.issuer "https://as.example/#f" must not have a fragment`},
		{"issuer with a query", block("issuer https://as.example/?t=1"), js(`"issuer":"https://as.example/?t=1"`),
			`oauth.issuer "https://as.example/?t=1" must not have a query`},
		{"jwks_uri with a query", block("issuer https://as.example\n\t\t\tjwks_uri https://as.example/jwks?t=1"),
			js(`"issuer":"https://as.example","jwks_uri":"https://as.example/jwks?t=1"`), ""},
		{"jwks_uri with a fragment", block("issuer https://as.example\n\t\t\tjwks_uri https://as.example/jwks#k"),
			js(`"issuer":"https://as.example","jwks_uri":"https://as.example/jwks#k"`), `oauth.jwks_uri "https://as.example/jwks#k" must not have a fragment`},
		{"introspection_endpoint with userinfo", block("issuer https://as.example\n\t\t\tintrospection_endpoint https://u:pw@as.example/introspect"),
			js(`"issuer":"https://as.example","introspection_endpoint":"https://u:pw@as.example/introspect"`),
			`oauth.introspection_endpoint "https://u:xxxxx@as.example/introspect" must not carry userinfo`},
	})
}
