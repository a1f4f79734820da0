package idempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// responseHead is the JSON line before a stored answer's body.
type responseHead struct {
	Status    int               `json:"s"`
	Header    map[string]string `json:"h,omitempty"`
	Contract  ContractRef       `json:"c"`
	Previewed string            `json:"p,omitempty"`
}

// EncodeResponse returns resp as a stored answer is kept, by this
// package's Store and by the Redis store (as a key's value there, so
// the form is fixed: nodes of one cluster read each other's): one JSON
// line, {"s": status, "h": the kept header fields (storedHeaders, by
// canonical name; absent when none), "c": the contract, "p": the
// previewed synthesis id (absent when ""), then "\n" and the body as
// sent. It never fails: json.Marshal cannot fail on strings and ints.
func EncodeResponse(resp Response) []byte {
	h := responseHead{Status: resp.Status, Contract: resp.Contract, Previewed: resp.Previewed}
	for k, v := range resp.Header {
		k = http.CanonicalHeaderKey(k)
		if slices.Contains(storedHeaders[:], k) {
			if h.Header == nil {
				h.Header = map[string]string{}
			}
			h.Header[k] = v
		}
	}
	head, _ := json.Marshal(h)
	out := make([]byte, 0, len(head)+1+len(resp.Body))
	return append(append(append(out, head...), '\n'), resp.Body...)
}

// DecodeResponse reads what EncodeResponse wrote into a Response of its
// own (nothing shared with raw). A body of no bytes reads as nil.
func DecodeResponse(raw []byte) (*Response, error) {
	h, body, err := decodeHead(raw)
	if err != nil {
		return nil, err
	}
	r := &Response{Status: h.Status, Header: h.Header, Contract: h.Contract, Previewed: h.Previewed}
	if len(body) > 0 {
		r.Body = slices.Clone(body)
	}
	return r, nil
}

func decodeHead(raw []byte) (responseHead, []byte, error) {
	var h responseHead
	head, body, ok := bytes.Cut(raw, []byte("\n"))
	if !ok {
		return h, nil, fmt.Errorf("no header line")
	}
	if err := json.Unmarshal(head, &h); err != nil {
		return h, nil, err
	}
	return h, body, nil
}

// packed is a stored answer as a record of the Store keeps it: its
// EncodeResponse form, one byte slice, which the garbage collector marks
// as one object and never looks inside. At the default bound (100000
// records, each kept a day) the stored answers are a large share of a
// gateway's live heap, and every collection marks it: as a Response (the
// struct, its header map, its body and its strings) each answer was
// four to seven objects more (BenchmarkStoredAnswersGC). nil is no
// answer. The Store only packs what it encoded itself, so it reads
// without error.
type packed []byte

func pack(r Response) packed { return EncodeResponse(r) }

// head returns the packed answer's head.
func (p packed) head() responseHead {
	h, _, _ := decodeHead(p)
	return h
}

// response returns a Response of its own of the packed answer.
func (p packed) response() *Response {
	r, err := DecodeResponse(p)
	if err != nil {
		return &Response{} // never: p is EncodeResponse's
	}
	return r
}
