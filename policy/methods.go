package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// MethodsDoc names the docs page that lists the method catalog
// (docs/methods.md, generated from the embedded catalog). The 459
// method-not-in-catalog and 460 reserved-segment explanations point to it
// with the rule they apply (CatalogRule, PathRule).
const MethodsDoc = "caddy-rcns docs/methods.md"

// CatalogRule names the rule behind 459 method-not-in-catalog: a method
// must be in the approved catalog (api-01 §3) or a custom method.
const CatalogRule = "catalog rule, api-01 §3; the catalog is listed in " + MethodsDoc + ", DISCOVER /methods lists what this server serves"

// PathRule names the rule behind a 460 for a path segment that equals
// a method name (the path grammar, api-01 §5).
const PathRule = "path grammar, api-01 §5; the method names are listed in " + MethodsDoc

// legacyVerbs are the five HTTP verbs policies.methods.legacy can admit
// (RCNS §5.4).
var legacyVerbs = [...]string{"GET", "POST", "PUT", "DELETE", "PATCH"}

// IsLegacyVerb reports whether s is one of the five HTTP verbs that
// policies.methods.legacy can admit as AGTP methods: GET, POST, PUT,
// DELETE, PATCH (RCNS §5.4).
func IsLegacyVerb(s string) bool {
	for _, v := range legacyVerbs {
		if s == v {
			return true
		}
	}
	return false
}

// LegacyVerbs returns the five legacy HTTP verbs that
// policies.methods.legacy may admit: GET POST PUT DELETE PATCH. RCNS §5.4.
func LegacyVerbs() []string { return append([]string(nil), legacyVerbs[:]...) }

