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
	ring    []*lcEntry // len <= perAgent
	next    int        // index the next entry goes to once full
	elem    *list.Element
}

// lcEntry is one stored event: its payload, complete (agent_id and
// issued_at set), and the entry [Lifecycle.Emit] and [Lifecycle.List]
// return, built from it once, by the first of them that needs it.
// Ed25519 signatures and the payload's encoding are deterministic, so
// the envelope built when the stream is first read is byte for byte the
// one built when the event was recorded.
type lcEntry struct {
	signer  *Signer
	typ     string // event_type
	payload map[string]any
	once    sync.Once
	stored  map[string]any // format, envelope, audit_id, event_type
	err     error
}

// entry returns e's stored form, signing it the first time.
func (e *lcEntry) entry() (map[string]any, error) {
	e.once.Do(func() {
		compact, auditID, err := e.signer.sign(e.payload, TypLifecycle)
		if err != nil {
			e.err = fmt.Errorf("%w: %v", ErrInvalidEvent, err)
			return
		}
		e.stored = map[string]any{
			"format":     "jws",
			"envelope":   compact,
			"audit_id":   auditID,
			"event_type": e.typ,
		}
		e.payload = nil
	})
	return e.stored, e.err
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
	e, err := l.newEntry(agentID, event, false)
	if err != nil {
		return nil, err
	}
	stored, err := e.entry()
	if err != nil {
		return nil, err
	}
	l.store(agentID, e)
	return copyEntry(stored), nil
}

// Record is Emit for the request path: it checks and stamps event as
// Emit does and stores it, but leaves the envelope to be signed when the
// stream is first read ([Lifecycle.List]), off the answer's critical
// path. Every value of event must be a string (the engine's rcns_*
// events), so that the deferred encoding cannot fail. The envelope and
// audit_id List returns are the bytes Emit would have returned at the
// same clock reading (Ed25519 and the payload's encoding are
// deterministic; issued_at is taken here). Errors wrap [ErrInvalidEvent].
func (l *Lifecycle) Record(agentID string, event map[string]any) error {
	e, err := l.newEntry(agentID, event, true)
	if err != nil {
		return err
	}
	l.store(agentID, e)
	return nil
}

// newEntry checks event and returns its entry, payload completed (a
// copy: event is not modified); stringsOnly requires every value to be a
// string.
func (l *Lifecycle) newEntry(agentID string, event map[string]any, stringsOnly bool) (*lcEntry, error) {
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
		if _, ok := v.(string); stringsOnly && !ok {
			return nil, fmt.Errorf("%w: %s is %T, not a string", ErrInvalidEvent, k, v)
		}
		payload[k] = v
	}
	payload["agent_id"] = agentID
	if _, ok := payload["issued_at"]; !ok {
		payload["issued_at"] = l.now().UTC().Format(time.RFC3339Nano)
	}
	return &lcEntry{signer: l.signer, typ: typ, payload: payload}, nil
}

// store puts e at the head of agentID's stream.
func (l *Lifecycle) store(agentID string, e *lcEntry) {
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
		st.ring = append(st.ring, e)
	} else {
		st.ring[st.next] = e
		st.next = (st.next + 1) % l.perAgent
	}
}

// List returns up to limit of agentID's entries (shape as [Lifecycle.Emit]
// returns), newest first; limit <= 0 means all that are kept. An unknown
// agent has an empty (nil) list. The maps are copies. Entries stored by
// [Lifecycle.Record] are signed here, once, outside the lock; one whose
// payload cannot be encoded (Record refuses those) is left out.
func (l *Lifecycle) List(agentID string, limit int) []map[string]any {
	l.mu.Lock()
	st, ok := l.agents[agentID]
	if !ok {
		l.mu.Unlock()
		return nil
	}
	n := len(st.ring)
	if limit <= 0 || limit > n {
		limit = n
	}
	picked := make([]*lcEntry, 0, limit)
	// Newest is just before next once the ring is full, else the last.
	newest := n - 1
	if n == l.perAgent {
		newest = (st.next - 1 + n) % n
	}
	for i := 0; i < limit; i++ {
		picked = append(picked, st.ring[(newest-i+n)%n])
	}
	l.mu.Unlock()
	out := make([]map[string]any, 0, len(picked))
	for _, e := range picked {
		if stored, err := e.entry(); err == nil {
			out = append(out, copyEntry(stored))
		}
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
