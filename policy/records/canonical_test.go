package records

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestProtoAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "abc", "a\"b\\c", "\x00\x01\x1f\n\r\t\b\f", "é漢字🙂", "\u2028\u2029", "bad\xff\xfeutf8", "<>&/", "\x7f"} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%q: got %s want %s", s, got, want)
		}
	}
}

func TestProtoCanonical(t *testing.T) {
	recs := []any{
		map[string]any{"kind": "gate", "outcome": "refused", "requested": map[string]any{"method": "LOOKUP", "path": "/nothing", "allow_rcns": true},
			"granted": nil, "seq": int64(7), "n": 3, "f": 2.0, "s": []string{"a", "b\n"}, "l": []any{1, "x", nil, false}, "ctl": "\x01\x1f\"\\/é\u2028"},
		map[string]any{},
		map[string]any{"a": map[string]any{"z": 1, "A": 2, "_": 3}},
	}
	for _, r := range recs {
		want, err := canonicalSlow(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := canonical(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("got %s (%v)\nwant %s", got, err, want)
		}
	}
}

func BenchmarkProtoAttributionJSON(b *testing.B) {
	for _, signed := range []bool{false, true} {
		b.Run(map[bool]string{false: "none", true: "ed25519"}[signed], func(b *testing.B) {
			s := benchSigner(b, signed)
			var c Chains
			b.ReportAllocs()
			for b.Loop() {
				issued := time.Now().UTC().Format(time.RFC3339Nano)
				compact, _, err := c.Append(benchAgent, func(prev string) (string, string, error) {
					buf := make([]byte, 0, 768)
					buf = append(buf, '{')
					f := func(k, v string) {
						if len(buf) > 1 {
							buf = append(buf, ',')
						}
						buf = append(buf, '"')
						buf = append(buf, k...)
						buf = append(buf, '"', ':')
						buf = AppendJSONString(buf, v)
					}
					f("agent_id", benchAgent)
					f("audit_record_version", "1")
					f("contract_hash", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
					f("issued_at", issued)
					f("method", "LOOKUP")
					f("negotiation_origin", "rcns-gate")
					f("owner_id", "bench-ops")
					f("previous_audit_id", prev)
					f("request_id", "019a7c1e-3b2d-7f00-8a4b-9c0d1e2f3a4c")
					f("response_id", "019a7c1e-3b2d-7f00-8a4b-9c0d1e2f3a4b")
					f("server_id", "rcns-bench")
					buf = append(buf, `,"status":200`...)
					f("synthesis_id", "syn-3q2-7wEVEjRnMCzYsB0Lxw")
					buf = append(buf, '}')
					c, a := s.SignJSON(buf)
					return c, a, nil
				})
				if err != nil {
					b.Fatal(err)
				}
				sinkString = compact
			}
		})
	}
}
