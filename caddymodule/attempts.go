package caddymodule

import "sync"

// attemptRecord is one RCNS attempt (spec §17.3 target=rcns-attempt).
type attemptRecord struct {
	ID          string            `json:"attempt_id"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	AgentID     string            `json:"agent_id"`
	TrustTier   int               `json:"trust_tier"`
	Locks       map[string]string `json:"locks"`
	Reason      string            `json:"reason"`
	Explanation string            `json:"explanation"`
	At          string            `json:"at"`
}

// attemptRing is a bounded ring of attempt records; the oldest is
// evicted first.
type attemptRing struct {
	mu    sync.Mutex
	size  int
	order []string
	byID  map[string]*attemptRecord
}

func newAttemptRing(n int) *attemptRing {
	return &attemptRing{size: n, byID: map[string]*attemptRecord{}}
}

func (a *attemptRing) resize(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.size = n
	a.trimLocked()
}

func (a *attemptRing) add(rec *attemptRecord) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byID[rec.ID] = rec
	a.order = append(a.order, rec.ID)
	a.trimLocked()
}

func (a *attemptRing) trimLocked() {
	for len(a.order) > a.size {
		delete(a.byID, a.order[0])
		a.order = a.order[1:]
	}
}

func (a *attemptRing) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.order)
}

func (a *attemptRing) get(id string) (*attemptRecord, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.byID[id]
	return r, ok
}
