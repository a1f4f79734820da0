package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Idempotency-Key (RCNS §12.2, OP-15; ARCHITECTURE.md "Idempotency";
// spec §24 items 53–54).

// assertReplay checks that r replays first: identical status, body bytes,
// Content-Type and Contract-Synthesized, Idempotent-Replayed: true, and
// a fresh Response-ID and Attribution-Record.
func assertReplay(t testing.TB, first, r *Resp) {
	t.Helper()
	if r.Status != first.Status {
		t.Fatalf("replay status %d, first %d:\n%s", r.Status, first.Status, r)
	}
	if !bytes.Equal(r.Body, first.Body) {
		t.Errorf("replay body differs from the first answer:\nfirst:  %s\nreplay: %s", first.Body, r.Body)
	}
	if got := r.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("Idempotent-Replayed = %q, want true:\n%s", got, r)
	}
	for _, h := range []string{"Content-Type", "Contract-Synthesized"} {
		if r.Header.Get(h) != first.Header.Get(h) {
			t.Errorf("replay %s = %q, first %q", h, r.Header.Get(h), first.Header.Get(h))
		}
	}
	assertAGTPHeaders(t, r)
	if a, b := r.Header.Get("Response-ID"), first.Header.Get("Response-ID"); a == "" || a == b {
		t.Errorf("replay Response-ID %q is not fresh (first %q)", a, b)
	}
	if r.Header.Get("Attribution-Record") == first.Header.Get("Attribution-Record") {
		t.Errorf("replay reuses the first Attribution-Record")
	}
}

// assertExecuted checks that r was not a replay.
func assertExecuted(t testing.TB, r *Resp) {
	t.Helper()
	if v := r.Header.Get("Idempotent-Replayed"); v != "" {
		t.Errorf("a first execution carries Idempotent-Replayed: %s\n%s", v, r)
	}
}

