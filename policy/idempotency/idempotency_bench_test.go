package idempotency

// Per-stage benchmarks (go test -bench; the load comparison is make bench): the idempotency stage of a
// request that carries an Idempotency-Key, as caddymodule's claim and
// writeRaw use it.

import (
	"strconv"
	"testing"
	"time"
)

const benchAgent = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"

var (
	sinkString  string
	sinkOutcome Outcome
)

var benchBody = []byte(`{"parameters":{"item_id":"1"}}`)

// BenchmarkParseKey parses a quoted structured-field key.
func BenchmarkParseKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		k, err := ParseKey(`"0b6f1c9e-7c3a-4f55-9b1e-2f2a7d9c1e44"`)
		if err != nil {
			b.Fatal(err)
		}
		sinkString = k
	}
}

// BenchmarkFingerprint hashes method, target and body.
func BenchmarkFingerprint(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkString = Fingerprint("LOOKUP", "/item/d-1", benchBody)
	}
}

// BenchmarkIdempotencyClaim is a first use of a key: fingerprint, Claim
// (Execute) and Complete with a 263-sized answer. The clock moves 1 ms per
// request with a 1 s window, so about 1,000 records are live, as under a
// steady load.
func BenchmarkIdempotencyClaim(b *testing.B) {
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := NewStore(Limits{Window: time.Second, MaxRecords: 1 << 20, MaxPerAgent: 1 << 20}, func() time.Time { return t })
	body := make([]byte, 2048)
	hdr := map[string]string{"Content-Type": "application/vnd.agtp.endpoint+json", "Contract-Synthesized": "syn-AAAAAAAAAAAAAAAAAAAAAA"}
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t = t.Add(time.Millisecond)
		fp := Fingerprint("LOOKUP", "/item/g-1", benchBody)
		o, _, c := s.Claim(benchAgent, keys[i%len(keys)], fp)
		if o != Execute {
			b.Fatalf("outcome %v", o)
		}
		c.Complete(Response{Status: 263, Header: hdr, Body: body})
		i++
	}
}

// BenchmarkIdempotencyReplay is a repeat of a completed key: Claim
// returns a copy of the stored answer.
func BenchmarkIdempotencyReplay(b *testing.B) {
	s := NewStore(Limits{}, nil)
	fp := Fingerprint("LOOKUP", "/item/g-1", benchBody)
	_, _, c := s.Claim(benchAgent, "k", fp)
	c.Complete(Response{Status: 263, Header: map[string]string{"Content-Type": "application/json"}, Body: make([]byte, 2048)})
	b.ReportAllocs()
	for b.Loop() {
		o, _, _ := s.Claim(benchAgent, "k", fp)
		sinkOutcome = o
	}
}
