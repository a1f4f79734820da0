package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// TestOptionsStar is ../shared/cases/01: an AGTP OPTIONS * (it carries
// Agent-ID) gets the 400 invalid-request-line of any other target that
// is not origin-form, with every AGTP response header; a plain OPTIONS
// * keeps what Caddy does (a bare 200, nothing sent to the legacy
// API).
func TestOptionsStar(t *testing.T) {
	w := startHotel(t, hotelOpts{LegacyCounter: true})
	r := w.GW.Raw(t, "OPTIONS * HTTP/1.1\r\nHost: "+w.GW.Addr+"\r\nAgent-ID: "+agentA1+"\r\nContent-Length: 0\r\n\r\n")
	assertErrorBody(t, r, 400, "invalid-request-line")
	assertAGTPHeaders(t, r)
	r = w.GW.Raw(t, "BOOK * HTTP/1.1\r\nHost: "+w.GW.Addr+"\r\nContent-Length: 0\r\n\r\n")
	assertErrorBody(t, r, 400, "invalid-request-line")

	plain := w.GW.Raw(t, "OPTIONS * HTTP/1.1\r\nHost: "+w.GW.Addr+"\r\nContent-Length: 0\r\n\r\n")
	if plain.Status != 200 || plain.Header.Get("Content-Length") != "0" || len(plain.Body) != 0 {
		t.Fatalf("plain OPTIONS *: want a bare 200 with Content-Length 0:\n%s", plain)
	}
	for _, h := range []string{"Server-ID", "Response-ID", "Attribution-Record"} {
		if plain.Header.Get(h) != "" {
			t.Errorf("plain OPTIONS * is not AGTP, yet its answer carries %s:\n%s", h, plain)
		}
	}
	// A plain OPTIONS * with a body: answered as Go answers it, the
	// connection still usable.
	plain = w.GW.Raw(t, "OPTIONS * HTTP/1.1\r\nHost: "+w.GW.Addr+"\r\nContent-Length: 5\r\n\r\nhello")
	if plain.Status != 200 {
		t.Fatalf("plain OPTIONS * with a body: %s", plain)
	}
	if n := w.Legacy.Count(); n != 0 {
		t.Fatalf("the legacy API got %d requests; OPTIONS * must not reach it", n)
	}
}

// TestCallerIdentityHeaders is ../shared/cases/02: every answer to an
// identified agent says who the gateway took it to be (Owner-ID from
// the registry, Trust-Tier, Verification-Path), refusals after identity
// included; an anonymous answer and a refusal given before identity
// carry none.
func TestCallerIdentityHeaders(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	for _, tc := range []struct {
		name, agent, tier string
		r                 func() *Resp
	}{
		{"tier B 200", agentA1, "1", func() *Resp {
			return w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		}},
		{"gate 464 for tier 3", agentA3, "3", func() *Resp { return w.book(t, agentA3, scopeAll, "Allow-RCNS", "true") }},
		{"404 without opt-in", agentA1, "1", func() *Resp {
			return w.GW.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll), bookBody())
		}},
		{"262 scope-claim-invalid: identified, only the claim refused", agentA1, "1", func() *Resp {
			r := w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read, vault:read"), nil)
			assertErrorBody(t, r, 262, "scope-claim-invalid")
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r()
			if got := r.Header.Get("Owner-ID"); got != "hotel-ops" {
				t.Errorf("Owner-ID %q, want hotel-ops:\n%s", got, r)
			}
			if got := r.Header.Get("Trust-Tier"); got != tc.tier {
				t.Errorf("Trust-Tier %q, want %s:\n%s", got, tc.tier, r)
			}
			if got := r.Header.Get("Verification-Path"); got != "header" {
				t.Errorf("Verification-Path %q, want header (identity header):\n%s", got, r)
			}
		})
	}
	for _, tc := range []struct {
		name string
		r    *Resp
	}{
		{"anonymous manifest", w.GW.Do(t, "DISCOVER", "/", nil, nil)},
		{"400 before identity", w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Task-ID", "has space"), nil)},
		{"unknown agent 401", w.GW.Do(t, "FETCH", "/guests/g-1", hdr(strings.Repeat("a", 64), "hotel:read"), nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, h := range []string{"Owner-ID", "Trust-Tier", "Verification-Path"} {
				if v := tc.r.Header.Get(h); v != "" {
					t.Errorf("%s: %s %q on an answer to no identified caller:\n%s", tc.name, h, v, tc.r)
				}
			}
		})
	}
}