// Replays through the gate, Tier C and Tier B in optimistic mode; no
// upstream call, no contract and no rate-limit spend on replay
// (rate_limit rcns 2 2).
func TestIdempotencyReplay(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\trate_limit rcns 2 2\n"})
	g := w.GW

	// §24 53: the gate synthesis replays.
	first := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "book-1")
	b := assertContractBody(t, first, 263, "BOOK", "/room", recipeName, recipeVer)
	assertExecuted(t, first)
	id := str(b, "synthesis_id")
	w.assertReservations(t, 1)
	calls := w.Hotel.Count()

	t.Run("gate replays", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "book-1")
			assertReplay(t, first, r)
			if str(r.Object(t), "synthesis_id") != id {
				t.Fatalf("replay %d synthesis_id %q, want %s", i, str(r.Object(t), "synthesis_id"), id)
			}
		}
		if n := w.Hotel.Count(); n != calls {
			t.Errorf("replays made %d hotel upstream calls", n-calls)
		}
		w.assertReservations(t, 1)
		if cs := contracts(t, g, agentA1); len(cs) != 1 || str(cs[0], "synthesis_id") != id {
			t.Errorf("contracts after replays = %v, want only %s", contractIDs(cs), id)
		}
	})

	// The key in a quoted structured-field string is the same key.
	t.Run("quoted key is the same key", func(t *testing.T) {
		r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", `"book-1"`)
		assertReplay(t, first, r)
		w.assertReservations(t, 1)
	})

	// The replays spent nothing: the second token is still there (a
	// fresh gate evaluation is served), and only then is the budget of
	// two spent.
	t.Run("replays spend no budget", func(t *testing.T) {
		r := gateNowhere(t, g, agentA1, scopeAll)
		assert464(t, r, "composition-impossible")
		assertRateLimitHeader(t, r, "rcns", 0, 2, 60)
		assertRateLimited(t, gateNowhere(t, g, agentA1, scopeAll), "rcns", 2, 60)
	})

	// A 429 stores nothing: the same key then serves another request.
	t.Run("429 stores nothing", func(t *testing.T) {
		r := g.Do(t, "BOOK", "/nowhere", hdr(agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "after-429"), bookBody())
		assertRateLimited(t, r, "rcns", 2, 60)
		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Idempotency-Key", "after-429"), nil)
		wantStatus(t, r, 200)
		assertExecuted(t, r)
	})

	// Same key, different request → 422 idempotency-key-reused; nothing runs.
	for _, c := range []struct {
		name, method, path string
		body               any
	}{
		{"different body", "BOOK", "/room", map[string]any{"parameters": map[string]any{
			"guest_id": "g-2", "property_id": demoProperty, "check_in": demoCheckIn, "nights": demoNights}}},
		{"different query", "BOOK", "/room?guest_id=" + demoGuest, bookBody()},
		{"different pair", "RESERVE", "/reservations", reserveBody(demoGuest, demoNights)},
	} {
		t.Run("key reused: "+c.name, func(t *testing.T) {
			defer w.noUpstreamCall(t)()
			r := g.Do(t, c.method, c.path, hdr(agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "book-1"), c.body)
			assertErrorBody(t, r, 422, "idempotency-key-reused")
			if r.Header.Get("Idempotent-Replayed") != "" {
				t.Errorf("a 422 key-reused answer claims to be a replay")
			}
		})
	}

	// A Tier C invocation by presentation with a key replays.
	t.Run("presentation replays", func(t *testing.T) {
		p1 := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id, "Idempotency-Key", "present-1")
		wantStatus(t, p1, 200)
		assertExecuted(t, p1)
		w.assertReservations(t, 2)
		defer w.noUpstreamCall(t)()
		for i := 0; i < 3; i++ {
			assertReplay(t, p1, w.book(t, agentA1, scopeAll, "Contract-Synthesized", id, "Idempotency-Key", "present-1"))
		}
	})

	// Tier B, non-idempotent endpoint (is_idempotent false).
	t.Run("Tier B RESERVE replays", func(t *testing.T) {
		before := len(w.JS.Reservations(t))
		r1 := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "reserve-1"), reserveBody("g-2", 3))
		wantStatus(t, r1, 200)
		assertExecuted(t, r1)
		w.assertReservations(t, before+1)
		defer w.noUpstreamCall(t)()
		for i := 0; i < 3; i++ {
			r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "reserve-1"), reserveBody("g-2", 3))
			assertReplay(t, r1, r)
		}
	})

	// Tier B on an idempotent endpoint: honoured too.
	t.Run("Tier B FETCH replays", func(t *testing.T) {
		r1 := g.Do(t, "FETCH", "/properties/p-2", hdr(agentA1, "hotel:read", "Idempotency-Key", "fetch-1"), nil)
		wantStatus(t, r1, 200)
		assertExecuted(t, r1)
		defer w.noUpstreamCall(t)()
		assertReplay(t, r1, g.Do(t, "FETCH", "/properties/p-2", hdr(agentA1, "hotel:read", "Idempotency-Key", "fetch-1"), nil))
	})

	// Malformed keys → 400 before anything runs (OP-15: 1–255 visible
	// ASCII characters).
	for _, c := range []struct{ name, key string }{
		{"empty", ""},
		{"256 characters", strings.Repeat("k", 256)},
		{"control character", "key\twith-tab"},
		{"inner space", "key with-space"},
		{"non-ASCII", "clé-1"},
		{"empty quoted", `""`},
	} {
		t.Run("malformed key "+c.name, func(t *testing.T) {
			defer w.noUpstreamCall(t)()
			r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", c.key), reserveBody("g-1", 4))
			assertErrorBody(t, r, 400, "")
		})
	}
	t.Run("255 characters accepted", func(t *testing.T) {
		key := strings.Repeat("k", 255)
		r1 := g.Do(t, "FETCH", "/guests/g-2", hdr(agentA1, "hotel:read", "Idempotency-Key", key), nil)
		wantStatus(t, r1, 200)
		assertReplay(t, r1, g.Do(t, "FETCH", "/guests/g-2", hdr(agentA1, "hotel:read", "Idempotency-Key", key), nil))
	})

	// Refused before execution → nothing stored: after fixing the cause,
	// the same key executes.
	t.Run("262 stores nothing", func(t *testing.T) {
		// OP does not claim rcns:negotiate: lock 3 → 262 (1 of OP's 2 tokens).
		r := w.book(t, agentOP, scopeNoRCNS, "Allow-RCNS", "true", "Idempotency-Key", "op-book")
		b := assertErrorBody(t, r, 262, "")
		if str(b, "type") != "scope-required" {
			t.Errorf("262 type = %q, want scope-required", str(b, "type"))
		}
		r = w.book(t, agentOP, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "op-book")
		assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
		assertExecuted(t, r)
	})
	t.Run("invalid input stores nothing", func(t *testing.T) {
		before := len(w.JS.Reservations(t))
		r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "fix-input"), reserveBody("g-1", 0))
		assertErrorBody(t, r, 422, "")
		w.assertReservations(t, before)
		r = g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "fix-input"), reserveBody("g-1", 0))
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("a refused invalid input was stored and replayed:\n%s", r)
		}
		r = g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "fix-input"), reserveBody("g-1", 5))
		wantStatus(t, r, 200)
		assertExecuted(t, r)
		w.assertReservations(t, before+1)
	})
	t.Run("missing scope stores nothing", func(t *testing.T) {
		before := len(w.JS.Reservations(t))
		r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:read", "Idempotency-Key", "fix-scope"), reserveBody("g-2", 6))
		assertErrorBody(t, r, 262, "")
		r = g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "fix-scope"), reserveBody("g-2", 6))
		wantStatus(t, r, 200)
		assertExecuted(t, r)
		w.assertReservations(t, before+1)
	})

	if w.Legacy.Count() != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", w.Legacy.Count())
	}
}

