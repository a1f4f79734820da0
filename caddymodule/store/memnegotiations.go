package store

import (
	"context"
	"sync"
	"time"
)

// memNegotiations are the memory store's PROPOSE negotiations
// (Negotiations): at most max, the oldest kept forgotten first, each for
// NegotiationIdle after its last turn.
type memNegotiations struct {
	mu    sync.Mutex
	now   func() time.Time
	max   int
	byID  map[string]*memNegotiation
	order []string // ids in the order they were first kept, oldest first; an id forgotten early stays until its turn to go
}

type memNegotiation struct {
	agent      string
	rejections int
	last       time.Time // the last turn's time
}

func newMemNegotiations(max int, now func() time.Time) *memNegotiations {
	return &memNegotiations{now: now, max: max, byID: map[string]*memNegotiation{}}
}

// keptLocked returns agent's negotiation id while it is kept.
func (n *memNegotiations) keptLocked(agent, id string, now time.Time) *memNegotiation {
	ng, ok := n.byID[id]
	switch {
	case !ok || ng.agent != agent:
		return nil
	case now.Sub(ng.last) >= NegotiationIdle:
		delete(n.byID, id)
		return nil
	}
	return ng
}

// Turn never fails.
func (n *memNegotiations) Turn(_ context.Context, agent, id string) (int, bool, error) {
	now := n.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	ng := n.keptLocked(agent, id, now)
	if ng == nil {
		return 0, false, nil
	}
	ng.last = now
	return ng.rejections, true, nil
}

// Record never fails.
func (n *memNegotiations) Record(_ context.Context, agent, id string, rejected bool) (int, error) {
	now := n.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	ng := n.keptLocked(agent, id, now)
	if ng == nil {
		if _, taken := n.byID[id]; taken { // another agent's: an ID the gateway minted is never another's
			return 0, nil
		}
		ng = &memNegotiation{agent: agent}
		n.byID[id] = ng
		n.order = append(n.order, id)
		for len(n.order) > n.max {
			delete(n.byID, n.order[0])
			n.order[0] = ""
			n.order = n.order[1:]
		}
	}
	if rejected {
		ng.rejections++
	}
	ng.last = now
	return ng.rejections, nil
}
