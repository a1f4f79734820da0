// Package idempotency is the Idempotency-Key store of the gateway
// (RCNS §12.2, OP-15; ARCHITECTURE.md "Idempotency"): it parses the key,
// fingerprints requests, and keeps, per (Agent-ID, key), either an
// in-flight claim or the stored response to replay.
//
// The store is in memory and bounded: at most Limits.MaxRecords records in
// all and Limits.MaxPerAgent per agent, each kept for Limits.Window after
// its response was stored. The in-flight claim is a lock held in a map
// under a mutex, never in a cache that could evict it, so two concurrent
// requests with one key can never both execute.
//
// The package imports only the standard library and
// github.com/dunglas/httpsfv.
package idempotency

import (
	"container/list"
	"errors"
	"sync"
	"time"
)

// Defaults applied by NewStore to zero Limits fields (ARCHITECTURE.md
// "Bounds and defaults"; RCNS §12.2 `idempotency_window_seconds` 86400).
const (
	// DefaultWindow is how long a stored response is replayed.
	DefaultWindow = 24 * time.Hour
	// DefaultMaxRecords bounds the records held in all.
	DefaultMaxRecords = 100000
	// DefaultMaxPerAgent bounds the records held for one Agent-ID.
	DefaultMaxPerAgent = 10000
	// DefaultLease is how long a claim holds its key while its request
	// runs, when neither Limits.Lease nor the claim sets one. The
	// gateway always sets it (its longest plan plus a margin).
	DefaultLease = 2 * time.Minute
)

// storedHeaders are the only response header fields a record keeps:
// what the body, a 201/3xx and a PROPOSE turn (Negotiation-ID, OP-35)
// need to be replayed as sent. Contract-Synthesized (RCNS §12.2) is
// Response.Contract's synthesis id, kept there with the rest of the
// contract's fields.
var storedHeaders = [...]string{"Content-Type", "Location", "Negotiation-Id"}

// Response is what a record replays: the status, the few header fields
// that belong to the result, and the body.
type Response struct {
	// Status is the status code sent the first time, whatever it was
	// (2xx, 461, 4xx, 5xx: RCNS §12.2, ARCHITECTURE.md "Idempotency").
	Status int
	// Header maps canonical field names to values. Only Content-Type,
	// Location and Negotiation-Id are kept; Complete drops every other
	// field. Nil when there are none.
	Header map[string]string
	// Body is the response content as sent, byte for byte.
	Body []byte
	// Contract names the contract the answer was produced by running;
	// the zero value when it ran none. A replay names the same contract
	// as the first answer did: its Attribution-Record carries these
	// fields again (RCNS §12.2, §16.1).
	Contract ContractRef
	// Previewed is the synthesis id of the contract a 461 preview offers
	// (minted, not run, so not in Contract); "" for any other answer.
	// ClaimConfirming reads it.
	Previewed string
}

// ContractRef is what an answer says of the contract it ran: the
// RCNS extension fields of its Attribution-Record (RCNS §16.1), the
// synthesis id also in Contract-Synthesized. The zero value names none.
type ContractRef struct {
	SynthesisID       string
	ContractHash      string
	NegotiationOrigin string
}

// Limits bounds a Store. Zero or negative fields take the defaults.
type Limits struct {
	// Window is how long a stored response is replayed, counted from
	// Complete; an outcome-unknown record (a lease that ended with no
	// answer) is kept as long, counted from the end of its lease. 0
	// means DefaultWindow (24 h). RCNS §12.2
	// `idempotency_window_seconds`.
	Window time.Duration
	// Lease is how long a claim holds its key while its request runs,
	// unless the claim names its own (ClaimRequest.Lease): the longest
	// the request can run plus a margin. The holder extends it with
	// Claim.Renew. A lease that ends with no answer stored makes the
	// record outcome-unknown: the key is never run again (ARCHITECTURE.md
	// "Beyond one machine"). 0 means DefaultLease.
	Lease time.Duration
	// MaxRecords is the number of records (stored and in flight) held in
	// all. 0 means DefaultMaxRecords (100,000).
	MaxRecords int
	// MaxPerAgent is the number of records (stored and in flight) held for
	// one Agent-ID. 0 means DefaultMaxPerAgent (10,000).
	MaxPerAgent int
}