// §24 54: the same key from another agent is an unrelated request.
func TestIdempotencyPerAgent(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	r1 := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "shared-key")
	b1 := assertContractBody(t, r1, 263, "BOOK", "/room", recipeName, recipeVer)
	r2 := w.book(t, agentOP, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "shared-key")
	b2 := assertContractBody(t, r2, 263, "BOOK", "/room", recipeName, recipeVer)
	assertExecuted(t, r2)
	if str(b1, "synthesis_id") == str(b2, "synthesis_id") {
		t.Errorf("two agents with one key share synthesis_id %s", str(b1, "synthesis_id"))
	}
	w.assertReservations(t, 2)
	// Each agent's own repeat replays its own answer.
	assertReplay(t, r1, w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "shared-key"))
	assertReplay(t, r2, w.book(t, agentOP, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "shared-key"))
	// Another agent's different request with the key is not "reused".
	r := w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA3, "hotel:read", "Idempotency-Key", "shared-key"), nil)
	wantStatus(t, r, 200)
	assertExecuted(t, r)
	w.assertReservations(t, 2)
}

// Confirm-first: a repeated 461 replays the same synthesis_id and mints
// no second contract (ARCHITECTURE.md "Idempotency").
// With rate_limit rcns 2 2, the replay check comes before the budget
// (RCNS §11.2): a spent budget still replays.
func TestIdempotencyConfirmFirst(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "confirm-first", LegacyCounter: true, Extra: "\t\trate_limit rcns 2 2\n"})
	g := w.GW
	first := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "preview-1")
	b := assertContractBody(t, first, 461, "BOOK", "/room", recipeName, recipeVer)
	assertRateLimitHeader(t, first, "rcns", 1, 2, 60)
	n := len(contracts(t, g, agentA1))
	for i := 0; i < 3; i++ {
		r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "preview-1")
		assertReplay(t, first, r)
		if str(r.Object(t), "synthesis_id") != str(b, "synthesis_id") {
			t.Fatalf("replayed 461 synthesis_id %q, want %s", str(r.Object(t), "synthesis_id"), str(b, "synthesis_id"))
		}
	}
	if got := len(contracts(t, g, agentA1)); got != n {
		t.Errorf("contracts %d → %d after replayed 461s", n, got)
	}
	if w.Hotel.Count() != 0 {
		t.Errorf("461 replays made %d upstream calls", w.Hotel.Count())
	}
	// Control: without the key, a repeat previews a new contract.
	r := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true")
	b2 := assertContractBody(t, r, 461, "BOOK", "/room", recipeName, recipeVer)
	if str(b2, "synthesis_id") == str(b, "synthesis_id") {
		t.Errorf("a keyless repeat returned the keyed preview's synthesis_id")
	}
	// The budget of two is now spent; the keyed preview still replays.
	assertRateLimited(t, w.book(t, agentA1, scopeAll, "Allow-RCNS", "true"), "rcns", 2, 60)
	r = w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "preview-1")
	assertReplay(t, first, r)
	w.assertReservations(t, 0)

	// Confirming the preview with the same key runs the contract (spec
	// §13.4): it was answered with the stored 461 and never ran. Its
	// answer then replaces the preview under the key, for the gate
	// repeat and the presentation alike; one reservation is made.
	id := str(b, "synthesis_id")
	confirm := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id, "Idempotency-Key", "preview-1")
	wantStatus(t, confirm, 200)
	assertExecuted(t, confirm)
	w.assertReservations(t, 1)
	for _, h := range [][]string{
		{"Contract-Synthesized", id, "Idempotency-Key", "preview-1"},
		{"Allow-RCNS", "true", "Idempotency-Key", "preview-1"},
	} {
		assertReplay(t, confirm, w.book(t, agentA1, scopeAll, h...))
	}
	w.assertReservations(t, 1)
}

