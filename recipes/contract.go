package recipes

import (
	"container/heap"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Negotiation origins (spec §16.1).
const (
	OriginGate    = "rcns-gate"
	OriginPropose = "propose"
)

// Contract states (spec §17.3 PROPOSAL).
const (
	StatePending  = "pending" // confirm-first preview not yet accepted
	StateActive   = "active"
	StateExpired  = "expired"
	StateRevoked  = "revoked"
	StateReleased = "released"
)

// Contract is a synthesized Tier C contract (spec §14): bound to its
// originating Agent-ID, its (method, path), the recipe and version it
// captured, and an expiry. Fields are immutable after creation except
// the state, which the Store guards.
type Contract struct {
	SynthesisID  string
	Method, Path string
	// Recipe is the recipe the contract captured: its plan (version and
	// steps) runs for the contract's whole life, bound at each run to
	// the running configuration's upstreams (Restorer).
	Recipe *Recipe
	// EndpointJSON is the synthesized endpoint in manifest-projection
	// form, as its RFC 8785 canonical JSON: the exact bytes contract_hash
	// covers, served as is in 461/263 bodies and INSPECT.
	EndpointJSON       []byte
	Lineage            Lineage
	ContractHash       string
	OriginatingAgentID string
	NegotiationOrigin  string
	IssuedAt           time.Time
	ExpiresAt          time.Time
	SessionID          string
	// Persistent contracts (PROPOSE persistent: true with
	// allow_persistent) join the manifest's endpoint catalog.
	Persistent bool

	state string
}

// Summary is the contract in DISCOVER /contracts form (spec §17.2).
func (c *Contract) Summary() map[string]any {
	return map[string]any{
		"synthesis_id":         c.SynthesisID,
		"method":               c.Method,
		"path":                 c.Path,
		"originating_agent_id": c.OriginatingAgentID,
		"recipe_lineage":       c.Lineage,
		"contract_hash":        c.ContractHash,
		"negotiation_origin":   c.NegotiationOrigin,
		"issued_at":            c.IssuedAt.UTC().Format(time.RFC3339),
		"expires_at":           c.ExpiresAt.UTC().Format(time.RFC3339),
		"persistent":           c.Persistent,
	}
}

// ValidSynthesisID reports whether s is a syntactically valid
// Contract-Synthesized value (spec §13.5, OP-19): 1-128 characters of
// A-Z a-z 0-9 . _ ~ - (the regexp ^[A-Za-z0-9._~-]{1,128}$, checked
// byte by byte on the hot path).
func ValidSynthesisID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-') {
			return false
		}
	}
	return true
}

// NewSynthesisID returns "syn-" + base64url of 128 random bits from the
// CSPRNG (spec §13.5).
func NewSynthesisID() string { return "syn-" + randomToken() }

// NewAttemptID returns "rcns-" + base64url of 128 random bits.
func NewAttemptID() string { return "rcns-" + randomToken() }

func randomToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// StoreLimits bound a Store (ARCHITECTURE.md "Bounds and defaults").
type StoreLimits struct {
	// MaxContracts is the number of live (pending or active) contracts
	// in all; 0 means 100,000.
	MaxContracts int
	// MaxPerAgent is the number of live contracts per agent; 0 means 100.
	MaxPerAgent int
	// TombstoneTTL is how long an expired or revoked contract answers
	// 464 contract-revoked instead of 404; 0 means 24 h.
	TombstoneTTL time.Duration
	// MaxTombstones bounds the tombstones kept (oldest dropped); 0 means
	// 100,000.
	MaxTombstones int
}

// ErrStoreFull is returned by Put when a contract limit is reached.
var ErrStoreFull = errors.New("contract store is full")

// ErrAgentFull is returned by Put when the agent's contract limit is
// reached.
var ErrAgentFull = errors.New("the agent holds the maximum number of contracts")

// LimitError is Put's refusal at a limit: Err is ErrStoreFull or
// ErrAgentFull (errors.Is matches either), Held the live contracts
// counted against the limit (all of them, or the agent's), Limit the
// bound as enforced (defaults applied).
type LimitError struct {
	Err   error
	Held  int
	Limit int
}

// Error is Err's text with the count held and the limit: "ERR: N live,
// limit L".
func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: %d live, limit %d", e.Err, e.Held, e.Limit)
}

// Unwrap returns ErrStoreFull or ErrAgentFull.
func (e *LimitError) Unwrap() error { return e.Err }

type tombstone struct {
	state string
	at    time.Time
	c     *Contract
}

