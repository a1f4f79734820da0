package main

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/internal/redisinfo"
)

// This file reads what redis-server itself says it ran during a run of
// the redis site: CONFIG RESETSTAT before the run, INFO commandstats
// after it (main.go, driver.one), both outside the CPU readings, each
// on a connection of its own (go-redis).

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

// setRedis sets st's redis-server fields from the commandstats of the
// run (cmds, counted from a CONFIG RESETSTAT just before it), per
// request: the commands Redis ran, inside its scripts or not, and
// their µs; the scripts called and their µs (which hold the µs of the
// commands they called). The driver's own commands are left out.
func (st *stats) setRedis(cmds map[string]redisinfo.Command) {
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
func redisCommandStats(ctx context.Context, addr string) (map[string]redisinfo.Command, error) {
	rdb := redisClient(addr)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	text, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return redisinfo.ParseCommandStats(text)
}
