package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Memory is the embedded store for one node: today's in-memory types
// (idempotency.Store, ratelimit.Limiter, recipes.Store,
// httpsig.ReplayCache) behind the interfaces, plus bounded in-memory
// attempt records, retained Attribution-Records, MCP tasks and PROPOSE
// negotiations. Its methods never
// fail with ErrUnavailable. It is kept across config reloads (a
// caddy.UsagePool entry); SetLimits adapts it to a new configuration as
// the handler does today. Safe for concurrent use.
type Memory struct {
	now func() time.Time

	mu       sync.Mutex
	limits   Limits
	idem     *idempotency.Store
	limiters map[string]*limiterSlot
	set      Set

	contracts *recipes.Store
	replay    *httpsig.ReplayCache
	attempts  *memAttempts
	records   *memRecords
	tasks     *memTasks
	negs      *memNegotiations
}

// limiterSlot keeps a budget's limiter while its configuration is
// unchanged.
type limiterSlot struct {
	sig  string
	l    *ratelimit.Limiter
	refs int // the configurations holding l: Limiter calls not yet released
}

// NewMemory returns an empty memory store bounded by l (zero fields take
// the defaults), reading time from now (nil: time.Now).
func NewMemory(l Limits, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	l = l.WithDefaults()
	m := &Memory{now: now, limits: l, limiters: map[string]*limiterSlot{},
		idem:      idempotency.NewStore(l.Idempotency, now),
		contracts: recipes.NewStore(l.Contracts, now),
		replay:    httpsig.NewReplayCache(l.ReplayEntries, now),
		attempts:  &memAttempts{size: l.Attempts, byID: map[string]Attempt{}},
		records:   newMemRecords(l.MaxRecords, l.RecordRetention, now),
		tasks:     &memTasks{now: now, byID: map[string]memTask{}, cancel: map[string]time.Time{}},
		negs:      newMemNegotiations(MaxNegotiations, now),
	}
	m.set = Set{
		Presenter:   memPresenter{m},
		Idempotency: memIdempotency{m},
		Limiters:    memLimiters{m},
		Contracts:   memContracts{m.contracts},
		Replay:      memReplay{m.replay},
		Attempts:    m.attempts,
		Records:     m.records,
		Tasks:       m.tasks,

		Negotiations: m.negs,
	}
	return m
}

// Set returns the store's state as a Set.
func (m *Memory) Set() Set { return m.set }

// SetLimits applies a new configuration's bounds as the handler does on
// a reload, in place: contract bounds, the attempt and record bounds,
// and the Idempotency-Key store's (idempotency.Store.SetLimits: its
// records stay, claims of running requests included, so a repeat of
// one is not run again). The replay cache's size is fixed at
// NewMemory.
func (m *Memory) SetLimits(l Limits) {
	l = l.WithDefaults()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.contracts.SetLimits(l.Contracts)
	m.attempts.resize(l.Attempts)
	m.records.resize(l.MaxRecords, l.RecordRetention)
	m.idem.SetLimits(l.Idempotency)
	m.limits = l
}

// Limits returns the bounds the store applies (with defaults), the
// last SetLimits' or NewMemory's.
func (m *Memory) Limits() Limits {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.limits
}

// Close stops the limiters' background goroutines. The store stays
// usable: a limiter asked for again is rebuilt.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, slot := range m.limiters {
		slot.l.Close()
		delete(m.limiters, name)
	}
	return nil
}

func (m *Memory) idemStore() *idempotency.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.idem
}

// memIdempotency adapts idempotency.Store.
type memIdempotency struct{ m *Memory }

func (a memIdempotency) Claim(_ context.Context, req idempotency.ClaimRequest) (Claimed, error) {
	return claimed(a.m.idemStore().ClaimWith(req)), nil
}

func (a memIdempotency) Peek(_ context.Context, agentID, key string) (idempotency.KeyState, bool, error) {
	st, ok := a.m.idemStore().Peek(agentID, key)
	return st, ok, nil
}

func (a memIdempotency) Release(_ context.Context, agentID, key string) (idempotency.KeyState, error) {
	return a.m.idemStore().Release(agentID, key)
}

func (a memIdempotency) Resolve(_ context.Context, agentID, key string, resp idempotency.Response) (idempotency.KeyState, error) {
	return a.m.idemStore().Resolve(agentID, key, resp)
}

