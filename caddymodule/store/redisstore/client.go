// Package redisstore is the Redis implementation of the store
// interfaces (package store), shared by several gateway nodes: single
// Redis, Redis Cluster and Sentinel, through github.com/redis/go-redis/v9
// (docs/cluster.md says why that client, and what each request costs in
// round trips).
//
// Every multi-key operation touches keys of one hash slot: keys are
// tagged by agent ("{a:<Agent-ID>}"), by synthesis id for the contract
// owner index, by Audit-ID for retained records, and "{g}" for the few
// gateway-wide indexes. Atomic read-modify-write operations are Lua
// scripts run with EVALSHA, falling back to EVAL when Redis does not
// know them (a restarted or failed-over server). Rate limits are
// github.com/go-redis/redis_rate/v10 (GCRA).
//
// Every error a call returns, but "not found", wraps store.ErrUnavailable
// and names the operation. Connection errors are not retried (go-redis
// MaxRetries is disabled): a retried claim script could find its own
// first attempt and answer 409. Each call is bounded by the dial, read
// and write timeouts and by the caller's context.
//
// The package imports no caddy.
package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Modes of Config.Mode.
const (
	// ModeSingle is one Redis server (or a proxy in front of several).
	ModeSingle = "single"
	// ModeCluster is Redis Cluster: Addrs are seed nodes.
	ModeCluster = "cluster"
	// ModeSentinel is a master found through Sentinel: Addrs are the
	// sentinels, MasterName the monitored master.
	ModeSentinel = "sentinel"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultKeyPrefix starts every key.
	DefaultKeyPrefix = "rcns:"
	// DefaultDialTimeout bounds establishing a connection.
	DefaultDialTimeout = time.Second
	// DefaultReadTimeout bounds waiting for one reply.
	DefaultReadTimeout = 500 * time.Millisecond
	// DefaultWriteTimeout bounds writing one command.
	DefaultWriteTimeout = 500 * time.Millisecond
	// DefaultMaxContractsCached is the number of decoded contracts a
	// node keeps (their immutable part and compiled plan).
	DefaultMaxContractsCached = 10000
	// DefaultContractLease is how long a node answers unkeyed
	// presentations of an active contract from one read of it, and how
	// long a request that ended a live contract waits before it answers
	// (Config.ContractLease).
	DefaultContractLease = 100 * time.Millisecond
	// MaxContractLease bounds Config.ContractLease: a REVOKE waits it.
	MaxContractLease = time.Second
)

