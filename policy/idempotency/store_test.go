package idempotency

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var (
	fpA = Fingerprint("BOOK", "/rooms/1", []byte(`{"n":1}`))
	fpB = Fingerprint("BOOK", "/rooms/1", []byte(`{"n":2}`))
)

// mustExecute claims (agent, key) and fails unless the outcome is Execute.
func mustExecute(t *testing.T, s *Store, agent, key, fp string) *Claim {
	t.Helper()
	o, resp, c := s.Claim(agent, key, fp)
	if o != Execute || resp != nil || c == nil {
		t.Fatalf("Claim(%q, %q) = %v, %v, %v; want execute with a claim", agent, key, o, resp, c)
	}
	return c
}

func TestNewStoreDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Limits
		want Limits
	}{
		{name: "zero", in: Limits{}, want: Limits{Window: DefaultWindow, Lease: DefaultLease, MaxRecords: DefaultMaxRecords, MaxPerAgent: DefaultMaxPerAgent}},
		{name: "negative", in: Limits{Window: -1, Lease: -1, MaxRecords: -1, MaxPerAgent: -1}, want: Limits{Window: DefaultWindow, Lease: DefaultLease, MaxRecords: DefaultMaxRecords, MaxPerAgent: DefaultMaxPerAgent}},
		{name: "set", in: Limits{Window: time.Minute, Lease: time.Second, MaxRecords: 5, MaxPerAgent: 2}, want: Limits{Window: time.Minute, Lease: time.Second, MaxRecords: 5, MaxPerAgent: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewStore(tt.in, nil).Limits(); got != tt.want {
				t.Errorf("Limits() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestExecuteCompleteReplay(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{}, clk.Now)
	c := mustExecute(t, s, "agent-a", "k1", fpA)

	body := []byte(`{"status":"booked","synthesis_id":"syn-1"}`)
	sent := Response{
		Status: 461,
		Header: map[string]string{
			"contract-synthesized": "syn-1",
			"Content-Type":         "application/json",
			"Location":             "/bookings/7",
			"Response-ID":          "r-1",
			"Set-Cookie":           "x=y",
		},
		Body:     body,
		Contract: ContractRef{SynthesisID: "syn-1", ContractHash: "ab12", NegotiationOrigin: "rcns-gate"},
	}
	c.Complete(sent)
	// The caller reusing its buffers must not change the record.
	body[0] = 'X'
	sent.Header["Content-Type"] = "text/plain"

	want := &Response{
		Status: 461,
		Header: map[string]string{ // Contract-Synthesized is Contract's
			"Content-Type": "application/json",
			"Location":     "/bookings/7",
		},
		Body:     []byte(`{"status":"booked","synthesis_id":"syn-1"}`),
		Contract: ContractRef{SynthesisID: "syn-1", ContractHash: "ab12", NegotiationOrigin: "rcns-gate"},
	}
	for i := range 2 {
		o, got, claim := s.Claim("agent-a", "k1", fpA)
		if o != Replay || claim != nil {
			t.Fatalf("replay %d: Claim = %v, claim %v; want replay, no claim", i, o, claim)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("replay %d: response = %+v, want %+v", i, got, want)
		}
		if !bytes.Equal(got.Body, want.Body) {
			t.Fatalf("replay %d: body %q, want %q", i, got.Body, want.Body)
		}
		// Mutating a replayed copy must not leak into the store.
		got.Body[0] = 'Y'
		got.Header["Location"] = "/elsewhere"
	}
	if n := s.Len(); n != 1 {
		t.Errorf("Len() = %d, want 1", n)
	}
}

func TestClaimOutcomes(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{}, clk.Now)
	inflight := mustExecute(t, s, "agent-a", "busy", fpA)
	defer inflight.Abandon()
	done := mustExecute(t, s, "agent-a", "done", fpA)
	done.Complete(Response{Status: 500, Body: []byte("upstream failed")})

	tests := []struct {
		name     string
		agent    string
		key      string
		fp       string
		want     Outcome
		wantBody string
	}{
		{name: "replay stores a failure too", agent: "agent-a", key: "done", fp: fpA, want: Replay, wantBody: "upstream failed"},
		{name: "stored, other fingerprint", agent: "agent-a", key: "done", fp: fpB, want: Mismatch},
		{name: "in flight, same fingerprint", agent: "agent-a", key: "busy", fp: fpA, want: InFlight},
		{name: "in flight, other fingerprint", agent: "agent-a", key: "busy", fp: fpB, want: Mismatch},
		{name: "same key, other agent", agent: "agent-b", key: "busy", fp: fpB, want: Execute},
		{name: "stored key, other agent", agent: "agent-b", key: "done", fp: fpA, want: Execute},
		{name: "new key", agent: "agent-a", key: "fresh", fp: fpA, want: Execute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, resp, c := s.Claim(tt.agent, tt.key, tt.fp)
			defer c.Abandon()
			if o != tt.want {
				t.Fatalf("Claim(%q, %q) = %v, want %v", tt.agent, tt.key, o, tt.want)
			}
			if (c != nil) != (tt.want == Execute) {
				t.Errorf("claim = %v for outcome %v", c, o)
			}
			if (resp != nil) != (tt.want == Replay) {
				t.Errorf("response = %v for outcome %v", resp, o)
			}
			if resp != nil && (resp.Status != 500 || string(resp.Body) != tt.wantBody) {
				t.Errorf("response = %d %q, want 500 %q", resp.Status, resp.Body, tt.wantBody)
			}
		})
	}
}

func TestConcurrentClaimsOneExecute(t *testing.T) {
	for _, complete := range []bool{false, true} {
		t.Run(fmt.Sprintf("complete=%v", complete), func(t *testing.T) {
			s := NewStore(Limits{}, newClock().Now)
			const n = 64
			var (
				ready, start sync.WaitGroup
				wg           sync.WaitGroup
				mu           sync.Mutex
				counts       = map[Outcome]int{}
			)
			ready.Add(n)
			start.Add(1)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ready.Done()
					start.Wait()
					o, resp, c := s.Claim("agent-a", "k", fpA)
					if o == Execute && complete {
						c.Complete(Response{Status: 200, Body: []byte("ok")})
					}
					if o == Replay && string(resp.Body) != "ok" {
						t.Errorf("replayed body %q", resp.Body)
					}
					mu.Lock()
					counts[o]++
					mu.Unlock()
				}()
			}
			ready.Wait()
			start.Done()
			wg.Wait()
			if counts[Execute] != 1 {
				t.Fatalf("outcomes %v: want exactly one execute", counts)
			}
			others := counts[InFlight] + counts[Replay]
			if others != n-1 {
				t.Fatalf("outcomes %v: want %d in-flight or replay", counts, n-1)
			}
			if !complete && counts[Replay] != 0 {
				t.Fatalf("outcomes %v: replay without a completed request", counts)
			}
		})
	}
}

