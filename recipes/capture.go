package recipes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/gowebpki/jcs"

	"github.com/caddy-rcns/caddy-rcns/internal/closecache"
	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// A captured plan is a contract's recipe in portable form: the recipe
// document and the documents of the Tier B endpoints its steps call, as
// they were loaded (schema.Document.Value) but without each endpoint's
// call settings (external_service.headers and timeout_seconds, see
// callSettings): a contract stores no credential, and a step sends the
// headers and waits the timeout of the endpoint the running
// configuration declares under the same (method, path), as its upstream
// resolves by name (cases/06). A node that did not load those files, or
// loads other versions of them, rebuilds the same plan from it against
// its own upstreams, endpoints and method policy (Restorer), so a
// contract runs what was captured wherever it is presented
// (ARCHITECTURE.md "Beyond one machine"); a step whose endpoint that
// node does not declare with the captured terms (stepTerms) is
// unavailable there (Recipe.UnavailableEndpoints).
//
// The serialized form is the RFC 8785 (JCS) canonical JSON of
//
//	{"version":2,"recipe":<recipe document>,"endpoints":[<endpoint document>…]}
//
// with the endpoints sorted by "METHOD path" and each listed once; its
// hash (PlanHash) is the lowercase hex SHA-256 of those bytes. Version 1
// (before callSettings were left out) held the endpoints' headers as
// written; Restore still reads it, ignoring them.

// planVersion is the captured-plan format version; legacyPlanVersion
// is the one that held the endpoints' call settings.
const (
	planVersion       = 2
	legacyPlanVersion = 1
)

// callSettings are the members of an endpoint's external_service that
// are the operator's, not the contract's: a captured plan leaves them
// out, and a step takes them from the running configuration's endpoint.
//
//   - headers: for the static credential policy they are the upstream
//     credential (docs/configuration.md "Upstream credentials"); a
//     rotated or added header must reach every live contract at the
//     next reload, and a contract stores no credential.
//   - timeout_seconds: how long the gateway waits for the upstream is
//     an operational bound, as the upstream's own timeout (which the
//     step already takes from the running configuration) is; it changes
//     nothing the agent agreed to.
var callSettings = []string{"headers", "timeout_seconds"}

// notStepTerms are the top-level members of an endpoint document that
// do not change what a recipe step does, so a change to them leaves a
// live contract's step bound to the endpoint (stepTerms):
//
//   - description: text for DISCOVER and the manifest;
//   - internal: whether agents may call the endpoint directly (steps
//     always may);
//   - max_result_bytes: the MCP door's bound on the endpoint's own tool;
//   - deprecated: the endpoint's deprecation notice to its callers.
//
// Everything else is what the contract agreed to and stays as captured:
// method and path (the step's key), semantic (impact and idempotency
// decide retries and the recipe's impact), input_schema and
// output_schema, errors, required_scopes (part of the contract's scope
// set), and in external_service the upstream name, method, path, query,
// body, input_transform, output_transform and error_map (the call the
// step makes and how its answer maps). A reload that changes any of
// these makes the step unavailable to contracts captured before.
var notStepTerms = []string{"description", "internal", "max_result_bytes", "deprecated"}

