package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// identity signature: RFC 9421 requests built through policy/httpsig
// (and once by hand), and what the gateway refuses.

// idvWire is one request exactly as it will be sent.
type idvWire struct {
	method, url string
	header      http.Header
	body        []byte
}

// idvCall describes a signed AGTP request.
type idvCall struct {
	method, path string
	agent, scope string            // Agent-ID and Authority-Scope; "" omits
	extra        map[string]string // more header fields
	body         any               // nil: no body; otherwise JSON-encoded (string/[]byte raw)
	key          *idvKey           // nil: unsigned
	opt          httpsig.SignOptions
}

// idvBuild builds and signs c against base (the gateway URL). Zero
// Created/Expires become now and now+60s; an empty Nonce becomes a random
// one (Ed25519 is deterministic: without a nonce two equal requests in
// the same second carry the same signature, and the gateway rightly
// refuses the second as signature-replayed). A body is sent as
// application/json with its Content-Digest.
func idvBuild(t testing.TB, base string, c idvCall) *idvWire {
	t.Helper()
	var raw []byte
	switch b := c.body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		raw = mustJSON(t, b)
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(c.method, base+c.path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if c.agent != "" {
		req.Header.Set("Agent-ID", c.agent)
	}
	if c.scope != "" {
		req.Header.Set("Authority-Scope", c.scope)
	}
	for k, v := range c.extra {
		req.Header.Set(k, v)
	}
	if raw != nil {
		if req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
		httpsig.SetContentDigest(req.Header, raw)
	}
	if c.key != nil {
		opt := c.opt
		now := time.Now()
		if opt.Created.IsZero() {
			opt.Created = now
		}
		if opt.Expires.IsZero() {
			opt.Expires = opt.Created.Add(60 * time.Second)
		}
		if opt.Nonce == "" {
			n := make([]byte, 16)
			rand.Read(n)
			opt.Nonce = base64.RawURLEncoding.EncodeToString(n)
		}
		s := &httpsig.Signer{KeyID: c.key.kid, Alg: c.key.alg, Key: c.key.signer}
		if err := s.Sign(req, opt); err != nil {
			t.Fatalf("sign %s %s: %v", c.method, c.path, err)
		}
	}
	return &idvWire{method: c.method, url: base + c.path, header: req.Header.Clone(), body: raw}
}

// idvSend sends w with client (testClient when nil).
func idvSend(t testing.TB, client *http.Client, w *idvWire) *Resp {
	t.Helper()
	if client == nil {
		client = testClient
	}
	var rd io.Reader
	if w.body != nil {
		rd = bytes.NewReader(w.body)
	}
	req, err := http.NewRequest(w.method, w.url, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header = w.header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", w.method, w.url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", w.method, w.url, err)
	}
	path := w.url
	if u := req.URL; u != nil {
		path = u.RequestURI()
	}
	return &Resp{Method: w.method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: b,
		TransferEncoding: resp.TransferEncoding}
}

// idvManualSign signs w under sig1 without policy/httpsig: the signature
// base of RFC 9421 §2.5 over components (derived components and plain
// header fields only), Ed25519 over the base (§3.3.6) or ECDSA P-256
// over SHA-256(base) as raw r||s (§3.3.4).
func idvManualSign(t testing.TB, w *idvWire, k *idvKey, components []string, created, expires time.Time) {
	t.Helper()
	req, err := http.NewRequest(w.method, w.url, nil)
	if err != nil {
		t.Fatalf("parse url: %v", err)
	}
	var quoted []string
	var lines []string
	for _, c := range components {
		quoted = append(quoted, strconv.Quote(c))
		var v string
		switch c {
		case "@method":
			v = w.method
		case "@authority":
			v = strings.ToLower(req.URL.Host)
		case "@path":
			v = req.URL.EscapedPath()
		default:
			vals := w.header.Values(c)
			if len(vals) == 0 {
				t.Fatalf("manual sign: %s is not on the request", c)
			}
			v = strings.Join(vals, ", ")
		}
		lines = append(lines, fmt.Sprintf("%q: %s", c, v))
	}
	params := fmt.Sprintf(`(%s);created=%d;expires=%d;keyid=%q;alg=%q`,
		strings.Join(quoted, " "), created.Unix(), expires.Unix(), k.kid, k.alg)
	lines = append(lines, `"@signature-params": `+params)
	base := []byte(strings.Join(lines, "\n"))
	var sig []byte
	switch priv := k.signer.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(priv, base)
	case *ecdsa.PrivateKey:
		digest := sha256.Sum256(base)
		r, s, err := ecdsa.Sign(rand.Reader, priv, digest[:])
		if err != nil {
			t.Fatalf("ecdsa sign: %v", err)
		}
		sig = make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
	default:
		t.Fatalf("manual sign: key type %T", k.signer)
	}
	w.header.Set("Signature-Input", "sig1="+params)
	w.header.Set("Signature", "sig1=:"+base64.StdEncoding.EncodeToString(sig)+":")
}

