package integration

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// configSite is the baseline for config-time tests: the demo documents
// plus {{ENDPOINTS}} / {{RECIPES}} extra paths and {{EXTRA}} rcns lines.
// The upstream is a closed loopback port: `caddy validate` never calls it.
const configSite = `
	rcns {
		identity header
		enabled true
		upstream hotel http://127.0.0.1:{{DEAD}}
		agents examples/hotel/agents
		endpoints examples/hotel/endpoints {{ENDPOINTS}}
		recipes examples/hotel/recipes {{RECIPES}}
{{EXTRA}}
	}
	reverse_proxy 127.0.0.1:{{DEAD}}
`

type configCase struct {
	name      string
	endpoints string   // extra endpoint document paths
	recipes   string   // extra recipe document paths
	extra     string   // extra lines in the rcns block
	env       []string // environment for caddy validate
	// mention: the output must contain at least one of these (the bad
	// document's file name, or the offending Caddyfile value).
	mention []string
}

func (c configCase) site(t testing.TB) string {
	return fill(configSite, "DEAD", strconv.Itoa(freePort(t)),
		"ENDPOINTS", c.endpoints, "RECIPES", c.recipes, "EXTRA", c.extra)
}

const (
	badDir  = "integration/testdata/bad/"
	goodDir = "integration/testdata/good/"
)

// Controls: each differs from a bad case in the one thing that is wrong.
func TestConfigValidControls(t *testing.T) {
	for _, c := range []configCase{
		{name: "demo documents"},
		{name: "demo documents in confirm-first with knobs", extra: "\t\tmode confirm-first\n\t\tmin_trust_tier 1\n\t\tmax_synthesis_depth 10\n\t\tcontract_ttl 1h\n"},
		{name: "recipe control", recipes: goodDir + "recipe-control.yaml"},
		{name: "env header set", endpoints: goodDir + "endpoint-env-header.yaml", env: []string{"RCNS_IT_HOTEL_KEY=k-123"}},
		{name: "remote upstream with insecure_http", endpoints: goodDir + "endpoint-remote.yaml",
			extra: "\t\tupstream remote http://example.invalid {\n\t\t\tinsecure_http\n\t\t}\n"},
		{name: "single alias", extra: "\t\tlegacy GET\n\t\talias GET FETCH\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := caddyValidateEnv(t, c.site(t), c.env)
			if err != nil {
				t.Fatalf("caddy validate failed on a valid config: %v\n%s", err, out)
			}
		})
	}
}

// Method-policy entries that load but can never act (RCNS §5.4 "skipped
// with a warning") are logged at start, naming the entry, so a typo in a
// method name does not pass silently; the config still loads.
func TestConfigMethodPolicyWarnings(t *testing.T) {
	for _, c := range []struct{ name, extra, want string }{
		{"disallow of a method not served", "\t\tdisallow FROBNICATE\n", `disallow[0] \"FROBNICATE\" is not a method of this server`},
		{"redirect to a method not served", "\t\tredirect FETCH /a FROBNICATE /b\n", `redirects[0] to_method \"FROBNICATE\" is not a method of this server`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := caddyValidateEnv(t, configCase{extra: c.extra}.site(t), nil)
			if err != nil {
				t.Fatalf("caddy validate failed: %v\n%s", err, out)
			}
			if !strings.Contains(out, `"msg":"method policy"`) || !strings.Contains(out, c.want) {
				t.Errorf("caddy validate output lacks the method policy warning %q:\n%s", c.want, out)
			}
		})
	}
}

// §24 items 84–87b and the document rules of ARCHITECTURE.md: the load
// fails, and the error names the document file (or the Caddyfile value).
func TestConfigRejected(t *testing.T) {
	cases := []configCase{
		{name: "DISCOVER /patterns-v2", endpoints: badDir + "endpoint-discover-patterns-v2.yaml",
			mention: []string{"endpoint-discover-patterns-v2.yaml"}},
		{name: "DISCOVER /contracts/history", endpoints: badDir + "endpoint-discover-contracts-history.yaml",
			mention: []string{"endpoint-discover-contracts-history.yaml"}},
		{name: "recipe errors lack composition_failed", recipes: badDir + "recipe-missing-composition-failed.yaml",
			mention: []string{"recipe-missing-composition-failed.yaml"}},
		{name: "recipe step names an unknown endpoint", recipes: badDir + "recipe-unknown-step.yaml",
			mention: []string{"recipe-unknown-step.yaml"}},
		{name: "recipe version is a bare number", recipes: badDir + "recipe-numeric-version.yaml",
			mention: []string{"recipe-numeric-version.yaml"}},
		{name: "unresolved ${VAR} header", endpoints: badDir + "endpoint-unset-env-header.yaml",
			mention: []string{"endpoint-unset-env-header.yaml"}},
		{name: "external_service without method", endpoints: badDir + "endpoint-no-method.yaml",
			mention: []string{"endpoint-no-method.yaml"}},
		{name: "errors lack an upstream_* code", endpoints: badDir + "endpoint-missing-upstream-error.yaml",
			mention: []string{"endpoint-missing-upstream-error.yaml"}},
		{name: "error_map names an undeclared error", endpoints: badDir + "endpoint-error-map-unknown.yaml",
			mention: []string{"endpoint-error-map-unknown.yaml"}},
		{name: "http upstream to a non-loopback host", endpoints: goodDir + "endpoint-remote.yaml",
			extra:   "\t\tupstream remote http://example.invalid\n",
			mention: []string{"example.invalid", "remote"}},
		{name: "alias chain", extra: "\t\talias GET FETCH\n\t\talias FETCH QUERY\n",
			mention: []string{"alias", "FETCH"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := caddyValidateEnv(t, c.site(t), c.env)
			if err == nil {
				t.Fatalf("caddy validate accepted the config:\n%s", out)
			}
			if strings.Contains(out, "unrecognized directive") {
				t.Fatalf("the rcns directive is not registered:\n%s", out)
			}
			found := false
			for _, m := range c.mention {
				found = found || strings.Contains(out, m) || strings.Contains(out, filepath.Base(m))
			}
			if !found {
				t.Errorf("the error does not name any of %v:\n%s", c.mention, out)
			}
		})
	}
}