// TestContractUpstreamFixedByReload is ../shared/cases/06: a contract
// captures the recipe, not the upstream's address. Synthesized while
// the Caddyfile named a wrong port (its run fails, 422
// upstream_connection_error), the same contract presented again after
// a reload that fixes the port answers 200 from the upstream, with
// contract_hash unchanged.
func TestContractUpstreamFixedByReload(t *testing.T) {
	js, hotel, legacy, docs := reloadWorld(t)
	recipesDir := filepath.Join(docs, "recipes")
	copyDocs(t, "examples/hotel/recipes", recipesDir)
	wrong := fmt.Sprintf("http://127.0.0.1:%d", freePort(t)) // nothing listens there
	g := startGateway(t, fill(reloadSite, "HOTEL", wrong, "DOCS", docs, "RECIPES", recipesDir, "LEGACY", legacy.URL))
	w := &hotelWorld{JS: js, Hotel: hotel, Legacy: legacy, GW: g}

	failed := assertErrorBody(t, w.book(t, agentA1, scopeAll, "Allow-RCNS", "true"), 422, "composition_failed")
	id := str(failed, "synthesis_id")
	if id == "" || !findString(failed, "upstream_connection_error") {
		t.Fatalf("the run on the wrong port did not fail with upstream_connection_error under a contract: %v", failed)
	}
	hash := str(inspectContract(t, g, agentA1, scopeAll, id).Object(t), "contract_hash")

	line := "upstream hotel " + wrong
	if !strings.Contains(g.Caddyfile, line) {
		t.Fatalf("Caddyfile lacks %q:\n%s", line, g.Caddyfile)
	}
	if status, body := reload(t, g, strings.Replace(g.Caddyfile, line, "upstream hotel "+hotel.URL, 1)); status/100 != 2 {
		t.Fatalf("reload with the fixed port failed (%d): %s", status, body)
	}
	before := hotel.Count()
	r := w.book(t, agentA1, scopeAll, "Contract-Synthesized", id)
	wantStatus(t, r, 200)
	if got := r.Header.Get("Contract-Synthesized"); got != id {
		t.Errorf("answer names contract %q, want %s", got, id)
	}
	if hotel.Count() == before {
		t.Errorf("the contract answered without calling the fixed upstream")
	}
	wantStatus(t, w.book(t, agentA1, scopeAll), 200) // by pair too
	if got := str(inspectContract(t, g, agentA1, scopeAll, id).Object(t), "contract_hash"); got != hash || hash == "" {
		t.Errorf("contract_hash after the reload = %q, want %q unchanged", got, hash)
	}
}