// Config configures a Client; it maps one to one onto the Caddyfile's
// `store redis { … }` block.
type Config struct {
	// Mode is ModeSingle (default), ModeCluster or ModeSentinel.
	Mode string
	// Addrs are host:port addresses: the server (single, exactly one),
	// seed nodes (cluster, at least one) or sentinels (sentinel, at
	// least one).
	Addrs []string
	// MasterName is the Sentinel master name (sentinel mode only,
	// required there).
	MasterName string
	// Username and Password authenticate to Redis (ACL user, or the
	// default user's password when Username is empty).
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the
	// sentinels when they differ from the data servers'.
	SentinelUsername, SentinelPassword string
	// DB is the database number (single and sentinel; Cluster has only
	// 0). Default 0.
	DB int
	// TLS, when set, is the client TLS configuration (the caller builds
	// it, e.g. from Caddy's TLS config). It wins over CAFile.
	TLS *tls.Config
	// CAFile, when set and TLS is nil, turns TLS on and trusts the PEM
	// certificates in that file (and no others).
	CAFile string
	// KeyPrefix starts every key (default "rcns:"): gateways that must
	// not share state use different prefixes (or DBs). It must not
	// contain '{' or '}' (hash tags follow it).
	KeyPrefix string
	// DialTimeout, ReadTimeout and WriteTimeout bound each call (defaults
	// 1 s, 500 ms, 500 ms). A call waits at most DialTimeout for a
	// connection from the pool too.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolSize is the number of connections per server (default
	// go-redis's: 10 per GOMAXPROCS).
	PoolSize int
	// MaxContractsCached bounds the node-local cache of decoded contracts
	// (default DefaultMaxContractsCached), and the cache of their leases.
	MaxContractsCached int
	// ContractLease is how long after it sent a read that found its
	// contract active a node answers the presenter's unkeyed
	// presentations of it without asking Redis again (a lease; while
	// the contract has not expired), and so how long a request that
	// ended a live contract waits before it answers (LeaseFence), so
	// that no node serves a contract after its end was answered
	// (docs/cluster.md "Presentation leases"). 0: DefaultContractLease;
	// negative: no leases, every presentation reads Redis and nothing
	// waits; at most MaxContractLease. Keyed presentations always
	// read Redis (their claim is one round trip with the read). The
	// Caddyfile's contract_lease.
	ContractLease time.Duration
	// Observer, when set, is told about every round trip.
	Observer store.Observer
	// Logger, when set, gets the ERROR line of a panic (a defect) that
	// the client's background goroutines recover (the record writer, a
	// retried background call, a mint's writes in other slots) instead
	// of ending the process; nil: such a panic is recovered all the
	// same, and not logged.
	Logger *zap.Logger
	// RecordBatchDelay is how long the record writer gathers retained
	// Attribution-Records before writing a batch (0: the default,
	// RecordBatchDelay; negative: write each batch at once). Not a
	// Caddyfile option: the default is the measured choice
	// (docs/cluster.md "Round trips per request kind").
	RecordBatchDelay time.Duration
	// RestartQuarantine is how long claims are refused (ErrUnavailable)
	// after the client sees a Redis server that restarted: a run id it
	// has not seen for that server, with an uptime shorter than this. A
	// server that restarted empty has forgotten the keys held by plans
	// still running; refusing claims until the longest plan has ended
	// keeps one request from executing twice. Set it to the
	// Idempotency-Key lease (the longest a request runs). 0 turns it
	// off. A Sentinel failover
	// promotes a replica that has run for long and is not quarantined.
	// The gateway sets it to the longest Idempotency-Key lease its
	// configuration gives (idempotency.Limits.Lease: the longest plan
	// plus a margin).
	RestartQuarantine time.Duration
	// RunIDFile, when set, keeps the run ids the client has seen
	// (JSON, server → run id) across restarts and reloads of the
	// gateway: a client that starts knowing the run id its node saw
	// before quarantines a server that restarted meanwhile, as one that
	// stayed connected does. Without it (or for a node that never saw
	// the deployment) the first run id seen is taken as the baseline.
	// Read at New, written (temp file, then rename) when a run id
	// changes; an unreadable file counts as empty.
	RunIDFile string
	// Now is the clock (nil: time.Now). Expiry logic in the scripts runs
	// on the caller's clock, so nodes must agree on time (NTP); tests
	// inject a fake one. Rate limits use Redis's own clock (redis_rate).
	Now func() time.Time
}

// Client is a pool of connections to one Redis deployment, shared across
// config reloads; Set gives each configuration its view of the state.
type Client struct {
	cfg     Config
	rdb     redis.UniversalClient
	cluster bool
	prefix  string
	now     func() time.Time
	obs     store.Observer
	log     *zap.Logger // Config.Logger: panics recovered in the background

	mu       sync.Mutex
	limiters map[string]*limiter // by budget configuration
	// runIDs maps each server (its cluster node id, or "master") to
	// the run id last seen; quarantine is when claims may start again
	// (Unix ns; 0 none).
	runIDs     map[string]string
	quarantine atomic.Int64
	// restarts counts the run id changes seen (a server restarted or
	// failed over): a claim notes it when taken, and its Complete
	// knows from it whether a key Redis no longer holds was lost with
	// a restart (claim.gen).
	restarts atomic.Int64

	// clockOffset is Redis's clock minus this host's (ms), measured at
	// each Ping (TIME; in Cluster mode the least of the masters');
	// clockKnown once measured. Claims carry a deadline on Redis's
	// clock (claimDeadline).
	clockOffset atomic.Int64
	clockKnown  atomic.Bool

	// live are the claims this client made whose request has not ended
	// (token → *claim): when a server restarts, they are renewed at once
	// (reassert), which writes again the ones it lost.
	live sync.Map

	// recs writes retained Attribution-Records off the answer path.
	recs *recordWriter

	// background work (background): pending counts it, closing stops
	// it, work waits for it at Close.
	pending   atomic.Int64
	work      sync.WaitGroup
	closing   chan struct{}
	closeOnce sync.Once
}