// withoutCallSettings returns doc (an endpoint document's JSON value)
// without its callSettings; doc itself is not modified. A value of
// another shape is returned as is (the schema refuses it later).
func withoutCallSettings(doc any) any {
	m, ok := doc.(map[string]any)
	if !ok {
		return doc
	}
	svc, ok := m["external_service"].(map[string]any)
	if !ok {
		return doc
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	s := make(map[string]any, len(svc))
	for k, v := range svc {
		s[k] = v
	}
	for _, k := range callSettings {
		delete(s, k)
	}
	out["external_service"] = s
	return out
}

// stepTerms is the canonical JSON (RFC 8785) of what an endpoint
// document fixes for a recipe step: the document without its
// callSettings and notStepTerms. Two documents with the same step terms
// make the same call and map it the same way.
func stepTerms(doc any) ([]byte, error) {
	v := withoutCallSettings(doc)
	if m, ok := v.(map[string]any); ok {
		c := make(map[string]any, len(m))
		for k, x := range m {
			c[k] = x
		}
		for _, k := range notStepTerms {
			delete(c, k)
		}
		v = c
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

// MaxPlanBytes bounds a captured plan given to Restorer.Restore (bytes):
// 1 MiB, far above any recipe the schemas admit in practice.
const MaxPlanBytes = 1 << 20

// capturedPlan is the serialized form.
type capturedPlan struct {
	Version   int   `json:"version"`
	Recipe    any   `json:"recipe"`
	Endpoints []any `json:"endpoints"`
}

// Plan returns the recipe's captured plan (the canonical JSON above)
// and its hash, computed once. It fails only for a Recipe not built by
// BuildRecipe (no document) or documents JSON cannot encode.
func (r *Recipe) Plan() (data []byte, hash string, err error) {
	r.planOnce.Do(func() {
		if r.doc == nil {
			r.planErr = fmt.Errorf("recipe %q has no captured document", r.Name)
			return
		}
		cp := capturedPlan{Version: planVersion, Recipe: r.doc}
		seen := map[string]*Endpoint{}
		for _, s := range r.Steps {
			if s.Endpoint.doc == nil {
				r.planErr = fmt.Errorf("recipe %q: step %q: endpoint %s %s has no captured document", r.Name, s.Name, s.Endpoint.Method, s.Endpoint.Path)
				return
			}
			seen[s.Endpoint.Method+" "+s.Endpoint.Path] = s.Endpoint
		}
		keys := make([]string, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			cp.Endpoints = append(cp.Endpoints, withoutCallSettings(seen[k].doc))
		}
		raw, err := json.Marshal(cp)
		if err != nil {
			r.planErr = err
			return
		}
		if r.plan, err = jcs.Transform(raw); err != nil {
			r.planErr = err
			return
		}
		r.planHash = PlanHash(r.plan)
	})
	return r.plan, r.planHash, r.planErr
}

// PlanHash is the lowercase hex SHA-256 of a captured plan's bytes.
func PlanHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ErrPlan is wrapped by every error Restorer.Restore returns for a plan
// that cannot be rebuilt here (malformed, too large, a hash that does not
// match, a document that fails its schema, or a method this node does
// not serve). An upstream or a step endpoint this node does not declare
// is not one: see Recipe.MissingUpstreams and UnavailableEndpoints.
var ErrPlan = errors.New("captured plan cannot be restored")

// DefaultMaxPlans is the number of compiled plans a Restorer keeps when
// given 0.
const DefaultMaxPlans = 1024

// Restorer rebuilds captured plans into runnable recipes against one
// configuration (its method policy, upstream clients and Tier B
// endpoints), keeping the compiled ones in a bounded cache keyed by plan
// hash (ristretto/v2, cost 1 per plan, at most maxPlans). The plans of
// the recipes this configuration loaded resolve to those recipes without
// a rebuild. Build a new Restorer on each config load: its recipes hold
// that load's upstream clients and endpoints' call settings. Safe for
// concurrent use; Close releases the cache.
type Restorer struct {
	mp        *policy.MethodPolicy
	upstreams map[string]*Upstream
	endpoints map[string]currentEndpoint // "METHOD path" → the configuration's endpoint
	known     map[string]*Recipe
	cache     *closecache.Cache[string, *Recipe]
}

// currentEndpoint is an endpoint of the Restorer's configuration and its
// stepTerms (nil when they could not be computed: never bound).
type currentEndpoint struct {
	e     *Endpoint
	terms []byte
}

// NewRestorer returns a Restorer for the configuration (mp, upstreams,
// endpoints: every Tier B endpoint it loaded, internal ones included)
// whose loaded recipes are known, keeping at most maxPlans rebuilt plans
// (0 means DefaultMaxPlans; negative is an error).
func NewRestorer(mp *policy.MethodPolicy, upstreams map[string]*Upstream, endpoints []*Endpoint, known []*Recipe, maxPlans int) (*Restorer, error) {
	switch {
	case maxPlans == 0:
		maxPlans = DefaultMaxPlans
	case maxPlans < 0:
		return nil, fmt.Errorf("recipes: max plans %d, want ≥ 0", maxPlans)
	}
	cache, err := ristretto.NewCache(&ristretto.Config[string, *Recipe]{
		NumCounters:        10 * int64(maxPlans),
		MaxCost:            int64(maxPlans),
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("recipes: plan cache: %w", err)
	}
	rs := &Restorer{mp: mp, upstreams: upstreams, endpoints: map[string]currentEndpoint{}, known: map[string]*Recipe{}, cache: closecache.New(cache)}
	for _, e := range endpoints {
		ce := currentEndpoint{e: e}
		if e.doc != nil {
			ce.terms, _ = stepTerms(e.doc)
		}
		rs.endpoints[e.Method+" "+e.Path] = ce
	}
	for _, r := range known {
		_, h, err := r.Plan()
		if err != nil {
			cache.Close()
			return nil, err
		}
		rs.known[h] = r
	}
	return rs, nil
}

// Close releases the cache: detached (later calls rebuild plans
// uncached) and closed once no call holds it (closecache), so that a
// request of the old configuration still running does not meet
// ristretto's Close.
// Safe to call more than once.
func (rs *Restorer) Close() { rs.cache.Close() }

// Cached returns the recipe whose plan hash is hash when it is loaded
// here or already rebuilt, without needing the plan's bytes.
func (rs *Restorer) Cached(hash string) (*Recipe, bool) {
	if r, ok := rs.known[hash]; ok {
		return r, true
	}
	return rs.cache.Get(hash)
}

// rawPlan is a captured plan as read back, its documents undecoded.
type rawPlan struct {
	Version   int               `json:"version"`
	Recipe    json.RawMessage   `json:"recipe"`
	Endpoints []json.RawMessage `json:"endpoints"`
}

// Restore returns the recipe of the captured plan data whose hash is
// hash: a loaded or cached one, else one rebuilt from the documents
// (each validated against its schema, the endpoints built against this
// configuration's upstreams and method policy, the recipe built over
// those endpoints only) and cached. Each step is bound to the endpoint
// this configuration declares under the same (method, path) when its
// step terms (stepTerms) are the captured ones: the step sends that
// endpoint's headers and waits its timeout. A step whose upstream this
// configuration does not declare, or whose endpoint it does not declare
// with those terms, does not fail the rebuild: the recipe names it in
// MissingUpstreams or UnavailableEndpoints and must not be run (the
// caller refuses the contract, naming them). A version-1 plan, which
// held the endpoints' headers and timeouts as written at mint, is read
// without them: they are ignored, never sent. Errors wrap ErrPlan and
// name what failed; nothing is cached then.
func (rs *Restorer) Restore(hash string, data []byte) (*Recipe, error) {
	if r, ok := rs.Cached(hash); ok {
		return r, nil
	}
	if len(data) > MaxPlanBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrPlan, len(data), MaxPlanBytes)
	}
	if got := PlanHash(data); got != hash {
		return nil, fmt.Errorf("%w: its bytes hash to %s, not %s", ErrPlan, got, hash)
	}
	var cp rawPlan
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPlan, err)
	}
	switch cp.Version {
	case planVersion:
	case legacyPlanVersion:
		return rs.restoreLegacy(hash, cp)
	default:
		return nil, fmt.Errorf("%w: version %d, want %d", ErrPlan, cp.Version, planVersion)
	}
	r, err := rs.rebuild(hash, cp)
	if err != nil {
		return nil, err
	}
	rs.cache.Set(hash, r, 1)
	return r, nil
}

