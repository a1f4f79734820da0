package integration

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestHTTPOnlyListNamesTests: the Makefile's IT_HTTP_ONLY, the tests the
// native-door pass leaves out because they send no AGTP request over
// the door under test, names only tests of this package, each once, so
// a rename cannot drop a test from the second pass silently or leave a
// stale name behind.
func TestHTTPOnlyListNamesTests(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IT_HTTP_ONLY := (.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no IT_HTTP_ONLY line")
	}
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f.Name(), "_test.go") {
			b, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(strings.TrimSpace(string(m[1])), "|") {
		if seen[name] {
			t.Errorf("IT_HTTP_ONLY names %s twice", name)
		}
		seen[name] = true
		if !strings.Contains(src.String(), "\nfunc "+name+"(t *testing.T)") {
			t.Errorf("IT_HTTP_ONLY names %s, which is no test of this package", name)
		}
	}
}