// New validates cfg, builds the client and checks that Redis answers
// PING within the dial timeout. Errors name the field or the failure;
// a Redis that does not answer is an error wrapping store.ErrUnavailable.
func New(ctx context.Context, cfg Config) (*Client, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Ping(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// NewDegraded is New without the PING: the client connects lazily, and
// every call fails with store.ErrUnavailable until Redis answers (the
// Caddyfile's `store_required off`). Only cfg errors fail it.
func NewDegraded(cfg Config) (*Client, error) { return newClient(cfg) }

func newClient(cfg Config) (*Client, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeSingle
	}
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("redisstore: no address")
	}
	for i, a := range cfg.Addrs {
		// host:port with a port from 1 to 65535: refused here, at
		// provision, rather than on every call when go-redis dials.
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
			return nil, fmt.Errorf("redisstore: address %d %q is not host:port (a port from 1 to 65535)", i, a)
		}
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		return nil, fmt.Errorf("redisstore: key prefix %q must not contain '{' or '}'", cfg.KeyPrefix)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"dial timeout", &cfg.DialTimeout, DefaultDialTimeout}, {"read timeout", &cfg.ReadTimeout, DefaultReadTimeout}, {"write timeout", &cfg.WriteTimeout, DefaultWriteTimeout}} {
		if *d.v < 0 {
			return nil, fmt.Errorf("redisstore: %s %v is negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.PoolSize < 0 || cfg.DB < 0 || cfg.MaxContractsCached < 0 {
		return nil, errors.New("redisstore: pool size, DB and contract cache size must not be negative")
	}
	if cfg.MaxContractsCached == 0 {
		cfg.MaxContractsCached = DefaultMaxContractsCached
	}
	switch {
	case cfg.ContractLease > MaxContractLease:
		return nil, fmt.Errorf("redisstore: contract lease %v is over %v (a revoke waits it)", cfg.ContractLease, MaxContractLease)
	case cfg.ContractLease == 0:
		cfg.ContractLease = DefaultContractLease
	}
	tlsConf := cfg.TLS
	if tlsConf == nil && cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redisstore: CA file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisstore: CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tlsConf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	opt := &redis.UniversalOptions{
		Addrs: cfg.Addrs, Username: cfg.Username, Password: cfg.Password,
		SentinelUsername: cfg.SentinelUsername, SentinelPassword: cfg.SentinelPassword,
		DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
		PoolTimeout: cfg.DialTimeout, PoolSize: cfg.PoolSize, TLSConfig: tlsConf,
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, DisableIdentity: true,
	}
	c := &Client{cfg: cfg, cluster: cfg.Mode == ModeCluster, prefix: cfg.KeyPrefix,
		limiters: map[string]*limiter{}, runIDs: loadRunIDs(cfg.RunIDFile), closing: make(chan struct{})}
	if cfg.RestartQuarantine > 0 {
		opt.OnConnect = c.onConnect
	}
	var rdb redis.UniversalClient
	switch cfg.Mode {
	case ModeSingle:
		if len(cfg.Addrs) != 1 {
			return nil, fmt.Errorf("redisstore: single mode takes one address, not %d", len(cfg.Addrs))
		}
		if cfg.MasterName != "" {
			return nil, errors.New("redisstore: master name is for sentinel mode")
		}
		opt.DB = cfg.DB
		rdb = redis.NewClient(opt.Simple())
	case ModeCluster:
		if cfg.DB != 0 {
			return nil, errors.New("redisstore: Redis Cluster has only DB 0")
		}
		if cfg.MasterName != "" {
			return nil, errors.New("redisstore: master name is for sentinel mode")
		}
		opt.MaxRedirects = 3
		rdb = redis.NewClusterClient(opt.Cluster())
	case ModeSentinel:
		if cfg.MasterName == "" {
			return nil, errors.New("redisstore: sentinel mode needs a master name")
		}
		opt.DB, opt.MasterName = cfg.DB, cfg.MasterName
		rdb = redis.NewFailoverClient(opt.Failover())
	default:
		return nil, fmt.Errorf("redisstore: mode %q is not single, cluster or sentinel", cfg.Mode)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	obs := cfg.Observer
	if obs == nil {
		obs = store.ObserverFunc(func(store.Op, time.Duration, error) {})
	}
	c.rdb, c.now, c.obs, c.log = rdb, now, obs, cfg.Logger
	c.recs = startRecordWriter(c)
	return c, nil
}

// onConnect reads, on each new connection, which server run it reached
// (INFO server: run_id, uptime_in_seconds) and starts a quarantine when
// that server restarted less than RestartQuarantine ago. The first run
// id seen for a server is its baseline. Errors leave the connection
// usable. In Sentinel mode go-redis runs the hook on its connections to
// the sentinels too (FailoverOptions.sentinelOptions copies OnConnect):
// a sentinel holds no keys, and its run is not the master's, so those
// connections are skipped (redis_mode:sentinel).
func (c *Client) onConnect(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	if strings.Contains(info, "redis_mode:sentinel") {
		return nil
	}
	server := "master"
	if c.cluster {
		if server, err = cn.ClusterMyID(ctx).Result(); err != nil {
			return nil
		}
	}
	var runID string
	var uptime time.Duration
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "run_id":
			runID = v
		case "uptime_in_seconds":
			n, _ := strconv.ParseInt(v, 10, 64)
			uptime = time.Duration(n) * time.Second
		}
	}
	c.sawRun(server, runID, uptime)
	return nil
}