// Store holds contracts and tombstones in memory, bounded. It is safe
// for concurrent use and is kept across config reloads.
type Store struct {
	mu         sync.Mutex
	limits     StoreLimits
	now        func() time.Time
	byID       map[string]*Contract
	byPair     map[string][]*Contract // agent|method|path → newest last
	perAgent   map[string]int
	tombs      map[string]tombstone
	tombOrder  []string
	everIssued bool
	lastSweep  time.Time
	expiry     expiryHeap // live contracts by ExpiresAt (ended ones drop out lazily)
}

// expiryHeap orders contracts by expiry so a sweep touches only the
// expired ones, whatever the number of live contracts.
type expiryHeap []*Contract

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].ExpiresAt.Before(h[j].ExpiresAt) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(*Contract)) }
func (h *expiryHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

// Store bounds used when StoreLimits leaves them unset (≤ 0).
const (
	// DefaultMaxContracts is the default bound of live contracts in all.
	DefaultMaxContracts = 100000
	// DefaultMaxContractsPerAgent is the default bound of one agent's
	// live contracts.
	DefaultMaxContractsPerAgent = 100
)

// NewStore returns an empty store; now may be nil (time.Now). Unset
// limits take DefaultMaxContracts, DefaultMaxContractsPerAgent, a 24 h
// tombstone TTL and 100000 tombstones.
func NewStore(limits StoreLimits, now func() time.Time) *Store {
	if limits.MaxContracts <= 0 {
		limits.MaxContracts = DefaultMaxContracts
	}
	if limits.MaxPerAgent <= 0 {
		limits.MaxPerAgent = DefaultMaxContractsPerAgent
	}
	if limits.TombstoneTTL <= 0 {
		limits.TombstoneTTL = 24 * time.Hour
	}
	if limits.MaxTombstones <= 0 {
		limits.MaxTombstones = 100000
	}
	if now == nil {
		now = time.Now
	}
	return &Store{limits: limits, now: now, byID: map[string]*Contract{}, byPair: map[string][]*Contract{},
		perAgent: map[string]int{}, tombs: map[string]tombstone{}}
}

// SetLimits replaces the limits (on a config reload).
func (s *Store) SetLimits(l StoreLimits) {
	n := NewStore(l, nil)
	s.mu.Lock()
	s.limits = n.limits
	s.mu.Unlock()
}

// Limits returns the bounds in force, defaults applied.
func (s *Store) Limits() StoreLimits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits
}

func pairKey(agent, method, path string) string { return agent + "|" + method + "|" + path }

// Put stores a new contract in the given initial state (StatePending or
// StateActive). At a limit it fails with a *LimitError wrapping
// ErrStoreFull or ErrAgentFull.
func (s *Store) Put(c *Contract, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(c, state)
}

// putLocked is Put with s.mu held.
func (s *Store) putLocked(c *Contract, state string) error {
	s.sweepLocked(false)
	if len(s.byID) >= s.limits.MaxContracts {
		s.sweepLocked(true)
		if len(s.byID) >= s.limits.MaxContracts {
			return &LimitError{Err: ErrStoreFull, Held: len(s.byID), Limit: s.limits.MaxContracts}
		}
	}
	if s.perAgent[c.OriginatingAgentID] >= s.limits.MaxPerAgent {
		s.sweepLocked(true)
		if n := s.perAgent[c.OriginatingAgentID]; n >= s.limits.MaxPerAgent {
			return &LimitError{Err: ErrAgentFull, Held: n, Limit: s.limits.MaxPerAgent}
		}
	}
	c.state = state
	s.byID[c.SynthesisID] = c
	heap.Push(&s.expiry, c)
	k := pairKey(c.OriginatingAgentID, c.Method, c.Path)
	s.byPair[k] = append(s.byPair[k], c)
	s.perAgent[c.OriginatingAgentID]++
	s.everIssued = true
	return nil
}

// PutForPair is Put for a gate synthesis, where concurrent first calls
// coalesce: when c's agent already holds an active contract for c's
// (method, path) (ActiveFor), c is not stored and that contract is
// returned. Errors as Put.
func (s *Store) PutForPair(c *Contract, state string) (*Contract, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.activeForLocked(c.OriginatingAgentID, c.Method, c.Path); o != nil {
		return o, nil
	}
	return nil, s.putLocked(c, state)
}

// Lookup outcomes.
const (
	LookupFound   = iota // live contract returned
	LookupUnknown        // never issued, released, swept, or tombstone dropped → 404
	LookupRevoked        // expired or revoked, tombstone kept → 464 contract-revoked
)

// Lookup finds a contract by synthesis id. It returns the contract and
// LookupFound; the ended contract its tombstone keeps and LookupRevoked
// (so the caller can check whose it was before saying how it ended); or
// nil and LookupUnknown (spec §14.1, OP-21).
func (s *Store) Lookup(id string) (*Contract, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.byID[id]; ok {
		if !s.now().Before(c.ExpiresAt) {
			s.evictLocked(c, StateExpired)
		} else {
			return c, LookupFound
		}
	}
	if t, ok := s.tombs[id]; ok && s.now().Sub(t.at) < s.limits.TombstoneTTL {
		if t.state == StateReleased {
			return nil, LookupUnknown
		}
		return t.c, LookupRevoked
	}
	return nil, LookupUnknown
}

