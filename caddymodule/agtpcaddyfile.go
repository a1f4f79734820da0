package caddymodule

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	caddytracing "github.com/caddyserver/caddy/v2/modules/caddyhttp/tracing"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("agtp", parseAGTPOption)
}

// parseAGTPOption sets up the agtp app (the native AGTP/1.0 door) from
// the global option of that name; each `agtp` option adds one server.
// The grammar (docs/doors.md "The native AGTP/1.0 door"):
//
//	agtp <address>... {
//	    handler <rcns name>
//	    tls <host name>...
//	    client_auth { <Caddy's client_auth> }
//	    read_header_timeout <duration>
//	    read_timeout <duration>
//	    write_timeout <duration>
//	    idle_timeout <duration>
//	    max_header_size <size>
//	    max_header_lines <n>
//	    max_connections <n>
//	    max_requests_per_connection <n>
//	    tracing [{ span <name> span_attributes { <key> <value> } }]
//	}
//
// Without tls, every address must be a loopback one (agtp://).
func parseAGTPOption(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(AGTPApp)
	if prev, ok := existing.(httpcaddyfile.App); ok {
		if err := json.Unmarshal(prev.Value, app); err != nil {
			return nil, err
		}
	}
	d.Next() // the option name
	s := &AGTPServer{Listen: d.RemainingArgs()}
	if len(s.Listen) == 0 {
		return nil, d.Err("give at least one listen address (e.g. agtp 127.0.0.1:4480)")
	}
	for d.NextBlock(0) {
		key := d.Val()
		switch key {
		case "handler":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			s.Handler = v
		case "access_log":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			s.AccessLog = true
		case "tls":
			if s.TLS == nil {
				s.TLS = &AGTPTLS{}
			}
			s.TLS.Names = append(s.TLS.Names, d.RemainingArgs()...)
		case "tracing":
			t := &caddytracing.Tracing{}
			if err := t.UnmarshalCaddyfile(d.NewFromNextSegment()); err != nil {
				return nil, err
			}
			s.Tracing = t
		case "client_auth":
			if s.TLS == nil {
				s.TLS = &AGTPTLS{}
			}
			ca := &caddytls.ClientAuthentication{}
			if err := ca.UnmarshalCaddyfile(d.NewFromNextSegment()); err != nil {
				return nil, err
			}
			s.TLS.ClientAuthentication = ca
		case "read_header_timeout", "read_timeout", "write_timeout", "idle_timeout":
			dur, err := positiveDuration(d)
			if err != nil {
				return nil, err
			}
			v := caddy.Duration(dur)
			switch key {
			case "read_header_timeout":
				s.ReadHeaderTimeout = v
			case "read_timeout":
				s.ReadTimeout = v
			case "write_timeout":
				s.WriteTimeout = v
			default:
				s.IdleTimeout = v
			}
		case "max_header_size":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := humanize.ParseBytes(v)
			switch {
			case err != nil:
				return nil, d.Errf("max_header_size: %q is not a size (e.g. 16KiB)", v)
			case n < minAGTPMaxHeaderBytes:
				return nil, d.Errf("max_header_size: %q is below 1KiB: no request line and Agent-ID would fit", v)
			case n > maxAGTPMaxHeaderBytes:
				return nil, d.Errf("max_header_size: %q is over 1GiB", v)
			}
			s.MaxHeaderBytes = int(n)
		case "max_header_lines", "max_connections", "max_requests_per_connection":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := positiveInt(d, key, v)
			if err != nil {
				return nil, err
			}
			switch key {
			case "max_header_lines":
				s.MaxHeaderLines = n
			case "max_connections":
				s.MaxConnections = n
			default:
				s.MaxRequestsPerConnection = n
			}
		default:
			return nil, d.Errf("unknown subdirective %q", key)
		}
	}
	app.Servers = append(app.Servers, s)
	return httpcaddyfile.App{Name: "agtp", Value: caddyconfig.JSON(app, nil)}, nil
}
