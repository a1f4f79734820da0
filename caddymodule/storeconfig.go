package caddymodule

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"os"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redisstore"
	"github.com/caddyserver/caddy/v2"
)

// Store kinds (StoreConfig.Store).
const (
	// StoreMemory keeps the shared state in this process (one node).
	StoreMemory = "memory"
	// StoreRedis keeps it in Redis, shared by every node configured
	// with the same Redis and key prefix (docs/cluster.md).
	StoreRedis = "redis"
)

// StoreConfig is where the state every door shares lives
// (docs/cluster.md): Idempotency-Key records, rate limits, contracts and
// tombstones, the signature replay cache, RCNS attempt records and the
// retained Attribution-Records.
type StoreConfig struct {
	// Store is "memory" (default: this process, one node) or "redis"
	// (shared by every node using the same Redis and key prefix;
	// configured by Redis).
	Store string `json:"store,omitempty"`

	// Redis configures the Redis store; required when Store is "redis",
	// refused otherwise.
	Redis *RedisConfig `json:"redis,omitempty"`

	// StoreRequired makes Provision fail the config load when the Redis
	// store does not answer (default true). When false the gateway
	// starts degraded: every request that needs state answers 503
	// store-unavailable until Redis answers. No effect with the memory
	// store.
	StoreRequired *bool `json:"store_required,omitempty"`

	// NodeID names this gateway node in every Attribution-Record
	// (node_id) and in the retained chain heads: each agent's record
	// chain is one per (agent, node) (docs/cluster.md). 1-64 characters
	// of A-Z a-z 0-9 . _ -. Default: the host name (else "node").
	NodeID string `json:"node_id,omitempty"`
}

// RedisConfig is the Caddyfile's `store redis { … }` block: how to reach
// Redis (docs/configuration.md "Store"). Placeholders such as
// {env.REDIS_PASSWORD} are replaced in Addresses, MasterName, Username,
// Password, TLSCAFile and KeyPrefix when the config loads.
type RedisConfig struct {
	// Mode is "single" (default: one server), "cluster" (Redis Cluster;
	// Addresses are seed nodes) or "sentinel" (a master found through
	// Sentinel; Addresses are the sentinels).
	Mode string `json:"mode,omitempty"`

	// Addresses are host:port addresses: exactly one in single mode, at
	// least one seed node in cluster mode, at least one sentinel in
	// sentinel mode. Required.
	Addresses []string `json:"addresses,omitempty"`

	// MasterName is the monitored master's name: sentinel mode only,
	// required there.
	MasterName string `json:"master_name,omitempty"`

	// Username is the Redis ACL user (default: the default user).
	Username string `json:"username,omitempty"`

	// Password authenticates Username (or the default user).
	Password string `json:"password,omitempty"`

	// DB is the database number: single and sentinel modes only
	// (Redis Cluster has only 0). Default 0.
	DB int `json:"db,omitempty"`

	// TLS connects with TLS, verifying the server against the system
	// roots (or TLSCAFile's). Default false.
	TLS bool `json:"tls,omitempty"`

	// TLSCAFile is a PEM file of the CA certificates that sign the
	// servers' certificates; set, it implies TLS and trusts only these.
	TLSCAFile string `json:"tls_ca_file,omitempty"`

	// KeyPrefix starts every key. Gateways that must not share state
	// (another rcns name, another deployment) on one Redis use different
	// prefixes or DBs. Must not contain '{' or '}'. Default "rcns:".
	KeyPrefix string `json:"key_prefix,omitempty"`

	// DialTimeout bounds establishing a connection, and waiting for one
	// from the pool. Default 1s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`

	// ReadTimeout bounds waiting for one reply. Default 500ms.
	ReadTimeout caddy.Duration `json:"read_timeout,omitempty"`

	// WriteTimeout bounds writing one command. Default 500ms.
	WriteTimeout caddy.Duration `json:"write_timeout,omitempty"`

	// PoolSize is the number of connections per Redis server. Default
	// go-redis's: 10 per GOMAXPROCS.
	PoolSize int `json:"pool_size,omitempty"`

	// ContractLease is how long a node answers an agent's unkeyed
	// presentations of its active contract from one read of it, with
	// no round trip, and how long a REVOKE or SUSPEND that ended a
	// contract waits before it answers, so that every node has
	// stopped serving the contract by then (docs/cluster.md
	// "Presentation leases"). Default 100ms
	// (redisstore.DefaultContractLease); at most 1s; negative turns
	// leases off (Caddyfile: contract_lease off).
	ContractLease caddy.Duration `json:"contract_lease,omitempty"`
}

// storeRequired is StoreRequired with its default.
func (s *StoreConfig) storeRequired() bool { return s.StoreRequired == nil || *s.StoreRequired }

