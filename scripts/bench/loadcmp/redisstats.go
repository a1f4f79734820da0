package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file reads what redis-server itself says it ran during a run of
// the redis site: CONFIG RESETSTAT before the run, INFO commandstats
// after it (main.go, driver.one), both outside the CPU readings, each
// on a connection of its own (go-redis).

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
// (CONFIG RESETSTAT, INFO, and the HELLO that go-redis opens each of
// its connections with) from the store's: they are not counted. A
// HELLO of the gateway's own pool, dialing a connection, is left out
// with them: it is no request's work.
func driverRedisCommand(name string) bool {
	return name == "info" || name == "config" || name == "hello" || strings.HasPrefix(name, "config|") || strings.HasPrefix(name, "hello|")
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

// redisClient is a go-redis client of the redis-server at addr for one
// exchange, on a connection of its own: no identity (no CLIENT
// SETINFO); its HELLO is not counted (driverRedisCommand).
func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true,
		DialTimeout: redisTimeout, ReadTimeout: redisTimeout, WriteTimeout: redisTimeout, MaxRetries: -1})
}

// resetRedisStats zeroes the commandstats of the redis-server at addr
// (CONFIG RESETSTAT).
func resetRedisStats(ctx context.Context, addr string) error {
	rdb := redisClient(addr)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	return rdb.ConfigResetStat(ctx).Err()
}

// redisCommandStats reads the commandstats of the redis-server at addr
// (INFO commandstats).
func redisCommandStats(ctx context.Context, addr string) (map[string]redisCommand, error) {
	rdb := redisClient(addr)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	text, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return parseCommandStats(text)
}
