package integration

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// These tests check the harness itself (upstreams and a gateway without
// the rcns handler), so a red suite points at the module, not the rig.

func TestHarnessJSONServer(t *testing.T) {
	js := startJSONServer(t, hotelDB)

	status, _, body := js.Get(t, "/guests/g-1")
	if status != 200 {
		t.Fatalf("GET /guests/g-1: %d %s", status, body)
	}
	var g map[string]any
	if err := json.Unmarshal(body, &g); err != nil || g["id"] != "g-1" || g["name"] == nil || g["email"] == nil {
		t.Fatalf("guest = %s (%v)", body, err)
	}
	status, _, body = js.Get(t, "/properties/p-1")
	if status != 200 || !strings.Contains(string(body), `"city"`) {
		t.Fatalf("GET /properties/p-1: %d %s", status, body)
	}
	if rs := js.Reservations(t); len(rs) != 0 {
		t.Fatalf("fresh db has reservations: %v", rs)
	}

	status, _, body = plainRequest(t, "POST", js.URL+"/reservations",
		map[string]string{"Content-Type": "application/json"},
		[]byte(`{"guest_id":"g-1","property_id":"p-1","check_in":"2026-12-01","nights":2}`))
	if status != 201 {
		t.Fatalf("POST /reservations: %d %s", status, body)
	}
	if rs := js.Reservations(t); len(rs) != 1 || rs[0]["guest_id"] != "g-1" {
		t.Fatalf("reservations after POST = %v", rs)
	}

	// Each server works on its own copy of the template.
	other := startJSONServer(t, hotelDB)
	if rs := other.Reservations(t); len(rs) != 0 {
		t.Fatalf("second json-server shares state: %v", rs)
	}
}

func TestHarnessHTTPBin(t *testing.T) {
	bin := startHTTPBin(t)

	status, _, body := plainRequest(t, "GET", bin+"/anything?color=red",
		map[string]string{"X-Probe": "1"}, nil)
	if status != 200 {
		t.Fatalf("GET /anything: %d %s", status, body)
	}
	var echo map[string]any
	if err := json.Unmarshal(body, &echo); err != nil {
		t.Fatalf("/anything is not JSON: %v", err)
	}
	if got := field(echo, "args", "color"); got == nil {
		t.Fatalf("args not echoed: %s", body)
	}
	if !slices.Contains(headerNames(echo["headers"]), "x-probe") {
		t.Fatalf("headers not echoed: %s", body)
	}

	for path, want := range map[string]int{"/status/401": 401, "/status/500": 500, "/status/404": 404} {
		if status, _, _ := plainRequest(t, "GET", bin+path, nil, nil); status != want {
			t.Errorf("GET %s = %d, want %d", path, status, want)
		}
	}
	status, h, _ := plainRequest(t, "GET", bin+"/html", nil, nil)
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Errorf("GET /html = %d %s", status, h.Get("Content-Type"))
	}
}

func TestHarnessBarrier(t *testing.T) {
	t.Run("n in flight pass", func(t *testing.T) {
		b := startBarrier(t, 3)
		var wg sync.WaitGroup
		statuses := make([]int, 3)
		for i, p := range []string{"/a", "/b", "/c"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := testClient.Get(b.URL + p)
				if err != nil {
					t.Errorf("GET %s: %v", p, err)
					return
				}
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		for i, s := range statuses {
			if s != 200 {
				t.Errorf("request %d: %d", i, s)
			}
		}
		if b.Count() != 3 || b.Timeouts() != 0 {
			t.Errorf("count %d timeouts %d", b.Count(), b.Timeouts())
		}
	})
	t.Run("sequential requests time out", func(t *testing.T) {
		b := startBarrier(t, 2)
		status, _, body := plainRequest(t, "GET", b.URL+"/a", nil, nil)
		if status != http.StatusGatewayTimeout || !strings.Contains(string(body), "barrier timed out") {
			t.Fatalf("lone request: %d %s", status, body)
		}
		if b.Timeouts() != 1 {
			t.Errorf("timeouts = %d", b.Timeouts())
		}
	})
}

func TestHarnessCounter(t *testing.T) {
	c := startCounter(t)
	status, _, body := plainRequest(t, "GET", c.URL+"/x?y=1", map[string]string{"X-Seen": "yes"}, nil)
	if status != 200 || !strings.Contains(string(body), `"count":1`) {
		t.Fatalf("counter: %d %s", status, body)
	}
	reqs := c.Requests()
	if c.Count() != 1 || reqs[0].Path != "/x" || reqs[0].Query != "y=1" || reqs[0].Header.Get("X-Seen") != "yes" {
		t.Fatalf("counter recorded %+v", reqs)
	}

	js := startJSONServer(t, hotelDB)
	p := startCountingProxy(t, js.URL)
	status, _, body = plainRequest(t, "GET", p.URL+"/guests/g-1", nil, nil)
	if status != 200 || !strings.Contains(string(body), `"g-1"`) || p.Count() != 1 {
		t.Fatalf("counting proxy: %d %s (count %d)", status, body, p.Count())
	}
}

// TestHarnessGateway runs the harness template with a plain reverse_proxy
// (no rcns): the binary builds, starts, answers and stops.
func TestHarnessGateway(t *testing.T) {
	js := startJSONServer(t, hotelDB)
	g := startGateway(t, fill("\treverse_proxy {{UP}}\n", "UP", js.URL))
	r := g.Do(t, "GET", "/guests/g-1", nil, nil)
	_, _, direct := js.Get(t, "/guests/g-1")
	if r.Status != 200 || string(r.Body) != string(direct) {
		t.Fatalf("through the gateway:\n%s\ndirect:\n%s", r, direct)
	}
	if _, err := caddyValidate(t, fill("\treverse_proxy {{UP}}\n", "UP", js.URL)); err != nil {
		t.Fatalf("caddy validate of a plain site failed: %v", err)
	}
	if out, err := caddyValidate(t, "\tno_such_directive_here\n"); err == nil {
		t.Fatalf("caddy validate accepted an unknown directive:\n%s", out)
	}
}
