package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a configuration duration. In JSON it is an integer count
// of nanoseconds or a string in Go's duration syntax that may also use
// "d" for days of 24 hours ("1d12h"): the same forms Caddy's own
// durations accept, so a configuration reads the same in every module.
// It marshals as an integer count of nanoseconds.
type Duration time.Duration

// UnmarshalJSON reads an integer (nanoseconds) or a duration string.
// It refuses any other JSON value, and a string ParseDuration refuses.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("a duration is an integer count of nanoseconds or a string such as \"30s\" or \"1d\": %v", err)
	}
	*d = Duration(n)
	return nil
}

// maxDurationLen bounds the string ParseDuration reads.
const maxDurationLen = 1024

// ParseDuration parses s as time.ParseDuration does, and also accepts
// "d" as a unit of 24 hours, alone or combined ("1d", "1.5d", "2d3h").
// Errors name s; a string over 1024 bytes is refused.
func ParseDuration(s string) (time.Duration, error) {
	if len(s) > maxDurationLen {
		return 0, fmt.Errorf("duration is %d bytes; at most %d", len(s), maxDurationLen)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != 'd' {
			b.WriteByte(s[i])
			continue
		}
		// The number before the d (digits and a dot) is days.
		j := i
		for j > 0 && (s[j-1] >= '0' && s[j-1] <= '9' || s[j-1] == '.') {
			j--
		}
		days, err := strconv.ParseFloat(s[j:i], 64)
		if j == i || err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		cur := b.String()
		b.Reset()
		b.WriteString(cur[:len(cur)-(i-j)])
		b.WriteString(strconv.FormatFloat(days*24, 'f', -1, 64))
		b.WriteByte('h')
	}
	return time.ParseDuration(b.String())
}
