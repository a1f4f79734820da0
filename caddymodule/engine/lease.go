package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"go.uber.org/zap"
)

// leaseRenewer renews an Idempotency-Key claim's lease every third of
// it while its request runs (ARCHITECTURE.md "Beyond one machine"), so
// a request that outlives its expected run keeps its key in flight,
// and only a node that stopped lets the lease end (the key is then
// outcome-unknown). A nil *leaseRenewer does nothing.
//
// A panic in a renewal (a defect: the store's Renew, or the lines it
// logs) is recovered and logged at ERROR ("panic renewing an
// Idempotency-Key lease", with the key and the request), and that
// claim's renewals stop: the request runs on, and its lease ends as a
// stopped node's does (a repeat of the key is outcome-unknown after
// it) instead of a defect being hit again every third of a lease for
// as long as the request runs. The process goes on
// (TestPanicInRenewalStopsRenewals).
type leaseRenewer struct {
	set     *inflightSet // where the claim is listed while it runs
	id      claimKey     // its key there (under set.mu)
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// renewLease starts renewing c's lease (lease; 0: the store's) for x's
// request, until stop.
func (h *Engine) renewLease(x *exchange, c store.Claim, lease time.Duration) *leaseRenewer {
	if lease <= 0 {
		lease = h.sto.Idempotency.Limits().Lease
	}
	every := max(lease/3, time.Second)
	r := &leaseRenewer{set: h.st.inflight}
	agent, key := c.Key()
	r.set.add(r, InFlightClaim{AgentID: agent, Key: key, What: x.method + " " + x.path, Binding: x.in.Binding, Since: time.Now()},
		claimID(agent, key, c.ClaimedAt()))
	log := x.log() // built here: renew runs on a timer's goroutine
	var renew func()
	renew = func() {
		defer recovered.Guard(log, "panic renewing an Idempotency-Key lease; its renewals stop and the claim is left to its lease",
			zap.String("agent_id", agent), zap.String("key", key), zap.String("request", x.method+" "+x.path))
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := c.Renew(ctx, lease)
		cancel()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.stopped {
			return
		}
		switch {
		case errors.Is(err, store.ErrClaimLost):
			// Released by an operator, or Redis lost it: nothing to renew.
			log.Warn("an Idempotency-Key claim was lost while its request ran (an operator released or resolved it, or the store lost it); its answer will not be stored",
				zap.String("agent_id", x.agentID), zap.String("request", x.method+" "+x.path))
			return
		case err != nil:
			log.Debug("renewing an Idempotency-Key lease failed; retrying", zap.String("agent_id", x.agentID), zap.Error(err))
		}
		r.t = time.AfterFunc(every, renew)
	}
	r.t = time.AfterFunc(every, renew)
	return r
}

// stop ends the renewals (the answer is about to be stored, or the
// claim released).
func (r *leaseRenewer) stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return // stopped by the answer's write; Serve stops it again
	}
	r.stopped = true
	r.t.Stop()
	r.set.remove(r)
}
