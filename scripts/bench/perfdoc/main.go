// Command perfdoc writes docs/performance.md from one `make bench` run:
// the raw `go test -bench -benchmem -count N` output (medians per
// benchmark, benchstat-style), the load comparison's report.md and its
// profile summary, through the template scripts/bench/performance.md.tmpl.
// Every number the template renders comes from those inputs (the
// template's prose also quotes a few by-hand measurements, each named
// with its command, date and commit); a benchmark the template names but
// the run lacks is an error, not a blank cell.
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
	"math"
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
	// Summary is the load report's targets table without its
	// "measured" column (targetSummary), "" when the report has none.
	Summary string
}

// targetsHeader is the header row of the load report's targets table
// (scripts/bench/loadcmp, report.go).
const targetsHeader = "| target | measured | value | limit | verdict |"

// targetSummary returns the targets table of a load report (markdown)
// as a shorter table of target, value, limit and verdict, for the top
// of the document; "" when the report holds no targets table. A row
// whose cells do not split into the header's five is left out rather
// than shown shifted.
func targetSummary(report string) string {
	lines := strings.Split(report, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == targetsHeader {
			start = i + 2 // past the header and its |---| line
			break
		}
	}
	if start < 0 || start > len(lines) {
		return ""
	}
	var b strings.Builder
	for _, l := range lines[start:] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) != 5 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| target | value | limit | verdict |\n|---|---:|---:|---|\n")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.TrimSpace(cells[0]), strings.TrimSpace(cells[2]),
			strings.TrimSpace(cells[3]), strings.TrimSpace(cells[4]))
	}
	return strings.TrimSuffix(b.String(), "\n")
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
		d.Summary = targetSummary(d.LoadReport)
		d.Profiles, _ = readOptional(filepath.Join(loadDir, "profiles", "summary.md"))
	}
	tb, err := os.ReadFile(tmplPath)
	if err != nil {
		return err
	}
	buf, err := render(filepath.Base(tmplPath), string(tb), d, bs)
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(buf)
		return err
	}
	return os.WriteFile(out, buf, 0o644)
}

// source gives the template every run of one benchmark's unit; a
// benchSet is one, the tests give fixtures.
type source interface {
	runs(pkg, name, unit string) ([]float64, error)
}

// runs returns every run's value of unit for pkg/name, or an error
// naming what is missing.
func (bs *benchSet) runs(pkg, name, unit string) ([]float64, error) {
	s := bs.byKey[pkg+" "+name]
	if s == nil {
		return nil, fmt.Errorf("benchmark %s %s is not in the go test output", pkg, name)
	}
	v := s.vals[unit]
	if len(v) == 0 {
		return nil, fmt.Errorf("benchmark %s %s reported no %s", pkg, name, unit)
	}
	return v, nil
}

// render executes the document template text with d and the template
// functions over src.
func render(name, text string, d doc, src source) ([]byte, error) {
	t, err := template.New(name).Funcs(funcs(src)).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sameWithin is how close, in µs, two medians must be to read as "about
// the same" in prose rather than as more or less.
const sameWithin = 0.5

// signOf is 1 when d (µs) is at least sameWithin above zero, -1 when it
// is at least sameWithin below, else 0.
func signOf(d float64) int {
	switch {
	case d >= sameWithin:
		return 1
	case d <= -sameWithin:
		return -1
	}
	return 0
}

// moreLess words a difference d in µs by its sign, for prose: "5.7 µs
// more than X" / "5.7 µs less than X" / "about the same as X (within
// 0.5 µs)"; without X, "5.7 µs more" / "5.7 µs less" / "about the same
// (within 0.5 µs)". A negative difference never reads "-5.7 µs more".
func moreLess(d float64, than string) string {
	abs := strconv.FormatFloat(math.Abs(d), 'f', 1, 64)
	word := ""
	switch signOf(d) {
	case 1:
		word = abs + " µs more"
	case -1:
		word = abs + " µs less"
	default:
		if than == "" {
			return "about the same (within " + strconv.FormatFloat(sameWithin, 'f', 1, 64) + " µs)"
		}
		return "about the same as " + than + " (within " + strconv.FormatFloat(sameWithin, 'f', 1, 64) + " µs)"
	}
	if than == "" {
		return word
	}
	return word + " than " + than
}

func funcs(src source) template.FuncMap {
	get := func(pkg, name, unit string) (float64, error) {
		v, err := src.runs(pkg, name, unit)
		return median(v), err
	}
	// diff is a − b of one unit's medians, in µs.
	diff := func(pkg, a, b, unit string) (float64, error) {
		x, y, err := pair(get, pkg, a, b, unit)
		return (x - y) / 1000, err
	}
	return template.FuncMap{
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
		// rangeus: the lowest and highest run of a unit, in µs ("L–H").
		"rangeus": func(pkg, name, unit string) (string, error) {
			v, err := src.runs(pkg, name, unit)
			if err != nil {
				return "", err
			}
			lo, hi := minMax(v)
			return num(lo/1000) + "–" + num(hi/1000), nil
		},
		// ratio: a/b of one unit's medians, two decimals.
		"ratio": func(pkg, a, b, unit string) (string, error) {
			x, y, err := pair(get, pkg, a, b, unit)
			return strconv.FormatFloat(x/y, 'f', 2, 64), err
		},
		// diffus: a − b of one unit's medians, in µs, signed: for tables
		// and for "a − b" expressions, never before "more than" (use than).
		"diffus": func(pkg, a, b, unit string) (string, error) {
			v, err := diff(pkg, a, b, unit)
			return strconv.FormatFloat(v, 'f', 1, 64), err
		},
		// than: a − b of one unit's medians worded by its sign, "5.7 µs
		// more than X", "5.7 µs less than X" or "about the same as X
		// (within 0.5 µs)"; an empty X drops "than X".
		"than": func(pkg, a, b, unit, x string) (string, error) {
			v, err := diff(pkg, a, b, unit)
			return moreLess(v, x), err
		},
		// cmpus: the sign of a − b of one unit's medians (1, -1, or 0
		// within 0.5 µs), for prose that explains a difference only
		// where it has that sign: {{if eq (cmpus …) 1}}.
		"cmpus": func(pkg, a, b, unit string) (int, error) {
			v, err := diff(pkg, a, b, unit)
			return signOf(v), err
		},
	}
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
