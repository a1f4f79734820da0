package engine

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// This file is the engine's side of the operator page
// (docs/operator-guide.md "The operator page"): a bounded read of the
// state the AGTP built-ins expose as JSON (DISCOVER /contracts, INSPECT
// target=chain_head, target=idempotency-key), the node's in-flight
// Idempotency-Key claims, the recent refusals, and a revoke that ends a
// contract on the same path as REVOKE target=contract.

// BindingOperatorPage is the binding (door) an operator page's revoke
// is recorded under: the negotiation record's "binding" member.
const BindingOperatorPage = "operator-page"

// DefaultOperatorRows is the rows a section of the operator page lists
// when the page does not say (OperatorViewOptions.Max).
const DefaultOperatorRows = 50

// OperatorViewOptions bound an OperatorView.
type OperatorViewOptions struct {
	// Max is the most rows each section lists (contracts, agents with
	// contracts, in-flight claims, chain-head agents, recent refusals);
	// the rest is counted. 0 means DefaultOperatorRows.
	Max int
}

// ContractRow is one live contract as the operator page lists it.
type ContractRow struct {
	SynthesisID, Method, Path string
	// AgentID is the originating agent; AgentName and OwnerID its
	// registry entry's ("" when the registry no longer has it).
	AgentID, AgentName, OwnerID string
	RecipeName, RecipeVersion   string
	NegotiationOrigin           string
	IssuedAt, ExpiresAt         time.Time
	Persistent                  bool
}

// AgentContracts is how many live contracts one agent holds.
type AgentContracts struct {
	AgentID, AgentName, OwnerID string
	Count                       int
}

// InFlightClaim is one Idempotency-Key claim a request on this node
// holds while it runs (the lease its renewer keeps alive).
type InFlightClaim struct {
	AgentID, Key string
	// What is the dispatched "METHOD /path"; Binding the door.
	What, Binding string
	Since         time.Time
}

// AgentHeads are the heads of one agent's Attribution-Record chains,
// one per node that recorded for it within the retention (INSPECT
// target=chain_head). AgentID "" is the anonymous chain.
type AgentHeads struct {
	AgentID, AgentName string
	Heads              []ChainHead
}

// ChainHead is the head of one (agent, node) chain.
type ChainHead struct{ NodeID, AuditID string }

// RefusalCount is how many refusals one reason token had.
type RefusalCount struct {
	Reason string
	Count  int64
}

// RecentRefusal is one recent refusal (a request answered with a reason
// token, spec §19).
type RecentRefusal struct {
	At               time.Time
	Status           int
	Reason, Method   string
	AgentID, Binding string
	Kind             string // what answered it (request kind)
	RequestID        string
}

// OperatorView is a bounded read of the gateway's state for the
// operator page. A section whose store read failed has its error set
// and its rows empty; the rest is still filled.
type OperatorView struct {
	// Name is the rcns handler name; NodeID this node's id.
	Name, NodeID string
	// Contracts lists at most Max live contracts, newest first (by
	// issue time, which is to the second; then by id);
	// ContractsTotal counts them all. ByAgent counts them per agent
	// (most first, at most Max agents; ByAgentTotal is how many agents
	// hold one). ContractsErr is the store's error.
	Contracts      []ContractRow
	ContractsTotal int
	ByAgent        []AgentContracts
	ByAgentTotal   int
	ContractsErr   error
	// MaxContracts and MaxPerAgent are the contract store's bounds.
	MaxContracts, MaxPerAgent int
	// InFlight lists at most Max claims this node holds, oldest first;
	// InFlightTotal counts them.
	InFlight      []InFlightClaim
	InFlightTotal int
	// IdempotencyRecords is the idempotency records held (stored and
	// in flight, every node's), -1 when the store does not count them
	// (Redis); IdempotencyMax the store's bound.
	IdempotencyRecords, IdempotencyMax int
	// Heads lists the chain heads of at most Max registered agents
	// (the registry's order) that have a retained record, then the
	// anonymous chain; HeadsAgents is how many registered agents there
	// are. HeadsErr is the store's error.
	Heads       []AgentHeads
	HeadsAgents int
	HeadsErr    error
	// Refusals counts refusals by reason since this state was created
	// (most first), and Recent lists the newest (at most Max, newest
	// first) of the last RefusalRing kept; RefusalsTotal counts every
	// refusal counted.
	Refusals      []RefusalCount
	RefusalsTotal int64
	Recent        []RecentRefusal
	// StoreDown: a shared store (Redis) is known not to answer.
	StoreDown bool
}

