package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestLogBudget: per (agent, reason), LogBurst lines per LogWindow;
// the next line written after a held-back run says how many were held
// back; keys do not share a budget; the key count stays bounded.
func TestLogBudget(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := newLogBudget(func() time.Time { return now })
	for _, tc := range []struct {
		name           string
		agent, reason  string
		n, wantWritten int
	}{
		{"one key floods", "a", "invalid-json", 100, LogBurst},
		{"same agent, another reason", "a", "scope-required", 3, 3},
		{"another agent, same reason", "b", "invalid-json", 100, LogBurst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			written := 0
			for range tc.n {
				if ok, _ := b.take(tc.agent, tc.reason); ok {
					written++
				}
			}
			if written != tc.wantWritten {
				t.Fatalf("%d lines written of %d, want %d", written, tc.n, tc.wantWritten)
			}
		})
	}
	now = now.Add(LogWindow)
	ok, suppressed := b.take("a", "invalid-json")
	if !ok || suppressed != 100-LogBurst {
		t.Fatalf("first line of the next window: written %v, suppressed %d, want true and %d", ok, suppressed, 100-LogBurst)
	}
	for i := range 2 * logBudgetKeys {
		b.take(fmt.Sprintf("agent-%d", i), "invalid-json")
	}
	if n := len(b.keys); n > logBudgetKeys+1 {
		t.Fatalf("%d keys tracked, want at most %d", n, logBudgetKeys+1)
	}
}
