package caddymodule

// The mcp block of the Caddyfile (the grammar in UnmarshalCaddyfile,
// caddyfile.go).

import (
	"math"
	"slices"
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
)

// parseMCP reads the mcp block (the grammar in UnmarshalCaddyfile);
// the dispenser is on the "mcp" token.
func parseMCP(d *caddyfile.Dispenser) (*mcpdoor.Config, error) {
	m := &mcpdoor.Config{}
	args := d.RemainingArgs()
	switch len(args) {
	case 0:
	case 1:
		if args[0] == "" {
			return nil, d.Errf("mcp: empty path; leave it out for the default %s", mcpdoor.DefaultMCPPath)
		}
		m.Path = args[0]
	default:
		return nil, d.Errf("mcp: want at most one argument, the path")
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		switch key {
		case "include_tools", "exclude_tools", "rename", "allowed_origins":
		default:
			if seen[key] {
				return nil, d.Errf("mcp: %s is set twice; give it once", key)
			}
			seen[key] = true
		}
		switch key {
		case "include_tools", "exclude_tools", "allowed_origins":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			if slices.Contains(args, "") {
				return nil, d.Errf("mcp: %s: empty value", key)
			}
			list := map[string]*[]string{"include_tools": &m.IncludeTools, "exclude_tools": &m.ExcludeTools, "allowed_origins": &m.AllowedOrigins}[key]
			*list = append(*list, args...)
		case "rename":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.Errf("mcp: rename: want <tool> <name>")
			}
			if m.Rename == nil {
				m.Rename = map[string]string{}
			}
			if _, dup := m.Rename[args[0]]; dup {
				return nil, d.Errf("mcp: rename %s is given twice", args[0])
			}
			m.Rename[args[0]] = args[1]
		case "dns_rebinding_protection":
			b, err := optBool(d)
			if err != nil {
				return nil, err
			}
			m.DNSRebindingProtection = &b
		case "max_request_body":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n == 0 || n > math.MaxInt64 {
				return nil, d.Errf("mcp: max_request_body: %q is not a size (e.g. 1MiB)", v)
			}
			m.MaxRequestBody = int64(n)
		case "max_result_bytes":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n < 256 || n > math.MaxInt64 {
				return nil, d.Errf("mcp: max_result_bytes: %q is not a size of at least 256 bytes (e.g. 128KiB)", v)
			}
			m.MaxResultBytes = int64(n)
		case "max_result_text":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n < 256 || n > math.MaxInt32 {
				return nil, d.Errf("mcp: max_result_text: %q is not a size of at least 256 bytes (e.g. 16KiB)", v)
			}
			m.MaxResultText = int(n)
		case "fast_path":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			if v != "on" && v != "off" {
				return nil, d.Errf("mcp: fast_path: %q is neither on nor off", v)
			}
			m.DisableFastPath = v == "off"
		case "meta_attribution_record":
			b, err := optBool(d)
			if err != nil {
				return nil, err
			}
			m.MetaAttributionRecord = b
		case "max_json_depth", "page_size", "max_batch":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, d.Errf("mcp: %s: %q is not a positive integer", key, v)
			}
			switch key {
			case "max_json_depth":
				m.MaxJSONDepth = n
			case "max_batch":
				m.MaxBatch = n
			default:
				m.PageSize = n
			}
		case "timeout":
			dur, err := positiveDuration(d)
			if err != nil {
				return nil, err
			}
			m.Timeout = engine.Duration(dur)
		case "task_after":
			dur, err := positiveDuration(d)
			if err != nil {
				return nil, err
			}
			m.TaskAfter = engine.Duration(dur)
		case "test_agent":
			v, err := oneArg(d)
			if err != nil {
				return nil, err
			}
			if v == "" {
				return nil, d.Errf("mcp: test_agent: empty value")
			}
			m.TestAgent = v
		case "identity":
			v, err := identityArgs(d, "mcp: identity")
			if err != nil {
				return nil, err
			}
			m.Identity = v
		default:
			return nil, d.Errf("mcp: unknown subdirective %q", key)
		}
	}
	return m, nil
}
