package records

// Per-stage benchmarks (go test -bench; the load comparison is make bench): the record and signing
// stages of every AGTP answer (Attribution-Record: payload, chain,
// signature) and of every gate evaluation (negotiation log append), with
// the shapes caddymodule builds.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
)

const benchAgent = "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"

var (
	sinkString string
	sinkBytes  []byte
	sinkMap    map[string]any
)

func benchSigner(b *testing.B, signed bool) *Signer {
	b.Helper()
	var keys []ed25519.PrivateKey
	if signed {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		keys = append(keys, k)
	}
	s, err := NewSigner(keys)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// attributionPayload is the payload caddymodule's attribution builds for
// a contract invocation answer (the largest common shape).
func attributionPayload(prev string) map[string]any {
	return map[string]any{
		"server_id":            "rcns-bench",
		"issued_at":            time.Now().UTC().Format(time.RFC3339Nano),
		"status":               200,
		"response_id":          "019a7c1e-3b2d-7f00-8a4b-9c0d1e2f3a4b",
		"request_id":           "019a7c1e-3b2d-7f00-8a4b-9c0d1e2f3a4c",
		"audit_record_version": "1",
		"agent_id":             benchAgent,
		"owner_id":             "bench-ops",
		"method":               "LOOKUP",
		"synthesis_id":         "syn-3q2-7wEVEjRnMCzYsB0Lxw",
		"contract_hash":        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"negotiation_origin":   "rcns-gate",
		"previous_audit_id":    prev,
	}
}

// BenchmarkSign signs one contract-invocation Attribution-Record payload
// given as a map (encoding/json, base64url, SHA-256 Audit-ID), as
// Signer.Sign does for lifecycle events: /none unsigned (alg none),
// /ed25519 with an Ed25519 signature.
func BenchmarkSign(b *testing.B) {
	for _, signed := range []bool{false, true} {
		name := "none"
		if signed {
			name = "ed25519"
		}
		b.Run(name, func(b *testing.B) {
			s := benchSigner(b, signed)
			p := attributionPayload(ZeroHash)
			b.ReportAllocs()
			for b.Loop() {
				c, _, err := s.Sign(p)
				if err != nil {
					b.Fatal(err)
				}
				sinkString = c
			}
		})
	}
}

// BenchmarkEd25519Sign is the signature alone over a 1,200-byte signing
// input (about an Attribution-Record's): /crypto-ed25519 is the standard
// library, kept as the baseline; /curve25519-voi is what Signer uses.
// Both give the same bytes (TestSignMatchesStdlib).
func BenchmarkEd25519Sign(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	msg := bytes.Repeat([]byte("eyJhbGciOiJFZERTQSJ9"), 60)
	b.Run("crypto-ed25519", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkBytes = ed25519.Sign(priv, msg)
		}
	})
	b.Run("curve25519-voi", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkBytes = ed25519Sign(priv, msg)
		}
	})
}

// BenchmarkAttributionRecord is the record stage of one answer built
// from a payload map through encoding/json (Signer.Sign), chain append
// for the agent, signature: the path caddymodule's hand-built payload
// (caddymodule BenchmarkAttribution) replaced, kept as its baseline.
func BenchmarkAttributionRecord(b *testing.B) {
	for _, signed := range []bool{false, true} {
		name := "none"
		if signed {
			name = "ed25519"
		}
		b.Run(name, func(b *testing.B) {
			s := benchSigner(b, signed)
			var c Chains
			b.ReportAllocs()
			for b.Loop() {
				compact, _, err := c.Append(benchAgent, func(prev string) (string, string, error) {
					return s.Sign(attributionPayload(prev))
				})
				if err != nil {
					b.Fatal(err)
				}
				sinkString = compact
			}
		})
	}
}

