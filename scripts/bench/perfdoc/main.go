// Command perfdoc writes docs/performance.md from one `make bench` run:
// the raw `go test -bench -benchmem -count N` output (medians per
// benchmark, benchstat-style), the load comparison's report.md and its
// profile summary, through the template scripts/bench/performance.md.tmpl.
// Every number in the document comes from those inputs; a benchmark the
// template names but the run lacks is an error, not a blank cell.
//
//	go run ./scripts/bench/perfdoc -go bin/bench/go-bench.txt -load bin/bench/load \
//	    -medians bin/bench/go-bench-medians.md -out docs/performance.md
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// series is every run of one benchmark: values per unit ("ns/op",
// "B/op", "allocs/op", "cpu-ns/op"...).
type series struct {
	pkg, name string
	vals      map[string][]float64
}

// benchSet is a parsed go test -bench output, benchmarks in first-seen
// order, keyed by "pkg name" (pkg without the module prefix, name
// without "Benchmark" and the -GOMAXPROCS suffix).
type benchSet struct {
	order []*series
	byKey map[string]*series
	cpu   string // the "cpu:" line
}

const modulePrefix = "github.com/caddy-rcns/caddy-rcns/"

func parseBench(in io.Reader) (*benchSet, error) {
	bs := &benchSet{byKey: map[string]*series{}}
	pkg := ""
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	// pending is a benchmark name whose result went to a later line: a
	// log line the benchmark printed to stderr lands after the name go
	// test has already written ("BenchmarkX-2 \t{"level":…}"), and the
	// result follows on a line of its own.
	pending := ""
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); pending != "" && len(f) >= 3 && isCount(f[0]) {
			line = pending + "\t" + line
		}
		pending = ""
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), modulePrefix)
			continue
		}
		if c, ok := strings.CutPrefix(line, "cpu: "); ok {
			bs.cpu = strings.TrimSpace(c)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !isCount(f[1]) {
			pending = f[0]
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		name = strings.TrimPrefix(name, "Benchmark")
		key := pkg + " " + name
		s := bs.byKey[key]
		if s == nil {
			s = &series{pkg: pkg, name: name, vals: map[string][]float64{}}
			bs.byKey[key] = s
			bs.order = append(bs.order, s)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			s.vals[f[i+1]] = append(s.vals[f[i+1]], v)
		}
	}
	return bs, sc.Err()
}