// restoreLegacy restores a version-1 plan (hash): its endpoint
// documents without their call settings, rebuilt as the version-2 plan
// they make, and cached under hash. The recipe is always a rebuilt one
// (never a loaded one), which remembers hash for
// CapturedContract.Contract; its Plan is the version-2 plan.
func (rs *Restorer) restoreLegacy(hash string, cp rawPlan) (*Recipe, error) {
	eps := make([]any, len(cp.Endpoints))
	for i, raw := range cp.Endpoints {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPlan, err)
		}
		eps[i] = withoutCallSettings(v)
	}
	raw, err := json.Marshal(capturedPlan{Version: planVersion, Recipe: cp.Recipe, Endpoints: eps})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPlan, err)
	}
	plan, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPlan, err)
	}
	var v2 rawPlan
	if err := json.Unmarshal(plan, &v2); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPlan, err)
	}
	r, err := rs.rebuild(PlanHash(plan), v2)
	if err != nil {
		return nil, err
	}
	r.legacyHash = hash
	rs.cache.Set(hash, r, 1)
	return r, nil
}

// rebuild builds the recipe of the version-2 plan cp whose hash is hash
// (Restore), not cached.
func (rs *Restorer) rebuild(hash string, cp rawPlan) (*Recipe, error) {
	eps := map[string]*Endpoint{}
	for i, raw := range cp.Endpoints {
		doc, err := schema.Parse(fmt.Sprintf("captured plan %.12s endpoint %d", hash, i), raw, schema.KindEndpoint)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPlan, err)
		}
		e, err := buildBoundEndpoint(doc, rs.mp, rs.upstreams, true)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPlan, err)
		}
		rs.bindCurrent(e)
		eps[e.Method+" "+e.Path] = e
	}
	doc, err := schema.Parse(fmt.Sprintf("captured plan %.12s recipe", hash), cp.Recipe, schema.KindRecipe)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPlan, err)
	}
	r, err := BuildRecipe(doc, rs.mp, func(m, p string) (*Endpoint, bool) { e, ok := eps[m+" "+p]; return e, ok })
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPlan, err)
	}
	if _, h, err := r.Plan(); err != nil || h != hash {
		return nil, fmt.Errorf("%w: the rebuilt plan hashes to %s, not %s (%v)", ErrPlan, h, hash, err)
	}
	return r, nil
}

