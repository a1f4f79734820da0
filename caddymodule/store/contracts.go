package store

import (
	"errors"
	"fmt"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Delivery modes of a gate synthesis (RCNS §13.3; the Caddyfile's
// `mode`).
const (
	// ModeConfirmFirst answers a gate synthesis 461 with the contract
	// pending until its holder presents it.
	ModeConfirmFirst = "confirm-first"
	// ModeOptimistic runs a gate synthesis at once (263).
	ModeOptimistic = "optimistic"
)

// InitialState is the state a new contract starts in: pending when it
// comes from the gate (recipes.OriginGate) under confirm-first (a 461
// preview its holder has not accepted yet, which never resolves by
// pair), else active (an optimistic gate synthesis, or a PROPOSE the
// 263 grants). RCNS §13.3, §13.4; ARCHITECTURE.md "One request".
func InitialState(origin, mode string) string {
	if mode == ModeConfirmFirst && origin == recipes.OriginGate {
		return recipes.StatePending
	}
	return recipes.StateActive
}

// ErrStoreFull and ErrAgentFull are the bounds a Mint can meet: every
// live contract, or the agent's. They are recipes' sentinels, so
// errors.Is matches either form.
var (
	ErrStoreFull = recipes.ErrStoreFull
	ErrAgentFull = recipes.ErrAgentFull
)

// LimitError is Mint's refusal at a bound: Err is ErrStoreFull or
// ErrAgentFull, Held the live contracts counted against it (all, or
// the agent's), Limit the bound in force. Its Error is the explanation
// the engine sends in the 464 synthesis-error body (and PROPOSE's 463),
// naming the Caddyfile knob.
type LimitError struct {
	Err   error
	Held  int
	Limit int
}

// Error names the bound, what is held and what to do.
func (e *LimitError) Error() string {
	if errors.Is(e.Err, ErrAgentFull) {
		return fmt.Sprintf("the agent already holds %s; max_contracts_per_agent is %d; release some first", plural.Count(e.Held, "live contract", "live contracts"), e.Limit)
	}
	return fmt.Sprintf("the gateway holds %s, its maximum (max_contracts is %d); try later", plural.Count(e.Held, "live contract", "live contracts"), e.Limit)
}

// Unwrap returns ErrStoreFull or ErrAgentFull.
func (e *LimitError) Unwrap() error { return e.Err }

// limitError turns recipes.Store.Put's refusal into a *LimitError; other
// errors pass unchanged.
func limitError(err error) error {
	var le *recipes.LimitError
	if errors.As(err, &le) {
		return &LimitError{Err: le.Err, Held: le.Held, Limit: le.Limit}
	}
	return err
}