// Outcome is the result of Store.Claim.
type Outcome int

const (
	// Execute: the key is new (or its record expired or was abandoned);
	// the caller holds the claim, must run the request and then call
	// Claim.Complete with the response, or Claim.Abandon when the request
	// was refused before any side effect.
	Execute Outcome = iota
	// Replay: the same request was already answered; Claim returned the
	// stored Response to send again, with a fresh Response-ID and
	// Idempotent-Replayed: true. Nothing executes. RCNS §12.2.
	Replay
	// Mismatch: the key was used by this agent for a request with another
	// fingerprint (in flight or stored); answer 422
	// idempotency-key-reused, not retryable. RCNS §12.2.
	Mismatch
	// InFlight: the same request is still executing under this key;
	// answer 409, retryable. RCNS §12.2.
	InFlight
	// AgentFull: the agent already holds MaxPerAgent records; answer 503
	// idempotency-store-full, nothing executes. It affects that agent
	// only. ARCHITECTURE.md "Idempotency".
	AgentFull
	// StoreFull: the store holds MaxRecords records (reported when the
	// agent is at its bound too); answer 503 idempotency-store-full,
	// nothing executes.
	StoreFull
	// OtherContract: a presentation (ClaimConfirming) of a contract
	// whose key holds the answer of another contract (the one it ran, or
	// the one its 461 previews); answer 422 idempotency-key-reused, not
	// retryable.
	OtherContract
	// OutcomeUnknown: the same request was claimed and its lease ended
	// with no answer stored (the node running it stopped): it may have
	// run, in part or in whole. Result.Hold says who held it and when.
	// Answer 409 outcome-unknown, not retryable: the key never runs the
	// request again (an operator may release or resolve it).
	OutcomeUnknown
)

// String returns the outcome's name: "execute", "replay", "mismatch",
// "in-flight", "agent-full", "store-full", "other-contract" or
// "outcome-unknown" (for logs and metrics).
func (o Outcome) String() string {
	switch o {
	case Execute:
		return "execute"
	case Replay:
		return "replay"
	case Mismatch:
		return "mismatch"
	case InFlight:
		return "in-flight"
	case AgentFull:
		return "agent-full"
	case StoreFull:
		return "store-full"
	case OtherContract:
		return "other-contract"
	case OutcomeUnknown:
		return "outcome-unknown"
	}
	return "unknown"
}

// Holder describes who claimed a key, for the answers that name the
// claim: the gateway node and what the request was.
type Holder struct {
	// Node is the node_id of the gateway that claimed the key.
	Node string
	// What describes the request, e.g. "BOOK /room".
	What string
}

// Hold is a claim that has no answer stored: in flight while its lease
// lasts, outcome-unknown once it ended.
type Hold struct {
	Holder
	// ClaimedAt is when the key was claimed (or a 461 preview taken
	// over); LeaseEnds when the lease ends unless renewed.
	ClaimedAt, LeaseEnds time.Time
}

// record is one (Agent-ID, key) entry. resp is nil while in flight.
type record struct {
	agent, key string
	fp         string
	resp       packed
	// expires is when the record is dropped: Window after Complete, or
	// Window after the end of the lease while there is no answer.
	expires time.Time
	hold    Hold   // while resp is nil
	claim   *Claim // owner while in flight; nil once completed
	elem    *list.Element
	lst     *list.List // the list elem is in: Store.order or Store.flight
}

