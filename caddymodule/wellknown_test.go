package caddymodule

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
)

// mcpTestGateway is testGateway with the MCP door on at /mcp (adjust
// changes the handler before Provision).
func mcpTestGateway(t *testing.T, adjust ...func(*Handler)) *testGateway {
	t.Helper()
	on := func(h *Handler) { h.MCP = &mcpdoor.Config{} }
	return &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, false, "", "", append([]func(*Handler){on}, adjust...)...)}
}

// discoveryRequests are the requests an MCP client's authorization
// discovery sends after a 401 from /mcp (the TypeScript SDK's
// client/auth.js: discoverOAuthProtectedResourceMetadata, path-aware
// then root; discoverAuthorizationServerMetadata at the origin, which
// it takes for the authorization server when the resource metadata
// names none; the RFC 8414 and OpenID forms for a path), and what the
// gateway answers to each with the MCP door on.
var discoveryRequests = []struct {
	name, method, path string
	status             int
	reason             string
}{
	{"resource metadata, path-aware", "GET", "/.well-known/oauth-protected-resource/mcp", 200, ""},
	{"resource metadata, root", "GET", "/.well-known/oauth-protected-resource", 200, ""},
	{"resource metadata, HEAD", "HEAD", "/.well-known/oauth-protected-resource/mcp", 200, ""},
	{"resource metadata, POST", "POST", "/.well-known/oauth-protected-resource", 405, "method-not-allowed"},
	{"authorization server, root", "GET", "/.well-known/oauth-authorization-server", 501, "no-authorization-server"},
	{"OpenID configuration, root", "GET", "/.well-known/openid-configuration", 501, "no-authorization-server"},
	{"authorization server, path-aware", "GET", "/.well-known/oauth-authorization-server/mcp", 501, "no-authorization-server"},
	{"OpenID configuration, path-aware", "GET", "/.well-known/openid-configuration/mcp", 501, "no-authorization-server"},
	{"OpenID configuration, appended", "GET", "/mcp/.well-known/openid-configuration", 501, "no-authorization-server"},
}

