// Package store is the gateway's shared state behind small interfaces,
// one per kind of state (ARCHITECTURE.md "Beyond one machine"):
// Idempotency-Key claims and stored answers, per-agent rate limits,
// contracts and tombstones, the signature replay cache, RCNS attempt
// records and retained Attribution-Records.
//
// Two implementations pass one test suite (storetest): the memory store
// of this package (NewMemory, the embedded default for one node: today's
// in-memory types behind the interfaces, behaving exactly as they do) and
// the Redis store (package redisstore), which several gateways share.
//
// Every method takes a context.Context and returns an error: a shared
// store can be unreachable or slow. Every error a store returns for
// that reason wraps ErrUnavailable; the engine answers it 503
// store-unavailable with Retry-After and executes nothing. The memory
// store never fails that way.
//
// The package imports no caddy: the engine and every door can use it,
// and so can tests.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// ErrUnavailable is wrapped by every error a store returns because it
// could not be reached in time, or refused to store (a Redis connection
// refused or reset, a read or write timeout, a context deadline, a
// cluster without a master for the slot, a replica that is read-only, an
// out-of-memory refusal, a claim that reached Redis too late). The
// operation may or may not have taken effect at the store, except a
// claim: one that reached the store after its caller stopped waiting
// takes no effect, and one whose reply was lost is released in the
// background (redisstore), so the key is free for the retry. The engine
// answers 503 store-unavailable, retryable, with Retry-After, and
// executes nothing.
var ErrUnavailable = errors.New("store unavailable")

// ErrClaimLost is returned by Claim.Complete and Claim.Renew when the
// claim no longer holds its key and nothing was stored: an operator
// released or resolved the key, its record's window passed, or the
// store lost the claim (Redis restarted without its data). A repeat of
// the key is not replayed this answer.
var ErrClaimLost = errors.New("the Idempotency-Key claim no longer holds its key")

// RetryAfterError is an ErrUnavailable that knows how long it lasts: the
// Redis store's restart quarantine, during which Idempotency-Key claims
// are refused until every plan that may have held a key before the
// restart has ended. The engine answers its Retry-After with After
// (seconds, rounded up) and its explanation with Why.
type RetryAfterError struct {
	After time.Duration // how long the refusal lasts from now
	Why   string        // what the operator and the agent are told
}

// Error returns Why and the time left.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%s: %s; retry in %v", ErrUnavailable, e.Why, e.After.Round(time.Second))
}

// Unwrap makes errors.Is(err, ErrUnavailable) true.
func (e *RetryAfterError) Unwrap() error { return ErrUnavailable }

// Idempotency is the Idempotency-Key store (RCNS §12.2, OP-15), with the
// rules of policy/idempotency.Store: Claim returns the same outcomes in
// the same cases as its ClaimWith, a Claim's Complete and Abandon take
// effect only while it still holds its key, and a lease that ends with
// no answer makes the key outcome-unknown (ARCHITECTURE.md "Beyond one
// machine").
type Idempotency interface {
	// Claim atomically looks up (req.AgentID, req.Key) and claims it for
	// req.Lease when it is free (idempotency.Store.ClaimWith, the
	// presentation rules included when req.SynthesisID is set). A claim
	// that reaches a shared store after the caller stopped waiting for
	// its reply takes no effect there (the Redis store's scripts refuse
	// to write past the caller's deadline), so an answer "nothing was
	// executed" never leaves the key held.
	Claim(ctx context.Context, req idempotency.ClaimRequest) (Claimed, error)
	// Limits returns the bounds in force, defaults applied.
	Limits() idempotency.Limits
	// Len returns the records held, stored and in flight, or -1 when the
	// store does not count them (the Redis store: see docs/cluster.md).
	Len(ctx context.Context) (int, error)
	// Peek returns the state of (agentID, key), false when no record of
	// it is held (idempotency.Store.Peek).
	Peek(ctx context.Context, agentID, key string) (idempotency.KeyState, bool, error)
	// Release drops the record of an outcome-unknown key so the next
	// request with it runs; Resolve stores resp as its answer
	// (idempotency.Store.Release, Resolve: errors ErrNoRecord,
	// ErrAnswered, ErrLeaseLive with the state found). Operator tools.
	Release(ctx context.Context, agentID, key string) (idempotency.KeyState, error)
	Resolve(ctx context.Context, agentID, key string, resp idempotency.Response) (idempotency.KeyState, error)
}

