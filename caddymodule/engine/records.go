package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/gofrs/flock"
	"go.uber.org/zap"
)

// recordState is the durable part of the shared state: the negotiation
// log, the Attribution-Record chain heads, the lifecycle streams and
// AGTP-API-Version. It lives as long as the shared state (across
// reloads) and is reopened when records_dir changes.
//
// While a directory is open, the state holds an exclusive lock on its
// lock file (lockFile): a records_dir belongs to one gateway, because
// two writers would each continue the hash chains from their own
// in-memory heads and break them. name is the handler name (the
// key the host shares the State by), written into the owner file for the error the
// next gateway reports.
type recordState struct {
	name string
	mu   sync.Mutex
	dir  string
	// lockMu guards lock and lockLost (not mu: the flusher's checkLock
	// takes it while close, holding mu, waits for the flusher).
	lockMu sync.Mutex
	lock   *flock.Flock
	// lockLost: another gateway locked records_dir after gateway.lock
	// was removed under this one (checkLock), logged once.
	lockLost  bool
	fsync     records.FsyncPolicy
	log       *records.Log
	chains    *records.Chains
	lifecycle *records.Lifecycle
	// negs are each agent's newest negotiation records, for INSPECT
	// target=negotiations (negrecords.go).
	negs       negRing
	apiVersion int
	// apiHash is the content hash apiVersion numbered.
	apiHash string
	stop    chan struct{}
	done    chan struct{}
	// logger is open's, for the last flush at close (flushChains).
	logger *zap.Logger
	// movedLogger is the last open's logger, which a log file moved
	// under the gateway is reported to (records.LogOptions.Moved): a
	// reload that keeps records_dir keeps the log, not the logger of
	// the configuration that opened it.
	movedLogger atomic.Pointer[zap.Logger]
}

// manifestState is what AGTP-API-Version persistence stores.
type manifestState struct {
	Version int    `json:"version"`
	Hash    string `json:"hash"`
}

// check is New's part of opening the record files under dir: it
// reads what open will read (the negotiation log, the chain heads) and
// fails as open would on a file that does not parse, but writes nothing
// and creates nothing, because `caddy validate` provisions too and may
// run against the records_dir of a live gateway. It also creates the
// in-memory lifecycle streams once. Nothing is read when dir is already
// open (a reload) or is "" (memory-only).
func (rs *recordState) check(dir string, fsync records.FsyncPolicy, signer *records.Signer) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.lifecycle == nil {
		var err error
		if rs.lifecycle, err = records.NewLifecycle(signer, records.LifecycleOptions{}); err != nil {
			return err
		}
	}
	if dir == "" || rs.chains != nil && rs.dir == dir && rs.fsync == fsync {
		return nil
	}
	if err := records.CheckLog(filepath.Join(dir, "negotiations")); err != nil {
		return fmt.Errorf("records_dir: %v", err)
	}
	if _, err := openChains(filepath.Join(dir, "attribution-chains.json")); err != nil {
		return fmt.Errorf("records_dir: %v", err)
	}
	return nil
}

// open (re)opens the record files under dir, creating dir when missing.
// Memory-only when dir is "". A handler calls it on its first request
// (Activate), never in New. On an error the chain heads
// are still usable (memory-only) so that the handler can serve.
func (rs *recordState) open(dir string, fsync records.FsyncPolicy, signer *records.Signer, logger *zap.Logger) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if logger != nil {
		rs.movedLogger.Store(logger) // the newest configuration's, also when the log stays open
	}
	if rs.chains != nil && rs.dir == dir && rs.fsync == fsync {
		return nil
	}
	rs.closeLocked()
	if rs.lifecycle == nil {
		var err error
		if rs.lifecycle, err = records.NewLifecycle(signer, records.LifecycleOptions{}); err != nil {
			return err
		}
	}
	err := rs.openLocked(dir, fsync)
	if err != nil {
		// Serve on with memory-only chain heads; the error is logged.
		dir = ""
		rs.chains, _ = records.OpenChains("")
	}
	if rs.log != nil && logger != nil {
		for _, n := range rs.log.Notes() {
			logger.Warn("opening the negotiation log", zap.String("records_dir", dir), zap.String("note", n))
		}
	}
	if n := rs.chains.Dropped(); n > 0 && logger != nil {
		logger.Warn("dropped attribution chain heads whose key is not an Agent-ID (written by an older build that chained malformed Agent-IDs)",
			zap.String("records_dir", dir), zap.Int("dropped", n))
	}
	rs.dir, rs.fsync = dir, fsync
	rs.stop, rs.done = make(chan struct{}), make(chan struct{})
	rs.logger = logger
	go rs.flusher(rs.chains, rs.stop, rs.done, logger)
	return err
}

