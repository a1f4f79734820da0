// Command caddy is Caddy v2 with its standard modules plus the rcns
// handler (module http.handlers.rcns), built the way xcaddy would.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-rcns/caddy-rcns/caddymodule"
)

func main() {
	caddycmd.Main()
}
