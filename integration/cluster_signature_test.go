package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// The signature replay cache on Redis: nodes behind one load balancer
// answer to its name (gw.example, in signature_authorities), so a
// request signed for it is valid on every node, and the cache shared on
// Redis refuses it on the second node it reaches.

const clusterAuthority = "gw.example"

// clusterSignatureReplay: a signed FETCH served by one node is 401
// signature-replayed on the other, which executes nothing; a fresh
// signature is served there (each way round). The nodes run identity
// signature on the same Redis as the suite, under their own key prefix.
func clusterSignatureReplay(t *testing.T, topo *redisTopology) {
	key := idvNewKey(t, httpsig.AlgEd25519)
	a1 := idvDemo("rcns-demo-agent")
	a1.keys = []map[string]any{key.jwk}
	w := startClusterWorld(t, storeBlock(topo.lines, "rcns-sig:"), clusterOpts{
		Identity: "signature", Agents: idvWriteAgents(t, a1), CatchAll: true,
		Extra: "\t\tsignature_authorities " + clusterAuthority + "\n",
	})
	for _, c := range []struct {
		name        string
		first, then *Gateway
	}{{"A then B", w.A, w.B}, {"B then A", w.B, w.A}} {
		t.Run(c.name, func(t *testing.T) {
			s := newClusterSigned(t, key)
			r := s.send(t, c.first)
			wantStatus(t, r, 200)
			if id := str(r.Object(t), "result", "id"); id != "g-1" {
				t.Fatalf("signed FETCH /guests/g-1 result id %q, want g-1:\n%s", id, r)
			}
			before := w.Hotel.Count()
			idvRefused(t, s.send(t, c.then), 401, "signature-replayed", w.Hotel, before)
			// The first node refuses it too (its own replay), and the
			// second serves a fresh signature of the same request.
			idvRefused(t, s.send(t, c.first), 401, "signature-replayed", w.Hotel, before)
			wantStatus(t, newClusterSigned(t, key).send(t, c.then), 200)
		})
	}
}

// clusterSigned is one signed FETCH /guests/g-1 by A1 for
// clusterAuthority, sendable to any node over the suite's door,
// byte-for-byte the same each time.
type clusterSigned struct {
	http   *idvWire      // the HTTP door's request
	native *wire.Request // the native door's request
}

func newClusterSigned(t testing.TB, key *idvKey) *clusterSigned {
	t.Helper()
	c := idvCall{method: "FETCH", path: "/guests/g-1", agent: agentA1, scope: "hotel:read", key: key}
	if suiteDoor != "agtp" {
		return &clusterSigned{http: idvBuild(t, "http://"+clusterAuthority, c)}
	}
	req, err := wire.NewRequest(c.method, c.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Host", clusterAuthority)
	req.Header.Set("Agent-ID", c.agent)
	req.Header.Set("Authority-Scope", c.scope)
	nonce := make([]byte, 16)
	rand.Read(nonce)
	now := time.Now()
	s := &httpsig.Signer{KeyID: key.kid, Alg: key.alg, Key: key.signer}
	if err := s.Sign(req.HTTPRequest("agtp"), httpsig.SignOptions{Created: now, Expires: now.Add(time.Minute),
		Nonce: base64.RawURLEncoding.EncodeToString(nonce)}); err != nil {
		t.Fatal(err)
	}
	return &clusterSigned{native: req}
}

// send sends the request to g: over HTTP with a client that dials g
// whatever the URL's host (the load balancer's forward), or on a fresh
// native connection to g.
func (s *clusterSigned) send(t testing.TB, g *Gateway) *Resp {
	t.Helper()
	if s.native == nil {
		var d net.Dialer
		client := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
			Proxy: nil, DisableCompression: true, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, g.Addr)
			},
		}}
		return idvSend(t, client, s.http)
	}
	c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(requestTimeout))
	r, err := wire.NewClientConn(c).Do(s.native)
	if err != nil {
		t.Fatalf("signed FETCH over agtp to %s: %v", g.AGTPAddr, err)
	}
	return &Resp{Method: s.native.Method, Path: s.native.Target, Status: r.Status, Header: r.Header, Body: r.Body, Reason: r.Reason}
}
