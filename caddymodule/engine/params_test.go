package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBuiltinQueryParamsRead: every string parameter of a built-in's
// target is read from the query too (builtinQueryParams; action, the
// third one left out, is REVOKE's, for operators). audit_id and key
// were left out, so INSPECT /?target=audit&audit_id=… was
// answered "needs audit_id" although one was sent.
func TestBuiltinQueryParamsRead(t *testing.T) {
	te := newTestEngine(t)
	for _, tc := range []struct {
		target             string
		status             int
		reason, explaining string
	}{
		{"/?target=audit&audit_id=nope", 400, "invalid-parameter", "parameter audit_id must be an Audit-ID"},
		{"/?target=idempotency-key&key=abc", 404, "record-not-found", "no record of this Idempotency-Key"},
	} {
		wantError(t, te.serve(t, "INSPECT", tc.target, agentHeader(), ""), tc.status, tc.reason, tc.explaining)
	}
}

// TestBuiltinQueryParamsComplete holds builtinQueryParams to the
// built-ins' code: every parameter a built-in reads with strParam is
// read from the query too, so a new one cannot be left out again (as
// audit_id, key and action were).
func TestBuiltinQueryParamsComplete(t *testing.T) {
	listed := map[string]bool{}
	for _, n := range builtinQueryParams {
		listed[n] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	read := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fs, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 3 {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "strParam" {
				return true
			}
			lit, ok := call.Args[2].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: strParam's name is not a literal", fs.Position(call.Pos()))
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			read++
			if !listed[name] {
				t.Errorf("%s: built-in parameter %q is not in builtinQueryParams (a query value would be ignored)", fs.Position(call.Pos()), name)
			}
			return true
		})
	}
	if read < 8 {
		t.Fatalf("found %d strParam calls; the scan no longer sees the built-ins", read)
	}
}
