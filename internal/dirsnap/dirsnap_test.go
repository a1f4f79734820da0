package dirsnap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestSameSeesChanges: an untouched tree is reported as nothing; a
// changed, a removed and an added file are each named.
func TestSameSeesChanges(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := Take(t, dir)
	if len(before) != 3 {
		t.Fatalf("snapshot of a directory with two files has %d entries: %v", len(before), before)
	}
	quiet := &recorder{TB: t}
	Same(quiet, "nothing", before, Take(t, dir))
	if len(quiet.errs) != 0 {
		t.Fatalf("an untouched tree reported: %v", quiet.errs)
	}

	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	Same(r, "the step", before, Take(t, dir))
	all := strings.Join(r.errs, "\n")
	for _, want := range []string{"the step changed " + filepath.Join(dir, "a"), "the step changed " + filepath.Join(dir, "b"), "the step created " + filepath.Join(dir, "c")} {
		if !strings.Contains(all, want) {
			t.Errorf("reports lack %q:\n%s", want, all)
		}
	}
}
