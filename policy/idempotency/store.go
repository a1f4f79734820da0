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
	"net/http"
	"slices"
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
)

// storedHeaders are the only response header fields a record keeps:
// what the body, a 201/3xx and a PROPOSE turn (Negotiation-ID, OP-35)
// need to be replayed as sent. Contract-Synthesized (RCNS §12.2) is
// Response.Contract's synthesis id, kept there with the rest of the
// contract's fields.
var storedHeaders = []string{"Content-Type", "Location", "Negotiation-Id"}

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

// clone returns a deep copy of r keeping only the storedHeaders, with
// canonical names.
func (r Response) clone() *Response {
	c := &Response{Status: r.Status, Contract: r.Contract, Previewed: r.Previewed}
	for k, v := range r.Header {
		k = http.CanonicalHeaderKey(k)
		if slices.Contains(storedHeaders, k) {
			if c.Header == nil {
				c.Header = make(map[string]string, len(storedHeaders))
			}
			c.Header[k] = v
		}
	}
	if r.Body != nil {
		c.Body = slices.Clone(r.Body)
	}
	return c
}

// Limits bounds a Store. Zero or negative fields take the defaults.
type Limits struct {
	// Window is how long a stored response is replayed, counted from
	// Complete; also how long an uncompleted claim holds its key, but
	// never less than InFlightHold. 0 means DefaultWindow (24 h). RCNS
	// §12.2 `idempotency_window_seconds`.
	Window time.Duration
	// InFlightHold is the least time a claim holds its key while its
	// request runs, whatever Window is: a request still running when a
	// short Window ends must not let a repeat run a second time. The
	// caller sets it to the longest a request can run (the gateway: its
	// longest call or composition timeout, plus a margin). 0: Window
	// alone.
	InFlightHold time.Duration
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
)

// String returns the outcome's name: "execute", "replay", "mismatch",
// "in-flight", "agent-full", "store-full" or "other-contract" (for logs).
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
	}
	return "unknown"
}

// record is one (Agent-ID, key) entry. resp is nil while in flight.
type record struct {
	agent, key string
	fp         string
	resp       *Response
	expires    time.Time
	claim      *Claim // owner while in flight; nil once completed
	elem       *list.Element
	lst        *list.List // the list elem is in: Store.order or Store.flight
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
	if l.Window <= 0 {
		l.Window = DefaultWindow
	}
	if l.MaxRecords <= 0 {
		l.MaxRecords = DefaultMaxRecords
	}
	if l.MaxPerAgent <= 0 {
		l.MaxPerAgent = DefaultMaxPerAgent
	}
	if now == nil {
		now = time.Now
	}
	return &Store{
		limits:  l,
		now:     now,
		byAgent: make(map[string]map[string]*record),
		order:   list.New(),
		flight:  list.New(),
	}
}

// hold is how long a new claim holds its key: Window, or InFlightHold
// when that is longer.
func (s *Store) hold() time.Duration { return max(s.limits.Window, s.limits.InFlightHold) }

// Limits returns the store's bounds with defaults applied.
func (s *Store) Limits() Limits { return s.limits }

// Claim atomically looks up (agentID, key) and, when the key is free,
// claims it for the request whose Fingerprint is fp. RCNS §12.2 (OP-15).
//
//   - Execute, nil, claim: the caller must run the request and finish
//     with claim.Complete or claim.Abandon.
//   - Replay, response, nil: a copy of the stored response (same fp).
//   - Mismatch, nil, nil: the key holds another fingerprint.
//   - InFlight, nil, nil: the same fingerprint is still executing.
//   - StoreFull, nil, nil: the store is at MaxRecords records, after
//     dropping expired records.
//   - AgentFull, nil, nil: the agent is at MaxPerAgent records.
//
// Records are scoped by (agentID, key): the same key from another agent
// is unrelated.
func (s *Store) Claim(agentID, key, fp string) (Outcome, *Response, *Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claimLocked(agentID, key, fp)
}

// PreviewStatus is the status of a confirm-first preview (RCNS §13.3,
// 461): the answer ClaimConfirming lets a presentation supersede.
const PreviewStatus = 461

