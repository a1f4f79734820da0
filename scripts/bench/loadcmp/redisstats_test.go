package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
)

// commandstats is INFO commandstats of a Redis 7 after a CONFIG
// RESETSTAT and 10 requests that each ran one script calling an HSET and
// an HGET, besides two HSETs outside a script, as redis-server writes it
// (CRLF line ends).
const commandstats = "# Commandstats\r\n" +
	"cmdstat_evalsha:calls=10,usec=1200,usec_per_call=120.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_hget:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_config|resetstat:calls=1,usec=90,usec_per_call=90.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_hset:calls=12,usec=250,usec_per_call=20.83,rejected_calls=0,failed_calls=1\r\n" +
	"cmdstat_info:calls=3,usec=300,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n" +
	"\r\n"

func TestParseCommandStats(t *testing.T) {
	got, err := parseCommandStats(commandstats)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]redisCommand{
		"evalsha": {10, 1200}, "hget": {10, 50}, "config|resetstat": {1, 90}, "hset": {12, 250}, "info": {3, 300},
	}
	if len(got) != len(want) {
		t.Errorf("parseCommandStats = %v, want %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
	if none, err := parseCommandStats("# Commandstats\r\n"); err != nil || len(none) != 0 {
		t.Errorf("no command since the reset: %v, %v; want none", none, err)
	}
	for _, bad := range []string{
		"cmdstat_hset:calls=x,usec=1\r\n",
		"cmdstat_hset:usec_per_call=1.00\r\n",
		"cmdstat_hset calls=1,usec=1\r\n",
	} {
		if _, err := parseCommandStats(bad); err == nil {
			t.Errorf("%q parsed", strings.TrimSpace(bad))
		}
	}
}

func TestSetRedis(t *testing.T) {
	cmds, err := parseCommandStats(commandstats)
	if err != nil {
		t.Fatal(err)
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
	all := map[string]redisCommand{"eval": {1, 1}, "evalsha": {1, 1}, "eval_ro": {1, 1}, "evalsha_ro": {1, 1}, "fcall": {1, 1},
		"config|get": {5, 5}}
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

// TestRedisDo: the driver's two commands against a stand-in of
// redis-server on loopback that answers as Redis 7 does.
func TestRedisDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			req := string(buf[:n])
			got <- req
			switch {
			case strings.Contains(req, "RESETSTAT"):
				_, _ = io.WriteString(c, "+OK\r\n")
			case strings.Contains(req, "commandstats"):
				_, _ = fmt.Fprintf(c, "$%d\r\n%s\r\n", len(commandstats), commandstats)
			default:
				_, _ = io.WriteString(c, "-ERR unknown command\r\n")
			}
			c.Close()
		}
	}()
	ctx := context.Background()
	addr := ln.Addr().String()
	if err := resetRedisStats(ctx, addr); err != nil {
		t.Fatal(err)
	}
	if req := <-got; req != "*2\r\n$6\r\nCONFIG\r\n$9\r\nRESETSTAT\r\n" {
		t.Errorf("CONFIG RESETSTAT sent as %q", req)
	}
	cmds, err := redisCommandStats(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if req := <-got; req != "*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n" {
		t.Errorf("INFO commandstats sent as %q", req)
	}
	if cmds["evalsha"] != (redisCommand{10, 1200}) || len(cmds) != 5 {
		t.Errorf("commandstats read as %v", cmds)
	}
	if _, err := redisDo(ctx, addr, "NOPE"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("an error reply gave %v", err)
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
