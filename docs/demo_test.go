package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemoShowsEachDoor: in each identity mode, the commands
// scripts/demo.sh prints (README "The demo in three requests") show the
// manifest as they show a Tier B call: DISCOVER / and FETCH over the HTTP
// door and the native AGTP door, and over MCP the manifest (resources/read
// of rcns://manifest, the MCP form of DISCOVER /) beside a tools/call.
func TestDemoShowsEachDoor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	// Each mode's commands are the heredoc after its banner line.
	modes := map[string]string{
		"signature": "Every agent request is signed (RFC 9421)",
		"oauth":     "identity oauth: every agent request carries",
		"header":    "identity header: Agent-ID is trusted as sent",
	}
	for mode, banner := range modes {
		t.Run(mode, func(t *testing.T) {
			i := strings.Index(script, banner)
			if i < 0 {
				t.Fatalf("demo.sh has no %q block", banner)
			}
			block, _, ok := strings.Cut(script[i:], "\nMSG\n")
			if !ok {
				t.Fatalf("the %s block does not end in MSG", mode)
			}
			for _, method := range []string{"DISCOVER", "FETCH"} {
				http := regexp.MustCompile(`(?m)^(curl .*-X ` + method + ` .*\$GW/|bin/rcns-agent call .* ` + method + ` \$GW/)`)
				native := regexp.MustCompile(`(?m)^bin/rcns-agent call .* ` + method + ` \$NATIVE/`)
				if !http.MatchString(block) {
					t.Errorf("%s: no %s over the HTTP door", mode, method)
				}
				if !native.MatchString(block) {
					t.Errorf("%s: no %s over the native door (bin/rcns-agent call … %s $NATIVE/…)", mode, method, method)
				}
			}
			for _, mcp := range []string{`"method":"tools/call"`, `"method":"resources/read","params":{"uri":"rcns://manifest"}`} {
				if !regexp.MustCompile(`(?m)^(curl|bin/rcns-agent call) .*\$GW/mcp.*` + regexp.QuoteMeta(mcp)).MatchString(block) {
					t.Errorf("%s: no MCP command with %s", mode, mcp)
				}
			}
		})
	}
}