func TestCompleteAndAbandonOnce(t *testing.T) {
	tests := []struct {
		name      string
		finish    func(c *Claim)
		wantAfter Outcome
		wantLen   int
	}{
		{name: "abandon lets a later claim execute", finish: func(c *Claim) { c.Abandon() }, wantAfter: Execute, wantLen: 0},
		{name: "abandon twice", finish: func(c *Claim) { c.Abandon(); c.Abandon() }, wantAfter: Execute, wantLen: 0},
		{name: "complete then abandon keeps the response", finish: func(c *Claim) {
			c.Complete(Response{Status: 201})
			c.Abandon()
		}, wantAfter: Replay, wantLen: 1},
		{name: "second complete is a no-op", finish: func(c *Claim) {
			c.Complete(Response{Status: 201})
			c.Complete(Response{Status: 500})
		}, wantAfter: Replay, wantLen: 1},
		{name: "complete after abandon is a no-op", finish: func(c *Claim) {
			c.Abandon()
			c.Complete(Response{Status: 500})
		}, wantAfter: Execute, wantLen: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(Limits{}, newClock().Now)
			c := mustExecute(t, s, "agent-a", "k", fpA)
			tt.finish(c)
			if n := s.Len(); n != tt.wantLen {
				t.Errorf("Len() after finish = %d, want %d", n, tt.wantLen)
			}
			o, resp, c2 := s.Claim("agent-a", "k", fpA)
			defer c2.Abandon()
			if o != tt.wantAfter {
				t.Fatalf("Claim after finish = %v, want %v", o, tt.wantAfter)
			}
			if o == Replay && resp.Status != 201 {
				t.Errorf("replayed status %d, want 201", resp.Status)
			}
		})
	}
	var nilClaim *Claim
	nilClaim.Complete(Response{})
	nilClaim.Abandon()
}

