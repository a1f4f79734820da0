// Command benchmed summarizes `go test -bench -benchmem -count N` output
// as a Markdown table of medians (benchstat-style: the median of the N
// runs, with their range), one row per benchmark in first-seen order.
//
//	go run ./scripts/bench/benchmed go-bench.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

type series struct {
	pkg, name         string
	ns, bytes, allocs []float64
}

func main() {
	var in io.Reader = os.Stdin
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	var order []*series
	byKey := map[string]*series{}
	pkg := ""
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), "github.com/caddy-rcns/caddy-rcns/")
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		key := pkg + " " + name
		s := byKey[key]
		if s == nil {
			s = &series{pkg: pkg, name: strings.TrimPrefix(name, "Benchmark")}
			byKey[key] = s
			order = append(order, s)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = append(s.ns, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "allocs/op":
				s.allocs = append(s.allocs, v)
			}
		}
	}
	fmt.Println("| package | benchmark | ns/op median (min–max) | B/op | allocs/op | runs |")
	fmt.Println("|---|---|---:|---:|---:|---:|")
	for _, s := range order {
		if len(s.ns) == 0 {
			continue
		}
		lo, hi := minMax(s.ns)
		fmt.Printf("| %s | %s | %s (%s–%s) | %s | %s | %d |\n", s.pkg, s.name, num(median(s.ns)), num(lo), num(hi),
			num(median(s.bytes)), num(median(s.allocs)), len(s.ns))
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func minMax(v []float64) (float64, float64) {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
