package store

import (
	"context"
	"encoding/hex"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/hexid"
)

// memRecords retains Attribution-Records in insertion order, at most max
// of them and each for retention, and the chain heads by agent and node.
//
// It is laid out for the garbage collector, because at the default
// bound (100000 records, kept a day) it is most of a busy gateway's live
// heap, and every collection marks it: a collection's CPU grows with the
// objects and pointers it has to follow, and a request pays for it in
// proportion to what it allocates (docs/operator-guide.md "Memory and
// Go's garbage collector"). So a record is no heap object of its own:
//   - it sits by value in one ring (a slice used as a circular queue,
//     oldest first);
//   - its bytes (the JWS Compact form, and the Person and an Audit-ID
//     that is not 64 hex) are copied into chunks of memChunkSize bytes,
//     filled in the ring's order and freed whole once their last record
//     is dropped (the last chunk of that size dropped is kept, one
//     spare, for the next), so the collector marks one object per
//     chunk, not one per record, and never looks inside;
//   - its Audit-ID, 64 lowercase hex whenever the engine made it, is
//     held and indexed as its 32 bytes, so the index is a map without
//     pointers, which the collector does not scan;
//   - its Agent-ID and node ID are the strings its agent's chain heads
//     keep, one per agent and node, not a copy each (nor the request's
//     header block that a string taken from it would keep alive).
//
// BenchmarkRetainedRecordsGC measures what a collection pays for 100000
// of them.
type memRecords struct {
	mu        sync.Mutex
	max       int
	retention time.Duration
	now       func() time.Time

	ring  []memRecord // circular: ring[(head+i)%len(ring)] for i < n, oldest first
	head  int
	n     int    // slots in use, dropped ones (see memRecord.gone) included
	live  int    // slots in use holding a record
	first uint64 // sequence number of ring[head]; a record's sequence never changes

	chunks     []*memChunk // oldest first; the last is being filled
	firstChunk uint64      // sequence number of chunks[0]
	spare      *memChunk   // the last chunk of memChunkSize dropped, for the next new one

	byID    map[[32]byte]uint64 // Audit-ID of 64 lowercase hex → sequence
	byOther map[string]uint64   // any other Audit-ID (never made by the engine) → sequence
	heads   map[string]*memAgent
}

// memChunkSize is the size of a chunk of record bytes; a record larger
// than that gets a chunk of its own size.
const memChunkSize = 256 << 10

// memChunk holds the bytes of consecutive records.
type memChunk struct {
	buf   []byte
	slots int // ring slots whose bytes are in buf
}

// memRecord is one retained record, by value in the ring. Its bytes are
// chunk's buf[off:off+len(Compact)+len(Person)+len(Audit-ID not hex)].
type memRecord struct {
	id     [32]byte // the Audit-ID's bytes when it is 64 lowercase hex
	agent  *memAgent
	node   string // one of agent.nodes' keys
	issued time.Time
	kept   time.Time
	chunk  uint64 // sequence number of its chunk
	off    uint32
	clen   uint32 // Compact's length
	plen   uint32 // Person's length
	olen   uint32 // the Audit-ID's length when it is not 64 hex, else 0
	other  bool   // the Audit-ID is not 64 hex (id is zero; its olen bytes, "" included, follow Person's)
	gone   bool   // retained again since (a later slot holds it)
}

// memAgent is one Agent-ID's chain heads, by node, and the one copy of
// the Agent-ID and node IDs its records point to.
type memAgent struct {
	id    string
	nodes map[string]memHead
}

type memHead struct {
	auditID string
	kept    time.Time
}

func newMemRecords(max int, retention time.Duration, now func() time.Time) *memRecords {
	return &memRecords{max: max, retention: retention, now: now,
		byID: map[[32]byte]uint64{}, byOther: map[string]uint64{}, heads: map[string]*memAgent{}}
}

func (r *memRecords) resize(max int, retention time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.max, r.retention = max, retention
	r.pruneLocked(r.now())
}

