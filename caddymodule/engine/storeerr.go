package engine

import (
	"context"
	"errors"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redisstore"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
)

// storeRetryAfter is the Retry-After of a 503 store-unavailable, in
// seconds: the store's client reconnects by itself, and a health check
// runs every second while it is down.
const storeRetryAfter = 1

// storeFullRetryAfter is the Retry-After of a 503 store-unavailable
// whose store is full (Redis over maxmemory), in seconds: it takes an
// operator or expiring keys to make room.
const storeFullRetryAfter = 10

// storeUnavailable is the 503 store-unavailable answer; exchange.fail
// adds its Retry-After and marks the exchange (storeFailed).
func storeUnavailable() *agtp.Error {
	return agtp.StoreUnavailable.WithFields("the gateway's state store is unavailable (it refused the connection or did not answer in time); nothing was executed; retry after Retry-After seconds",
		map[string]any{"retry_after_seconds": storeRetryAfter})
}

// ctx is the context of the request's store calls: the door's request
// context (its deadline bounds them with the store's own timeouts).
func (x *exchange) ctx() context.Context {
	if x.in.Context != nil {
		return x.in.Context
	}
	return context.Background()
}

// storeFailed answers a store call that failed. An error wrapping
// store.ErrUnavailable is 503 store-unavailable, retryable, with
// Retry-After; nothing was executed (ARCHITECTURE.md "Beyond one
// machine"). A captured plan this node cannot rebuild
// (recipes.ErrPlan) is 464 synthesis-error; anything else 500.
func (h *Engine) storeFailed(x *exchange, err error) {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		// DEBUG: the outage is logged once each way by the health check
		// (logOutage), and each 503 is counted in the metrics.
		x.log().Debug("store unavailable: answering 503 store-unavailable", zap.String("agent_id", x.agentID),
			zap.String("method", x.method), zap.Error(err))
		if redisstore.IsOOM(err) {
			x.retryAfter = storeFullRetryAfter
			x.fail(agtp.StoreUnavailable.WithFields("the gateway's state store is full (Redis is over its maxmemory) and refuses new state; nothing was executed; retry after Retry-After seconds",
				map[string]any{"retry_after_seconds": storeFullRetryAfter}))
			return
		}
		var ra *store.RetryAfterError
		if errors.As(err, &ra) {
			secs := int64((ra.After + time.Second - 1) / time.Second)
			x.retryAfter = secs
			x.fail(agtp.StoreUnavailable.WithFields(ra.Why+"; nothing was executed",
				map[string]any{"retry_after_seconds": secs}))
			return
		}
		x.fail(storeUnavailable())
	case errors.Is(err, recipes.ErrPlan):
		x.log().Error("a contract's captured plan cannot run on this node", zap.String("agent_id", x.agentID), zap.Error(err))
		x.fail(agtp.SynthesisError.New("the contract's captured plan cannot be rebuilt on this gateway node (a method it calls is not served, or an endpoint header's ${VAR} is not set here); synthesize a new one"))
	default:
		x.log().Error("store call failed", zap.String("agent_id", x.agentID), zap.Error(err))
		x.fail(agtp.InternalError.New("the gateway's state store failed"))
	}
}

// contractsChanged updates the live-contract gauge after a mint or an
// end: counted at once by the memory store, by the health check with
// Redis (no round trip on the request path).
func (h *Engine) contractsChanged(ctx context.Context) {
	if h.mem == nil {
		return
	}
	stamp := gaugeStamp()
	if n, err := h.sto.Contracts.Len(ctx); err == nil {
		h.metrics.setActiveContracts(stamp, n)
	}
}

// idempotencyChanged updates the idempotency-record gauge after a
// claim (memory store only, as contractsChanged).
func (h *Engine) idempotencyChanged(ctx context.Context) {
	if h.mem == nil {
		return
	}
	stamp := gaugeStamp()
	if n, err := h.sto.Idempotency.Len(ctx); err == nil {
		h.metrics.setIdempotencyRecords(stamp, n)
	}
}

// attemptsChanged updates the attempt-record gauge after an add
// (memory store only, as contractsChanged).
func (h *Engine) attemptsChanged(ctx context.Context) {
	if h.mem == nil {
		return
	}
	stamp := gaugeStamp()
	if n, err := h.sto.Attempts.Len(ctx); err == nil {
		h.metrics.setAttemptRingSize(stamp, n)
	}
}
