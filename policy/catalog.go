package policy

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// MethodInfo is one method of the catalog (RCNS §5.2).
type MethodInfo struct {
	// Name is the method name, e.g. "FETCH".
	Name string
	// Categories are the catalog categories of the method, e.g.
	// ["retrieval"].
	Categories []string
	// DeprecatedIn is the catalog version that deprecated the method, ""
	// when it is not deprecated.
	DeprecatedIn string
	// RemovedIn is the catalog version that removes the method, "" when
	// none is announced.
	RemovedIn string
	// Successor is the method replacing a deprecated one, "" when none.
	Successor string
}

// Deprecated reports whether the catalog marks the method deprecated
// (RCNS §4 AGTP-Catalog-Warning).
func (m MethodInfo) Deprecated() bool { return m.DeprecatedIn != "" }

// CatalogWarning returns the AGTP-Catalog-Warning header value for a
// deprecated method, "deprecated; successor=NAME; removed_in=VERSION"
// (parts without a value left out), or "" when the method is not
// deprecated. RCNS §4.
func (m MethodInfo) CatalogWarning() string {
	if !m.Deprecated() {
		return ""
	}
	s := "deprecated"
	if m.Successor != "" {
		s += "; successor=" + m.Successor
	}
	if m.RemovedIn != "" {
		s += "; removed_in=" + m.RemovedIn
	}
	return s
}

// Catalog is a parsed, validated AGTP method catalog: its version, the
// 18-method floor, the legacy verb aliases and every method with its
// categories (RCNS §5.1, §5.2). A Catalog is immutable and safe for
// concurrent use.
type Catalog struct {
	version string
	methods map[string]MethodInfo
	// shared holds each entry of methods once more, behind a pointer
	// ResolveMethod hands out (ResolvedMethod.Info): read-only.
	shared     map[string]*MethodInfo
	floor      map[string]bool
	legacy     map[string]string
	categories []string
	names      []string
}

// catalogVerb is one method entry of the catalog file.
type catalogVerb struct {
	Categories   []string `json:"categories"`
	Description  string   `json:"description,omitempty"`
	DeprecatedIn string   `json:"deprecated_in,omitempty"`
	RemovedIn    string   `json:"removed_in,omitempty"`
	Successor    string   `json:"successor,omitempty"`
}

// catalogFile is the on-disk shape of a catalog (api-01 §4, canonical
// methods.json): "verbs" maps each name to an object. "methods" is
// accepted instead of "verbs", with either objects or bare category
// arrays as values (the shape of spec/catalog-1.0.0.json).
type catalogFile struct {
	Version    string                     `json:"version"`
	Embedded   []string                   `json:"embedded"`
	Legacy     map[string]string          `json:"legacy"`
	Categories []string                   `json:"categories"`
	Verbs      map[string]json.RawMessage `json:"verbs"`
	Methods    map[string]json.RawMessage `json:"methods"`
}

// LoadCatalog parses and validates a catalog document (JSON with keys
// "version", "embedded" (the floor), "legacy" (verb→alias), "categories"
// and "verbs" (name→{"categories", optional "deprecated_in",
// "removed_in", "successor"}; descriptions are ignored)).
//
// It returns an error naming the offending entry when the version is
// empty, a method name fails the lexical rule (^[A-Z]+$, 3..32 — RCNS
// §5.2), a floor method or legacy alias target is not a catalog method, a
// legacy key is not one of GET POST PUT DELETE PATCH, a method names an
// undeclared category, or a successor is not a catalog method.
func LoadCatalog(data []byte) (*Catalog, error) {
	var f catalogFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if f.Version == "" {
		return nil, errors.New("catalog: missing \"version\"")
	}
	raw := f.Verbs
	if raw == nil {
		raw = f.Methods
	} else if f.Methods != nil {
		return nil, errors.New("catalog: both \"verbs\" and \"methods\" present")
	}
	if len(raw) == 0 {
		return nil, errors.New("catalog: no methods (\"verbs\" is missing or empty)")
	}
	c := &Catalog{
		version: f.Version,
		methods: make(map[string]MethodInfo, len(raw)),
		floor:   make(map[string]bool, len(f.Embedded)),
		legacy:  make(map[string]string, len(f.Legacy)),
	}
	declared := make(map[string]bool, len(f.Categories))
	for _, cat := range f.Categories {
		if cat == "" {
			return nil, errors.New("catalog: empty category name in \"categories\"")
		}
		if declared[cat] {
			return nil, fmt.Errorf("catalog: category %q declared twice", cat)
		}
		declared[cat] = true
		c.categories = append(c.categories, cat)
	}
	sort.Strings(c.categories)
	for name, msg := range raw {
		if !ValidMethodToken(name) {
			return nil, fmt.Errorf("catalog: method %q does not match ^[A-Z]+$ with length 3..32", name)
		}
		if IsLegacyVerb(name) {
			return nil, fmt.Errorf("catalog: method %q is a legacy HTTP verb; list it under \"legacy\"", name)
		}
		var v catalogVerb
		if err := json.Unmarshal(msg, &v.Categories); err != nil {
			v = catalogVerb{}
			if err := json.Unmarshal(msg, &v); err != nil {
				return nil, fmt.Errorf("catalog: method %q: %w", name, err)
			}
		}
		for _, cat := range v.Categories {
			if len(declared) > 0 && !declared[cat] {
				return nil, fmt.Errorf("catalog: method %q: category %q is not declared in \"categories\"", name, cat)
			}
		}
		if v.RemovedIn != "" && v.DeprecatedIn == "" {
			return nil, fmt.Errorf("catalog: method %q has removed_in without deprecated_in", name)
		}
		c.methods[name] = MethodInfo{
			Name:         name,
			Categories:   slices.Clone(v.Categories),
			DeprecatedIn: v.DeprecatedIn,
			RemovedIn:    v.RemovedIn,
			Successor:    v.Successor,
		}
		c.names = append(c.names, name)
	}
	sort.Strings(c.names)
	for _, name := range c.names {
		if s := c.methods[name].Successor; s != "" {
			if _, ok := c.methods[s]; !ok {
				return nil, fmt.Errorf("catalog: method %q: successor %q is not a catalog method", name, s)
			}
			if s == name {
				return nil, fmt.Errorf("catalog: method %q names itself as successor", name)
			}
		}
	}
	for _, name := range f.Embedded {
		if _, ok := c.methods[name]; !ok {
			return nil, fmt.Errorf("catalog: floor method %q is not a catalog method", name)
		}
		c.floor[name] = true
	}
	for verb, target := range f.Legacy {
		if !IsLegacyVerb(verb) {
			return nil, fmt.Errorf("catalog: legacy verb %q is not one of GET POST PUT DELETE PATCH", verb)
		}
		if _, ok := c.methods[target]; !ok {
			return nil, fmt.Errorf("catalog: legacy alias %s→%s: %q is not a catalog method", verb, target, target)
		}
		c.legacy[verb] = target
	}
	c.shared = make(map[string]*MethodInfo, len(c.methods))
	for name, m := range c.methods {
		c.shared[name] = &m
	}
	return c, nil
}