// seqOf returns the sequence number of the record of auditID, whose
// bytes id and isHex are (hexid.Decode).
func (r *memRecords) seqOf(auditID string, id [32]byte, isHex bool) (uint64, bool) {
	if isHex {
		seq, ok := r.byID[id]
		return seq, ok
	}
	seq, ok := r.byOther[auditID]
	return seq, ok
}

// slot returns the ring slot of sequence number seq, which must be in
// use.
func (r *memRecords) slot(seq uint64) *memRecord {
	return &r.ring[(r.head+int(seq-r.first))%len(r.ring)]
}

// bytes returns m's bytes: Compact, then Person, then the Audit-ID when
// it is not 64 hex.
func (r *memRecords) bytes(m *memRecord) []byte {
	c := r.chunks[m.chunk-r.firstChunk]
	return c.buf[m.off : m.off+m.clen+m.plen+m.olen]
}

// auditID returns m's Audit-ID.
func (r *memRecords) auditID(m *memRecord) string {
	if m.other {
		return string(r.bytes(m)[m.clen+m.plen:])
	}
	return hex.EncodeToString(m.id[:])
}

// unindexLocked removes the index entry of the record in slot m.
func (r *memRecords) unindexLocked(m *memRecord) {
	if m.other {
		delete(r.byOther, string(r.bytes(m)[m.clen+m.plen:]))
	} else {
		delete(r.byID, m.id)
	}
}

// popLocked drops the oldest slot, and its chunk once no slot is left
// in it.
func (r *memRecords) popLocked() {
	m := &r.ring[r.head]
	if !m.gone {
		r.unindexLocked(m)
		r.live--
	}
	r.chunks[m.chunk-r.firstChunk].slots--
	r.dropEmptyChunksLocked(1)
	*m = memRecord{}
	r.head = (r.head + 1) % len(r.ring)
	r.n--
	r.first++
}

// dropEmptyChunksLocked drops the chunks in front that hold no slot,
// keeping at least keep chunks (the last is being filled). Slots are
// dropped oldest first, so a chunk empties only once every chunk before
// it has: the empty ones are all in front.
func (r *memRecords) dropEmptyChunksLocked(keep int) {
	for len(r.chunks) > keep && r.chunks[0].slots == 0 {
		if c := r.chunks[0]; cap(c.buf) == memChunkSize {
			// Kept for the next chunk, which then needs neither an
			// allocation nor a clear of its 256 KiB (a tenth of a
			// Retain's CPU when every record is new); a chunk of a
			// larger record is not kept.
			c.buf = c.buf[:0]
			r.spare = c
		}
		r.chunks[0] = nil
		r.chunks = r.chunks[1:]
		r.firstChunk++
	}
}

// pruneLocked drops records past their retention and past the bound,
// and the slots of records retained again.
func (r *memRecords) pruneLocked(now time.Time) {
	for r.n > 0 {
		m := &r.ring[r.head]
		if !m.gone && r.live <= r.max && now.Sub(m.kept) < r.retention {
			break
		}
		r.popLocked()
	}
	if r.n > 2*r.live+64 || len(r.ring) > 1024 && r.n < len(r.ring)/4 {
		// Records retained again, each leaving a slot behind; or far
		// fewer records than after a burst: neither the ring nor a Go
		// map ever shrinks of itself.
		r.compactLocked()
	}
}

// compactLocked moves the records still held into a new ring, new
// chunks and a new index, without the slots left behind, their
// sequence numbers renumbered from first.
func (r *memRecords) compactLocked() {
	old, oldHead, oldN := r.ring, r.head, r.n
	oldChunks, oldFirstChunk := r.chunks, r.firstChunk
	r.ring, r.head, r.n, r.live = make([]memRecord, max(16, 2*r.live)), 0, 0, 0
	r.chunks, r.firstChunk = nil, oldFirstChunk+uint64(len(oldChunks))
	r.byID, r.byOther = make(map[[32]byte]uint64, len(r.byID)), make(map[string]uint64, len(r.byOther))
	for i := 0; i < oldN; i++ {
		m := old[(oldHead+i)%len(old)]
		if m.gone {
			continue
		}
		c := oldChunks[m.chunk-oldFirstChunk]
		seq, room := r.pushLocked(m, int(m.clen+m.plen+m.olen))
		copy(room, c.buf[m.off:])
		if m.other {
			r.byOther[r.auditID(r.slot(seq))] = seq
		} else {
			r.byID[m.id] = seq
		}
	}
}