func TestIdentitySignature(t *testing.T) {
	kA1 := idvNewKey(t, httpsig.AlgEd25519)         // rcns-demo-agent
	kOP := idvNewKey(t, httpsig.AlgECDSAP256SHA256) // rcns-demo-operator
	kA2 := idvNewKey(t, httpsig.AlgECDSAP256SHA256) // rcns-demo-noscope
	kSus := idvNewKey(t, httpsig.AlgEd25519)
	kRet := idvNewKey(t, httpsig.AlgECDSAP256SHA256)
	kStranger := idvNewKey(t, httpsig.AlgEd25519) // in no document

	a1, op, a2 := idvDemo("rcns-demo-agent"), idvDemo("rcns-demo-operator"), idvDemo("rcns-demo-noscope")
	a1.keys, op.keys, a2.keys = []map[string]any{kA1.jwk}, []map[string]any{kOP.jwk}, []map[string]any{kA2.jwk}
	sus := idvAgentDoc{name: "rcns-it-suspended", tier: 1, status: "suspended",
		scopes: []string{"hotel:read"}, keys: []map[string]any{kSus.jwk}}
	ret := idvAgentDoc{name: "rcns-it-retired", tier: 1, status: "retired",
		scopes: []string{"hotel:read"}, keys: []map[string]any{kRet.jwk}}
	agents := idvWriteAgents(t, a1, op, a2, sus, ret)

	js := startJSONServer(t, hotelDB)
	hotel := startCountingProxy(t, js.URL)
	// signature_skew 120s lets created=now-90s, expires=now-30s pass the
	// clock check and reach the expiry check (documented order).
	g := startGateway(t, fill(idvSite,
		"IDENTITY", "signature", "MODE", "optimistic", "HOTEL", hotel.URL,
		"AGENTS", agents, "EXTRA", "\t\tsignature_skew 120s", "LEGACY", js.URL))

	fetch := func(agent string, k *idvKey) idvCall {
		return idvCall{method: "FETCH", path: "/guests/g-1", agent: agent, scope: "hotel:read", key: k}
	}
	wantGuest := func(t *testing.T, r *Resp) {
		t.Helper()
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if id, name := str(r.Object(t), "result", "id"), str(r.Object(t), "result", "name"); id != "g-1" || name != "Ada Lovelace" {
			t.Fatalf("FETCH /guests/g-1 result = %q %q, want g-1 Ada Lovelace:\n%s", id, name, r)
		}
	}
	basic := []string{"@method", "@authority", "@path", "agent-id", "authority-scope"}

	t.Run("ed25519 FETCH 200", func(t *testing.T) {
		c := fetch(agentA1, kA1)
		c.opt.Components = basic
		wantGuest(t, idvSend(t, nil, idvBuild(t, g.URL, c)))
	})

	t.Run("ecdsa-p256 FETCH 200", func(t *testing.T) {
		wantGuest(t, idvSend(t, nil, idvBuild(t, g.URL, fetch(agentOP, kOP))))
		wantGuest(t, idvSend(t, nil, idvBuild(t, g.URL, fetch(agentA2, kA2))))
	})

	t.Run("hand-built RFC 9421 signatures 200", func(t *testing.T) {
		for _, c := range []struct {
			agent string
			k     *idvKey
		}{{agentA1, kA1}, {agentOP, kOP}} {
			w := idvBuild(t, g.URL, fetch(c.agent, nil))
			now := time.Now()
			idvManualSign(t, w, c.k, basic, now, now.Add(30*time.Second))
			wantGuest(t, idvSend(t, nil, w))
		}
	})

	t.Run("signed BOOK with body 263", func(t *testing.T) {
		for i, c := range []struct {
			agent string
			k     *idvKey
		}{{agentA1, kA1}, {agentOP, kOP}} {
			w := idvBuild(t, g.URL, idvCall{method: "BOOK", path: "/room", agent: c.agent, scope: scopeAll,
				extra: map[string]string{"Allow-RCNS": "true"}, body: bookBody(), key: c.k})
			r := idvSend(t, nil, w)
			assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
			if r.Header.Get("Contract-Synthesized") == "" {
				t.Errorf("263 lacks Contract-Synthesized:\n%s", r)
			}
			if n := len(js.Reservations(t)); n != i+1 {
				t.Fatalf("json-server has %d reservations after %d signed BOOKs", n, i+1)
			}
		}
	})

	t.Run("no signature 401 signature-missing", func(t *testing.T) {
		before := hotel.Count()
		r := idvSend(t, nil, idvBuild(t, g.URL, fetch(agentA1, nil)))
		idvRefused(t, r, 401, "signature-missing", hotel, before)
		// An unsigned claim is not the named agent's to chain: the
		// refusal's record names no agent, and A1's next signed answer
		// continues A1's chain from its last signed one.
		prev := idvSend(t, nil, idvBuild(t, g.URL, fetch(agentA1, kA1)))
		wantGuest(t, prev)
		r = idvSend(t, nil, idvBuild(t, g.URL, fetch(agentA1, nil)))
		idvRefused(t, r, 401, "signature-missing", hotel, before+1)
		if v, ok := attribution(t, r)["agent_id"]; ok {
			t.Errorf("the unsigned request's refusal names agent_id %v", v)
		}
		// Nor does a refusal before the identity step (here a body that
		// is not JSON, and a malformed Task-ID) of an unsigned request.
		for _, c := range []idvCall{
			{method: "FETCH", path: "/guests/g-1", agent: agentA1, scope: "hotel:read", body: `{"parameters":`},
			{method: "FETCH", path: "/guests/g-1", agent: agentA1, scope: "hotel:read", extra: map[string]string{"Task-ID": "a b"}},
		} {
			r := idvSend(t, nil, idvBuild(t, g.URL, c))
			assertErrorBody(t, r, 400, "")
			if v, ok := attribution(t, r)["agent_id"]; ok {
				t.Errorf("an unsigned request's early 400 names agent_id %v: %s", v, r)
			}
		}
		next := idvSend(t, nil, idvBuild(t, g.URL, fetch(agentA1, kA1)))
		wantGuest(t, next)
		if got, want := str(attribution(t, next), "previous_audit_id"), prev.Header.Get("Audit-ID"); got != want {
			t.Errorf("A1's chain: previous_audit_id %s, want its last signed answer's Audit-ID %s", got, want)
		}
	})

	t.Run("garbage Signature-Input 401 signature-invalid", func(t *testing.T) {
		before := hotel.Count()
		w := idvBuild(t, g.URL, fetch(agentA1, kA1))
		w.header.Set("Signature-Input", `sig1=(("@method" garbage;;;`)
		idvRefused(t, idvSend(t, nil, w), 401, "signature-invalid", hotel, before)
	})

	t.Run("malformed Agent-ID 400 invalid-canonical-id, signed or not", func(t *testing.T) {
		before := hotel.Count()
		for _, k := range []*idvKey{kA1, nil} {
			idvRefused(t, idvSend(t, nil, idvBuild(t, g.URL, fetch("XYZ", k))), 400, "invalid-canonical-id", hotel, before)
		}
	})

	t.Run("unknown key 401 key-unknown", func(t *testing.T) {
		before := hotel.Count()
		r := idvSend(t, nil, idvBuild(t, g.URL, fetch(agentA1, kStranger)))
		idvRefused(t, r, 401, "key-unknown", hotel, before)
	})

	t.Run("another agent's key 401 key-unknown", func(t *testing.T) {
		before := hotel.Count()
		r := idvSend(t, nil, idvBuild(t, g.URL, fetch(agentA1, kOP)))
		idvRefused(t, r, 401, "key-unknown", hotel, before)
	})

	t.Run("created outside skew 401 signature-invalid", func(t *testing.T) {
		before := hotel.Count()
		c := fetch(agentA1, kA1)
		now := time.Now()
		c.opt.Created, c.opt.Expires = now.Add(-200*time.Second), now.Add(-150*time.Second)
		idvRefused(t, idvSend(t, nil, idvBuild(t, g.URL, c)), 401, "signature-invalid", hotel, before)
	})

	t.Run("expired within skew 401 signature-expired", func(t *testing.T) {
		before := hotel.Count()
		c := fetch(agentA1, kA1)
		now := time.Now()
		c.opt.Created, c.opt.Expires = now.Add(-90*time.Second), now.Add(-30*time.Second)
		idvRefused(t, idvSend(t, nil, idvBuild(t, g.URL, c)), 401, "signature-expired", hotel, before)
	})

	t.Run("authority-scope not covered 401 component-not-covered", func(t *testing.T) {
		before := hotel.Count()
		c := fetch(agentA1, kA1)
		c.opt.Components = []string{"@method", "@authority", "@path", "agent-id"}
		idvRefused(t, idvSend(t, nil, idvBuild(t, g.URL, c)), 401, "component-not-covered", hotel, before)
	})

	// The other documented conditional components: @query with a query,
	// content-digest and content-type with a body, and the AGTP fields
	// whenever present.
	book := func() idvCall {
		return idvCall{method: "BOOK", path: "/room", agent: agentA1, scope: scopeAll,
			extra: map[string]string{"Allow-RCNS": "true"}, body: bookBody(), key: kA1}
	}
	bookAll := []string{"@method", "@authority", "@path", "agent-id", "content-type", "content-digest", "authority-scope", "allow-rcns"}
	without := func(list []string, drop string) []string {
		var out []string
		for _, c := range list {
			if c != drop {
				out = append(out, c)
			}
		}
		return out
	}
	notCovered := []struct {
		name string
		call func() idvCall
	}{
		{"@query", func() idvCall {
			c := fetch(agentA1, kA1)
			c.path = "/guests/g-1?x=1"
			c.opt.Components = basic
			return c
		}},
		{"content-digest", func() idvCall { c := book(); c.opt.Components = without(bookAll, "content-digest"); return c }},
		{"content-type", func() idvCall { c := book(); c.opt.Components = without(bookAll, "content-type"); return c }},
		{"allow-rcns", func() idvCall { c := book(); c.opt.Components = without(bookAll, "allow-rcns"); return c }},
		{"idempotency-key", func() idvCall {
			c := fetch(agentA1, kA1)
			c.extra = map[string]string{"Idempotency-Key": "idv-1"}
			c.opt.Components = basic
			return c
		}},
		// The reference client's alias keys the request as
		// Idempotency-Key does, so it is covered as that one is
		// (cases/04).
		{"rcns-idempotency-key", func() idvCall {
			c := fetch(agentA1, kA1)
			c.extra = map[string]string{"RCNS-Idempotency-Key": "idv-2"}
			c.opt.Components = basic
			return c
		}},
	}
	// The identifiers: Owner-ID decides whom upstream calls act for (a
	// per_owner credential), the others are echoed, recorded and named
	// in upstream assertions: a relay may add or change none of them
	// (issue 31).
	for hdr, v := range map[string]string{"Owner-ID": "hotel-ops", "Request-ID": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
		"Session-ID": "c2Vzc2lvbi1pZC1mb3ItaWRlbnRpdHktdGVzdA", "Task-ID": "task-1"} {
		notCovered = append(notCovered, struct {
			name string
			call func() idvCall
		}{strings.ToLower(hdr), func() idvCall {
			c := fetch(agentA1, kA1)
			c.extra = map[string]string{hdr: v}
			c.opt.Components = basic
			return c
		}})
	}
	for _, nc := range notCovered {
		t.Run(nc.name+" not covered 401 component-not-covered", func(t *testing.T) {
			before := hotel.Count()
			idvRefused(t, idvSend(t, nil, idvBuild(t, g.URL, nc.call())), 401, "component-not-covered", hotel, before)
		})
	}

	// Covered (httpsig.DefaultComponents covers every identifier sent),
	// an Owner-ID is served.
	t.Run("owner-id covered is served", func(t *testing.T) {
		c := fetch(agentA1, kA1)
		c.extra = map[string]string{"Owner-ID": "hotel-ops", "Request-ID": "01ARZ3NDEKTSV4RRFFQ69G5FAW"}
		wantGuest(t, idvSend(t, nil, idvBuild(t, g.URL, c)))
	})

	// Covered (httpsig.DefaultComponents covers it), the alias keys the
	// signed request: the repeat, with a fresh signature, is a replay.
	t.Run("rcns-idempotency-key covered keys the request", func(t *testing.T) {
		c := fetch(agentA1, kA1)
		c.extra = map[string]string{"RCNS-Idempotency-Key": "idv-3"}
		first := idvSend(t, nil, idvBuild(t, g.URL, c))
		wantGuest(t, first)
		before := hotel.Count()
		assertReplay(t, first, idvSend(t, nil, idvBuild(t, g.URL, c)))
		if hotel.Count() != before {
			t.Errorf("the signed repeat reached the hotel upstream")
		}
	})

	t.Run("body changed after signing 401 digest-mismatch", func(t *testing.T) {
		before := hotel.Count()
		reservations := len(js.Reservations(t))
		w := idvBuild(t, g.URL, idvCall{method: "BOOK", path: "/room", agent: agentA1, scope: scopeAll,
			extra: map[string]string{"Allow-RCNS": "true"}, body: bookBody(), key: kA1})
		changed := bookBody()
		changed["parameters"].(map[string]any)["nights"] = 9
		w.body = mustJSON(t, changed)
		idvRefused(t, idvSend(t, nil, w), 401, "digest-mismatch", hotel, before)
		if n := len(js.Reservations(t)); n != reservations {
			t.Errorf("reservations %d → %d after a digest mismatch", reservations, n)
		}
	})

	t.Run("path changed after signing 401 signature-invalid", func(t *testing.T) {
		before := hotel.Count()
		w := idvBuild(t, g.URL, fetch(agentA1, kA1))
		w.url = g.URL + "/guests/g-2"
		idvRefused(t, idvSend(t, nil, w), 401, "signature-invalid", hotel, before)
	})

	t.Run("replayed signature 401 signature-replayed", func(t *testing.T) {
		w := idvBuild(t, g.URL, fetch(agentA1, kA1))
		wantGuest(t, idvSend(t, nil, w))
		before := hotel.Count()
		idvRefused(t, idvSend(t, nil, w), 401, "signature-replayed", hotel, before)
	})

	t.Run("suspended agent 503", func(t *testing.T) {
		before := hotel.Count()
		r := idvSend(t, nil, idvBuild(t, g.URL, fetch(agentID(sus.name), kSus)))
		b := assertErrorBody(t, r, 503, "")
		if reason := str(b, "reason"); !strings.Contains(reason, "suspended") {
			t.Errorf("503 reason %q does not name the suspension", reason)
		}
		if hotel.Count() != before {
			t.Errorf("a suspended agent reached the hotel upstream")
		}
	})

	t.Run("retired agent 410", func(t *testing.T) {
		before := hotel.Count()
		r := idvSend(t, nil, idvBuild(t, g.URL, fetch(agentID(ret.name), kRet)))
		b := assertErrorBody(t, r, 410, "")
		if reason := str(b, "reason"); !strings.Contains(reason, "retired") {
			t.Errorf("410 reason %q does not name the retirement", reason)
		}
		if hotel.Count() != before {
			t.Errorf("a retired agent reached the hotel upstream")
		}
	})

	t.Run("legacy GET passes through", func(t *testing.T) {
		before := hotel.Count()
		r := g.Do(t, "GET", "/guests/g-1", nil, nil)
		_, _, direct := js.Get(t, "/guests/g-1")
		if r.Status != 200 || string(r.Body) != string(direct) {
			t.Fatalf("plain GET /guests/g-1 through the gateway:\n%s\nwant json-server's %s", r, direct)
		}
		if r.Header.Get("Attribution-Record") != "" {
			t.Errorf("a pass-through answer carries an Attribution-Record:\n%s", r)
		}
		if hotel.Count() != before {
			t.Errorf("the legacy GET went through rcns to the hotel upstream")
		}
	})

	t.Run("anonymous DISCOVER returns the manifest", func(t *testing.T) {
		r := g.Do(t, "DISCOVER", "/", nil, nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/vnd.agtp.manifest+json") {
			t.Errorf("anonymous DISCOVER / Content-Type %q, want the manifest's application/vnd.agtp.manifest+json", ct)
		}
		if eps, _ := r.Object(t)["endpoints"].([]any); len(eps) == 0 {
			t.Fatalf("anonymous DISCOVER / lists no endpoints:\n%s", r)
		}
	})
}