// Store is the in-memory Idempotency-Key store. It is safe for concurrent
// use. Stored answers and in-flight claims are kept in two lists, each
// ordered by expiry because each adds a fixed duration to the time a
// record joins it (Window from Complete; the hold from the claim); every
// Claim and Len first drops the expired records at both heads (an
// incremental sweep, so no goroutine is needed), and a record found
// expired on lookup is dropped too. With an injected clock that goes
// backwards, or a restored 461 preview Abandon could not sort back in
// (maxReorder), a record may outlive its window, never the reverse.
type Store struct {
	mu      sync.Mutex
	limits  Limits
	now     func() time.Time
	byAgent map[string]map[string]*record
	order   *list.List // of *record with a stored answer, oldest expiry first
	flight  *list.List // of *record in flight, oldest expiry first
	n       int
}

// NewStore returns an empty Store bounded by l (zero fields take the
// defaults) reading time from now (nil means time.Now).
func NewStore(l Limits, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{
		limits:  l.withDefaults(),
		now:     now,
		byAgent: make(map[string]map[string]*record),
		order:   list.New(),
		flight:  list.New(),
	}
}

// withDefaults is l with each zero field set to its default.
func (l Limits) withDefaults() Limits {
	if l.Window <= 0 {
		l.Window = DefaultWindow
	}
	if l.MaxRecords <= 0 {
		l.MaxRecords = DefaultMaxRecords
	}
	if l.MaxPerAgent <= 0 {
		l.MaxPerAgent = DefaultMaxPerAgent
	}
	if l.Lease <= 0 {
		l.Lease = DefaultLease
	}
	return l
}

// Limits returns the store's bounds with defaults applied.
func (s *Store) Limits() Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits
}

// SetLimits bounds the store by l from now on (zero fields take the
// defaults), as a configuration reload does. Every record stays, claims
// in flight included (a repeat of a running request still finds it in
// flight). A new Window applies to every record, counted as before
// from its answer (or the end of its lease): each expiry moves by the
// difference, which keeps both lists in expiry order, so the sweep
// drops what the new window expired. A new Lease applies to claims
// taken from now on. Record bounds lowered below the records held
// refuse new claims (StoreFull, AgentFull) until enough of them expire.
// It takes time proportional to the records held when Window changes.
func (s *Store) SetLimits(l Limits) {
	l = l.withDefaults()
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := l.Window - s.limits.Window; d != 0 {
		for _, lst := range []*list.List{s.order, s.flight} {
			for e := lst.Front(); e != nil; e = e.Next() {
				r := e.Value.(*record)
				r.expires = r.expires.Add(d)
			}
		}
	}
	s.limits = l
}

// ClaimRequest is one claim of an Idempotency-Key (Store.ClaimWith).
type ClaimRequest struct {
	// AgentID and Key name the record; Fingerprint is the request's
	// (Fingerprint).
	AgentID, Key, Fingerprint string
	// SynthesisID, when set, is the contract the request presents and
	// Pending whether it is still pending (ClaimConfirming's rule).
	SynthesisID string
	Pending     bool
	// Lease is how long the claim holds the key before its holder must
	// renew it: the longest the request can run plus a margin. 0 means
	// Limits.Lease.
	Lease time.Duration
	// Holder is kept with the claim and named when the key is met in
	// flight or outcome-unknown.
	Holder Holder
}

// Result is the result of a claim.
type Result struct {
	Outcome Outcome
	// Response is the stored answer (Replay), a copy.
	Response *Response
	// Claim is the claim the caller now holds (Execute).
	Claim *Claim
	// Hold describes the claim met (InFlight, OutcomeUnknown).
	Hold *Hold
}