// openLocked locks dir (lockDirLocked), then opens the log and the
// chain heads under it; rs.mu is held. On an error nothing stays open
// or locked. A log file moved under the gateway is reported to
// rs.movedLogger (records.LogOptions.Moved).
func (rs *recordState) openLocked(dir string, fsync records.FsyncPolicy) error {
	var err error
	chainsPath := ""
	if dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("records_dir: %v", err)
		}
		if err := rs.lockDirLocked(dir); err != nil {
			return err
		}
		chainsPath = filepath.Join(dir, "attribution-chains.json")
		opt := records.LogOptions{Dir: filepath.Join(dir, "negotiations"), Fsync: fsync, Moved: func(msg string) {
			if lg := rs.movedLogger.Load(); lg != nil {
				lg.Error("negotiation log file moved under the gateway", zap.String("records_dir", dir), zap.String("note", msg))
			}
		}}
		if rs.log, err = records.OpenLog(opt); err != nil {
			rs.unlockDirLocked()
			return fmt.Errorf("records_dir: %v", err)
		}
	}
	if rs.chains, err = openChains(chainsPath); err != nil {
		if rs.log != nil {
			_ = rs.log.Close()
			rs.log = nil
		}
		rs.unlockDirLocked()
		return fmt.Errorf("records_dir: %v", err)
	}
	return nil
}

// flusher persists the chain heads once a second until stopped. A
// panic in a flush (a defect) is recovered there (flushChains): logged
// at ERROR with its stack (then at most once a minute, with the count
// of those not logged, while it recurs), counted as a failed flush,
// and the next flush runs a second later as always; the process, and
// the flusher, go on (TestPanicInFlushKeepsFlushing).
func (rs *recordState) flusher(c *records.Chains, stop, done chan struct{}, logger *zap.Logger) {
	defer close(done)
	panics := &recovered.Throttle{Every: flushReportEvery} // a defect on every flush: one line a minute
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var report flushReport
	for {
		select {
		case now := <-t.C:
			report.note(logger, flushChains(c, logger, panics), now)
			rs.checkLock(logger)
		case <-stop:
			return
		}
	}
}

// testHookFlush, set by tests only (nil otherwise), runs before each
// flush of the chain heads: a fault injected into the flusher. Atomic:
// the test sets it while the flusher runs.
var testHookFlush atomic.Pointer[func()]

// flushChains is one flush of c, a panic in it (a defect) logged at
// ERROR with its stack and returned as its error (*recovered.Panic):
// through the flusher's panics, or, with nil, the last flush at close.
func flushChains(c *records.Chains, logger *zap.Logger, panics *recovered.Throttle) (err error) {
	msg := "panic persisting attribution chain heads; the flusher goes on and tries again in a second"
	if panics == nil {
		msg = "panic persisting attribution chain heads at close; the heads file keeps its last flush"
	}
	defer panics.IntoLog(&err, logger, msg)
	if h := testHookFlush.Load(); h != nil {
		(*h)()
	}
	return c.Flush()
}

// flushReportEvery is how often a flush that keeps failing is logged
// again.
const flushReportEvery = time.Minute

// flushReport bounds the flusher's lines while the chain heads cannot
// be written (a full disk fails every flush, once a second): the first
// failure is an ERROR, a failure that goes on is logged again at most
// every flushReportEvery with the count of failed flushes, and the
// first flush that works after is an INFO.
type flushReport struct {
	failed int       // flushes failed since the last that worked
	logged time.Time // when the last ERROR was written
}

// note takes the result of one flush at now; logger may be nil.
func (f *flushReport) note(logger *zap.Logger, err error, now time.Time) {
	if err == nil {
		if f.failed > 0 && logger != nil {
			logger.Info("persisting attribution chain heads works again", zap.Int("failed_flushes", f.failed))
		}
		f.failed = 0
		return
	}
	f.failed++
	if logger != nil && (f.failed == 1 || now.Sub(f.logged) >= flushReportEvery) {
		logger.Error("persisting attribution chain heads", zap.Int("failed_flushes", f.failed), zap.Error(err))
		f.logged = now
	}
}

