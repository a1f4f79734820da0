package httpsig_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

const (
	agentA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	agentB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

var now = time.Unix(1_900_000_000, 0)

// fixture is one agent key registered in a resolver.
type fixture struct {
	signer *httpsig.Signer
	keys   httpsig.KeyResolver
}

// newFixture makes a key for alg, registered to agentA.
func newFixture(t testing.TB, alg string) fixture {
	t.Helper()
	var key crypto.Signer
	switch alg {
	case httpsig.AlgEd25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	case httpsig.AlgECDSAP256SHA256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	}
	kid, err := httpsig.Thumbprint(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public()
	return fixture{
		signer: &httpsig.Signer{KeyID: kid, Alg: alg, Key: key},
		keys: func(id string) (string, crypto.PublicKey, string, bool) {
			if id != kid {
				return "", nil, "", false
			}
			return alg, pub, agentA, true
		},
	}
}

const body = `{"item":"book","qty":2}`

// newRequest is an AGTP request with a body, a query and the optional
// identity headers.
func newRequest(t testing.TB) *http.Request {
	t.Helper()
	req, err := http.NewRequest("BOOK", "http://gw.example:8080/orders/42?dry=1", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Agent-ID", agentA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authority-Scope", "orders:write")
	req.Header.Set("Idempotency-Key", "k-123")
	httpsig.SetContentDigest(req.Header, []byte(body))
	return req
}

// signOpts are valid signing options at now.
func signOpts() httpsig.SignOptions {
	return httpsig.SignOptions{Created: now, Expires: now.Add(60 * time.Second), Nonce: "n-1"}
}

// TestRoundTrip signs with DefaultComponents and verifies, for both
// algorithms.
func TestRoundTrip(t *testing.T) {
	for _, alg := range []string{httpsig.AlgEd25519, httpsig.AlgECDSAP256SHA256} {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, alg)
			req := newRequest(t)
			if err := f.signer.Sign(req, signOpts()); err != nil {
				t.Fatal(err)
			}
			in := req.Header.Get("Signature-Input")
			wantIn := `sig1=("@method" "@authority" "@path" "@query" "agent-id" "content-type" "content-digest" "idempotency-key" "authority-scope");created=1900000000;expires=1900000060;nonce="n-1";alg="` + alg + `";keyid="` + f.signer.KeyID + `"`
			if in != wantIn {
				t.Fatalf("Signature-Input:\n%s\nwant:\n%s", in, wantIn)
			}
			res, err := httpsig.Verify(req, f.keys, httpsig.VerifyOptions{Now: now.Add(5 * time.Second), Body: []byte(body), ExpectOwner: agentA})
			if err != nil {
				t.Fatal(err)
			}
			if res.KeyID != f.signer.KeyID || res.Owner != agentA || res.Alg != alg ||
				!res.Created.Equal(now) || !res.Expires.Equal(now.Add(60*time.Second)) || len(res.Signature) != 64 {
				t.Fatalf("result = %+v", res)
			}
		})
	}
}