// Claim atomically looks up (agentID, key) and, when the key is free,
// claims it for the request whose Fingerprint is fp, with the store's
// lease. RCNS §12.2 (OP-15). It is ClaimWith without a holder; the
// outcomes are:
//
//   - Execute, nil, claim: the caller must run the request and finish
//     with claim.Complete or claim.Abandon.
//   - Replay, response, nil: a copy of the stored response (same fp).
//   - Mismatch, nil, nil: the key holds another fingerprint.
//   - InFlight, nil, nil: the same fingerprint is still executing.
//   - OutcomeUnknown, nil, nil: its lease ended with no answer stored.
//   - StoreFull, nil, nil: the store is at MaxRecords records, after
//     dropping expired records.
//   - AgentFull, nil, nil: the agent is at MaxPerAgent records.
//
// Records are scoped by (agentID, key): the same key from another agent
// is unrelated.
func (s *Store) Claim(agentID, key, fp string) (Outcome, *Response, *Claim) {
	r := s.ClaimWith(ClaimRequest{AgentID: agentID, Key: key, Fingerprint: fp})
	return r.Outcome, r.Response, r.Claim
}

// PreviewStatus is the status of a confirm-first preview (RCNS §13.3,
// 461): the answer ClaimConfirming lets a presentation supersede.
const PreviewStatus = 461

// ClaimConfirming is Claim for a request that presents the contract
// synthesisID (RCNS §10 step 7); pending says whether that contract is
// still pending (a 461 not yet accepted). See ClaimWith.
func (s *Store) ClaimConfirming(agentID, key, fp, synthesisID string, pending bool) (Outcome, *Response, *Claim) {
	r := s.ClaimWith(ClaimRequest{AgentID: agentID, Key: key, Fingerprint: fp, SynthesisID: synthesisID, Pending: pending})
	return r.Outcome, r.Response, r.Claim
}

// ClaimWith atomically looks up (req.AgentID, req.Key) and, when the key
// is free, claims it for req.Lease (Claim's outcomes). A record in
// flight is InFlight while its lease lasts and OutcomeUnknown once it
// ended, both with its Hold.
//
// With req.SynthesisID set (a presentation, RCNS §10 step 7): when the
// key holds, for the same fingerprint, the stored 461 preview of that
// very contract and the contract is still pending, the presentation is
// its confirmation (§13.4), not a repeat of the gate request: replaying
// the preview would leave the contract pending and the confirmation
// unrun for the whole window. The record goes back in flight under the
// returned claim (Execute), the preview kept aside (Claim.Preview), and
// holds the key for a new lease from now. Claim.Complete replaces the
// preview with the confirmation's answer, which later repeats with the
// key replay; Claim.Abandon (the presentation was refused before it
// ran) restores the preview as it was, expiry included. Concurrent
// confirmations with the key meet InFlight as for any claim.
//
// When the key's stored answer names another contract than the one
// presented (the contract it ran, or the one its 461 previews), the
// outcome is OtherContract: replaying it would answer a presentation of
// one contract with another's result or preview. Every other case is
// Claim's: a preview of a contract no longer pending (confirmed under
// another key) is replayed and nothing runs again, and so is a 263.
func (s *Store) ClaimWith(req ClaimRequest) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	lease := req.Lease
	if lease <= 0 {
		lease = s.limits.Lease
	}
	if r, ok := s.byAgent[req.AgentID][req.Key]; ok && req.SynthesisID != "" && r.fp == req.Fingerprint && r.resp != nil && now.Before(r.expires) {
		stored := r.resp.head()
		named := stored.Previewed
		if named == "" {
			named = stored.Contract.SynthesisID
		}
		switch {
		case named != "" && named != req.SynthesisID:
			return Result{Outcome: OtherContract}
		case req.Pending && stored.Status == PreviewStatus && stored.Previewed == req.SynthesisID:
			c := &Claim{store: s, rec: r, preview: r.resp, previewExpires: r.expires, claimedAt: now}
			r.resp, r.claim = nil, c
			r.hold = Hold{Holder: req.Holder, ClaimedAt: now, LeaseEnds: now.Add(lease)}
			r.expires = r.hold.LeaseEnds.Add(s.limits.Window)
			s.move(r, s.flight)
			return Result{Outcome: Execute, Claim: c}
		}
	}
	return s.claimLocked(now, req, lease)
}

