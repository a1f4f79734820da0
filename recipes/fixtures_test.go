package recipes

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

func methodPolicy() *policy.MethodPolicy {
	return &policy.MethodPolicy{Catalog: policy.DefaultCatalog()}
}

const upstreamErrors = `[upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error, not_found]`

var upstreamParam = regexp.MustCompile(`\{(\w+)\}`)

// endpointDoc renders a Tier B endpoint document over upstream "up". Its
// input_schema requires the upstream path's {parameters}, as the load
// does (checkUpstreamParams).
func endpointDoc(method, path, upMethod, upPath, extra string) string {
	var required []string
	for _, m := range upstreamParam.FindAllStringSubmatch(upPath, -1) {
		required = append(required, m[1])
	}
	return fmt.Sprintf(`method: %s
path: %s
description: test endpoint
semantic: {intent: Do it., actor: agent, outcome: Done., capability: retrieval, confidence: 1, impact: informational, is_idempotent: true}
input_schema:
  type: object
  additionalProperties: false
  required: [%s]
  properties: {id: {type: string}, name: {type: string}, n: {type: integer}}
output_schema: {type: object}
errors: %s
required_scopes: [t:read]
external_service:
  upstream: up
  method: %s
  path: %s
%s`, method, path, strings.Join(required, ", "), upstreamErrors, upMethod, upPath, extra)
}

func buildEndpoint(t *testing.T, src string, up *Upstream) *Endpoint {
	t.Helper()
	doc, err := schema.Parse("ep.yaml", []byte(src), schema.KindEndpoint)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	e, err := BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return e
}

func newUpstream(t testing.TB, url string) *Upstream {
	t.Helper()
	up, err := NewUpstream("up", url, UpstreamOptions{Timeout: 2 * time.Second, MaxResponseBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	return up
}

// barrier answers only once n requests are in flight together, proving
// that steps run concurrently without any timing assumption.
type barrier struct {
	n       int
	mu      sync.Mutex
	waiting int
	release chan struct{}
	calls   atomic.Int32
}

func (b *barrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.calls.Add(1)
	b.mu.Lock()
	b.waiting++
	if b.waiting == b.n {
		close(b.release)
	}
	b.mu.Unlock()
	select {
	case <-b.release:
		fmt.Fprintf(w, `{"id":%q}`, strings.TrimPrefix(r.URL.Path, "/"))
	case <-time.After(5 * time.Second):
		w.WriteHeader(504)
	}
}

const recipeHead = `name: fan
version: "1"
description: fan out
required_scopes: [t:write]
pattern: {method: BOOK, path_exact: /trip}
endpoint:
  description: fan out
  semantic: {intent: Do it., actor: agent, outcome: Done., capability: retrieval, confidence: 1, impact: informational, is_idempotent: true}
  input_schema: {type: object, additionalProperties: false, properties: {id: {type: string}}}
  output_schema: {type: object}
  errors: [composition_failed]
`

func buildSet(t testing.TB, up *Upstream, recipe string, endpoints ...string) (*Recipe, map[string]*Endpoint) {
	t.Helper()
	eps := map[string]*Endpoint{}
	for i, src := range endpoints {
		doc, err := schema.Parse(fmt.Sprintf("ep%d.yaml", i), []byte(src), schema.KindEndpoint)
		if err != nil {
			t.Fatal(err)
		}
		e, err := BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
		if err != nil {
			t.Fatal(err)
		}
		eps[e.Method+" "+e.Path] = e
	}
	doc, err := schema.Parse("recipe.yaml", []byte(recipe), schema.KindRecipe)
	if err != nil {
		t.Fatal(err)
	}
	r, err := BuildRecipe(doc, methodPolicy(), func(m, p string) (*Endpoint, bool) { e, ok := eps[m+" "+p]; return e, ok })
	if err != nil {
		t.Fatal(err)
	}
	return r, eps
}

// tryBuildRecipe builds the endpoints and returns BuildRecipe's error.
func tryBuildRecipe(t *testing.T, up *Upstream, recipe string, endpoints ...string) error {
	t.Helper()
	eps := map[string]*Endpoint{}
	for _, src := range endpoints {
		e := buildEndpoint(t, src, up)
		eps[e.Method+" "+e.Path] = e
	}
	doc, err := schema.Parse("recipe.yaml", []byte(recipe), schema.KindRecipe)
	if err != nil {
		return err
	}
	_, err = BuildRecipe(doc, methodPolicy(), func(m, p string) (*Endpoint, bool) { e, ok := eps[m+" "+p]; return e, ok })
	return err
}

// runaway is a jq expression that runs for hours unless its context
// stops it (constant memory: a reduction, not an array).
const runaway = `(reduce range(1e12) as $i (0; . + 1))`

// endpointList is the endpoints of a buildSet map, for NewRestorer.
func endpointList(eps map[string]*Endpoint) []*Endpoint {
	out := make([]*Endpoint, 0, len(eps))
	for _, e := range eps {
		out = append(out, e)
	}
	return out
}