func TestWindowExpiry(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour}, clk.Now)
	c := mustExecute(t, s, "agent-a", "k", fpA)
	clk.Advance(30 * time.Minute) // window counts from Complete
	c.Complete(Response{Status: 200, Body: []byte("first")})

	steps := []struct {
		name    string
		advance time.Duration
		fp      string
		want    Outcome
		wantLen int
	}{
		{name: "inside window", advance: 59 * time.Minute, fp: fpA, want: Replay, wantLen: 1},
		{name: "mismatch inside window", advance: 0, fp: fpB, want: Mismatch, wantLen: 1},
		{name: "last nanosecond", advance: time.Minute - 1, fp: fpA, want: Replay, wantLen: 1},
		{name: "expired: other fingerprint executes", advance: 1, fp: fpB, want: Execute, wantLen: 1},
	}
	for _, st := range steps {
		clk.Advance(st.advance)
		o, _, c := s.Claim("agent-a", "k", st.fp)
		if o != st.want {
			t.Fatalf("%s: Claim = %v, want %v", st.name, o, st.want)
		}
		if n := s.Len(); n != st.wantLen {
			t.Errorf("%s: Len() = %d, want %d", st.name, n, st.wantLen)
		}
		c.Abandon()
	}
}

func TestSweepDropsExpired(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Minute, MaxRecords: 10, MaxPerAgent: 10}, clk.Now)
	for i := range 10 {
		mustExecute(t, s, fmt.Sprintf("agent-%d", i%3), fmt.Sprintf("k%d", i), fpA).Complete(Response{Status: 200})
		clk.Advance(time.Second)
	}
	if o, _, _ := s.Claim("agent-new", "k", fpA); o != StoreFull {
		t.Fatalf("Claim on a full store = %v, want store-full", o)
	}
	clk.Advance(time.Minute - 10*time.Second + 4*time.Second) // the first 5 expire
	if n := s.Len(); n != 5 {
		t.Fatalf("Len() = %d, want 5 after the oldest expired", n)
	}
	mustExecute(t, s, "agent-new", "k", fpA).Abandon()
	clk.Advance(time.Hour)
	if n := s.Len(); n != 0 {
		t.Errorf("Len() = %d after every window passed, want 0", n)
	}
	if len(s.byAgent) != 0 || s.order.Len() != 0 {
		t.Errorf("indexes not emptied: %d agents, %d in order", len(s.byAgent), s.order.Len())
	}
}

func TestUncompletedClaimExpires(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour}, clk.Now)
	stale := mustExecute(t, s, "agent-a", "k", fpA)
	clk.Advance(DefaultLease + time.Hour) // its lease, then the window of its outcome-unknown record
	fresh := mustExecute(t, s, "agent-a", "k", fpA)
	stale.Complete(Response{Status: 500}) // lost its hold: no-op
	stale.Abandon()                       // must not release fresh's hold
	if o, _, _ := s.Claim("agent-a", "k", fpA); o != InFlight {
		t.Fatalf("Claim while fresh holds the key = %v, want in-flight", o)
	}
	fresh.Complete(Response{Status: 200})
	if o, resp, _ := s.Claim("agent-a", "k", fpA); o != Replay || resp.Status != 200 {
		t.Fatalf("Claim = %v %+v, want replay of 200", o, resp)
	}
}

func TestPerAgentFull(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour, MaxRecords: 100, MaxPerAgent: 3}, clk.Now)
	held := mustExecute(t, s, "agent-a", "k0", fpA) // in flight counts too
	for i := 1; i < 3; i++ {
		mustExecute(t, s, "agent-a", fmt.Sprintf("k%d", i), fpA).Complete(Response{Status: 200})
	}
	tests := []struct {
		name  string
		agent string
		key   string
		want  Outcome
	}{
		{name: "agent at its share", agent: "agent-a", key: "k9", want: AgentFull},
		{name: "its stored keys still replay", agent: "agent-a", key: "k1", want: Replay},
		{name: "its in-flight key still answers", agent: "agent-a", key: "k0", want: InFlight},
		{name: "another agent is unaffected", agent: "agent-b", key: "k9", want: Execute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _, c := s.Claim(tt.agent, tt.key, fpA)
			defer c.Abandon()
			if o != tt.want {
				t.Errorf("Claim(%q, %q) = %v, want %v", tt.agent, tt.key, o, tt.want)
			}
		})
	}
	held.Abandon()
	mustExecute(t, s, "agent-a", "k9", fpA).Abandon()
}