// bindCurrent gives e, an endpoint rebuilt from a captured plan, the
// upstream call of the endpoint this configuration declares under its
// (method, path) when their step terms are the same: its headers (the
// upstream credential of a static policy), its timeout and its upstream
// client, the captured document staying e's (the plan's bytes). Without
// such an endpoint e is unavailable: it keeps the captured call with
// no headers, and every call of it fails.
func (rs *Restorer) bindCurrent(e *Endpoint) {
	cur, ok := rs.endpoints[e.Method+" "+e.Path]
	if ok && cur.terms != nil {
		if terms, err := stepTerms(e.doc); err == nil && bytes.Equal(terms, cur.terms) {
			e.svc = cur.e.svc
			return
		}
	}
	e.unavailable = true
}

// CapturedContract is a contract's portable form without its plan: every
// field of Contract but Recipe, which PlanHash names (the plan travels
// beside it, deduplicated by hash). Times are RFC 3339 with nanoseconds.
type CapturedContract struct {
	SynthesisID        string          `json:"synthesis_id"`
	Method             string          `json:"method"`
	Path               string          `json:"path"`
	EndpointJSON       json.RawMessage `json:"endpoint"`
	Lineage            Lineage         `json:"recipe_lineage"`
	ContractHash       string          `json:"contract_hash"`
	OriginatingAgentID string          `json:"originating_agent_id"`
	NegotiationOrigin  string          `json:"negotiation_origin"`
	IssuedAt           time.Time       `json:"issued_at"`
	ExpiresAt          time.Time       `json:"expires_at"`
	SessionID          string          `json:"session_id,omitempty"`
	Persistent         bool            `json:"persistent,omitempty"`
	PlanHash           string          `json:"plan_hash"`
}

// Capture returns c in portable form and its plan (Recipe.Plan). It
// fails when c has no recipe or the recipe has no captured plan.
func (c *Contract) Capture() (CapturedContract, []byte, error) {
	if c.Recipe == nil {
		return CapturedContract{}, nil, fmt.Errorf("contract %s has no recipe", c.SynthesisID)
	}
	plan, hash, err := c.Recipe.Plan()
	if err != nil {
		return CapturedContract{}, nil, err
	}
	return CapturedContract{
		SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path, EndpointJSON: c.EndpointJSON,
		Lineage: c.Lineage, ContractHash: c.ContractHash, OriginatingAgentID: c.OriginatingAgentID,
		NegotiationOrigin: c.NegotiationOrigin, IssuedAt: c.IssuedAt, ExpiresAt: c.ExpiresAt,
		SessionID: c.SessionID, Persistent: c.Persistent, PlanHash: hash,
	}, plan, nil
}