// sawRun records that server runs as runID since uptime ago.
func (c *Client) sawRun(server, runID string, uptime time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, known := c.runIDs[server]
	c.runIDs[server] = runID
	if prev != runID {
		saveRunIDs(c.cfg.RunIDFile, c.runIDs)
		if known {
			c.restarts.Add(1)
		}
	}
	if !known || prev == runID || uptime >= c.cfg.RestartQuarantine {
		return
	}
	until := c.now().Add(c.cfg.RestartQuarantine - uptime).UnixNano()
	if until > c.quarantine.Load() {
		c.quarantine.Store(until)
	}
	c.reassert()
}

// reassert renews, in the background, every claim whose request still
// runs on this client: a server that restarted without its data lost
// them, and each is written again (renewScript), so a repeat of its key
// meets it in flight, on this node or another one that has no
// quarantine of its own (a node that never saw the old run).
func (c *Client) reassert() {
	c.live.Range(func(_, v any) bool {
		cl := v.(*claim)
		c.background("writing again a claim a restarted Redis lost", cl.s.lease(cl.lease), 0, func(ctx context.Context) error {
			err := cl.Renew(ctx, 0)
			if errors.Is(err, store.ErrClaimLost) {
				return nil
			}
			return err
		}, zap.String("agent_id", cl.agent), zap.String("key", cl.key))
		return true
	})
}

// QuarantineLeft is how long the restart quarantine still lasts (0
// outside it): keyed claims fail with a store.RetryAfterError
// meanwhile.
func (c *Client) QuarantineLeft() time.Duration {
	until := c.quarantine.Load()
	if until == 0 {
		return 0
	}
	return max(time.Unix(0, until).Sub(c.now()), 0)
}

// quarantined returns the error claims fail with while a restarted
// server's quarantine lasts, else nil.
func (c *Client) quarantined() error {
	until := c.quarantine.Load()
	if until == 0 {
		return nil
	}
	left := time.Unix(0, until).Sub(c.now())
	if left <= 0 {
		return nil
	}
	return &store.RetryAfterError{After: left,
		Why: "Redis restarted less than the longest Idempotency-Key lease ago, and a claim it held may be lost: keyed requests resume once every plan that may have held a key before the restart has ended (requests without an Idempotency-Key are served)"}
}

// Close stops the background work (claims being released), closes the
// pool and the limiters' header renderers. Calls made after it fail.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.closing) })
	c.work.Wait()
	c.mu.Lock()
	for name, l := range c.limiters {
		l.h.Close()
		delete(c.limiters, name)
	}
	c.mu.Unlock()
	return c.rdb.Close()
}

