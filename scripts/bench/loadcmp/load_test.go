package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// testUpstream answers 200 for paths ending in an even digit and 500
// otherwise, and records what it saw of a request to /x0.
type testUpstream struct {
	mu                   sync.Mutex
	method, body, header string
	n                    int
}

func (u *testUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	if r.URL.Path == "/x0" {
		u.method, u.body, u.header = r.Method, string(body), r.Header.Get("Agent-ID")
	}
	u.n++
	u.mu.Unlock()
	if !strings.ContainsAny(r.URL.Path[len(r.URL.Path)-1:], "02468") {
		w.WriteHeader(500)
		return
	}
	w.Header().Set("Contract-Synthesized", "syn-x")
	_, _ = w.Write([]byte("ok"))
}

func TestAttackCountsAndBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    plan
	}{
		{"closed loop", plan{N: 300, Duration: time.Minute, Conns: 4}},
		{"open loop", plan{N: 60, Duration: time.Minute, Rate: 2000, Conns: 4}},
	} {
		up := &testUpstream{}
		srv := httptest.NewServer(up)
		addr := strings.TrimPrefix(srv.URL, "http://")
		r0 := &request{Method: "LOOKUP", Path: "/x0", Header: map[string]string{"Agent-ID": "a1"}, Body: `{"p":1}`}
		next := func(i int) *request {
			if i%2 == 0 {
				return r0
			}
			return &request{Method: "LOOKUP", Path: "/x1", Body: "{}"}
		}
		st, err := attack(context.Background(), httpDoor{}, addr, next, 200, tc.p)
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if st.Requests != tc.p.N || up.n != tc.p.N {
			t.Errorf("%s: %d requests counted, %d served; want %d (the request bound)", tc.name, st.Requests, up.n, tc.p.N)
		}
		if st.OK != tc.p.N/2 || st.Codes[200] != tc.p.N/2 || st.Codes[500] != tc.p.N/2 {
			t.Errorf("%s: ok %d, codes %v; want half 200, half 500", tc.name, st.OK, st.Codes)
		}
		if st.P50 <= 0 || st.P99 < st.P50 || st.Span <= 0 || st.Tput <= 0 {
			t.Errorf("%s: p50 %v, p99 %v, span %v, tput %v", tc.name, st.P50, st.P99, st.Span, st.Tput)
		}
		if up.method != "LOOKUP" || up.body != `{"p":1}` || up.header != "a1" {
			t.Errorf("%s: upstream saw %q %q Agent-ID %q", tc.name, up.method, up.body, up.header)
		}
	}
}

// TestAttackStopsAtDuration: a run whose request bound is out of reach
// ends at its duration.
func TestAttackStopsAtDuration(t *testing.T) {
	srv := httptest.NewServer(&testUpstream{})
	defer srv.Close()
	r := &request{Method: "GET", Path: "/0"}
	st, err := attack(context.Background(), httpDoor{}, strings.TrimPrefix(srv.URL, "http://"), func(int) *request { return r }, 200,
		plan{N: 1_000_000_000, Duration: 200 * time.Millisecond, Rate: 50, Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if st.Requests < 1 || st.Requests > 11 {
		t.Errorf("%d requests at 50/s in 200 ms, want at most 11", st.Requests)
	}
}

func TestAttackFailures(t *testing.T) {
	srv := httptest.NewServer(&testUpstream{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close() // nothing listens there now
	r := &request{Method: "GET", Path: "/0"}
	if _, err := attack(context.Background(), httpDoor{}, addr, func(int) *request { return r }, 200, plan{N: 1, Duration: time.Second, Conns: 1}); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Errorf("no listener: err = %v, want a connect error", err)
	}
	for _, p := range []plan{{N: 0, Duration: time.Second, Conns: 1}, {N: 1, Conns: 1}, {N: 1, Duration: time.Second}, {N: 1, Duration: time.Second, Conns: 1, Rate: -1}} {
		if _, err := attack(context.Background(), httpDoor{}, addr, nil, 200, p); err == nil {
			t.Errorf("plan %+v: no error", p)
		}
	}
}

func TestHTTPClientKeepsBody(t *testing.T) {
	srv := httptest.NewServer(&testUpstream{})
	defer srv.Close()
	c, err := httpDoor{}.connect(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for i := range 3 { // one connection, kept alive
		resp, err := c.do(context.Background(), &request{Method: "FETCH", Path: "/2"}, true)
		if err != nil || resp.Status != 200 || string(resp.Body) != "ok" || resp.Header.Get("Contract-Synthesized") != "syn-x" {
			t.Fatalf("request %d: %+v, %v", i, resp, err)
		}
	}
}

func TestPercentileAndSpread(t *testing.T) {
	lat := []int64{1e6, 1e6, 2e6, 3e6, 9e6}
	if p := percentile(lat, 0.5); p != 2 {
		t.Errorf("p50 = %v ms, want 2", p)
	}
	if p := percentile(lat, 0.99); p != 9 {
		t.Errorf("p99 = %v ms, want 9", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of nothing = %v, want 0", p)
	}
	if s := spreadOf([]float64{4, -1, 10, 2}); s.Med != 3 || s.Lo != -1 || s.Hi != 10 || s.N != 4 {
		t.Errorf("spreadOf = %+v, want median 3, range -1 to 10", s)
	}
}