// Activate marks a pending contract active (its holder accepted the
// 461 by presenting it); returns whether it was pending.
func (s *Store) Activate(c *Contract) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.state == StatePending {
		c.state = StateActive
		return true
	}
	return false
}

// State returns the contract's current state.
func (s *Store) State(c *Contract) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.state == StateActive || c.state == StatePending {
		if !s.now().Before(c.ExpiresAt) {
			return StateExpired
		}
	}
	return c.state
}

// ActiveFor returns the most recently issued active (accepted, not
// expired) contract agent holds for exactly (method, path), or nil
// (spec §10 step 8b). Pending contracts do not resolve by pair.
func (s *Store) ActiveFor(agent, method, path string) *Contract {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.activeForLocked(agent, method, path)
}

// activeForLocked is ActiveFor with s.mu held.
func (s *Store) activeForLocked(agent, method, path string) *Contract {
	list := s.byPair[pairKey(agent, method, path)]
	now := s.now()
	for i := len(list) - 1; i >= 0; i-- {
		c := list[i]
		if c.state == StateActive && now.Before(c.ExpiresAt) {
			return c
		}
	}
	return nil
}

// Inspect returns a contract, live or ended (while its tombstone is
// kept), with its current state: active (pending reported as active,
// spec OP-33), expired, revoked or released. found is false for an
// unknown id. Spec §17.3 target=contract.
func (s *Store) Inspect(id string) (c *Contract, state string, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if c, ok := s.byID[id]; ok {
		if !now.Before(c.ExpiresAt) {
			s.evictLocked(c, StateExpired)
		} else {
			return c, StateActive, true
		}
	}
	if t, ok := s.tombs[id]; ok && now.Sub(t.at) < s.limits.TombstoneTTL {
		return t.c, t.state, true
	}
	return nil, "", false
}

// End ends a live contract with state StateRevoked, StateReleased or
// StateExpired and keeps a tombstone; returns false when it was not live.
func (s *Store) End(id, state string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byID[id]
	if !ok {
		return false
	}
	s.evictLocked(c, state)
	return true
}

// List returns live contracts, sorted by issue time then id; agent ""
// lists every agent's.
func (s *Store) List(agent string) []*Contract {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(true)
	var out []*Contract
	for _, c := range s.byID {
		if agent == "" || c.OriginatingAgentID == agent {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].IssuedAt.Equal(out[j].IssuedAt) {
			return out[i].IssuedAt.Before(out[j].IssuedAt)
		}
		return out[i].SynthesisID < out[j].SynthesisID
	})
	return out
}

// Len returns the number of live contracts.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func (s *Store) evictLocked(c *Contract, state string) {
	delete(s.byID, c.SynthesisID)
	k := pairKey(c.OriginatingAgentID, c.Method, c.Path)
	list := s.byPair[k]
	for i, x := range list {
		if x == c {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.byPair, k)
	} else {
		s.byPair[k] = list
	}
	if s.perAgent[c.OriginatingAgentID]--; s.perAgent[c.OriginatingAgentID] <= 0 {
		delete(s.perAgent, c.OriginatingAgentID)
	}
	c.state = state
	at := s.now()
	if state == StateExpired {
		at = c.ExpiresAt
	}
	s.tombs[c.SynthesisID] = tombstone{state: state, at: at, c: c}
	s.tombOrder = append(s.tombOrder, c.SynthesisID)
	for len(s.tombOrder) > s.limits.MaxTombstones {
		delete(s.tombs, s.tombOrder[0])
		s.tombOrder = s.tombOrder[1:]
	}
}

// sweepLocked evicts expired contracts and old tombstones, at most once
// a second unless force is set.
func (s *Store) sweepLocked(force bool) {
	now := s.now()
	if !force && now.Sub(s.lastSweep) < time.Second {
		return
	}
	s.lastSweep = now
	for s.expiry.Len() > 0 && !now.Before(s.expiry[0].ExpiresAt) {
		c := heap.Pop(&s.expiry).(*Contract)
		if live, ok := s.byID[c.SynthesisID]; ok && live == c {
			s.evictLocked(c, StateExpired)
		}
	}
	i := 0
	for i < len(s.tombOrder) {
		t, ok := s.tombs[s.tombOrder[i]]
		if ok && now.Sub(t.at) < s.limits.TombstoneTTL {
			break
		}
		delete(s.tombs, s.tombOrder[i])
		i++
	}
	s.tombOrder = s.tombOrder[i:]
}