func TestGlobalFull(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour, MaxRecords: 4, MaxPerAgent: 3}, clk.Now)
	for i := range 4 {
		mustExecute(t, s, fmt.Sprintf("agent-%d", i%2), fmt.Sprintf("k%d", i), fpA).Complete(Response{Status: 200})
	}
	if o, _, _ := s.Claim("agent-c", "k", fpA); o != StoreFull {
		t.Fatalf("Claim on a full store = %v, want full", o)
	}
	clk.Advance(time.Hour)
	mustExecute(t, s, "agent-c", "k", fpA)
	if n := s.Len(); n != 1 {
		t.Errorf("Len() = %d, want 1", n)
	}
}

func TestOutcomeString(t *testing.T) {
	tests := []struct {
		name string
		o    Outcome
		want string
	}{
		{name: "execute", o: Execute, want: "execute"},
		{name: "replay", o: Replay, want: "replay"},
		{name: "mismatch", o: Mismatch, want: "mismatch"},
		{name: "in flight", o: InFlight, want: "in-flight"},
		{name: "agent full", o: AgentFull, want: "agent-full"},
		{name: "store full", o: StoreFull, want: "store-full"},
		{name: "unknown", o: Outcome(42), want: "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// ClaimConfirming: a presentation of the contract whose 461 preview the
// key stored (same fingerprint) takes the key over instead of replaying
// the preview. Abandon restores the preview with its expiry; Complete
// replaces it, and the key then replays the confirmation's answer. A
// stored 263, another contract's preview, another fingerprint and a
// presentation of nothing keep Claim's outcomes.
func TestClaimConfirming(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour}, clk.Now)
	preview := Response{Status: PreviewStatus, Body: []byte(`{"status":461}`), Previewed: "syn-1"}
	mustExecute(t, s, "a", "k", fpA).Complete(preview)
	expires := s.byAgent["a"]["k"].expires

	if o, resp, _ := s.ClaimConfirming("a", "k", fpA, "", true); o != Replay || resp.Status != PreviewStatus {
		t.Fatalf("no contract presented: %v %v; want the 461 replayed", o, resp)
	}
	if o, resp, _ := s.ClaimConfirming("a", "k", fpA, "syn-2", true); o != OtherContract {
		t.Fatalf("another contract presented under syn-1's preview: %v %v; want other-contract (not syn-1's 461)", o, resp)
	}
	if o, _, _ := s.ClaimConfirming("a", "k", fpA, "syn-2", false); o != OtherContract {
		t.Fatalf("another, already confirmed, contract under syn-1's preview: %v; want other-contract", o)
	}
	if o, resp, _ := s.ClaimConfirming("a", "k", fpA, "syn-1", false); o != Replay || resp.Status != PreviewStatus {
		t.Fatalf("syn-1 no longer pending (confirmed under another key): %v %v; want its 461 replayed, nothing run", o, resp)
	}
	if o, _, _ := s.ClaimConfirming("a", "k", fpB, "syn-1", true); o != Mismatch {
		t.Fatalf("another body: %v; want mismatch", o)
	}
	if o, _, _ := s.ClaimConfirming("b", "k", fpA, "syn-1", true); o != Execute {
		t.Fatalf("another agent's key: %v; want execute (unrelated)", o)
	}

	// Refused before it ran: the preview is back, as it was.
	clk.Advance(time.Minute)
	o, _, c := s.ClaimConfirming("a", "k", fpA, "syn-1", true)
	if o != Execute || c == nil || c.Preview() == nil || c.Preview().Previewed != "syn-1" {
		t.Fatalf("confirmation: %v (preview %v); want execute holding syn-1's preview", o, c.Preview())
	}
	if o, _, _ := s.Claim("a", "k", fpA); o != InFlight {
		t.Fatalf("while the confirmation runs: %v; want in-flight", o)
	}
	if o, _, _ := s.ClaimConfirming("a", "k", fpA, "syn-1", true); o != InFlight {
		t.Fatalf("a second confirmation while the first runs: %v; want in-flight", o)
	}
	c.Abandon()
	if o, resp, _ := s.Claim("a", "k", fpA); o != Replay || !bytes.Equal(resp.Body, preview.Body) || resp.Previewed != "syn-1" {
		t.Fatalf("after an abandoned confirmation: %v %+v; want the preview replayed", o, resp)
	}
	if got := s.byAgent["a"]["k"].expires; !got.Equal(expires) {
		t.Errorf("restored preview expires %v, want its own %v", got, expires)
	}
	assertExpiryOrder(t, s)
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2 (a's record and b's claim)", s.Len())
	}

	// Run: the answer replaces the preview, for every later repeat.
	_, _, c = s.ClaimConfirming("a", "k", fpA, "syn-1", true)
	c.Complete(Response{Status: 200, Body: []byte(`{"status":200}`), Contract: ContractRef{SynthesisID: "syn-1"}})
	for _, presented := range []string{"", "syn-1"} {
		if o, resp, _ := s.ClaimConfirming("a", "k", fpA, presented, true); o != Replay || resp.Status != 200 || resp.Contract.SynthesisID != "syn-1" {
			t.Fatalf("after the confirmation ran, presenting %q: %v %+v; want its 200 replayed", presented, o, resp)
		}
	}

	// A stored 263 (it ran, and names its contract) is replayed to a
	// presentation of that contract: nothing runs twice.
	mustExecute(t, s, "a", "k263", fpA).Complete(Response{Status: 263, Contract: ContractRef{SynthesisID: "syn-3"}})
	if o, resp, _ := s.ClaimConfirming("a", "k263", fpA, "syn-3", false); o != Replay || resp.Status != 263 {
		t.Fatalf("presenting a 263's contract with its key: %v %v; want the 263 replayed", o, resp)
	}
	if o, _, _ := s.ClaimConfirming("a", "k263", fpA, "syn-4", false); o != OtherContract {
		t.Fatalf("presenting another contract with a 263's key: %v; want other-contract", o)
	}

	// A confirmation near the end of the preview's window holds the key
	// for a whole window: a second one after the preview's expiry meets
	// the hold, not a free key (two runs, reviewed with a 5 s window).
	mustExecute(t, s, "a", "klate", fpA).Complete(preview)
	clk.Advance(time.Hour - time.Second)
	if o, _, _ := s.ClaimConfirming("a", "klate", fpA, "syn-1", true); o != Execute {
		t.Fatalf("confirmation a second before the preview expires: %v; want execute", o)
	}
	clk.Advance(2 * time.Second)
	for _, presented := range []string{"syn-1", ""} {
		if o, _, _ := s.ClaimConfirming("a", "klate", fpA, presented, true); o != InFlight {
			t.Fatalf("past the preview's expiry, while the confirmation runs (presenting %q): %v; want in-flight", presented, o)
		}
	}
	assertExpiryOrder(t, s)

	// An expired preview is not taken over: the key is new again.
	mustExecute(t, s, "a", "kold", fpA).Complete(preview)
	clk.Advance(2 * time.Hour)
	if o, _, c := s.ClaimConfirming("a", "kold", fpA, "syn-1", true); o != Execute || c.preview != nil {
		t.Fatalf("expired preview: %v (preview kept: %v); want a fresh execute", o, c != nil && c.preview != nil)
	}
}