// pushLocked appends m as the newest slot, with room for size bytes in
// the chunk being filled, and returns its sequence number and that room
// for the caller to fill.
func (r *memRecords) pushLocked(m memRecord, size int) (uint64, []byte) {
	if r.n == len(r.ring) {
		ring := make([]memRecord, max(16, 2*len(r.ring)))
		for i := 0; i < r.n; i++ {
			ring[i] = r.ring[(r.head+i)%len(r.ring)]
		}
		r.ring, r.head = ring, 0
	}
	var c *memChunk
	if k := len(r.chunks); k > 0 && cap(r.chunks[k-1].buf)-len(r.chunks[k-1].buf) >= size {
		c = r.chunks[k-1]
	} else {
		r.dropEmptyChunksLocked(0) // the one being filled too, when every record in it is gone
		if c = r.spare; c != nil && size <= memChunkSize {
			r.spare = nil
		} else {
			c = &memChunk{buf: make([]byte, 0, max(memChunkSize, size))}
		}
		r.chunks = append(r.chunks, c)
	}
	m.chunk, m.off = r.firstChunk+uint64(len(r.chunks)-1), uint32(len(c.buf))
	c.buf = c.buf[:len(c.buf)+size]
	c.slots++
	r.ring[(r.head+r.n)%len(r.ring)] = m
	r.n++
	r.live++
	return r.first + uint64(r.n-1), c.buf[m.off:]
}

func (r *memRecords) Retain(_ context.Context, rec Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	id, isHex := hexid.Decode(rec.AuditID)
	if seq, ok := r.seqOf(rec.AuditID, id, isHex); ok {
		r.slot(seq).gone = true // retained again: it moves to the back
		r.live--
	}
	a := r.heads[rec.AgentID]
	if a == nil {
		a = &memAgent{id: strings.Clone(rec.AgentID), nodes: map[string]memHead{}}
		r.heads[a.id] = a
	}
	node := ""
	for k := range a.nodes { // the copy already held, not rec's
		if k == rec.NodeID {
			node = k
			break
		}
	}
	if node == "" {
		node = strings.Clone(rec.NodeID)
	}
	m := memRecord{agent: a, node: node, issued: rec.IssuedAt, kept: now,
		clen: uint32(len(rec.Compact)), plen: uint32(len(rec.Person))}
	if isHex {
		m.id = id
	} else {
		m.other, m.olen = true, uint32(len(rec.AuditID))
	}
	seq, room := r.pushLocked(m, len(rec.Compact)+len(rec.Person)+int(m.olen))
	n := copy(room, rec.Compact)
	n += copy(room[n:], rec.Person)
	if isHex {
		r.byID[id] = seq
	} else {
		copy(room[n:], rec.AuditID)
		r.byOther[strings.Clone(rec.AuditID)] = seq
	}
	a.nodes[node] = memHead{auditID: rec.AuditID, kept: now}
	r.pruneLocked(now)
	return nil
}

func (r *memRecords) Get(_ context.Context, auditID string) (Record, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(r.now())
	id, isHex := hexid.Decode(auditID)
	seq, ok := r.seqOf(auditID, id, isHex)
	if !ok {
		return Record{}, false, nil
	}
	m := r.slot(seq)
	b := r.bytes(m)
	return Record{AuditID: auditID, AgentID: m.agent.id, NodeID: m.node,
		Compact: string(b[:m.clen]), Person: string(b[m.clen : m.clen+m.plen]),
		IssuedAt: m.issued}, true, nil
}

func (r *memRecords) Heads(_ context.Context, agentID string) ([]Head, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	a := r.heads[agentID]
	if a == nil {
		return nil, nil
	}
	var out []Head
	for node, h := range a.nodes {
		if now.Sub(h.kept) >= r.retention {
			delete(a.nodes, node)
			continue
		}
		out = append(out, Head{NodeID: node, AuditID: h.auditID})
	}
	if len(a.nodes) == 0 {
		delete(r.heads, agentID)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out, nil
}