func (a memIdempotency) Limits() idempotency.Limits { return a.m.idemStore().Limits() }

func (a memIdempotency) Len(context.Context) (int, error) { return a.m.idemStore().Len(), nil }

func claimed(r idempotency.Result) Claimed {
	out := Claimed{Outcome: r.Outcome, Response: r.Response, Hold: r.Hold}
	if r.Claim != nil {
		out.Claim = &memClaim{c: r.Claim, token: NewToken()}
	}
	return out
}

// memClaim adapts idempotency.Claim, whose ownership check (the record
// still points at this claim) is the fencing.
type memClaim struct {
	c     *idempotency.Claim
	token string
	done  bool // Complete or Abandon was called
}

func (c *memClaim) Complete(_ context.Context, resp idempotency.Response) error {
	if c.done {
		return nil
	}
	c.done = true
	if !c.c.Complete(resp) {
		return ErrClaimLost
	}
	return nil
}

func (c *memClaim) Abandon(context.Context) error {
	c.done = true
	c.c.Abandon()
	return nil
}

func (c *memClaim) Renew(_ context.Context, lease time.Duration) error {
	if !c.c.Renew(lease) {
		return ErrClaimLost
	}
	return nil
}

func (c *memClaim) Preview() *idempotency.Response { return c.c.Preview() }
func (c *memClaim) Key() (string, string)          { return c.c.Key() }
func (c *memClaim) Token() string                  { return c.token }
func (c *memClaim) ClaimedAt() time.Time           { return c.c.ClaimedAt() }

// NewToken returns 128 random bits from the CSPRNG in hex: a claim's
// fencing token, unique to one claim of a key.
func NewToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// memPresenter is Present as the three calls it combines.
type memPresenter struct{ m *Memory }

func (a memPresenter) Present(_ context.Context, req PresentRequest) (Presentation, error) {
	c, res := a.m.contracts.Lookup(req.SynthesisID)
	p := Presentation{Contract: c, Lookup: res}
	if c == nil {
		return p, nil
	}
	p.State = a.m.contracts.State(c)
	if res == recipes.LookupFound && req.Claim && req.Key != "" && c.OriginatingAgentID == req.Presenter &&
		c.Method == req.Method && c.Path == req.Path {
		cl := claimed(a.m.idemStore().ClaimWith(idempotency.ClaimRequest{AgentID: req.Presenter, Key: req.Key, Fingerprint: req.Fingerprint,
			SynthesisID: c.SynthesisID, Pending: p.State == recipes.StatePending, Lease: req.Lease, Holder: req.Holder}))
		p.Claimed = &cl
	}
	return p, nil
}

func (a memPresenter) ResolvePair(ctx context.Context, req PairRequest) (PairResolution, error) {
	c := a.m.contracts.ActiveFor(req.AgentID, req.Method, req.Path)
	res := PairResolution{Contract: c}
	if req.Key != "" && (c != nil && req.ClaimIfFound || c == nil && req.ClaimIfMissing) {
		cl := claimed(a.m.idemStore().ClaimWith(idempotency.ClaimRequest{AgentID: req.AgentID, Key: req.Key, Fingerprint: req.Fingerprint,
			Lease: req.Lease, Holder: req.Holder}))
		res.Claimed = &cl
	}
	return res, GateMiss(ctx, req, &res, a.m.attempts, a.m.set.Contracts)
}

// memLimiters keeps one ratelimit.Limiter per budget name, replaced when
// the budget's configuration changes. A replaced limiter stays in force
// for the configurations that hold it (the one still serving while a
// reload is provisioned, and for good if that reload fails) and is closed
// once the last of them releases it (LimiterReleaser).
type memLimiters struct{ m *Memory }

func (a memLimiters) Limiter(b ratelimit.Budget, maxAgents int64) (Limiter, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	sig := fmt.Sprintf("%d/%g/%d", b.Burst, b.PerMinute, maxAgents)
	if slot, ok := m.limiters[b.Name]; ok {
		if slot.sig == sig {
			slot.refs++
			return &memLimiter{l: slot.l, m: m, slot: slot}, nil
		}
		delete(m.limiters, b.Name)
		if slot.refs <= 0 {
			slot.l.Close()
		}
	}
	l, err := ratelimit.New(b, maxAgents, m.now)
	if err != nil {
		return nil, err
	}
	slot := &limiterSlot{sig: sig, l: l, refs: 1}
	m.limiters[b.Name] = slot
	return &memLimiter{l: l, m: m, slot: slot}, nil
}