// An abandoned confirmation puts the restored preview back in its place
// of the expiry order, before the records that expire later.
func TestClaimConfirmingAbandonKeepsOrder(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour}, clk.Now)
	mustExecute(t, s, "a", "kx", fpA).Complete(Response{Status: PreviewStatus, Previewed: "syn-x"})
	clk.Advance(10 * time.Minute)
	mustExecute(t, s, "a", "ky", fpA).Complete(Response{Status: 200})
	clk.Advance(10 * time.Minute)
	o, _, c := s.ClaimConfirming("a", "kx", fpA, "syn-x", true)
	if o != Execute {
		t.Fatalf("confirmation: %v; want execute", o)
	}
	c.Abandon()
	assertExpiryOrder(t, s)
	if front := s.order.Front().Value.(*record); front.key != "kx" {
		t.Errorf("front of the expiry order is %s, want kx (it expires first)", front.key)
	}
	clk.Advance(41 * time.Minute) // kx's window is over, ky's is not
	if n := s.Len(); n != 1 {
		t.Errorf("Len after kx expired = %d, want 1 (pruned from the head)", n)
	}
}

// assertExpiryOrder checks each of the store's expiry lists (stored
// answers, in-flight claims) runs from the earliest expiry to the
// latest, which prune relies on.
func assertExpiryOrder(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, l := range map[string]*list.List{"stored": s.order, "in flight": s.flight} {
		var prev time.Time
		for e := l.Front(); e != nil; e = e.Next() {
			r := e.Value.(*record)
			if r.expires.Before(prev) {
				t.Fatalf("%s expiry order broken: %s/%s expires %v after a record expiring %v", name, r.agent, r.key, r.expires, prev)
			}
			prev = r.expires
		}
	}
}

