package records

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLifecycleEmitList(t *testing.T) {
	s := mustSigner(t, newKey(t))
	lc, err := NewLifecycle(s, LifecycleOptions{PerAgent: 3, Now: stepClock(day1, time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var emitted []map[string]any
	for i := range 5 {
		e, err := lc.Emit("A", map[string]any{
			"event_type":         EventProposeAccepted,
			"synthesis_id":       fmt.Sprintf("syn-%d", i),
			"method":             "BOOK",
			"path":               "/room",
			"negotiation_origin": "rcns-gate",
		})
		if err != nil {
			t.Fatal(err)
		}
		emitted = append(emitted, e)
	}
	entry := emitted[4]
	if entry["format"] != "jws" || entry["event_type"] != EventProposeAccepted {
		t.Errorf("entry = %v", entry)
	}
	env, _ := entry["envelope"].(string)
	if entry["audit_id"] != AuditID(env) {
		t.Errorf("audit_id = %v, want sha256 of the envelope", entry["audit_id"])
	}
	payload, err := Verify(env, s.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	wantPayload := map[string]any{
		"event_type": EventProposeAccepted, "agent_id": "A", "synthesis_id": "syn-4",
		"issued_at": "2026-11-29T10:00:04Z",
	}
	for k, want := range wantPayload {
		if payload[k] != want {
			t.Errorf("payload[%s] = %v, want %v", k, payload[k], want)
		}
	}
	if got := headerTyp(t, env); got != TypLifecycle {
		t.Errorf("typ = %s, want %s", got, TypLifecycle)
	}

	tests := []struct {
		name  string
		agent string
		limit int
		want  []int // indexes into emitted, newest first
	}{
		{name: "all kept, newest first", agent: "A", limit: 0, want: []int{4, 3, 2}},
		{name: "limit", agent: "A", limit: 2, want: []int{4, 3}},
		{name: "limit over size", agent: "A", limit: 10, want: []int{4, 3, 2}},
		{name: "unknown agent", agent: "Z", limit: 0, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lc.List(tt.agent, tt.limit)
			if len(got) != len(tt.want) {
				t.Fatalf("List = %d entries, want %d", len(got), len(tt.want))
			}
			for i, idx := range tt.want {
				if got[i]["audit_id"] != emitted[idx]["audit_id"] {
					t.Errorf("entry %d is not event %d", i, idx)
				}
			}
		})
	}
	lc.List("A", 0)[0]["envelope"] = "changed"
	if lc.List("A", 1)[0]["envelope"] != env {
		t.Error("List returned a map that aliases the stored entry")
	}
}

func headerTyp(t *testing.T, compact string) string {
	t.Helper()
	h, err := b64.DecodeString(strings.Split(compact, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(h), `"typ":"`)
	rest := string(h)[i+len(`"typ":"`):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestLifecycleRingOrderBeforeFull(t *testing.T) {
	lc, err := NewLifecycle(nil, LifecycleOptions{PerAgent: 4})
	if err != nil {
		t.Fatal(err)
	}
	var ids []any
	for i := range 6 {
		e, err := lc.Emit("A", map[string]any{"event_type": EventRelease, "n": i})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e["audit_id"])
		got := lc.List("A", 0)
		if len(got) != min(i+1, 4) || got[0]["audit_id"] != ids[i] {
			t.Fatalf("after %d emits: %d entries, newest %v", i+1, len(got), got[0]["audit_id"])
		}
		for j := 1; j < len(got); j++ {
			if got[j]["audit_id"] != ids[i-j] {
				t.Fatalf("after %d emits entry %d out of order", i+1, j)
			}
		}
	}
	// Unsigned envelopes when no signer is given.
	env := lc.List("A", 1)[0]["envelope"].(string)
	if _, err := Verify(env, nil); !errors.Is(err, ErrUnsigned) {
		t.Errorf("Verify unsigned envelope = %v, want ErrUnsigned", err)
	}
}

func TestLifecycleMaxAgents(t *testing.T) {
	lc, err := NewLifecycle(nil, LifecycleOptions{MaxAgents: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"A", "B", "A", "C"} {
		if _, err := lc.Emit(a, map[string]any{"event_type": EventRevoke}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		agent string
		want  int
	}{
		{name: "recently written kept", agent: "A", want: 2},
		{name: "least recent dropped", agent: "B", want: 0},
		{name: "newest kept", agent: "C", want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := len(lc.List(tt.agent, 0)); got != tt.want {
				t.Errorf("List(%s) = %d entries, want %d", tt.agent, got, tt.want)
			}
		})
	}
}

func TestLifecycleEmitInvalid(t *testing.T) {
	lc, err := NewLifecycle(mustSigner(t, newKey(t)), LifecycleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		agent string
		event map[string]any
		want  string
	}{
		{name: "empty agent", agent: "", event: map[string]any{"event_type": EventRevoke}, want: "empty agent id"},
		{name: "no event_type", agent: "A", event: map[string]any{"synthesis_id": "s"}, want: "event_type"},
		{name: "nil event", agent: "A", event: nil, want: "event_type"},
		{name: "event_type not string", agent: "A", event: map[string]any{"event_type": 3}, want: "event_type"},
		{name: "other agent_id", agent: "A", event: map[string]any{"event_type": EventRevoke, "agent_id": "B"}, want: "differs"},
		{name: "unencodable", agent: "A", event: map[string]any{"event_type": EventRevoke, "x": math.Inf(1)}, want: "encode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lc.Emit(tt.agent, tt.event)
			if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrInvalidEvent mentioning %q", err, tt.want)
			}
		})
	}
	if got := lc.List("A", 0); len(got) != 0 {
		t.Errorf("refused events were stored: %v", got)
	}
	if _, err := NewLifecycle(nil, LifecycleOptions{PerAgent: -1}); err == nil {
		t.Error("negative PerAgent accepted")
	}
}

func TestLifecycleConcurrent(t *testing.T) {
	lc, err := NewLifecycle(mustSigner(t, newKey(t)), LifecycleOptions{PerAgent: 50, MaxAgents: 3})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("agent-%d", w%4)
			for range 20 {
				if _, err := lc.Emit(agent, map[string]any{"event_type": EventRelease}); err != nil {
					t.Error(err)
				}
				lc.List(agent, 5)
			}
		}()
	}
	wg.Wait()
	total := 0
	for w := range 4 {
		n := len(lc.List(fmt.Sprintf("agent-%d", w), 0))
		if n > 50 {
			t.Errorf("agent-%d holds %d entries, over the bound", w, n)
		}
		if n > 0 {
			total++
		}
	}
	if total > 3 {
		t.Errorf("%d agents kept, over the bound of 3", total)
	}
}

// TestLifecycleRecordSameBytes: an event stored by Record and signed
// when List first reads it has the envelope and audit_id Emit gives at
// the same clock reading, signed or not; concurrent first reads sign it
// once, and Record refuses a value that is not a string.
func TestLifecycleRecordSameBytes(t *testing.T) {
	for _, signed := range []bool{false, true} {
		var s *Signer
		if signed {
			s = mustSigner(t, newKey(t))
		}
		eager, err := NewLifecycle(s, LifecycleOptions{PerAgent: 4, Now: stepClock(day1, time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		lazy, err := NewLifecycle(s, LifecycleOptions{PerAgent: 4, Now: stepClock(day1, time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			ev := map[string]any{"event_type": EventProposeAccepted, "synthesis_id": fmt.Sprintf("syn-%d", i),
				"path": "/room/<&\u2028>", "contract_hash": strings.Repeat("ab", 32)}
			want, err := eager.Emit("A", ev)
			if err != nil {
				t.Fatal(err)
			}
			if err := lazy.Record("A", ev); err != nil {
				t.Fatal(err)
			}
			if len(ev) != 4 {
				t.Fatalf("Record modified the event: %v", ev)
			}
			if i%2 == 0 {
				continue // some entries first read in a batch below
			}
			var wg sync.WaitGroup
			got := make([]map[string]any, 4)
			for j := range got {
				wg.Add(1)
				go func() { defer wg.Done(); got[j] = lazy.List("A", 1)[0] }()
			}
			wg.Wait()
			for _, g := range got {
				if fmt.Sprint(g) != fmt.Sprint(want) {
					t.Fatalf("signed=%v event %d: List after Record = %v, Emit = %v", signed, i, g, want)
				}
			}
		}
		if a, b := fmt.Sprint(lazy.List("A", 0)), fmt.Sprint(eager.List("A", 0)); a != b {
			t.Errorf("signed=%v: streams differ:\n%s\n%s", signed, a, b)
		}
		if err := lazy.Record("A", map[string]any{"event_type": EventRelease, "n": 1}); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("Record of a number = %v, want ErrInvalidEvent", err)
		}
	}
}
