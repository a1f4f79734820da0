package policy

import (
	"fmt"
	"slices"
	"sort"

	"github.com/caddy-rcns/caddy-rcns/internal/hexid"
)

// TrustTier is an agent's resolved trust tier: 1 (Verified, strictest)
// through 3 (Experimental). 0 means unresolved. RCNS §11.1 lock 4, OP-2.
type TrustTier int

const (
	// TrustTierVerified is tier 1, the strictest.
	TrustTierVerified TrustTier = 1
	// TrustTierDefault is tier 2, the conservative value an unresolved
	// (0) tier counts as (OP-2).
	TrustTierDefault TrustTier = 2
	// TrustTierExperimental is tier 3.
	TrustTierExperimental TrustTier = 3
)

// resolved returns the tier with 0 counted as TrustTierDefault.
func (t TrustTier) resolved() TrustTier {
	if t == 0 {
		return TrustTierDefault
	}
	return t
}

// AgentStatus is an agent's lifecycle status in the registry (RCNS §3,
// §20).
type AgentStatus string

const (
	// AgentActive agents are served.
	AgentActive AgentStatus = "active"
	// AgentDeprecated agents are still served (agtp-09 §6.6).
	AgentDeprecated AgentStatus = "deprecated"
	// AgentSuspended agents are refused with 503 agent-suspended.
	AgentSuspended AgentStatus = "suspended"
	// AgentRetired agents are refused with 410 agent-retired.
	AgentRetired AgentStatus = "retired"
)

// Valid reports whether s is one of the four statuses.
func (s AgentStatus) Valid() bool {
	switch s {
	case AgentActive, AgentDeprecated, AgentSuspended, AgentRetired:
		return true
	}
	return false
}

// Agent is one registered agent (RCNS §20 agent registry).
type Agent struct {
	// ID is the canonical Agent-ID: 64 lowercase hex characters.
	ID string
	// Name is a human label.
	Name string
	// OwnerID is the owner the Owner-ID request header must equal when
	// present ("" = none registered).
	OwnerID string
	// Scopes is the granted scope set.
	Scopes ScopeSet
	// TrustTier is 1..3 (0 counts as 2 at lock 4).
	TrustTier TrustTier
	// Status is the lifecycle status.
	Status AgentStatus
}

// ValidAgentID reports whether s is a canonical Agent-ID: exactly 64
// lowercase hex characters. RCNS §3.
func ValidAgentID(s string) bool {
	return hexid.Valid(s)
}

// ValidOwnerID reports whether s matches owner-id = 1*256(ALPHA / DIGIT /
// "-" / "_" / ":" / "."). RCNS §3 (ids-02 §9.2).
func ValidOwnerID(s string) bool {
	if len(s) < 1 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == ':', c == '.':
		default:
			return false
		}
	}
	return true
}

// Registry is an immutable set of agents keyed by Agent-ID, safe for
// concurrent use.
type Registry struct {
	agents map[string]*Agent
	ids    []string
}

// NewRegistry builds a registry from agents (copied). It returns an error
// naming the agent for an invalid Agent-ID, a duplicate ID, a trust tier
// outside 1..3, an unknown status, an invalid OwnerID or a zero scope. An
// empty Status is stored as AgentActive.
func NewRegistry(agents []Agent) (*Registry, error) {
	r := &Registry{agents: make(map[string]*Agent, len(agents))}
	for i, a := range agents {
		label := fmt.Sprintf("agent %d (%s %q)", i, quote(a.ID), a.Name)
		if !ValidAgentID(a.ID) {
			return nil, fmt.Errorf("%s: id must be 64 lowercase hex characters", label)
		}
		if _, dup := r.agents[a.ID]; dup {
			return nil, fmt.Errorf("%s: duplicate id", label)
		}
		if a.TrustTier < TrustTierVerified || a.TrustTier > TrustTierExperimental {
			return nil, fmt.Errorf("%s: trust tier %d is outside 1..3", label, a.TrustTier)
		}
		if a.Status == "" {
			a.Status = AgentActive
		}
		if !a.Status.Valid() {
			return nil, fmt.Errorf("%s: unknown status %q (want active, deprecated, suspended or retired)", label, a.Status)
		}
		if a.OwnerID != "" && !ValidOwnerID(a.OwnerID) {
			return nil, fmt.Errorf("%s: owner id %q is not 1..256 characters of ALPHA, DIGIT, \"-\", \"_\", \":\" or \".\"", label, a.OwnerID)
		}
		for _, s := range a.Scopes {
			if s.IsZero() {
				return nil, fmt.Errorf("%s: empty scope in granted scopes", label)
			}
		}
		a.Scopes = slices.Clone(a.Scopes)
		r.agents[a.ID] = &a
		r.ids = append(r.ids, a.ID)
	}
	sort.Strings(r.ids)
	return r, nil
}

// Lookup returns the agent with the given ID. The returned Agent is shared
// and must not be modified.
func (r *Registry) Lookup(id string) (*Agent, bool) {
	if r == nil {
		return nil, false
	}
	a, ok := r.agents[id]
	return a, ok
}

// Len returns the number of agents.
func (r *Registry) Len() int {
	if r == nil {
		return 0
	}
	return len(r.agents)
}

// IDs returns every Agent-ID, sorted.
func (r *Registry) IDs() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.ids)
}
