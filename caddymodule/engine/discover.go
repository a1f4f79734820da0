package engine

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
)

// builtins are the reserved DISCOVER paths (spec §9), in directory order.
var builtins = []string{"/methods", "/agents", "/genesis", "/tools", "/apis", "/patterns", "/contracts"}

// anonymousBuiltins names, for refusals, the built-ins a DISCOVER
// without Agent-ID reaches: all but /contracts, which lists the
// caller's contracts.
var anonymousBuiltins = strings.Join(slices.DeleteFunc(slices.Clone(builtins), func(b string) bool { return b == "/contracts" }), ", ")

var scopeInspectAll = policy.MustParseScope("inspect:all")

// discover serves the DISCOVER built-ins (spec §8, §9, §17.1, §17.2).
// It returns true when it has answered; false when the request's pair
// (x.method, x.path) is not a built-in, so the rest of the dispatch (an
// operator DISCOVER endpoint, a contract, the gate) serves it. The
// caller must then answer: false writes nothing.
//
// A body target at "/" makes the request DISCOVER /target (retarget);
// at any other path it must name that path (400 target-conflict). The
// target is consumed here: it never reaches an endpoint's input.
func (h *Engine) discover(x *exchange, req *request) bool {
	p, e := params(req)
	if e != nil {
		x.fail(e)
		return true
	}
	ts, e := strParam(p, "DISCOVER", "target")
	if e != nil {
		x.fail(e)
		return true
	}
	if given(p, "target") {
		if len(ts) > MaxTargetBytes {
			x.fail(agtp.InvalidParameter.WithFields(fmt.Sprintf("DISCOVER: parameter target is %d bytes; the limit is %d (the URI length RFC 9110 §4.1 asks every recipient to support)", len(ts), MaxTargetBytes), map[string]any{"limit_bytes": MaxTargetBytes}))
			return true
		}
		target := "/" + strings.TrimPrefix(ts, "/")
		switch {
		case x.path == "/" && target != "/":
			if e := h.retarget(x, target); e != nil {
				x.fail(e)
				return true
			}
		case target != x.path:
			x.fail(agtp.TargetConflict.New(fmt.Sprintf("the body target %q disagrees with the path %s (api-01 §5.10)", textcut.Clip(ts), textcut.Clip(x.path))))
			return true
		}
		dropTarget(req)
	}
	if x.method != "DISCOVER" { // a redirect of the retargeted pair
		return false
	}
	path := x.path
	anonymous := req.caller == nil
	switch path {
	case "/":
		if anonymous {
			pm := h.pub.cur.Load()
			x.write(200, agtp.MediaManifest, json.RawMessage(pm.raw), map[string]string{"ETag": pm.etag})
			return true
		}
		dir := make([]map[string]any, 0, len(builtins))
		for _, b := range builtins {
			dir = append(dir, map[string]any{"path": b, "tier": "A"})
		}
		x.write(200, agtp.MediaAGTP, map[string]any{"directory": dir}, nil)
	case "/methods":
		all := h.methodList()
		keys := make([]string, len(all))
		for i := range all {
			keys[i] = fmt.Sprintf("%06d", i)
		}
		from, to, link, e := x.page(path, p, keys, methodCursor)
		if e != nil {
			x.fail(e)
			return true
		}
		x.write(200, agtp.MediaAGTP, all[from:to], link)
	case "/patterns":
		x.write(200, agtp.MediaAGTP, h.patterns(), nil)
	case "/contracts":
		if anonymous {
			x.fail(agtp.AgentUnauthenticated.New("DISCOVER /contracts lists the caller's contracts and needs an Agent-ID"))
			return true
		}
		agent := req.caller.Agent.ID
		if req.caller.Effective().Covers(scopeInspectAll) {
			agent = ""
		}
		cs, err := h.sto.Contracts.List(x.ctx(), agent)
		if err != nil {
			h.storeFailed(x, err)
			return true
		}
		keys := make([]string, len(cs))
		for i, c := range cs {
			keys[i] = fmt.Sprintf("%020d|%s", c.IssuedAt.UnixNano(), c.SynthesisID)
		}
		from, to, link, e := x.page(path, p, keys, contractCursor)
		if e != nil {
			x.fail(e)
			return true
		}
		list := make([]map[string]any, 0, to-from)
		for _, c := range cs[from:to] {
			list = append(list, c.Summary())
		}
		x.write(200, agtp.MediaAGTP, list, link)
	case "/apis":
		apis := []map[string]any{}
		for _, n := range sortedKeys(h.upstreams) {
			apis = append(apis, map[string]any{"name": n})
		}
		x.write(200, agtp.MediaAGTP, apis, nil)
	case "/agents", "/tools":
		x.write(200, agtp.MediaAGTP, []any{}, nil)
	case "/genesis":
		x.fail(agtp.NotFound.New("this gateway hosts no agent, so it has no Agent Genesis"))
	default:
		return false
	}
	return true
}

