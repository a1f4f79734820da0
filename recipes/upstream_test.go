package recipes

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

func TestNewUpstreamSchemeRule(t *testing.T) {
	tests := []struct {
		name, url string
		insecure  bool
		ok        bool
	}{
		{"https", "https://api.example.com", false, true},
		{"http loopback v4", "http://127.0.0.1:3000", false, true},
		{"http localhost", "http://localhost:3000", false, true},
		{"http loopback v6", "http://[::1]:3000", false, true},
		{"http remote refused", "http://api.example.com", false, false},
		{"http remote insecure", "http://api.example.com", true, true},
		{"ftp refused", "ftp://127.0.0.1", false, false},
		{"no host", "http://", false, false},
		{"query refused", "https://a.example/?x=1", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewUpstream("u", tc.url, UpstreamOptions{InsecureHTTP: tc.insecure})
			if (err == nil) != tc.ok {
				t.Fatalf("NewUpstream(%q) err = %v, want ok=%v", tc.url, err, tc.ok)
			}
		})
	}
}

// TestNewUpstreamHidesUserInfo: a base URL carrying user info is
// refused without showing it (the message reaches Caddy's log and the
// admin API's answer), whether or not the URL parses (helper-130).
func TestNewUpstreamHidesUserInfo(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://svc:S3cretPassw0rd@127.0.0.1:8080", `base URL "http://xxxxx@127.0.0.1:8080" must not carry user info`},
		{"https://S3cretToken@api.example.com/v1", `base URL "https://xxxxx@api.example.com/v1" must not carry user info`},
		{"http://svc:S3cretPassw0rd@[::1", `invalid base URL "http://xxxxx@[::1"`},
		{"svc:S3cretPassw0rd@127.0.0.1", `base URL "xxxxx@127.0.0.1"`},
		// The parser's own words quote what precedes a slash, ? or #
		// in a password (helper-131 M2).
		{"http://svc:S3cret/Pass@127.0.0.1:8080", `invalid base URL "http://xxxxx@127.0.0.1:8080": it does not parse`},
		{"http://svc:S3cret?Pass@127.0.0.1:8080", `must not carry user info`},
		{"http://svc:S3cret#Pass@127.0.0.1:8080", `must not carry user info`},
		// A token in the query is not shown either (helper-131 L4).
		{"http://127.0.0.1:8080/api?tok=S3cretQ", `base URL "http://127.0.0.1:8080/api" must not carry a query or fragment (not shown here)`},
		{"http://127.0.0.1:8080/#S3cretF", `base URL "http://127.0.0.1:8080/" must not carry a query or fragment`},
	} {
		_, err := NewUpstream("u", tc.url, UpstreamOptions{})
		if err == nil || strings.Contains(err.Error(), "S3cret") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewUpstream(%q) err = %v, want one containing %s and no secret", tc.url, err, tc.want)
		}
	}
}

// TestUpstreamRequestURL: the base path joins the escaped endpoint path
// once (no double slash, escapes kept), the query follows.
func TestUpstreamRequestURL(t *testing.T) {
	for _, tc := range []struct{ base, path, query, want string }{
		{"http://127.0.0.1:8080", "/items/1", "", "http://127.0.0.1:8080/items/1"},
		{"http://127.0.0.1:8080/api/", "/items/a%2Fb", "q=x+y", "http://127.0.0.1:8080/api/items/a%2Fb?q=x+y"},
		{"https://svc.example/v1", "/r%C3%A9servations", "", "https://svc.example/v1/r%C3%A9servations"},
	} {
		up, err := NewUpstream("u", tc.base, UpstreamOptions{})
		if err != nil {
			t.Fatalf("NewUpstream(%s): %v", tc.base, err)
		}
		u, err := up.requestURL(tc.path, tc.query)
		if err != nil {
			t.Fatalf("requestURL(%s, %s): %v", tc.path, tc.query, err)
		}
		if got := u.String(); got != tc.want {
			t.Errorf("requestURL(%s + %s, %s) = %s, want %s", tc.base, tc.path, tc.query, got, tc.want)
		}
	}
}