// BenchmarkAttributionRecordParallel is BenchmarkAttributionRecord from
// every P at once for one agent: the chain serializes one agent's
// records, so the signature runs under the chain's lock.
func BenchmarkAttributionRecordParallel(b *testing.B) {
	for _, signed := range []bool{false, true} {
		name := "none"
		if signed {
			name = "ed25519"
		}
		b.Run(name, func(b *testing.B) {
			s := benchSigner(b, signed)
			var c Chains
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := c.Append(benchAgent, func(prev string) (string, string, error) {
						return s.Sign(attributionPayload(prev))
					}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// gateRefusal is the negotiation record of a refused gate evaluation, as
// caddymodule's gateway writes it.
func gateRefusal() map[string]any {
	return map[string]any{
		"kind":               KindGate,
		"outcome":            OutcomeRefused,
		"requested":          map[string]any{"method": "LOOKUP", "path": "/nothing", "allow_rcns": true},
		"granted":            nil,
		"identity_assurance": "unverified",
		"request_id":         "019a7c1e-3b2d-7f00-8a4b-9c0d1e2f3a4c",
		"reason":             "composition-impossible",
	}
}

// BenchmarkEncodeRecord is the encoding part of an append: JSON, RFC 8785
// canonical form, SHA-256, hash member.
func BenchmarkEncodeRecord(b *testing.B) {
	rec, err := checkRecord(benchAgent, gateRefusal(), false)
	if err != nil {
		b.Fatal(err)
	}
	rec["agent_id"], rec["seq"], rec["at"], rec["prev"] = benchAgent, int64(7), time.Now().UTC().Format(time.RFC3339Nano), ZeroHash
	b.ReportAllocs()
	for b.Loop() {
		line, _, err := encodeRecord(rec)
		if err != nil {
			b.Fatal(err)
		}
		sinkString = string(line[:1])
	}
}

// BenchmarkCanonicalRecord is the RFC 8785 form of a gate refusal
// record: one-pass is the encoder appends use; marshal+jcs is the path it
// replaced (json.Marshal, then jcs.Transform re-parsing that output),
// still the fallback for value types the one pass does not know.
func BenchmarkCanonicalRecord(b *testing.B) {
	rec, err := checkRecord(benchAgent, gateRefusal(), false)
	if err != nil {
		b.Fatal(err)
	}
	rec["agent_id"], rec["seq"], rec["at"], rec["prev"] = benchAgent, int64(7), time.Now().UTC().Format(time.RFC3339Nano), ZeroHash
	for _, c := range []struct {
		name string
		fn   func(any) ([]byte, error)
	}{{"one-pass", canonical}, {"marshal+jcs", jsonenc.CanonicalSlow}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := c.fn(rec)
				if err != nil {
					b.Fatal(err)
				}
				sinkString = string(out[:1])
			}
		})
	}
}

// BenchmarkLogAppend appends gate refusal records under each fsync
// policy. Sequential for off and always; group runs 16 appenders at once
// (that is how group commit amortizes its fsync), so its ns/op is wall
// time per record across them, not one append's latency.
func BenchmarkLogAppend(b *testing.B) {
	for _, p := range []FsyncPolicy{FsyncOff, FsyncAlways, FsyncGroup} {
		b.Run("fsync="+string(p), func(b *testing.B) {
			l, err := OpenLog(LogOptions{Dir: b.TempDir(), Fsync: p})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ReportAllocs()
			if p != FsyncGroup {
				for b.Loop() {
					if _, err := l.Append(benchAgent, gateRefusal()); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.Append(benchAgent, gateRefusal()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLifecycleEmit is the rcns_propose_accepted event every
// synthesis emits: emit/* signs it at once (Emit, what the synthesis path
// did), record/* is what the synthesis path does now (Record: stamped
// and stored, signed when INSPECT first reads the stream).
func BenchmarkLifecycleEmit(b *testing.B) {
	for _, how := range []string{"emit", "record"} {
		for _, signed := range []bool{false, true} {
			name := how + "/none"
			if signed {
				name = how + "/ed25519"
			}
			b.Run(name, func(b *testing.B) {
				l, err := NewLifecycle(benchSigner(b, signed), LifecycleOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					ev := map[string]any{
						"event_type": "rcns_propose_accepted", "agent_id": benchAgent, "synthesis_id": fmt.Sprintf("syn-%022d", i),
						"method": "LOOKUP", "path": "/item/g-1", "recipe_name": "lookup-item", "recipe_version": "1",
						"contract_hash":      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
						"negotiation_origin": "rcns-gate", "actor_agent_id": benchAgent,
					}
					if how == "record" {
						if err := l.Record(benchAgent, ev); err != nil {
							b.Fatal(err)
						}
						continue
					}
					e, err := l.Emit(benchAgent, ev)
					if err != nil {
						b.Fatal(err)
					}
					sinkMap = e
				}
			})
		}
	}
}