// claimLocked is ClaimWith's plain claim, with s.mu held.
func (s *Store) claimLocked(now time.Time, req ClaimRequest, lease time.Duration) Result {
	s.prune(now)

	if r, ok := s.byAgent[req.AgentID][req.Key]; ok {
		if !now.Before(r.expires) {
			s.remove(r)
		} else {
			switch {
			case r.fp != req.Fingerprint:
				return Result{Outcome: Mismatch}
			case r.resp == nil:
				h := r.hold
				if now.Before(h.LeaseEnds) {
					return Result{Outcome: InFlight, Hold: &h}
				}
				return Result{Outcome: OutcomeUnknown, Hold: &h}
			default:
				return Result{Outcome: Replay, Response: r.resp.response()}
			}
		}
	}

	recs := s.byAgent[req.AgentID]
	if s.n >= s.limits.MaxRecords {
		return Result{Outcome: StoreFull}
	}
	if len(recs) >= s.limits.MaxPerAgent {
		return Result{Outcome: AgentFull}
	}
	if recs == nil {
		recs = make(map[string]*record)
		s.byAgent[req.AgentID] = recs
	}
	r := &record{agent: req.AgentID, key: req.Key, fp: req.Fingerprint,
		hold: Hold{Holder: req.Holder, ClaimedAt: now, LeaseEnds: now.Add(lease)}}
	r.expires = r.hold.LeaseEnds.Add(s.limits.Window)
	c := &Claim{store: s, rec: r, claimedAt: now}
	r.claim = c
	r.lst, r.elem = s.flight, s.flight.PushBack(r)
	recs[req.Key] = r
	s.n++
	return Result{Outcome: Execute, Claim: c}
}

// KeyState is what an operator sees of one key (Store.Peek).
type KeyState struct {
	// State is "in-flight", "outcome-unknown" or "answered".
	State string
	// Hold is the claim of a key in flight or outcome-unknown.
	Hold *Hold
	// Status is the stored answer's status ("answered").
	Status int
	// Expires is when the record is dropped.
	Expires time.Time
}

// States of KeyState.State.
const (
	StateInFlight       = "in-flight"
	StateOutcomeUnknown = "outcome-unknown"
	StateAnswered       = "answered"
)

// Peek returns the state of (agentID, key), or false when the store
// holds no record of it. It changes nothing.
func (s *Store) Peek(agentID, key string) (KeyState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r, ok := s.byAgent[agentID][key]
	if !ok || !now.Before(r.expires) {
		return KeyState{}, false
	}
	return r.state(now), true
}

// state is r's KeyState at now.
func (r *record) state(now time.Time) KeyState {
	if r.resp != nil {
		return KeyState{State: StateAnswered, Status: r.resp.head().Status, Expires: r.expires}
	}
	h := r.hold
	st := StateInFlight
	if !now.Before(h.LeaseEnds) {
		st = StateOutcomeUnknown
	}
	return KeyState{State: st, Hold: &h, Expires: r.expires}
}

// Errors of Store.Release and Store.Resolve: why a key was not
// settled.
var (
	// ErrNoRecord: the store holds no record of the key.
	ErrNoRecord = errors.New("the store holds no record of this Idempotency-Key")
	// ErrAnswered: the key holds a stored answer; it replays it, and
	// nothing needs settling.
	ErrAnswered = errors.New("this Idempotency-Key holds a stored answer")
	// ErrLeaseLive: the request is still running under its lease.
	ErrLeaseLive = errors.New("the request of this Idempotency-Key is still running under its lease")
)

// Release drops the record of a key whose request holds no answer and
// whose lease ended (outcome-unknown), so the next request with the key
// runs: for an operator who checked that it did not run. It returns the
// state released, or ErrNoRecord, ErrAnswered or ErrLeaseLive (with the
// state found) and changes nothing then. A claim whose record was
// released stores nothing on Complete.
func (s *Store) Release(agentID, key string) (KeyState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, st, err := s.settleable(agentID, key)
	if err != nil {
		return st, err
	}
	s.remove(r)
	return st, nil
}

