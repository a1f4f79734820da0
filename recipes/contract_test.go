package recipes

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestStoreLifecycle(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := NewStore(StoreLimits{MaxPerAgent: 2, TombstoneTTL: time.Hour}, clock)
	mk := func(agent string) *Contract {
		return &Contract{SynthesisID: NewSynthesisID(), Method: "BOOK", Path: "/room", OriginatingAgentID: agent, IssuedAt: now, ExpiresAt: now.Add(time.Minute)}
	}
	pending := mk("a")
	if err := s.Put(pending, StatePending); err != nil {
		t.Fatal(err)
	}
	if s.ActiveFor("a", "BOOK", "/room") != nil {
		t.Fatal("a pending contract resolved by pair")
	}
	if !s.Activate(pending) || s.ActiveFor("a", "BOOK", "/room") != pending {
		t.Fatal("accepted contract does not resolve by pair")
	}
	if s.ActiveFor("b", "BOOK", "/room") != nil {
		t.Fatal("another agent resolved a's contract")
	}
	second := mk("a")
	if err := s.Put(second, StateActive); err != nil {
		t.Fatal(err)
	}
	if s.ActiveFor("a", "BOOK", "/room") != second {
		t.Fatal("the most recent contract does not serve the pair")
	}
	var le *LimitError
	if err := s.Put(mk("a"), StateActive); !errors.As(err, &le) || !errors.Is(err, ErrAgentFull) || le.Held != 2 || le.Limit != 2 {
		t.Fatalf("third contract err = %v, want ErrAgentFull holding 2 of 2", err)
	}
	if err := s.Put(mk("b"), StateActive); err != nil {
		t.Fatalf("another agent refused: %v", err)
	}
	s.End(second.SynthesisID, StateReleased)
	if _, res := s.Lookup(second.SynthesisID); res != LookupUnknown {
		t.Fatalf("released lookup = %d, want unknown", res)
	}
	s.End(pending.SynthesisID, StateRevoked)
	if _, res := s.Lookup(pending.SynthesisID); res != LookupRevoked {
		t.Fatalf("revoked lookup = %d, want revoked", res)
	}
	late := mk("c")
	if err := s.Put(late, StateActive); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, res := s.Lookup(late.SynthesisID); res != LookupRevoked {
		t.Fatalf("expired lookup = %d, want revoked (464)", res)
	}
	now = now.Add(2 * time.Hour)
	if _, res := s.Lookup(late.SynthesisID); res != LookupUnknown {
		t.Fatalf("lookup after tombstone TTL = %d, want unknown (404)", res)
	}
	if _, res := s.Lookup("syn-never"); res != LookupUnknown {
		t.Fatal("unknown id found")
	}
}

func TestSynthesisIDs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewSynthesisID()
		if !ValidSynthesisID(id) || !strings.HasPrefix(id, "syn-") || len(id) != 26 {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "a b", "x/y", strings.Repeat("a", 129), "é"} {
		if ValidSynthesisID(bad) {
			t.Errorf("ValidSynthesisID(%q) = true", bad)
		}
	}
	_ = json.Valid
}

// TestStoreSweepEvictsInExpiryOrder: the sweep evicts exactly the expired
// contracts (from the expiry heap), leaves live ones, and an ended
// contract's heap entry is dropped without touching its tombstone.
func TestStoreSweepEvictsInExpiryOrder(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewStore(StoreLimits{TombstoneTTL: time.Hour}, func() time.Time { return now })
	var cs []*Contract
	for i, ttl := range []time.Duration{3 * time.Minute, time.Minute, 2 * time.Minute, 10 * time.Minute} {
		c := &Contract{SynthesisID: fmt.Sprintf("syn-%d", i), Method: "BOOK", Path: "/room", OriginatingAgentID: "a",
			IssuedAt: now, ExpiresAt: now.Add(ttl)}
		if err := s.Put(c, StateActive); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	s.End(cs[2].SynthesisID, StateReleased) // ended before it would expire
	now = now.Add(150 * time.Second)        // cs[1] expired; cs[2] was released
	var live []string
	for _, c := range s.List("") {
		live = append(live, c.SynthesisID)
	}
	if fmt.Sprint(live) != "[syn-0 syn-3]" {
		t.Fatalf("live after sweep = %v, want [syn-0 syn-3]", live)
	}
	if _, res := s.Lookup("syn-1"); res != LookupRevoked {
		t.Fatalf("expired contract lookup = %d, want revoked", res)
	}
	if _, res := s.Lookup("syn-2"); res != LookupUnknown {
		t.Fatalf("released contract lookup = %d, want unknown", res)
	}
}

// TestValidSynthesisIDMatchesPattern holds the byte loop equal to the
// grammar's regexp for every byte and for the length bounds.
func TestValidSynthesisIDMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)
	for c := 0; c < 256; c++ {
		s := "syn-" + string([]byte{byte(c)})
		if got, want := ValidSynthesisID(s), re.MatchString(s); got != want {
			t.Errorf("ValidSynthesisID(%q) = %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"", "a", strings.Repeat("a", 128), strings.Repeat("a", 129), "syn-UAnHZX7sOG7zkqfyKqWafw", "syn é"} {
		if got, want := ValidSynthesisID(s), re.MatchString(s); got != want {
			t.Errorf("ValidSynthesisID(%q) = %v, want %v", s, got, want)
		}
	}
}
