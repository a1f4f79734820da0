package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/cputime"
)

// keptCopy is what a record must give back of r: a deep copy keeping
// only the storedHeaders, with canonical names (the Response a record
// held before answers were packed).
func keptCopy(r Response) *Response {
	c := &Response{Status: r.Status, Contract: r.Contract, Previewed: r.Previewed}
	for k, v := range r.Header {
		k = http.CanonicalHeaderKey(k)
		if slices.Contains(storedHeaders[:], k) {
			if c.Header == nil {
				c.Header = make(map[string]string, len(storedHeaders))
			}
			c.Header[k] = v
		}
	}
	if r.Body != nil {
		c.Body = slices.Clone(r.Body)
	}
	return c
}

// TestPackedRoundTrip: an answer packed and read back is the kept copy
// of it (headers filtered and canonical, every string; a body of no
// bytes reads as nil, as from Redis), shares no memory with the
// packing, and its head is the answer's status and synthesis ids.
func TestPackedRoundTrip(t *testing.T) {
	names := []string{"Content-Type", "content-type", "Location", "LOCATION", "Negotiation-ID", "Negotiation-Id", "Attribution-Record", "X-Other", ""}
	rng := rand.New(rand.NewPCG(3, 5))
	str := func() string {
		if rng.IntN(4) == 0 {
			return ""
		}
		return strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(300)) + "\u00e9\n\"<"
	}
	cases := []Response{
		{},
		{Status: 263, Body: []byte{}},
		{Status: 461, Previewed: "syn-1", Header: map[string]string{"content-type": "application/json"}, Body: []byte(`{"x":1}`)},
		{Status: 200, Contract: ContractRef{SynthesisID: "syn-2", ContractHash: "sha256:ab", NegotiationOrigin: "neg-1"},
			Header: map[string]string{"Location": "/a", "Negotiation-Id": "n", "Content-Type": "text/plain", "X-Dropped": "y"}, Body: make([]byte, 70000)},
	}
	for range 500 {
		r := Response{Status: rng.IntN(600), Contract: ContractRef{SynthesisID: str(), ContractHash: str(), NegotiationOrigin: str()}, Previewed: str()}
		if rng.IntN(3) > 0 {
			r.Header = map[string]string{}
			for range rng.IntN(5) {
				r.Header[names[rng.IntN(len(names))]] = str()
			}
		}
		switch rng.IntN(3) {
		case 1:
			r.Body = []byte{}
		case 2:
			r.Body = []byte(str() + "x\n")
		}
		cases = append(cases, r)
	}
	for i, r := range cases {
		p := pack(r)
		got, want := p.response(), keptCopy(r)
		if len(want.Body) == 0 {
			want.Body = nil
		}
		if got.Header != nil && len(got.Header) == 0 {
			t.Fatalf("case %d: an empty header map, not nil", i)
		}
		// Two spellings of one name: either value may be the one kept,
		// as with a map of canonical names.
		for k, v := range r.Header {
			if c := http.CanonicalHeaderKey(k); want.Header[c] != got.Header[c] && got.Header[c] == v {
				want.Header[c] = v
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: packed and read back\n got %+v\nwant %+v", i, got, want)
		}
		if h := p.head(); h.Status != r.Status || h.Contract.SynthesisID != r.Contract.SynthesisID || h.Previewed != r.Previewed {
			t.Fatalf("case %d: head %+v", i, h)
		}
		if len(got.Body) > 0 {
			got.Body[0]++
			if again := p.response(); again.Body[0] == got.Body[0] {
				t.Fatalf("case %d: the body read back shares the packed bytes", i)
			}
		}
	}
}

// TestEncodeResponseForm: the form is fixed (Redis keeps it, and nodes
// of one cluster, old and new, read each other's): these bytes, as
// the Redis store wrote them before the encoding moved here.
func TestEncodeResponseForm(t *testing.T) {
	got := string(EncodeResponse(Response{Status: 201, Header: map[string]string{"location": "/bookings/7", "Content-Type": "application/json", "X-Dropped": "1"},
		Contract: ContractRef{SynthesisID: "syn-1", ContractHash: "sha256:ab", NegotiationOrigin: "neg-1"}, Previewed: "syn-0", Body: []byte(`{"id":7}`)}))
	want := `{"s":201,"h":{"Content-Type":"application/json","Location":"/bookings/7"},"c":{"SynthesisID":"syn-1","ContractHash":"sha256:ab","NegotiationOrigin":"neg-1"},"p":"syn-0"}` + "\n" + `{"id":7}`
	if got != want {
		t.Fatalf("EncodeResponse\n got %s\nwant %s", got, want)
	}
	if got := string(EncodeResponse(Response{Status: 500})); got != `{"s":500,"c":{"SynthesisID":"","ContractHash":"","NegotiationOrigin":""}}`+"\n" {
		t.Fatalf("EncodeResponse of a bare status: %s", got)
	}
	for _, bad := range []string{"", "{}", "not json\n", `{"s":"x"}` + "\n"} {
		if _, err := DecodeResponse([]byte(bad)); err == nil {
			t.Errorf("DecodeResponse(%q): no error", bad)
		}
	}
}

// BenchmarkStoredAnswersGC: the CPU of one garbage collection
// (getrusage: user and system, every P's mark workers) with 100000
// stored answers live (a 300-byte JSON body each, a contract named),
// minus that of one with none, as gc-cpu-ns/op.
func BenchmarkStoredAnswersGC(b *testing.B) {
	cputime.BenchmarkCollection(b, func() any {
		s := NewStore(Limits{MaxRecords: 100_000, MaxPerAgent: 100_000, Window: time.Hour}, nil)
		body := []byte(strings.Repeat("b", 300))
		for i := range 100_000 {
			sum := sha256.Sum256([]byte(strconv.Itoa(i)))
			fp := hex.EncodeToString(sum[:])
			_, _, c := s.Claim("agent-"+strconv.Itoa(i%10), "key-"+strconv.Itoa(i), fp)
			c.Complete(Response{Status: 200, Header: map[string]string{"Content-Type": "application/json"}, Body: body,
				Contract: ContractRef{SynthesisID: "syn-" + fp[:20], ContractHash: "sha256:" + fp, NegotiationOrigin: "neg-" + fp[:8]}})
		}
		return s
	})
}