// TestReferenceClientDialect is ../shared/cases/04: the Python
// reference client's headers. RCNS-Idempotency-Key keys a request as
// Idempotency-Key does: the case's BOOK sent twice books once (the
// repeat is a replay), on the gate and on a Tier B write, and a retry
// may switch to Idempotency-Key; the two at once with different keys
// are refused. Allow-RCNS: optimistic on an unserved pair is the 404 of
// an absent header (RCNS §24 item 18), whose explanation names the
// accepted values: not a bare 404. Nothing runs twice.
func TestReferenceClientDialect(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW

	// Before A1 holds a contract for BOOK /room (it would then be served
	// by pair whatever Allow-RCNS says).
	for _, v := range []string{"optimistic", "TRUE", "1"} {
		t.Run("Allow-RCNS "+v, func(t *testing.T) {
			r := w.book(t, agentA1, scopeAll, "Allow-RCNS", v, "RCNS-Idempotency-Key", "opt-in-"+v)
			b := assertErrorBody(t, r, 404, "not-found")
			if e := str(b, "explanation"); !strings.Contains(e, `Allow-RCNS "`+v+`"`) || !strings.Contains(e, `the accepted values are "true"`) {
				t.Errorf("explanation %q does not name the value and the accepted one", e)
			}
			assertNoRCNSSignal(t, r)
		})
	}
	w.assertReservations(t, 0)

	const key = "k-7f3a"
	first := w.book(t, agentA1, scopeAll, "Allow-RCNS", "true", "RCNS-Idempotency-Key", key)
	id := str(assertContractBody(t, first, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	assertExecuted(t, first)
	w.assertReservations(t, 1)
	calls := w.Hotel.Count()
	for _, repeat := range [][]string{
		{"RCNS-Idempotency-Key", key},
		{"Idempotency-Key", key},
		{"Idempotency-Key", `"` + key + `"`, "RCNS-Idempotency-Key", key},
	} {
		r := w.book(t, agentA1, scopeAll, append([]string{"Allow-RCNS", "true"}, repeat...)...)
		assertReplay(t, first, r)
		if got := str(r.Object(t), "synthesis_id"); got != id {
			t.Errorf("replay synthesis_id %q, want %s", got, id)
		}
	}
	if n := w.Hotel.Count(); n != calls {
		t.Errorf("the repeats made %d hotel upstream calls", n-calls)
	}
	w.assertReservations(t, 1)

	// A Tier B write keyed by the alias runs once too.
	res := hdr(agentA1, scopeAll, "RCNS-Idempotency-Key", "r-7f3a")
	r := g.Do(t, "RESERVE", "/reservations", res, reserveBody(demoGuest, 3))
	wantStatus(t, r, 200)
	assertExecuted(t, r)
	assertReplay(t, r, g.Do(t, "RESERVE", "/reservations", res, reserveBody(demoGuest, 3)))
	w.assertReservations(t, 2)

	// Both names, different keys: refused before anything runs.
	r = w.book(t, agentA1, scopeAll, "Idempotency-Key", "k-a", "RCNS-Idempotency-Key", "k-b")
	b := assertErrorBody(t, r, 400, "ambiguous-idempotency-key")
	if e := str(b, "explanation"); !strings.Contains(e, "Idempotency-Key and RCNS-Idempotency-Key") {
		t.Errorf("explanation %q does not name both headers", e)
	}
	w.assertReservations(t, 2)
	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("%d AGTP requests fell through to the legacy handler", n)
	}
}

// TestLargeBodyWriteFirst is ../shared/cases/05: a client that writes
// its whole body before it reads (Python's http.client) reads the 413
// body-too-large with its AGTP error body, then a clean EOF, on both
// doors, for bodies of 2, 8 and 64 MiB; it got a connection reset
// because the gateway closed with the body unread. Nothing executes.
func TestLargeBodyWriteFirst(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true, Door: "agtp"})
	for _, door := range []struct{ name, addr, requestLine string }{
		{"http", w.GW.Addr, "BOOK /room HTTP/1.1"},
		{"agtp", w.GW.AGTPAddr, "AGTP/1.0 BOOK /room"},
	} {
		for _, mib := range []int{2, 8, 64} {
			t.Run(fmt.Sprintf("%s %d MiB", door.name, mib), func(t *testing.T) {
				body := writeFirstBody(t, mib<<20)
				head := fmt.Sprintf("%s\r\nHost: %s\r\nAgent-ID: %s\r\nAuthority-Scope: %s\r\nAllow-RCNS: true\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
					door.requestLine, door.addr, agentA1, scopeAll, len(body))
				conn, err := net.DialTimeout("tcp", door.addr, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(requestTimeout))
				// Everything first, in one stream of writes, as the
				// reference client does: no read until the last byte.
				if _, err := io.WriteString(conn, head); err != nil {
					t.Fatalf("write the head: %v", err)
				}
				if _, err := conn.Write(body); err != nil {
					t.Fatalf("write the %d MiB body: %v (the gateway closed before reading it)", mib, err)
				}
				br := bufio.NewReader(conn)
				var r *Resp
				if door.name == "http" {
					resp, err := http.ReadResponse(br, &http.Request{Method: "BOOK"})
					if err != nil {
						t.Fatalf("read the answer after writing the body: %v", err)
					}
					b, err := io.ReadAll(resp.Body)
					if err != nil {
						t.Fatalf("read the answer's body: %v", err)
					}
					r = &Resp{Method: "BOOK", Path: "/room", Status: resp.StatusCode, Header: resp.Header, Body: b}
					if resp.Close { // http.ReadResponse moves Connection: close there
						r.Header.Set("Connection", "close")
					}
				} else {
					resp, err := wire.ReadResponse(br, wire.Limits{MaxHeaderBytes: 1 << 20}, 1<<20)
					if err != nil {
						t.Fatalf("read the answer after writing the body: %v", err)
					}
					r = &Resp{Method: "BOOK", Path: "/room", Status: resp.Status, Header: resp.Header, Body: resp.Body, Reason: resp.Reason}
				}
				b := assertErrorBody(t, r, 413, "body-too-large")
				if b["limit_bytes"] != float64(1<<20) {
					t.Errorf("limit_bytes %v, want the default max_request_body 1048576", b["limit_bytes"])
				}
				if got := r.Header.Get("Connection"); got != "close" {
					t.Errorf("Connection %q, want close", got)
				}
				if _, err := br.ReadByte(); err != io.EOF {
					t.Errorf("after the answer: %v, want EOF (a clean close, not a reset)", err)
				}
			})
		}
	}
	if n := w.Hotel.Count(); n != 0 {
		t.Errorf("refused requests made %d hotel upstream calls", n)
	}
	if n := w.Legacy.Count(); n != 0 {
		t.Errorf("%d requests fell through to the legacy handler", n)
	}
	w.assertReservations(t, 0)
	if cs := contracts(t, w.GW, agentA1); len(cs) != 0 {
		t.Errorf("refused requests minted contracts: %v", contractIDs(cs))
	}
}

// writeFirstBody is a BOOK envelope of exactly n bytes (n at least
// 200): the demo's parameters and a padding note in context.
func writeFirstBody(t testing.TB, n int) []byte {
	b := mustJSON(t, bookBody()) // {"parameters":{…}}
	prefix := string(b[:len(b)-1]) + `,"context":{"note":"`
	return []byte(prefix + strings.Repeat("x", n-len(prefix)-len(`"}}`)) + `"}}`)
}