// A claim held longer than Window (its Lease) does not keep stored
// answers completed after it from expiring: they are in their own
// expiry order, so they leave at the end of their window and free
// their room (they counted towards MaxRecords behind a slow request,
// giving a false store-full; fourth review).
func TestInFlightHoldKeepsStoredExpiring(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Minute, Lease: time.Hour, MaxRecords: 3}, clk.Now)
	slow := mustExecute(t, s, "a", "slow", fpA) // still running
	mustExecute(t, s, "a", "k1", fpA).Complete(Response{Status: 200})
	mustExecute(t, s, "b", "k2", fpA).Complete(Response{Status: 200})
	assertExpiryOrder(t, s)
	clk.Advance(2 * time.Minute)
	if n := s.Len(); n != 1 {
		t.Errorf("Len = %d two minutes on, want 1 (the slow claim; k1 and k2 expired)", n)
	}
	if o, _, c := s.Claim("a", "k3", fpA); o != Execute {
		t.Fatalf("a new key with two records expired: %v; want execute", o)
	} else {
		c.Abandon()
	}
	if o, _, _ := s.Claim("a", "slow", fpA); o != InFlight {
		t.Fatalf("the slow request's key: %v; want still in flight", o)
	}
	slow.Complete(Response{Status: 200})
	assertExpiryOrder(t, s)
}

// A confirmation holds its key for its lease when that is longer than
// Window, as any claim does; a stored answer that names no
// contract is replayed to a presentation (nothing to tell apart).
func TestClaimConfirmingHold(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: 5 * time.Second, Lease: time.Minute}, clk.Now)
	mustExecute(t, s, "a", "k", fpA).Complete(Response{Status: PreviewStatus, Previewed: "syn-1"})
	if o, _, _ := s.ClaimConfirming("a", "k", fpA, "syn-1", true); o != Execute {
		t.Fatalf("confirmation: %v; want execute", o)
	}
	clk.Advance(30 * time.Second)
	if o, _, _ := s.ClaimConfirming("a", "k", fpA, "syn-1", true); o != InFlight {
		t.Fatalf("30 s into the confirmation (window 5 s, hold 1 min): %v; want in-flight", o)
	}
	mustExecute(t, s, "a", "plain", fpA).Complete(Response{Status: 422})
	if o, resp, _ := s.ClaimConfirming("a", "plain", fpA, "syn-9", false); o != Replay || resp.Status != 422 {
		t.Fatalf("presentation under a key whose answer names no contract: %v %v; want its 422 replayed", o, resp)
	}
	assertExpiryOrder(t, s)
}

// Lease: a claim holds its key for its lease while its request runs,
// even past a shorter Window (a plan outlasting a 5 s window ran twice
// under one key; third fresh-user review); the answer it stores is then
// replayed for Window from Complete.
func TestLeaseOutlastsWindow(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: 5 * time.Second, Lease: time.Minute}, clk.Now)
	c := mustExecute(t, s, "a", "k", fpA)
	clk.Advance(10 * time.Second)
	if o, _, _ := s.Claim("a", "k", fpA); o != InFlight {
		t.Fatalf("10 s into a run under a 5 s window: %v; want in-flight", o)
	}
	c.Complete(Response{Status: 200})
	clk.Advance(4 * time.Second)
	if o, _, _ := s.Claim("a", "k", fpA); o != Replay {
		t.Fatalf("4 s after Complete: %v; want replay", o)
	}
	clk.Advance(2 * time.Second)
	if o, _, c := s.Claim("a", "k", fpA); o != Execute {
		t.Fatalf("6 s after Complete (window 5 s): %v; want a fresh execute", o)
	} else {
		c.Abandon()
	}
}

