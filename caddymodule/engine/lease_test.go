package engine

import (
	"testing"
)

// panickingSink is an EventSink that panics: a defect below Serve after
// the request's Idempotency-Key was claimed.
type panickingSink struct{}

func (panickingSink) Emit(string, map[string]any) { panic("event sink defect") }

// TestPanicStopsLeaseRenewal: a request that panics while it holds its
// Idempotency-Key's claim (here the lifecycle event of the contract it
// minted) no longer has the claim renewed for as long as the process
// lives: Serve stops the renewer on the way out, so the lease ends as a
// stopped node's does (the key answers 409 outcome-unknown after it,
// never in flight for ever), and the node no longer lists the claim as
// running. Before, only the answer's write stopped it.
func TestPanicStopsLeaseRenewal(t *testing.T) {
	te := newTestEngine(t)
	te.events = panickingSink{}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the synthesis did not reach the panicking event sink")
			}
		}()
		te.do(t, "LOOKUP", "/item/p1", map[string]any{"parameters": map[string]any{"item_id": "1"}},
			"Allow-RCNS", "true", "Idempotency-Key", "panics")
	}()
	if claims, n := te.st.inflight.list(10); n != 0 {
		t.Fatalf("after the panic %d claims are still listed as running (and renewed): %+v", n, claims)
	}
}
