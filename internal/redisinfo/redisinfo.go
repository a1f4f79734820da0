// Package redisinfo reads what redis-server says of itself in INFO:
// the commandstats section (ParseCommandStats), which the Redis store's
// tests (commands per request kind) and the load comparison
// (scripts/bench/loadcmp) both read.
package redisinfo

import (
	"fmt"
	"strconv"
	"strings"
)

// Command is one line of INFO commandstats: the calls of one
// command since the last CONFIG RESETSTAT and their total time, µs
// (wall clock inside redis-server, from the command's start to its end).
type Command struct {
	Calls, USec int64
}

// ParseCommandStats reads the reply of INFO commandstats: the lines
// "cmdstat_<name>:calls=N,usec=U,..." by name (lower case, a
// subcommand's as "config|resetstat"), skipping the section header
// and blank lines. A cmdstat line without calls or usec is an error.
func ParseCommandStats(text string) (map[string]Command, error) {
	cmds := map[string]Command{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("commandstats line %q", line)
		}
		var c Command
		var seen int
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			var dst *int64
			switch k {
			case "calls":
				dst = &c.Calls
			case "usec":
				dst = &c.USec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("commandstats line %q: %s=%q", line, k, v)
			}
			*dst = n
			seen++
		}
		if seen != 2 {
			return nil, fmt.Errorf("commandstats line %q: no calls and usec", line)
		}
		cmds[strings.ToLower(name)] = c
	}
	return cmds, nil
}
