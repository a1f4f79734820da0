// Command caddy is the bench's Caddy: cmd/caddy (Caddy's standard
// modules and the rcns handler) plus the bench-only bench_redis_floor
// handler (scripts/bench/floor), which the load comparison's floor site
// uses. scripts/bench/load.sh builds it; nothing else should.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-rcns/caddy-rcns/caddymodule"
	_ "github.com/caddy-rcns/caddy-rcns/scripts/bench/floor"
)

func main() {
	caddycmd.Main()
}
