package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redisstore"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// redisClients are the Redis store clients by their configuration
// (redisKey): a config reload that keeps the `store redis` settings
// keeps the client and its connection pool; the last configuration
// using a client closes it.
var redisClients = caddy.NewUsagePool()

// Health check intervals of a pooled Redis client: how often it pings
// while Redis answers, and while it does not.
const (
	storeHealthUp   = 5 * time.Second
	storeHealthDown = time.Second
)

// pooledRedis is one shared Redis client, its health and the metrics of
// the newest configuration using it.
type pooledRedis struct {
	client *redisstore.Client
	cfg    redisstore.Config
	// checkPanics throttles the lines of a health check that panics on
	// every pass (a defect): one a minute.
	checkPanics *recovered.Throttle
	// users are the engines using the client (copy on write): the
	// client's Observer reports to each one's metrics (Caddy builds a
	// fresh registry at each load, and a reload overlaps the old and
	// the new configuration), and a successful health check refreshes
	// each one's state gauges (with Redis they are not counted on the
	// request path).
	mu    sync.Mutex
	users atomic.Pointer[[]*engine.Engine]
	// down is set while Redis does not answer (the last round trip or
	// health check failed); firstFail is when the first round trip of
	// the current outage failed (Unix ns, 0 while Redis answers), so
	// the recovery line's down_for counts from it.
	down      atomic.Bool
	firstFail atomic.Int64
	// fullLogged is when a full Redis was last logged, lastFull when it
	// last refused a write for want of memory (Unix ns).
	fullLogged atomic.Int64
	lastFull   atomic.Int64
	// logger, quarantined and downSince belong to the health check: the
	// quarantine is logged once when a check first sees it, an outage
	// when a check first fails (downSince: since then) and when one
	// answers again.
	logger      *zap.Logger
	quarantined bool
	downSince   time.Time
	// instance names this process in node id holds (processInstance;
	// a test may give one its own); nodes is the view of each node id
	// it holds (checkNodeIDs); both under nodeMu.
	nodeMu   sync.Mutex
	instance string
	nodes    map[string]*nodeHold
	stop     chan struct{}
	done     chan struct{} // closed when the health checks stop
	// watchDone is closed when the manifest watch (watchManifest) stops.
	watchDone chan struct{}
	// retries counts the answers retryComplete is still trying to
	// store (at most maxPendingCompletes); Destruct waits for them.
	pending atomic.Int64
	retries sync.WaitGroup
	// settling are the Idempotency-Keys SettleLater is settling
	// (agent + "\x00" + key → closed once settled, or handed to
	// RetryComplete), at most maxSettling; under settleMu. nSettling
	// mirrors its size for AwaitSettling's fast path.
	settleMu  sync.Mutex
	settling  map[string]chan struct{}
	nSettling atomic.Int64
	// settleBytes are the bytes of the answers being settled (at most
	// maxSettlingBytes); settleClosed is set by Destruct, after which
	// SettleLater takes nothing. Both under settleMu.
	settleBytes  int64
	settleClosed bool
	// active counts the requests running on the client (Enter, Exit):
	// Destruct closes it once they have exited.
	active atomic.Int64
}

// Enter (engine.SharedStore) counts a request running on the client.
func (p *pooledRedis) Enter() { p.active.Add(1) }

// Exit (engine.SharedStore) ends an Enter.
func (p *pooledRedis) Exit() { p.active.Add(-1) }

// closing are the clients whose Destruct left their closing to a
// goroutine (requests of theirs still ran): a process that exits waits
// for them (Destruct).
var closing sync.WaitGroup

// idlePoll is how often a client being destructed looks whether its
// requests have exited.
const idlePoll = 20 * time.Millisecond

// awaitIdle returns once no request runs on the client (Enter, Exit), or
// limit has passed.
func (p *pooledRedis) awaitIdle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for p.active.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(idlePoll)
	}
}

// drainLimit is how long Destruct waits for the client's requests: the
// longest lease of the configurations that made it (no plan runs
// longer with a key held; past it a key's answer could not be stored
// anyway), at least drainLimitMin.
func (p *pooledRedis) drainLimit() time.Duration {
	return max(p.cfg.RestartQuarantine, drainLimitMin)
}