// setStoreDefaults fills Store and NodeID.
func (s *StoreConfig) setStoreDefaults() {
	if s.Store == "" {
		s.Store = StoreMemory
	}
	if s.NodeID == "" {
		s.NodeID = defaultNodeID()
	}
}

// defaultNodeID is the host name cut to a valid node id, else "node".
func defaultNodeID() string {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	var b strings.Builder
	for i := 0; i < len(host) && b.Len() < 64; i++ {
		c := host[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		return "node"
	}
	return b.String()
}

// validateStore checks the store settings; errors name the knob.
func (s *StoreConfig) validateStore() error {
	if !engine.ValidName(s.NodeID) {
		return fmt.Errorf("rcns: node_id %q must be 1-64 characters of A-Z a-z 0-9 . _ - (not . or .. alone)", s.NodeID)
	}
	switch s.Store {
	case StoreMemory:
		if s.Redis != nil {
			return errors.New("rcns: redis settings are given but store is memory; use store redis { … }")
		}
		return nil
	case StoreRedis:
		if s.Redis == nil {
			return errors.New("rcns: store redis needs its settings (at least address)")
		}
		return s.Redis.validate()
	}
	return fmt.Errorf("rcns: store %q is not memory or redis", s.Store)
}

// validate checks the combinations the Caddyfile parser also refuses
// (JSON can say them too); errors name the knob.
func (r *RedisConfig) validate() error {
	switch r.Mode {
	case "", redisstore.ModeSingle, redisstore.ModeCluster, redisstore.ModeSentinel:
	default:
		return fmt.Errorf("rcns: store redis: mode %q is not single, cluster or sentinel", r.Mode)
	}
	mode := r.mode()
	switch {
	case len(r.Addresses) == 0:
		return errors.New("rcns: store redis: no address; give address <host:port>")
	case mode == redisstore.ModeSingle && len(r.Addresses) != 1:
		return fmt.Errorf("rcns: store redis: mode single takes exactly one address, not %d (use mode cluster for seed nodes, mode sentinel for sentinels)", len(r.Addresses))
	case r.MasterName != "" && mode != redisstore.ModeSentinel:
		return fmt.Errorf("rcns: store redis: master_name is for mode sentinel, not %s", mode)
	case mode == redisstore.ModeSentinel && r.MasterName == "":
		return errors.New("rcns: store redis: mode sentinel needs master_name")
	case r.DB != 0 && mode == redisstore.ModeCluster:
		return errors.New("rcns: store redis: db is not for mode cluster (Redis Cluster has only DB 0)")
	case r.DB < 0:
		return errors.New("rcns: store redis: db must not be negative")
	case r.PoolSize < 0:
		return errors.New("rcns: store redis: pool_size must not be negative")
	case time.Duration(r.ContractLease) > redisstore.MaxContractLease:
		return fmt.Errorf("rcns: store redis: contract_lease %v is over %v (a REVOKE waits it before it answers)", time.Duration(r.ContractLease), redisstore.MaxContractLease)
	case r.DialTimeout < 0 || r.ReadTimeout < 0 || r.WriteTimeout < 0:
		return errors.New("rcns: store redis: timeouts must not be negative (leave them out for the defaults)")
	case strings.ContainsAny(r.KeyPrefix, "{}"):
		return fmt.Errorf("rcns: store redis: key_prefix %q must not contain '{' or '}'", r.KeyPrefix)
	}
	for i, a := range r.Addresses {
		if a == "" {
			return fmt.Errorf("rcns: store redis: address %d is empty", i)
		}
	}
	return nil
}

func (r *RedisConfig) mode() string {
	if r.Mode == "" {
		return redisstore.ModeSingle
	}
	return r.Mode
}

// clientConfig is the redisstore.Config of r with placeholders replaced
// by repl (nil: none) and defaults applied; quarantine is the restart
// quarantine (the longest Idempotency-Key lease).
func (r *RedisConfig) clientConfig(repl *caddy.Replacer, quarantine time.Duration) redisstore.Config {
	sub := func(s string) string {
		if repl == nil {
			return s
		}
		return repl.ReplaceAll(s, "")
	}
	addrs := make([]string, len(r.Addresses))
	for i, a := range r.Addresses {
		addrs[i] = sub(a)
	}
	cfg := redisstore.Config{
		Mode: r.mode(), Addrs: addrs, MasterName: sub(r.MasterName), Username: sub(r.Username), Password: sub(r.Password),
		DB: r.DB, CAFile: sub(r.TLSCAFile), KeyPrefix: sub(r.KeyPrefix),
		DialTimeout: time.Duration(r.DialTimeout), ReadTimeout: time.Duration(r.ReadTimeout), WriteTimeout: time.Duration(r.WriteTimeout),
		PoolSize: r.PoolSize, RestartQuarantine: quarantine, ContractLease: time.Duration(r.ContractLease),
	}
	if r.TLS && cfg.CAFile == "" {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = redisstore.DefaultKeyPrefix
	}
	return cfg
}
