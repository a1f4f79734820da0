package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/cputime"
)

// recordsModel is what memRecords must hold, the obvious way: records
// in retention order (a record retained again moves to the back), the
// oldest dropped first past the bound or the retention.
type recordsModel struct {
	max       int
	retention time.Duration
	order     []modelRecord
}

type modelRecord struct {
	rec  Record
	kept time.Time
}

func (m *recordsModel) prune(now time.Time) {
	for len(m.order) > 0 && (len(m.order) > m.max || now.Sub(m.order[0].kept) >= m.retention) {
		m.order = m.order[1:]
	}
}

func (m *recordsModel) retain(rec Record, now time.Time) {
	for i, o := range m.order {
		if o.rec.AuditID == rec.AuditID {
			m.order = append(m.order[:i:i], m.order[i+1:]...)
			break
		}
	}
	m.order = append(m.order, modelRecord{rec: rec, kept: now})
	m.prune(now)
}

func (m *recordsModel) get(id string, now time.Time) (Record, bool) {
	m.prune(now)
	for _, o := range m.order {
		if o.rec.AuditID == id {
			return o.rec, true
		}
	}
	return Record{}, false
}

// TestMemRecordsModel drives memRecords and the model with the same
// random retains (new records, records retained again, Audit-IDs of 64
// hex and others, with and without a Person, JWS of every size up to
// past a chunk), clock steps and bound changes, and checks after each
// step that the newest Audit-IDs and a random sample of all ever used
// read the same from both, that the
// ring's counts agree with the model's, and that chunks are freed: no
// chunk outlives the records in it.
func TestMemRecordsModel(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
			now := func() time.Time { return clock }
			const bound, retention = 50, time.Minute
			r := newMemRecords(bound, retention, now)
			m := &recordsModel{max: bound, retention: retention}
			var ids []string
			ctx := context.Background()
			for step := 0; step < 4000; step++ {
				switch op := rng.IntN(100); {
				case op < 60 || len(ids) == 0: // a new record
					id := strconv.Itoa(step)
					if rng.IntN(200) == 0 {
						id = "" // not made by the engine, but a string like any other here
					}
					if rng.IntN(4) > 0 {
						sum := sha256.Sum256([]byte(id))
						id = hex.EncodeToString(sum[:])
					}
					ids = append(ids, id)
					fallthrough
				case op < 80: // retained (again)
					id := ids[len(ids)-1]
					if op >= 60 {
						id = ids[rng.IntN(len(ids))]
					}
					size := rng.IntN(2000)
					if rng.IntN(50) == 0 {
						size = memChunkSize + rng.IntN(1000) // larger than a chunk
					}
					rec := Record{AuditID: id, AgentID: "agent-" + strconv.Itoa(rng.IntN(3)),
						NodeID: "node-" + strconv.Itoa(rng.IntN(2)), Compact: strings.Repeat(string(rune(97+len(id)%26)), size) + id,
						IssuedAt: clock.Add(-time.Duration(rng.IntN(1000)) * time.Millisecond)}
					if rng.IntN(3) == 0 {
						rec.Person = "person-" + id
					}
					if err := r.Retain(ctx, rec); err != nil {
						t.Fatal(err)
					}
					m.retain(rec, clock)
				case op < 95:
					clock = clock.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				default:
					m.max = 1 + rng.IntN(2*bound)
					r.resize(m.max, retention)
					m.prune(clock)
				}
				check := ids[max(0, len(ids)-8):] // the newest, and a sample of the rest
				for range 8 {
					check = append(check, ids[rng.IntN(len(ids))])
				}
				for _, id := range check {
					got, ok, err := r.Get(ctx, id)
					want, wantOK := m.get(id, clock)
					if err != nil || ok != wantOK || ok && (got != want || !got.IssuedAt.Equal(want.IssuedAt)) {
						t.Fatalf("step %d: Get(%.8s) = %v, %v, %v; want %v, %v", step, id, short(got), ok, err, short(want), wantOK)
					}
				}
				r.mu.Lock()
				live, n := r.live, r.n
				slots := 0
				for _, c := range r.chunks {
					slots += c.slots
				}
				r.mu.Unlock()
				if live != len(m.order) || slots != n || n > 2*live+64 {
					t.Fatalf("step %d: %d live, %d slots, %d in chunks; the model holds %d", step, live, n, slots, len(m.order))
				}
				// Every chunk but the one being filled holds a slot in use.
				r.mu.Lock()
				for i, c := range r.chunks[:max(0, len(r.chunks)-1)] {
					if c.slots == 0 {
						t.Fatalf("step %d: chunk %d of %d holds no slot", step, i, len(r.chunks))
					}
				}
				r.mu.Unlock()
			}
		})
	}
}

func short(r Record) Record {
	if len(r.Compact) > 12 {
		r.Compact = r.Compact[:12] + "…"
	}
	return r
}