//go:embed catalog/agtp-methods-1.0.0.json
var defaultCatalogJSON []byte

var defaultCatalog = sync.OnceValue(func() *Catalog {
	c, err := LoadCatalog(defaultCatalogJSON)
	if err != nil {
		panic("policy: embedded catalog is invalid: " + err.Error())
	}
	return c
})

// DefaultCatalog returns the embedded AGTP method catalog 1.0.0 (425
// methods, 18 floor methods, five legacy aliases), parsed once. RCNS
// §5.2.
func DefaultCatalog() *Catalog { return defaultCatalog() }

// DefaultCatalogJSON returns a copy of the embedded catalog document, for
// publishing or for writing an operator catalog derived from it.
func DefaultCatalogJSON() []byte { return slices.Clone(defaultCatalogJSON) }

// Version returns the catalog version, e.g. "1.0.0" (the manifest's
// catalog_version and the 459 body's catalog_version, RCNS §5.2).
func (c *Catalog) Version() string { return c.version }

// Lookup returns the catalog entry for name (exact, case-sensitive) and
// whether it exists. The returned Categories slice is a copy.
func (c *Catalog) Lookup(name string) (MethodInfo, bool) {
	m, ok := c.methods[name]
	if !ok {
		return MethodInfo{}, false
	}
	m.Categories = slices.Clone(m.Categories)
	return m, true
}

// lookupShared is Lookup without the copy: the catalog's own entry,
// which the caller must not modify (ResolvedMethod.Info).
func (c *Catalog) lookupShared(name string) (*MethodInfo, bool) {
	m, ok := c.shared[name]
	return m, ok
}

// Has reports whether name (exact, case-sensitive) is a catalog method.
func (c *Catalog) Has(name string) bool {
	_, ok := c.methods[name]
	return ok
}

// IsFloor reports whether name is one of the catalog's floor ("embedded")
// methods, which a server never answers with 459. RCNS §5.1.
func (c *Catalog) IsFloor(name string) bool { return c.floor[name] }

// Floor returns the floor methods, sorted. RCNS §5.1.
func (c *Catalog) Floor() []string {
	out := make([]string, 0, len(c.floor))
	for name := range c.floor {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// LegacyAliases returns a copy of the catalog's legacy verb → preferred
// method map (GET→FETCH, POST→CREATE, PUT→REPLACE, DELETE→REMOVE,
// PATCH→MODIFY for 1.0.0), the default of policies.methods.aliases.
// RCNS §5.4.
func (c *Catalog) LegacyAliases() map[string]string {
	out := make(map[string]string, len(c.legacy))
	for k, v := range c.legacy {
		out[k] = v
	}
	return out
}

// Categories returns the declared categories, sorted.
func (c *Catalog) Categories() []string { return slices.Clone(c.categories) }

// Names returns every catalog method name, sorted.
func (c *Catalog) Names() []string { return slices.Clone(c.names) }

// Len returns the number of catalog methods.
func (c *Catalog) Len() int { return len(c.methods) }
