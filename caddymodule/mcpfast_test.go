package caddymodule

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestMCPFastPathCaddyfile: the mcp block's fast_path on|off is the
// JSON disable_fast_path (mcpdoor/fastpath.go); anything else is
// refused.
func TestMCPFastPathCaddyfile(t *testing.T) {
	for _, tc := range []struct{ name, arg, want, err string }{
		{"off", "off", `"disable_fast_path":true`, ""},
		{"on", "on", "", ""},
		{"neither", "maybe", "", `fast_path: "maybe" is neither on nor off`},
		{"no argument", "", "", "want exactly one argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := ":8080 {\n\trcns {\n\t\tmcp {\n\t\t\tfast_path " + tc.arg + "\n\t\t}\n\t}\n}\n"
			out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.want != "" && !strings.Contains(string(out), tc.want):
				t.Fatalf("config %s lacks %s", out, tc.want)
			case tc.want == "" && strings.Contains(string(out), "disable_fast_path"):
				t.Fatalf("config %s sets disable_fast_path", out)
			}
		})
	}
}