// Claimed is the result of a claim: the outcome and, with Replay, the
// stored answer, with Execute, the claim the caller now holds, or, with
// InFlight and OutcomeUnknown, the claim met.
type Claimed struct {
	Outcome  idempotency.Outcome
	Response *idempotency.Response // Replay only: a copy of the stored answer
	Claim    Claim                 // Execute only
	Hold     *idempotency.Hold     // InFlight and OutcomeUnknown
}

// Claim is the in-flight hold on one (Agent-ID, key). Exactly one of
// Complete or Abandon takes effect, and only while the claim holds the
// key: after an operator released or resolved it, or another request
// claimed the key, both are no-ops (the fencing token no longer
// matches), so a request can never overwrite a newer claim's answer.
// The holder renews the lease while its request runs (Renew).
type Claim interface {
	// Complete stores resp for replay during the window, counted from
	// now, and releases the hold (idempotency.Claim.Complete), also
	// after the lease ended (the key was outcome-unknown meanwhile). It
	// returns ErrClaimLost, storing nothing, once the claim lost its
	// key; nil, doing nothing, after Abandon or a second Complete.
	// After an error wrapping ErrUnavailable it may be called again: a
	// retry after a call that did take effect (its reply lost) returns
	// nil and stores nothing more.
	Complete(ctx context.Context, resp idempotency.Response) error
	// Abandon releases the hold without storing anything; a claim that
	// took a 461 preview over restores it (idempotency.Claim.Abandon).
	// A no-op, returning nil, once the claim lost its key.
	Abandon(ctx context.Context) error
	// Renew extends the lease to lease from now (0: the store's
	// Limits.Lease) while the request runs; ErrClaimLost once the claim
	// lost its key (idempotency.Claim.Renew).
	Renew(ctx context.Context, lease time.Duration) error
	// Preview returns the 461 preview a ClaimConfirming claim took over,
	// or nil.
	Preview() *idempotency.Response
	// Key returns the (Agent-ID, key) pair the claim holds.
	Key() (agentID, key string)
	// Token is the claim's fencing token: an opaque value unique to this
	// claim of the key, which the store compares before Complete or
	// Abandon takes effect.
	Token() string
	// ClaimedAt is when the store recorded the claim: the
	// idempotency.Hold.ClaimedAt a request that finds the key in flight
	// under this claim reads (on Redis to the millisecond).
	ClaimedAt() time.Time
}

// Limiter is one rate-limit budget applied per Agent-ID, shared by every
// node and door using the store (RCNS §12.1; policy/ratelimit).
type Limiter interface {
	// Allow takes one request from agentID's budget when it has one and
	// describes the budget afterwards (ratelimit.Limiter.Allow).
	Allow(ctx context.Context, agentID string) (ratelimit.Decision, error)
	// Budget returns the budget applied.
	Budget() ratelimit.Budget
	// PolicyHeader returns the RateLimit-Policy field value
	// (ratelimit.Limiter.PolicyHeader).
	PolicyHeader() string
	// RateLimitHeader returns the RateLimit field value for d
	// (ratelimit.Limiter.RateLimitHeader).
	RateLimitHeader(d ratelimit.Decision) string
}

// LimiterReleaser is a Limiter that its configuration gives back when
// it is dropped (the engine's Close): the memory store keeps a limiter
// whose budget a reload changed in force until every configuration
// holding it released it, then closes it.
type LimiterReleaser interface {
	Release()
}

// Limiters builds the shared limiter of a budget. A limiter is cheap to
// build again on a config reload; its state is the store's.
type Limiters interface {
	// Limiter returns the limiter applying b per agent. The memory store
	// keeps at most maxAgents buckets (0: ratelimit.DefaultMaxAgents);
	// the Redis store keeps one key per agent that expires when its
	// budget is full again. Errors are ratelimit.New's.
	Limiter(b ratelimit.Budget, maxAgents int64) (Limiter, error)
}

