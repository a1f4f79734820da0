package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// identity mtls: the client certificate's SPKI names the agent.

func TestIdentityMTLS(t *testing.T) {
	p := idvNewPKI(t)
	idvServerCert(t, p)

	keyA1, keyA2, keyStranger := idvECKey(t), idvECKey(t), idvECKey(t)
	certA1 := p.issue(t, "rcns-demo-agent", keyA1, false, time.Now().Add(-time.Hour))
	certA2 := p.issue(t, "rcns-demo-noscope", keyA2, false, time.Now().Add(-time.Hour))
	certStranger := p.issue(t, "stranger", keyStranger, false, time.Now().Add(-time.Hour))

	a1, a2 := idvDemo("rcns-demo-agent"), idvDemo("rcns-demo-noscope")
	a1.certs, a2.certs = []string{idvSPKI(certA1)}, []string{idvSPKI(certA2)}
	agents := idvWriteAgents(t, a1, a2)

	js := startJSONServer(t, hotelDB)
	hotel := startCountingProxy(t, js.URL)
	g := idvStartTLSGateway(t, p, fill(idvSite,
		"IDENTITY", "mtls", "MODE", "confirm-first", "HOTEL", hotel.URL,
		"AGENTS", agents, "EXTRA", "", "LEGACY", js.URL))

	do := func(t *testing.T, client *http.Client, agent string) *Resp {
		t.Helper()
		return idvSend(t, client, idvBuild(t, g.URL, idvCall{method: "FETCH", path: "/guests/g-1", agent: agent, scope: "hotel:read"}))
	}
	wantGuest := func(t *testing.T, r *Resp) {
		t.Helper()
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if id := str(r.Object(t), "result", "id"); id != "g-1" {
			t.Fatalf("FETCH /guests/g-1 result id = %q:\n%s", id, r)
		}
	}

	t.Run("bound client cert 200", func(t *testing.T) {
		wantGuest(t, do(t, p.client(t, g.Addr, certA1, keyA1), agentA1))
		wantGuest(t, do(t, p.client(t, g.Addr, certA2, keyA2), agentA2))
	})

	t.Run("no client cert 401 certificate-required", func(t *testing.T) {
		before := hotel.Count()
		idvRefused(t, do(t, p.client(t, g.Addr, nil, nil), agentA1), 401, "certificate-required", hotel, before)
	})

	t.Run("cert of another agent 401 certificate-mismatch", func(t *testing.T) {
		before := hotel.Count()
		idvRefused(t, do(t, p.client(t, g.Addr, certA2, keyA2), agentA1), 401, "certificate-mismatch", hotel, before)
	})

	t.Run("unbound cert 401 certificate-unknown", func(t *testing.T) {
		before := hotel.Count()
		idvRefused(t, do(t, p.client(t, g.Addr, certStranger, keyStranger), agentA1), 401, "certificate-unknown", hotel, before)
	})

	t.Run("renewed cert with the same key 200", func(t *testing.T) {
		renewed := p.issue(t, "rcns-demo-agent", keyA1, false, time.Now().Add(-10*time.Minute))
		if renewed.SerialNumber.Cmp(certA1.SerialNumber) == 0 || renewed.NotBefore.Equal(certA1.NotBefore) {
			t.Fatalf("renewal did not change serial/validity")
		}
		if idvSPKI(renewed) != idvSPKI(certA1) {
			t.Fatalf("renewal changed the SPKI")
		}
		wantGuest(t, do(t, p.client(t, g.Addr, renewed, keyA1), agentA1))
	})

	t.Run("legacy GET without cert passes through", func(t *testing.T) {
		before := hotel.Count()
		r := idvSend(t, p.client(t, g.Addr, nil, nil), &idvWire{method: "GET", url: g.URL + "/guests/g-1", header: http.Header{}})
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
}

func TestIdentityMTLSConfigRejected(t *testing.T) {
	p := idvNewPKI(t)
	idvServerCert(t, p)
	cert := p.issue(t, "rcns-demo-agent", idvECKey(t), false, time.Now().Add(-time.Hour))
	a1 := idvDemo("rcns-demo-agent")
	a1.certs = []string{idvSPKI(cert)}
	certless := idvDemo("rcns-demo-noscope")
	agents := idvWriteAgents(t, a1, certless)
	site := fill(idvSite, "IDENTITY", "mtls", "MODE", "confirm-first",
		"HOTEL", "http://127.0.0.1:1", "AGENTS", agents, "EXTRA", "", "LEGACY", "http://127.0.0.1:1")
	path, _, _, _ := idvRenderTLS(t, p, site)
	out, err := idvValidateFile(t, path)
	if err == nil {
		t.Fatalf("caddy validate accepted identity mtls with a certificate-less agent:\n%s", out)
	}
	if !strings.Contains(out, "rcns-demo-noscope.json") {
		t.Errorf("the validate error does not name the agent document rcns-demo-noscope.json:\n%s", out)
	}
	if !strings.Contains(out, "certificates") {
		t.Errorf("the validate error does not mention certificates:\n%s", out)
	}

	// Certificates on every agent: the same TLS site validates.
	certless.certs = []string{idvSPKI(p.issue(t, "rcns-demo-noscope", idvECKey(t), false, time.Now().Add(-time.Hour)))}
	site = fill(idvSite, "IDENTITY", "mtls", "MODE", "confirm-first",
		"HOTEL", "http://127.0.0.1:1", "AGENTS", idvWriteAgents(t, a1, certless), "EXTRA", "", "LEGACY", "http://127.0.0.1:1")
	path, _, _, _ = idvRenderTLS(t, p, site)
	if out, err := idvValidateFile(t, path); err != nil {
		t.Fatalf("caddy validate refused identity mtls with certificates on every agent: %v\n%s", err, out)
	}
}
