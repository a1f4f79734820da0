package caddymodule

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestManifestVersionConfigsDiffer: two gateways on one Redis whose
// configurations differ (a reload rolling across the nodes) serve
// different manifests; each keeps its own AGTP-API-Version through the
// health checks that carry a persistent synthesis to every node, rather
// than the two taking turns to bump the shared one (docs/cluster.md
// "The manifest and its version"). Gateways of one configuration share
// one version: integration, TestClusterSingleRedis.
func TestManifestVersionConfigsDiffer(t *testing.T) {
	srv := redistest.StartServer(t)
	up := benchUpstream(t)
	gateway := func(serverID string) *Handler {
		return benchHandlerWith(t, up.URL, false, "", "", func(h *Handler) {
			h.Store = StoreRedis
			h.Redis = &RedisConfig{Addresses: []string{srv.Addr()}, KeyPrefix: "mv:"}
			h.ServerID = serverID // in the manifest: another configuration
			h.Name += "-" + serverID
		})
	}
	a, b := gateway("gw-a"), gateway("gw-b")
	a.eng.Activate()
	b.eng.Activate()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	stored := func() int {
		v, err := rdb.HGet(context.Background(), "mv:{g}:manifest", "v").Int()
		if err != nil {
			t.Fatalf("the stored version: %v", err)
		}
		return v
	}
	va, vb, vs := a.eng.APIVersion(), b.eng.APIVersion(), stored()
	if va == vb || strconv.Itoa(vs) != vb {
		t.Fatalf("versions a %s, b %s, stored %d; want two, b's stored (b numbered its manifest last)", va, vb, vs)
	}
	for range 4 {
		a.redis.check()
		b.redis.check()
	}
	if a.eng.APIVersion() != va || b.eng.APIVersion() != vb || stored() != vs {
		t.Fatalf("after health checks: a %s → %s, b %s → %s, stored %d → %d; want each unchanged",
			va, a.eng.APIVersion(), vb, b.eng.APIVersion(), vs, stored())
	}
}