// drainLimitMin is drainLimit's floor.
const drainLimitMin = 5 * time.Second

// maxSettling bounds the keys SettleLater settles beside their answers
// at once: past it a request settles its key before answering, as
// before issue 32 (each holds its answer's body).
const maxSettling = 4096

// maxSettlingBytes bounds the answers' bytes SettleLater holds at once
// (a Redis stall holds them for the read timeout while answers keep
// going out): past it a request settles its key before answering.
const maxSettlingBytes = 64 << 20

// SettleLater (engine.SharedStore) runs settle, which stores the answer
// of agent's Idempotency-Key key (or releases the claim of a request
// that did not reach execution), in its own goroutine, so the answer
// does not wait for that round trip: a keyed request's answer waits for
// one round trip, its claim (docs/cluster.md "Round trips per request
// kind"). Until settle returns the key is settling on this node: a
// repeat here waits for it (AwaitSettling) and replays the answer; a
// repeat on another node gets 409 in flight for that round trip, as
// while the request ran. An answer that cannot be stored goes to
// RetryComplete as before. It reports false, and runs nothing, when
// maxSettling keys or maxSettlingBytes of answers (size each) are
// settling, when this key already is (cannot happen while its claim is
// held), or once Destruct began; Destruct waits for the ones running.
func (p *pooledRedis) SettleLater(agent, key string, size int, settle func()) bool {
	id := agent + "\x00" + key
	p.settleMu.Lock()
	if p.settling == nil {
		p.settling = map[string]chan struct{}{}
	}
	if _, busy := p.settling[id]; busy || p.settleClosed || len(p.settling) >= maxSettling ||
		p.settleBytes+int64(size) > maxSettlingBytes {
		p.settleMu.Unlock()
		return false
	}
	done := make(chan struct{})
	p.settling[id] = done
	p.settleBytes += int64(size)
	p.nSettling.Add(1)
	p.retries.Add(1)
	p.settleMu.Unlock()
	go func() {
		defer p.retries.Done()
		defer func() {
			p.settleMu.Lock()
			delete(p.settling, id)
			p.settleBytes -= int64(size)
			p.nSettling.Add(-1)
			p.settleMu.Unlock()
			close(done)
		}()
		// A panic here (a defect) is logged and the key left to its
		// lease, as when storing the answer fails for good.
		defer recovered.Guard(p.logger, "panic storing or releasing an Idempotency-Key beside its answer; the key is left to its lease")
		settle()
	}()
	return true
}

