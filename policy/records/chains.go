package records

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/caddy-rcns/caddy-rcns/internal/hexid"
)

// DefaultMaxChainKeys is the number of chain heads [Chains] keeps when
// [ChainsOptions.MaxKeys] is zero.
const DefaultMaxChainKeys = 100_000

// ErrBadAuditID is wrapped by the error [Chains.Append] returns when the
// build function yields an Audit-ID that is not 64 lowercase hex digits.
var ErrBadAuditID = errors.New("records: Audit-ID is not 64 lowercase hex digits")

// ChainsOptions configures [NewChains].
type ChainsOptions struct {
	// Path is the JSON file heads are read from at start and written to
	// by [Chains.Flush]; empty keeps heads in memory only.
	Path string
	// MaxKeys bounds the number of chains whose head is kept; past it
	// the least recently used idle chain is dropped and its next record
	// starts again from [ZeroHash]. Zero means [DefaultMaxChainKeys].
	MaxKeys int
	// ValidKey, when set, is asked about every key loaded from Path; an
	// entry whose key it refuses is dropped (counted by [Chains.Dropped]),
	// not an error: a file written by an older build may hold keys this
	// one no longer makes.
	ValidKey func(key string) bool
}

// Chains holds the head (last Audit-ID) of each Attribution-Record chain,
// one chain per key, the requesting Agent-ID (RCNS §16.2, OP-22). Use
// [Chains.Append] on the request path: it serializes records of one key
// so concurrent responses to one agent form one linear chain. Heads live
// in memory, bounded by MaxKeys with least-recently-used eviction, and
// can be persisted with [Chains.Flush]. The zero value is a usable
// memory-only Chains with the default bound.
type Chains struct {
	path string
	max  int

	// mu guards heads, lru, the head field of every chain, gen.
	mu    sync.Mutex
	heads map[string]*chain
	lru   list.List // of *chain, most recently used at the front
	gen   uint64    // bumped on every head change

	// flushMu serializes Flush; flushed is the gen last written.
	flushMu sync.Mutex
	flushed uint64
	// dropped counts the entries NewChains dropped (ValidKey).
	dropped int
}

// chain is one key's head and the lock that serializes its records.
type chain struct {
	key  string
	head string
	// busy serializes Append for this key.
	busy sync.Mutex
	// refs counts Appends holding or waiting for busy; a chain with
	// refs > 0 is never evicted. Guarded by Chains.mu.
	refs int
	elem *list.Element
}

// chainsFile is the persisted form: heads from least to most recently
// used, so a reload keeps the eviction order.
type chainsFile struct {
	Version int         `json:"version"`
	Heads   []chainHead `json:"heads"`
}

type chainHead struct {
	Key  string `json:"key"`
	Head string `json:"head"`
}

// OpenChains is NewChains with the given path and the default bound.
func OpenChains(path string) (*Chains, error) {
	return NewChains(ChainsOptions{Path: path})
}

// NewChains returns a Chains. When opt.Path names an existing file, the
// heads it holds (as written by [Chains.Flush]) are loaded; a missing
// file is an empty start. A file that cannot be read or parsed, or holds
// a head that is not 64 lowercase hex, is an error naming the path.
func NewChains(opt ChainsOptions) (*Chains, error) {
	if opt.MaxKeys < 0 {
		return nil, fmt.Errorf("records: chains MaxKeys %d is negative", opt.MaxKeys)
	}
	c := &Chains{path: opt.Path, max: opt.MaxKeys}
	c.init()
	if opt.Path == "" {
		return c, nil
	}
	data, err := os.ReadFile(opt.Path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("records: read chain heads: %w", err)
	}
	var f chainsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("records: chain heads %s: %w", opt.Path, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("records: chain heads %s: version %d, want 1", opt.Path, f.Version)
	}
	for i, h := range f.Heads {
		if !hexid.Valid(h.Head) {
			return nil, fmt.Errorf("records: chain heads %s: entry %d (key %.64q): %w", opt.Path, i, h.Key, ErrBadAuditID)
		}
		if opt.ValidKey != nil && !opt.ValidKey(h.Key) {
			c.dropped++
			continue
		}
		c.setLocked(h.Key, h.Head)
	}
	c.flushed = c.gen
	if c.dropped > 0 {
		c.gen++ // the next Flush rewrites the file without them
	}
	return c, nil
}

// Dropped returns the number of entries NewChains dropped from the file
// because [ChainsOptions.ValidKey] refused their keys.
func (c *Chains) Dropped() int { return c.dropped }

// init sets defaults; callers hold c.mu or own c exclusively.
func (c *Chains) init() {
	if c.heads == nil {
		c.heads = map[string]*chain{}
		c.lru.Init()
	}
	if c.max <= 0 {
		c.max = DefaultMaxChainKeys
	}
}

// Len returns the number of chains whose head is kept.
func (c *Chains) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.heads)
}

