package caddymodule

import (
	"sync"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddyserver/caddy/v2"
)

// state outlives config reloads; it is shared by handlers with the same
// Name through a caddy.UsagePool. What every door shares (idempotency
// records, limits, contracts, the replay cache, attempts, retained
// records) is in the store: mem, the memory store, when the handler runs
// store memory (created by the first such handler), or Redis
// (storepool.go). What stays on each node is here: the durable records,
// the PROPOSE negotiations and the recipe drift check.
type state struct {
	mem          *store.Memory
	negotiations *negotiations
	records      *recordState
	mu           sync.Mutex
	recipes      map[string]string // name@version → content hash ever loaded
}

// Destruct closes the records and the memory store's limiters when the
// last handler using the state goes away.
func (s *state) Destruct() error {
	s.records.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem != nil {
		return s.mem.Close()
	}
	return nil
}

// memory returns the state's memory store bounded by l, creating it on
// first use; a later configuration's bounds apply in place
// (store.Memory.SetLimits).
func (s *state) memory(l store.Limits) *store.Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil {
		s.mem = store.NewMemory(l, nil)
	} else {
		s.mem.SetLimits(l)
	}
	return s.mem
}

var states = caddy.NewUsagePool()

// cleanup releases the upstream clients, the engine's store and its
// hold on the shared state (the last holder of a name destructs it).
func (h *engine) cleanup() error {
	h.unregister()
	for _, u := range h.upstreams {
		u.Close()
	}
	h.releaseStore()
	if h.st != nil {
		_, err := states.Delete(h.Name)
		return err
	}
	return nil
}
