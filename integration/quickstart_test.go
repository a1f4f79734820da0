package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/internal/docsnippets"
)

// TestQuickstart is ../shared/cases/07 item 4, black box: each way of
// docs/quickstart.md (the endpoint written by hand; the OpenAPI import,
// whose command line runs as the page shows it) is set up in an empty
// folder from the page's snippets, `caddy run` starts on the page's
// Caddyfile (its ports moved to free ones, an admin address added) in
// front of a tiny library API, and the page's curl call prints the
// page's answer; an unknown book is the 422 the page describes.
func TestQuickstart(t *testing.T) {
	snips, err := docsnippets.ParseFile(filepath.Join(repoRoot, "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := docsnippets.Files(snips)
	find := func(key, value string) string {
		t.Helper()
		s, err := docsnippets.Find(snips, key, value)
		if err != nil {
			t.Fatal(err)
		}
		return s.Text
	}
	importCmd, call, answer := find("run", "import"), find("run", "call"), find("output", "call")

	library := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/books/b-1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id": "b-1", "title": "Dune", "author": "Frank Herbert"}`)
	}))
	defer library.Close()
	libraryAddr := strings.TrimPrefix(library.URL, "http://")

	// caddy on PATH is the binary under test, as the page's commands say.
	binDir := t.TempDir()
	if err := os.Symlink(caddyBin, filepath.Join(binDir, "caddy")); err != nil {
		t.Fatal(err)
	}
	shell := func(dir, script string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	for _, way := range []struct {
		name     string
		files    []string
		notFound string
	}{
		{"by hand", []string{"agents/library-agent.yaml", "endpoints/fetch-book.yaml", "Caddyfile"}, "book_not_found"},
		{"from OpenAPI", []string{"agents/library-agent.yaml", "library.openapi.yaml", "Caddyfile"}, "not_found"},
	} {
		t.Run(way.name, func(t *testing.T) {
			dir := t.TempDir()
			port := freePort(t)
			for _, f := range way.files {
				text := files[f]
				if f == "Caddyfile" {
					text = strings.ReplaceAll(text, "127.0.0.1:3000", libraryAddr)
					text = strings.ReplaceAll(text, ":8080", fmt.Sprintf(":%d", port))
					text = fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n}\n\n", freePort(t)) + text
				}
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if way.name == "from OpenAPI" {
				if out, err := shell(dir, importCmd); err != nil {
					t.Fatalf("%s: %v\n%s", importCmd, err, out)
				}
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			p := startProc(t, "caddy", dir, []string{
				"XDG_CONFIG_HOME=" + filepath.Join(dir, ".config"),
				"XDG_DATA_HOME=" + filepath.Join(dir, ".data"),
			}, caddyBin, "run", "--config", "Caddyfile", "--adapter", "caddyfile")
			waitServing(t, p, addr, gatewayStartup)

			myCall := strings.ReplaceAll(call, "127.0.0.1:8080", addr)
			out, err := shell(dir, myCall)
			if err != nil || strings.TrimSpace(out) != strings.TrimSpace(answer) {
				t.Fatalf("the page's call answered (%v):\n%s\nthe page shows:\n%s\ncaddy:\n%s", err, out, answer, p.tail(logTailLines))
			}
			out, err = shell(dir, strings.Replace(strings.Replace(myCall, "/books/b-1", "/books/b-404", 1), "curl -s", "curl -s -w ' %{http_code}'", 1))
			if err != nil || !strings.HasSuffix(strings.TrimSpace(out), " 422") || !strings.Contains(out, `"code":"`+way.notFound+`"`) {
				t.Fatalf("an unknown book answered (%v): %s; want 422 with code %s", err, out, way.notFound)
			}
		})
	}
}