// idempotency_max_per_agent 2: an agent over its share gets 503
// idempotency-store-full and nothing runs; other agents, keyless
// requests and stored keys are unaffected (configuration reference;
// ARCHITECTURE.md "Idempotency").
func TestIdempotencyStoreFull(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Extra: "\t\tidempotency_max_per_agent 2\n"})
	g := w.GW
	var firsts []*Resp
	for _, k := range []string{"full-1", "full-2"} {
		r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", k), reserveBody("g-1", 1))
		wantStatus(t, r, 200)
		firsts = append(firsts, r)
	}
	w.assertReservations(t, 2)
	func() {
		defer w.noUpstreamCall(t)()
		r := g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "full-3"), reserveBody("g-1", 1))
		b := assertErrorBody(t, r, 503, "idempotency-store-full")
		if b["retryable"] != true {
			t.Errorf("503 idempotency-store-full is not retryable:\n%s", r)
		}
		assertReplay(t, firsts[0], g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book", "Idempotency-Key", "full-1"), reserveBody("g-1", 1)))
	}()
	wantStatus(t, g.Do(t, "RESERVE", "/reservations", hdr(agentA1, "hotel:book"), reserveBody("g-1", 1)), 200)
	r := g.Do(t, "RESERVE", "/reservations", hdr(agentOP, "hotel:book", "Idempotency-Key", "full-3"), reserveBody("g-1", 1))
	wantStatus(t, r, 200)
	assertExecuted(t, r)
	w.assertReservations(t, 4)
}

// A 422 upstream failure is stored and replayed with no new upstream call
// (configuration reference, "Idempotency-Key").
func TestIdempotencyReplaysFailure(t *testing.T) {
	flaky := startFailingUpstream(t)
	dir := t.TempDir()
	doc := writeDoc(t, dir, "fetch-flaky-ledger.yaml", flakyEndpointDoc)
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true,
		Extra: fmt.Sprintf("\t\tupstream flaky %s\n\t\tendpoints %s\n", flaky.URL, doc)})
	g := w.GW

	first := g.Do(t, "FETCH", "/flaky-ledger", hdr(agentA1, "hotel:read", "Idempotency-Key", "flaky-1"), nil)
	assertNamedError(t, first, "upstream_error")
	assertExecuted(t, first)
	if flaky.Count() != 1 {
		t.Fatalf("flaky upstream calls = %d, want 1", flaky.Count())
	}
	for i := 0; i < 3; i++ {
		assertReplay(t, first, g.Do(t, "FETCH", "/flaky-ledger", hdr(agentA1, "hotel:read", "Idempotency-Key", "flaky-1"), nil))
	}
	if flaky.Count() != 1 {
		t.Errorf("replayed failures made %d more upstream calls", flaky.Count()-1)
	}
	// Control: without the key every call reaches the upstream.
	assertNamedError(t, g.Do(t, "FETCH", "/flaky-ledger", hdr(agentA1, "hotel:read"), nil), "upstream_error")
	if flaky.Count() != 2 {
		t.Errorf("flaky upstream calls = %d, want 2", flaky.Count())
	}
}