// TestVerifyRefusals produces each refusal reason with one targeted
// change.
func TestVerifyRefusals(t *testing.T) {
	type tc struct {
		name   string
		sign   func(*http.Request, *httpsig.SignOptions, *httpsig.Signer) // before signing
		tamper func(*http.Request)                                        // after signing
		verify func(*httpsig.VerifyOptions)
		reason string
	}
	replace := func(field, re, repl string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set(field, regexp.MustCompile(re).ReplaceAllString(r.Header.Get(field), repl))
		}
	}
	cases := []tc{
		{name: "valid", reason: ""},
		{name: "no Signature field", tamper: func(r *http.Request) { r.Header.Del("Signature") }, reason: "signature-missing"},
		{name: "no Signature-Input field", tamper: func(r *http.Request) { r.Header.Del("Signature-Input") }, reason: "signature-missing"},
		{name: "other label", verify: func(o *httpsig.VerifyOptions) { o.Label = "sig2" }, reason: "signature-missing"},
		{name: "Signature-Input syntax", tamper: func(r *http.Request) { r.Header.Set("Signature-Input", `sig1=("@method"`) }, reason: "signature-invalid"},
		{name: "Signature syntax", tamper: func(r *http.Request) { r.Header.Set("Signature", `sig1=:not base64:`) }, reason: "signature-invalid"},
		{name: "Signature not bytes", tamper: func(r *http.Request) { r.Header.Set("Signature", `sig1="abc"`) }, reason: "signature-invalid"},
		{name: "Signature short", tamper: func(r *http.Request) { r.Header.Set("Signature", `sig1=:AAAA:`) }, reason: "signature-invalid"},
		{name: "Signature-Input not a list", tamper: func(r *http.Request) { r.Header.Set("Signature-Input", `sig1="@method"`) }, reason: "signature-invalid"},
		{name: "component parameters", tamper: replace("Signature-Input", `"@path"`, `"@path";req`), reason: "signature-invalid"},
		{name: "unknown alg", tamper: replace("Signature-Input", `alg="[^"]*"`, `alg="rsa-pss-sha512"`), reason: "signature-invalid"},
		{name: "no keyid", tamper: replace("Signature-Input", `;keyid="[^"]*"`, ``), reason: "signature-invalid"},
		{name: "no created", tamper: replace("Signature-Input", `;created=\d+`, ``), reason: "signature-invalid"},
		{name: "no expires", sign: func(_ *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) { o.Expires = time.Time{} }, reason: "signature-invalid"},
		{name: "window too long", sign: func(_ *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) {
			o.Expires = now.Add(301 * time.Second)
		}, reason: "signature-invalid"},
		{name: "window custom MaxAge", verify: func(o *httpsig.VerifyOptions) { o.MaxAge = 30 * time.Second }, reason: "signature-invalid"},
		{name: "created in the future", sign: func(_ *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) {
			o.Created, o.Expires = now.Add(61*time.Second), now.Add(120*time.Second)
		}, reason: "signature-invalid"},
		{name: "created in the past", sign: func(_ *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) {
			o.Created, o.Expires = now.Add(-61*time.Second), now.Add(200*time.Second)
		}, reason: "signature-invalid"},
		{name: "expires before created", sign: func(_ *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) { o.Expires = now.Add(-time.Second) }, reason: "signature-invalid"},
		{name: "unknown key", sign: func(_ *http.Request, _ *httpsig.SignOptions, s *httpsig.Signer) { s.KeyID = "not-registered" }, reason: "key-unknown"},
		{name: "key of another agent", verify: func(o *httpsig.VerifyOptions) { o.ExpectOwner = agentB }, reason: "key-unknown"},
		{name: "expired", sign: func(_ *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) {
			o.Created, o.Expires = now.Add(-50*time.Second), now.Add(-10*time.Second)
		}, reason: "signature-expired"},
		{name: "expired beats not covered", sign: func(_ *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) {
			o.Created, o.Expires = now.Add(-50*time.Second), now.Add(-10*time.Second)
			o.Components = []string{"@method"}
		}, reason: "signature-expired"},
		{name: "authority-scope present, not covered", sign: func(r *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) {
			o.Components = without(httpsig.DefaultComponents(r), "authority-scope")
		}, reason: "component-not-covered"},
		{name: "header added after signing", tamper: func(r *http.Request) { r.Header.Set("Allow-RCNS", "true") }, reason: "component-not-covered"},
		{name: "custom Required", verify: func(o *httpsig.VerifyOptions) {
			o.Required = func(*http.Request) []string { return []string{"@target-uri"} }
		}, reason: "component-not-covered"},
		{name: "authority listed", verify: func(o *httpsig.VerifyOptions) { o.Authorities = []string{"other.example", "gw.example:8080"} }, reason: ""},
		{name: "authority not listed", verify: func(o *httpsig.VerifyOptions) { o.Authorities = []string{"other.example:8080"} }, reason: "authority-mismatch"},
		{name: "authority beats digest", verify: func(o *httpsig.VerifyOptions) {
			o.Authorities = []string{"other.example:8080"}
			o.Body = []byte(`{"item":"book","qty":200}`)
		}, reason: "authority-mismatch"},
		{name: "not covered beats authority", sign: func(r *http.Request, o *httpsig.SignOptions, _ *httpsig.Signer) {
			o.Components = without(httpsig.DefaultComponents(r), "authority-scope")
		}, verify: func(o *httpsig.VerifyOptions) { o.Authorities = []string{"other.example:8080"} }, reason: "component-not-covered"},
		{name: "body changed", verify: func(o *httpsig.VerifyOptions) { o.Body = []byte(`{"item":"book","qty":200}`) }, reason: "digest-mismatch"},
		{name: "digest removed", tamper: func(r *http.Request) { r.Header.Del("Content-Digest") }, reason: "digest-mismatch"},
		{name: "digest not sha-256", sign: func(r *http.Request, _ *httpsig.SignOptions, _ *httpsig.Signer) {
			r.Header.Set("Content-Digest", "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:")
		}, reason: "digest-mismatch"},
		{name: "signature bytes changed", tamper: func(r *http.Request) {
			v := r.Header.Get("Signature")
			b, _ := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(v, "sig1=:"), ":"))
			b[10] ^= 1
			r.Header.Set("Signature", "sig1=:"+base64.StdEncoding.EncodeToString(b)+":")
		}, reason: "signature-invalid"},
		{name: "covered header changed", tamper: func(r *http.Request) { r.Header.Set("Authority-Scope", "orders:*") }, reason: "signature-invalid"},
		{name: "path changed", tamper: func(r *http.Request) { r.URL.Path = "/orders/43" }, reason: "signature-invalid"},
		{name: "method changed", tamper: func(r *http.Request) { r.Method = "CANCEL" }, reason: "signature-invalid"},
	}
	for _, alg := range []string{httpsig.AlgEd25519, httpsig.AlgECDSAP256SHA256} {
		for _, c := range cases {
			t.Run(alg+"/"+c.name, func(t *testing.T) {
				f := newFixture(t, alg)
				req := newRequest(t)
				opts := signOpts()
				if c.sign != nil {
					c.sign(req, &opts, f.signer)
				}
				if err := f.signer.Sign(req, opts); err != nil {
					t.Fatal(err)
				}
				if c.tamper != nil {
					c.tamper(req)
				}
				vo := httpsig.VerifyOptions{Now: now, Body: []byte(body), ExpectOwner: agentA}
				if c.verify != nil {
					c.verify(&vo)
				}
				res, err := httpsig.Verify(req, f.keys, vo)
				if c.reason == "" {
					if err != nil || res == nil {
						t.Fatalf("want success, got %v", err)
					}
					return
				}
				var e *httpsig.Error
				if !errors.As(err, &e) {
					t.Fatalf("want *Error %s, got %v", c.reason, err)
				}
				if e.Reason != c.reason {
					t.Fatalf("reason = %s (%s), want %s", e.Reason, e.Detail, c.reason)
				}
				if res != nil {
					t.Fatal("result with an error")
				}
			})
		}
	}
}