// A lease that ends with no answer (the node running the request died)
// makes the key outcome-unknown for the window from the lease's end:
// never executed again by a repeat, and never left in flight. The
// holder's late Complete still stores its answer; Renew keeps a running
// request's key in flight.
func TestLeaseEndsOutcomeUnknown(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour, Lease: 10 * time.Second}, clk.Now)
	holder := Holder{Node: "node-a", What: "BOOK /room"}
	r := s.ClaimWith(ClaimRequest{AgentID: "a", Key: "k", Fingerprint: fpA, Holder: holder})
	if r.Outcome != Execute {
		t.Fatalf("first claim: %v", r.Outcome)
	}
	claimedAt := clk.Now()
	clk.Advance(4 * time.Second)
	in := s.ClaimWith(ClaimRequest{AgentID: "a", Key: "k", Fingerprint: fpA})
	if in.Outcome != InFlight || in.Hold == nil || in.Hold.Node != "node-a" || in.Hold.What != "BOOK /room" ||
		!in.Hold.ClaimedAt.Equal(claimedAt) || in.Hold.LeaseEnds.Sub(clk.Now()) != 6*time.Second {
		t.Fatalf("4 s in: %+v %+v; want in-flight, 6 s of lease left, naming node-a", in.Outcome, in.Hold)
	}
	clk.Advance(7 * time.Second)
	un := s.ClaimWith(ClaimRequest{AgentID: "a", Key: "k", Fingerprint: fpA})
	if un.Outcome != OutcomeUnknown || un.Hold == nil || un.Hold.Node != "node-a" {
		t.Fatalf("past the lease: %+v; want outcome-unknown naming node-a", un)
	}
	if st, ok := s.Peek("a", "k"); !ok || st.State != StateOutcomeUnknown {
		t.Fatalf("Peek = %+v %v; want outcome-unknown", st, ok)
	}
	// Another fingerprint under the key is still a mismatch.
	if o, _, _ := s.Claim("a", "k", fpB); o != Mismatch {
		t.Fatalf("other fingerprint: %v; want mismatch", o)
	}
	// Still outcome-unknown until the window from the lease's end.
	clk.Advance(time.Hour - 2*time.Second)
	if o, _, _ := s.Claim("a", "k", fpA); o != OutcomeUnknown {
		t.Fatalf("59 min on: %v; want outcome-unknown", o)
	}
	// The holder came back: its answer is stored and replayed.
	if !r.Claim.Complete(Response{Status: 200, Body: []byte(`{"late":true}`)}) {
		t.Fatal("the holder's late Complete stored nothing")
	}
	if o, resp, _ := s.Claim("a", "k", fpA); o != Replay || string(resp.Body) != `{"late":true}` {
		t.Fatalf("after the late Complete: %v %v; want its answer replayed", o, resp)
	}

	// Renew keeps a long request in flight, past several leases.
	c := mustExecute(t, s, "a", "long", fpA)
	for range 5 {
		clk.Advance(8 * time.Second)
		if !c.Renew(0) {
			t.Fatal("Renew of a held claim reported it lost")
		}
	}
	if o, _, _ := s.Claim("a", "long", fpA); o != InFlight {
		t.Fatalf("renewed for 40 s under a 10 s lease: %v; want in-flight", o)
	}
	c.Complete(Response{Status: 200})
	if c.Renew(0) {
		t.Fatal("Renew after Complete reported the claim held")
	}
	assertExpiryOrder(t, s)
}

// Release and Resolve settle an outcome-unknown key only: a key still
// running, answered or unknown is refused and unchanged.
func TestReleaseResolve(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour, Lease: 10 * time.Second}, clk.Now)
	if _, err := s.Release("a", "none"); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("Release of an unknown key: %v; want ErrNoRecord", err)
	}
	running := mustExecute(t, s, "a", "run", fpA)
	if st, err := s.Release("a", "run"); !errors.Is(err, ErrLeaseLive) || st.State != StateInFlight {
		t.Fatalf("Release of a running key: %+v %v; want ErrLeaseLive", st, err)
	}
	mustExecute(t, s, "a", "done", fpA).Complete(Response{Status: 200})
	if _, err := s.Resolve("a", "done", Response{Status: 500}); !errors.Is(err, ErrAnswered) {
		t.Fatalf("Resolve of an answered key: %v; want ErrAnswered", err)
	}
	stuck := mustExecute(t, s, "a", "stuck", fpA)
	mustExecute(t, s, "a", "ran", fpA)
	clk.Advance(11 * time.Second)
	if st, err := s.Release("a", "stuck"); err != nil || st.State != StateOutcomeUnknown {
		t.Fatalf("Release of an outcome-unknown key: %+v %v", st, err)
	}
	if stuck.Complete(Response{Status: 200}) {
		t.Fatal("a released claim's Complete stored its answer")
	}
	if o, _, c := s.Claim("a", "stuck", fpA); o != Execute {
		t.Fatalf("after Release: %v; want execute", o)
	} else {
		c.Abandon()
	}
	if _, err := s.Resolve("a", "ran", Response{Status: 200, Body: []byte(`{"resolved":true}`)}); err != nil {
		t.Fatal(err)
	}
	if o, resp, _ := s.Claim("a", "ran", fpA); o != Replay || string(resp.Body) != `{"resolved":true}` {
		t.Fatalf("after Resolve: %v %v; want the operator's answer replayed", o, resp)
	}
	running.Abandon()
	assertExpiryOrder(t, s)
}

