package integration

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
)

// Worlds: a gateway plus the upstreams it talks to (the hotel demo on
// json-server, the lab on go-httpbin and counters).

// hotelSite is the demo's rcns block: the example documents, the hotel
// upstream, then the legacy API for everything that is not AGTP.
const hotelSite = `
	rcns {
		server_id caddy-rcns-it
		identity header
		enabled {{ENABLED}}
		mode {{MODE}}
		upstream hotel {{HOTEL}}
		agents examples/hotel/agents
		endpoints examples/hotel/endpoints
		recipes examples/hotel/recipes
{{EXTRA}}
	}
	reverse_proxy {{LEGACY}}
`

// hotelOpts configures startHotel.
type hotelOpts struct {
	Mode     string // optimistic | confirm-first (default confirm-first)
	Disabled bool   // enabled false
	Extra    string // more lines inside the rcns block
	// LegacyCounter sends non-AGTP traffic to a counting upstream instead
	// of json-server, so a test can prove nothing fell through.
	LegacyCounter bool
	// Door is the door Do's requests go through ("http" or "agtp");
	// "" is the suite's (RCNS_IT_DOOR).
	Door string
}

// hotelWorld is json-server, a counting proxy in front of it (the rcns
// `hotel` upstream) and the gateway.
type hotelWorld struct {
	JS     *JSONServer
	Hotel  *Counter // every upstream call rcns makes to the hotel API
	Legacy *Counter // non-nil with LegacyCounter
	GW     *Gateway
}

func startHotel(t testing.TB, o hotelOpts) *hotelWorld {
	t.Helper()
	w := &hotelWorld{JS: startJSONServer(t, hotelDB)}
	w.Hotel = startCountingProxy(t, w.JS.URL)
	legacy := w.JS.URL
	if o.LegacyCounter {
		w.Legacy = startCounter(t)
		legacy = w.Legacy.URL
	}
	mode := o.Mode
	if mode == "" {
		mode = "confirm-first"
	}
	enabled := "true"
	if o.Disabled {
		enabled = "false"
	}
	door := o.Door
	if door == "" {
		door = suiteDoor
	}
	w.GW = startGatewayDoor(t, fill(hotelSite,
		"ENABLED", enabled, "MODE", mode, "HOTEL", w.Hotel.URL,
		"EXTRA", o.Extra, "LEGACY", legacy), nil, door)
	return w
}

// book sends the demo's BOOK /room as agent with extra headers.
func (w *hotelWorld) book(t testing.TB, agent, scope string, kv ...string) *Resp {
	t.Helper()
	return w.GW.Do(t, "BOOK", "/room", hdr(agent, scope, kv...), bookBody())
}

// assertReservations checks the number of reservations in json-server.
func (w *hotelWorld) assertReservations(t testing.TB, n int) []map[string]any {
	t.Helper()
	rs := w.JS.Reservations(t)
	if len(rs) != n {
		t.Fatalf("json-server has %d reservations, want %d: %v", len(rs), n, rs)
	}
	return rs
}

// labSite loads the demo documents plus integration/testdata/lab: Tier B
// endpoints on go-httpbin (bin), a closed port (dead), a counting upstream
// (counter) and a barrier upstream (barrier), and recipes over them.
const labSite = `
	rcns {
		server_id caddy-rcns-it
		identity header
		enabled true
		mode {{MODE}}
		upstream hotel {{HOTEL}}
		upstream bin {{BIN}}
		upstream dead {{DEAD}}
		upstream counter {{COUNTER}}
		upstream barrier {{BARRIER}}
		agents examples/hotel/agents
		endpoints examples/hotel/endpoints integration/testdata/lab/endpoints
		recipes examples/hotel/recipes integration/testdata/lab/recipes
{{EXTRA}}
	}
	reverse_proxy {{LEGACY}}
`

type labWorld struct {
	JS      *JSONServer
	Hotel   *Counter // counting proxy in front of json-server (the hotel upstream)
	Bin     string
	Counter *Counter
	Barrier *Barrier
	GW      *Gateway
}

// startLab starts json-server, go-httpbin, a counter, a 3-way barrier and
// a gateway in mode (optimistic when empty) with extra rcns lines.
func startLab(t testing.TB, mode, extra string) *labWorld {
	t.Helper()
	if mode == "" {
		mode = "optimistic"
	}
	w := &labWorld{
		JS:      startJSONServer(t, hotelDB),
		Bin:     startHTTPBin(t),
		Counter: startCounter(t),
		Barrier: startBarrier(t, 3),
	}
	w.Hotel = startCountingProxy(t, w.JS.URL)
	dead := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	w.GW = startGateway(t, fill(labSite,
		"MODE", mode, "HOTEL", w.Hotel.URL, "LEGACY", w.JS.URL, "BIN", w.Bin, "DEAD", dead,
		"COUNTER", w.Counter.URL, "BARRIER", w.Barrier.URL, "EXTRA", extra))
	return w
}

// FailingUpstream counts calls and answers every one 500.
type FailingUpstream struct {
	URL string
	mu  sync.Mutex
	n   int
}

func startFailingUpstream(t testing.TB) *FailingUpstream {
	t.Helper()
	f := &FailingUpstream{}
	f.URL = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "boom"})
	}))
	return f
}

func (f *FailingUpstream) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// flakyEndpointDoc is a Tier B endpoint FETCH /flaky-ledger on the
// upstream named flaky (a counting upstream that answers 500).
const flakyEndpointDoc = `# Integration-test endpoint: a counting upstream that answers 500.
method: FETCH
path: /flaky-ledger
description: Calls a counting upstream that always fails.
semantic:
  intent: Read the flaky ledger.
  actor: agent
  outcome: The upstream answer is returned.
  capability: retrieval
  confidence: 0.9
  impact: informational
  is_idempotent: true
input_schema:
  type: object
  additionalProperties: false
  properties: {}
output_schema:
  type: object
  additionalProperties: true
errors:
  - upstream_timeout
  - upstream_connection_error
  - upstream_malformed_response
  - upstream_authentication_failed
  - upstream_error
required_scopes: [hotel:read]
external_service:
  upstream: flaky
  method: GET
  path: /ledger
  timeout_seconds: 5
`
