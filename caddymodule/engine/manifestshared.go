package engine

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// manifestStoreTimeout bounds a rebuild's round trip to number the
// manifest on a shared store (store.ManifestVersions.Version): past it
// the node numbers the manifest itself.
const manifestStoreTimeout = 2 * time.Second

// sharedAPIVersion numbers the manifest with content hash hash through
// the shared store, so every node serving one manifest serves it under
// one AGTP-API-Version that never decreases or is reused (spec §4,
// §15.4; docs/cluster.md "The manifest and its version"), and persists
// the number as this node's own. It reports false when there is no
// shared store, or it did not answer (logged): the caller then numbers
// the manifest itself, from this node's own records, as without one,
// and the manifest is marked stale, numbered again by the next
// SyncManifest. h.pub.mu is held (renderManifestLocked).
func (h *Engine) sharedAPIVersion(hash string) (int, bool) {
	m := h.sto.Manifest
	if m == nil {
		return 0, false
	}
	rs := h.st.records
	served, err := rs.servedAPIVersion()
	if err != nil {
		return 0, false // the local bump reports the same error
	}
	ctx, cancel := context.WithTimeout(context.Background(), manifestStoreTimeout)
	defer cancel()
	v, err := m.Version(ctx, hash, served.Version, served.Hash)
	if err != nil {
		h.pub.stale = true // numbered again once the store answers
		h.logger.Warn("numbering the manifest without the store, which did not answer: this node's AGTP-API-Version may differ from the other nodes' until the store answers again",
			zap.Error(err))
		return 0, false
	}
	ver, err := rs.adoptAPIVersion(v, hash)
	switch {
	case ver == 0:
		h.pub.stale = true
		h.logger.Warn("numbering the manifest locally", zap.Int("store_version", v), zap.Error(err))
		return 0, false
	case err != nil:
		h.logger.Error("storing AGTP-API-Version failed; serving the computed version", zap.Int("version", ver), zap.Error(err))
	}
	return ver, true
}

// SyncManifest rebuilds the manifest when another node sharing the
// store changed it: a persistent synthesis granted, revoked or ended
// there (spec §14.2) is in this node's manifest, under the same
// AGTP-API-Version, from this call on (logged at INFO, with via). It
// also rebuilds a manifest this node built or numbered while the store
// did not answer, and one the store has lost the version of (Redis
// restarted empty: the persistent contracts went with it). The host
// calls it as soon as the store tells it another node gave the manifest
// a new version (via "notification": the Redis store's manifest
// channel), and after each successful health check of a shared store
// (via "health check", every 5 s), which finds a version whose
// notification was lost; one round trip (op manifest), and the
// rebuild's own when there is one. A no-op for the memory store and
// before the engine serves.
func (h *Engine) SyncManifest(ctx context.Context, via string) {
	m := h.sto.Manifest
	if m == nil || h.act == nil || !h.act.persist.Load() {
		return
	}
	v, hash, err := m.Current(ctx)
	if err != nil {
		return // the next check reads it again
	}
	h.pub.mu.Lock()
	defer h.pub.mu.Unlock()
	if h.pub.stale || v == 0 {
		h.pub.synced = manifestState{}
		if err := h.renderManifestLocked(nil); err != nil {
			h.logger.Error("rebuilding the manifest once the store answered", zap.Error(err))
		}
		return
	}
	if pm := h.pub.cur.Load(); pm != nil && pm.hash == hash && pm.version >= v {
		return
	}
	stored := manifestState{Version: v, Hash: hash}
	if h.pub.synced == stored {
		return // rebuilt against it already; this node's manifest differs
	}
	h.pub.synced = stored
	if err := h.renderManifestLocked(&stored); err != nil {
		h.logger.Error("rebuilding the manifest another node changed", zap.String("via", via), zap.Error(err))
		return
	}
	if pm := h.pub.cur.Load(); pm != nil && pm.hash == hash {
		h.logger.Info("rebuilt the manifest another node changed", zap.String("agtp_api_version", pm.apiVersion), zap.String("via", via))
	}
}