// AwaitSettling (engine.SharedStore) returns once SettleLater is not
// settling agent's key on this node, or ctx ends.
func (p *pooledRedis) AwaitSettling(ctx context.Context, agent, key string) {
	if p.nSettling.Load() == 0 {
		return
	}
	p.settleMu.Lock()
	done := p.settling[agent+"\x00"+key]
	p.settleMu.Unlock()
	if done == nil {
		return
	}
	p.client.Hurry() // its store may be gathered into the next batch
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// maxPendingCompletes bounds the answers one client keeps retrying to
// store at once (retryComplete): a Redis outage under load fails one
// Complete per keyed request that ran, and each retry holds its
// answer's body (at most the answer size limits) in memory.
const maxPendingCompletes = 1024

// Backoff of retryComplete: the first retry after completeRetryFirst,
// doubling up to completeRetryMax between tries, for at most
// completeRetryLimit (past the key's lease a stored answer still
// replaces its outcome-unknown record).
const (
	completeRetryFirst = 250 * time.Millisecond
	completeRetryMax   = 2 * time.Second
	completeRetryLimit = time.Hour
)

// RetryComplete (engine.SharedStore) keeps trying, in the background, to store resp under
// claim c after its Complete failed with the store unavailable, so
// that a repeat of the key replays the answer once Redis answers again
// instead of getting 409 (in flight, then outcome-unknown once the
// key's lease ended). A
// Complete is fenced by the claim's token, so a retry after one that
// did succeed (its reply lost) is a no-op. It stops when the answer is
// stored, when the store says the claim lost its key (store.ErrClaimLost:
// Redis came back without the claim, or an operator released the key),
// when limit (from now) has passed,
// when a Complete fails for another reason, or when the client is
// closed (Destruct). Each end is logged once. It reports
// false, and starts nothing, when maxPendingCompletes are already
// pending; repeats then get outcome-unknown once the key's lease ended.
func (p *pooledRedis) RetryComplete(c store.Claim, resp idempotency.Response, logger *zap.Logger) bool {
	return p.retryComplete(c, resp, completeRetryLimit, logger)
}

// RetryAbandon (engine.SharedStore) keeps trying, in the background, to
// release claim c, the claim of a request that did not reach execution,
// after its Abandon failed with the store unavailable (its reply lost,
// or Redis not answering), as RetryComplete stores an answer: a repeat
// of the key then runs once Redis answers again, instead of getting 409
// in flight and then, once the key's lease ended, outcome-unknown for
// the whole window about a request that never ran. Abandon is fenced by
// the claim's token, so a retry after one that did release the key (or
// after another request claimed it since) changes nothing. Same bounds,
// ends and logging as RetryComplete.
func (p *pooledRedis) RetryAbandon(c store.Claim, logger *zap.Logger) bool {
	return p.retrySettle(c.Abandon, "releasing", completeRetryLimit, logger)
}

// Down reports whether Redis is known not to answer (engine.SharedStore).
func (p *pooledRedis) Down() bool { return p.down.Load() }

// retryComplete is RetryComplete, giving up after limit.
func (p *pooledRedis) retryComplete(c store.Claim, resp idempotency.Response, limit time.Duration, logger *zap.Logger) bool {
	return p.retrySettle(func(ctx context.Context) error { return c.Complete(ctx, resp) }, "storing the answer of", limit, logger)
}

// retrySettle runs settle (storing a claim's answer, or releasing it;
// doing names it: "storing the answer of", "releasing") in the
// background until it succeeds, the claim is lost, it fails for another
// reason than the store being unavailable, limit (from now) passes or
// the client closes; backoff from completeRetryFirst to
// completeRetryMax. When the client closes while Redis answers (the
// health check's view), it tries once more at once, within dialBudget,
// rather than drop an answer or a release that only waited for its
// next backoff step (the key would otherwise end outcome-unknown); while
// Redis is down it gives up at once, adding nothing to the close. It reports false, and starts nothing, when
// maxPendingCompletes are already pending.
func (p *pooledRedis) retrySettle(settle func(context.Context) error, doing string, limit time.Duration, logger *zap.Logger) bool {
	if p.pending.Add(1) > maxPendingCompletes {
		p.pending.Add(-1)
		return false
	}
	p.retries.Add(1)
	what := doing + " an Idempotency-Key"
	go func() {
		defer p.retries.Done()
		defer p.pending.Add(-1)
		defer recovered.Guard(p.logger, "panic "+what+" in the background; the key is left to its lease")
		deadline := time.Now().Add(limit)
		wait := completeRetryFirst
		t := time.NewTimer(wait)
		defer t.Stop()
		for tries := 1; ; tries++ {
			closing := false
			select {
			case <-p.stop:
				if p.down.Load() {
					logger.Warn("gave up "+what+": the store's client is closing while Redis does not answer; it may still have been done (a write Redis took before it stopped answering), else repeats of the key get outcome-unknown once its lease ends",
						zap.Int("tries", tries-1))
					return
				}
				// Redis answers (the health check says so): one last
				// try now instead of dropping what waited for its next
				// backoff step (at most dialBudget more for the close).
				closing = true
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), dialBudget(p.cfg))
			err := settle(ctx)
			cancel()
			switch {
			case err == nil && closing:
				logger.Info("done "+what+" in a last try as the store's client closed", zap.Int("tries", tries))
				return
			case err == nil:
				logger.Info("done "+what+" after the store came back", zap.Int("tries", tries))
				return
			case closing && errors.Is(err, store.ErrUnavailable):
				logger.Warn("gave up "+what+": the store's client is closing and Redis did not answer a last try; it may still have been done (a write Redis took before it stopped answering), else repeats of the key get outcome-unknown once its lease ends",
					zap.Int("tries", tries), zap.Error(err))
				return
			case errors.Is(err, store.ErrClaimLost):
				logger.Warn("gave up "+what+": the store came back without the key's claim (Redis lost its data, or an operator released the key)",
					zap.Int("tries", tries))
				return
			case !errors.Is(err, store.ErrUnavailable) || time.Now().Add(wait).After(deadline):
				logger.Error("gave up "+what+"; it may still have been done (a write Redis took before it stopped answering), else repeats of the key get outcome-unknown once its lease ends",
					zap.Int("tries", tries), zap.Error(err))
				return
			}
			wait = min(2*wait, completeRetryMax)
			t.Reset(wait)
		}
	}()
	return true
}