// OperatorView reads the state the operator page shows, each section
// bounded by o.Max rows (the rest counted). It reads the store as the
// AGTP built-ins do (Contracts.List for DISCOVER /contracts,
// Records.Heads for INSPECT target=chain_head); a store error is kept
// in its section. ctx bounds the store calls.
func (h *Engine) OperatorView(ctx context.Context, o OperatorViewOptions) OperatorView {
	max := o.Max
	if max <= 0 {
		max = DefaultOperatorRows
	}
	h.Activate()
	v := OperatorView{Name: h.Name, NodeID: h.nodeID, StoreDown: h.storeDown()}
	lim := h.sto.Contracts.Limits()
	v.MaxContracts, v.MaxPerAgent = lim.MaxContracts, lim.MaxPerAgent

	if live, err := h.sto.Contracts.List(ctx, ""); err != nil {
		v.ContractsErr = err
	} else {
		v.ContractsTotal = len(live)
		counts := map[string]int{}
		for _, c := range live {
			counts[c.OriginatingAgentID]++
		}
		// Newest first: the store lists by issue time then id.
		for i := len(live) - 1; i >= 0 && len(v.Contracts) < max; i-- {
			v.Contracts = append(v.Contracts, h.contractRow(live[i]))
		}
		for id, n := range counts {
			a := AgentContracts{AgentID: id, Count: n}
			if ag, ok := h.agents.Lookup(id); ok {
				a.AgentName, a.OwnerID = ag.Name, ag.OwnerID
			}
			v.ByAgent = append(v.ByAgent, a)
		}
		sort.Slice(v.ByAgent, func(i, j int) bool {
			a, b := v.ByAgent[i], v.ByAgent[j]
			if a.Count != b.Count {
				return a.Count > b.Count
			}
			return a.AgentID < b.AgentID
		})
		v.ByAgentTotal = len(v.ByAgent)
		if len(v.ByAgent) > max {
			v.ByAgent = v.ByAgent[:max]
		}
	}

	v.InFlight, v.InFlightTotal = h.st.inflight.list(max)
	v.IdempotencyMax = h.sto.Idempotency.Limits().MaxRecords
	v.IdempotencyRecords = -1
	if n, err := h.sto.Idempotency.Len(ctx); err == nil {
		v.IdempotencyRecords = n
	}

	ids := h.agents.IDs()
	v.HeadsAgents = len(ids)
	for _, id := range append(ids, "") {
		if len(v.Heads) >= max && id != "" {
			continue
		}
		heads, err := h.sto.Records.Heads(ctx, id)
		if err != nil {
			v.HeadsErr = err
			break
		}
		if len(heads) == 0 {
			continue
		}
		ah := AgentHeads{AgentID: id}
		if ag, ok := h.agents.Lookup(id); ok {
			ah.AgentName = ag.Name
		}
		for _, hd := range heads {
			ah.Heads = append(ah.Heads, ChainHead{NodeID: hd.NodeID, AuditID: hd.AuditID})
		}
		v.Heads = append(v.Heads, ah)
	}

	v.Refusals, v.RefusalsTotal, v.Recent = h.st.refusals.view(max)
	return v
}