// MaxTargetBytes bounds a DISCOVER body target (bytes): 8000, the URI
// length RFC 9110 §4.1 recommends every recipient support. A path in the
// request line is bounded by the header limit; a body target otherwise
// only by the body limit, and it is echoed in the answer.
const MaxTargetBytes = 8000

// retarget makes DISCOVER / with the body target "/X" the request
// DISCOVER /X: the legacy body form, when accepted, must equal the path
// form (api-01 §5.10, spec §9). target is read as the request path is
// (§10 steps 3–5): percent-encoding normalized (400 invalid-parameter),
// redirects applied, path grammar checked (460), method policy (405
// when a redirect names a disallowed method). x.method and x.path
// become the new pair.
func (h *Engine) retarget(x *exchange, target string) *agtp.Error {
	path, err := policy.NormalizePath(target)
	if err != nil {
		return agtp.InvalidParameter.New(fmt.Sprintf("DISCOVER: parameter target %q is not a path: %v", textcut.Clip(target), err))
	}
	return h.dispatchTo(x, path)
}

// dropTarget removes the DISCOVER target, which names the request's
// path, from the body (top level and parameters), so that an endpoint,
// contract or recipe that serves the path gets the same input with the
// body form as with the path form.
func dropTarget(req *request) {
	delete(req.body, "target")
	if p, ok := req.body["parameters"].(map[string]any); ok {
		delete(p, "target")
	}
}

// Listing bounds for DISCOVER /methods and /contracts.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// Cursor forms of the listings: the key of the last entry served.
var (
	methodCursor   = regexp.MustCompile(`^[0-9]{6}$`)
	contractCursor = regexp.MustCompile(`^[0-9]{20}\|syn-[A-Za-z0-9_-]{22}$`)
)

// page applies the limit (limitValue) and cursor parameters, from the
// query or the body parameters p, to a listing whose entries have the
// given strictly increasing keys. It returns the slice bounds and, when
// more entries follow, an RFC 8288 Link header with rel="next". The
// cursor is opaque to clients: base64url of the last key served.
func (x *exchange) page(path string, p map[string]any, keys []string, cursorForm *regexp.Regexp) (int, int, map[string]string, *agtp.Error) {
	limit, e := listingParam(x.query, p, "limit", DefaultPageLimit, limitValue)
	if e != nil {
		return 0, 0, nil, e
	}
	c, e := listingParam(x.query, p, "cursor", "", cursorValue)
	if e != nil {
		return 0, 0, nil, e
	}
	from := 0
	if c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || !cursorForm.Match(raw) {
			return 0, 0, nil, agtp.InvalidCursor.New("cursor is not one this server issued")
		}
		after := string(raw)
		from = sort.SearchStrings(keys, after)
		if from < len(keys) && keys[from] == after {
			from++
		}
	}
	to := from + limit
	if to >= len(keys) {
		return from, len(keys), nil, nil
	}
	next := base64.RawURLEncoding.EncodeToString([]byte(keys[to-1]))
	link := fmt.Sprintf("<%s?limit=%d&cursor=%s>; rel=\"next\"", path, limit, next)
	return from, to, map[string]string{"Link": link}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// methodList is DISCOVER /methods: built-ins (tier A) then Tier B
// endpoints agents may call.
func (h *Engine) methodList() []map[string]any {
	out := []map[string]any{{"method": "DISCOVER", "path": "/", "description": "Server manifest (without Agent-ID) or directory of built-ins.", "tier": "A"}}
	for _, b := range builtins {
		out = append(out, map[string]any{"method": "DISCOVER", "path": b, "description": "Built-in discovery surface " + b + ".", "tier": "A"})
	}
	for _, e := range h.set.Endpoints {
		if e.Internal {
			continue
		}
		out = append(out, map[string]any{"method": e.Method, "path": e.Path, "description": e.Description, "tier": "B"})
	}
	return out
}

// patterns is DISCOVER /patterns (spec §17.1).
func (h *Engine) patterns() map[string]any {
	list := []map[string]any{}
	for _, r := range h.set.Recipes {
		p := map[string]any{"recipe_name": r.Name, "recipe_version": r.Version, "method": r.Method, "description": r.Description,
			"semantic": r.Semantic()}
		if r.PathRegex != nil {
			p["path_regex"] = r.PatternPath()
		} else {
			p["path_exact"] = r.PathExact
		}
		if len(r.RequiredScopes) > 0 {
			ss := make([]string, len(r.RequiredScopes))
			for i, s := range r.RequiredScopes {
				ss[i] = s.String()
			}
			p["required_scopes"] = ss
		}
		list = append(list, p)
	}
	return map[string]any{"rcns_enabled": h.Enabled, "patterns": list}
}
