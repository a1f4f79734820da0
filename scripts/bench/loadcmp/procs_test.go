package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseStatTicks(t *testing.T) {
	// Fields 14 and 15 (utime 1234, stime 567) after a name with spaces
	// and a ')'.
	line := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 567 0 0 20 0 12 0 100 0 0\n"
	for _, tc := range []struct {
		name, line string
		want       int64
		err        string
	}{
		{"name with spaces and parentheses", line, 1801, ""},
		{"no name", "4242 S 1", 0, "no ')'"},
		{"too few fields", "1 (x) S 1 2 3", 0, "fields after the command name"},
		{"not a number", strings.Replace(line, " 1234 ", " x ", 1), 0, "not tick counts"},
	} {
		got, err := parseStatTicks(tc.line)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	if ns, err := parseSchedstat("397313295 1374718 54\n"); err != nil || ns != 397313295 {
		t.Errorf("parseSchedstat = %d, %v; want 397313295", ns, err)
	}
	for _, bad := range []string{"", "1 2", "-5 1 1", "x 1 1"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

// TestCPUSeconds: the ns of every thread count, a thread started in
// between counts whole, and a thread that exited sends the reading to
// the clock ticks of stat, which still hold its time.
func TestCPUSeconds(t *testing.T) {
	a := cpuReading{Tasks: map[int]int64{1: 1_000_000_000, 2: 500_000_000}, Ticks: 150}
	for _, tc := range []struct {
		name    string
		b       cpuReading
		want    float64
		wantSrc string
	}{
		{"same threads", cpuReading{Tasks: map[int]int64{1: 1_250_000_000, 2: 600_000_000}, Ticks: 185}, 0.35, "schedstat"},
		{"a new thread", cpuReading{Tasks: map[int]int64{1: 1_250_000_000, 2: 600_000_000, 3: 50_000_000}, Ticks: 190}, 0.40, "schedstat"},
		{"a thread exited", cpuReading{Tasks: map[int]int64{1: 1_250_000_000}, Ticks: 200}, 0.50, "stat"},
	} {
		got, src := cpuSeconds(a, tc.b, 100)
		if src != tc.wantSrc || got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("%s: %v s from %s, want %v s from %s", tc.name, got, src, tc.want, tc.wantSrc)
		}
	}
}

// TestReadCPU reads a /proc tree laid out as Linux does, and this
// process's own entry.
func TestReadCPU(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("77/stat", "77 (caddy) S 1 77 77 0 -1 0 0 0 0 0 300 45 0 0 20 0 9 0 1 0 0\n")
	write("77/task/77/schedstat", "2000000000 10 5\n")
	write("77/task/80/schedstat", "1450000000 10 5\n")
	r, err := readCPU(root, 77)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ticks != 345 || len(r.Tasks) != 2 || r.Tasks[77] != 2_000_000_000 || r.Tasks[80] != 1_450_000_000 {
		t.Errorf("readCPU = %+v, want ticks 345 and two threads", r)
	}
	write("77/task/81/schedstat", "garbage\n")
	if _, err := readCPU(root, 77); err == nil || !strings.Contains(err.Error(), "task/81/schedstat") {
		t.Errorf("a bad schedstat: err = %v, want one naming it", err)
	}
	if _, err := readCPU(root, 78); err == nil {
		t.Errorf("a missing process: no error")
	}
	self, err := readCPU("/proc", os.Getpid())
	if err != nil || len(self.Tasks) == 0 {
		t.Errorf("readCPU of this process = %+v, %v; want its threads", self, err)
	}
}
