package agtp

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayering holds the package rules of ARCHITECTURE.md "Layout"
// (docs/architecture.md "The house") with `go list -deps`: the protocol
// package every door shares, the engine and the doors import no Caddy;
// the engine's tests run without Caddy too; the engine reaches no door;
// and recipes does not reach policy/records.
func TestLayering(t *testing.T) {
	const (
		mod    = "github.com/caddy-rcns/caddy-rcns/"
		caddy  = "github.com/caddyserver/"
		engine = mod + "caddymodule/engine"
	)
	for _, tc := range []struct {
		pkg       string
		test      bool     // the package with its tests' imports
		forbidden []string // import path prefixes; a trailing "$" is an exact path
	}{
		{pkg: mod + "caddymodule/agtp", forbidden: []string{caddy}},
		{pkg: engine, forbidden: []string{caddy, mod + "caddymodule/httpdoor", mod + "caddymodule/mcpdoor", mod + "caddymodule$"}},
		{pkg: engine, test: true, forbidden: []string{caddy}},
		{pkg: mod + "caddymodule/httpdoor", forbidden: []string{caddy, mod + "caddymodule/mcpdoor"}},
		{pkg: mod + "caddymodule/mcpdoor", forbidden: []string{caddy}},
		{pkg: mod + "recipes", forbidden: []string{mod + "policy/records", caddy}},
		{pkg: mod + "policy", forbidden: []string{caddy}},
	} {
		args := []string{"list", "-deps"}
		if tc.test {
			args = append(args, "-test")
		}
		out, err := exec.Command("go", append(args, tc.pkg)...).Output()
		if err != nil {
			t.Fatalf("go %s %s: %v", strings.Join(args, " "), tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed only %v", tc.pkg, deps)
		}
		for _, d := range deps {
			for _, f := range tc.forbidden {
				if exact, ok := strings.CutSuffix(f, "$"); ok && d == exact || !ok && strings.HasPrefix(d, f) {
					t.Errorf("%s (tests %v) imports %s", tc.pkg, tc.test, d)
				}
			}
		}
	}
}