// ValidMethodToken reports whether s satisfies the method lexical rule
// ^[A-Z]+$ with length 3..32. RCNS §5.2 (api-01 §3.2).
func ValidMethodToken(s string) bool {
	if len(s) < 3 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// Redirect is one policies.methods.redirects entry: a request for
// (FromMethod, FromPath) is processed as if (ToMethod, ToPath) had been
// sent. An empty FromPath matches any path; an empty ToPath keeps the
// request path. FromMethod is compared with the method after aliasing.
// RCNS §5.4, §10 step 3.
type Redirect struct {
	// FromMethod is the method (after aliasing) the entry applies to.
	FromMethod string
	// FromPath is the exact escaped path the entry applies to; "" = any.
	FromPath string
	// ToMethod is the method the request is processed as.
	ToMethod string
	// ToPath is the path the request is processed as; "" keeps the path.
	ToPath string
}

// MethodPolicy is policies.methods (RCNS §5.4) over a catalog. The zero
// value is the spec default: the embedded catalog, no legacy verbs,
// default aliases, every catalog method allowed, nothing disallowed, no
// redirects. A MethodPolicy must not be modified while in use; its
// methods are then safe for concurrent use.
type MethodPolicy struct {
	// Catalog is the method catalog; nil means DefaultCatalog().
	Catalog *Catalog
	// Legacy lists the legacy HTTP verbs admitted on the wire: nil, empty
	// or ["NONE"] admits none (default), ["*"] admits all five, otherwise
	// a subset of GET POST PUT DELETE PATCH. Anything else is a
	// configuration error.
	Legacy []string
	// Aliases maps a wire method to the method dispatch uses (single hop,
	// applied before the catalog check). Nil means the catalog's legacy
	// aliases (GET→FETCH …); an empty non-nil map disables aliasing.
	Aliases map[string]string
	// Allow is nil or ["*"] for every catalog method (default), else only
	// the listed methods plus the floor. Listed names that are not
	// catalog methods (nor legacy verbs) declare custom methods (OP-12).
	Allow []string
	// Custom declares further custom methods (the manifest's
	// custom_methods, OP-12), useful with Allow "*". With an Allow array
	// they are still subject to it.
	Custom []string
	// Disallow lists methods answered with 405 even when allowed. Names
	// that are not methods of this server are skipped (Warnings).
	Disallow []string
	// Redirects rewrite (method, path) after aliasing; the first matching
	// entry wins. Entries whose ToMethod is not a method of this server
	// are skipped (Warnings).
	Redirects []Redirect
}

func (p *MethodPolicy) catalog() *Catalog {
	if p == nil || p.Catalog == nil {
		return DefaultCatalog()
	}
	return p.Catalog
}

func (p *MethodPolicy) aliases() map[string]string {
	if p == nil || p.Aliases == nil {
		return p.catalog().legacy
	}
	return p.Aliases
}

// allowAll reports whether Allow is the "*" form.
func (p *MethodPolicy) allowAll() bool {
	return p == nil || p.Allow == nil || (len(p.Allow) == 1 && p.Allow[0] == "*")
}

// legacyAdmitted reports whether the legacy verb v is admitted.
func (p *MethodPolicy) legacyAdmitted(v string) bool {
	if p == nil || !IsLegacyVerb(v) {
		return false
	}
	for _, l := range p.Legacy {
		if l == "*" || l == v {
			return true
		}
	}
	return false
}

// isCustom reports whether name is a custom method: listed in Allow or
// Custom, lexically valid, not a catalog method and not a legacy verb.
func (p *MethodPolicy) isCustom(name string) bool {
	if p == nil || !ValidMethodToken(name) || IsLegacyVerb(name) || p.catalog().Has(name) {
		return false
	}
	if !p.allowAll() {
		for _, a := range p.Allow {
			if a == name {
				return true
			}
		}
	}
	for _, a := range p.Custom {
		if a == name {
			return true
		}
	}
	return false
}

// Validate reports configuration errors; the server must refuse to start
// on any of them (RCNS §5.4). It checks: Legacy values ("NONE" or "*"
// alone, else GET POST PUT DELETE PATCH); Allow, Custom and Disallow
// entries against the lexical rule ("*" only alone in Allow); alias
// sources and targets against the lexical rule, alias chains (A→B with B
// also an alias source) and cycles, alias targets that are neither
// catalog nor custom methods, aliases of floor methods; and redirects with
// bad method tokens or paths (FromPath must be a syntactically valid
// path, ToPath must pass CheckPath). Each error names the offending entry;
// all problems are joined.
func (p *MethodPolicy) Validate() error {
	if p == nil {
		return nil
	}
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("methods: "+format, args...))
	}
	for i, l := range p.Legacy {
		switch {
		case l == "NONE" || l == "*":
			if len(p.Legacy) != 1 {
				add("legacy[%d] %q must be the only entry", i, l)
			}
		case !IsLegacyVerb(l):
			add("legacy[%d] %q is not one of GET POST PUT DELETE PATCH, \"*\" or \"NONE\"", i, l)
		}
	}
	for i, a := range p.Allow {
		if a == "*" {
			if len(p.Allow) != 1 {
				add("allow[%d] \"*\" must be the only entry", i)
			}
			continue
		}
		if !ValidMethodToken(a) {
			add("allow[%d] %q does not match ^[A-Z]+$ with length 3..32", i, a)
		}
	}
	for i, a := range p.Custom {
		switch {
		case !ValidMethodToken(a):
			add("custom[%d] %q does not match ^[A-Z]+$ with length 3..32", i, a)
		case IsLegacyVerb(a):
			add("custom[%d] %q is a legacy HTTP verb; admit it with legacy instead", i, a)
		}
	}
	for i, d := range p.Disallow {
		if !ValidMethodToken(d) {
			add("disallow[%d] %q does not match ^[A-Z]+$ with length 3..32", i, d)
		}
	}
	if p.Aliases != nil {
		cat := p.catalog()
		srcs := make([]string, 0, len(p.Aliases))
		for k := range p.Aliases {
			srcs = append(srcs, k)
		}
		sort.Strings(srcs)
		for _, src := range srcs {
			dst := p.Aliases[src]
			switch {
			case !ValidMethodToken(src):
				add("alias %q→%q: source does not match ^[A-Z]+$ with length 3..32", src, dst)
			case !ValidMethodToken(dst):
				add("alias %s→%q: target does not match ^[A-Z]+$ with length 3..32", src, dst)
			case src == dst:
				add("alias %s→%s is a cycle", src, dst)
			case cat.IsFloor(src):
				add("alias %s→%s: floor method %s cannot be aliased", src, dst, src)
			default:
				if next, ok := p.Aliases[dst]; ok {
					if aliasCycle(p.Aliases, src) {
						add("alias %s→%s is part of a cycle", src, dst)
					} else {
						add("alias chain %s→%s→%s: aliases are single-hop", src, dst, next)
					}
				} else if !cat.Has(dst) && !p.isCustom(dst) {
					add("alias %s→%s: %s is neither a catalog method nor a custom method", src, dst, dst)
				}
			}
		}
	}
	for i, r := range p.Redirects {
		if !ValidMethodToken(r.FromMethod) {
			add("redirects[%d] from_method %q does not match ^[A-Z]+$ with length 3..32", i, r.FromMethod)
		}
		if !ValidMethodToken(r.ToMethod) {
			add("redirects[%d] to_method %q does not match ^[A-Z]+$ with length 3..32", i, r.ToMethod)
		}
		if r.FromPath != "" {
			if _, err := parseTemplate(r.FromPath, templateRaw, nil); err != nil || strings.Contains(r.FromPath, "{") {
				add("redirects[%d] from_path %q is not a valid path", i, r.FromPath)
			}
		}
		if r.ToPath != "" {
			if ref := p.CheckPath(r.ToPath); ref != nil {
				add("redirects[%d] to_path %q: %s", i, r.ToPath, ref.Explanation)
			}
		}
	}
	return errors.Join(errs...)
}

