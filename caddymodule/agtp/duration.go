package agtp

import (
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DurationForms names the accepted requested_duration forms in refusals.
const DurationForms = "a Go duration (30m, 1h30m, 1.5h), whole days (7d), or an ISO 8601 duration in weeks (P2W) or days, hours, minutes and seconds (P1DT2H, PT90M, PT1.5S; a fraction on the last part only; no years or months, whose length varies)"

// MinRequestedDuration is the shortest requested_duration PROPOSE
// accepts: contract times are whole seconds (issued_at, expires_at), so
// a shorter grant would be expired when issued, yet spend the rcns
// budget.
const MinRequestedDuration = time.Second

// maxDuration is the longest time.Duration: a requested_duration beyond
// it is read as maxDuration (and then bounded by contract_ttl like any
// long request), never wrapped around.
const maxDuration = time.Duration(math.MaxInt64)

// ParseRequestedDuration parses a requested_duration in one of the
// forms above. A value too large for time.Duration saturates at
// maxDuration. The caller refuses a duration below
// MinRequestedDuration.
func ParseRequestedDuration(s string) (time.Duration, error) {
	if m := isoDuration.FindStringSubmatch(s); m != nil && s != "P" && !strings.HasSuffix(s, "T") {
		var d time.Duration
		fraction := false // a part with a fraction must be the last one
		for i, u := range []time.Duration{7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second} {
			if m[i+1] == "" {
				continue
			}
			if fraction {
				return 0, fmt.Errorf("bad duration %q: only the last part may have a fraction", s)
			}
			whole, frac, _ := strings.Cut(strings.Replace(m[i+1], ",", ".", 1), ".")
			d = addSaturated(d, mulSaturated(whole, u))
			if frac != "" {
				fraction = true
				d = addSaturated(d, fractionOf(frac, u))
			}
		}
		return d, nil
	}
	if m := dayDuration.FindStringSubmatch(s); m != nil {
		return mulSaturated(m[1], 24*time.Hour), nil
	}
	if goDuration.MatchString(s) {
		d, err := time.ParseDuration(s)
		if err != nil { // the grammar matched: only an overflow is left
			return maxDuration, nil
		}
		return d, nil
	}
	return 0, fmt.Errorf("bad duration %q", s)
}

// fractionOf is 0.digits × unit, rounded down to the nanosecond (digits
// are decimal digits; those past the 18th are dropped, which can only
// lower the result): a granted duration never exceeds the requested
// one, and a value just under a limit (PT0.999…S) stays under it.
func fractionOf(digits string, unit time.Duration) time.Duration {
	if len(digits) > 18 {
		digits = digits[:18]
	}
	n, _ := strconv.ParseUint(digits, 10, 64) // at most 18 digits: cannot fail
	den := uint64(1)
	for range digits {
		den *= 10
	}
	hi, lo := bits.Mul64(n, uint64(unit))
	q, _ := bits.Div64(hi, lo, den) // n < den, so hi < den and q < unit
	return time.Duration(q)
}

// mulSaturated is the decimal digits times unit, at most maxDuration.
func mulSaturated(digits string, unit time.Duration) time.Duration {
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > int64(maxDuration/unit) { // digits only: err is a range error
		return maxDuration
	}
	return time.Duration(n) * unit
}

// addSaturated is a + b for non-negative durations, at most maxDuration.
func addSaturated(a, b time.Duration) time.Duration {
	if a > maxDuration-b {
		return maxDuration
	}
	return a + b
}

// The forms of requested_duration (spec §14.3: agtp-09's "24h" and
// "7d", and ISO 8601 durations): ISO 8601 durations of fixed length, in
// the grammar of RFC 3339 Appendix A (weeks alone, "P2W"; or days and
// time parts, "P1DT2H", "PT90M"), whose last part may carry a decimal
// fraction, with '.' or ',' as ISO 8601 allows ("PT1.5S", "P0,5D");
// whole days ("7d"); and Go durations ("30m", "1h30m", "1.5h"; no
// sign). ISO 8601 years and months are refused: their length varies.
var (
	isoDuration = regexp.MustCompile(`^P(?:(` + isoNumber + `)W|(?:(` + isoNumber + `)D)?(?:T(?:(` + isoNumber + `)H)?(?:(` + isoNumber + `)M)?(?:(` + isoNumber + `)S)?)?)$`)
	dayDuration = regexp.MustCompile(`^(\d+)d$`)
	goDuration  = regexp.MustCompile(`^(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$`)
)

// isoNumber is a number of an ISO 8601 duration part: digits, with an
// optional decimal fraction.
const isoNumber = `\d+(?:[.,]\d+)?`

// FormatDuration prints d in the Go form without zero units: "1h", not
// "1h0m0s"; "1h30m", "26h", "1h1s", "1.5s", "1ms". It reads back as d
// (time.ParseDuration, PROPOSE's requested_duration), and is how config
// messages and granted_duration write a duration.
func FormatDuration(d time.Duration) string {
	var b []byte
	for _, u := range []struct {
		unit time.Duration
		sym  byte
	}{{time.Hour, 'h'}, {time.Minute, 'm'}} {
		if n := d / u.unit; n > 0 {
			b = append(strconv.AppendInt(b, int64(n), 10), u.sym)
			d -= n * u.unit
		}
	}
	if d > 0 || len(b) == 0 {
		b = append(b, d.String()...) // under a minute: "45s", "1.5s", "500ms"
	}
	return string(b)
}