// memLimiter adapts ratelimit.Limiter: one configuration's hold on a
// slot's limiter.
type memLimiter struct {
	l        *ratelimit.Limiter
	m        *Memory
	slot     *limiterSlot
	released sync.Once
}

// Release gives the limiter back (LimiterReleaser): a limiter replaced
// meanwhile and now held by no configuration is closed. Once per hold.
func (a *memLimiter) Release() {
	a.released.Do(func() {
		a.m.mu.Lock()
		defer a.m.mu.Unlock()
		a.slot.refs--
		if a.slot.refs <= 0 && a.m.limiters[a.l.Budget().Name] != a.slot {
			a.l.Close()
		}
	})
}

func (a *memLimiter) Allow(_ context.Context, agentID string) (ratelimit.Decision, error) {
	return a.l.Allow(agentID), nil
}
func (a *memLimiter) Budget() ratelimit.Budget                    { return a.l.Budget() }
func (a *memLimiter) PolicyHeader() string                        { return a.l.PolicyHeader() }
func (a *memLimiter) RateLimitHeader(d ratelimit.Decision) string { return a.l.RateLimitHeader(d) }

// memContracts adapts recipes.Store.
type memContracts struct{ s *recipes.Store }

func (a memContracts) Mint(_ context.Context, c *recipes.Contract, mode string) (string, error) {
	state := InitialState(c.NegotiationOrigin, mode)
	if err := a.s.Put(c, state); err != nil {
		return "", limitError(err)
	}
	return state, nil
}

func (a memContracts) MintForPair(_ context.Context, c *recipes.Contract, mode string) (string, *recipes.Contract, error) {
	state := InitialState(c.NegotiationOrigin, mode)
	joined, err := a.s.PutForPair(c, state)
	if err != nil {
		return "", nil, limitError(err)
	}
	if joined != nil {
		return a.s.State(joined), joined, nil
	}
	return state, nil, nil
}

func (a memContracts) Lookup(_ context.Context, _, id string) (*recipes.Contract, int, error) {
	c, res := a.s.Lookup(id)
	return c, res, nil
}

func (a memContracts) Activate(_ context.Context, c *recipes.Contract) (bool, error) {
	return a.s.Activate(c), nil
}

func (a memContracts) State(_ context.Context, c *recipes.Contract) (string, error) {
	return a.s.State(c), nil
}

func (a memContracts) ActiveFor(_ context.Context, agent, method, path string) (*recipes.Contract, error) {
	return a.s.ActiveFor(agent, method, path), nil
}

func (a memContracts) Inspect(_ context.Context, id string) (*recipes.Contract, string, bool, error) {
	c, state, found := a.s.Inspect(id)
	return c, state, found, nil
}

func (a memContracts) End(_ context.Context, c *recipes.Contract, state string) (bool, error) {
	return a.s.End(c.SynthesisID, state), nil
}

func (a memContracts) List(_ context.Context, agent string) ([]*recipes.Contract, error) {
	return a.s.List(agent), nil
}

func (a memContracts) Len(context.Context) (int, error) { return a.s.Len(), nil }

func (a memContracts) Limits() recipes.StoreLimits { return a.s.Limits() }

// memReplay adapts httpsig.ReplayCache (a signature belongs to one
// agent's key, so the agent adds nothing to its identity).
type memReplay struct{ c *httpsig.ReplayCache }

func (a memReplay) Seen(_ context.Context, _ string, sig []byte, expires time.Time) (bool, error) {
	return a.c.Seen(sig, expires), nil
}

// memAttempts is a bounded ring of attempt records; the oldest is
// dropped first.
type memAttempts struct {
	mu    sync.Mutex
	size  int
	order []string
	byID  map[string]Attempt
}

func (a *memAttempts) resize(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.size = n
	a.trimLocked()
}

func (a *memAttempts) Add(_ context.Context, rec Attempt) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byID[rec.ID]; !ok {
		a.order = append(a.order, rec.ID)
	}
	a.byID[rec.ID] = rec
	a.trimLocked()
	return nil
}