// idvCatchAllGateway runs the site siteFor(port) returns in a catch-all
// site (http://:PORT, as in Caddyfile.example): every Host is served, as
// on a gateway that answers several names. It returns the gateway and a
// client that sends every request to it whatever the URL's host, so a
// request can carry the Host of another server.
func idvCatchAllGateway(t testing.TB, siteFor func(port int) string) (*Gateway, *http.Client) {
	t.Helper()
	port, admin := freePort(t), freePort(t)
	text := fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tpersist_config off\n}\n\nhttp://:%d {\n\tbind 127.0.0.1\n\tlog {\n\t\toutput stderr\n\t}\n%s\n}\n",
		admin, port, siteFor(port))
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatalf("write Caddyfile: %v", err)
	}
	g := startGatewayFile(t, path, fmt.Sprintf("127.0.0.1:%d", port), nil)
	var d net.Dialer
	client := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		Proxy: nil, DisableCompression: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, g.Addr)
		},
	}}
	t.Cleanup(client.CloseIdleConnections)
	return g, client
}

// TestIdentitySignatureAuthorities: a signature covers @authority, the
// host the agent signed the request for. With signature_authorities the
// gateway accepts only the listed names (case-insensitive, the default
// port optional), so a request the agent signed for another server that
// trusts the same key cannot be replayed here under that server's Host;
// without the knob such a request is still accepted (compatibility) and
// the gateway warns at start.
func TestIdentitySignatureAuthorities(t *testing.T) {
	k := idvNewKey(t, httpsig.AlgEd25519)
	a1 := idvDemo("rcns-demo-agent")
	a1.keys = []map[string]any{k.jwk}
	agents := idvWriteAgents(t, a1)
	js := startJSONServer(t, hotelDB)
	hotel := startCountingProxy(t, js.URL)
	site := func(extra string) string {
		return fill(idvSite, "IDENTITY", "signature", "MODE", "optimistic", "HOTEL", hotel.URL,
			"AGENTS", agents, "EXTRA", extra, "LEGACY", js.URL)
	}
	// fetch is a signed FETCH /guests/g-1 for the server at base.
	fetch := func(base string) *idvWire {
		return idvBuild(t, base, idvCall{method: "FETCH", path: "/guests/g-1", agent: agentA1, scope: "hotel:read", key: k})
	}
	wantGuest := func(t *testing.T, r *Resp) {
		t.Helper()
		wantStatus(t, r, 200)
		if id := str(r.Object(t), "result", "id"); id != "g-1" {
			t.Fatalf("FETCH /guests/g-1 result id = %q, want g-1:\n%s", id, r)
		}
	}
	const warning = "identity signature without signature_authorities"

	t.Run("listed", func(t *testing.T) {
		g, client := idvCatchAllGateway(t, func(port int) string {
			return site(fmt.Sprintf("\t\tsignature_authorities gw-a.example 127.0.0.1:%d", port))
		})
		if strings.Contains(g.Output(), warning) {
			t.Errorf("signature_authorities is set, yet the gateway warns:\n%s", g.Output())
		}
		for _, base := range []string{g.URL, "http://gw-a.example", "http://GW-A.Example:80"} {
			wantGuest(t, idvSend(t, client, fetch(base)))
		}
		for _, base := range []string{"http://gw-b.example", "http://gw-a.example:8080", "http://localhost:" + strings.Split(g.Addr, ":")[1]} {
			before := hotel.Count()
			r := idvSend(t, client, fetch(base))
			idvRefused(t, r, 401, "authority-mismatch", hotel, before)
			if e := str(r.Object(t), "explanation"); !strings.Contains(e, strings.ToLower(strings.TrimPrefix(base, "http://"))) {
				t.Errorf("the explanation %q does not name the signed authority of %s", e, base)
			}
		}
	})

	t.Run("set outside signature mode warns", func(t *testing.T) {
		g, _ := idvCatchAllGateway(t, func(int) string {
			return fill(idvSite, "IDENTITY", "header", "MODE", "optimistic", "HOTEL", hotel.URL,
				"AGENTS", agents, "EXTRA", "\t\tsignature_authorities gw-a.example", "LEGACY", js.URL)
		})
		waitFor(t, 5*time.Second, 50*time.Millisecond, "the no-effect warning", func() bool {
			return strings.Contains(g.Output(), "signature_authorities has no effect")
		})
	})

	t.Run("unset accepts any authority and warns", func(t *testing.T) {
		g, client := idvCatchAllGateway(t, func(int) string { return site("") })
		waitFor(t, 5*time.Second, 50*time.Millisecond, "the signature_authorities warning", func() bool {
			return strings.Contains(g.Output(), warning)
		})
		// What the knob prevents: a request the agent signed for gw-b, a
		// server that trusts the same key, is served here once.
		w := fetch("http://gw-b.example")
		wantGuest(t, idvSend(t, client, w))
		idvRefused(t, idvSend(t, client, w), 401, "signature-replayed", hotel, hotel.Count())
	})
}

