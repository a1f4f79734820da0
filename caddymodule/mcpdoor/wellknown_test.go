package mcpdoor

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// TestWellKnownOAuthAgree: under identity oauth every answer of the
// door that names the protected-resource metadata names the engine's
// (engine.ResourceMetadataURL, the one URL the door serves it at), and
// that URL answers 200 with the document: the 501 of the
// authorization-server paths (its resource_metadata field and its
// explanation), the 404 of the other metadata paths. Without oauth the
// 501 names the path-suffixed form, which answers 200 too.
func TestWellKnownOAuthAgree(t *testing.T) {
	oauth := func(c *engine.Config) {
		c.Identity = engine.IdentityOAuth
		c.OAuth = &engine.OAuthConfig{Issuer: "http://127.0.0.1:9", Resource: "https://gw.example:8443/agents"}
	}
	for _, tc := range []struct {
		name   string
		adjust []func(*engine.Config)
		want   string
	}{
		{"identity oauth", []func(*engine.Config){oauth}, "https://gw.example:8443/.well-known/oauth-protected-resource/agents"},
		{"identity header", nil, "http://127.0.0.1/.well-known/oauth-protected-resource/mcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngineWith(t, "http://127.0.0.1:9", tc.adjust...)
			d, err := New(e, &Config{Path: DefaultMCPPath})
			if err != nil {
				t.Fatal(err)
			}
			if u := e.ResourceMetadataURL(); u != "" && u != tc.want {
				t.Fatalf("the engine's metadata URL %q, want %q", u, tc.want)
			}
			get := func(path string) (int, map[string]any) {
				r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil)
				r.Host = "127.0.0.1"
				if !d.WellKnown(r.URL.Path) {
					return http.StatusNotFound, nil // not the door's: the next handler's
				}
				w := httptest.NewRecorder()
				d.ServeWellKnown(w, r)
				var body map[string]any
				_ = json.Unmarshal(w.Body.Bytes(), &body)
				return w.Code, body
			}
			for _, path := range []string{wellKnownAuthorization, wellKnownAuthorization + "/mcp", wellKnownOpenID, "/mcp" + wellKnownOpenID} {
				code, body := get(path)
				if code != http.StatusNotImplemented || body["resource_metadata"] != tc.want {
					t.Errorf("GET %s: %d resource_metadata %v, want 501 naming %s", path, code, body["resource_metadata"], tc.want)
				}
			}
			if e.ResourceMetadataURL() != "" {
				code, body := get(wellKnownResource + "/mcp")
				if code != http.StatusNotFound || body["resource_metadata"] != tc.want {
					t.Errorf("GET the path-suffixed form: %d resource_metadata %v, want 404 naming %s", code, body["resource_metadata"], tc.want)
				}
			}
			u, err := url.Parse(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if code, body := get(u.Path); code != http.StatusOK || body["resource"] == nil {
				t.Errorf("GET %s, the URL named: %d %v, want 200 with the document", u.Path, code, body)
			}
		})
	}
}