// TestMemRecordsRetainedAgain: records retained again and again leave
// their old slots behind the oldest record; the ring is compacted before
// they outnumber the records, and right after each compaction every
// record, of either kind of Audit-ID, still reads as last retained.
func TestMemRecordsRetainedAgain(t *testing.T) {
	r := newMemRecords(100, time.Hour, time.Now)
	ctx := context.Background()
	ids := make([]string, 10)
	for i := range ids {
		sum := sha256.Sum256([]byte{byte(i)})
		ids[i] = hex.EncodeToString(sum[:])
		if i%2 == 1 {
			ids[i] = "other-" + strconv.Itoa(i) // not 64 hex
		}
	}
	latest := map[string]string{}
	compactions := 0
	for round := 0; round < 500; round++ {
		for i, id := range ids {
			if i == 0 && round > 0 {
				continue // the oldest stays in front: the slots left behind pile up behind it
			}
			n := r.n
			rec := Record{AuditID: id, AgentID: "a", NodeID: "n", Compact: id + "/" + strconv.Itoa(round) + "/" + strings.Repeat(".", 3000)}
			if err := r.Retain(ctx, rec); err != nil {
				t.Fatal(err)
			}
			latest[id] = id + "/" + strconv.Itoa(round) + "/"
			if r.n < n {
				compactions++
			}
			if r.n > 2*len(ids)+64 || len(r.chunks) > 2 || r.live != len(latest) {
				t.Fatalf("round %d: %d slots, %d chunks, %d live for %d records", round, r.n, len(r.chunks), r.live, len(latest))
			}
			for id, want := range latest { // right after each Retain, and so after each compaction
				got, ok, _ := r.Get(ctx, id)
				if !ok || !strings.HasPrefix(got.Compact, want) || got.AuditID != id {
					t.Fatalf("round %d: Get(%s) = %v, %v, want %s…", round, id, short(got), ok, want)
				}
			}
		}
	}
	if compactions < 10 {
		t.Fatalf("%d compactions", compactions)
	}
}

