package caddymodule

import (
	"fmt"
	"sync"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddyserver/caddy/v2"
)

// state outlives config reloads; it is shared by handlers with the same
// Name through a caddy.UsagePool.
type state struct {
	contracts    *recipes.Store
	idem         *idempotency.Store
	limiters     map[string]*limiterSlot
	negotiations *negotiations
	records      *recordState
	replay       *httpsig.ReplayCache
	attempts     *attemptRing
	mu           sync.Mutex
	recipes      map[string]string // name@version → content hash ever loaded
}

// limiterSlot keeps a budget's limiter across reloads while its
// configuration is unchanged.
type limiterSlot struct {
	sig string
	l   *ratelimit.Limiter
}

// Destruct closes the limiters when the last handler using the state
// goes away.
func (s *state) Destruct() error {
	s.records.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, slot := range s.limiters {
		slot.l.Close()
	}
	return nil
}

// limiter returns the state's limiter for budget b, replacing it when
// its configuration changed.
func (s *state) limiter(b ratelimit.Budget, maxAgents int64) (*ratelimit.Limiter, error) {
	sig := fmt.Sprintf("%d/%g/%d", b.Burst, b.PerMinute, maxAgents)
	if slot, ok := s.limiters[b.Name]; ok {
		if slot.sig == sig {
			return slot.l, nil
		}
		slot.l.Close()
	}
	l, err := ratelimit.New(b, maxAgents, nil)
	if err != nil {
		return nil, err
	}
	s.limiters[b.Name] = &limiterSlot{sig: sig, l: l}
	return l, nil
}

var states = caddy.NewUsagePool()

// cleanup releases the upstream clients and the engine's hold on the
// shared state (the last holder of a name destructs it).
func (h *engine) cleanup() error {
	h.unregister()
	for _, u := range h.upstreams {
		u.Close()
	}
	if h.st != nil {
		_, err := states.Delete(h.Name)
		return err
	}
	return nil
}