func (rs *recordState) closeLocked() {
	if rs.stop != nil {
		close(rs.stop)
		<-rs.done
		rs.stop = nil
	}
	if rs.chains != nil {
		// Recovered as the flusher's are: a panic here (a defect) would
		// otherwise end the process in a configuration unload.
		_ = flushChains(rs.chains, rs.logger, nil)
	}
	if rs.log != nil {
		// A failure here loses records (the last fsync, or a moved
		// file's records that could not be written again): said.
		if err := rs.log.Close(); err != nil {
			if lg := rs.movedLogger.Load(); lg != nil {
				lg.Error("closing the negotiation log", zap.String("records_dir", rs.dir), zap.Error(err))
			}
		}
		rs.log = nil
	}
	rs.unlockDirLocked()
}

// close stops the flusher, persists the chain heads, closes the log and
// releases records_dir (config unload: the last handler of this name
// went away).
func (rs *recordState) close() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.closeLocked()
}

// manifestStatePath is where AGTP-API-Version is stored under dir (""
// when dir is: records_dir off).
func manifestStatePath(dir string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "manifest-version.json")
}

// readManifestState reads the stored AGTP-API-Version at path (the zero
// state when path is "" or the file does not exist).
func readManifestState(path string) (st manifestState, err error) {
	if path == "" {
		return st, nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("%s: %v", path, err)
	}
	return st, nil
}

// servedAtLocked is the AGTP-API-Version this name last served and the
// content hash it numbered: the one stored under dir, or the in-memory
// one when higher (a failed write); with what the file holds (stored,
// the zero state when dir is "" or there is no file) and its path.
// rs.mu is held.
func (rs *recordState) servedAtLocked(dir string) (st, stored manifestState, path string, err error) {
	path = manifestStatePath(dir)
	if stored, err = readManifestState(path); err != nil {
		return st, stored, path, err
	}
	st = stored
	if st.Version < rs.apiVersion {
		st = manifestState{Version: rs.apiVersion, Hash: rs.apiHash}
	}
	return st, stored, path, nil
}

// keepLocked makes st the version served and stores it at path ("":
// nowhere) when the file holds another (stored). A failed write leaves
// st served in memory, so the version never goes back. rs.mu is held.
func (rs *recordState) keepLocked(st, stored manifestState, path string) error {
	rs.apiVersion, rs.apiHash = st.Version, st.Hash
	if path == "" || st == stored {
		return nil
	}
	raw, _ := json.Marshal(st)
	return records.WriteFileAtomic(path, raw)
}

// servedAPIVersion is the version this name last served (servedAtLocked
// under rs.mu): the floor a shared store numbers this node's next
// manifest from (store.ManifestVersions).
func (rs *recordState) servedAPIVersion() (manifestState, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st, _, _, err := rs.servedAtLocked(rs.dir)
	return st, err
}

// errVersionOvertaken is adoptAPIVersion's refusal of a version at or
// below one this name served for another manifest since the floor was
// read (two configurations of one name rebuilding at once, a reload's
// overlap): the caller numbers the manifest itself.
var errVersionOvertaken = errors.New("a later AGTP-API-Version was served here meanwhile")

// adoptAPIVersion persists v, the version a shared store gave a
// manifest with content hash hash, as bumpAPIVersion persists its own:
// it never goes back (errVersionOvertaken, 0), and a failed write
// still returns v, with the error.
func (rs *recordState) adoptAPIVersion(v int, hash string) (int, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st, stored, path, err := rs.servedAtLocked(rs.dir)
	if err != nil {
		return 0, err
	}
	if v < st.Version || (v == st.Version && hash != st.Hash) {
		return 0, errVersionOvertaken
	}
	return v, rs.keepLocked(manifestState{Version: v, Hash: hash}, stored, path)
}

