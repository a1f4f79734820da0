package caddymodule

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "rcns",
		Usage: "verify-log <dir>",
		Short: "Tools for the rcns gateway (verify-log checks negotiation record chains)",
		Long: `Tools for the rcns gateway.

verify-log <dir> checks every hash chain in a negotiation record directory
(the rcns records_dir/negotiations folder) and exits non-zero naming the
first broken record (file, line, agent).`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.AddCommand(&cobra.Command{
				Use:   "verify-log <dir>",
				Short: "Verify the hash chains of a negotiation record directory",
				Args:  cobra.ExactArgs(1),
				RunE: func(_ *cobra.Command, args []string) error {
					if err := records.VerifyDir(args[0]); err != nil {
						return fmt.Errorf("verify-log: %w", err)
					}
					fmt.Printf("verify-log: %s: every chain is intact\n", args[0])
					return nil
				},
			})
		},
	})
}

// recordState is the durable part of the shared state: the negotiation
// log, the Attribution-Record chain heads, the lifecycle streams and
// AGTP-API-Version. It lives as long as the shared state (across
// reloads) and is reopened when records_dir changes.
type recordState struct {
	mu         sync.Mutex
	dir        string
	fsync      records.FsyncPolicy
	log        *records.Log
	chains     *records.Chains
	lifecycle  *records.Lifecycle
	apiVersion int
	stop       chan struct{}
	done       chan struct{}
}

// manifestState is what AGTP-API-Version persistence stores.
type manifestState struct {
	Version int    `json:"version"`
	Hash    string `json:"hash"`
}

// open (re)opens the record files under dir. Memory-only when dir is "".
func (rs *recordState) open(dir string, fsync records.FsyncPolicy, signer *records.Signer, logger *zap.Logger) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.chains != nil && rs.dir == dir && rs.fsync == fsync {
		return nil
	}
	rs.closeLocked()
	rs.dir, rs.fsync = dir, fsync
	var err error
	chainsPath := ""
	if dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("records_dir: %v", err)
		}
		chainsPath = filepath.Join(dir, "attribution-chains.json")
		if rs.log, err = records.OpenLog(records.LogOptions{Dir: filepath.Join(dir, "negotiations"), Fsync: fsync}); err != nil {
			return fmt.Errorf("records_dir: %v", err)
		}
	}
	if rs.chains, err = records.OpenChains(chainsPath); err != nil {
		return fmt.Errorf("records_dir: %v", err)
	}
	if rs.lifecycle == nil {
		if rs.lifecycle, err = records.NewLifecycle(signer, records.LifecycleOptions{}); err != nil {
			return err
		}
	}
	rs.stop, rs.done = make(chan struct{}), make(chan struct{})
	go rs.flusher(rs.chains, rs.stop, rs.done, logger)
	return nil
}

// flusher persists the chain heads once a second until stopped.
func (rs *recordState) flusher(c *records.Chains, stop, done chan struct{}, logger *zap.Logger) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := c.Flush(); err != nil {
				logger.Error("persisting attribution chain heads", zap.Error(err))
			}
		case <-stop:
			return
		}
	}
}

func (rs *recordState) closeLocked() {
	if rs.stop != nil {
		close(rs.stop)
		<-rs.done
		rs.stop = nil
	}
	if rs.chains != nil {
		_ = rs.chains.Flush()
	}
	if rs.log != nil {
		_ = rs.log.Close()
		rs.log = nil
	}
}

func (rs *recordState) close() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.closeLocked()
}