// TestMCPWellKnownDiscovery: with the MCP door on, every discovery
// request of an MCP client is answered by the gateway and none reaches
// the legacy API (next); the protected-resource metadata is RFC 9728's
// and names no authorization server; the authorization-server paths
// say there is none and how to identify instead.
func TestMCPWellKnownDiscovery(t *testing.T) {
	g := mcpTestGateway(t)
	hdr := map[string]string{"Accept": "application/json", "MCP-Protocol-Version": "2025-11-25"}
	for _, tc := range discoveryRequests {
		t.Run(tc.name, func(t *testing.T) {
			a := g.serve(t, tc.method, tc.path, hdr, nil, 0)
			if a.status != tc.status {
				t.Fatalf("%s %s: %s, want %d", tc.method, tc.path, a, tc.status)
			}
			if a.header.Get("Access-Control-Allow-Origin") != "*" {
				t.Errorf("no Access-Control-Allow-Origin: *: %v", a.header)
			}
			switch {
			case tc.status == 200 && tc.method == "HEAD":
				if a.raw != "" || a.header.Get("Content-Type") != "application/json" {
					t.Errorf("HEAD: body %q, Content-Type %q", a.raw, a.header.Get("Content-Type"))
				}
			case tc.status == 200:
				if a.header.Get("Content-Type") != "application/json" {
					t.Errorf("Content-Type %q", a.header.Get("Content-Type"))
				}
				if a.str("resource") != "http://127.0.0.1/mcp" {
					t.Errorf("resource %q, want the MCP endpoint's URL: %s", a.str("resource"), a.raw)
				}
				if m, ok := a.body["bearer_methods_supported"].([]any); !ok || len(m) != 0 {
					t.Errorf("bearer_methods_supported %v, want [] (no bearer token is accepted)", a.body["bearer_methods_supported"])
				}
				if _, ok := a.body["authorization_servers"]; ok {
					t.Errorf("authorization_servers present without OAuth: %s", a.raw)
				}
				if a.str("agtp_identity_mode") != "header" || !strings.Contains(a.str("agtp_identity"), "Agent-ID") {
					t.Errorf("identity members: %s", a.raw)
				}
			default:
				wantError(t, a, tc.status, tc.reason, "")
				if a.str("path") != tc.path {
					t.Errorf("error body path %q, want %q", a.str("path"), tc.path)
				}
			}
			if tc.reason == "method-not-allowed" && a.header.Get("Allow") != "GET, HEAD" {
				t.Errorf("405 without Allow: GET, HEAD: %v", a.header)
			}
			if tc.reason == "no-authorization-server" {
				if !strings.Contains(a.str("explanation"), "no OAuth authorization server") || !strings.Contains(a.str("explanation"), "Agent-ID header") ||
					a.str("identity_mode") != "header" || a.str("resource_metadata") != "http://127.0.0.1/.well-known/oauth-protected-resource/mcp" {
					t.Errorf("the refusal does not say what to do instead: %s", a.raw)
				}
			}
		})
	}
	pre := g.serve(t, "OPTIONS", "/.well-known/oauth-authorization-server",
		map[string]string{"Origin": "http://localhost:6274", "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "mcp-protocol-version"}, nil, 0)
	if pre.status != 204 || pre.header.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(pre.header.Get("Access-Control-Allow-Headers"), "MCP-Protocol-Version") {
		t.Errorf("CORS preflight: %d %v", pre.status, pre.header)
	}
	if g.passed != 0 {
		t.Fatalf("%d discovery requests reached the legacy API", g.passed)
	}
	// Paths the gateway does not own still reach the legacy API, /register
	// and the other well-known paths included.
	for _, p := range []string{"/register", "/authorize", "/token", "/.well-known/security.txt", "/.well-known/oauth-protected-resource/other", "/mcp/x"} {
		before := g.passed
		if a := g.serve(t, "GET", p, nil, nil, 0); a.status != http.StatusTeapot || g.passed != before+1 {
			t.Errorf("GET %s: %s, want it passed to the legacy API", p, a)
		}
	}
}

// TestMCPWellKnownDoorOff: without the MCP door the discovery paths are
// the legacy API's, as before.
func TestMCPWellKnownDoorOff(t *testing.T) {
	g := newTestGateway(t)
	for _, tc := range discoveryRequests {
		before := g.passed
		if a := g.serve(t, tc.method, tc.path, nil, nil, 0); a.status != http.StatusTeapot || g.passed != before+1 {
			t.Errorf("%s %s: %s, want it passed to the legacy API", tc.method, tc.path, a)
		}
	}
}

// TestMCPWellKnownOtherPath: the path-aware forms follow the configured
// MCP path, and the metadata names it; TLS makes the URLs https.
func TestMCPWellKnownOtherPath(t *testing.T) {
	g := mcpTestGateway(t, func(h *Handler) { h.MCP.Path = "/agents/mcp" })
	a := g.serve(t, "GET", "/.well-known/oauth-protected-resource/agents/mcp", nil, nil, 0)
	if a.status != 200 || a.str("resource") != "http://127.0.0.1/agents/mcp" {
		t.Fatalf("suffixed metadata: %s", a)
	}
	if a := g.serve(t, "GET", "/.well-known/oauth-protected-resource/mcp", nil, nil, 0); a.status != http.StatusTeapot {
		t.Errorf("/mcp's metadata path with the door at /agents/mcp: %s, want it passed on", a)
	}
	if a := g.serve(t, "GET", "/agents/mcp/.well-known/openid-configuration", nil, nil, 0); a.status != 501 {
		t.Errorf("appended OpenID path: %s", a)
	}
}

// TestMCPChallenge: every 401 of the MCP door carries WWW-Authenticate
// with the AGTP scheme (never Bearer) pointing at the protected-resource
// metadata, in each identity mode; other refusals carry none.
func TestMCPChallenge(t *testing.T) {
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	public := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8080}
	for _, tc := range []struct {
		name, mode string
		local      net.Addr
		hdr        map[string]string
		status     int
		reason     string
	}{
		{"header no Agent-ID", "header", loopback, nil, 401, "agent-unauthenticated"},
		{"header unknown agent", "header", loopback, map[string]string{"Agent-ID": strings.Repeat("a", 64)}, 401, "agent-unauthenticated"},
		{"header off loopback", "header", public, map[string]string{"Agent-ID": benchAgent}, 401, "identity-mode-refused"},
		{"signature unsigned", "signature", public, map[string]string{"Agent-ID": benchAgent}, 401, "signature-missing"},
		{"mtls no certificate", "mtls", public, map[string]string{"Agent-ID": benchAgent}, 401, "certificate-required"},
		{"malformed Agent-ID", "header", loopback, map[string]string{"Agent-ID": "nope"}, 400, "invalid-canonical-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := mcpGateway(t, func(h *Handler) {
				h.Identity = tc.mode
				h.Agents = []string{provenAgents(t)}
			})
			rec := httptest.NewRecorder()
			hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			r := benchRequest(rec, "POST", "/mcp", listMsg, hdr)
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, tc.local))
			r.Host = "gw.example:8443"
			if tc.local == loopback {
				r.Host = "127.0.0.1:8080"
			}
			if err := h.ServeHTTP(rec, r, notFound); err != nil {
				t.Fatal(err)
			}
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), `"reason":"`+tc.reason+`"`) {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tc.status, tc.reason)
			}
			// Spelled as RFC 9110 spells it, as the door writes it.
			var got []string
			for k, v := range rec.Header() {
				if strings.EqualFold(k, "WWW-Authenticate") {
					if k != "WWW-Authenticate" {
						t.Errorf("field spelled %q", k)
					}
					got = v
				}
			}
			if tc.status != 401 {
				if len(got) != 0 {
					t.Errorf("a %d carries WWW-Authenticate %q", tc.status, got)
				}
				return
			}
			want := `AGTP realm="rcns-bench", identity="` + tc.mode + `", resource_metadata="http://` + r.Host + `/.well-known/oauth-protected-resource/mcp"`
			if len(got) != 1 || got[0] != want {
				t.Errorf("WWW-Authenticate %q, want %q", got, want)
			}
		})
	}
}

// provenAgents is an agents directory holding benchAgent with a public
// key (identity signature) and a certificate fingerprint (identity
// mtls).
func provenAgents(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	doc := "agent_id: " + benchAgent + `
name: rcns-bench-agent
owner_id: bench-ops
trust_tier: 1
status: active
scopes: [rcns:negotiate, bench:read]
certificates: [9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08]
keys:
  - {kty: OKP, crv: Ed25519, x: 11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo}
`
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
