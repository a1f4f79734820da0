package caddymodule

import (
	"os"
	"testing"
)

// TestMain points Caddy's data directory (caddy.AppDataDir: records
// dirs by default, the Redis run-id files) at a temporary directory, so
// the unit tests write nothing under the user's home.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rcns-unit-data-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