// bumpAPIVersion persists AGTP-API-Version: it grows by one whenever the
// manifest's content hash changes and never decreases (spec §4, §15.4).
func (rs *recordState) bumpAPIVersion(manifestHash string) (int, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var st manifestState
	path := ""
	if rs.dir != "" {
		path = filepath.Join(rs.dir, "manifest-version.json")
		if raw, err := os.ReadFile(path); err == nil {
			if err := json.Unmarshal(raw, &st); err != nil {
				return 0, fmt.Errorf("%s: %v", path, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	if st.Version < rs.apiVersion {
		st.Version = rs.apiVersion
	}
	if st.Hash != manifestHash || st.Version == 0 {
		st.Version++
		st.Hash = manifestHash
		if path != "" {
			raw, _ := json.Marshal(st)
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, raw, 0o640); err != nil {
				return 0, err
			}
			if err := os.Rename(tmp, path); err != nil {
				return 0, err
			}
		}
	}
	rs.apiVersion = st.Version
	return st.Version, nil
}

// loadSigner builds the Attribution-Record signer from the configured
// Ed25519 keys (first signs; all published).
func loadSigner(paths []string) (*records.Signer, error) {
	keys := make([]ed25519.PrivateKey, 0, len(paths))
	for _, p := range paths {
		k, err := records.LoadEd25519Key(p)
		if err != nil {
			return nil, fmt.Errorf("record_keys: %v", err)
		}
		keys = append(keys, k)
	}
	return records.NewSigner(keys)
}

// negotiationRecord appends one negotiation record before the response
// is written (ARCHITECTURE.md "Records"). Failures are logged; the
// answer still goes out.
func (h *Handler) negotiationRecord(x *exchange, kind, outcome, reason string, requested, granted map[string]any) {
	rs := h.st.records
	rs.mu.Lock()
	log := rs.log
	rs.mu.Unlock()
	if log == nil || x.agentID == "" {
		return
	}
	rec := map[string]any{
		"kind":               kind,
		"outcome":            outcome,
		"requested":          requested,
		"granted":            nil,
		"identity_assurance": assurance(h.Identity),
		"request_id":         x.requestID,
	}
	if granted != nil {
		rec["granted"] = granted
	}
	if reason != "" {
		rec["reason"] = reason
	}
	if x.sessionID != "" {
		rec["session_id"] = x.sessionID
	}
	if _, err := log.Append(x.agentID, rec); err != nil {
		h.logger.Error("appending negotiation record", zap.String("agent_id", x.agentID), zap.String("kind", kind), zap.Error(err))
	}
}

// grantedOf describes what a contract grants, for negotiation records.
func grantedOf(c *recipes.Contract, persistent bool) map[string]any {
	scopes := make([]string, len(c.Recipe.RequiredScopes))
	for i, s := range c.Recipe.RequiredScopes {
		scopes[i] = s.String()
	}
	return map[string]any{
		"synthesis_id":   c.SynthesisID,
		"recipe_name":    c.Lineage.RecipeName,
		"recipe_version": c.Lineage.RecipeVersion,
		"scope":          scopes,
		"persistent":     persistent,
		"expires_at":     c.ExpiresAt.UTC().Format(time.RFC3339),
		"contract_hash":  c.ContractHash,
	}
}

// lifecycleEvent appends an rcns_* event to the originating agent's
// stream and emits it as a Caddy event (spec §18, OP-26).
func (h *Handler) lifecycleEvent(eventType string, c *recipes.Contract, actor, reason, operator string) {
	ev := map[string]any{
		"event_type":         eventType,
		"agent_id":           c.OriginatingAgentID,
		"synthesis_id":       c.SynthesisID,
		"method":             c.Method,
		"path":               c.Path,
		"recipe_name":        c.Lineage.RecipeName,
		"recipe_version":     c.Lineage.RecipeVersion,
		"contract_hash":      c.ContractHash,
		"negotiation_origin": c.NegotiationOrigin,
		"actor_agent_id":     actor,
	}
	if reason != "" {
		ev["reason"] = reason
	}
	if operator != "" {
		ev["actor"] = operator
	}
	if _, err := h.st.records.lifecycle.Emit(c.OriginatingAgentID, ev); err != nil {
		h.logger.Error("emitting lifecycle event", zap.String("event", eventType), zap.Error(err))
	}
	if h.events != nil {
		h.events.Emit(h.ctx, eventType, ev)
	}
}

// manifestHash is the hash AGTP-API-Version tracks: the manifest without
// its timestamps.
func manifestHash(stable []byte) string {
	sum := sha256.Sum256(stable)
	return hex.EncodeToString(sum[:])
}