// Contracts holds contracts and their tombstones (RCNS §14, §17.3;
// recipes.Store): the by-id record, the per-(agent, method, path) index
// that serves Tier C by pair, the per-agent and global bounds, the TTL
// and the tombstone expiry. A revocation or release is visible to every
// node using the store on its next call.
type Contracts interface {
	// Mint stores the new contract c in the state its origin and the
	// delivery mode give it (InitialState) and returns that state. At a
	// bound it returns a *LimitError (errors.Is ErrStoreFull or
	// ErrAgentFull) whose Error is the operator-facing explanation.
	Mint(ctx context.Context, c *recipes.Contract, mode string) (state string, err error)
	// MintForPair is Mint for a gate synthesis, where concurrent first
	// calls coalesce: when c's agent already holds an active contract
	// for c's (method, path), nothing is minted, and that contract is
	// returned as joined with its state (one active contract per pair
	// and agent, never a second). A pending contract (a confirm-first
	// preview, which runs nothing until presented) is not joined: each
	// gate request gets its own preview.
	MintForPair(ctx context.Context, c *recipes.Contract, mode string) (state string, joined *recipes.Contract, err error)
	// Lookup finds the contract a request presents (recipes.Store.Lookup):
	// the live contract and recipes.LookupFound; the ended contract its
	// tombstone keeps and recipes.LookupRevoked; or nil and
	// recipes.LookupUnknown. presenter is the presenting Agent-ID (the
	// Redis store looks in that agent's slot first).
	Lookup(ctx context.Context, presenter, id string) (*recipes.Contract, int, error)
	// Activate marks the pending contract c active; it reports whether
	// c was pending.
	Activate(ctx context.Context, c *recipes.Contract) (bool, error)
	// State returns c's current state (recipes.State*): pending, active,
	// expired, revoked or released; "" when it is no longer known.
	State(ctx context.Context, c *recipes.Contract) (string, error)
	// ActiveFor returns the most recently issued active contract agent
	// holds for exactly (method, path), or nil (RCNS §10 step 8b).
	ActiveFor(ctx context.Context, agent, method, path string) (*recipes.Contract, error)
	// Inspect returns a contract, live or ended while its tombstone is
	// kept, with its state as INSPECT reports it (pending as active);
	// found is false for an unknown id (recipes.Store.Inspect).
	Inspect(ctx context.Context, id string) (c *recipes.Contract, state string, found bool, err error)
	// End ends the live contract c in state recipes.StateRevoked,
	// StateReleased or StateExpired and keeps its tombstone; false when
	// it was not live.
	End(ctx context.Context, c *recipes.Contract, state string) (bool, error)
	// List returns the live contracts of agent ("" every agent's), sorted
	// by issue time then id.
	List(ctx context.Context, agent string) ([]*recipes.Contract, error)
	// Len returns the number of live contracts.
	Len(ctx context.Context) (int, error)
	// Limits returns the bounds in force, defaults applied.
	Limits() recipes.StoreLimits
}

// ReplayCache is the seen-signature cache of identity signature (RCNS
// §3; ARCHITECTURE.md "Identity"): each signature is accepted once
// within its validity window, on every node.
type ReplayCache interface {
	// Seen reports whether sig, made by agentID, was already recorded and
	// has not expired; otherwise it records sig until expires and reports
	// false. A signature whose expires is already past is not recorded
	// (httpsig.ReplayCache.Seen).
	Seen(ctx context.Context, agentID string, sig []byte, expires time.Time) (bool, error)
}

