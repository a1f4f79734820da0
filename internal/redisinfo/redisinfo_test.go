package redisinfo

import (
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

// TestParseCommandStats: every cmdstat line by name, a subcommand's
// with its "|", and malformed lines refused.
func TestParseCommandStats(t *testing.T) {
	got, err := ParseCommandStats(commandstats)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Command{
		"evalsha": {10, 1200}, "hget": {10, 50}, "config|resetstat": {1, 90}, "hset": {12, 250}, "info": {3, 300},
	}
	if len(got) != len(want) {
		t.Errorf("ParseCommandStats = %v, want %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
	if none, err := ParseCommandStats("# Commandstats\r\n"); err != nil || len(none) != 0 {
		t.Errorf("no command since the reset: %v, %v; want none", none, err)
	}
	for _, bad := range []string{
		"cmdstat_hset:calls=x,usec=1\r\n",
		"cmdstat_hset:usec_per_call=1.00\r\n",
		"cmdstat_hset calls=1,usec=1\r\n",
	} {
		if _, err := ParseCommandStats(bad); err == nil {
			t.Errorf("%q parsed", strings.TrimSpace(bad))
		}
	}
}