// TestMemRecordsShrinks: after a burst, the ring, the chunks and the
// index go back to the size of what is still held.
func TestMemRecordsShrinks(t *testing.T) {
	clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	r := newMemRecords(100_000, time.Minute, func() time.Time { return clock })
	ctx := context.Background()
	retain := func(id string) {
		t.Helper()
		sum := sha256.Sum256([]byte(id))
		if err := r.Retain(ctx, Record{AuditID: hex.EncodeToString(sum[:]), AgentID: "a", NodeID: "n", Compact: strings.Repeat("x", 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50_000 {
		retain("burst" + strconv.Itoa(i))
	}
	if len(r.ring) < 50_000 || len(r.chunks) < 150 {
		t.Fatalf("after the burst: a ring of %d, %d chunks", len(r.ring), len(r.chunks))
	}
	clock = clock.Add(time.Minute)
	for i := range 10 {
		retain("after" + strconv.Itoa(i))
	}
	if len(r.ring) > 1024 || len(r.chunks) > 1 || len(r.byID) != 10 || r.live != 10 {
		t.Fatalf("10 records held: a ring of %d, %d chunks, %d indexed, %d live", len(r.ring), len(r.chunks), len(r.byID), r.live)
	}
	for i := range 10 {
		sum := sha256.Sum256([]byte("after" + strconv.Itoa(i)))
		if _, ok, _ := r.Get(ctx, hex.EncodeToString(sum[:])); !ok {
			t.Fatalf("record %d lost", i)
		}
	}
}

// chunkRecords is a store of 1000 records kept a minute on a clock
// the test moves, and a retain of a record of size bytes under id.
func chunkRecords(t *testing.T) (r *memRecords, clock *time.Time, retain func(id string, size int)) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	clock = &now
	r = newMemRecords(1000, time.Minute, func() time.Time { return *clock })
	retain = func(id string, size int) {
		t.Helper()
		if err := r.Retain(context.Background(), Record{AuditID: id, AgentID: "a", NodeID: "n", Compact: strings.Repeat("x", size)}); err != nil {
			t.Fatal(err)
		}
	}
	return r, clock, retain
}

// TestMemRecordsChunksFreed: a chunk whose records are all gone is
// freed, even the only one, once the next record does not fit in it:
// an 8 MiB record expired leaves no 8 MiB behind (helper-103's finding).
func TestMemRecordsChunksFreed(t *testing.T) {
	r, clock, retain := chunkRecords(t)
	ctx := context.Background()
	held := func() (n int) {
		for _, c := range r.chunks {
			n += cap(c.buf)
		}
		return n
	}
	retain("big", 8<<20)
	*clock = clock.Add(2 * time.Minute)
	if _, ok, _ := r.Get(ctx, "big"); ok { // every record expired: the chunk stays, empty
		t.Fatal("the record outlived its retention")
	}
	retain("small", 1)
	if h := held(); h > 8<<20 {
		t.Fatalf("one 1-byte record holds %d bytes of chunks", h)
	}
	for i := range 200 {
		retain("r"+strconv.Itoa(i), 1300)
	}
	*clock = clock.Add(2 * time.Minute)
	_, _, _ = r.Get(ctx, "none")
	retain("after", memChunkSize) // does not fit in what is left of the only chunk
	if len(r.chunks) != 1 || r.chunks[0].slots != 1 {
		t.Fatalf("%d chunks held for one record", len(r.chunks))
	}
}

// TestMemRecordsSpareChunk: a chunk of the standard size whose records
// are all gone is reused for the next chunk, not allocated again; a
// larger one is not kept, and one spare at most is.
func TestMemRecordsSpareChunk(t *testing.T) {
	r, clock, retain := chunkRecords(t)
	ctx := context.Background()
	retain("first", 1000)
	first := r.chunks[0]
	*clock = clock.Add(2 * time.Minute)
	retain("fills", memChunkSize) // does not fit: the first chunk, now empty, is dropped
	if r.spare != first || len(first.buf) != 0 {
		t.Fatalf("spare %p (len %d), want the dropped chunk %p emptied", r.spare, len(first.buf), first)
	}
	if got, ok, _ := r.Get(ctx, "fills"); !ok || len(got.Compact) != memChunkSize {
		t.Fatal("the record that did not fit is not held")
	}
	*clock = clock.Add(2 * time.Minute)
	retain("next", 10) // the spare becomes the chunk being filled
	if r.spare == first || r.chunks[len(r.chunks)-1] != first {
		t.Fatalf("the new chunk is not the spare")
	}
	if got, ok, _ := r.Get(ctx, "next"); !ok || got.Compact != strings.Repeat("x", 10) {
		t.Fatalf("the record in the reused chunk reads back %q", got.Compact)
	}
	*clock = clock.Add(2 * time.Minute)
	retain("big", 2*memChunkSize)
	*clock = clock.Add(2 * time.Minute)
	retain("after-big", 10)
	if r.spare != nil && cap(r.spare.buf) != memChunkSize {
		t.Fatalf("a spare of %d bytes kept", cap(r.spare.buf))
	}
}

// TestMemRecordsHeads: the chain heads name the last record retained per
// agent and node, and an agent's last heads past the retention go.
func TestMemRecordsHeads(t *testing.T) {
	clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	r := newMemRecords(10, time.Minute, func() time.Time { return clock })
	ctx := context.Background()
	for i, node := range []string{"n1", "n2", "n1"} {
		if err := r.Retain(ctx, Record{AuditID: "id" + strconv.Itoa(i), AgentID: "a", NodeID: node, Compact: "e30.x."}); err != nil {
			t.Fatal(err)
		}
	}
	hs, _ := r.Heads(ctx, "a")
	if len(hs) != 2 || hs[0] != (Head{NodeID: "n1", AuditID: "id2"}) || hs[1] != (Head{NodeID: "n2", AuditID: "id1"}) {
		t.Fatalf("heads %v", hs)
	}
	clock = clock.Add(time.Minute)
	if hs, _ := r.Heads(ctx, "a"); len(hs) != 0 {
		t.Fatalf("heads past the retention: %v", hs)
	}
	if _, ok := r.heads["a"]; ok {
		t.Fatal("the agent's entry stays with no head")
	}
}

// fillRecords retains n records as the engine makes them: 64-hex
// Audit-IDs, ten agents, one node, a JWS Compact of about 1.2 KB.
func fillRecords(n int) *memRecords {
	r := newMemRecords(n, 24*time.Hour, time.Now)
	agents := make([]string, 10)
	for i := range agents {
		agents[i] = strings.Repeat(strconv.Itoa(i), 64)[:64]
	}
	pad := strings.Repeat("x", 1200)
	for i := 0; i < n; i++ {
		sum := sha256.Sum256([]byte(strconv.Itoa(i)))
		id := hex.EncodeToString(sum[:])
		_ = r.Retain(context.Background(), Record{AuditID: id, AgentID: agents[i%10], NodeID: "node-1",
			Compact: pad + id, IssuedAt: time.Now().UTC()})
	}
	return r
}

// BenchmarkRetainedRecordsGC: the CPU of one garbage collection (getrusage:
// user and system, the mark workers of every P) with 100000 retained
// records live, minus that of one with none, reported as gc-cpu-ns/op;
// the Caddy process pays it once per heap's growth by GOGC percent.
func BenchmarkRetainedRecordsGC(b *testing.B) {
	cputime.BenchmarkCollection(b, func() any { return fillRecords(100_000) })
}

// BenchmarkRetain: one Retain of a new record into a store at its bound
// (each drops the oldest), as a busy gateway's memory store runs.
func BenchmarkRetain(b *testing.B) {
	r := fillRecords(100_000)
	ids := make([]string, 1<<18) // a record retained again is long gone by then
	for i := range ids {
		sum := sha256.Sum256([]byte("new" + strconv.Itoa(i)))
		ids[i] = hex.EncodeToString(sum[:])
	}
	compact := strings.Repeat("y", 1264)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = r.Retain(ctx, Record{AuditID: ids[i%len(ids)], AgentID: "agent", NodeID: "node-1", Compact: compact})
		i++
	}
}
