package caddymodule

import (
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redisstore"
)

// parseStore reads the store lines of the rcns block; the dispenser is
// on key ("store", "store_required" or "node_id"). The grammar:
//
//	store memory
//	store redis {
//	    mode single|cluster|sentinel
//	    address <host:port>...
//	    master_name <name>
//	    username <user>
//	    password <password>
//	    db <n>
//	    tls
//	    tls_ca_file <path>
//	    key_prefix <prefix>
//	    dial_timeout <duration>
//	    read_timeout <duration>
//	    write_timeout <duration>
//	    pool_size <n>
//	    contract_lease <duration>|off
//	}
//	store_required on|off
//	node_id <name>
func (h *Handler) parseStore(d *caddyfile.Dispenser, key string) error {
	switch key {
	case "store_required":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		var b bool
		switch v {
		case "on", "true":
			b = true
		case "off", "false":
		default:
			return d.Errf("store_required: %q is not on or off", v)
		}
		h.StoreRequired = &b
		return nil
	case "node_id":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		if !engine.ValidName(v) {
			return d.Errf("node_id: %q must be 1-64 characters of A-Z a-z 0-9 . _ - (not . or .. alone)", v)
		}
		h.NodeID = v
		return nil
	}
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("store: want memory or redis { … }")
	}
	switch args[0] {
	case StoreMemory:
		if d.NextBlock(d.Nesting()) {
			return d.Errf("store memory takes no block")
		}
		h.Store = StoreMemory
		return nil
	case StoreRedis:
	default:
		return d.Errf("store: %q is not memory or redis", args[0])
	}
	r := &RedisConfig{}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("store redis: %s is set twice; give it once", sub)
		}
		seen[sub] = true
		switch sub {
		case "mode":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			if v != redisstore.ModeSingle && v != redisstore.ModeCluster && v != redisstore.ModeSentinel {
				return d.Errf("store redis: mode %q is not single, cluster or sentinel", v)
			}
			r.Mode = v
		case "address":
			addrs := d.RemainingArgs()
			if len(addrs) == 0 {
				return d.Errf("store redis: address: want <host:port>...")
			}
			for _, a := range addrs {
				if a == "" {
					return d.Errf("store redis: address: empty value")
				}
			}
			r.Addresses = addrs
		case "master_name", "username", "password", "tls_ca_file", "key_prefix":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			if v == "" {
				return d.Errf("store redis: %s: empty value; leave the line out for the default", sub)
			}
			*map[string]*string{"master_name": &r.MasterName, "username": &r.Username, "password": &r.Password,
				"tls_ca_file": &r.TLSCAFile, "key_prefix": &r.KeyPrefix}[sub] = v
			if sub == "tls_ca_file" {
				r.TLS = true
			}
		case "tls":
			if d.NextArg() {
				return d.ArgErr()
			}
			r.TLS = true
		case "db", "pool_size":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || sub == "pool_size" && n == 0 {
				return d.Errf("store redis: %s: %q is not a %s integer", sub, v, map[bool]string{true: "positive", false: "non-negative"}[sub == "pool_size"])
			}
			if sub == "db" {
				r.DB = n
			} else {
				r.PoolSize = n
			}
		case "contract_lease":
			args := d.RemainingArgs()
			if len(args) != 1 {
				return d.Errf("store redis: contract_lease: want one value, a duration (e.g. 100ms, at most 1s) or off; got %d", len(args))
			}
			if args[0] == "off" {
				r.ContractLease = -1
				continue
			}
			dur, err := parseDuration(args[0])
			switch {
			case err != nil:
				return d.Errf("store redis: contract_lease: %q is not a duration (e.g. 100ms, 500ms, 1s) or off", args[0])
			case dur <= 0:
				return d.Errf("store redis: contract_lease: %q must be a positive duration, or off", args[0])
			case dur > redisstore.MaxContractLease:
				return d.Errf("store redis: contract_lease %v is over %v (a REVOKE waits it before it answers)", dur, redisstore.MaxContractLease)
			}
			r.ContractLease = caddy.Duration(dur)
		case "dial_timeout", "read_timeout", "write_timeout":
			dur, err := positiveDuration(d)
			if err != nil {
				return err
			}
			*map[string]*caddy.Duration{"dial_timeout": &r.DialTimeout, "read_timeout": &r.ReadTimeout, "write_timeout": &r.WriteTimeout}[sub] = caddy.Duration(dur)
		default:
			return d.Errf("store redis: unknown subdirective %q", sub)
		}
	}
	if err := r.validate(); err != nil {
		return d.Errf("%v", err)
	}
	h.Store, h.Redis = StoreRedis, r
	return nil
}