// isCount reports whether s is go test's iteration count (digits).
func isCount(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// med returns the median of unit for pkg/name, or an error naming what
// is missing.
func (bs *benchSet) med(pkg, name, unit string) (float64, error) {
	s := bs.byKey[pkg+" "+name]
	if s == nil {
		return 0, fmt.Errorf("benchmark %s %s is not in the go test output", pkg, name)
	}
	v := s.vals[unit]
	if len(v) == 0 {
		return 0, fmt.Errorf("benchmark %s %s reported no %s", pkg, name, unit)
	}
	return median(v), nil
}

// mediansTable is the whole run as a Markdown table.
func (bs *benchSet) mediansTable() string {
	var b strings.Builder
	b.WriteString("| package | benchmark | ns/op median (min–max) | B/op | allocs/op | runs |\n|---|---|---:|---:|---:|---:|\n")
	for _, s := range bs.order {
		ns := s.vals["ns/op"]
		if len(ns) == 0 {
			continue
		}
		lo, hi := minMax(ns)
		fmt.Fprintf(&b, "| %s | %s | %s (%s–%s) | %s | %s | %d |\n", s.pkg, s.name, num(median(ns)), num(lo), num(hi),
			num(median(s.vals["B/op"])), num(median(s.vals["allocs/op"])), len(ns))
	}
	return b.String()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	n := len(s)
	return (s[n/2-1] + s[n/2]) / 2
}

func minMax(v []float64) (float64, float64) {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// num formats a measurement: thousands separated above 1,000, one or two
// decimals below 100.
func num(v float64) string {
	switch {
	case v >= 1000:
		s := strconv.FormatFloat(v, 'f', 0, 64)
		var out []byte
		for i := range len(s) {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		return string(out)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// doc is the template's data.
type doc struct {
	Date, Command, GoCommand, GoVersion string
	Elapsed                             string // wall time of the whole run, "" when not recorded
	CPU                                 string
	Medians                             string
	LoadReport, Profiles                string
	LoadRan                             bool
}

func readOptional(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func main() {
	var (
		goOut    = flag.String("go", "", "raw `go test -bench -benchmem` output")
		loadDir  = flag.String("load", "", "load comparison results dir (report.md, profiles/summary.md); empty: not run")
		tmplPath = flag.String("template", "scripts/bench/performance.md.tmpl", "document template")
		out      = flag.String("out", "", "document to write (default: stdout)")
		medians  = flag.String("medians", "", "also write the medians table here")
		command  = flag.String("command", "make bench", "the command that produced the inputs, for the document")
		goCmd    = flag.String("go-command", "", "the go test command line, for the document")
		started  = flag.String("started", "", "file holding the run's start as Unix seconds (written by make bench)")
	)
	flag.Parse()
	if *goOut == "" {
		fmt.Fprintln(os.Stderr, "perfdoc: -go is required")
		os.Exit(2)
	}
	if err := run(*goOut, *loadDir, *tmplPath, *out, *medians, *command, *goCmd, *started); err != nil {
		fmt.Fprintln(os.Stderr, "perfdoc:", err)
		os.Exit(1)
	}
}

func run(goOut, loadDir, tmplPath, out, medians, command, goCmd, started string) error {
	f, err := os.Open(goOut)
	if err != nil {
		return err
	}
	bs, err := parseBench(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %v", goOut, err)
	}
	if len(bs.order) == 0 {
		return fmt.Errorf("%s: no benchmark results", goOut)
	}
	if medians != "" {
		if err := os.WriteFile(medians, []byte(bs.mediansTable()), 0o644); err != nil {
			return err
		}
	}
	d := doc{Date: time.Now().UTC().Format("2006-01-02"), Command: command, GoCommand: goCmd,
		GoVersion: runtime.Version(), CPU: bs.cpu, Medians: bs.mediansTable()}
	if started != "" {
		if raw, ok := readOptional(started); ok {
			if sec, err := strconv.ParseInt(raw, 10, 64); err == nil {
				d.Elapsed = time.Since(time.Unix(sec, 0)).Round(time.Second).String()
			}
		}
	}
	if loadDir != "" {
		d.LoadReport, d.LoadRan = readOptional(filepath.Join(loadDir, "report.md"))
		d.Profiles, _ = readOptional(filepath.Join(loadDir, "profiles", "summary.md"))
	}
	get := func(pkg, name, unit string) (float64, error) { return bs.med(pkg, name, unit) }
	funcs := template.FuncMap{
		"list": func(s ...string) []string { return s },
		// ns, bytes, allocs, cpu: the median of one benchmark, formatted.
		"ns":     func(pkg, name string) (string, error) { return fmtOf(get(pkg, name, "ns/op")) },
		"bytes":  func(pkg, name string) (string, error) { return fmtOf(get(pkg, name, "B/op")) },
		"allocs": func(pkg, name string) (string, error) { return fmtOf(get(pkg, name, "allocs/op")) },
		"cpu":    func(pkg, name string) (string, error) { return fmtOf(get(pkg, name, "cpu-ns/op")) },
		// us: a unit's median in µs (ns ÷ 1,000).
		"us": func(pkg, name, unit string) (string, error) {
			v, err := get(pkg, name, unit)
			return num(v / 1000), err
		},
		// ratio: a/b of one unit's medians, two decimals.
		"ratio": func(pkg, a, b, unit string) (string, error) {
			x, y, err := pair(get, pkg, a, b, unit)
			return strconv.FormatFloat(x/y, 'f', 2, 64), err
		},
		// diffus: a − b of one unit's medians, in µs.
		"diffus": func(pkg, a, b, unit string) (string, error) {
			x, y, err := pair(get, pkg, a, b, unit)
			return strconv.FormatFloat((x-y)/1000, 'f', 1, 64), err
		},
	}
	tb, err := os.ReadFile(tmplPath)
	if err != nil {
		return err
	}
	t, err := template.New(filepath.Base(tmplPath)).Funcs(funcs).Option("missingkey=error").Parse(string(tb))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(buf.Bytes())
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// pair returns the medians of unit for benchmarks a and b of pkg.
func pair(get func(pkg, name, unit string) (float64, error), pkg, a, b, unit string) (float64, float64, error) {
	x, err := get(pkg, a, unit)
	if err != nil {
		return 0, 0, err
	}
	y, err := get(pkg, b, unit)
	return x, y, err
}

func fmtOf(v float64, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return num(v), nil
}
