package floor

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// calls reads a command's calls from redis-server's INFO commandstats.
func calls(t *testing.T, addr, cmd string) int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func provisioned(t *testing.T, addr string) *Handler {
	t.Helper()
	h := &Handler{Address: addr}
	if err := h.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Cleanup() })
	return h
}

// TestFloorOneRoundTripPerRequest: each request makes one EVALSHA (the
// first also the EVAL that loads the script) and then reaches the next
// handler, whose answer goes out.
func TestFloorOneRoundTripPerRequest(t *testing.T) {
	srv := redistest.StartServer(t)
	h := provisioned(t, srv.Addr())
	reached := 0
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		reached++
		w.WriteHeader(http.StatusTeapot)
		return nil
	})
	const n = 5
	for i := range n {
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, httptest.NewRequest("GET", "/items/1", nil), next); err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusTeapot {
			t.Fatalf("request %d: status %d, want the next handler's 418: %s", i, w.Code, w.Body)
		}
	}
	if reached != n {
		t.Errorf("the next handler ran %d times, want %d", reached, n)
	}
	if got := calls(t, srv.Addr(), "evalsha"); got != n {
		t.Errorf("EVALSHA ran %d times, want one per request (%d)", got, n)
	}
	if got := calls(t, srv.Addr(), "eval"); got != 1 {
		t.Errorf("EVAL ran %d times, want once (the first request's NOSCRIPT)", got)
	}
}

// TestFloorRedisDown: with Redis gone the request gets 503 and goes no
// further.
func TestFloorRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	h := provisioned(t, srv.Addr())
	srv.Stop()
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		t.Error("the next handler ran after a failed round trip")
		return nil
	})
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, httptest.NewRequest("GET", "/items/1", nil), next); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusServiceUnavailable || !strings.HasPrefix(w.Body.String(), "bench_redis_floor: ") {
		t.Errorf("status %d %q, want 503 naming bench_redis_floor", w.Code, w.Body)
	}
}

func TestUnmarshalCaddyfile(t *testing.T) {
	for _, c := range []struct {
		in, addr string
		bad      bool
	}{
		{in: "bench_redis_floor 127.0.0.1:6379", addr: "127.0.0.1:6379"},
		{in: "bench_redis_floor", bad: true},
		{in: "bench_redis_floor a:1 b:2", bad: true},
		{in: "bench_redis_floor a:1 {\n\tx\n}", bad: true},
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.in))
		if (err != nil) != c.bad || h.Address != c.addr && !c.bad {
			t.Errorf("%q: address %q, error %v; want address %q, error %v", c.in, h.Address, err, c.addr, c.bad)
		}
	}
}

// TestProvisionRefusesBadAddress: an address that is not host:port with
// a numeric port fails at provision (caddy validate), not on every
// request.
func TestProvisionRefusesBadAddress(t *testing.T) {
	for _, a := range []string{"127.0.0.1:notaport", "redis://127.0.0.1:6379", "127.0.0.1", ":6379", "127.0.0.1:0", "127.0.0.1:70000"} {
		h := &Handler{Address: a}
		if err := h.Provision(caddy.Context{}); err == nil || !strings.Contains(err.Error(), "is not host:port") {
			_ = h.Cleanup()
			t.Errorf("%q: provisioned (%v), want an address error", a, err)
		}
	}
}