// Ping checks that Redis answers (in cluster mode, every master), and
// measures the offset of Redis's clock (TIME) from this host's, which
// claims' deadlines are stated in.
func (c *Client) Ping(ctx context.Context) error {
	start := time.Now()
	var mu sync.Mutex
	offset, known := int64(0), false
	measure := func(ctx context.Context, r redis.Cmdable) error {
		t0 := time.Now()
		t, err := r.Time(ctx).Result()
		if err != nil {
			return err
		}
		o := t.Sub(t0.Add(time.Since(t0) / 2)).Milliseconds()
		mu.Lock()
		if !known || o < offset {
			offset, known = o, true
		}
		mu.Unlock()
		return nil
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return measure(ctx, m) })
	} else {
		err = measure(ctx, c.rdb)
	}
	if err == nil && known {
		c.clockOffset.Store(offset)
		c.clockKnown.Store(true)
	}
	return c.done(store.OpPing, start, err)
}

// ClockOffset is Redis's clock minus this host's as last measured
// (Ping), and whether it was measured yet.
func (c *Client) ClockOffset() (time.Duration, bool) {
	return time.Duration(c.clockOffset.Load()) * time.Millisecond, c.clockKnown.Load()
}

// claimDeadline bounds a claim: the returned context ends ReadTimeout
// from now (or at ctx's earlier deadline), when the caller stops
// waiting and answers 503 "nothing was executed"; the deadline (Unix
// ms on Redis's clock: this host's plus the offset last measured, taken
// as 0 until the first Ping of a degraded client succeeds) is a quarter
// of that time earlier, so a claim script that reaches Redis
// after the caller stopped waiting (Redis stalled with the command in
// its socket, or a network path held it) writes nothing. The quarter
// covers the error of the measured offset; Redis servers' clocks must
// agree within it (NTP; docs/cluster.md).
func (c *Client) claimDeadline(ctx context.Context) (context.Context, int64, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	dl, _ := ctx.Deadline()
	left := time.Until(dl)
	return ctx, dl.Add(-left/4).UnixMilli() + c.clockOffset.Load(), cancel
}

// Bounds of background work (Client.background).
const (
	// maxBackground bounds the calls one client retries at once.
	maxBackground = 1024
	// backgroundFirst is the first retry's wait, doubling up to
	// backgroundMax.
	backgroundFirst = 250 * time.Millisecond
	backgroundMax   = 5 * time.Second
)

// background runs fn, first after wait, until it returns nil or an
// error that is not store.ErrUnavailable, retrying with backoff while
// Redis does not answer, for at most limit, and never after Close. At
// most maxBackground run at once; past that fn is dropped (a released
// claim's key then waits for its lease, and is outcome-unknown after
// it). doing (and fields) name fn in the log line of a panic: a panic in fn (a
// defect) is recovered and logged at ERROR ("panic in a background
// call to Redis") and fn is not tried again; what it would have done is
// left as a failure for good leaves it (a released contract to its
// expiry, a claim to its lease). The process goes on
// (TestPanicInBackgroundCall).
func (c *Client) background(doing string, limit, wait time.Duration, fn func(context.Context) error, fields ...zap.Field) {
	if c.pending.Add(1) > maxBackground {
		c.pending.Add(-1)
		return
	}
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		defer c.pending.Add(-1)
		defer recovered.Guard(c.log, "panic in a background call to Redis; it is not tried again", append(fields, zap.String("doing", doing))...)
		deadline := time.Now().Add(limit)
		t := time.NewTimer(wait)
		wait = max(wait, backgroundFirst)
		defer t.Stop()
		for {
			select {
			case <-c.closing:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DialTimeout+c.cfg.ReadTimeout)
			err := fn(ctx)
			cancel()
			if err == nil || !errors.Is(err, store.ErrUnavailable) || time.Now().Add(wait).After(deadline) {
				return
			}
			wait = min(2*wait, backgroundMax)
			t.Reset(wait)
		}
	}()
}

// timeFuncLua defines redis_time() and redis_ms(): Redis's own clock
// (TIME, as {seconds, microseconds} and as Unix ms), read at most once
// per script call, however many of its functions ask (a deadline check
// and the GCRA's now in resolveScript). A script runs atomically, so
// one reading is its moment. Every script that includes claimFuncLua,
// mintFuncLua or calls gcra with it starts with this.
const timeFuncLua = `
local time_read
local function redis_time()
  if not time_read then time_read = redis.call('TIME') end
  return time_read
end
local function redis_ms()
  local t = redis_time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// denyOOM is a Lua script that Redis refuses before running it while
// over maxmemory (a `#!lua` shebang without allow-oom: Redis 7 script
// flags), with an OOM error the store reports as store.ErrUnavailable:
// for every script that may grow the data, so a full Redis claims and
// mints nothing and nothing executes.
func denyOOM(src string) *redis.Script { return redis.NewScript("#!lua\n" + src) }

