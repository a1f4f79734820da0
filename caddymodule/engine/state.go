package engine

import (
	"crypto/rand"
	"sync"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// State is what outlives a configuration reload: the host keeps one per
// Config.Name and hands it to every engine of that name (the Caddy
// module shares it through a caddy.UsagePool). What every door and node
// shares (idempotency records, limits, contracts, the replay cache,
// attempts, retained records, PROPOSE negotiations) is in the store: the memory store when
// the engine runs store memory (created by the first such engine, see
// Memory), or Redis. What stays on each node is here: the durable
// records and the recipe drift check.
type State struct {
	mem     *store.Memory
	records *recordState
	// inflight and refusals are this node's in-flight claims and
	// recent refusals, for the operator page (operator.go).
	inflight *inflightSet
	refusals *refusalLog
	mu       sync.Mutex
	recipes  map[string]string // name@version → content hash ever loaded
	// sealKey is this process's random 32-byte MAC key for state the
	// doors hand a client to return, used with store memory (SealKey).
	sealKey []byte
}

// NewState is the empty state of the handler named name.
func NewState(name string) *State {
	return &State{
		recipes:  map[string]string{},
		records:  &recordState{name: name},
		inflight: &inflightSet{},
		refusals: &refusalLog{},
		sealKey:  newSealKey(),
	}
}

// newSealKey is a random 32-byte key (crypto/rand.Read does not fail).
func newSealKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// Destruct closes the records and the memory store's limiters; the host
// calls it when the last engine using the state goes away. Its error is
// the memory store's Close.
func (s *State) Destruct() error {
	s.records.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem != nil {
		return s.mem.Close()
	}
	return nil
}

// Memory is the state's memory store (store memory), created with
// limits l on the first call. A later call leaves it as it is: the
// configuration being loaded applies its limits at its first request
// (Engine.Activate), so a load that fails changes nothing of the
// running configuration's bounds (spec §15.4).
func (s *State) Memory(l store.Limits) *store.Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil {
		s.mem = store.NewMemory(l, nil)
	}
	return s.mem
}

// MemoryStore is the state's memory store, nil before an engine of
// store memory attached it (Memory).
func (s *State) MemoryStore() *store.Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mem
}
