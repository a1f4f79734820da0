package integration

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Operator documents and reloads: recipe variants, document folders,
// config loads through the admin API.

// patternLine is `path_exact: P`, or `path_regex: 'R'` for path "re:R".
func patternLine(path string) string {
	if re, ok := strings.CutPrefix(path, "re:"); ok {
		return "path_regex: '" + re + "'"
	}
	return "path_exact: " + path
}

// recipeVariant writes a copy of the demo's book-room recipe into dir
// under a new name and pattern (method, path; "re:R" for a path_regex), with required_scopes and
// propose replaced, and returns its path.
func recipeVariant(t testing.TB, dir, name, method, path string, scopes []string, propose bool) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "examples/hotel/recipes/book-room.yaml"))
	if err != nil {
		t.Fatalf("read book-room recipe: %v", err)
	}
	s := string(raw)
	for _, rep := range [][2]string{
		{"name: book-room", "name: " + name},
		{"  method: BOOK\n  path_exact: /room", "  method: " + method + "\n  " + patternLine(path)},
		{"required_scopes: [hotel:book]", "required_scopes: [" + strings.Join(scopes, ", ") + "]"},
		{"propose: true", "propose: " + strconv.FormatBool(propose)},
	} {
		if !strings.Contains(s, rep[0]) {
			t.Fatalf("book-room recipe no longer contains %q; update recipeVariant", rep[0])
		}
		s = strings.Replace(s, rep[0], rep[1], 1)
	}
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatalf("write recipe: %v", err)
	}
	return p
}

// writeDoc writes text to dir/name and returns the path.
func writeDoc(t testing.TB, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	return p
}

// copyDocs copies the regular files of src (relative to the repo root)
// into dst, creating it.
func copyDocs(t testing.TB, src, dst string) {
	t.Helper()
	if !filepath.IsAbs(src) {
		src = filepath.Join(repoRoot, src)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatalf("mkdir %s: %v", dst, err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("read %s: %v", src, err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatalf("read %s: %v", e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), raw, 0o644); err != nil {
			t.Fatalf("write %s: %v", e.Name(), err)
		}
	}
}

// adminLoad POSTs a Caddyfile to the gateway's admin /load endpoint and
// returns the admin API's status and body. Cache-Control: must-revalidate
// makes Caddy load it even when it adapts to the running config.
func adminLoad(t testing.TB, g *Gateway, caddyfile string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.AdminURL+"/load", bytes.NewReader([]byte(caddyfile)))
	if err != nil {
		t.Fatalf("new admin request: %v", err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/load: %v", g.AdminURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// Caddy on Linux binds each config's listener with SO_REUSEPORT: until
	// the old config's socket is closed (asynchronously, as its server
	// shuts down), the kernel may queue a new connection on it, and
	// closing it resets that connection. The old server also closes its
	// idle keep-alive connections. Either fails the next AGTP request with
	// EOF or a reset (net/http does not retry methods it does not know to
	// be idempotent). Wait until one listening socket is left, then start
	// every request on a fresh connection.
	waitSingleListener(t, g.Addr)
	testClient.CloseIdleConnections()
	return resp.StatusCode, string(body)
}

// waitSingleListener waits (at most 5 s) until at most one socket
// listens on addr's port, read from /proc/net/tcp and /proc/net/tcp6
// (state 0A, LISTEN). Where /proc cannot be read it waits 200 ms.
func waitSingleListener(t testing.TB, addr string) {
	t.Helper()
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("waitSingleListener: %v", err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("waitSingleListener: port %q: %v", portText, err)
	}
	suffix := fmt.Sprintf(":%04X", port)
	listeners := func() int {
		n, read := 0, false
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			raw, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			read = true
			for _, line := range strings.Split(string(raw), "\n")[1:] {
				fields := strings.Fields(line)
				if len(fields) > 3 && strings.HasSuffix(fields[1], suffix) && fields[3] == "0A" {
					n++
				}
			}
		}
		if !read {
			return -1
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := listeners()
		if n < 0 {
			time.Sleep(200 * time.Millisecond)
			return
		}
		if n <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("waitSingleListener: %d sockets still listen on %s after 5 s", n, addr)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