// contractRow is c as the operator page lists it.
func (h *Engine) contractRow(c *recipes.Contract) ContractRow {
	r := ContractRow{SynthesisID: c.SynthesisID, Method: c.Method, Path: c.Path, AgentID: c.OriginatingAgentID,
		RecipeName: c.Lineage.RecipeName, RecipeVersion: c.Lineage.RecipeVersion, NegotiationOrigin: c.NegotiationOrigin,
		IssuedAt: c.IssuedAt, ExpiresAt: c.ExpiresAt, Persistent: c.Persistent}
	if ag, ok := h.agents.Lookup(c.OriginatingAgentID); ok {
		r.AgentName, r.OwnerID = ag.Name, ag.OwnerID
	}
	return r
}

// Operator is who revokes a contract from the operator page: the page
// admitted them by its access rule.
type Operator struct {
	// Name is the operator as recorded: the negotiation record's and
	// the rcns_revoke event's "actor" (spec §14.4 "actor", a free
	// string). The page sends its configured operator name, or the
	// basic-auth user.
	Name string
	// Access says how the page admitted them ("cidr", "bearer",
	// "basic"): the record's "operator_access".
	Access string
}

// ErrContractUnknown is OperatorRevoke's error for a synthesis id no
// contract (live or tombstoned) has.
var ErrContractUnknown = errors.New("no contract with this synthesis id is known")

// Revoked is what OperatorRevoke did: the contract's state after it,
// and Noop when it had already ended (State is then how it ended).
type Revoked struct {
	SynthesisID, State string
	Noop               bool
	// RequestID is the request id of the revoke's negotiation record
	// and log line.
	RequestID string
}

// OperatorRevoke revokes the contract id for op, as REVOKE
// target=contract does (spec §14.4 path 2): the same end (endContract),
// so the same rcns_revoke lifecycle event, negotiation record (kind
// revoke) and log line, with the operator as the actor. The record is
// chained on the originating agent's chain (its agent_id; there is no
// requesting agent) with "actor" = op.Name, "actor_kind" "operator",
// "operator_access" = op.Access and binding BindingOperatorPage.
// Errors: ErrContractUnknown, or the store's (wrapping
// store.ErrUnavailable when it did not answer).
func (h *Engine) OperatorRevoke(ctx context.Context, id, reason string, op Operator) (Revoked, error) {
	h.Activate()
	in := &agtp.Request{Binding: BindingOperatorPage, Method: "REVOKE", Target: "/", Context: ctx, Header: map[string][]string{}}
	x := h.newExchange(in)
	x.method, x.path = "REVOKE", "/"
	x.operator = &op
	c, _, found, err := h.sto.Contracts.Inspect(ctx, id)
	if err != nil {
		return Revoked{}, err
	}
	if !found {
		return Revoked{}, ErrContractUnknown
	}
	x.agentID, x.agentIDValid = c.OriginatingAgentID, true
	ended, err := h.endContract(x, "", c, contractEnd{state: recipes.StateRevoked, reason: reason, operator: op.Name,
		via: "operator page", requested: map[string]any{"target": "contract", "synthesis_id": c.SynthesisID}})
	if err != nil {
		return Revoked{}, err
	}
	h.afterEnding(x, ended && c.Persistent)
	out := Revoked{SynthesisID: c.SynthesisID, State: recipes.StateRevoked, Noop: !ended, RequestID: x.requestID}
	if !ended {
		if out.State, err = h.sto.Contracts.State(ctx, c); err != nil {
			return Revoked{}, err
		}
	}
	return out, nil
}

// inflightSet is the Idempotency-Key claims this node's requests hold
// (registered by renewLease, dropped by its stop): the operator page's
// "in-flight claims", and whether the claim that keeps a key in flight
// is one of them (holds). It is as large as the requests running.
type inflightSet struct {
	mu sync.Mutex
	m  map[*leaseRenewer]InFlightClaim
	// claims counts the claims of m by their claimKey.
	claims map[claimKey]int
}

