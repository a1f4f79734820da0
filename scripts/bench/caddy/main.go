// Command caddy is the bench build of Caddy: the product's build
// (cmd/caddy: the standard modules and the rcns handler) plus the
// reference handler bench_exchange (scripts/bench/benchref) of the load
// comparison. scripts/bench/load.sh builds it; it is never shipped.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-rcns/caddy-rcns/caddymodule"
	_ "github.com/caddy-rcns/caddy-rcns/scripts/bench/benchref"
)

func main() {
	caddycmd.Main()
}
