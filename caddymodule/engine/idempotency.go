package engine

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/plural"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
)

// claim claims the request's Idempotency-Key, if it has one, for lease
// (0: the store's, the longest plan's). It returns true when the
// request should go on (it then holds the claim, renewed while it
// runs); false when it has been answered: a replay, 409 in flight or
// outcome-unknown, 422 key reused, or 503 store full (spec §12.2,
// ARCHITECTURE.md "Idempotency").
func (h *Engine) claim(x *exchange, req *request, lease time.Duration) bool {
	if req.idemKey == "" || x.claim != nil {
		return true // no key, or claimed already (a gate request that joined a contract runs it)
	}
	// A claim stays in x.preclaimed until x.claim takes it over below,
	// so that a panic (a defect) in between still finds it to release
	// (releaseUnrun) instead of losing it to outcome-unknown.
	cl := x.preclaimed
	rechecks := 0
	if h.shared != nil {
		rechecks = len(inFlightRechecks)
	}
	for try := 0; ; try++ {
		if cl == nil {
			// A presentation that confirms the 461 its key stored runs the
			// contract under the key instead of replaying the preview
			// (ClaimRequest.SynthesisID); any other presentation is claimed
			// as a repeat.
			h.awaitSettling(x, req.caller.Agent.ID, req.idemKey)
			sp := x.startSpan(SpanClaim)
			c, err := h.sto.Idempotency.Claim(x.ctx(), idempotency.ClaimRequest{AgentID: req.caller.Agent.ID, Key: req.idemKey,
				Fingerprint: x.fingerprint(req), SynthesisID: x.presentedID, Pending: x.presentedPending, Lease: lease, Holder: x.holder()})
			sp.end()
			if err != nil {
				h.storeFailed(x, err)
				return false
			}
			cl = &c
			x.preclaimed = cl
		}
		// With a shared store another node stores its answer beside the
		// answer (SettleLater): a repeat sent as soon as that answer
		// arrived may find the key still in flight for that round trip.
		// It claims again after each of inFlightRechecks before
		// answering 409, unless a request running on this node holds
		// that claim: its answer is not on its way yet.
		if cl.Outcome != idempotency.InFlight || try >= rechecks || h.runningHere(cl.Hold, req.caller.Agent.ID, req.idemKey) ||
			!pause(x.ctx(), inFlightRechecks[try]) {
			break
		}
		cl = nil
	}
	h.idempotencyChanged(x.ctx())
	if cl.Outcome != idempotency.Execute {
		x.preclaimed = nil // no claim of this request's to release
	}
	switch cl.Outcome {
	case idempotency.Execute:
		x.claim, x.preclaimed = cl.Claim, nil
		x.renewer = h.renewLease(x, cl.Claim, lease)
		return true
	case idempotency.Replay:
		h.metrics.idempotency("replay")
		x.replay(cl.Response)
	case idempotency.Mismatch:
		h.metrics.idempotency("conflict")
		x.keyRefused = true
		x.fail(agtp.IdempotencyKeyReused.New("this Idempotency-Key was used for a different request (method, target or body, or for another person behind this agent); use a new key"))
	case idempotency.OtherContract:
		h.metrics.idempotency("conflict")
		x.keyRefused = true
		x.fail(agtp.IdempotencyKeyReused.New("this Idempotency-Key holds the answer for another contract than the one presented (its 461 preview or its result); use a new key"))
	case idempotency.InFlight:
		h.metrics.idempotency("in_flight")
		x.keyRefused = true
		h.failInFlight(x, cl.Hold)
	case idempotency.OutcomeUnknown:
		h.metrics.idempotency("outcome_unknown")
		x.fail(outcomeUnknown(cl.Hold))
	default: // AgentFull, StoreFull
		h.metrics.idempotency("store_full")
		x.fail(idempotencyStoreFull(cl.Outcome, h.sto.Idempotency.Limits()))
	}
	return false
}

// awaitSettling is called before the request's Idempotency-Key
// (agent, key) is claimed: it notes them on x (the answer is stored
// under them) and, with a shared store, waits while this node is still
// storing an earlier answer of the key beside that answer
// (SharedStore.SettleLater), so a repeat sent as soon as the answer
// arrived replays it instead of getting 409 in flight. It waits at most
// until the request's context ends.
func (h *Engine) awaitSettling(x *exchange, agent, key string) {
	if key == "" {
		return
	}
	x.idemAgent, x.idemKey = agent, key
	if h.shared != nil {
		h.shared.AwaitSettling(x.ctx(), agent, key)
	}
}