// ClaimConfirming is Claim for a request that presents the contract
// synthesisID (RCNS §10 step 7); pending says whether that contract is
// still pending (a 461 not yet accepted).
//
// When the key holds, for the same fingerprint, the stored 461 preview
// of that very contract and the contract is still pending, the
// presentation is its confirmation (§13.4), not a repeat of the gate
// request: replaying the preview would leave the contract pending and
// the confirmation unrun for the whole window. The record goes back in
// flight under the returned claim (Execute), the preview kept aside
// (Claim.Preview), and holds the key as a new claim does, from now (the
// preview's own expiry may be close: a hold that ended with it would
// let a second confirmation run). Claim.Complete replaces the preview
// with the confirmation's answer, which later repeats with the key
// replay; Claim.Abandon (the presentation was refused before it ran)
// restores the preview as it was, expiry included. Concurrent
// confirmations with the key meet InFlight as for any claim.
//
// When the key's stored answer names another contract than the one
// presented (the contract it ran, or the one its 461 previews), the
// outcome is OtherContract: replaying it would answer a presentation of
// one contract with another's result or preview. Every other case is
// Claim's: a preview of a contract no longer pending (confirmed under
// another key) is replayed and nothing runs again, and so is a 263.
func (s *Store) ClaimConfirming(agentID, key, fp, synthesisID string, pending bool) (Outcome, *Response, *Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if r, ok := s.byAgent[agentID][key]; ok && synthesisID != "" && r.fp == fp && r.resp != nil && now.Before(r.expires) {
		named := r.resp.Previewed
		if named == "" {
			named = r.resp.Contract.SynthesisID
		}
		switch {
		case named != "" && named != synthesisID:
			return OtherContract, nil, nil
		case pending && r.resp.Status == PreviewStatus && r.resp.Previewed == synthesisID:
			c := &Claim{store: s, rec: r, preview: r.resp, previewExpires: r.expires}
			r.resp, r.claim = nil, c
			r.expires = now.Add(s.hold())
			s.move(r, s.flight)
			return Execute, nil, c
		}
	}
	return s.claimLocked(agentID, key, fp)
}

// claimLocked is Claim with s.mu held.
func (s *Store) claimLocked(agentID, key, fp string) (Outcome, *Response, *Claim) {
	now := s.now()
	s.prune(now)

	if r, ok := s.byAgent[agentID][key]; ok {
		if !now.Before(r.expires) {
			s.remove(r)
		} else {
			switch {
			case r.fp != fp:
				return Mismatch, nil, nil
			case r.resp == nil:
				return InFlight, nil, nil
			default:
				return Replay, r.resp.clone(), nil
			}
		}
	}

	recs := s.byAgent[agentID]
	if s.n >= s.limits.MaxRecords {
		return StoreFull, nil, nil
	}
	if len(recs) >= s.limits.MaxPerAgent {
		return AgentFull, nil, nil
	}
	if recs == nil {
		recs = make(map[string]*record)
		s.byAgent[agentID] = recs
	}
	r := &record{agent: agentID, key: key, fp: fp, expires: now.Add(s.hold())}
	c := &Claim{store: s, rec: r}
	r.claim = c
	r.lst, r.elem = s.flight, s.flight.PushBack(r)
	recs[key] = r
	s.n++
	return Execute, nil, c
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
// `defer claim.Abandon()` is safe after Complete. If neither is called the
// key stays in flight until its hold passes (Window, or InFlightHold
// when longer).
type Claim struct {
	store *Store
	rec   *record
	// preview is the stored 461 a confirming presentation took over
	// (ClaimConfirming), restored by Abandon with its expiry; nil for a
	// claim of a new key.
	preview        *Response
	previewExpires time.Time
}

// Complete stores resp (whatever its status) for replay during the
// window, counted from now, and releases the in-flight hold. Only the
// Content-Type, Location and Negotiation-Id header fields are kept (the
// contract, Contract-Synthesized included, is resp.Contract);
// Header and Body are copied, so the caller may reuse them. A second call,
// a call after Abandon, or a call after the claim expired is a no-op.
// It reports whether it stored resp: false for a no-op (and a nil
// Claim). RCNS §12.2.
func (c *Claim) Complete(resp Response) bool {
	if c == nil {
		return false
	}
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.owns(c) {
		return false
	}
	r := c.rec
	r.resp = resp.clone()
	r.claim = nil
	r.expires = s.now().Add(s.limits.Window)
	s.move(r, s.order)
	return true
}

// Abandon releases the in-flight hold without storing anything (the
// request was refused before execution); the next Claim of the key
// executes again. A claim from ClaimConfirming instead restores the 461
// preview it took over, with its expiry, so the key replays it again. A
// call after Complete, a second call, or a call after the claim expired
// is a no-op.
func (c *Claim) Abandon() {
	if c == nil {
		return
	}
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
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

// maxReorder bounds the walk Abandon makes to put a restored 461
// preview back in the expiry order: 64 records.
const maxReorder = 64

// Preview returns a copy of the 461 preview a ClaimConfirming claim took
// over, or nil for a claim of a new key (or a nil claim).
func (c *Claim) Preview() *Response {
	if c == nil || c.preview == nil {
		return nil
	}
	return c.preview.clone()
}

// Key returns the (Agent-ID, key) pair the claim holds.
func (c *Claim) Key() (agentID, key string) {
	if c == nil {
		return "", ""
	}
	return c.rec.agent, c.rec.key
}
