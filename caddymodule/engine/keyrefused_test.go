package engine

import (
	"testing"
)

// TestGateKeyRefusalWritesNoRecord: a gate request its Idempotency-Key
// refuses before anything is evaluated (the key used for another
// request: 422; held in flight: 409, the same flag) writes no gate
// negotiation record, as a racer that reaches the contract path writes
// none (helper-142: one 409 of eight wrote one, by timing).
func TestGateKeyRefusalWritesNoRecord(t *testing.T) {
	te := newTestEngine(t)
	gate := func(path string) *testAnswer {
		return te.do(t, "LOOKUP", path, map[string]any{"parameters": map[string]any{"item_id": "1"}}, "Allow-RCNS", "true", "Idempotency-Key", `"k-1"`)
	}
	count := func() int {
		a := te.do(t, "INSPECT", "/?target=negotiations&kind=gate&limit=50", nil)
		if a.Status != 200 {
			t.Fatalf("INSPECT negotiations = %s", a)
		}
		list, _ := a.body["records"].([]any)
		return len(list)
	}
	if a := gate("/item/m-1"); a.Status != 263 {
		t.Fatalf("the synthesis: %s, want 263", a)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d gate records after the synthesis, want 1", n)
	}
	if a := gate("/item/m-2"); a.Status != 422 {
		t.Fatalf("the same key for another pair: %s, want 422", a)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d gate records after the key's refusal, want still 1", n)
	}
}
