// Package docsnippets reads the fenced code blocks of a Markdown page,
// with the attributes of their info strings, so that tests can check a
// page's snippets for real: ```yaml file=agents/a.yaml is a file to
// write, ```sh run=call a command to run, ```json output=call what it
// prints (docs/quickstart.md; docs/quickstart_test.go and
// integration/quickstart_test.go).
package docsnippets

import (
	"fmt"
	"os"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// Snippet is one fenced code block.
type Snippet struct {
	// Lang is the first word of the info string ("yaml", "sh"), "" when
	// the fence has none.
	Lang string
	// Attrs are the key=value words after it (file=PATH, run=NAME,
	// output=NAME).
	Attrs map[string]string
	// Text is the block's content, every line ending in "\n".
	Text string
}

// Parse returns the fenced code blocks of the Markdown src, in order, as
// goldmark (GitHub-flavoured Markdown) reads them. A word after the
// language that is not key=value, or a key given twice, is an error.
func Parse(src []byte) ([]Snippet, error) {
	doc := goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser().Parse(text.NewReader(src))
	var out []Snippet
	err := ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		fc, ok := n.(*ast.FencedCodeBlock)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		s := Snippet{Attrs: map[string]string{}}
		if fc.Info != nil {
			words := strings.Fields(string(fc.Info.Segment.Value(src)))
			if len(words) > 0 {
				s.Lang = words[0]
			}
			for _, w := range words[min(1, len(words)):] {
				k, v, ok := strings.Cut(w, "=")
				if !ok || k == "" || v == "" {
					return ast.WalkStop, fmt.Errorf("docsnippets: info string word %q is not key=value", w)
				}
				if _, dup := s.Attrs[k]; dup {
					return ast.WalkStop, fmt.Errorf("docsnippets: info string gives %s twice", k)
				}
				s.Attrs[k] = v
			}
		}
		var b strings.Builder
		lines := fc.Lines()
		for i := 0; i < lines.Len(); i++ {
			seg := lines.At(i)
			b.Write(seg.Value(src))
		}
		s.Text = b.String()
		out = append(out, s)
		return ast.WalkContinue, nil
	})
	return out, err
}

// ParseFile is Parse of the file at path.
func ParseFile(path string) ([]Snippet, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(src)
}

// Find returns the one snippet whose attribute key is value, or an error
// when there is none or more than one.
func Find(snips []Snippet, key, value string) (Snippet, error) {
	var found []Snippet
	for _, s := range snips {
		if s.Attrs[key] == value {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return Snippet{}, fmt.Errorf("docsnippets: %d snippets with %s=%s, want one", len(found), key, value)
	}
	return found[0], nil
}

// Files returns the snippets that have a file attribute, by that path.
func Files(snips []Snippet) map[string]string {
	out := map[string]string{}
	for _, s := range snips {
		if p := s.Attrs["file"]; p != "" {
			out[p] = s.Text
		}
	}
	return out
}