// TestAuthorities: VerifyOptions.Authorities are compared with the
// request's @authority case-insensitively, the scheme's default port
// removed from both; a port that is not the default must match.
func TestAuthorities(t *testing.T) {
	for _, tc := range []struct {
		name, url   string
		authorities []string
		ok          bool
	}{
		{"exact", "http://gw.example:8080/orders/42", []string{"gw.example:8080"}, true},
		{"case-insensitive", "http://GW.Example:8080/orders/42", []string{"gw.EXAMPLE:8080"}, true},
		{"http default port in the request", "http://gw.example:80/orders/42", []string{"gw.example"}, true},
		{"http default port in the list", "http://gw.example/orders/42", []string{"gw.example:80"}, true},
		{"https default port in the list", "https://gw.example/orders/42", []string{"gw.example:443"}, true},
		{"https port 80 is not default", "https://gw.example:80/orders/42", []string{"gw.example"}, false},
		{"agtps default port in the request", "agtps://gw.example:4480/orders/42", []string{"gw.example"}, true},
		{"agtp default port in the list", "agtp://127.0.0.1/orders/42", []string{"127.0.0.1:4480"}, true},
		{"agtps port 443 is not default", "agtps://gw.example:443/orders/42", []string{"gw.example"}, false},
		{"other port", "http://gw.example:8081/orders/42", []string{"gw.example:8080"}, false},
		{"port missing from the list", "http://gw.example:8080/orders/42", []string{"gw.example"}, false},
		{"other host", "http://gw-b.example/orders/42", []string{"gw.example", "127.0.0.1:8080"}, false},
		{"IPv6 literal", "http://[::1]:8080/orders/42", []string{"[::1]:8080"}, true},
		{"second entry", "http://127.0.0.1:8080/orders/42", []string{"gw.example", "127.0.0.1:8080"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, httpsig.AlgEd25519)
			req, err := http.NewRequest("FETCH", tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Agent-ID", agentA)
			if err := f.signer.Sign(req, signOpts()); err != nil {
				t.Fatal(err)
			}
			_, err = httpsig.Verify(req, f.keys, httpsig.VerifyOptions{Now: now, Authorities: tc.authorities})
			var e *httpsig.Error
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Authorities %q refused %s: %v", tc.authorities, tc.url, err)
			case !tc.ok && (!errors.As(err, &e) || e.Reason != httpsig.ReasonAuthorityMismatch):
				t.Fatalf("Authorities %q, %s: err = %v, want authority-mismatch", tc.authorities, tc.url, err)
			}
		})
	}
}