// Observe is the client's store.Observer: latency and errors by op into
// the metrics, and the up/down state.
// A Redis over maxmemory answers, refusing writes: it is not down
// (caddy_rcns_store_up stays 1, its errors are counted by op), and the
// log says it is full at most once per fullLogEvery.
func (p *pooledRedis) Observe(op store.Op, latency time.Duration, err error) {
	full := err != nil && redisstore.IsOOM(err)
	p.down.Store(err != nil && !full)
	if err != nil && !full {
		p.firstFail.CompareAndSwap(0, time.Now().Add(-latency).UnixNano())
	}
	if full {
		p.lastFull.Store(time.Now().UnixNano())
		p.logFull(err)
	}
	if users := p.users.Load(); users != nil {
		// One round trip is counted once per registry, however many
		// handlers of that load share the client.
		var seenArr [4]any
		seen := seenArr[:0]
		for _, e := range *users {
			sm := e.StoreMetrics()
			if k := sm.Series(); !slices.Contains(seen, k) {
				seen = append(seen, k)
				sm.RoundTrip(op, latency, err)
			}
			sm.SetUp(err == nil || full)
		}
	}
}

// fullLogEvery is how often a full Redis is logged at most.
const fullLogEvery = time.Minute

// logFull logs, at most once per fullLogEvery, that Redis refused a
// write for being over maxmemory.
func (p *pooledRedis) logFull(err error) {
	now := time.Now().UnixNano()
	last := p.fullLogged.Load()
	if now-last < int64(fullLogEvery) || !p.fullLogged.CompareAndSwap(last, now) {
		return
	}
	p.logger.Warn("store redis is full (over maxmemory): requests that need new state answer 503 store-unavailable and execute nothing until it has room; free memory or raise maxmemory (docs/cluster.md, Failure modes)",
		zap.Strings("address", p.cfg.Addrs), zap.Error(err))
}

// health pings Redis until stopped: every storeHealthUp while it
// answers, every storeHealthDown while it does not, so the state gauge
// follows Redis even without traffic. A check that panics is logged
// and counted as failed (check); the loop goes on.
func (p *pooledRedis) health() {
	defer close(p.done)
	wait := storeHealthUp
	if p.down.Load() {
		wait = storeHealthDown
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		wait = storeHealthUp
		if !p.check() {
			wait = storeHealthDown
		}
		t.Reset(wait)
	}
}

// testHookHealthCheck, set by tests only (nil otherwise), runs at the
// start of each health check: a fault injected into the health loop.
// Atomic: the test sets it while the loop runs.
var testHookHealthCheck atomic.Pointer[func()]

// check is one health check: it reports whether Redis answered. A
// panic in it (a defect: in the engines' gauges, say) is recovered,
// logged at ERROR ("panic in the Redis store's health check") and the
// check counts as failed; the loop goes on, checking again
// storeHealthDown later, so the health checks, and the process,
// outlive it (TestPanicInHealthCheck).
func (p *pooledRedis) check() (up bool) {
	// After a panic up keeps its zero value: the check failed.
	defer p.checkPanics.IntoLog(nil, p.logger, "panic in the Redis store's health check; it checks again shortly", zap.Strings("address", p.cfg.Addrs))
	if h := testHookHealthCheck.Load(); h != nil {
		(*h)()
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialBudget(p.cfg))
	defer cancel()
	err := p.client.Ping(ctx)
	p.logOutage(err)
	left := p.client.QuarantineLeft()
	if left > 0 && !p.quarantined {
		p.logger.Warn("Redis restarted less than the longest Idempotency-Key lease ago: requests with an Idempotency-Key answer 503 store-unavailable until every plan that may have held a key before the restart has ended (docs/cluster.md, Failure modes)",
			zap.Strings("address", p.cfg.Addrs), zap.Duration("for", left.Round(time.Second)))
	}
	p.quarantined = left > 0
	if users := p.users.Load(); users != nil {
		for _, e := range *users {
			e.StoreMetrics().SetQuarantine(left)
			if err == nil {
				e.RefreshStoreGauges(ctx)
				e.SyncManifest(ctx, "health check")
			}
		}
	}
	if err == nil {
		p.checkNodeIDs(ctx)
	}
	return err == nil
}

