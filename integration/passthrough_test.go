package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Plain HTTP clients (no Agent-ID, IANA verbs) reach the legacy API
// through the gateway byte for byte (ARCHITECTURE.md "Which requests are
// AGTP").
func TestPassThroughByteForByte(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})

	for _, path := range []string{"/guests/g-1", "/properties/p-1", "/guests", "/reservations", "/guests/nope"} {
		t.Run("GET "+path, func(t *testing.T) {
			r := w.GW.Do(t, "GET", path, nil, nil)
			status, h, direct := w.JS.Get(t, path)
			if r.Status != status {
				t.Fatalf("status through gateway %d, direct %d:\n%s", r.Status, status, r)
			}
			if string(r.Body) != string(direct) {
				t.Fatalf("body differs\nthrough gateway:\n%s\ndirect:\n%s", r.Body, direct)
			}
			if r.Header.Get("Content-Type") != h.Get("Content-Type") {
				t.Errorf("Content-Type %q, direct %q", r.Header.Get("Content-Type"), h.Get("Content-Type"))
			}
			for _, k := range []string{"Attribution-Record", "Server-ID", "AGTP-API-Version", "RCNS-Attempt-Id"} {
				if v := r.Header.Get(k); v != "" {
					t.Errorf("pass-through response carries AGTP header %s: %s", k, v)
				}
			}
		})
	}

	t.Run("POST /reservations", func(t *testing.T) {
		body := `{"guest_id":"g-2","property_id":"p-2","check_in":"2027-01-10","nights":3}`
		r := w.GW.Do(t, "POST", "/reservations", map[string]string{"Content-Type": "application/json"}, body)
		wantStatus(t, r, 201)
		var created map[string]any
		if err := json.Unmarshal(r.Body, &created); err != nil {
			t.Fatalf("POST answer is not JSON: %v\n%s", err, r)
		}
		rs := w.assertReservations(t, 1)
		if rs[0]["guest_id"] != "g-2" || rs[0]["nights"] != float64(3) {
			t.Fatalf("stored reservation = %v", rs[0])
		}
		// json-server renders a record the same way on POST and GET.
		_, _, direct := w.JS.Get(t, fmt.Sprintf("/reservations/%v", created["id"]))
		if string(r.Body) != string(direct) {
			t.Fatalf("POST body through gateway:\n%s\ndirect GET of the record:\n%s", r.Body, direct)
		}
		if w.Hotel.Count() != 0 {
			t.Errorf("rcns called the hotel upstream %d times for plain HTTP", w.Hotel.Count())
		}
	})
}

// orderingSite mixes the directives that must not shadow rcns: encode,
// handle, route and respond (TOOLCHAIN.md pitfall; ARCHITECTURE.md orders
// rcns before rewrite).
const orderingSite = `
	encode gzip
	rcns {
		identity header
		enabled true
		mode optimistic
		upstream hotel {{HOTEL}}
		agents examples/hotel/agents
		endpoints examples/hotel/endpoints
		recipes examples/hotel/recipes
	}
	route /reservations* {
		reverse_proxy {{HOTEL}}
	}
	handle /guests/* {
		reverse_proxy {{HOTEL}}
	}
	handle {
		respond "legacy fallback" 200
	}
`

// respondSite answers every non-AGTP request with an unconditional respond.
const respondSite = `
	rcns {
		identity header
		enabled true
		mode optimistic
		upstream hotel {{HOTEL}}
		agents examples/hotel/agents
		endpoints examples/hotel/endpoints
		recipes examples/hotel/recipes
	}
	respond "legacy says hi" 200
`