// Contract returns the contract cc describes running r (the recipe its
// PlanHash names, from Restorer). It fails when r's plan hash differs
// (unless r was rebuilt from cc's version-1 plan: its Plan is the
// version-2 form of it).
// The contract's state is the store's: a Contract built here is never
// put in a memory Store.
func (cc CapturedContract) Contract(r *Recipe) (*Contract, error) {
	if _, h, err := r.Plan(); err != nil || h != cc.PlanHash && r.legacyHash != cc.PlanHash {
		return nil, fmt.Errorf("%w: contract %s names plan %s, the recipe's is %s", ErrPlan, cc.SynthesisID, cc.PlanHash, h)
	}
	return &Contract{
		SynthesisID: cc.SynthesisID, Method: cc.Method, Path: cc.Path, Recipe: r, EndpointJSON: cc.EndpointJSON,
		Lineage: cc.Lineage, ContractHash: cc.ContractHash, OriginatingAgentID: cc.OriginatingAgentID,
		NegotiationOrigin: cc.NegotiationOrigin, IssuedAt: cc.IssuedAt, ExpiresAt: cc.ExpiresAt,
		SessionID: cc.SessionID, Persistent: cc.Persistent,
	}, nil
}

// Marshal returns cc as JSON, byte for byte as encoding/json writes it
// without HTML escaping (TestCapturedContractMarshalForm holds it to
// that), the endpoint's bytes unchanged: they are what contract_hash
// covers, the JCS form contractFor made (compact and valid JSON), or
// those a store read back from an earlier Marshal (empty bytes are an
// error, as from encoding/json; others are not validated again). Written by hand:
// encoding/json validated and copied the endpoint's bytes once more (it
// compacts a json.RawMessage's output), which was most of a Redis
// store's mint outside its round trip in the synthesis scenario's
// profile (BenchmarkCapturedContractMarshal: 1.2 µs against 3.2).
// Errors are time.Time.MarshalJSON's (a year outside 0-9999).
func (cc CapturedContract) Marshal() ([]byte, error) {
	var times [2][]byte // issued_at, expires_at
	for i, t := range [2]time.Time{cc.IssuedAt, cc.ExpiresAt} {
		var err error
		if times[i], err = t.MarshalJSON(); err != nil {
			return nil, fmt.Errorf("json: error calling MarshalJSON for type time.Time: %w", err)
		}
	}
	b := make([]byte, 0, 320+len(cc.EndpointJSON)+len(cc.Path)+len(cc.Lineage.RecipeName)+len(cc.SessionID))
	str := func(key, v string) { b = jsonenc.AppendString(append(b, key...), v) }
	str(`{"synthesis_id":`, cc.SynthesisID)
	str(`,"method":`, cc.Method)
	str(`,"path":`, cc.Path)
	b = append(b, `,"endpoint":`...)
	switch {
	case cc.EndpointJSON == nil:
		b = append(b, "null"...)
	case len(cc.EndpointJSON) == 0:
		// encoding/json refused it too; any other bytes are taken as
		// the valid compact JSON they always are (not re-validated:
		// that was the cost).
		return nil, errors.New("json: error calling MarshalJSON for type json.RawMessage: unexpected end of JSON input")
	default:
		b = append(b, cc.EndpointJSON...)
	}
	str(`,"recipe_lineage":{"recipe_name":`, cc.Lineage.RecipeName)
	str(`,"recipe_version":`, cc.Lineage.RecipeVersion)
	str(`},"contract_hash":`, cc.ContractHash)
	str(`,"originating_agent_id":`, cc.OriginatingAgentID)
	str(`,"negotiation_origin":`, cc.NegotiationOrigin)
	b = append(append(b, `,"issued_at":`...), times[0]...)
	b = append(append(b, `,"expires_at":`...), times[1]...)
	if cc.SessionID != "" {
		str(`,"session_id":`, cc.SessionID)
	}
	if cc.Persistent {
		b = append(b, `,"persistent":true`...)
	}
	str(`,"plan_hash":`, cc.PlanHash)
	return append(b, '}'), nil
}

// UnmarshalCapturedContract parses what CapturedContract.Marshal wrote.
// It fails on malformed JSON or a record without synthesis_id, agent or
// plan hash.
func UnmarshalCapturedContract(data []byte) (CapturedContract, error) {
	var cc CapturedContract
	if err := json.Unmarshal(data, &cc); err != nil {
		return cc, fmt.Errorf("captured contract: %w", err)
	}
	if cc.SynthesisID == "" || cc.OriginatingAgentID == "" || cc.PlanHash == "" {
		return cc, errors.New("captured contract: synthesis_id, originating_agent_id and plan_hash are required")
	}
	return cc, nil
}
