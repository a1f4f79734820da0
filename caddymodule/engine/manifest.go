package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// manifestHolder holds the current manifest; a pointer so Handler stays
// copyable.
type manifestHolder struct {
	mu  sync.Mutex // serializes rebuilds
	cur atomic.Pointer[publishedManifest]
	// synced is the shared store's version and hash this engine last
	// rebuilt against (SyncManifest), under mu.
	synced manifestState
	// stale reports, under mu, that the manifest published was built or
	// numbered while the shared store did not answer: SyncManifest
	// builds it again once the store answers.
	stale bool
}

// publishedManifest is one rendering of the manifest.
type publishedManifest struct {
	raw        []byte
	etag       string
	apiVersion string
	// version is apiVersion's number, hash the content hash it numbers
	// (manifestHash).
	version int
	hash    string
}

// APIVersion is the current AGTP-API-Version.
func (h *Engine) APIVersion() string {
	if pm := h.pub.cur.Load(); pm != nil {
		return pm.apiVersion
	}
	return "1"
}

// buildManifest renders the manifest (spec §8.2) at each config load and
// whenever a persistent synthesis joins or leaves it.
func (h *Engine) buildManifest() error {
	h.pub.mu.Lock()
	defer h.pub.mu.Unlock()
	return h.renderManifestLocked(nil)
}

// renderManifestLocked is buildManifest with h.pub.mu held. synced is
// the shared store's manifest state when another node changed it
// (SyncManifest), else nil: a rendering whose content is this engine's
// current one and not the stored one (this node's configuration
// differs from the node that stored it) then publishes nothing and
// numbers nothing, so two differing configurations do not take turns
// bumping the version.
func (h *Engine) renderManifestLocked(synced *manifestState) error {
	endpoints := []map[string]any{}
	for _, e := range h.set.Endpoints {
		if !e.Internal {
			endpoints = append(endpoints, e.Projection())
		}
	}
	// The manifest is served without the store: when it does not
	// answer, the persistent contracts are left out until the next
	// rebuild.
	shared := h.sto.Manifest != nil
	h.pub.stale = false
	live, err := h.sto.Contracts.List(context.Background(), "")
	switch {
	case err != nil && synced != nil:
		h.pub.synced = manifestState{} // the next health check tries again
		return fmt.Errorf("listing the persistent contracts: %w", err)
	case err != nil && shared && h.pub.cur.Load() != nil:
		// Keep the manifest served, whose persistent contracts were
		// read, rather than one without any: the next health check
		// that finds the store answering builds it again.
		h.pub.stale = true
		h.logger.Warn("the manifest was not rebuilt: the store did not answer; it is rebuilt once the store answers (the health check, every 5 s)", zap.Error(err))
		return nil
	case err != nil:
		h.pub.stale = shared
		h.logger.Warn("building the manifest without its persistent contracts: the store did not answer", zap.Error(err))
	}
	for _, c := range live {
		if c.Persistent {
			var ep map[string]any
			if err := json.Unmarshal(c.EndpointJSON, &ep); err != nil {
				return fmt.Errorf("persistent contract %s: %v", c.SynthesisID, err)
			}
			ep["tier"] = "C"
			endpoints = append(endpoints, ep)
		}
	}
	legacy := any("NONE")
	if len(h.Legacy) > 0 {
		legacy = h.Legacy
	}
	allow := any("*")
	if len(h.Allow) > 0 && !(len(h.Allow) == 1 && h.Allow[0] == "*") {
		allow = h.Allow
	}
	redirects := []map[string]string{}
	for _, r := range h.Redirects {
		redirects = append(redirects, map[string]string{"from_method": r.FromMethod, "from_path": r.FromPath, "to_method": r.ToMethod, "to_path": r.ToPath})
	}
	apis := []map[string]any{}
	for _, n := range sortedKeys(h.upstreams) {
		apis = append(apis, map[string]any{"name": n})
	}
	features := []string{"endpoint-registry"}
	if h.Enabled {
		features = append(features, "synthesis")
	}
	hosted := []any{}
	for _, e := range h.hosted {
		hosted = append(hosted, e)
	}
	disallow := h.Disallow
	if disallow == nil {
		disallow = []string{}
	}
	now := h.now().UTC().Format(time.RFC3339)
	m := map[string]any{
		"agtp_version":               "1.0",
		"agtp_api_version":           "1.0",
		"catalog_version":            h.methods.Catalog.Version(),
		"catalog_versions_supported": []string{h.methods.Catalog.Version()},
		"server": map[string]any{"server_id": h.ServerID, "domain": nil, "supported_features": features,
			"issued": now, "updated": now, "record_keys": h.signer.JWKS()},
		"embedded_methods":        []any{},
		"custom_methods":          h.methods.CustomMethods(),
		"endpoints":               endpoints,
		"agent_disclosure":        "public",
		"hosted_agents":           []any{},
		"agent_disclosure_notice": nil,
		"apis":                    apis,
		"hosted_protocols":        hosted,
		"policies": map[string]any{
			"wildcards_accepted":            false,
			"anonymous_discovery":           h.anonymousDiscovery(),
			"scope_required_for_invocation": h.scopeRequired(),
			"synthesis_enabled":             h.synthesisEnabled(),
			"max_synthesis_depth":           h.MaxSynthesisDepth,
			"methods":                       map[string]any{"allow": allow, "disallow": disallow, "legacy": legacy, "redirects": redirects},
		},
		"manifest_signature": nil,
	}
	// AGTP-API-Version and the ETag follow everything but the timestamps.
	server := m["server"].(map[string]any)
	stableServer := map[string]any{}
	for k, v := range server {
		if k != "issued" && k != "updated" {
			stableServer[k] = v
		}
	}
	m["server"] = stableServer
	stable, err := json.Marshal(m)
	if err != nil {
		return err
	}
	m["server"] = server
	hash := manifestHash(stable)
	if prev := h.pub.cur.Load(); synced != nil && prev != nil && prev.hash == hash && hash != synced.Hash {
		return nil
	}
	ver, err := h.apiVersionFor(hash)
	if err != nil {
		return fmt.Errorf("AGTP-API-Version: %v", err)
	}
	apiVer := strconv.Itoa(ver)
	m["document_version"] = "v" + apiVer
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(stable)
	// The ETag names the bytes served, document_version included: the
	// content's hash and its version (helper-131: one ETag stood for
	// manifests of different versions, which differ in that member).
	h.pub.cur.Store(&publishedManifest{raw: raw, etag: `"` + hex.EncodeToString(sum[:8]) + "-v" + apiVer + `"`, apiVersion: apiVer, version: ver, hash: hash})
	return nil
}

// manifestHash is the hash AGTP-API-Version tracks: the manifest without
// its timestamps.
func manifestHash(stable []byte) string {
	sum := sha256.Sum256(stable)
	return hex.EncodeToString(sum[:])
}