// Exactly once under concurrency: 20 identical requests with one key
// leave exactly one new reservation; every answer is the executed
// result, a replay of it, or 409 retryable.
func TestIdempotencyConcurrent(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	const n = 20
	for _, c := range []struct {
		name, agent, scope, method, path string
		body                             any
		kv                               []string
		status                           int
	}{
		{"RESERVE Tier B", agentA1, "hotel:book", "RESERVE", "/reservations", reserveBody("g-2", 7), nil, 200},
		{"BOOK /room gate", agentOP, scopeAll, "BOOK", "/room", bookBody(), []string{"Allow-RCNS", "true"}, 263},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(w.JS.Reservations(t))
			contractsBefore := len(contracts(t, g, c.agent))
			h := hdr(c.agent, c.scope, append([]string{"Idempotency-Key", "once-" + c.method}, c.kv...)...)
			var mu sync.Mutex
			resps := make([]*Resp, n)
			errs := make([]error, n)
			concurrently(t, n, func(i int) {
				r, err := tryDo(g, c.method, c.path, h, c.body)
				mu.Lock()
				resps[i], errs[i] = r, err
				mu.Unlock()
			})
			var executed *Resp
			var replays, conflicts []*Resp
			for i, r := range resps {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				switch {
				case r.Status == 409:
					b := assertErrorBody(t, r, 409, "")
					if b["retryable"] != true {
						t.Errorf("409 is not retryable:\n%s", r)
					}
					assertNoContractFields(t, r) // nothing ran
					conflicts = append(conflicts, r)
				case r.Status == c.status && r.Header.Get("Idempotent-Replayed") == "true":
					replays = append(replays, r)
				case r.Status == c.status:
					if executed != nil {
						t.Fatalf("two requests executed:\n%s\n%s", executed, r)
					}
					executed = r
				default:
					t.Errorf("unexpected answer %d:\n%s", i, r)
				}
			}
			if executed == nil {
				t.Fatalf("no request executed (%d replays, %d conflicts)", len(replays), len(conflicts))
			}
			for _, r := range replays {
				assertReplay(t, executed, r)
			}
			t.Logf("%d executed, %d replayed, %d in flight (409)", 1, len(replays), len(conflicts))
			w.assertReservations(t, before+1)
			if got := len(contracts(t, g, c.agent)); c.status == 263 && got != contractsBefore+1 {
				t.Errorf("contracts %d → %d, want exactly one new", contractsBefore, got)
			}
			// After the dust settles the key replays.
			r := g.Do(t, c.method, c.path, h, c.body)
			assertReplay(t, executed, r)
			w.assertReservations(t, before+1)
		})
	}
}

// holdingProxy forwards to json-server; while armed, the first write to
// /reservations (the reservation step of BOOK /room) waits until release
// is closed (at most requestTimeout), after closing entered.
type holdingProxy struct {
	URL     string
	next    http.Handler
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	writes  int
}

func startHoldingProxy(t testing.TB, target string) *holdingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("holding proxy target: %v", err)
	}
	p := &holdingProxy{next: httputil.NewSingleHostReverseProxy(u), entered: make(chan struct{}), release: make(chan struct{})}
	p.URL = serve(t, http.HandlerFunc(p.serveHTTP))
	t.Cleanup(p.Release) // before the server shuts down (cleanups run last first)
	return p
}

func (p *holdingProxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.URL.Path == "/reservations" {
		p.mu.Lock()
		p.writes++
		first := p.writes == 1
		p.mu.Unlock()
		if first {
			close(p.entered)
			select {
			case <-p.release:
			case <-time.After(requestTimeout):
			}
		}
	}
	p.next.ServeHTTP(w, r)
}

// Release lets the held write go on (idempotent).
func (p *holdingProxy) Release() { p.once.Do(func() { close(p.release) }) }

// Writes returns how many writes to /reservations reached the proxy.
func (p *holdingProxy) Writes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes
}

// A 409 idempotency-key-in-flight means nothing ran, so it names no
// contract: in optimistic mode the gate's contract is active while its
// first execution still runs, and a repeat with the same key reaches the
// contract by pair (or by presentation) before the claim is refused.
// The answers that ran or replay the contract name it (RCNS §12.2,
// §16.1; ARCHITECTURE.md "Idempotency").
func TestIdempotencyInFlightNamesNoContract(t *testing.T) {
	js := startJSONServer(t, hotelDB)
	hold := startHoldingProxy(t, js.URL)
	g := startGateway(t, fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", hold.URL,
		"EXTRA", "", "LEGACY", startCounter(t).URL))
	h := hdr(agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "held-1")

	firstc := make(chan *Resp, 1)
	go func() {
		r, err := tryDo(g, "BOOK", "/room", h, bookBody())
		if err != nil {
			t.Errorf("first BOOK: %v", err)
		}
		firstc <- r
	}()
	select {
	case <-hold.entered:
	case <-time.After(requestTimeout):
		t.Fatal("the first BOOK /room never reached the reservation step")
	}
	// The contract is active now (optimistic): list it.
	cs := contracts(t, g, agentA1)
	if len(cs) != 1 {
		t.Fatalf("contracts while the first BOOK runs = %v, want one", contractIDs(cs))
	}
	id := str(cs[0], "synthesis_id")

	// The three routes a repeat of the first BOOK can take.
	routes := []struct {
		name string
		h    map[string]string
	}{
		{"gate repeat (by pair)", h},
		{"by pair", hdr(agentA1, scopeAll, "Idempotency-Key", "held-1")},
		{"presentation", hdr(agentA1, scopeAll, "Contract-Synthesized", id, "Idempotency-Key", "held-1")},
	}
	for _, c := range routes {
		t.Run("409 "+c.name, func(t *testing.T) {
			r := g.Do(t, "BOOK", "/room", c.h, bookBody())
			b := assertErrorBody(t, r, 409, "idempotency-key-in-flight")
			if b["retryable"] != true {
				t.Errorf("409 is not retryable:\n%s", r)
			}
			assertNoContractFields(t, r)
		})
	}

	hold.Release()
	var first *Resp
	select {
	case first = <-firstc:
	case <-time.After(requestTimeout + 5*time.Second):
		t.Fatal("the first BOOK /room did not finish")
	}
	if first == nil {
		t.FailNow()
	}
	b := assertContractBody(t, first, 263, "BOOK", "/room", recipeName, recipeVer)
	if str(b, "synthesis_id") != id {
		t.Fatalf("263 synthesis_id %s, want %s", str(b, "synthesis_id"), id)
	}
	hash := str(b, "contract_hash")
	assertContractFields(t, first, id, hash, "rcns-gate")

	// Replays name the contract whose answer they repeat, by whichever
	// route they arrive.
	for _, c := range routes {
		t.Run("replay "+c.name, func(t *testing.T) {
			r := g.Do(t, "BOOK", "/room", c.h, bookBody())
			assertReplay(t, first, r)
			assertContractFields(t, r, id, hash, "rcns-gate")
		})
	}
	if n := hold.Writes(); n != 1 {
		t.Errorf("reservation writes upstream = %d, want 1", n)
	}
	if rs := js.Reservations(t); len(rs) != 1 {
		t.Errorf("json-server has %d reservations, want 1", len(rs))
	}
}

