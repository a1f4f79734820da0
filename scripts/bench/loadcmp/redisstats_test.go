package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/caddy-rcns/caddy-rcns/internal/redisinfo"
)

// TestSetRedis: per request, from the commandstats of a Redis 7 after
// a CONFIG RESETSTAT and 10 requests that each ran one script calling
// an HSET and an HGET, besides two HSETs outside a script (and the
// driver's CONFIG RESETSTAT and INFO).
func TestSetRedis(t *testing.T) {
	cmds := map[string]redisinfo.Command{
		"evalsha": {Calls: 10, USec: 1200}, "hget": {Calls: 10, USec: 50}, "config|resetstat": {Calls: 1, USec: 90},
		"hset": {Calls: 12, USec: 250}, "info": {Calls: 3, USec: 300},
	}
	st := &stats{Requests: 10}
	st.setRedis(cmds)
	// 22 commands (10 HGET, 12 HSET) in 300 µs, 10 scripts in 1200 µs,
	// over 10 requests; the driver's CONFIG RESETSTAT and INFO are not
	// counted.
	if !near(st.RedisCommands, 2.2) || !near(st.RedisCommandUS, 30) || !near(st.RedisScripts, 1) || !near(st.RedisScriptUS, 120) {
		t.Errorf("setRedis: %.2f commands in %.1f µs, %.2f scripts in %.1f µs; want 2.2 in 30, 1 in 120",
			st.RedisCommands, st.RedisCommandUS, st.RedisScripts, st.RedisScriptUS)
	}
	// Every kind of script counts as one.
	all := map[string]redisinfo.Command{"eval": {Calls: 1, USec: 1}, "evalsha": {Calls: 1, USec: 1},
		"eval_ro": {Calls: 1, USec: 1}, "evalsha_ro": {Calls: 1, USec: 1}, "fcall": {Calls: 1, USec: 1}, "config|get": {Calls: 5, USec: 5}}
	st = &stats{Requests: 5}
	st.setRedis(all)
	if st.RedisScripts != 1 || st.RedisScriptUS != 1 || st.RedisCommands != 0 || st.RedisCommandUS != 0 {
		t.Errorf("five kinds of script over 5 requests: %+v; want 1 script, no command", st)
	}
	// Another site's run reads no commandstats; no request, no value.
	none := &stats{Requests: 10}
	none.setRedis(nil)
	empty := &stats{}
	empty.setRedis(cmds)
	if none.RedisCommands != 0 || none.RedisScripts != 0 || empty.RedisCommands != 0 || empty.RedisScriptUS != 0 {
		t.Errorf("no commandstats or no request gave %+v, %+v; want zeros", none, empty)
	}
}

// TestRedisStats: the driver's two exchanges against a real
// redis-server on loopback: a reset zeroes the counts, and the
// commands run after it, a script's included, are read back with the
// script's own; the driver's exchanges add nothing but themselves.
func TestRedisStats(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer rdb.Close()
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := resetRedisStats(ctx, srv.Addr()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := rdb.Eval(ctx, "redis.call('INCR', KEYS[1]) return redis.call('GET', KEYS[1])", []string{"k"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cmds, err := redisCommandStats(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if cmds["eval"].Calls != 3 || cmds["incr"].Calls != 3 || cmds["get"].Calls != 3 || cmds["set"].Calls != 0 {
		t.Errorf("commandstats after the reset: %v", cmds)
	}
	st := &stats{Requests: 3}
	st.setRedis(cmds)
	if st.RedisCommands != 2 || st.RedisScripts != 1 {
		t.Errorf("per request: %v commands, %v scripts; want 2 and 1 (%v)", st.RedisCommands, st.RedisScripts, cmds)
	}
	if _, err := redisCommandStats(ctx, "127.0.0.1:1"); err == nil {
		t.Error("commandstats of no server: no error")
	}
}

// TestRedisSites: the sites marked Redis, whose runs read
// redis-server's commandstats, are those whose Caddyfile block stores
// on {$BENCH_REDIS}.
func TestRedisSites(t *testing.T) {
	raw, err := os.ReadFile("../Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	head := regexp.MustCompile(`(?m)^http://127\.0\.0\.1:\{\$(BENCH_PORT_[A-Z0-9_]+)\} \{`)
	onRedis := map[string]bool{}
	idx := head.FindAllStringSubmatchIndex(text, -1)
	for i, m := range idx {
		end := len(text)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		onRedis[text[m[2]:m[3]]] = strings.Contains(text[m[0]:end], "{$BENCH_REDIS}")
	}
	n := 0
	for _, s := range sites {
		if s.Redis != onRedis[s.envName()] {
			t.Errorf("site %s: Redis %v, but its Caddyfile block on {$BENCH_REDIS}: %v", s.Name, s.Redis, onRedis[s.envName()])
		}
		if s.Redis {
			n++
		}
	}
	if n == 0 || strings.Count(text, "{$BENCH_REDIS}") != n {
		t.Errorf("%d sites marked Redis; the Caddyfile names {$BENCH_REDIS} %d times", n, strings.Count(text, "{$BENCH_REDIS}"))
	}
}
