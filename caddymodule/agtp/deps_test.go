package agtp

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayering holds the package rules of ARCHITECTURE.md "Layout"
// with `go list -deps`: the protocol package every door shares imports
// no Caddy, and recipes does not reach policy/records.
func TestLayering(t *testing.T) {
	for _, tc := range []struct {
		pkg, forbidden string
	}{
		{"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp", "github.com/caddyserver/"},
		{"github.com/caddy-rcns/caddy-rcns/recipes", "github.com/caddy-rcns/caddy-rcns/policy/records"},
		{"github.com/caddy-rcns/caddy-rcns/recipes", "github.com/caddyserver/"},
		{"github.com/caddy-rcns/caddy-rcns/policy", "github.com/caddyserver/"},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed only %v", tc.pkg, deps)
		}
		for _, d := range deps {
			if strings.HasPrefix(d, tc.forbidden) {
				t.Errorf("%s imports %s", tc.pkg, d)
			}
		}
	}
}