// Next returns the head of key's chain: the Audit-ID to carry as
// previous_audit_id in the next record, or [ZeroHash] for a chain not
// (or no longer) known. It does not serialize against other writers of
// the key; use [Chains.Append] for that.
func (c *Chains) Next(key string) (prev string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	if ch, ok := c.heads[key]; ok && ch.head != "" {
		c.lru.MoveToFront(ch.elem)
		return ch.head
	}
	return ZeroHash
}

// Commit makes auditID the head of key's chain. Like [Chains.Next] it
// does not serialize against other writers of the key; an auditID that
// is not 64 lowercase hex is ignored.
func (c *Chains) Commit(key, auditID string) {
	if !hexid.Valid(auditID) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.setLocked(key, auditID)
}

// setLocked sets key's head and evicts past the bound; c.mu is held.
func (c *Chains) setLocked(key, head string) {
	ch := c.getLocked(key)
	ch.head = head
	c.gen++
	c.evictLocked()
}

// getLocked returns key's chain, creating it, and marks it used.
func (c *Chains) getLocked(key string) *chain {
	ch, ok := c.heads[key]
	if !ok {
		ch = &chain{key: key}
		ch.elem = c.lru.PushFront(ch)
		c.heads[key] = ch
		return ch
	}
	c.lru.MoveToFront(ch.elem)
	return ch
}

// evictLocked drops idle least-recently-used chains while over the bound.
func (c *Chains) evictLocked() {
	for e := c.lru.Back(); e != nil && len(c.heads) > c.max; {
		ch := e.Value.(*chain)
		prev := e.Prev()
		if ch.refs == 0 {
			c.lru.Remove(e)
			delete(c.heads, ch.key)
			c.gen++
		}
		e = prev
	}
}

// Append adds one record to key's chain: it calls build with the chain's
// head ([ZeroHash] for a new chain) while holding key's lock, so calls
// for one key run one at a time, in order, each seeing the previous
// one's Audit-ID; calls for different keys run concurrently. When build
// succeeds, the auditID it returns becomes the head and Append returns
// what build returned. When build fails, the head is unchanged and its
// error is returned. An auditID that is not 64 lowercase hex digits is
// an error wrapping [ErrBadAuditID] and leaves the head unchanged.
// RCNS §16.2, OP-22.
func (c *Chains) Append(key string, build func(prev string) (compact, auditID string, err error)) (compact, auditID string, err error) {
	c.mu.Lock()
	c.init()
	ch := c.getLocked(key)
	ch.refs++
	c.mu.Unlock()

	ch.busy.Lock()
	c.mu.Lock()
	prev := ch.head
	c.mu.Unlock()
	if prev == "" {
		prev = ZeroHash
	}

	compact, auditID, err = build(prev)
	if err == nil && !hexid.Valid(auditID) {
		err = fmt.Errorf("%w: %q", ErrBadAuditID, auditID)
	}

	c.mu.Lock()
	if err == nil {
		ch.head = auditID
		c.gen++
	}
	ch.refs--
	if ch.head == "" && ch.refs == 0 {
		// Never committed: do not keep an empty chain around.
		if cur, ok := c.heads[key]; ok && cur == ch {
			c.lru.Remove(ch.elem)
			delete(c.heads, key)
		}
	}
	c.evictLocked()
	c.mu.Unlock()
	ch.busy.Unlock()
	if err != nil {
		return "", "", err
	}
	return compact, auditID, nil
}

// Flush writes the heads to the path given at open, atomically (a
// temporary file in the same directory, fsynced, then renamed over the
// old one, then the directory fsynced). It does nothing when the path is
// empty or nothing changed since the last Flush. Errors name the path.
func (c *Chains) Flush() error {
	if c.path == "" {
		return nil
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()

	gen, f, changed := c.snapshot()
	if !changed {
		return nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("records: encode chain heads: %w", err)
	}
	if err := WriteFileAtomic(c.path, data); err != nil {
		return err
	}
	c.flushed = gen
	return nil
}

// snapshot returns the heads to flush and their generation, changed
// false when nothing changed since the last Flush. Its lock is released
// by defer: a panic (a defect) in it, recovered by the flusher, leaves
// no lock held that every record's Append would then wait on.
func (c *Chains) snapshot() (gen uint64, f chainsFile, changed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	if c.gen == c.flushed {
		return c.gen, f, false
	}
	f = chainsFile{Version: 1, Heads: make([]chainHead, 0, len(c.heads))}
	for e := c.lru.Back(); e != nil; e = e.Prev() {
		ch := e.Value.(*chain)
		if ch.head != "" {
			f.Heads = append(f.Heads, chainHead{Key: ch.key, Head: ch.head})
		}
	}
	return c.gen, f, true
}

// WriteFileAtomic replaces the file at path with data: written to a
// temporary file in the same directory, synced, renamed onto path, and
// the directory synced, so a reader or a crash sees the old content or
// the new, never a part. Errors name path and the step that failed; on
// an error the temporary file is removed and path is unchanged.
func WriteFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("records: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("records: write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("records: sync %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("records: close %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("records: rename onto %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so a created or renamed entry is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("records: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("records: sync directory %s: %w", dir, err)
	}
	return nil
}
