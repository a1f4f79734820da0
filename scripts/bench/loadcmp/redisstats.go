package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// This file reads what redis-server itself says it ran during a run of
// the redis site: CONFIG RESETSTAT before the run, INFO commandstats
// after it (main.go, driver.one), both outside the CPU readings, on a
// connection of their own that sends nothing else.

// redisCommand is one line of INFO commandstats: the calls of one
// command since the last CONFIG RESETSTAT and their total time, µs
// (wall clock inside redis-server, from the command's start to its end).
type redisCommand struct {
	Calls, USec int64
}

// redisScriptCommands are the commands that run a script; Redis 7
// counts each command a script calls (redis.call) under its own name
// too, and a script's time holds its commands' times.
var redisScriptCommands = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true,
}

// driverRedisCommand tells the commands the driver itself sends
// (CONFIG RESETSTAT, INFO) from the store's: they are not counted.
func driverRedisCommand(name string) bool {
	return name == "info" || name == "config" || strings.HasPrefix(name, "config|")
}

// parseCommandStats reads the reply of INFO commandstats: the lines
// "cmdstat_<name>:calls=N,usec=U,..." by name (lower case, a
// subcommand's as "config|resetstat"), skipping the section header
// and blank lines. A cmdstat line without calls or usec is an error.
func parseCommandStats(text string) (map[string]redisCommand, error) {
	cmds := map[string]redisCommand{}
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
		var c redisCommand
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

// setRedis sets st's redis-server fields from the commandstats of the
// run (cmds, counted from a CONFIG RESETSTAT just before it), per
// request: the commands Redis ran, inside its scripts or not, and
// their µs; the scripts called and their µs (which hold the µs of the
// commands they called). The driver's own commands are left out.
func (st *stats) setRedis(cmds map[string]redisCommand) {
	n := float64(st.Requests)
	if n == 0 {
		return
	}
	var calls, usec, scripts, scriptUS int64
	for name, c := range cmds {
		switch {
		case driverRedisCommand(name):
		case redisScriptCommands[name]:
			scripts, scriptUS = scripts+c.Calls, scriptUS+c.USec
		default:
			calls, usec = calls+c.Calls, usec+c.USec
		}
	}
	st.RedisCommands, st.RedisCommandUS = float64(calls)/n, float64(usec)/n
	st.RedisScripts, st.RedisScriptUS = float64(scripts)/n, float64(scriptUS)/n
}

// redisTimeout bounds one exchange of the driver with redis-server.
const redisTimeout = 5 * time.Second

// redisDo sends one command (args, as RESP bulk strings) to the
// redis-server at addr on a connection of its own and returns its
// reply: a status's or a bulk string's text; a Redis error as an error.
func redisDo(ctx context.Context, addr string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(cctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := cctx.Deadline()
	_ = c.SetDeadline(dl)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s: %s", args[0], line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("%s: reply %q", args[0], line)
		}
		buf := make([]byte, n+2) // and its CRLF
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("%s: reply %q", args[0], line)
}

// resetRedisStats zeroes the commandstats of the redis-server at addr.
func resetRedisStats(ctx context.Context, addr string) error {
	_, err := redisDo(ctx, addr, "CONFIG", "RESETSTAT")
	return err
}

// redisCommandStats reads the commandstats of the redis-server at addr.
func redisCommandStats(ctx context.Context, addr string) (map[string]redisCommand, error) {
	text, err := redisDo(ctx, addr, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	return parseCommandStats(text)
}