func TestOrderingWithEncodeHandleRespond(t *testing.T) {
	js := startJSONServer(t, hotelDB)

	t.Run("encode handle route respond", func(t *testing.T) {
		g := startGateway(t, fill(orderingSite, "HOTEL", js.URL))

		// Legacy traffic still follows the handle/route/respond layout.
		r := g.Do(t, "GET", "/guests/g-1", nil, nil)
		_, _, direct := js.Get(t, "/guests/g-1")
		if r.Status != 200 || string(r.Body) != string(direct) {
			t.Fatalf("legacy GET /guests/g-1:\n%s", r)
		}
		r = g.Do(t, "GET", "/somewhere-else", nil, nil)
		if r.Status != 200 || string(r.Body) != "legacy fallback" {
			t.Fatalf("legacy fallback:\n%s", r)
		}

		// AGTP requests reach rcns before handle/respond.
		r = g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if _, ok := r.Object(t)["directory"].([]any); !ok {
			t.Fatalf("DISCOVER / is not a directory:\n%s", r)
		}

		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Accept-Encoding", "gzip"), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if id := str(r.Object(t), "result", "id"); id != "g-1" {
			t.Fatalf("FETCH /guests/g-1 result id = %q:\n%s", id, r)
		}

		// A large AGTP answer (263 with endpoint and result) is never
		// re-encoded or chunked by encode.
		r = g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true", "Accept-Encoding", "gzip"), bookBody())
		wantStatus(t, r, 263)
		assertAGTPHeaders(t, r)
		if ce := r.Header.Get("Content-Encoding"); ce != "" {
			t.Fatalf("AGTP response was encoded (%s):\n%s", ce, r)
		}
		if str(r.Object(t), "synthesis_id") == "" {
			t.Fatalf("263 without synthesis_id:\n%s", r)
		}
	})

	t.Run("unconditional respond", func(t *testing.T) {
		g := startGateway(t, fill(respondSite, "HOTEL", js.URL))
		r := g.Do(t, "GET", "/guests/g-1", nil, nil)
		if r.Status != 200 || string(r.Body) != "legacy says hi" {
			t.Fatalf("legacy GET:\n%s", r)
		}
		r = g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if strings.Contains(string(r.Body), "legacy says hi") {
			t.Fatalf("respond shadowed rcns:\n%s", r)
		}
		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		if id := str(r.Object(t), "result", "id"); id != "g-1" {
			t.Fatalf("FETCH result id = %q:\n%s", id, r)
		}
	})
}

// TestPassThroughUpgradeAndStream: the rcns handler times legacy
// requests around the next handler (kind="passthrough") without
// changing what they can do: a legacy WebSocket-style upgrade (101,
// the connection hijacked by reverse_proxy) still carries bytes both
// ways, a streamed legacy answer still arrives chunk by chunk (each
// flushed before the next is written), and the metrics count the
// streamed answer and not the upgrade. Legacy requests are plain HTTP:
// the test runs in the HTTP door's pass only.
func TestPassThroughUpgradeAndStream(t *testing.T) {
	next := make(chan struct{})
	legacy := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			if !strings.EqualFold(r.Header.Get("Upgrade"), "echo") {
				http.Error(w, "no upgrade", http.StatusBadRequest)
				return
			}
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("legacy hijack: %v", err)
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
		case "/stream":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("first\n"))
			_ = http.NewResponseController(w).Flush()
			select { // the client has read the first chunk before the second is written
			case <-next:
			case <-time.After(10 * time.Second):
			}
			_, _ = w.Write([]byte("second\n"))
		}
	}))
	dead := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	g := startGateway(t, fill(labSite, "MODE", "optimistic", "HOTEL", dead, "LEGACY", legacy, "BIN", dead, "DEAD", dead,
		"COUNTER", dead, "BARRIER", dead, "EXTRA", ""))

	// The upgrade: 101, then bytes both ways on the same connection.
	conn, err := net.DialTimeout("tcp", g.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", g.Addr)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d, want 101", resp.StatusCode)
	}
	fmt.Fprintf(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
		t.Fatalf("through the upgraded connection: %q, %v; want \"echo ping\\n\"", line, err)
	}

	// The stream: the first chunk arrives while the legacy answer is
	// still open.
	sresp, err := http.Get("http://" + g.Addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	sr := bufio.NewReader(sresp.Body)
	if line, err := sr.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q, %v", line, err)
	}
	close(next)
	if rest, err := io.ReadAll(sr); err != nil || string(rest) != "second\n" {
		t.Fatalf("rest of the stream: %q, %v", rest, err)
	}

	// The stream is observed once its handler returned (just after its
	// last byte); the upgrade never is.
	const key = `caddy_rcns_request_duration_seconds_count{binding="http",kind="passthrough",outcome="success"}`
	var s *scrapeResult
	waitFor(t, 5*time.Second, 50*time.Millisecond, "the stream observed", func() bool {
		s = scrapeMetrics(t, g)
		return s.values[key] >= 1
	})
	if v := s.values[key]; v != 1 {
		t.Errorf("passthrough success observations = %v, want 1 (the stream; the upgrade is not observed):\n%s", v, metricLines(s.raw, "caddy_rcns_request_duration"))
	}
}