// allowOOM is a Lua script that runs even while Redis is over maxmemory
// (flags=allow-oom): for the writes that store an answer already sent,
// extend a lease or free memory.
func allowOOM(src string) *redis.Script { return redis.NewScript("#!lua flags=allow-oom\n" + src) }

// Redis returns the underlying go-redis client (for health checks and
// tests).
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Set returns the state of one configuration: limits l (zero fields take
// the defaults) and contracts restored through rs, which holds that
// configuration's method policy and upstream clients (nil: contracts
// whose plan is neither loaded here nor cached cannot be restored, and
// such a lookup fails with recipes.ErrPlan). Cheap: build one per
// config load; every Set of a Client shares its pool.
func (c *Client) Set(l store.Limits, rs *recipes.Restorer) (store.Set, error) {
	l = l.WithDefaults()
	contracts, err := newContracts(c, l.Contracts, rs)
	if err != nil {
		return store.Set{}, err
	}
	idem := newIdempotency(c, l.Idempotency)
	return store.Set{
		Presenter:     presenter{c: c, idem: idem, contracts: contracts, attempts: l.Attempts},
		Idempotency:   idem,
		Limiters:      limiters{c},
		Contracts:     contracts,
		Replay:        replay{c},
		Attempts:      attempts{c: c, size: l.Attempts},
		Records:       records{c: c, retention: l.RecordRetention},
		Tasks:         tasks{c},
		Seal:          sealKeys{c},
		Manifest:      manifestVersions{c},
		Negotiations:  negotiations{c},
		FoldsGate:     true,
		LeavesAttempt: c.cluster, // P{g}:att is another slot than the agent's
		Close:         contracts.close,
	}, nil
}

// done reports one round trip to the observer and maps its error: nil
// and redis.Nil (not found) are nil, anything else wraps
// store.ErrUnavailable.
func (c *Client) done(op store.Op, start time.Time, err error) error {
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", store.ErrUnavailable, op, err)
	}
	c.obs.Observe(op, time.Since(start), err)
	return err
}

// Cause words for an operator why a call to Redis failed (err from any
// Client method): "Redis refused: <reply>" when Redis answered with an
// error reply (a wrong password or user, a DB number out of range, an
// ACL that forbids a command, a read-only replica, out of memory),
// "the server at the address does not speak the Redis protocol" for
// an answer that is no RESP reply (an HTTP server on the port, say),
// and "Redis does not answer" otherwise (connection refused, a
// timeout). Errors are still store.ErrUnavailable to callers (503
// store-unavailable): only the wording of startup errors and logs
// differs.
func Cause(err error) string {
	var re redis.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &re):
		return "Redis refused: " + re.Error()
	case strings.Contains(err.Error(), "redis: can't parse"):
		return "the server at the address does not speak the Redis protocol"
	default:
		return "Redis does not answer"
	}
}

// IsOOM reports whether err is Redis refusing a write because it is
// over maxmemory (an "OOM" error reply): Redis answers, it is full.
func IsOOM(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// nowMS is the clock in Unix milliseconds.
func (c *Client) nowMS() int64 { return c.now().UnixMilli() }

// agentTag is the hash tag of an agent's keys.
func (c *Client) agentKey(agent, rest string) string {
	return c.prefix + "{a:" + agent + "}:" + rest
}

// globalKey is a gateway-wide index key (one slot, "{g}").
func (c *Client) globalKey(rest string) string { return c.prefix + "{g}:" + rest }

// loadRunIDs reads Config.RunIDFile; a missing or unreadable file is an
// empty map.
func loadRunIDs(path string) map[string]string {
	m := map[string]string{}
	if path == "" {
		return m
	}
	if raw, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(raw, &m)
	}
	return m
}

// saveRunIDs writes m to path atomically (best effort: a failure leaves
// the previous file, and the quarantine of this process is unaffected).
func saveRunIDs(path string, m map[string]string) {
	if path == "" {
		return
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return
	}
	_ = os.Rename(tmp, path)
}