// logOutage logs, once each, a health check that finds Redis not
// answering (WARN, with what Redis did: redisstore.Cause) and the first
// one that finds it answering again (INFO, with how long it was away),
// so the log tells an outage without one line per failed ping.
func (p *pooledRedis) logOutage(err error) {
	switch {
	case err != nil && p.downSince.IsZero():
		p.downSince = time.Now()
		if f := p.firstFail.Load(); f != 0 && f < p.downSince.UnixNano() {
			p.downSince = time.Unix(0, f) // a request met the outage first
		}
		p.logger.Warn("store redis: "+redisstore.Cause(err)+"; requests that need state answer 503 store-unavailable until it answers",
			zap.Strings("address", p.cfg.Addrs), zap.Error(err))
	case err == nil && !p.downSince.IsZero():
		p.logger.Info("store redis answers again", zap.Strings("address", p.cfg.Addrs),
			zap.Duration("down_for", time.Since(p.downSince).Round(time.Millisecond)))
		p.downSince = time.Time{}
		p.firstFail.Store(0)
	case err == nil:
		p.firstFail.Store(0) // a failure the check did not see: no outage
	}
}

// join adds e to the client's users (Provision, once e is attached to
// the store: the health check and the manifest watch call into it from
// their goroutines).
func (p *pooledRedis) join(e *engine.Engine) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var next []*engine.Engine
	if cur := p.users.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, e)
	p.users.Store(&next)
}

// leave removes e from the client's users (releaseStore).
func (p *pooledRedis) leave(e *engine.Engine) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.users.Load()
	if cur == nil {
		return
	}
	next := make([]*engine.Engine, 0, len(*cur))
	for _, u := range *cur {
		if u != e {
			next = append(next, u)
		}
	}
	p.users.Store(&next)
}

// Destruct stops the health checks and closes the pool (the last
// configuration using it went away) once the requests running on it
// have exited (at most drainLimit). Caddy runs a reload's Cleanup while
// the old configuration's requests still run, so Destruct then leaves
// the waiting and the closing to a goroutine and returns at once; a
// request it overtook still settles its key (SettleLater, RetryComplete)
// and keeps its records. A process that exits waits for those closes
// too (Caddy has waited for its HTTP requests by then). A panic in that
// goroutine (a defect) is logged at ERROR and ends it; the client may
// then stay open until the process exits.
func (p *pooledRedis) Destruct() error {
	if !caddy.Exiting() && p.active.Load() > 0 {
		closing.Add(1)
		go func() {
			defer closing.Done()
			defer recovered.Guard(p.logger, "panic closing the Redis client of a configuration that went away", zap.Strings("address", p.cfg.Addrs))
			p.awaitIdle(p.drainLimit())
			if err := p.close(); err != nil {
				p.logger.Warn("store redis: closing the client of a configuration that went away", zap.Error(err))
			}
		}()
		return nil
	}
	p.awaitIdle(p.drainLimit())
	err := p.close()
	if caddy.Exiting() {
		closing.Wait()
	}
	return err
}

// close stops the health checks, waits for the settles and retries
// running, and closes the client.
func (p *pooledRedis) close() error {
	p.settleMu.Lock()
	p.settleClosed = true // no settle starts after the Wait below
	p.settleMu.Unlock()
	close(p.stop)
	<-p.done
	<-p.watchDone
	p.retries.Wait()
	return p.client.Close()
}