// Resolve stores resp as the answer of a key whose request holds no
// answer and whose lease ended (outcome-unknown), replayed to every
// repeat for the window from now: for an operator who checked what the
// request did. Errors as Release.
func (s *Store) Resolve(agentID, key string, resp Response) (KeyState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, st, err := s.settleable(agentID, key)
	if err != nil {
		return st, err
	}
	r.resp, r.claim = pack(resp), nil
	r.expires = s.now().Add(s.limits.Window)
	s.move(r, s.order)
	return st, nil
}

// settleable finds the outcome-unknown record of (agentID, key). s.mu
// must be held.
func (s *Store) settleable(agentID, key string) (*record, KeyState, error) {
	now := s.now()
	r, ok := s.byAgent[agentID][key]
	if !ok || !now.Before(r.expires) {
		return nil, KeyState{}, ErrNoRecord
	}
	st := r.state(now)
	switch st.State {
	case StateAnswered:
		return nil, st, ErrAnswered
	case StateInFlight:
		return nil, st, ErrLeaseLive
	}
	return r, st, nil
}

// Len returns the number of records held, stored and in flight, after
// dropping the expired ones at the head of the expiry order.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(s.now())
	return s.n
}

// prune drops expired records from the heads of both expiry orders.
// s.mu must be held.
func (s *Store) prune(now time.Time) {
	for _, l := range []*list.List{s.order, s.flight} {
		for e := l.Front(); e != nil; e = l.Front() {
			r := e.Value.(*record)
			if now.Before(r.expires) {
				break
			}
			s.remove(r)
		}
	}
}

// move puts r at the back of list l (its expiry the latest there).
// s.mu must be held.
func (s *Store) move(r *record, l *list.List) {
	r.lst.Remove(r.elem)
	r.lst, r.elem = l, l.PushBack(r)
}

// remove drops r from every index. s.mu must be held.
func (s *Store) remove(r *record) {
	r.lst.Remove(r.elem)
	recs := s.byAgent[r.agent]
	delete(recs, r.key)
	if len(recs) == 0 {
		delete(s.byAgent, r.agent)
	}
	r.claim = nil
	s.n--
}

// owns reports whether c still holds its record's in-flight claim.
// s.mu must be held.
func (s *Store) owns(c *Claim) bool {
	r := c.rec
	return r.claim == c && s.byAgent[r.agent][r.key] == r
}

// Claim is the in-flight hold on one (Agent-ID, key) returned with
// Execute. Exactly one of Complete or Abandon takes effect; later calls
// are no-ops. Methods on a nil *Claim are no-ops, so
// `defer claim.Abandon()` is safe after Complete. If neither is called
// the key stays in flight until its lease ends (Renew extends it), and
// is outcome-unknown after that: a repeat never runs it again. The
// claim keeps its key past the end of its lease: a late Complete still
// stores its answer, a late Abandon still releases the key (nothing
// ran), until an operator released or resolved it.
type Claim struct {
	store *Store
	rec   *record
	// preview is the stored 461 a confirming presentation took over
	// (ClaimConfirming), restored by Abandon with its expiry; nil for a
	// claim of a new key.
	preview        packed
	previewExpires time.Time
	// ended: Complete or Abandon was called; Renew then never brings
	// the key back.
	ended bool
	// claimedAt is the hold's ClaimedAt when the claim was taken (never
	// written again).
	claimedAt time.Time
}

// Complete stores resp (whatever its status) for replay during the
// window, counted from now, and releases the in-flight hold. Only the
// Content-Type, Location and Negotiation-Id header fields are kept (the
// contract, Contract-Synthesized included, is resp.Contract);
// Header and Body are copied, so the caller may reuse them. A second call,
// a call after Abandon, or a call after the record was released,
// resolved or dropped is a no-op.
// It reports whether it stored resp: false for a no-op (and a nil
// Claim). RCNS §12.2.
func (c *Claim) Complete(resp Response) bool {
	if c == nil {
		return false
	}
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	c.ended = true
	if !s.owns(c) {
		return false
	}
	r := c.rec
	r.resp = pack(resp)
	r.claim = nil
	r.expires = s.now().Add(s.limits.Window)
	s.move(r, s.order)
	return true
}

