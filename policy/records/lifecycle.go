package records

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lifecycle event types written by the RCNS substrate (RCNS §18).
const (
	// EventProposeAccepted: a synthesized contract was instantiated, by
	// the gate or by PROPOSE (for confirm-first, when the 461 is produced).
	EventProposeAccepted = "rcns_propose_accepted"
	// EventRevoke: REVOKE target=contract.
	EventRevoke = "rcns_revoke"
	// EventRelease: SUSPEND synthesis_id=..., or stale sweep eviction
	// (reason policy-change-invalidation).
	EventRelease = "rcns_release"
)

// Defaults for [LifecycleOptions].
const (
	// DefaultLifecyclePerAgent is how many events are kept per agent.
	DefaultLifecyclePerAgent = 1000
	// DefaultLifecycleAgents is how many agents' streams are kept.
	DefaultLifecycleAgents = 10_000
)

// ErrInvalidEvent is wrapped by the errors [Lifecycle.Emit] returns for
// an event it refuses (no event_type, an agent_id that differs from the
// stream's, an empty agent id, a value JSON cannot encode).
var ErrInvalidEvent = errors.New("records: invalid lifecycle event")

// LifecycleOptions configures [NewLifecycle].
type LifecycleOptions struct {
	// PerAgent is how many events are kept per agent, oldest dropped
	// first; zero means [DefaultLifecyclePerAgent].
	PerAgent int
	// MaxAgents is how many agents' streams are kept, the least recently
	// written dropped first; zero means [DefaultLifecycleAgents].
	MaxAgents int
	// Now stamps issued_at when the event has none; nil means time.Now.
	Now func() time.Time
}

// Lifecycle is the per-agent lifecycle stream of RCNS §18, kept in
// memory and bounded: signed rcns_* events, read newest first by INSPECT
// target=lifecycle. It is safe for concurrent use.
type Lifecycle struct {
	signer    *Signer
	perAgent  int
	maxAgents int
	now       func() time.Time

	mu     sync.Mutex
	agents map[string]*stream
	lru    list.List // of *stream, most recently written at the front
}

// stream is one agent's ring of entries.
type stream struct {
	agentID string
	ring    []map[string]any // len <= perAgent
	next    int              // index the next entry goes to once full
	elem    *list.Element
}

// NewLifecycle returns an empty Lifecycle whose envelopes s signs; a nil
// s produces unsigned (`alg: none`) envelopes. Negative bounds are an
// error.
func NewLifecycle(s *Signer, opt LifecycleOptions) (*Lifecycle, error) {
	if opt.PerAgent < 0 || opt.MaxAgents < 0 {
		return nil, fmt.Errorf("records: lifecycle bounds must not be negative (per agent %d, agents %d)", opt.PerAgent, opt.MaxAgents)
	}
	if opt.PerAgent == 0 {
		opt.PerAgent = DefaultLifecyclePerAgent
	}
	if opt.MaxAgents == 0 {
		opt.MaxAgents = DefaultLifecycleAgents
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	l := &Lifecycle{
		signer:    s,
		perAgent:  opt.PerAgent,
		maxAgents: opt.MaxAgents,
		now:       opt.Now,
		agents:    map[string]*stream{},
	}
	l.lru.Init()
	return l, nil
}

// Emit signs event as a JWS Compact envelope (typ "agtp-lifecycle+jwt")
// and stores it at the head of agentID's stream (RCNS §18, OP-26).
// event is the flat payload: "event_type" (a non-empty string, e.g.
// [EventProposeAccepted]) is required; "agent_id" is set to agentID when
// absent and must equal it when present; "issued_at" (RFC 3339 UTC with nanoseconds) is
// set from the clock when absent. event is not modified. The stored and
// returned entry is
//
//	{"format":"jws","envelope":COMPACT,"audit_id":SHA256HEX,"event_type":T}
//
// where audit_id is the lowercase hex SHA-256 of the envelope. Errors
// wrap [ErrInvalidEvent].
func (l *Lifecycle) Emit(agentID string, event map[string]any) (entry map[string]any, err error) {
	if agentID == "" {
		return nil, fmt.Errorf("%w: empty agent id", ErrInvalidEvent)
	}
	typ, _ := event["event_type"].(string)
	if typ == "" {
		return nil, fmt.Errorf("%w: event_type missing or not a non-empty string", ErrInvalidEvent)
	}
	if v, ok := event["agent_id"]; ok && v != agentID {
		return nil, fmt.Errorf("%w: agent_id %v differs from %q", ErrInvalidEvent, v, agentID)
	}
	payload := make(map[string]any, len(event)+2)
	for k, v := range event {
		payload[k] = v
	}
	payload["agent_id"] = agentID
	if _, ok := payload["issued_at"]; !ok {
		payload["issued_at"] = l.now().UTC().Format(time.RFC3339Nano)
	}
	compact, auditID, err := l.signer.sign(payload, TypLifecycle)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	stored := map[string]any{
		"format":     "jws",
		"envelope":   compact,
		"audit_id":   auditID,
		"event_type": typ,
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.agents[agentID]
	if !ok {
		st = &stream{agentID: agentID}
		st.elem = l.lru.PushFront(st)
		l.agents[agentID] = st
		for len(l.agents) > l.maxAgents {
			old := l.lru.Back().Value.(*stream)
			l.lru.Remove(old.elem)
			delete(l.agents, old.agentID)
		}
	} else {
		l.lru.MoveToFront(st.elem)
	}
	if len(st.ring) < l.perAgent {
		st.ring = append(st.ring, stored)
	} else {
		st.ring[st.next] = stored
		st.next = (st.next + 1) % l.perAgent
	}
	return copyEntry(stored), nil
}

// List returns up to limit of agentID's entries (shape as [Lifecycle.Emit]
// returns), newest first; limit <= 0 means all that are kept. An unknown
// agent has an empty (nil) list. The maps are copies.
func (l *Lifecycle) List(agentID string, limit int) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.agents[agentID]
	if !ok {
		return nil
	}
	n := len(st.ring)
	if limit <= 0 || limit > n {
		limit = n
	}
	out := make([]map[string]any, 0, limit)
	// Newest is just before next once the ring is full, else the last.
	newest := n - 1
	if n == l.perAgent {
		newest = (st.next - 1 + n) % n
	}
	for i := 0; i < limit; i++ {
		out = append(out, copyEntry(st.ring[(newest-i+n)%n]))
	}
	return out
}

// copyEntry copies a stored entry (string values only).
func copyEntry(e map[string]any) map[string]any {
	out := make(map[string]any, len(e))
	for k, v := range e {
		out[k] = v
	}
	return out
}
