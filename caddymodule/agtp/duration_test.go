package agtp

import (
	"strings"
	"testing"
	"time"
)

// TestParseRequestedDuration: the accepted forms, and saturation: a
// duration beyond time.Duration's range is the maximum, never wrapped
// ("213504d" used to come out as about 25 minutes).
func TestParseRequestedDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30m": 30 * time.Minute, "90s": 90 * time.Second,
		"1h30m": 90 * time.Minute, "1.5h": 90 * time.Minute, "P1DT2H": 26 * time.Hour, "PT90M": 90 * time.Minute,
		"P1D": 24 * time.Hour, "PT1S": time.Second, "0s": 0, "PT0S": 0, "0d": 0,
		"213504d": maxDuration, "P213504D": maxDuration, "106752d": maxDuration, "106751d": 106751 * 24 * time.Hour,
		"99999999999999999999d": maxDuration, "PT99999999999999999999S": maxDuration, "P106751DT24H": maxDuration,
		"9999999999h": maxDuration, "2562048h": maxDuration, "2562047h": 2562047 * time.Hour,
		// ISO 8601 weeks (alone, RFC 3339 App. A) and a fraction on the
		// last part, '.' or ',' (both were 400 invalid-duration).
		"P1W": 7 * 24 * time.Hour, "P2W": 14 * 24 * time.Hour, "P0.5W": 84 * time.Hour, "P15251W": maxDuration, "P15250W": 15250 * 7 * 24 * time.Hour,
		"PT1.5S": 1500 * time.Millisecond, "PT0.5S": 500 * time.Millisecond, "PT0,25S": 250 * time.Millisecond,
		"P1.5D": 36 * time.Hour, "P0,5D": 12 * time.Hour, "PT1.5H": 90 * time.Minute, "P1DT1H1.5M": 25*time.Hour + 90*time.Second,
		"PT99999999999999999999.5S": maxDuration, "PT1." + strings.Repeat("9", 40) + "S": 2*time.Second - 1,
		// Rounded down, never up: granted ≤ requested, and just under the
		// 1 s minimum stays under it (ParseFloat gave 1s and 2s).
		"PT0." + strings.Repeat("9", 20) + "S": time.Second - 1, "P0.1W": 60480 * time.Second, "PT0.333333333333S": 333333333,
	} {
		got, err := ParseRequestedDuration(s)
		if err != nil || got != want {
			t.Errorf("ParseRequestedDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "P", "PT", "P1DT", "1d2h", "-1h", "+1h", "-1d", "1y", "P1Y", "P1M", "PT1.5H30M", "P1.5DT1H", "P1W2D", "P1WT1H", "P1.W", "P.5W", "PT.5S", "PT1.S", "p1w", "P-1W", "abc", "1.5d", "5", " 1h", "1h "} {
		if got, err := ParseRequestedDuration(bad); err == nil {
			t.Errorf("ParseRequestedDuration(%q) = %v; want an error", bad, got)
		}
	}
}

// TestShortDuration: FormatDuration drops zero units and reads back,
// through ParseRequestedDuration, as the same duration.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 45 * time.Second: "45s", time.Minute: "1m", 30 * time.Minute: "30m", time.Hour: "1h",
		90 * time.Minute: "1h30m", time.Hour + time.Second: "1h1s", 26 * time.Hour: "26h", 1500 * time.Millisecond: "1.5s",
		time.Hour + 500*time.Millisecond: "1h500ms", 100 * 365 * 24 * time.Hour: "876000h", maxDuration: "2562047h47m16.854775807s",
	} {
		got := FormatDuration(d)
		if got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseRequestedDuration(got); err != nil || back != d {
			t.Errorf("FormatDuration(%v) = %q reads back as %v, %v", d, got, back, err)
		}
	}
}