func (a *memAttempts) trimLocked() {
	for len(a.order) > a.size {
		delete(a.byID, a.order[0])
		a.order = a.order[1:]
	}
}

func (a *memAttempts) Get(_ context.Context, id string) (Attempt, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.byID[id]
	return r, ok, nil
}

func (a *memAttempts) Len(context.Context) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.order), nil
}

// ContractStore returns the recipes.Store the memory contracts live in,
// for callers that read or bound it directly (white-box tests).
func (m *Memory) ContractStore() *recipes.Store { return m.contracts }

// ResetIdempotency replaces the Idempotency-Key store with an empty one
// bounded by l (zero fields take the defaults), as SetLimits does when
// the idempotency limits change.
func (m *Memory) ResetIdempotency(l idempotency.Limits) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.idem = idempotency.NewStore(l, m.now)
}

// MaxMemoryTasks bounds the memory store's tasks: past it, expired ones
// are swept, then a Put of a new task is refused (ErrUnavailable).
const MaxMemoryTasks = 100_000

// memTasks keeps tasks in a map, each until its expiry.
type memTasks struct {
	now    func() time.Time
	mu     sync.Mutex
	byID   map[string]memTask
	cancel map[string]time.Time // id → expiry of its cancel request
}

type memTask struct {
	t       Task
	expires time.Time
}

func (m *memTasks) sweepLocked(now time.Time) {
	for id, e := range m.byID {
		if !now.Before(e.expires) {
			delete(m.byID, id)
		}
	}
	for id, exp := range m.cancel {
		if !now.Before(exp) {
			delete(m.cancel, id)
		}
	}
}

func (m *memTasks) Put(_ context.Context, t Task, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.putLocked(t, ttl, m.now())
}

func (m *memTasks) putLocked(t Task, ttl time.Duration, now time.Time) error {
	if _, ok := m.byID[t.ID]; !ok && len(m.byID) >= MaxMemoryTasks {
		m.sweepLocked(now)
		if len(m.byID) >= MaxMemoryTasks {
			return fmt.Errorf("%w: the memory store holds %d tasks", ErrUnavailable, MaxMemoryTasks)
		}
	}
	t.Result, t.Error, t.Steps = slices.Clone(t.Result), slices.Clone(t.Error), slices.Clone(t.Steps)
	m.byID[t.ID] = memTask{t: t, expires: now.Add(ttl)}
	return nil
}

func (m *memTasks) Update(_ context.Context, t Task, ttl time.Duration, notAfter time.Time, margin time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if now.After(notAfter) || (!t.LeaseUntil.IsZero() && now.After(t.LeaseUntil.Add(-margin))) {
		return ErrTaskLate
	}
	if e, ok := m.byID[t.ID]; ok && now.Before(e.expires) {
		switch {
		case e.t.Status != TaskStatusWorking || e.t.LeaseUntil.IsZero() || now.After(e.t.LeaseUntil.Add(-margin)):
			return ErrTaskLate
		case !t.LeaseUntil.IsZero() && !t.LeaseUntil.After(e.t.LeaseUntil):
			return nil // a renewal older than the one stored
		}
	}
	return m.putLocked(t, ttl, now)
}

func (m *memTasks) Get(_ context.Context, id string) (Task, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok || !m.now().Before(e.expires) {
		return Task{}, false, nil
	}
	return e.t, true, nil
}

func (m *memTasks) RequestCancel(_ context.Context, id string, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.cancel) >= MaxMemoryTasks {
		m.sweepLocked(m.now())
	}
	m.cancel[id] = m.now().Add(ttl)
	return nil
}

func (m *memTasks) Poll(_ context.Context, ids []string) ([]TaskPoll, error) {
	if len(ids) > MaxTaskPoll {
		return nil, fmt.Errorf("store: a task poll of %d ids; at most %d a call", len(ids), MaxTaskPoll)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]TaskPoll, len(ids))
	for i, id := range ids {
		exp, ok := m.cancel[id]
		e, stored := m.byID[id]
		out[i] = TaskPoll{CancelRequested: ok && now.Before(exp), Stored: stored && now.Before(e.expires)}
	}
	return out, nil
}
