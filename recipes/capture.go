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
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// A captured plan is a contract's recipe in portable form: the recipe
// document and the documents of the Tier B endpoints its steps call,
// exactly as they were loaded (schema.Document.Value, before ${ENV}
// references in endpoint headers are resolved, so no secret travels).
// A node that did not load those files, or loads other versions of
// them, rebuilds the same plan from it against its own upstreams and
// method policy (Restorer), so a contract runs what was captured
// wherever it is presented (ARCHITECTURE.md "Beyond one machine").
//
// The serialized form is the RFC 8785 (JCS) canonical JSON of
//
//	{"version":1,"recipe":<recipe document>,"endpoints":[<endpoint document>…]}
//
// with the endpoints sorted by "METHOD path" and each listed once; its
// hash (PlanHash) is the lowercase hex SHA-256 of those bytes.

// planVersion is the captured-plan format version.
const planVersion = 1

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
			cp.Endpoints = append(cp.Endpoints, seen[k].doc)
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
// match, a document that fails its schema, a method this node does not
// serve, or a header's ${VAR} not set here). An upstream this node does
// not declare is not one: see Recipe.MissingUpstreams.
var ErrPlan = errors.New("captured plan cannot be restored")

// DefaultMaxPlans is the number of compiled plans a Restorer keeps when
// given 0.
const DefaultMaxPlans = 1024

// Restorer rebuilds captured plans into runnable recipes against one
// configuration (its method policy and upstream clients), keeping the
// compiled ones in a bounded cache keyed by plan hash (ristretto/v2, cost
// 1 per plan, at most maxPlans). The plans of the recipes this
// configuration loaded resolve to those recipes without a rebuild. Build
// a new Restorer on each config load: its recipes hold that load's
// upstream clients. Safe for concurrent use; Close releases the cache.
type Restorer struct {
	mp        *policy.MethodPolicy
	upstreams map[string]*Upstream
	known     map[string]*Recipe
	cache     *closecache.Cache[string, *Recipe]
}

// NewRestorer returns a Restorer for the configuration (mp, upstreams)
// whose loaded recipes are known, keeping at most maxPlans rebuilt plans
// (0 means DefaultMaxPlans; negative is an error).
func NewRestorer(mp *policy.MethodPolicy, upstreams map[string]*Upstream, known []*Recipe, maxPlans int) (*Restorer, error) {
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
	rs := &Restorer{mp: mp, upstreams: upstreams, known: map[string]*Recipe{}, cache: closecache.New(cache)}
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

// Close releases the cache: detached at once (later calls rebuild plans
// uncached), closed a moment later (closecache), so that a request of
// the old configuration still running does not meet ristretto's Close.
// Safe to call more than once.
func (rs *Restorer) Close() { rs.cache.Close() }

// Cached returns the recipe whose plan hash is hash when it is loaded
// here or already rebuilt, without needing the plan's bytes.
func (rs *Restorer) Cached(hash string) (*Recipe, bool) {
	if r, ok := rs.known[hash]; ok {
		return r, true
	}
	return rs.cache.Load().Get(hash)
}

// Restore returns the recipe of the captured plan data whose hash is
// hash: a loaded or cached one, else one rebuilt from the documents
// (each validated against its schema, the endpoints built against this
// configuration's upstreams and method policy, the recipe built over
// those endpoints only) and cached. A step whose upstream this
// configuration does not declare does not fail the rebuild: the recipe
// names it in MissingUpstreams and must not be run (the caller refuses
// the contract, naming the upstream). Errors wrap ErrPlan and name what
// failed; nothing is cached then.
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
	var cp struct {
		Version   int               `json:"version"`
		Recipe    json.RawMessage   `json:"recipe"`
		Endpoints []json.RawMessage `json:"endpoints"`
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPlan, err)
	}
	if cp.Version != planVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrPlan, cp.Version, planVersion)
	}
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
	rs.cache.Load().Set(hash, r, 1)
	return r, nil
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
// PlanHash names, from Restorer). It fails when r's plan hash differs.
// The contract's state is the store's: a Contract built here is never
// put in a memory Store.
func (cc CapturedContract) Contract(r *Recipe) (*Contract, error) {
	if _, h, err := r.Plan(); err != nil || h != cc.PlanHash {
		return nil, fmt.Errorf("%w: contract %s names plan %s, the recipe's is %s", ErrPlan, cc.SynthesisID, cc.PlanHash, h)
	}
	return &Contract{
		SynthesisID: cc.SynthesisID, Method: cc.Method, Path: cc.Path, Recipe: r, EndpointJSON: cc.EndpointJSON,
		Lineage: cc.Lineage, ContractHash: cc.ContractHash, OriginatingAgentID: cc.OriginatingAgentID,
		NegotiationOrigin: cc.NegotiationOrigin, IssuedAt: cc.IssuedAt, ExpiresAt: cc.ExpiresAt,
		SessionID: cc.SessionID, Persistent: cc.Persistent,
	}, nil
}

// Marshal returns cc as JSON, the endpoint's bytes unchanged (no HTML
// escaping: they are what contract_hash covers).
func (cc CapturedContract) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
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
