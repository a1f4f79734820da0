package recipes

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// marshalStdlib is what CapturedContract.Marshal wrote before it was
// written by hand: encoding/json without HTML escaping. Values Redis
// holds were written by it, and nodes of both versions read each
// other's.
func marshalStdlib(cc CapturedContract) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// TestCapturedContractMarshalForm holds Marshal to encoding/json's
// bytes over contracts of every field's kinds: strings with HTML
// characters, U+2028, controls, quotes and invalid UTF-8; endpoints
// nil, empty object and real JCS forms (with HTML characters and
// U+2028 inside strings); times in UTC, in another zone, with and
// without nanoseconds, zero; session_id and persistent on and off.
// Both fail alike on a year past 9999.
func TestCapturedContractMarshalForm(t *testing.T) {
	r, _ := buildSet(t, newUpstream(t, "http://127.0.0.1:1"), captureRecipe, captureEndpoints()...)
	_, epJSON, err := r.ContractHashFor("BOOK", "/trip")
	if err != nil {
		t.Fatal(err)
	}
	strs := []string{"", "plain", "a & b <both>", "\u2028\u2029", "\x00\x1f\"\\/", "\xff\xfe bad", "é ü 😀", strings.Repeat("x", 300), "syn-0123456789abcdef"}
	eps := []json.RawMessage{nil, json.RawMessage(`{}`), epJSON, json.RawMessage(`{"a":"<&> \u2028","b":[1,2.5,null,true]}`)}
	zone := time.FixedZone("x", -5*3600-30*60)
	times := []time.Time{{}, time.Unix(1700000000, 0).UTC(), time.Unix(1700000000, 123456789).In(zone), time.Date(2026, 12, 6, 10, 0, 0, 500, time.Local)}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	for i := range 3000 {
		cc := CapturedContract{SynthesisID: pick(), Method: pick(), Path: pick(), EndpointJSON: eps[rng.IntN(len(eps))],
			Lineage: Lineage{RecipeName: pick(), RecipeVersion: pick()}, ContractHash: pick(), OriginatingAgentID: pick(),
			NegotiationOrigin: pick(), IssuedAt: times[rng.IntN(len(times))], ExpiresAt: times[rng.IntN(len(times))],
			SessionID: pick(), Persistent: rng.IntN(2) == 0, PlanHash: pick()}
		got, err := cc.Marshal()
		want, wantErr := marshalStdlib(cc)
		if err != nil || wantErr != nil || !bytes.Equal(got, want) {
			t.Fatalf("case %d: Marshal\n%s (%v)\nencoding/json\n%s (%v)", i, got, err, want, wantErr)
		}
		back, err := UnmarshalCapturedContract(got)
		if cc.SynthesisID != "" && cc.OriginatingAgentID != "" && cc.PlanHash != "" && (err != nil || !bytes.Equal(back.EndpointJSON, cc.EndpointJSON) && cc.EndpointJSON != nil) {
			t.Fatalf("case %d: read back %v: endpoint %s, want %s", i, err, back.EndpointJSON, cc.EndpointJSON)
		}
	}
	empty := CapturedContract{EndpointJSON: json.RawMessage{}}
	if _, err := empty.Marshal(); err == nil {
		t.Fatal("empty endpoint bytes marshalled (to invalid JSON)")
	}
	if _, err := marshalStdlib(empty); err == nil {
		t.Fatal("encoding/json took empty endpoint bytes: the reference changed")
	}
	late := CapturedContract{IssuedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := late.Marshal(); err == nil {
		t.Fatal("a year past 9999 marshalled")
	}
	if _, err := marshalStdlib(late); err == nil {
		t.Fatal("encoding/json took a year past 9999: the reference changed")
	}
}

// BenchmarkCapturedContractMarshal: the captured form of a contract of
// the capture test's recipe, as a Redis store's mint writes it.
func BenchmarkCapturedContractMarshal(b *testing.B) {
	r, _ := buildSet(b, newUpstream(b, "http://127.0.0.1:1"), captureRecipe, captureEndpoints()...)
	hash, epJSON, err := r.ContractHashFor("BOOK", "/trip")
	if err != nil {
		b.Fatal(err)
	}
	c := &Contract{SynthesisID: NewSynthesisID(), Method: "BOOK", Path: "/trip", Recipe: r, EndpointJSON: epJSON,
		Lineage: r.Lineage(), ContractHash: hash, OriginatingAgentID: strings.Repeat("a", 64), NegotiationOrigin: OriginGate,
		IssuedAt: time.Unix(1700000000, 0).UTC(), ExpiresAt: time.Unix(1700003600, 0).UTC()}
	cc, _, err := c.Capture()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, err := cc.Marshal(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := marshalStdlib(cc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