// redisKey is the pool key of a client configuration: a hash of every
// setting that reaches the client (placeholders replaced).
func redisKey(cfg redisstore.Config) string {
	raw, _ := json.Marshal(struct {
		Mode, MasterName, Username, Password, CAFile, KeyPrefix string
		Addrs                                                   []string
		DB, PoolSize                                            int
		TLS                                                     bool
		Dial, Read, Write, Quarantine, Lease                    time.Duration
	}{cfg.Mode, cfg.MasterName, cfg.Username, cfg.Password, cfg.CAFile, cfg.KeyPrefix, cfg.Addrs, cfg.DB, cfg.PoolSize,
		cfg.TLS != nil, cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout, cfg.RestartQuarantine, cfg.ContractLease})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// runIDFile is where this node keeps the Redis run ids it has seen for
// one deployment (redisstore.Config.RunIDFile), in Caddy's data
// directory: named by what identifies the deployment's data (mode,
// addresses, master name, DB, key prefix), not by pool settings, so a
// reload that changes a timeout or a restart of the node keeps it, and
// a Redis that restarted meanwhile is quarantined.
func runIDFile(cfg redisstore.Config) string {
	addrs := slices.Clone(cfg.Addrs)
	slices.Sort(addrs) // the order written does not change the deployment
	raw, _ := json.Marshal(struct {
		Mode, MasterName, KeyPrefix string
		Addrs                       []string
		DB                          int
	}{cfg.Mode, cfg.MasterName, cfg.KeyPrefix, addrs, cfg.DB})
	sum := sha256.Sum256(raw)
	return filepath.Join(caddy.AppDataDir(), "rcns", "redis-runs", hex.EncodeToString(sum[:8])+".json")
}

// provisionStore attaches the configuration's store: the name's memory
// store, or a Redis client from the pool (connected here unless
// store_required is off). A Redis that does not answer fails the load,
// naming its addresses.
func (h *Handler) provisionStore(ctx caddy.Context, e *engine.Engine) (engine.Store, error) {
	st, ns, err := h.provisionStoreIn(ctx, e)
	if err == nil {
		// A reload that moved the keys (store kind, deployment, db or
		// key_prefix) refuses keyed requests while the previous
		// configuration's may still run. The context's Done channel
		// is one per configuration load, shared by its handlers.
		h.state.SwitchStore(e, ns, loadOf(ctx))
	}
	return st, err
}

// provisionStoreIn builds the configuration's store and says where it
// keeps the Idempotency-Keys.
func (h *Handler) provisionStoreIn(ctx caddy.Context, e *engine.Engine) (engine.Store, engine.StoreLocation, error) {
	lim := e.StoreLimits()
	if h.Store != StoreRedis {
		mem := h.state.Memory(lim)
		return engine.Store{Set: mem.Set(), Memory: mem}, engine.StoreLocation{Kind: "memory"}, nil
	}
	cfg := h.Redis.clientConfig(caddy.NewReplacer(), e.MaxLease())
	addrs := slices.Clone(cfg.Addrs)
	slices.Sort(addrs)
	ns := engine.StoreLocation{Kind: "redis", Mode: string(cfg.Mode), Addrs: addrs, Master: cfg.MasterName, DB: cfg.DB, Prefix: cfg.KeyPrefix}
	cfg.RunIDFile = runIDFile(cfg)
	key := redisKey(cfg)
	required := h.storeRequired()
	val, _, err := redisClients.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newPooledRedis(ctx, cfg, required, e.Logger())
	})
	if err != nil {
		return engine.Store{}, ns, fmt.Errorf("rcns: store redis (%s %s): %v", cfg.Mode, strings.Join(cfg.Addrs, " "), err)
	}
	h.redis, h.redisKey = val.(*pooledRedis), key
	set, err := h.redis.client.Set(lim, e.Restorer())
	if err != nil {
		return engine.Store{}, ns, fmt.Errorf("rcns: store redis: %v", err)
	}
	h.closeSet = set.Close
	e.StoreMetrics().SetUp(!h.redis.down.Load())
	return engine.Store{Set: set, Shared: h.redis}, ns, nil
}