// aliasCycle reports whether following aliases from start returns to it.
func aliasCycle(aliases map[string]string, start string) bool {
	cur := start
	for range len(aliases) {
		next, ok := aliases[cur]
		if !ok {
			return false
		}
		if next == start {
			return true
		}
		cur = next
	}
	return false
}

// Warnings lists entries that are not errors but are skipped: Disallow
// entries and redirect to_method values naming methods unknown to this
// server (e.g. removed from the loaded catalog, RCNS §5.4 "skipped with a
// warning"), and redirect from_method values that can never match. The
// caller logs them at start.
func (p *MethodPolicy) Warnings() []string {
	if p == nil {
		return nil
	}
	var out []string
	for i, d := range p.Disallow {
		if ValidMethodToken(d) && !p.known(d) {
			out = append(out, fmt.Sprintf("methods: disallow[%d] %q is not a method of this server; skipped", i, d))
		}
	}
	for i, r := range p.Redirects {
		if ValidMethodToken(r.ToMethod) && !p.known(r.ToMethod) {
			out = append(out, fmt.Sprintf("methods: redirects[%d] to_method %q is not a method of this server; redirect skipped", i, r.ToMethod))
		}
		if ValidMethodToken(r.FromMethod) && !p.known(r.FromMethod) {
			out = append(out, fmt.Sprintf("methods: redirects[%d] from_method %q is not a method of this server; it never matches", i, r.FromMethod))
		}
	}
	for i, l := range p.Legacy {
		if IsLegacyVerb(l) || l == "*" {
			for _, v := range legacyVerbs {
				if (l == "*" || l == v) && p.aliases()[v] == "" {
					out = append(out, fmt.Sprintf("methods: legacy[%d] admits %s without an alias; it is dispatched as %s", i, v, v))
				}
			}
		}
	}
	return out
}

// known reports whether name can be the method dispatch uses: a catalog
// or custom method, or an admitted legacy verb.
func (p *MethodPolicy) known(name string) bool {
	return p.IsMethod(name) || p.legacyAdmitted(name)
}

// ResolvedMethod is the outcome of ResolveMethod.
type ResolvedMethod struct {
	// Method is the method dispatch uses (after alias).
	Method string
	// Requested is the wire method when an alias was applied (recorded as
	// requested_method), else "".
	Requested string
	// Info is the catalog entry when Method is a catalog method, nil for
	// custom methods and unaliased legacy verbs. Use it for
	// AGTP-Catalog-Warning. It is the catalog's own entry, shared by
	// every resolution: read it, never modify it (Catalog.Lookup gives
	// a copy).
	Info *MethodInfo
}

