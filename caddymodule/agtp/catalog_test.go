package agtp

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the module root, two levels up from this package.
const repoRoot = "../.."

// goFiles parses the non-test Go files directly in dir.
func goFiles(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fs := token.NewFileSet()
	var out []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// literalReasons returns the string literals given as a Reason field
// (policy.Refusal{Reason: "…"}, agtp.Error{Reason: "…"}) and the
// values of string constants named Reason…/Err… in dirs: the tokens
// those packages put on the wire themselves.
func literalReasons(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{} // token → where
	for _, dir := range dirs {
		for _, f := range goFiles(t, dir) {
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.CallExpr:
					// A refusal helper given the token: refuse("…", …).
					// refuse("…", …) in policy, refuse(400, "…", …) in wire:
					// the first string literal is the token.
					if id, ok := x.Fun.(*ast.Ident); ok && strings.HasPrefix(id.Name, "refuse") {
						for _, a := range x.Args {
							if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
								s, _ := strconv.Unquote(lit.Value)
								out[s] = dir + " " + id.Name
								break
							}
						}
					}
				case *ast.AssignStmt: // e.Reason = "…" (or e.Status, e.Reason = 408, "…")
					for i, l := range x.Lhs {
						if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "Reason" && i < len(x.Rhs) {
							if lit, ok := x.Rhs[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								s, _ := strconv.Unquote(lit.Value)
								out[s] = dir
							}
						}
					}
				case *ast.KeyValueExpr:
					if k, ok := x.Key.(*ast.Ident); ok && k.Name == "Reason" {
						if lit, ok := x.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							out[s] = dir
						}
					}
				case *ast.ValueSpec:
					for i, name := range x.Names {
						if i >= len(x.Values) || !(strings.HasPrefix(name.Name, "Reason") || strings.HasPrefix(name.Name, "Err")) {
							continue
						}
						if lit, ok := x.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							out[s] = dir + " " + name.Name
						}
					}
				}
				return true
			})
		}
	}
	return out
}

// TestCatalogCoversEveryToken: every reason token the policy, recipes
// and httpsig packages send is in the catalog, and caddymodule sends no
// reason literal of its own: it builds every error from the catalog.
func TestCatalogCoversEveryToken(t *testing.T) {
	for tok, where := range literalReasons(t, "policy", "policy/httpsig", "recipes", "caddymodule/agtp/wire", "caddymodule/upstreamauth") {
		if len(Lookup(tok)) == 0 {
			t.Errorf("%s sends reason %q, which is not in the catalog (reasons.go)", where, tok)
		}
	}
	for _, dir := range gatewayDirs {
		if own := literalReasons(t, dir); len(own) > 0 {
			t.Errorf("%s writes reason literals instead of catalog entries: %v", dir, own)
		}
	}
}

// gatewayDirs are the packages that build the gateway's answers from
// the catalog: the Caddy glue (the native door), the engine and the
// HTTP and MCP doors.
var gatewayDirs = []string{"caddymodule", "caddymodule/engine", "caddymodule/httpdoor", "caddymodule/mcpdoor"}

// TestCatalogEntriesUsed: every catalog entry is sent somewhere: named
// as agtp.X in the gateway's packages (gatewayDirs), or its token sent
// by policy, recipes or httpsig. An entry nothing sends is a documented error that cannot
// happen.
func TestCatalogEntriesUsed(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range append([]string{"caddymodule/agtp"}, gatewayDirs...) {
		for _, f := range goFiles(t, dir) {
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.SelectorExpr: // agtp.X, outside this package
					if id, ok := x.X.(*ast.Ident); ok && id.Name == "agtp" {
						used[x.Sel.Name] = true
					}
				}
				return true
			})
			if dir == "caddymodule/agtp" { // X.New(…) inside it, reasons.go aside
				ast.Inspect(f, func(n ast.Node) bool {
					if s, ok := n.(*ast.SelectorExpr); ok {
						if id, ok := s.X.(*ast.Ident); ok && (s.Sel.Name == "New" || s.Sel.Name == "Newf" || s.Sel.Name == "WithFields") {
							used[id.Name] = true
						}
					}
					return true
				})
			}
		}
	}
	sent := literalReasons(t, "policy", "policy/httpsig", "recipes", "caddymodule/agtp/wire", "caddymodule/upstreamauth")
	src, err := os.ReadFile("reasons.go")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "reasons.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				call, ok := vs.Values[i].(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					continue
				}
				tok, _ := strconv.Unquote(call.Args[0].(*ast.BasicLit).Value)
				if !used[name.Name] && sent[tok] == "" {
					t.Errorf("catalog entry %s (%q) is sent nowhere", name.Name, tok)
				}
			}
		}
	}
}

// docRow is one reason row of docs/troubleshooting.md: "| `token` |
// status | …", the status cell holding one status or several ("464
// (gate) / 463 (PROPOSE)").
var docRow = regexp.MustCompile("(?m)^\\| `([a-z0-9_-]+)` \\| ([0-9]{3}[^|]*)\\|")

// TestTroubleshootingMatchesCatalog: docs/troubleshooting.md documents
// every catalog entry with its status, and documents no token the
// catalog does not have.
func TestTroubleshootingMatchesCatalog(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docRow.FindAllStringSubmatch(string(raw), -1) {
		for _, st := range regexp.MustCompile(`[0-9]{3}`).FindAllString(m[2], -1) {
			status, _ := strconv.Atoi(st)
			documented[m[1]+" "+st] = true
			found := false
			for _, r := range Lookup(m[1]) {
				found = found || r.Status == status
			}
			if !found {
				t.Errorf("troubleshooting.md documents %s %d, which the catalog does not have", m[1], status)
			}
		}
	}
	for _, r := range Catalog() {
		if !documented[r.Token+" "+strconv.Itoa(r.Status)] {
			t.Errorf("catalog entry %q (%d) has no row in docs/troubleshooting.md", r.Token, r.Status)
		}
	}
}

// TestCatalogWellFormed: tokens are the spec's style, statuses are
// error statuses, and no (token, status) pair is declared twice.
func TestCatalogWellFormed(t *testing.T) {
	form := regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	seen := map[string]bool{}
	for _, r := range Catalog() {
		key := r.Token + " " + strconv.Itoa(r.Status)
		if seen[key] {
			t.Errorf("%s is declared twice", key)
		}
		seen[key] = true
		if !form.MatchString(r.Token) {
			t.Errorf("token %q is not lower-case letters, digits, - and _", r.Token)
		}
		if r.Status < 262 || r.Status == 263 || r.Status > 599 {
			t.Errorf("%s: status %d is not an error status", r.Token, r.Status)
		}
		if e := r.New("x"); e.Status != r.Status || e.Reason != r.Token || e.Retryable != (r.Retry == Retryable) {
			t.Errorf("%s.New = %+v", r.Token, e)
		}
	}
}