// runningHere reports whether hold, the claim that keeps agent's
// Idempotency-Key key in flight, is this node's and a request of this
// engine's State still runs under that very claim (inflightSet.holds:
// the key and when the store recorded the claim). A key this node is
// storing the answer of (SettleLater) is not running: awaitSettling
// waited for it on this store's client; a claim written by another
// process with this node_id, or stored by an earlier client of this
// one (a reload that changed the store's settings), is rechecked as
// another node's is. A request that ends during what would have been
// the rechecks is not waited for: its repeat gets the 409, as on the
// memory store.
func (h *Engine) runningHere(hold *idempotency.Hold, agent, key string) bool {
	return hold != nil && hold.Node == h.nodeID && h.st.inflight.holds(claimID(agent, key, hold.ClaimedAt))
}

// holder is what the request's claim records of it: this node and the
// dispatched pair.
func (x *exchange) holder() idempotency.Holder {
	return idempotency.Holder{Node: x.h.nodeID, What: x.method + " " + x.path}
}

// inFlightRechecks are how long a request that finds its
// Idempotency-Key in flight on a shared store waits before each of its
// claims again (5 ms, then 10, 20 and 40 ms more): longer than another
// node takes to store the answer it has already sent
// (SharedStore.SettleLater: gathered with its records, at most
// RecordBatchDelay, 2 ms, then a round trip; tens of milliseconds more
// while that node's CPU is starved or its Redis busy), so an immediate
// repeat replays it instead of getting 409 with a Retry-After of
// seconds. A request that finds a key truly in flight on another node
// answers 409 75 ms later, after five claims: within the Retry-After it
// would be told to wait anyway. One that finds it held by a request
// running on this node answers 409 after its one claim (runningHere).
var inFlightRechecks = [...]time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}

// pause waits d, or until ctx ends; it reports whether d passed.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// maxInFlightRetryAfter bounds the Retry-After of a 409
// idempotency-key-in-flight: most requests end well within their lease,
// so a retry comes back soon; it is never later than the lease's end.
const maxInFlightRetryAfter = 5 * time.Second

// failInFlight answers 409 idempotency-key-in-flight for a key whose
// request still runs under hold: retryable, with Retry-After at most the
// lease left (and at most maxInFlightRetryAfter).
func (h *Engine) failInFlight(x *exchange, hold *idempotency.Hold) {
	left := time.Second
	fields := map[string]any{}
	if hold != nil {
		left = max(min(time.Until(hold.LeaseEnds), maxInFlightRetryAfter), time.Second)
		fields["lease_ends_at"] = hold.LeaseEnds.UTC().Format(time.RFC3339Nano)
	}
	secs := int64((left + time.Second - 1) / time.Second)
	fields["retry_after_seconds"] = secs
	x.failWith(agtp.IdempotencyKeyInFlight.WithFields("a request with this Idempotency-Key is still running; retry with the same key after Retry-After seconds: you get its answer once it is stored", fields),
		map[string]string{"Retry-After": strconv.FormatInt(secs, 10)})
}

// outcomeUnknown is the 409 outcome-unknown answer to a key whose lease
// ended with no answer stored: the node running its request stopped,
// and the request may have run, in part or in whole. Not retryable: the
// key never runs it again. Steps do not record their start in the
// store (one more round trip a step), so the answer names the request
// and the node, not the steps (docs/cluster.md "Failure modes").
func outcomeUnknown(hold *idempotency.Hold) *agtp.Error {
	fields := map[string]any{}
	expl := "the gateway node that ran the request with this Idempotency-Key stopped before it stored an answer"
	if hold != nil {
		fields["node_id"] = hold.Node
		fields["request"] = hold.What
		fields["claimed_at"] = hold.ClaimedAt.UTC().Format(time.RFC3339Nano)
		fields["lease_ended_at"] = hold.LeaseEnds.UTC().Format(time.RFC3339Nano)
		expl = fmt.Sprintf("the gateway node %s that ran %s with this Idempotency-Key (claimed at %s) stopped before it stored an answer",
			hold.Node, hold.What, hold.ClaimedAt.UTC().Format(time.RFC3339))
	}
	expl += "; the request may have run, in part or in whole. This key will not run it again: check its effect (INSPECT target=audit for this agent's records, or the service itself) before acting, then use a new key"
	return agtp.OutcomeUnknown.WithFields(expl, fields)
}

// IdempotencyKeyAlias is the Python AGTP reference client's name for
// Idempotency-Key (spec conflict table, "idempotency header"). The
// gateway takes it as an alias rather than refusing it: a header that
// promises exactly-once is honoured, never ignored, and clients written
// against the reference client run once without a change (cases/04).
// Signed requests cover it whenever present (policy/httpsig), so an
// unsigned alias cannot key a signed request.
const IdempotencyKeyAlias = "RCNS-Idempotency-Key"