// TestSetLimitsKeepsRecords: new bounds apply in place (a reload): a
// claim in flight stays in flight (its repeat is not run again) and its
// answer is stored and replayed; lowered bounds refuse new claims while
// the records held exceed them. Before, the memory store started a new
// Store, and a running request's repeat ran again.
func TestSetLimitsKeepsRecords(t *testing.T) {
	s := NewStore(Limits{}, nil)
	r := s.ClaimWith(ClaimRequest{AgentID: "a", Key: "running", Fingerprint: "fp"})
	if r.Outcome != Execute {
		t.Fatalf("claim: %v", r.Outcome)
	}
	s.SetLimits(Limits{Window: 2 * time.Hour, MaxRecords: 1})
	if got := s.Limits(); got.Window != 2*time.Hour || got.MaxRecords != 1 || got.Lease != DefaultLease || got.MaxPerAgent != DefaultMaxPerAgent {
		t.Fatalf("Limits after SetLimits: %+v, want the new window and record bound, defaults for the rest", got)
	}
	if again := s.ClaimWith(ClaimRequest{AgentID: "a", Key: "running", Fingerprint: "fp"}); again.Outcome != InFlight {
		t.Fatalf("a repeat of the running request after SetLimits: %v, want InFlight", again.Outcome)
	}
	if other := s.ClaimWith(ClaimRequest{AgentID: "b", Key: "new", Fingerprint: "fp"}); other.Outcome != StoreFull {
		t.Fatalf("a new key with MaxRecords lowered to the records held: %v, want StoreFull", other.Outcome)
	}
	r.Claim.Complete(Response{Status: 200, Body: []byte("once")})
	if rep := s.ClaimWith(ClaimRequest{AgentID: "a", Key: "running", Fingerprint: "fp"}); rep.Outcome != Replay || string(rep.Response.Body) != "once" {
		t.Fatalf("the repeat once answered: %v, want the answer replayed", rep.Outcome)
	}
}

// TestSetLimitsWindowAppliesToAll: a shorter Window applies to the
// records already held (counted from their answers), so the sweep drops
// them as well as the newer ones; before, a record written under the
// longer window stayed at the head of the expiry order and kept every
// newer record counted behind it (review: 503 idempotency-store-full
// for a day after a reload that shortened the window).
func TestSetLimitsWindowAppliesToAll(t *testing.T) {
	clk := newClock()
	s := NewStore(Limits{Window: time.Hour, MaxPerAgent: 3}, clk.Now)
	complete := func(key string) {
		t.Helper()
		r := s.ClaimWith(ClaimRequest{AgentID: "a", Key: key, Fingerprint: "fp"})
		if r.Outcome != Execute {
			t.Fatalf("claim %s: %v", key, r.Outcome)
		}
		r.Claim.Complete(Response{Status: 200})
	}
	complete("under-an-hour")
	s.SetLimits(Limits{Window: time.Second, MaxPerAgent: 3})
	complete("b")
	complete("c")
	clk.Advance(2 * time.Second)
	if n := s.Len(); n != 0 {
		t.Fatalf("%d records held 2 s after their answers under a 1 s window, want none", n)
	}
	complete("d")
	complete("e")
	s.SetLimits(Limits{Window: time.Hour, MaxPerAgent: 3})
	clk.Advance(10 * time.Second)
	if n := s.Len(); n != 2 {
		t.Fatalf("%d records held after the window grew back to an hour, want 2", n)
	}
}