func TestIdentitySignatureConfigRejected(t *testing.T) {
	k := idvNewKey(t, httpsig.AlgEd25519)
	a1 := idvDemo("rcns-demo-agent")
	a1.keys = []map[string]any{k.jwk}
	keyless := idvDemo("rcns-demo-noscope") // no keys
	agents := idvWriteAgents(t, a1, keyless)
	site := fill(idvSite, "IDENTITY", "signature", "MODE", "confirm-first",
		"HOTEL", "http://127.0.0.1:1", "AGENTS", agents, "EXTRA", "", "LEGACY", "http://127.0.0.1:1")
	out, err := caddyValidate(t, site)
	if err == nil {
		t.Fatalf("caddy validate accepted identity signature with a keyless agent:\n%s", out)
	}
	if !strings.Contains(out, "rcns-demo-noscope.json") {
		t.Errorf("the validate error does not name the agent document rcns-demo-noscope.json:\n%s", out)
	}
	if !strings.Contains(out, "keys") {
		t.Errorf("the validate error does not mention keys:\n%s", out)
	}

	// The same directory with keys everywhere validates.
	keyless.keys = []map[string]any{idvNewKey(t, httpsig.AlgECDSAP256SHA256).jwk}
	site = fill(idvSite, "IDENTITY", "signature", "MODE", "confirm-first",
		"HOTEL", "http://127.0.0.1:1", "AGENTS", idvWriteAgents(t, a1, keyless), "EXTRA", "", "LEGACY", "http://127.0.0.1:1")
	if out, err := caddyValidate(t, site); err != nil {
		t.Fatalf("caddy validate refused identity signature with keys on every agent: %v\n%s", err, out)
	}
}