// Attempt is one RCNS attempt record (RCNS §11.1, §17.3
// target=rcns-attempt): what a 464 refusal's RCNS-Attempt-Id names.
type Attempt struct {
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

// Attempts keeps the most recent attempt records, by id, bounded: past
// the bound the oldest is dropped.
type Attempts interface {
	// Add keeps rec (rec.ID must be unguessable: recipes.NewAttemptID).
	Add(ctx context.Context, rec Attempt) error
	// Get returns the record with id, or false when it is unknown or was
	// dropped.
	Get(ctx context.Context, id string) (Attempt, bool, error)
	// Len returns the number of records kept.
	Len(ctx context.Context) (int, error)
}

// offAnswerPath is the context key of OffAnswerPath.
type offAnswerPath struct{}

// OffAnswerPath marks ctx as a call made after its answer went out (a
// settle: engine.SharedStore.SettleLater). A store may then gather the
// call with others into one round trip (the Redis store: with the
// records of its record writer, at most RecordBatchDelay later), trading
// a little of the call's latency, which no answer waits for, for the
// syscalls of a round trip of its own.
func OffAnswerPath(ctx context.Context) context.Context {
	return context.WithValue(ctx, offAnswerPath{}, true)
}

// IsOffAnswerPath reports whether ctx was marked by OffAnswerPath.
func IsOffAnswerPath(ctx context.Context) bool {
	v, _ := ctx.Value(offAnswerPath{}).(bool)
	return v
}

// AttemptsLater is implemented by an Attempts that can keep a record
// off the answer path (the Redis store: queued with the
// Attribution-Records, written within a few milliseconds in a batch).
// The engine keeps a refusal's record with AddLater when its store has
// it (issue 32: the refusal's answer waits for no round trip of its
// own). AddLater returns once rec is queued; an error means it will not
// be kept (the queue stayed full, or the store closed). Get and Len on
// the same store see what it queued; another node may read it a moment
// later, and records queued by several nodes together may be ordered
// in the bound by when their batches land.
type AttemptsLater interface {
	AddLater(ctx context.Context, rec Attempt) error
}

// Record is one retained Attribution-Record (RCNS §16, §17.3
// target=audit and target=chain_head).
type Record struct {
	// AuditID is the record's Audit-ID (64 lowercase hex).
	AuditID string `json:"audit_id"`
	// AgentID is its chain key: the requesting registered Agent-ID, ""
	// for an anonymous request (INSPECT's agent_only mode reads it).
	AgentID string `json:"agent_id"`
	// Person is the person the request acted for when that is not its
	// agent's own owner (identity oauth: the token's sub), else "":
	// under the agent_only read ACL only that person reads it.
	Person string `json:"person,omitempty"`
	// NodeID names the gateway node whose chain it is on (its chain is
	// one per agent and node: docs/cluster.md).
	NodeID string `json:"node_id"`
	// Compact is the JWS Compact form, as sent in Attribution-Record.
	Compact string `json:"record"`
	// IssuedAt is when it was issued.
	IssuedAt time.Time `json:"issued_at"`
}

// Head is the head of one agent's chain on one node.
type Head struct {
	NodeID  string `json:"node_id"`
	AuditID string `json:"audit_id"`
}

// Records retains Attribution-Records for a bounded time, by Audit-ID,
// and the chain heads by Agent-ID, so INSPECT target=audit and
// target=chain_head are served on every node.
//
// A store may write a retained record after Retain returns (the Redis
// store batches them off the answer path): Get and Heads of the same
// Set see every record that Set retained before them, and another Set
// (another node) sees it once it is written. A record whose write
// fails is counted (op record) and not retained, as when Retain fails.
type Records interface {
	// Retain keeps rec (a record already sent or about to be) and makes
	// it the head of its (AgentID, NodeID) chain. An error means it is
	// not retained (store.ErrUnavailable: the store is down or its
	// queue full).
	Retain(ctx context.Context, rec Record) error
	// Get returns the retained record with auditID, or false.
	Get(ctx context.Context, auditID string) (Record, bool, error)
	// Heads returns the heads of agentID's chains, one per node that
	// recorded for it within the retention, sorted by node id.
	Heads(ctx context.Context, agentID string) ([]Head, error)
}

// SealKeyBytes is the length of the shared seal key: 32 bytes, an
// HMAC-SHA256 key.
const SealKeyBytes = 32

// SealKeys is the key every node of a shared store seals client-held
// state with (store.Set.Seal).
type SealKeys interface {
	// SealKey returns the gateway's SealKeyBytes-byte key, creating it
	// at random the first time any node asks (one writer wins; every
	// node reads the winner's key). It never changes afterwards: there
	// is no rotation. Errors wrap ErrUnavailable, or say the stored
	// value is not a key of the right length.
	SealKey(ctx context.Context) ([]byte, error)
}

// ManifestVersions is the AGTP-API-Version a shared store keeps for
// every node of it (store.Set.Manifest): spec §4 and §15.4 want it
// monotonically increasing and never reused for another manifest, and
// behind one load balancer the nodes are one server. A node numbers each
// manifest it builds through Version; it learns that another node
// changed the shared part of the manifest (a persistent synthesis
// joined or left it, spec §14.2) from Current (docs/cluster.md "The
// manifest and its version").
type ManifestVersions interface {
	// Version returns the version of a manifest whose content hash is
	// hash, on a node that last served version floor for a manifest of
	// content hash floorHash (0 and "" for none): the version the store
	// gave this manifest before, when it is above floor (or equal, for
	// the manifest floor numbers); else floor itself, when floor numbers
	// this very manifest and is above every version given; else one
	// more than the higher of floor and every version given, which
	// becomes the last version (Current). One atomic step; never below
	// floor. The Redis store publishes a new last version to every
	// node (redisstore.Client.WatchManifest). Errors wrap
	// ErrUnavailable.
	Version(ctx context.Context, hash string, floor int, floorHash string) (int, error)
	// Current returns the last version given and the content hash it
	// numbers (0 and "" when none is stored: none given yet, or the
	// store lost it). Errors wrap ErrUnavailable.
	Current(ctx context.Context) (int, string, error)
}

// Negotiations are the PROPOSE negotiations (agtp-09 §8.4.1, spec
// OP-35): each Negotiation-ID the gateway minted, for the Agent-ID it
// was minted for, with its count of rejected turns, kept NegotiationIdle
// after its last turn. A negotiation is kept from the end of its first
// turn that got past the PROPOSE budget (Record): a turn refused before
// it (a 429, a replay, a proposal without its pair) keeps nothing, so
// what is kept is bounded by the budget. The Redis store shares them between its
// nodes, so that a later turn echoing the ID continues the negotiation
// on whichever node behind the load balancer it reaches (spec §24 item
// 97); the memory store keeps the newest MaxNegotiations. The count is
// not a lock: concurrent turns of one negotiation each read it before
// any is counted.
type Negotiations interface {
	// Turn reads agent's negotiation id at the start of a turn that
	// echoed it: its count of rejected turns and true while the store
	// keeps it (which then keeps it NegotiationIdle from now), else 0
	// and false (never kept, expired, evicted, or another agent's). It
	// adds nothing (it moves a kept negotiation's expiry). Errors wrap
	// ErrUnavailable.
	Turn(ctx context.Context, agent, id string) (rejections int, kept bool, err error)
	// Record keeps agent's negotiation id at the end of a turn past the
	// budget, NegotiationIdle from now, with one more rejected turn
	// when rejected, and returns its count. A negotiation the store does
	// not keep (a new one, under the ID the gateway minted for it) is
	// kept from here. Errors wrap ErrUnavailable; a write Redis received
	// may still have landed.
	Record(ctx context.Context, agent, id string, rejected bool) (int, error)
}

// NegotiationIdle is how long a PROPOSE negotiation is kept after its
// last turn: a later turn echoing it then starts a new one.
const NegotiationIdle = time.Hour

// MaxNegotiations bounds the memory store's PROPOSE negotiations (the
// oldest kept is forgotten first). The Redis store keeps each for
// NegotiationIdle, a key of about 250 bytes with its expiry.
const MaxNegotiations = 10000

// PresentRequest is a request presenting a contract (RCNS §10 step 7).
type PresentRequest struct {
	// Presenter is the presenting Agent-ID.
	Presenter string
	// SynthesisID is the presented contract (Contract-Synthesized).
	SynthesisID string
	// Method and Path are the request's dispatched pair.
	Method, Path string
	// Key and Fingerprint are the request's Idempotency-Key and
	// fingerprint; Key "" claims nothing.
	Key, Fingerprint string
	// Lease and Holder are the claim's (idempotency.ClaimRequest).
	Lease  time.Duration
	Holder idempotency.Holder
	// Claim asks for the key to be claimed (ClaimConfirming, pending
	// read from the contract) when the contract is found, live, the
	// presenter's, and serves (Method, Path). The engine sets it when
	// no refusal that needs no contract is due first (the
	// scope_required_for_invocation header check).
	Claim bool
}

// Presentation is what Present found, and the claim it made.
type Presentation struct {
	// Contract, Lookup: as Contracts.Lookup.
	Contract *recipes.Contract
	Lookup   int
	// State is the contract's state when found (pending, active, or how
	// it ended).
	State string
	// Claimed is the claim's result, nil when no claim was made (no key,
	// Claim false, or the contract not found, ended, another agent's or
	// for another pair).
	Claimed *Claimed
}

// PairRequest is a request for a pair no Tier B endpoint serves (RCNS
// §10 steps 8b and 9): it runs under the agent's active contract for
// the pair, or goes to the gate.
type PairRequest struct {
	// AgentID is the requesting agent.
	AgentID string
	// Method and Path are the dispatched pair.
	Method, Path string
	// Key and Fingerprint are the request's Idempotency-Key and
	// fingerprint; Key "" claims nothing.
	Key, Fingerprint string
	// Lease and Holder are the claim's (idempotency.ClaimRequest).
	Lease  time.Duration
	Holder idempotency.Holder
	// ClaimIfFound claims the key when an active contract serves the
	// pair (the engine sets it when no refusal that needs no contract
	// is due first); ClaimIfMissing claims it when none does (the
	// engine sets it when locks 1-2 let the gate proceed).
	ClaimIfFound, ClaimIfMissing bool
	// Spend, when set, takes one request from the agent's budget of
	// this limiter (Limiter.Allow) when no active contract serves the
	// pair and the claim asked by ClaimIfMissing, if any, executes: the
	// gate's RCNS budget (RCNS §11.2, OP-4: an idempotent replay
	// first, then the budget). The engine sets it when the gate will
	// spend it (locks 1-2 open, no scope_required refusal due first).
	Spend Limiter
	// Attempt, when set, is the attempt record of the refusal the gate
	// answers this request with (RCNS §11.1): kept (Attempts.Add) when
	// no active contract serves the pair, the claim asked by
	// ClaimIfMissing, if any, executes, and Spend, if set, allows it.
	// A store may keep it in the same round trip (AttemptKept) or leave
	// it to the caller (the Redis store in Cluster mode, where attempt
	// records live in another slot).
	Attempt *Attempt
	// Mint, when set (and Attempt is not), is the contract the gate
	// synthesizes for this request, a new one of AgentID for (Method,
	// Path): Contracts.MintForPair(Mint, MintMode) is done when no
	// active contract serves the pair, the claim asked by
	// ClaimIfMissing, if any, executes, and Spend, if set, allows it. A
	// store may do it in the same round trip (PairResolution.Minted)
	// or leave it to the caller (the Redis store in Cluster mode, where
	// a mint writes other slots).
	Mint     *recipes.Contract
	MintMode string
}

// MintResult is the result of a Contracts.MintForPair that ResolvePair
// did (PairRequest.Mint).
type MintResult struct {
	// State is the minted contract's state, or the joined one's.
	State string
	// Joined is the pair's active contract joined in its place, or nil.
	Joined *recipes.Contract
	// Err is MintForPair's error (a *LimitError at a bound).
	Err error
}

// PairResolution is what ResolvePair found, and the claim it made.
type PairResolution struct {
	// Contract is the newest active contract for the pair, or nil.
	Contract *recipes.Contract
	// Claimed is the claim's result, nil when none was made.
	Claimed *Claimed
	// Spent is the decision of PairRequest.Spend, nil when nothing was
	// taken from the budget.
	Spent *ratelimit.Decision
	// AttemptKept reports that PairRequest.Attempt was kept; false
	// when its conditions did not hold or the store left it to the
	// caller.
	AttemptKept bool
	// Minted is the result of PairRequest.Mint's MintForPair, nil when
	// it was not done (its conditions did not hold, or the store left
	// it to the caller).
	Minted *MintResult
}

// LeaseFence is implemented by the Contracts of a store whose nodes may
// answer an agent's presentations of its active contract from a lease
// taken on an earlier read (redisstore; docs/cluster.md "Presentation
// leases"). A request that ends contracts uses it instead of
// Contracts.End, and answers no sooner than each fence after the call
// returned (without an error: it ended the contract, or found it ended,
// perhaps by a concurrent request still waiting): every lease taken
// before the end has run out by then, on every node, so no presentation
// that starts after the answer runs under the contract.
type LeaseFence interface {
	// EndFenced is Contracts.End, and its fence: the longest lease any
	// node took on c (the store keeps it with c), or this node's own,
	// whichever is longer; 0: nothing to wait for.
	EndFenced(ctx context.Context, c *recipes.Contract, state string) (ended bool, fence time.Duration, err error)
	// ListFence is the fence of a request that ends the contracts a
	// List found, after the List: the longest lease any node may take,
	// since a contract a concurrent request ended a moment before is
	// not listed (its record is not read) and that request may still
	// be waiting.
	ListFence() time.Duration
}

// Presenter serves the requests that run under a contract, or may, in
// one round trip each: the contract's lookup and, in the same script,
// the claim of the request's Idempotency-Key.
type Presenter interface {
	// Present is exactly Contracts.Lookup, Contracts.State and
	// Idempotency.Claim (with the contract's synthesis id and pending
	// state) done in that order, atomically.
	Present(ctx context.Context, req PresentRequest) (Presentation, error)
	// ResolvePair is exactly Contracts.ActiveFor then, as asked,
	// Idempotency.Claim, then, on a miss, req.Spend's Allow and
	// Attempts.Add of req.Attempt (PairRequest), atomically.
	ResolvePair(ctx context.Context, req PairRequest) (PairResolution, error)
}

// Set is every kind of state one gateway name shares, all from one
// store.
type Set struct {
	// Presenter combines a contract lookup with its key's claim.
	Presenter   Presenter
	Idempotency Idempotency
	Limiters    Limiters
	Contracts   Contracts
	Replay      ReplayCache
	Attempts    Attempts
	Records     Records
	Tasks       Tasks
	// Seal is the gateway's shared MAC key for state a door hands a
	// client to return (the MCP door's input_required requestState), so
	// that a retry is accepted by any node and after a restart. Nil for
	// the memory store: each process then keeps its own key.
	Seal SealKeys
	// Manifest is the gateway's shared AGTP-API-Version. Nil for the
	// memory store: each process then numbers its own manifests
	// (records_dir/manifest-version.json).
	Manifest ManifestVersions
	// Negotiations are the PROPOSE negotiations: the memory store's
	// on one node, the Redis store's shared by every node.
	Negotiations Negotiations
	// FoldsGate reports that Presenter.ResolvePair may keep
	// PairRequest.Attempt and mint PairRequest.Mint in its one round
	// trip (the Redis store; in Cluster mode it mints but leaves the
	// attempt record, AttemptKept false). When false the engine
	// leaves both nil and does them after a miss: preparing them costs
	// the contract build on every request an active contract serves by
	// pair, and saves a round trip only where there is one to save.
	FoldsGate bool
	// LeavesAttempt reports that ResolvePair never keeps
	// PairRequest.Attempt (AttemptKept always false: the Redis store in
	// Cluster mode, where attempt records live in another slot than the
	// agent's): the engine then leaves it nil and builds the record
	// only for a refusal, once.
	LeavesAttempt bool
	// Close releases what the Set holds beyond its store's client (the
	// Redis store's decoded-contract and served-pair caches, and their
	// goroutines), for the host to call once the configuration it was
	// built for is dropped, even while calls of that configuration still
	// run (a native-door connection, an MCP task): calls from then on
	// work, uncached, and the caches close in the background once the
	// calls that were using them are done. Nil when there is nothing to
	// release.
	Close func()
}

// Limits bounds a Set. Zero fields take the defaults of each kind.
type Limits struct {
	// Idempotency bounds the Idempotency-Key store.
	Idempotency idempotency.Limits
	// Contracts bounds the contract store.
	Contracts recipes.StoreLimits
	// Attempts is the number of attempt records kept; 0 means
	// DefaultAttempts.
	Attempts int
	// ReplayEntries bounds the memory replay cache (entries); 0 means
	// DefaultReplayEntries. The Redis store keeps each signature until
	// it expires, however many there are.
	ReplayEntries int
	// RecordRetention is how long a retained Attribution-Record and a
	// chain head are kept; 0 means DefaultRecordRetention.
	RecordRetention time.Duration
	// MaxRecords bounds the memory store's retained records (the oldest
	// is dropped past it); 0 means DefaultMaxRecords. The Redis store is
	// bounded by RecordRetention alone.
	MaxRecords int
}

// Defaults of Limits.
const (
	// DefaultAttempts is the attempt records kept (ARCHITECTURE.md
	// "Bounds and defaults": an attempt ring of 1,024).
	DefaultAttempts = 1024
	// DefaultReplayEntries is the memory replay cache's bound.
	DefaultReplayEntries = 1_000_000
	// DefaultRecordRetention is how long Attribution-Records are
	// retained: 24 h.
	DefaultRecordRetention = 24 * time.Hour
	// DefaultMaxRecords is the memory store's retained records: 100,000.
	DefaultMaxRecords = 100_000
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.Attempts <= 0 {
		l.Attempts = DefaultAttempts
	}
	if l.ReplayEntries <= 0 {
		l.ReplayEntries = DefaultReplayEntries
	}
	if l.RecordRetention <= 0 {
		l.RecordRetention = DefaultRecordRetention
	}
	if l.MaxRecords <= 0 {
		l.MaxRecords = DefaultMaxRecords
	}
	l.Contracts = ContractLimits(l.Contracts)
	return l
}

// ContractLimits returns l with recipes.NewStore's defaults applied.
func ContractLimits(l recipes.StoreLimits) recipes.StoreLimits {
	if l.MaxContracts <= 0 {
		l.MaxContracts = recipes.DefaultMaxContracts
	}
	if l.MaxPerAgent <= 0 {
		l.MaxPerAgent = recipes.DefaultMaxContractsPerAgent
	}
	if l.TombstoneTTL <= 0 {
		l.TombstoneTTL = 24 * time.Hour
	}
	if l.MaxTombstones <= 0 {
		l.MaxTombstones = 100000
	}
	return l
}

// Op names one store operation in metrics and in Observer calls: a
// closed set, so a label made from it is bounded.
type Op string

// The operations an Observer is told about, one per kind of round trip.
const (
	OpClaim          Op = "idempotency_claim"
	OpComplete       Op = "idempotency_complete"
	OpAbandon        Op = "idempotency_abandon"
	OpRenew          Op = "idempotency_renew"
	OpSettle         Op = "idempotency_settle"
	OpRateLimit      Op = "rate_limit"
	OpContractMint   Op = "contract_mint"
	OpContractLookup Op = "contract_lookup"
	OpContractUpdate Op = "contract_update"
	OpContractPair   Op = "contract_pair"
	OpContractList   Op = "contract_list"
	OpPresent        Op = "present"
	OpResolvePair    Op = "resolve_pair"
	OpReplay         Op = "replay"
	OpAttempt        Op = "attempt"
	OpRecord         Op = "record"
	OpTask           Op = "task"
	OpPing           Op = "ping"
	// OpCount is a read of the store's sizes (live contracts,
	// idempotency and attempt records: the Len methods) for the gauges,
	// made by the health check every interval, and by the operator page:
	// not a request's round trip.
	OpCount   Op = "count"
	OpNodeID  Op = "node_id"
	OpSealKey Op = "seal_key"
	// OpManifest is a read or write of the shared AGTP-API-Version
	// (ManifestVersions): when a node rebuilds its manifest, and its
	// health check's read, every interval.
	OpManifest Op = "manifest"
	// OpNegotiation is a PROPOSE turn's read of its negotiation
	// (Negotiations.Turn) or the turn kept, a rejection counted (Record).
	OpNegotiation Op = "negotiation"
)

// Ops lists every Op, for registering metric label values.
var Ops = []Op{OpClaim, OpComplete, OpAbandon, OpRenew, OpSettle, OpRateLimit, OpContractMint, OpContractLookup,
	OpContractUpdate, OpContractPair, OpContractList, OpPresent, OpResolvePair, OpReplay, OpAttempt, OpRecord, OpTask, OpPing, OpCount, OpNodeID, OpSealKey, OpManifest, OpNegotiation}

// Observer is told about every round trip a store makes: the operation,
// its latency, and its error (nil, or one wrapping ErrUnavailable). The
// engine turns it into Prometheus metrics (latency by op, errors by op).
// It must be safe for concurrent use and fast: it runs on the request
// path.
type Observer interface {
	Observe(op Op, latency time.Duration, err error)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(op Op, latency time.Duration, err error)

// Observe calls f.
func (f ObserverFunc) Observe(op Op, latency time.Duration, err error) { f(op, latency, err) }

// GateMiss does, in Go and in order, what ResolvePair does on a miss
// after its claim (PairRequest.Spend and PairRequest.Attempt) for a
// store that does not fold them into its own round trip: when res has
// no contract and its claim, if any, executes, it spends req.Spend and,
// when that allows the request (or there is no Spend), keeps
// req.Attempt in attempts (nil attempts: left to the caller). Errors
// are the limiter's; a failed Attempts.Add is not an error (the
// refusal stands without its record: AttemptKept stays false and the
// caller adds it). Likewise it does req.Mint's MintForPair with
// contracts (nil: left to the caller), its error in Minted.Err.
func GateMiss(ctx context.Context, req PairRequest, res *PairResolution, attempts Attempts, contracts Contracts) error {
	if res.Contract != nil || (res.Claimed != nil && res.Claimed.Outcome != idempotency.Execute) {
		return nil
	}
	if req.Spend != nil && res.Spent == nil {
		d, err := req.Spend.Allow(ctx, req.AgentID)
		if err != nil {
			return err
		}
		res.Spent = &d
	}
	if req.Attempt != nil && attempts != nil && !res.AttemptKept && (res.Spent == nil || res.Spent.Allowed) {
		res.AttemptKept = attempts.Add(ctx, *req.Attempt) == nil
	}
	if req.Mint != nil && req.Attempt == nil && contracts != nil && res.Minted == nil && (res.Spent == nil || res.Spent.Allowed) {
		state, joined, err := contracts.MintForPair(ctx, req.Mint, req.MintMode)
		res.Minted = &MintResult{State: state, Joined: joined, Err: err}
	}
	return nil
}