// ResolveMethod resolves a wire method per RCNS §10 step 2 in OP-36
// order: a legacy verb (GET POST PUT DELETE PATCH) not admitted by Legacy
// → 459 "legacy-method-not-enabled"; a token failing the lexical rule →
// 459 "invalid-method-token"; then the alias (single hop) is applied; a
// result that is neither a catalog method, a custom method nor an admitted
// legacy verb → 459 "method-not-in-catalog". Every 459 carries Fields
// {"method": wire, "catalog_version": version}. A floor method is never
// refused nor aliased (RCNS §5.1). Deprecated catalog methods are
// resolved (RCNS §5.2).
func (p *MethodPolicy) ResolveMethod(wire string) (ResolvedMethod, *Refusal) {
	cat := p.catalog()
	refuse := func(reason, expl string) (ResolvedMethod, *Refusal) {
		return ResolvedMethod{}, &Refusal{
			Status:      StatusMethodViolation,
			Reason:      reason,
			Explanation: expl,
			Fields:      map[string]any{"method": wire, "catalog_version": cat.Version()},
		}
	}
	if cat.IsFloor(wire) {
		info, _ := cat.lookupShared(wire)
		return ResolvedMethod{Method: wire, Info: info}, nil
	}
	if IsLegacyVerb(wire) && !p.legacyAdmitted(wire) {
		instead := "an AGTP method from catalog " + cat.Version()
		if m := cat.LegacyAliases()[wire]; m != "" {
			instead = m + ", its AGTP method (catalog " + cat.Version() + ")"
		}
		return refuse("legacy-method-not-enabled",
			fmt.Sprintf("Legacy HTTP method %s is not enabled on this server; use %s instead (every method: %s).", wire, instead, MethodsDoc))
	}
	if !ValidMethodToken(wire) {
		return refuse("invalid-method-token",
			fmt.Sprintf("Method %s is not a valid AGTP method token (3 to 32 uppercase ASCII letters).", quote(wire)))
	}
	res := ResolvedMethod{Method: wire}
	if target, ok := p.aliases()[wire]; ok && target != wire {
		res.Method, res.Requested = target, wire
	}
	if info, ok := cat.lookupShared(res.Method); ok {
		res.Info = info
		return res, nil
	}
	if p.isCustom(res.Method) || p.legacyAdmitted(res.Method) {
		return res, nil
	}
	if res.Requested != "" {
		return refuse("method-not-in-catalog",
			fmt.Sprintf("Method %s is aliased to %s, which is not in AGTP method catalog %s nor a custom method of this server (%s).", wire, quote(res.Method), cat.Version(), CatalogRule))
	}
	return refuse("method-not-in-catalog",
		fmt.Sprintf("Method %s is not in AGTP method catalog %s and is not a custom method of this server (%s).", wire, cat.Version(), CatalogRule))
}

// ApplyRedirects returns the (method, path) pair to process after
// policies.methods.redirects: the first entry whose FromMethod equals
// method and whose FromPath is empty or equals path wins; an empty ToPath
// keeps path. Entries whose ToMethod is not a method of this server are
// skipped. Without a match the inputs are returned unchanged. RCNS §5.4,
// §10 step 3.
func (p *MethodPolicy) ApplyRedirects(method, path string) (string, string) {
	if r, ok := p.redirectFor(method, path); ok {
		if r.ToPath != "" {
			path = r.ToPath
		}
		return r.ToMethod, path
	}
	return method, path
}

func (p *MethodPolicy) redirectFor(method, path string) (Redirect, bool) {
	if p == nil {
		return Redirect{}, false
	}
	for _, r := range p.Redirects {
		if r.FromMethod != method || (r.FromPath != "" && r.FromPath != path) {
			continue
		}
		if !ValidMethodToken(r.ToMethod) || !p.known(r.ToMethod) {
			continue
		}
		return r, true
	}
	return Redirect{}, false
}

// Disallowed reports whether method must be answered with 405: it is in
// Disallow, or Allow is an array that does not list it (floor methods are
// never disallowed by Allow, but can be by Disallow). RCNS §5.4, §10
// step 5.
func (p *MethodPolicy) Disallowed(method string) bool {
	if p == nil {
		return false
	}
	for _, d := range p.Disallow {
		if d == method {
			return true
		}
	}
	if p.allowAll() || p.catalog().IsFloor(method) {
		return false
	}
	for _, a := range p.Allow {
		if a == method {
			return false
		}
	}
	return true
}

// IsMethod reports whether name is a method of this server: a catalog
// method or a custom method (OP-12). Legacy verbs are not methods here.
func (p *MethodPolicy) IsMethod(name string) bool {
	return p.catalog().Has(name) || p.isCustom(name)
}

// CustomMethods returns the custom methods (Allow and Custom entries that
// are lexically valid and neither catalog methods nor legacy verbs),
// sorted and without duplicates; the manifest's custom_methods. RCNS
// §5.3, OP-12.
func (p *MethodPolicy) CustomMethods() []string {
	out := []string{}
	if p == nil {
		return out
	}
	seen := map[string]bool{}
	var cands []string
	if !p.allowAll() {
		cands = append(cands, p.Allow...)
	}
	cands = append(cands, p.Custom...)
	for _, a := range cands {
		if !seen[a] && p.isCustom(a) {
			seen[a] = true
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// RedirectsFor returns method→method for the redirects that apply to path
// (FromPath empty or equal to path; the first entry per FromMethod wins,
// as in ApplyRedirects): the 405 body's redirects_for_path. It may be
// empty and is never nil. RCNS §5.5.
func (p *MethodPolicy) RedirectsFor(path string) map[string]string {
	out := map[string]string{}
	if p == nil {
		return out
	}
	for _, r := range p.Redirects {
		if _, done := out[r.FromMethod]; done {
			continue
		}
		if rr, ok := p.redirectFor(r.FromMethod, path); ok {
			out[r.FromMethod] = rr.ToMethod
		}
	}
	return out
}
