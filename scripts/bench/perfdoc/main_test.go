package main

import (
	"strings"
	"testing"
)

// TestParseBenchInterleavedLog: a log line a benchmark prints to stderr
// lands after the name go test has written; the result on the next line
// still counts for that benchmark (two of six runs were lost).
func TestParseBenchInterleavedLog(t *testing.T) {
	out := "pkg: github.com/caddy-rcns/caddy-rcns/caddymodule\n" +
		"BenchmarkAttribution/none-2         \t{\"level\":\"warn\",\"msg\":\"no record_keys configured\"}\n" +
		"  300000\t      3449 ns/op\t     1024 B/op\t       4 allocs/op\n" +
		"BenchmarkAttribution/none-2         \t  300000\t      3500 ns/op\t     1024 B/op\t       4 allocs/op\n" +
		"BenchmarkOther-2 \t{\"level\":\"info\"}\n" +
		"PASS\n"
	bs, err := parseBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	s := bs.byKey["caddymodule Attribution/none"]
	if s == nil || len(s.vals["ns/op"]) != 2 || s.vals["ns/op"][0] != 3449 || s.vals["allocs/op"][1] != 4 {
		t.Fatalf("Attribution/none = %+v, want two runs (3449 and 3500 ns/op)", s)
	}
	if bs.byKey["caddymodule Other"] != nil {
		t.Fatalf("a name without a result line became a benchmark: %+v", bs.byKey["caddymodule Other"])
	}
}

// TestMoreLess: a difference is worded by its sign, never "-5.7 µs more
// than"; within 0.5 µs either way it reads "about the same".
func TestMoreLess(t *testing.T) {
	for _, tc := range []struct {
		d     float64
		than  string
		want  string
		wantS int
	}{
		{5.71, "(c)", "5.7 µs more than (c)", 1},
		{-5.71, "(c)", "5.7 µs less than (c)", -1},
		{0.2, "(c)", "about the same as (c) (within 0.5 µs)", 0},
		{-0.49, "(c)", "about the same as (c) (within 0.5 µs)", 0},
		{0, "(c)", "about the same as (c) (within 0.5 µs)", 0},
		{0.5, "(c)", "0.5 µs more than (c)", 1},
		{-0.5, "(c)", "0.5 µs less than (c)", -1},
		{25.04, "", "25.0 µs more", 1},
		{-3, "", "3.0 µs less", -1},
		{0.1, "", "about the same (within 0.5 µs)", 0},
	} {
		if got := moreLess(tc.d, tc.than); got != tc.want {
			t.Errorf("moreLess(%v, %q) = %q, want %q", tc.d, tc.than, got, tc.want)
		}
		if got := signOf(tc.d); got != tc.wantS {
			t.Errorf("signOf(%v) = %d, want %d", tc.d, got, tc.wantS)
		}
	}
}
