package docs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-rcns/caddy-rcns/caddymodule"
	"github.com/caddy-rcns/caddy-rcns/internal/docsnippets"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/openapi"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// quickstartImport is the import command docs/quickstart.md shows
// (run=import); TestQuickstartSnippets runs it as openapi.Options, and
// integration/quickstart_test.go runs the line itself with the binary.
const quickstartImport = "caddy rcns import-openapi --upstream library --scope library:read --out endpoints library.openapi.yaml\n"

// TestQuickstartSnippets is ../shared/cases/07 item 4: every file of
// docs/quickstart.md (```lang file=PATH) is written to a temp dir and
// checked as the gateway reads it: the agent document against its
// schema, the hand-written endpoint through recipes.Load, the OpenAPI
// document through the import the page shows (its printed table
// compared with the page's) and the result through recipes.Load, and
// the Caddyfile through Caddy's caddyfile adapter. The black-box run
// (the agent call and its answer) is integration/quickstart_test.go.
func TestQuickstartSnippets(t *testing.T) {
	snips, err := docsnippets.ParseFile("quickstart.md")
	if err != nil {
		t.Fatal(err)
	}
	files := docsnippets.Files(snips)
	for _, want := range []string{"agents/library-agent.yaml", "endpoints/fetch-book.yaml", "library.openapi.yaml", "Caddyfile"} {
		if files[want] == "" {
			t.Fatalf("quickstart.md has no ```… file=%s snippet", want)
		}
	}
	for path, text := range files {
		if strings.Contains(text, "...") || strings.Contains(text, "…") {
			t.Errorf("snippet %s is cut with an ellipsis", path)
		}
	}
	dir := t.TempDir()
	write := func(path string) string {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[path]), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	if _, err := schema.LoadFile(write("agents/library-agent.yaml"), schema.KindAgent); err != nil {
		t.Errorf("agent document: %v", err)
	}
	up, err := recipes.NewUpstream("library", "http://127.0.0.1:3000", recipes.UpstreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	upstreams := map[string]*recipes.Upstream{"library": up}
	set, err := recipes.Load([]string{write("endpoints/fetch-book.yaml")}, nil, &policy.MethodPolicy{}, upstreams)
	if err != nil || len(set.Endpoints) != 1 || set.Endpoints[0].Method != "FETCH" {
		t.Errorf("hand-written endpoint: %v", err)
	}

	// The OpenAPI way, as the page shows it.
	run, err := docsnippets.Find(snips, "run", "import")
	if err != nil {
		t.Fatal(err)
	}
	if run.Text != quickstartImport {
		t.Fatalf("the page's import command is %q; this test runs %q: change both", run.Text, quickstartImport)
	}
	spec := write("library.openapi.yaml")
	out := filepath.Join(t.TempDir(), "endpoints")
	var printed bytes.Buffer
	if err := openapi.Run(&printed, spec, out, false, openapi.Options{Upstream: "library", Scopes: []string{"library:read"}}); err != nil {
		t.Fatalf("import: %v", err)
	}
	shown, err := docsnippets.Find(snips, "output", "import")
	if err != nil {
		t.Fatal(err)
	}
	// The page's command writes to "endpoints" from its folder.
	if got := strings.ReplaceAll(printed.String(), out, "endpoints"); got != shown.Text {
		t.Errorf("import prints:\n%s\nthe page shows:\n%s", got, shown.Text)
	}
	set, err = recipes.Load([]string{out}, nil, &policy.MethodPolicy{}, upstreams)
	if err != nil || len(set.Endpoints) != 1 || set.Endpoints[0].Method != "FETCH" {
		t.Errorf("imported endpoint: %v", err)
	}

	got, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(files["Caddyfile"]), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("Caddyfile: %v", err)
	}
	if !strings.Contains(string(got), `"handler":"rcns"`) || !strings.Contains(string(got), `"identity":"header"`) {
		t.Errorf("the Caddyfile adapts without the rcns handler: %s", got)
	}
}