// TestNewUpstreamTimeoutBounds: an upstream's default per-call timeout is
// held to the same MinCallTimeout to MaxCallTimeout range as
// timeout_seconds; zero means 30 s.
func TestNewUpstreamTimeoutBounds(t *testing.T) {
	if MinCallTimeout.Seconds() != schema.MinTimeoutSeconds || MaxCallTimeout.Seconds() != schema.MaxTimeoutSeconds {
		t.Fatalf("MinCallTimeout/MaxCallTimeout = %v/%v, want schema's %v s/%v s", MinCallTimeout, MaxCallTimeout, schema.MinTimeoutSeconds, schema.MaxTimeoutSeconds)
	}
	for _, tc := range []struct {
		timeout, want time.Duration
		ok            bool
	}{
		{0, 30 * time.Second, true},
		{time.Millisecond, time.Millisecond, true},
		{time.Hour, time.Hour, true},
		{time.Hour + time.Nanosecond, 0, false},
		{999 * time.Microsecond, 0, false},
	} {
		up, err := NewUpstream("u", "http://127.0.0.1:1", UpstreamOptions{Timeout: tc.timeout})
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), `upstream "u": timeout`) || !strings.Contains(err.Error(), "1ms to 1h0m0s") {
				t.Errorf("NewUpstream(timeout %v) err = %v, want the upstream, the knob and the range named", tc.timeout, err)
			}
			continue
		}
		if err != nil || up.Timeout != tc.want {
			t.Errorf("NewUpstream(timeout %v) = %v, %v, want timeout %v", tc.timeout, up, err, tc.want)
		}
	}
}

// TestNewUpstreamName: an upstream name must match the pattern of an
// endpoint's external_service.upstream, or no endpoint could name it.
func TestNewUpstreamName(t *testing.T) {
	for name, ok := range map[string]bool{"hotel": true, "hotel-api.v2_1": true, "": false, "a b": false, "a\tb": false, "{a}": false, "a}": false} {
		up, err := NewUpstream(name, "http://127.0.0.1:1", UpstreamOptions{})
		if ok != (err == nil) {
			t.Errorf("NewUpstream(%q) err = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "the name must match "+schema.UpstreamNamePattern()) {
			t.Errorf("NewUpstream(%q) err = %v, want it to give the pattern", name, err)
		}
		if up != nil {
			up.Close()
		}
		if _, perr := schema.Parse("ep.yaml", []byte(strings.Replace(endpointDoc("FETCH", "/x", "GET", "/x", ""), "upstream: up", "upstream: "+strconv.Quote(name), 1)), schema.KindEndpoint); ok != (perr == nil) {
			t.Errorf("an endpoint naming upstream %q: err = %v, want ok=%v (the same rule)", name, perr, ok)
		}
	}
}

// TestValidTraceParent follows W3C Trace Context §3.2: only a well-formed
// traceparent is forwarded upstream.
func TestValidTraceParent(t *testing.T) {
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		tp   string
		want bool
	}{
		{ok, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", true}, // a later version may extend (§3.2.4)
		{"", false},
		{"garbage value <script>", false},
		{ok + "-x", false}, // version 00 is exactly 55 bytes
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", MaxTraceParentBytes), false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a b", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false}, // lowercase hex only
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", false},
	} {
		if got := ValidTraceParent(tt.tp); got != tt.want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", tt.tp, got, tt.want)
		}
		if got := TraceParent(WithTraceParent(context.Background(), tt.tp)) != ""; got != tt.want {
			t.Errorf("WithTraceParent(%q) carried it: %v, want %v", tt.tp, got, tt.want)
		}
	}
}

// TestUpstreamCloseEndsLaterConnections: Close closes the idle
// connections, and a call running across it closes its connection as it
// ends (net/http's transport does that itself, until a new call asks
// for a connection). A call made after Close (the next step of a plan
// of a configuration a reload replaced) still works and closes its
// connection as it ends too (afterCall), instead of leaving it idle,
// with its two goroutines, for the 90 s idle timeout.
func TestUpstreamCloseEndsLaterConnections(t *testing.T) {
	var open atomic.Int64
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	defer unblock()
	up := newUpstream(t, srv.URL)
	fast := buildEndpoint(t, endpointDoc("FETCH", "/things", "GET", "/fast", ""), up)
	slow := buildEndpoint(t, endpointDoc("FETCH", "/others", "GET", "/slow", ""), up)
	waitOpen := func(what string, want int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); open.Load() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d connections open, want %d", what, open.Load(), want)
			}
		}
	}
	done := make(chan *Failure, 1)
	go func() { _, f := slow.Invoke(context.Background(), map[string]any{}); done <- f }()
	<-entered
	if _, f := fast.Invoke(context.Background(), map[string]any{}); f != nil {
		t.Fatal(f)
	}
	waitOpen("a call running, and one ended before Close (idle, kept alive)", 2)
	up.Close()
	waitOpen("after Close: the idle one closed", 1)
	unblock()
	if f := <-done; f != nil {
		t.Fatal(f)
	}
	waitOpen("the call running across Close has ended", 0)
	if _, f := fast.Invoke(context.Background(), map[string]any{}); f != nil {
		t.Fatalf("a call after Close: %v", f)
	}
	waitOpen("a call made after Close has ended", 0)
}
