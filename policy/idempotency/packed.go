package idempotency

import (
	"encoding/binary"
	"net/http"
	"slices"
	"strings"
)

// packed is a stored Response as a record keeps it: one byte slice,
// which the garbage collector marks as one object and never looks
// inside. At the default bound (100000 records, each kept a day) the
// stored answers are a large share of a gateway's live heap, and every
// collection marks it: as a Response (the struct, its header map, its
// body and its strings) each answer was four to seven objects more
// (BenchmarkStoredAnswersGC).
//
// Layout: the status, then the kept header fields (their count, then
// name and value each), the contract's synthesis id, hash and
// negotiation origin, Previewed, and last a flag (whether Body was
// non-nil) and the body; every number an unsigned varint, every string
// its length then its bytes. nil is no answer.
type packed []byte

// pack returns r packed, keeping only the storedHeaders, with
// canonical names.
func pack(r Response) packed {
	size := 8 + len(r.Body) + len(r.Contract.SynthesisID) + len(r.Contract.ContractHash) +
		len(r.Contract.NegotiationOrigin) + len(r.Previewed) + 6*binary.MaxVarintLen32
	type field struct{ name, value string }
	var kept [len(storedHeaders)]field
	n := 0
	for k, v := range r.Header {
		k = http.CanonicalHeaderKey(k)
		if !slices.Contains(storedHeaders[:], k) {
			continue
		}
		size += len(k) + len(v) + 2*binary.MaxVarintLen32
		if i := slices.IndexFunc(kept[:n], func(f field) bool { return f.name == k }); i >= 0 {
			kept[i].value = v // two spellings of one name: one is kept, as a map of canonical names would
			continue
		}
		kept[n] = field{k, v}
		n++
	}
	slices.SortFunc(kept[:n], func(a, b field) int { // one packing per answer, whatever the map's order
		return strings.Compare(a.name, b.name)
	})
	p := make([]byte, 0, size)
	p = binary.AppendUvarint(p, uint64(r.Status))
	p = binary.AppendUvarint(p, uint64(n))
	for _, f := range kept[:n] {
		p = appendString(appendString(p, f.name), f.value)
	}
	p = appendString(p, r.Contract.SynthesisID)
	p = appendString(p, r.Contract.ContractHash)
	p = appendString(p, r.Contract.NegotiationOrigin)
	p = appendString(p, r.Previewed)
	if r.Body == nil {
		return append(p, 0)
	}
	return append(append(p, 1), r.Body...)
}

func appendString(p []byte, s string) []byte {
	return append(binary.AppendUvarint(p, uint64(len(s))), s...)
}

// packedReader reads a packed answer's parts in order.
type packedReader struct{ p []byte }

func (r *packedReader) uint() uint64 {
	v, n := binary.Uvarint(r.p)
	r.p = r.p[n:]
	return v
}

func (r *packedReader) bytes() []byte {
	n := r.uint()
	b := r.p[:n]
	r.p = r.p[n:]
	return b
}

// status returns the packed answer's status code.
func (p packed) status() int {
	r := packedReader{p}
	return int(r.uint())
}

// synthesisIDs returns the synthesis ids the packed answer names: its
// Contract's and its Previewed, without copying them out.
func (p packed) synthesisIDs() (contract, previewed []byte) {
	r := packedReader{p}
	r.uint()
	for n := r.uint(); n > 0; n-- {
		r.bytes()
		r.bytes()
	}
	contract = r.bytes()
	r.bytes()
	r.bytes()
	return contract, r.bytes()
}

// response returns a Response of its own (nothing shared with p) of
// the packed answer.
func (p packed) response() *Response {
	r := packedReader{p}
	c := &Response{Status: int(r.uint())}
	if n := r.uint(); n > 0 {
		c.Header = make(map[string]string, len(storedHeaders))
		for ; n > 0; n-- {
			k := string(r.bytes())
			c.Header[k] = string(r.bytes())
		}
	}
	c.Contract.SynthesisID = string(r.bytes())
	c.Contract.ContractHash = string(r.bytes())
	c.Contract.NegotiationOrigin = string(r.bytes())
	c.Previewed = string(r.bytes())
	if r.p[0] == 1 {
		c.Body = slices.Clone(r.p[1:]) // never nil: a clone of an empty slice is empty
	}
	return c
}