// newPooledRedis connects a client for the pool: redisstore.New, which
// must answer PING within the dial and read timeouts, or, when the
// store is not required, redisstore.NewDegraded (a warning is logged
// when Redis does not answer yet).
func newPooledRedis(ctx context.Context, cfg redisstore.Config, required bool, logger *zap.Logger) (*pooledRedis, error) {
	routeRedisLog.Do(func() { redis.SetLogger(redisLog{logger: caddy.Log}) })
	p := &pooledRedis{cfg: cfg, logger: logger, instance: processInstance, stop: make(chan struct{}), done: make(chan struct{}),
		watchDone: make(chan struct{}), checkPanics: &recovered.Throttle{Every: time.Minute}}
	cfg.Observer = p
	cfg.Logger = logger // panics the client recovers in the background
	var err error
	if required {
		cctx, cancel := context.WithTimeout(ctx, dialBudget(cfg))
		p.client, err = redisstore.New(cctx, cfg)
		cancel()
		if err != nil {
			if errors.Is(err, store.ErrUnavailable) {
				return nil, fmt.Errorf("store redis at %s: %s: %v (store_required off starts degraded instead: requests that need state answer 503 store-unavailable until Redis answers)",
					strings.Join(cfg.Addrs, ", "), redisstore.Cause(err), err)
			}
			return nil, err
		}
	} else {
		if p.client, err = redisstore.NewDegraded(cfg); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, dialBudget(cfg))
		if err := p.client.Ping(cctx); err != nil {
			p.down.Store(true)
			p.downSince = time.Now() // logged here; the health check logs the recovery
			logger.Warn("store redis: "+redisstore.Cause(err)+"; starting degraded (store_required off): requests that need state answer 503 store-unavailable until it answers",
				zap.Strings("address", cfg.Addrs), zap.Error(err))
		}
		cancel()
	}
	go p.health()
	go p.watchManifest()
	return p, nil
}

// watchManifest rebuilds each user's manifest as soon as another node
// sharing the store gives the manifest a new version
// (redisstore.Client.WatchManifest), so that a persistent synthesis
// granted on one node is in every node's manifest within a round trip
// or two, where the health check alone (SyncManifest, every
// storeHealthUp) took up to 5 s. It stops with the health checks. A
// panic in a rebuild (a defect) is logged at ERROR, throttled as the
// health check's, and the watch goes on; one in the watch itself is
// logged and ends it (the health check keeps the manifests in step).
func (p *pooledRedis) watchManifest() {
	defer close(p.watchDone)
	defer recovered.Guard(p.logger, "panic in the Redis store's manifest watch; it stops, and the health check keeps the manifests in step", zap.Strings("address", p.cfg.Addrs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	p.client.WatchManifest(ctx, func() {
		defer p.checkPanics.IntoLog(nil, p.logger, "panic rebuilding the manifest another node changed; the health check rebuilds it", zap.Strings("address", p.cfg.Addrs))
		users := p.users.Load()
		if users == nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, dialBudget(p.cfg))
		defer cancel()
		for _, e := range *users {
			e.SyncManifest(cctx, "notification")
		}
	})
}

// routeRedisLog sets go-redis's logger once per process.
var routeRedisLog sync.Once

// redisLog is go-redis's logger (redis.SetLogger; the library has one
// per process): its lines go to Caddy's default logger as it is
// configured at the time, named "rcns.store.redis", instead of plain
// text on stderr. A failed dial is DEBUG: an outage is logged once by
// the health check (logOutage), and the library repeats the line on
// every attempt. Everything else (a Sentinel's new master, a discarded
// connection) is INFO.
type redisLog struct {
	logger func() *zap.Logger // caddy.Log
}

// Printf is the library's log call.
func (r redisLog) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	l := r.logger().Named("rcns.store.redis")
	if strings.Contains(msg, "failed to dial") {
		l.Debug(msg)
		return
	}
	l.Info(msg)
}

// dialBudget bounds Provision's first PING: a dial and a reply (with
// the defaults for unset timeouts).
func dialBudget(cfg redisstore.Config) time.Duration {
	d, r := cfg.DialTimeout, cfg.ReadTimeout
	if d <= 0 {
		d = redisstore.DefaultDialTimeout
	}
	if r <= 0 {
		r = redisstore.DefaultReadTimeout
	}
	return d + r
}

// releaseStore gives the configuration's Redis client back to the pool
// (closed when no configuration uses it).
func (h *Handler) releaseStore() {
	if h.closeSet != nil {
		h.closeSet() // requests of this configuration still running go uncached
		h.closeSet = nil
	}
	if h.redis != nil {
		h.redis.leave(h.eng)
		_, _ = redisClients.Delete(h.redisKey)
		h.redis = nil
	}
}