// Abandon releases the in-flight hold without storing anything (the
// request was refused before execution); the next Claim of the key
// executes again. A claim from ClaimConfirming instead restores the 461
// preview it took over, with its expiry, so the key replays it again. A
// call after Complete, a second call, or a call after the record was
// released, resolved or dropped is a no-op.
func (c *Claim) Abandon() {
	if c == nil {
		return
	}
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	c.ended = true
	if !s.owns(c) {
		return
	}
	if c.preview != nil {
		r := c.rec
		r.resp, r.claim, r.expires = c.preview, nil, c.previewExpires
		// Back among the stored answers, towards its place in their
		// expiry order, past at most maxReorder records that expire
		// later (the lock is global: a walk over every newer record
		// would cost each refused confirmation O(records)). Past that
		// bound it stays behind them and is dropped when they are, or
		// when its key is next looked up: a record may outlive its
		// window, never the reverse.
		s.move(r, s.order)
		at := r.elem
		for e, n := r.elem.Prev(), 0; e != nil && n < maxReorder && e.Value.(*record).expires.After(r.expires); e, n = e.Prev(), n+1 {
			at = e
		}
		if at != r.elem {
			s.order.MoveBefore(r.elem, at)
		}
		return
	}
	s.remove(c.rec)
}

// Renew extends the claim's lease to lease from now (0: the store's
// Limits.Lease) while its request still runs, and reports whether the
// claim holds its key. A lease that had ended is live again: the
// holder is still running. When the key has no record at all (it was
// released or dropped), the claim takes it again, in flight, as the
// Redis store does for a record Redis lost. It reports false, changing
// nothing, after Complete or Abandon, or when another claim or an
// answer holds the key.
func (c *Claim) Renew(lease time.Duration) bool {
	if c == nil {
		return false
	}
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.ended {
		return false
	}
	if lease <= 0 {
		lease = s.limits.Lease
	}
	r := c.rec
	if !s.owns(c) {
		if _, held := s.byAgent[r.agent][r.key]; held {
			return false
		}
		recs := s.byAgent[r.agent]
		if recs == nil {
			recs = make(map[string]*record)
			s.byAgent[r.agent] = recs
		}
		r.resp, r.claim = nil, c
		r.hold.LeaseEnds = s.now().Add(lease)
		r.expires = r.hold.LeaseEnds.Add(s.limits.Window)
		r.lst, r.elem = s.flight, s.flight.PushBack(r)
		recs[r.key] = r
		s.n++
		return true
	}
	r.hold.LeaseEnds = s.now().Add(lease)
	if e := r.hold.LeaseEnds.Add(s.limits.Window); e.After(r.expires) {
		r.expires = e
		s.move(r, s.flight)
	}
	return true
}

// maxReorder bounds the walk Abandon makes to put a restored 461
// preview back in the expiry order: 64 records.
const maxReorder = 64

// Preview returns a copy of the 461 preview a ClaimConfirming claim took
// over, or nil for a claim of a new key (or a nil claim).
func (c *Claim) Preview() *Response {
	if c == nil || c.preview == nil {
		return nil
	}
	return c.preview.response()
}

// ClaimedAt is when the claim was taken: the Hold.ClaimedAt a claim that
// finds the key in flight under it reads (Result.Hold). Zero for a nil
// claim.
func (c *Claim) ClaimedAt() time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.claimedAt
}

// Key returns the (Agent-ID, key) pair the claim holds.
func (c *Claim) Key() (agentID, key string) {
	if c == nil {
		return "", ""
	}
	return c.rec.agent, c.rec.key
}
