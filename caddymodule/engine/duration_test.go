package engine

import (
	"encoding/json"
	"testing"
	"time"
)

// TestDurationJSON holds Duration's JSON forms equal to those Caddy's
// durations accept: nanoseconds, Go syntax, and days.
func TestDurationJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{`1500000000`, 1500 * time.Millisecond},
		{`"30s"`, 30 * time.Second},
		{`"1d"`, 24 * time.Hour},
		{`"1.5d"`, 36 * time.Hour},
		{`"2d3h"`, 51 * time.Hour},
		{`"-1d"`, -24 * time.Hour},
		{`"1h30m"`, 90 * time.Minute},
	} {
		var d Duration
		if err := json.Unmarshal([]byte(c.in), &d); err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if time.Duration(d) != c.want {
			t.Errorf("%s = %v, want %v", c.in, time.Duration(d), c.want)
		}
	}
	for _, bad := range []string{`"d"`, `"1x"`, `true`, `"1dd"`, `{}`} {
		var d Duration
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s: accepted as %v", bad, time.Duration(d))
		}
	}
	out, err := json.Marshal(struct {
		D Duration `json:"d"`
	}{Duration(time.Second)})
	if err != nil || string(out) != `{"d":1000000000}` {
		t.Errorf("marshal = %s, %v; want nanoseconds", out, err)
	}
}
