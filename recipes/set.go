package recipes

import (
	"fmt"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// Set is every Tier B endpoint and Tier C recipe of one configuration,
// validated and compiled. It is immutable after Load.
type Set struct {
	// Endpoints in load order (files sorted by name within each path).
	Endpoints []*Endpoint
	// Recipes in load order; Match tries them in this order.
	Recipes []*Recipe

	public *policy.RouteTable[*Endpoint] // endpoints agents may call
	all    map[string]*Endpoint          // "METHOD path-template" → endpoint (steps)
}

// Load reads endpoint and recipe documents from the given paths (files
// or directories), validates them against the schemas in recipes/schema
// and builds the Set. Every error names the file, line and JSON pointer.
// Spec §7, §8.4, §13.
func Load(endpointPaths, recipePaths []string, mp *policy.MethodPolicy, upstreams map[string]*Upstream) (*Set, error) {
	s := &Set{public: &policy.RouteTable[*Endpoint]{}, all: map[string]*Endpoint{}}
	eds, err := schema.LoadPaths(endpointPaths, schema.KindEndpoint)
	if err != nil {
		return nil, err
	}
	for _, d := range eds {
		e, err := BuildEndpoint(d, mp, upstreams)
		if err != nil {
			return nil, err
		}
		key := e.Method + " " + e.Path
		if prev, dup := s.all[key]; dup {
			return nil, d.Errorf("/path", "endpoint %s is already declared in %s", key, prev.File)
		}
		s.all[key] = e
		if !e.Internal {
			if err := s.public.Add(e.Method, e.Template, e); err != nil {
				return nil, d.Errorf("/path", "%v", err)
			}
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	rds, err := schema.LoadPaths(recipePaths, schema.KindRecipe)
	if err != nil {
		return nil, err
	}
	seen := map[string]string{}
	for _, d := range rds {
		r, err := BuildRecipe(d, mp, s.lookup)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[r.Name]; dup {
			return nil, d.Errorf("/name", "recipe %q is already declared in %s", r.Name, prev)
		}
		seen[r.Name] = d.File
		if r.PathExact != "" {
			if m, ok := s.public.Lookup(r.Method, r.PathExact); ok {
				return nil, d.Errorf("/pattern", "pattern %s %s is served by the Tier B endpoint %s %s; a recipe only synthesizes unregistered pairs", r.Method, r.PathExact, m.Value.Method, m.Value.Path)
			}
		}
		s.Recipes = append(s.Recipes, r)
	}
	return s, nil
}

func (s *Set) lookup(method, path string) (*Endpoint, bool) {
	e, ok := s.all[method+" "+path]
	return e, ok
}

// Route finds the public Tier B endpoint serving (method, path) and the
// template parameters (spec §6 matching).
func (s *Set) Route(method, path string) (*Endpoint, map[string]string, bool) {
	m, ok := s.public.Lookup(method, path)
	if !ok {
		return nil, nil, false
	}
	return m.Value, m.Params, true
}

// MethodsForPath lists the methods of public endpoints whose template
// matches path (for 405 bodies).
func (s *Set) MethodsForPath(path string) []string { return s.public.MethodsForPath(path) }

// Match returns the first recipe whose pattern matches (method, path),
// or nil (spec §11.2 step 4).
func (s *Set) Match(method, path string) *Recipe {
	for _, r := range s.Recipes {
		if r.Matches(method, path) {
			return r
		}
	}
	return nil
}

// CheckDrift refuses a recipe that has the name and version of a
// previously loaded or captured recipe but different content
// (ARCHITECTURE.md "contract_hash"). known maps "name@version" to the
// content hash seen before.
func (s *Set) CheckDrift(known map[string]string) error {
	for _, r := range s.Recipes {
		if h, ok := known[r.Name+"@"+r.Version]; ok && h != r.ContentHash {
			return fmt.Errorf("%s: recipe %q version %q changed content but kept its version; a recipe is never changed in place: bump its version", r.File, r.Name, r.Version)
		}
	}
	return nil
}