// TestAlgParamMismatch: an alg parameter naming the other supported
// algorithm than the key's is signature-invalid at the crypto step.
func TestAlgParamMismatch(t *testing.T) {
	f := newFixture(t, httpsig.AlgEd25519)
	req := newRequest(t)
	if err := f.signer.Sign(req, signOpts()); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Signature-Input", strings.Replace(req.Header.Get("Signature-Input"), `alg="ed25519"`, `alg="ecdsa-p256-sha256"`, 1))
	_, err := httpsig.Verify(req, f.keys, httpsig.VerifyOptions{Now: now, Body: []byte(body)})
	var e *httpsig.Error
	if !errors.As(err, &e) || e.Reason != httpsig.ReasonSignatureInvalid || !strings.Contains(e.Detail, "does not match") {
		t.Fatalf("err = %v", err)
	}
}

// TestReplay: the same signature verifies once through a ReplayCache.
func TestReplay(t *testing.T) {
	for _, alg := range []string{httpsig.AlgEd25519, httpsig.AlgECDSAP256SHA256} {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, alg)
			req := newRequest(t)
			if err := f.signer.Sign(req, signOpts()); err != nil {
				t.Fatal(err)
			}
			cache := httpsig.NewReplayCache(100, func() time.Time { return now })
			vo := httpsig.VerifyOptions{Now: now, Body: []byte(body), Replay: cache}
			if _, err := httpsig.Verify(req, f.keys, vo); err != nil {
				t.Fatal(err)
			}
			_, err := httpsig.Verify(req, f.keys, vo)
			var e *httpsig.Error
			if !errors.As(err, &e) || e.Reason != httpsig.ReasonSignatureReplayed {
				t.Fatalf("second verify: %v, want signature-replayed", err)
			}
			// A fresh signature of the same request is accepted.
			opts := signOpts()
			opts.Nonce = "n-2"
			if err := f.signer.Sign(req, opts); err != nil {
				t.Fatal(err)
			}
			if _, err := httpsig.Verify(req, f.keys, vo); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReplayCache covers expiry and the size bound.
func TestReplayCache(t *testing.T) {
	clock := now
	c := httpsig.NewReplayCache(2, func() time.Time { return clock })
	a, b, d := []byte("a"), []byte("b"), []byte("d")
	if c.Seen(a, now.Add(10*time.Second)) {
		t.Fatal("a new")
	}
	if !c.Seen(a, now.Add(10*time.Second)) {
		t.Fatal("a replayed")
	}
	c.Seen(b, now.Add(100*time.Second))
	c.Seen(d, now.Add(100*time.Second)) // full: drops a (oldest)
	if c.Len() != 2 {
		t.Fatalf("len = %d", c.Len())
	}
	if c.Seen(a, now.Add(10*time.Second)) { // a was dropped; re-recorded, dropping b
		t.Fatal("a should have been dropped")
	}
	clock = now.Add(11 * time.Second) // a expired
	if c.Seen(a, now.Add(10*time.Second)) {
		t.Fatal("expired a is not a replay")
	}
	if !c.Seen(d, now.Add(100*time.Second)) {
		t.Fatal("d replayed")
	}
	if c.Seen([]byte("old"), now) { // already expired: not recorded
		t.Fatal("old")
	}
	if c.Seen([]byte("old"), now) {
		t.Fatal("old recorded")
	}
}

// TestSignMergesLabels keeps other signatures and replaces the same
// label.
func TestSignMergesLabels(t *testing.T) {
	f := newFixture(t, httpsig.AlgEd25519)
	req := newRequest(t)
	for _, label := range []string{"sig1", "proxy", "sig1"} {
		o := signOpts()
		o.Label = label
		if err := f.signer.Sign(req, o); err != nil {
			t.Fatal(err)
		}
	}
	in := req.Header.Get("Signature-Input")
	if !strings.HasPrefix(in, "sig1=(") || !strings.Contains(in, ", proxy=(") || strings.Count(in, "sig1=") != 1 {
		t.Fatalf("Signature-Input = %s", in)
	}
	for _, label := range []string{"sig1", "proxy"} {
		if _, err := httpsig.Verify(req, f.keys, httpsig.VerifyOptions{Label: label, Now: now, Body: []byte(body)}); err != nil {
			t.Fatalf("%s: %v", label, err)
		}
	}
}

// TestSignRefusals covers signer misuse.
func TestSignRefusals(t *testing.T) {
	f := newFixture(t, httpsig.AlgEd25519)
	for _, tc := range []struct {
		name string
		s    *httpsig.Signer
		prep func(*http.Request)
	}{
		{"no key", &httpsig.Signer{KeyID: "k"}, nil},
		{"no keyid", &httpsig.Signer{Key: f.signer.Key}, nil},
		{"alg mismatch", &httpsig.Signer{KeyID: "k", Alg: httpsig.AlgECDSAP256SHA256, Key: f.signer.Key}, nil},
		{"missing agent-id", f.signer, func(r *http.Request) { r.Header.Del("Agent-ID") }},
		{"missing content-digest", f.signer, func(r *http.Request) { r.Header.Del("Content-Digest") }},
		{"bad existing Signature-Input", f.signer, func(r *http.Request) { r.Header.Set("Signature-Input", "(((") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest(t)
			if tc.prep != nil {
				tc.prep(req)
			}
			if err := tc.s.Sign(req, signOpts()); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

// TestDefaultComponents lists the profile's components per request
// shape.
func TestDefaultComponents(t *testing.T) {
	get, _ := http.NewRequest("DISCOVER", "http://gw.example/", nil)
	get.Header.Set("Agent-ID", agentA)
	post := newRequest(t)
	post.Header.Set("Allow-RCNS", "true")
	post.Header.Set("Contract-Synthesized", "syn-1")
	post.Header.Set("Synthesis-Id", "syn-1")
	alias := newRequest(t)
	alias.Header.Set("RCNS-Idempotency-Key", "k-1")
	emptyQ, _ := http.NewRequest("GET", "http://gw.example/x?", http.NoBody)
	for _, tc := range []struct {
		name string
		req  *http.Request
		want string
	}{
		{"no body, no query", get, "@method @authority @path agent-id"},
		{"everything", post, "@method @authority @path @query agent-id content-type content-digest idempotency-key authority-scope allow-rcns contract-synthesized synthesis-id"},
		{"empty query, NoBody", emptyQ, "@method @authority @path @query agent-id"},
		{"both idempotency keys", alias, "@method @authority @path @query agent-id content-type content-digest idempotency-key rcns-idempotency-key authority-scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(httpsig.DefaultComponents(tc.req), " "); got != tc.want {
				t.Fatalf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestSetContentDigest checks the RFC 9530 sha-256 form.
func TestSetContentDigest(t *testing.T) {
	h := http.Header{}
	httpsig.SetContentDigest(h, []byte(`{"hello": "world"}`))
	// RFC 9530 Appendix B.1: sha-256 of {"hello": "world"}.
	if got, want := h.Get("Content-Digest"), "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:"; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

// without returns list minus drop.
func without(list []string, drop string) []string {
	var out []string
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}
