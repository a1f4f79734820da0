package docs

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/policy"
)

var updateMethods = flag.Bool("update", false, "rewrite the generated pages (methods.md) from their sources")

// methodsPage is the generated method catalog page.
const methodsPage = "methods.md"

// methodsRegenerate is the command that rewrites methodsPage.
const methodsRegenerate = "go test ./docs/ -run TestMethodsPage -update"

// TestMethodsPage: docs/methods.md is exactly what renderMethods makes
// from the catalog the gateway embeds (policy.DefaultCatalog,
// policy/catalog/agtp-methods-1.0.0.json), so the page cannot drift from
// the catalog; with -update it rewrites the page.
func TestMethodsPage(t *testing.T) {
	want := renderMethods(policy.DefaultCatalog())
	if *updateMethods {
		if err := os.WriteFile(methodsPage, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(methodsPage)
	if err != nil {
		t.Fatalf("%v; make it with: %s", err, methodsRegenerate)
	}
	if string(got) != want {
		t.Fatalf("docs/%s differs from the embedded method catalog; regenerate it with: %s", methodsPage, methodsRegenerate)
	}
	// The 459 and 460 explanations point to this page.
	if !strings.HasSuffix(policy.MethodsDoc, "docs/"+methodsPage) {
		t.Fatalf("policy.MethodsDoc = %q does not name docs/%s", policy.MethodsDoc, methodsPage)
	}
	// Every catalog method is on the page, in its table row.
	for _, name := range policy.DefaultCatalog().Names() {
		if !strings.Contains(want, "\n| `"+name+"` |") {
			t.Fatalf("method %s has no row", name)
		}
	}
}

// renderMethods returns the Markdown page listing cat: the rules that
// refuse a method (459) or a path segment (460), the legacy aliases, the
// methods by category, and every method with its categories.
func renderMethods(cat *policy.Catalog) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# The AGTP method catalog %s\n\n", cat.Version())
	p("<!-- Generated from policy/catalog/agtp-methods-%s.json by `%s`; do not edit by hand. -->\n\n", cat.Version(), methodsRegenerate)
	p("The gateway serves the %d methods of the AGTP-API approved catalog %s\n", cat.Len(), cat.Version())
	p("(spec api-01 §3), as the project ships it (`policy/catalog/`); an operator's\n")
	p("`catalog <path>` replaces it ([configuration](configuration.md)). `DISCOVER /methods`\n")
	p("lists what one server actually serves. Two rules follow from the catalog:\n\n")
	p("* **A method must be in the catalog** (api-01 §3): a request whose method is\n")
	p("  neither a catalog method, a custom method of the server nor an admitted\n")
	p("  legacy verb is `459 method-not-in-catalog`. The %d floor methods are always\n", len(cat.Floor()))
	p("  served: %s.\n", codeList(cat.Floor()))
	p("* **A method name is not a path segment** (api-01 §5, path grammar): a path\n")
	p("  segment equal to a method name (every name below, a custom method, a legacy\n")
	p("  verb, an `alias` source), compared case-insensitively and ignoring `-` and\n")
	p("  `_`, is `460 path-grammar-violation`: `/echo`, `/Echo` and `/e-cho` all clash\n")
	p("  with `ECHO`. Endpoints and recipes with such a path are refused when they load;\n")
	p("  `caddy rcns import-openapi` proposes a rename (`/store/order` → `/store/orders`).\n")
	p("  Name resources with plural nouns (`/loans`, `/members`), not verbs.\n")
	p("  The rule is checked on the request's path before any endpoint is\n")
	p("  looked up (RCNS.md §5.5, §24 item 14), so it holds for a value in a\n")
	p("  template's place too: `FETCH /properties/check-in` is `460` even\n")
	p("  where `/properties/{property_id}` serves and a legacy `GET` of the same\n")
	p("  path works. An API whose ids may be method names (`open`, `read`,\n")
	p("  `check-in`) should take them in a query parameter or the body\n")
	p("  (`FETCH /properties?property_id=check-in`), or map them to ids that\n")
	p("  are not.\n\n")
	p("Legacy HTTP verbs are aliases, refused with `459 legacy-method-not-enabled`\n")
	p("unless the operator admits them (`legacy`): ")
	legacy := cat.LegacyAliases()
	verbs := make([]string, 0, len(legacy))
	for v := range legacy {
		verbs = append(verbs, v)
	}
	sort.Strings(verbs)
	for i, v := range verbs {
		if i > 0 {
			p(", ")
		}
		p("`%s` → `%s`", v, legacy[v])
	}
	p(".\n\n")

	byCat := map[string][]string{}
	for _, name := range cat.Names() {
		info, _ := cat.Lookup(name)
		for _, c := range info.Categories {
			byCat[c] = append(byCat[c], name)
		}
	}
	p("## By category\n\n")
	p("A method can be in more than one category.\n\n")
	for _, c := range cat.Categories() {
		p("* **%s** (%d): %s\n", c, len(byCat[c]), codeList(byCat[c]))
	}
	p("\n## Every method\n\n")
	p("| method | categories | notes |\n|---|---|---|\n")
	for _, name := range cat.Names() {
		info, _ := cat.Lookup(name)
		var notes []string
		if cat.IsFloor(name) {
			notes = append(notes, "floor")
		}
		if w := info.CatalogWarning(); w != "" {
			notes = append(notes, w)
		}
		p("| `%s` | %s | %s |\n", name, strings.Join(info.Categories, ", "), strings.Join(notes, "; "))
	}
	return b.String()
}

// codeList is names in backquotes, comma-separated.
func codeList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return strings.Join(out, ", ")
}
