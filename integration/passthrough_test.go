package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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
