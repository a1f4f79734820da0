package engine

import (
	"container/list"
	"fmt"
	"maps"
	"sync"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// Bounds of the per-agent negotiation record rings INSPECT
// target=negotiations reads (negRing).
const (
	// negRingPerAgent is how many records are kept per agent, the
	// oldest dropped first.
	negRingPerAgent = 200
	// negRingAgents is how many agents' rings are kept, the least
	// recently written dropped first.
	negRingAgents = 10_000
)

// negRing keeps each agent's newest negotiation records (the records
// negotiationRecord writes, of every kind), in memory on this node and
// bounded, for INSPECT target=negotiations: an agent reads its own
// without the operator's log. It is fed whether or not records_dir is
// set (the log is the durable copy; the ring is this node's recent
// view). Safe for concurrent use.
type negRing struct {
	mu     sync.Mutex
	agents map[string]*negStream
	lru    list.List // of *negStream, most recently written at the front
}

// negStream is one agent's ring.
type negStream struct {
	agentID string
	ring    []map[string]any // len <= negRingPerAgent
	next    int              // index the next record goes to once full
	elem    *list.Element
}

// add appends rec (not copied: the caller hands it over) to agentID's ring.
func (r *negRing) add(agentID string, rec map[string]any) {
	if agentID == "" {
		return // delivered to no agent
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.agents == nil {
		r.agents = map[string]*negStream{}
	}
	s := r.agents[agentID]
	if s == nil {
		if len(r.agents) >= negRingAgents {
			old := r.lru.Back().Value.(*negStream)
			r.lru.Remove(old.elem)
			delete(r.agents, old.agentID)
		}
		s = &negStream{agentID: agentID}
		s.elem = r.lru.PushFront(s)
		r.agents[agentID] = s
	} else {
		r.lru.MoveToFront(s.elem)
	}
	if len(s.ring) < negRingPerAgent {
		s.ring = append(s.ring, rec)
		return
	}
	s.ring[s.next] = rec
	s.next = (s.next + 1) % negRingPerAgent
}

// list is agentID's newest records of kind ("": every kind), newest
// first, at most limit; each a copy.
func (r *negRing) list(agentID, kind string, limit int) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.agents[agentID]
	out := []map[string]any{}
	if s == nil {
		return out
	}
	n := len(s.ring)
	for i := 0; i < n && len(out) < limit; i++ {
		// Newest first: the one before next, backwards.
		rec := s.ring[((s.next-1-i)%n+n)%n]
		if kind != "" && rec["kind"] != kind {
			continue
		}
		out = append(out, maps.Clone(rec))
	}
	return out
}

// inspectNegotiations serves INSPECT target=negotiations: the caller's
// newest negotiation records on this node (negRing), newest first,
// optionally of one kind (gate, propose, release, revoke,
// protocol-version), at most limit (default DefaultPageLimit, at most
// MaxPageLimit, no pages); agent_id another agent's, with inspect:all.
func (h *Engine) inspectNegotiations(x *exchange, req *request, p map[string]any) {
	const what = "INSPECT target=negotiations"
	agent, e := agentParam(p, what)
	if e != nil {
		x.fail(e)
		return
	}
	kind, e := strParam(p, what, "kind")
	if e != nil {
		x.fail(e)
		return
	}
	if kind != "" && !records.IsKind(kind) {
		x.fail(agtp.InvalidParameter.New(fmt.Sprintf("%s: kind %q is not a negotiation record kind (%s)", what, textcut.Clip(kind), records.KindList())))
		return
	}
	limit, e := listingParam(x.query, p, "limit", DefaultPageLimit, limitValue)
	if e != nil {
		x.fail(e)
		return
	}
	cursor, e := listingParam(x.query, p, "cursor", "", cursorValue)
	if e != nil {
		x.fail(e)
		return
	}
	if cursor != "" {
		x.fail(agtp.InvalidCursor.New(fmt.Sprintf("%s has no pages: it returns the newest limit records (at most %d); drop cursor", what, MaxPageLimit)))
		return
	}
	if agent == "" {
		agent = req.caller.Agent.ID
	}
	if agent != req.caller.Agent.ID && !h.inspectAll(req) {
		x.fail(agtp.Forbidden.New("only the agent itself or a caller carrying inspect:all may read its negotiation records"))
		return
	}
	body := map[string]any{"target": "negotiations", "agent_id": agent, "node_id": h.nodeID,
		"records": h.st.records.negs.list(agent, kind, limit)}
	if kind != "" {
		body["kind"] = kind
	}
	x.write(200, agtp.MediaAGTP, body, nil)
}