// nextAPIVersion computes AGTP-API-Version for a manifest with the given
// hash: the version served (servedAtLocked under dir), plus one when it
// numbered another manifest. It also returns what the file under dir
// holds and its path ("": nothing stored). rs.mu is held.
func (rs *recordState) nextAPIVersion(dir, manifestHash string) (st, stored manifestState, path string, err error) {
	if st, stored, path, err = rs.servedAtLocked(dir); err != nil {
		return st, stored, path, err
	}
	if st.Hash != manifestHash || st.Version == 0 {
		st = manifestState{Version: st.Version + 1, Hash: manifestHash}
	}
	return st, stored, path, nil
}

// peekAPIVersion is the AGTP-API-Version a manifest with this hash will
// get, read-only: New uses it (a config load that `caddy validate`
// runs must not bump the version a live gateway serves). dir is the
// records_dir the handler will open (a reload may change it).
func (rs *recordState) peekAPIVersion(dir, manifestHash string) (int, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st, _, _, err := rs.nextAPIVersion(dir, manifestHash)
	return st.Version, err
}

// bumpAPIVersion persists AGTP-API-Version: it grows by one whenever the
// manifest's content hash changes and never decreases (spec §4, §15.4),
// even with two handlers alive across a reload: the file and the
// in-memory version are read and written under rs.mu. A handler calls it
// once it serves (Handler.activate, manifest rebuilds), never in
// New. A failed write still returns the new version, with the
// error; the in-memory version keeps it from going back.
func (rs *recordState) bumpAPIVersion(manifestHash string) (int, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st, stored, path, err := rs.nextAPIVersion(rs.dir, manifestHash)
	if err != nil {
		return 0, err
	}
	return st.Version, rs.keepLocked(st, stored, path)
}

// activation is what a handler does once, on its first request.
type activation struct {
	once    sync.Once
	done    atomic.Bool
	persist atomic.Bool
}

// Activate does, once, on the first request (any door calls it
// before its first Serve; Serve calls it too), what New must not do because `caddy validate` provisions too (spec §15.4 "a
// config load that is not applied changes nothing"): open the record
// files under records_dir (creating it) and persist AGTP-API-Version.
// Errors are logged and the handler serves on: without durable records
// when records_dir cannot be opened, with the computed AGTP-API-Version
// (never lower than one already served) when it cannot be stored.
func (h *Engine) Activate() {
	a := h.act
	if a == nil || a.done.Load() {
		return
	}
	a.once.Do(func() {
		defer a.done.Store(true)
		if err := h.st.records.open(h.recDir, h.recFsync, h.signer, h.logger); err != nil {
			h.logger.Error("opening records_dir failed: serving without durable negotiation records", zap.String("records_dir", h.recDir), zap.Error(err))
		}
		a.persist.Store(true)
		if h.mem != nil {
			// The memory store is the name's, shared with the
			// configuration this one replaces: its bounds become this
			// configuration's now that it serves (State.Memory).
			h.mem.SetLimits(h.StoreLimits())
		}
		if err := h.buildManifest(); err != nil {
			h.logger.Error("rebuilding the manifest on the first request", zap.Error(err))
		}
	})
}

// apiVersionFor is the AGTP-API-Version of a manifest with this hash:
// computed read-only before the handler's first request, persisted
// after.
func (h *Engine) apiVersionFor(manifestHash string) (int, error) {
	if h.act == nil || !h.act.persist.Load() {
		return h.st.records.peekAPIVersion(h.recDir, manifestHash)
	}
	if ver, ok := h.sharedAPIVersion(manifestHash); ok {
		return ver, nil
	}
	ver, err := h.st.records.bumpAPIVersion(manifestHash)
	if err != nil && ver > 0 {
		h.logger.Error("storing AGTP-API-Version failed; serving the computed version", zap.Int("version", ver), zap.Error(err))
		return ver, nil
	}
	return ver, err
}

