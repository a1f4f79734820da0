package caddymodule

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/oppage"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// fullRecent is how long after Redis refused a write for want of memory
// the operator page shows it full.
const fullRecent = time.Minute

// storeHealth is the operator page's view of the store
// (oppage.HealthFunc): the memory store always answers; for Redis, a
// PING's round trip, the health check's down state, a recent
// out-of-memory refusal, INFO memory's used_memory and maxmemory, and
// the restart quarantine left.
func (h *Handler) storeHealth(ctx context.Context) oppage.StoreHealth {
	p := h.redis
	if p == nil {
		return oppage.StoreHealth{Kind: "memory", Reachable: true}
	}
	s := oppage.StoreHealth{Kind: "redis", Addresses: p.cfg.Addrs, Down: p.down.Load(), Quarantine: p.client.QuarantineLeft()}
	ctx, cancel := context.WithTimeout(ctx, dialBudget(p.cfg))
	defer cancel()
	start := time.Now()
	err := p.client.Ping(ctx)
	s.Latency = time.Since(start)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.Reachable = true
	if last := p.lastFull.Load(); last != 0 && time.Since(time.Unix(0, last)) < fullRecent {
		s.Full = true
	}
	if info, err := p.client.Redis().Info(ctx, "memory").Result(); err == nil {
		s.UsedMemory, s.MaxMemory = infoInt(info, "used_memory"), infoInt(info, "maxmemory")
	}
	return s
}

// infoInt is the integer field name of a Redis INFO reply, 0 when absent.
func infoInt(info, name string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// parseOperatorPage reads the operator_page block; the dispenser is on
// the "operator_page" token:
//
//	operator_page [<path>] {
//	    allow <cidr|address>...
//	    bearer <token>
//	    basic <user> <password>
//	    operator <name>
//	    max_rows <n>
//	}
func parseOperatorPage(d *caddyfile.Dispenser) (*oppage.Config, error) {
	c := &oppage.Config{}
	args := d.RemainingArgs()
	switch len(args) {
	case 0:
	case 1:
		c.Path = args[0]
	default:
		return nil, d.Errf("operator_page: want at most one argument, the path")
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		if key != "allow" && seen[key] {
			return nil, d.Errf("operator_page: %s is set twice; give it once", key)
		}
		seen[key] = true
		args := d.RemainingArgs()
		switch key {
		case "allow":
			if len(args) == 0 {
				return nil, d.Errf("operator_page: allow needs at least one CIDR range or address")
			}
			c.Allow = append(c.Allow, args...)
		case "bearer":
			if len(args) != 1 {
				return nil, d.Errf("operator_page: bearer takes one token (a placeholder such as {env.RCNS_OPERATOR_TOKEN})")
			}
			c.BearerToken = args[0]
		case "basic":
			if len(args) != 2 {
				return nil, d.Errf("operator_page: basic takes a user and a password")
			}
			c.BasicUser, c.BasicPassword = args[0], args[1]
		case "operator":
			if len(args) != 1 {
				return nil, d.Errf("operator_page: operator takes one name")
			}
			c.Operator = args[0]
		case "dns_rebinding_protection":
			if len(args) != 1 || (args[0] != "true" && args[0] != "false") {
				return nil, d.Errf("operator_page: dns_rebinding_protection takes true or false")
			}
			v := args[0] == "true"
			c.DNSRebindingProtection = &v
		case "max_rows":
			if len(args) != 1 {
				return nil, d.Errf("operator_page: max_rows takes one number")
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 || n > oppage.MaxMaxRows {
				return nil, d.Errf("operator_page: max_rows %q is not a number in 1..%d", args[0], oppage.MaxMaxRows)
			}
			c.MaxRows = n
		default:
			return nil, d.Errf("operator_page: unknown subdirective %q", key)
		}
	}
	return c, nil
}
