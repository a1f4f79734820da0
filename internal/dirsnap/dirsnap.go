// Package dirsnap is a test helper: a snapshot of a directory tree, to
// show that a step (a config load, a gateway that does not own a
// records_dir) wrote nothing there.
package dirsnap

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Take maps every file and directory under dir (dir included) to its
// mode, size, modification time and, for a file, its content. A walk
// or read error fails t.
func Take(t testing.TB, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		s := info.Mode().String() + " " + strconv.FormatInt(info.Size(), 10) + " " + info.ModTime().Format(time.RFC3339Nano)
		if !d.IsDir() {
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s += " " + string(raw)
		}
		snap[p] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// Same reports to t, as errors naming what, every entry of before that
// after changed or lacks and every entry after added.
func Same(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	for p, s := range before {
		if after[p] != s {
			t.Errorf("%s changed %s:\n before %q\n after  %q", what, p, s, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s created %s", what, p)
		}
	}
}