// claimKey names one claim of an agent's key: the key and when the
// store recorded the claim (store.Claim.ClaimedAt, Unix ns, as
// idempotency.Hold.ClaimedAt reads it), so that a request whose claim
// was lost (an operator released it, or Redis lost it) while it still
// runs is not taken for the request that claimed the key after it.
type claimKey struct {
	agent, key string
	at         int64
}

// claimID is the claimKey of agent's key claimed at at.
func claimID(agent, key string, at time.Time) claimKey {
	return claimKey{agent: agent, key: key, at: at.UnixNano()}
}

func (s *inflightSet) add(r *leaseRenewer, c InFlightClaim, id claimKey) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.m == nil {
		s.m, s.claims = map[*leaseRenewer]InFlightClaim{}, map[claimKey]int{}
	}
	s.m[r] = c
	s.claims[id]++
	r.id = id
	s.mu.Unlock()
}

func (s *inflightSet) remove(r *leaseRenewer) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if _, ok := s.m[r]; ok {
		delete(s.m, r)
		if s.claims[r.id]--; s.claims[r.id] <= 0 {
			delete(s.claims, r.id)
		}
	}
	s.mu.Unlock()
}

// holds reports whether a request running on this node holds the claim
// id (claimID), its answer not yet being stored.
func (s *inflightSet) holds(id claimKey) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[id] > 0
}

// list returns at most max claims, oldest first, and how many there are.
func (s *inflightSet) list(max int) ([]InFlightClaim, int) {
	s.mu.Lock()
	all := make([]InFlightClaim, 0, len(s.m))
	for _, c := range s.m {
		all = append(all, c)
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].Since.Equal(all[j].Since) {
			return all[i].Since.Before(all[j].Since)
		}
		return all[i].AgentID+all[i].Key < all[j].AgentID+all[j].Key
	})
	n := len(all)
	if len(all) > max {
		all = all[:max]
	}
	return all, n
}

// RefusalRing is how many recent refusals a State keeps for the
// operator page (the oldest is dropped past it); the counts by reason
// cover every refusal since the State was created (one counter per
// reason token: the tokens are the engine's own, a closed set).
const RefusalRing = 256

// refusalLog is the recent refusals and the counts by reason.
type refusalLog struct {
	mu     sync.Mutex
	ring   [RefusalRing]RecentRefusal
	next   int // where the next one goes
	n      int // how many the ring holds
	counts map[string]int64
	total  int64
}

func (l *refusalLog) add(r RecentRefusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int64{}
	}
	l.counts[r.Reason]++
	l.total++
	l.ring[l.next] = r
	l.next = (l.next + 1) % RefusalRing
	l.n = min(l.n+1, RefusalRing)
}

// view returns the counts by reason (most first), their total, and at
// most max recent refusals, newest first.
func (l *refusalLog) view(max int) ([]RefusalCount, int64, []RecentRefusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := make([]RefusalCount, 0, len(l.counts))
	for r, n := range l.counts {
		counts = append(counts, RefusalCount{Reason: r, Count: n})
	}
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].Count != counts[j].Count {
			return counts[i].Count > counts[j].Count
		}
		return counts[i].Reason < counts[j].Reason
	})
	recent := make([]RecentRefusal, 0, min(max, l.n))
	for i := 1; i <= l.n && len(recent) < max; i++ {
		recent = append(recent, l.ring[(l.next-i+RefusalRing)%RefusalRing])
	}
	return counts, l.total, recent
}

// noteRefusal keeps x's answer in the refusal log when it is a refusal
// (it carries a reason token).
func (h *Engine) noteRefusal(x *exchange) {
	if x.reason == "" {
		return
	}
	agent := ""
	if x.agentIDValid {
		agent = x.agentID
	}
	h.st.refusals.add(RecentRefusal{At: h.now().UTC(), Status: x.status, Reason: x.reason, Method: x.method,
		AgentID: agent, Binding: x.in.Binding, Kind: requestKinds[x.kind], RequestID: x.requestID})
}
