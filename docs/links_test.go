// Package docs holds no code: its tests check that the project's Markdown
// pages link only to files and headings that exist, so a page split or a
// renamed heading cannot leave a dead link behind, and that every code
// fence is closed on a line of its own.
package docs

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// pages are the Markdown files checked, relative to the repository root.
var pages = []string{"../README.md", "*.md", "../docker/*.md", "../scripts/bench/*.md", "../examples/*.md", "../examples/*/*.md"}

// TestLinks parses every page with goldmark (GitHub-flavoured Markdown)
// and checks each relative link: the file it names exists, and a
// #fragment names a heading of that page, by GitHub's anchor rule
// (lower case, punctuation dropped, spaces to "-", "-1", "-2" for
// repeats).
func TestLinks(t *testing.T) {
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	var files []string
	for _, p := range pages {
		m, err := filepath.Glob(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d pages (%v): the globs are wrong", len(files), files)
	}
	type page struct {
		anchors map[string]bool
		links   []string
	}
	parsed := map[string]*page{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pg := &page{anchors: map[string]bool{}}
		doc := md.Parser().Parse(text.NewReader(src))
		err = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			if !entering {
				return ast.WalkContinue, nil
			}
			switch n := n.(type) {
			case *ast.Heading:
				base := githubAnchor(plainText(n, src))
				id := base
				for i := 1; pg.anchors[id]; i++ {
					id = base + "-" + strconv.Itoa(i)
				}
				pg.anchors[id] = true
			case *ast.Link:
				pg.links = append(pg.links, string(n.Destination))
			}
			return ast.WalkContinue, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		parsed[filepath.Clean(f)] = pg
	}
	checked := 0
	for f, pg := range parsed {
		for _, dest := range pg.links {
			if strings.Contains(dest, "://") || strings.HasPrefix(dest, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(dest, "#")
			target := f
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(f), path))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: link %q: no such file %s", f, dest, target)
					continue
				}
			}
			checked++
			if frag == "" {
				continue
			}
			tp, ok := parsed[target]
			if !ok {
				continue // a fragment into a file that is not a checked page (source lines)
			}
			if !tp.anchors[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", f, dest, target, frag)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d relative links: the link walk is broken", checked)
	}
}

// plainText is the text of a heading as GitHub renders it: inline code
// included, markup dropped.
func plainText(n ast.Node, src []byte) string {
	var b bytes.Buffer
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

var anchorDrop = regexp.MustCompile(`[^\p{L}\p{N}\p{M} _-]`)

// githubAnchor is GitHub's heading anchor: lower case, every character
// that is not a letter, digit, space, "_" or "-" dropped, spaces to "-".
func githubAnchor(heading string) string {
	s := anchorDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), "")
	return strings.ReplaceAll(s, " ", "-")
}

func TestGitHubAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"The `rcns` directive":                     "the-rcns-directive",
		"8. MCP":                                   "8-mcp",
		"Restart quarantine (Redis lost claims)":   "restart-quarantine-redis-lost-claims",
		"jq mappings: time, not memory":            "jq-mappings-time-not-memory",
		"The native AGTP/1.0 door (`agtp` option)": "the-native-agtp10-door-agtp-option",
	} {
		if got := githubAnchor(in); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", in, got, want)
		}
	}
}

// fenceLine is a line a code fence may be: ``` and an optional info
// word (a language), then only key=value words (the snippet attributes
// of internal/docsnippets: file=PATH, run=NAME, output=NAME).
var fenceLine = regexp.MustCompile("^```([A-Za-z0-9_+-]+( [a-z]+=[^ `]+)*)?$")

// TestFences: every code fence of the pages is a line of its own
// (text after a closing fence leaves the block open, and the rest of
// the page renders as code), and fences pair up.
func TestFences(t *testing.T) {
	var files []string
	for _, p := range pages {
		m, _ := filepath.Glob(p)
		files = append(files, m...)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
				continue
			}
			n++
			if !fenceLine.MatchString(strings.TrimLeft(line, " ")) {
				t.Errorf("%s:%d: %q: a code fence is ``` and an optional language (then only key=value attributes), alone on its line", f, i+1, line)
			}
		}
		if n%2 != 0 {
			t.Errorf("%s: %d code fences: one is not closed", f, n)
		}
	}
}