// The fingerprint compares the request target as the gateway routes it
// (ARCHITECTURE.md "Idempotency"): the path in RFC 3986 normal form and
// the query as the values every reader takes (each key's last value,
// spec §2.1), in any key order, escaping or repetition; "?" alone is no
// query. A target that asks for something else is still 422.
func TestIdempotencyFingerprintCanonicalTarget(t *testing.T) {
	w := startLab(t, "optimistic", "")
	g := w.GW
	for _, c := range []struct {
		name, method, first string
		same, other         []string
		scope               string
		body                any
	}{
		{name: "RESERVE path", method: "RESERVE", first: "/reservations", scope: "hotel:book", body: reserveBody("g-1", 2),
			same: []string{"/%72eservations", "/reservations?", "/%72eservation%73?", "/reservations?&"}},
		{name: "FETCH path and query", method: "FETCH", first: "/guests/g-1?guest_id=g-1", scope: "hotel:read",
			same: []string{"/%67uests/g%2D1?guest_id=g-1", "/guests/g-1?%67uest_id=g%2d1", "/guests/g-1?guest_id=g-2&guest_id=g-1",
				"/guests/g-1?guest_id=g-1&", "/guests/g-1?&guest_id=g-1"},
			other: []string{"/guests/g-1", "/guests/g-1?"}},
		{name: "FETCH query order", method: "FETCH", first: "/reflect?color=blue&size=m", scope: "hotel:read",
			same:  []string{"/reflect?size=m&color=blue", "/reflect?size=m&color=red&color=blue", "/reflect?color=%62lue&size=m&"},
			other: []string{"/reflect?color=red&size=m", "/reflect?color=blue&size=m&color=red", "/reflect?color=blue&size=M"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := hdr(agentA1, c.scope, "Idempotency-Key", "canon-"+strings.ReplaceAll(c.name, " ", "-"))
			first := g.Do(t, c.method, c.first, h, c.body)
			wantStatus(t, first, 200)
			assertExecuted(t, first)
			defer w.noHotelWrite(t)()
			for _, target := range c.same {
				t.Run("same "+target, func(t *testing.T) {
					assertReplay(t, first, g.Do(t, c.method, target, h, c.body))
				})
			}
			for _, target := range c.other {
				t.Run("other "+target, func(t *testing.T) {
					assertErrorBody(t, g.Do(t, c.method, target, h, c.body), 422, "idempotency-key-reused")
				})
			}
		})
	}
}

// noHotelWrite checks, when the returned func runs, that no reservation
// was written to json-server meanwhile.
func (w *labWorld) noHotelWrite(t testing.TB) func() {
	t.Helper()
	n := len(w.JS.Reservations(t))
	return func() {
		t.Helper()
		if m := len(w.JS.Reservations(t)); m != n {
			t.Errorf("reservations %d → %d, want unchanged", n, m)
		}
	}
}