// idempotencyKeyOf returns the request's Idempotency-Key, parsed
// (policy/idempotency.ParseKey: a token or an RFC 8941 string), "" when
// the request has none. It is read from Idempotency-Key or its alias
// idempotencyKeyAlias; with both, they must carry the same key (a
// token and the quoted string of the same characters are one key), else
// 400 ambiguous-idempotency-key naming both. A malformed value is 400
// invalid-idempotency-key naming the header it came in. A key is one
// key whichever header carries it: the fingerprint and the store see the
// parsed key only, so a retry may switch headers and still replays.
// RCNS §12.2.
func idempotencyKeyOf(r *agtp.Request) (string, *agtp.Error) {
	key, e := idempotencyKeyHeaders(r)
	if e != nil {
		return "", e
	}
	if xv, ok := r.Value(LegacyIdempotencyKey); ok {
		// Never ignored (cases/04), never a key of its own: the same
		// key beside Idempotency-Key (a client library that sends both)
		// is fine; alone, or another key, is refused before anything runs.
		xk, err := idempotency.ParseKey(xv)
		switch {
		case key == "":
			return "", agtp.InvalidIdempotencyKey.New(LegacyIdempotencyKey + " is not read by this gateway, and a request that carries it may expect exactly-once: send the key as Idempotency-Key (RCNS §12.2)")
		case err != nil || xk != key:
			from := "Idempotency-Key"
			if !r.Has(from) {
				from = IdempotencyKeyAlias
			}
			return "", agtp.AmbiguousIdempotencyKey.New(from + " and " + LegacyIdempotencyKey + " carry different keys; send the key as Idempotency-Key alone")
		}
	}
	return key, nil
}

// LegacyIdempotencyKey is the X- prefixed idempotency header some HTTP
// client libraries and APIs use. The gateway does not key requests by
// it, and does not ignore it either (cases/04: a header that promises
// exactly-once is never silently dropped): alone it is 400
// invalid-idempotency-key naming Idempotency-Key; beside Idempotency-Key
// it must carry the same key (else 400 ambiguous-idempotency-key).
const LegacyIdempotencyKey = "X-Idempotency-Key"

// idempotencyKeyHeaders is idempotencyKeyOf without the legacy header.
func idempotencyKeyHeaders(r *agtp.Request) (string, *agtp.Error) {
	v, okKey := r.Value("Idempotency-Key")
	av, okAlias := r.Value(IdempotencyKeyAlias)
	if !okKey && !okAlias {
		return "", nil
	}
	parse := func(name, v string) (string, *agtp.Error) {
		key, err := idempotency.ParseKey(v)
		if err != nil {
			return "", agtp.InvalidIdempotencyKey.New(name + " must be 1-255 visible ASCII characters, as a token or a quoted string: " + err.Error())
		}
		return key, nil
	}
	if !okKey {
		return parse(IdempotencyKeyAlias, av)
	}
	key, e := parse("Idempotency-Key", v)
	if e != nil || !okAlias {
		return key, e
	}
	alias, e := parse(IdempotencyKeyAlias, av)
	if e != nil {
		return "", e
	}
	if alias != key {
		return "", agtp.AmbiguousIdempotencyKey.New("Idempotency-Key and " + IdempotencyKeyAlias + " (its alias) carry different keys; send one of them")
	}
	return key, nil
}

// SameIdempotencyKey reports whether two Idempotency-Key header values
// name one key: equal once parsed, or, when either is malformed, equal
// as sent (the engine then refuses the malformed one).
func SameIdempotencyKey(a, b string) bool {
	ka, errA := idempotency.ParseKey(a)
	kb, errB := idempotency.ParseKey(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return ka == kb
}

// fingerprint is the request's Idempotency-Key fingerprint
// (ARCHITECTURE.md "Idempotency"). A request that acts for a person other
// than its agent's own owner (identity oauth: the token's sub) binds it
// to that person (idempotency.OwnedFingerprint): keys stay the agent's,
// but one person's repeat of another's key is idempotency-key-reused,
// never the other's answer replayed.
func (x *exchange) fingerprint(req *request) string {
	fp := idempotency.Fingerprint(x.in.Method, x.fingerprintTarget(), req.raw)
	if p := x.person(); p != "" {
		return idempotency.OwnedFingerprint(fp, p)
	}
	return fp
}

// idempotencyStoreFull is the 503 for a Claim answered AgentFull or
// StoreFull (o): it names the bound that was hit, the store's
// (idempotency_max_records, reported when both are) or this agent's
// (idempotency_max_per_agent), with its effective value (defaults
// applied) in limit_records.
func idempotencyStoreFull(o idempotency.Outcome, l idempotency.Limits) *agtp.Error {
	knob, limit := "idempotency_max_per_agent", l.MaxPerAgent
	expl := fmt.Sprintf("this agent holds its maximum of %s (idempotency_max_per_agent); retry after some expire", plural.Count(limit, "idempotency record", "idempotency records"))
	if o == idempotency.StoreFull {
		knob, limit = "idempotency_max_records", l.MaxRecords
		expl = fmt.Sprintf("the gateway's idempotency store holds its maximum of %s for all agents (idempotency_max_records); retry later", plural.Count(limit, "record", "records"))
	}
	return agtp.IdempotencyStoreFull.WithFields(expl, map[string]any{"bound": knob, "limit_records": limit})
}