// negotiationRecord appends one negotiation record before the response
// is written (ARCHITECTURE.md "Records"). Failures are logged; the
// answer still goes out.
func (h *Engine) negotiationRecord(x *exchange, kind, outcome, reason string, requested, granted map[string]any) {
	rs := h.st.records
	rs.mu.Lock()
	log := rs.log
	rs.mu.Unlock()
	if x.agentID == "" {
		return
	}
	// Room for every member below, the four the log adds and the hash,
	// so that neither this function nor AppendOwned grows the map.
	// An agent's text is kept within bounds (recordtext.go).
	requested, reason = recordedRequest(requested), recordedText(reason)
	rec := make(map[string]any, 18)
	rec["kind"], rec["outcome"], rec["requested"], rec["granted"] = kind, outcome, requested, nil
	rec["request_id"], rec["binding"], rec["node_id"] = x.requestID, x.in.Binding, h.nodeID
	if op := x.operator; op != nil {
		// No agent asked: the operator page's access rule admitted
		// the operator, who is the actor (spec §14.4 "actor").
		rec["actor"], rec["actor_kind"], rec["operator_access"] = op.Name, "operator", op.Access
		rec["identity_assurance"] = "operator-page"
	} else {
		x.identityFields(rec)
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
	// The agent's own copy (INSPECT target=negotiations), kept whether
	// or not the durable log is open: the record as the log wrote it
	// (AppendOwned completes rec: agent_id, seq, at, prev) with the
	// log's hash, else the record with agent_id and at.
	if log != nil {
		hash, err := log.AppendOwned(x.agentID, rec)
		if err == nil {
			rec["hash"] = hash
			rs.negs.add(x.agentID, rec)
			return
		}
		// Every record meets a failed log (a full disk) until its retry
		// succeeds (records.LogRetryInterval): the line is held to the
		// log budget, for all agents together.
		if ok, n := h.logBudget.take("", "negotiation-log-failed"); ok {
			withSuppressed(x.log(), n).Error("appending negotiation record", zap.String("agent_id", x.agentID), zap.String("kind", kind), zap.Error(err))
		}
		// Not in the log: no place in its chain.
		delete(rec, "seq")
		delete(rec, "prev")
	}
	rec["agent_id"], rec["at"] = x.agentID, h.now().UTC().Format(time.RFC3339Nano)
	rs.negs.add(x.agentID, rec)
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
// stream and emits it as a Caddy event (spec §18, OP-26). reason and
// operator come cut from endContract, their one source.
func (h *Engine) lifecycleEvent(eventType string, c *recipes.Contract, actor, reason, operator string) {
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
	}
	if actor != "" { // "" when no agent acted (the operator page)
		ev["actor_agent_id"] = actor
	}
	if reason != "" {
		ev["reason"] = reason
	}
	if operator != "" {
		ev["actor"] = operator
	}
	// Signed when the stream is first read (INSPECT target=lifecycle),
	// not before the answer: the same envelope bytes (Lifecycle.Record).
	if err := h.st.records.lifecycle.Record(c.OriginatingAgentID, ev); err != nil {
		h.logger.Error("emitting lifecycle event", zap.String("event", eventType), zap.Error(err))
	}
	if h.events != nil {
		h.events.Emit(eventType, ev)
	}
}

// openChains opens the Attribution-Record chain heads at path ("": in
// memory). A chain key is a registered Agent-ID or "" (anonymous and
// unaccepted callers); a key of any other form, written by a build that
// chained malformed Agent-IDs, is dropped on load.
func openChains(path string) (*records.Chains, error) {
	return records.NewChains(records.ChainsOptions{Path: path, ValidKey: func(k string) bool {
		return k == "" || policy.ValidAgentID(k)
	}})
}

// RecordProtocolVersion appends a protocol-version negotiation record
// (records.KindProtocolVersion, seed 003) for the verified caller of in
// (a door's request carrying Verified; nothing is recorded without
// one): requested is the version the client asked for ("" when it named
// none), granted the one the door answers with ("" when it refused the
// request). An accepted record whose granted version differs from the
// requested one is a downgrade. Failures are logged.
func (h *Engine) RecordProtocolVersion(in *agtp.Request, method, requested, granted string) {
	if in.Verified == nil || in.Verified.AgentID == "" {
		return
	}
	x := h.newExchange(in)
	x.agentID, x.agentIDValid, x.ident, x.method = in.Verified.AgentID, true, in.Verified, method
	req := map[string]any{"protocol_version": nilIfEmpty(requested), "method": method}
	if granted == "" {
		h.negotiationRecord(x, records.KindProtocolVersion, records.OutcomeRefused, "protocol-version-unsupported", req, nil)
		return
	}
	h.negotiationRecord(x, records.KindProtocolVersion, records.OutcomeAccepted, "", req, map[string]any{"protocol_version": granted})
}

// nilIfEmpty is s, or nil (JSON null) when empty.
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
