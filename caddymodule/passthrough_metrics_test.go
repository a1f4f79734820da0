package caddymodule

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestPassthroughDuration: a legacy request the handler passes on is
// observed in caddy_rcns_request_duration_seconds with binding http and
// kind passthrough, its outcome from the status the next handler
// answered (or the error it returned), so legacy latency is told from
// agent latency; a WebSocket upgrade (101) is not observed, and an AGTP
// request is never counted as passthrough.
func TestPassthroughDuration(t *testing.T) {
	h := benchHandler(t, benchUpstream(t).URL, false)
	send := func(method string, hdr http.Header, next caddyhttp.HandlerFunc) error {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(method, "/items/1", nil)
		r.Host = "127.0.0.1"
		r.RemoteAddr = "127.0.0.1:40000"
		if hdr != nil {
			r.Header = hdr
		}
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, benchLocalAddr))
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), rec, benchServer)
		return h.ServeHTTP(rec, r, next)
	}
	status := func(code int) caddyhttp.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(code)
			return nil
		}
	}
	handlerErr := caddyhttp.Error(http.StatusBadGateway, errors.New("no upstream"))
	tests := []struct {
		name    string
		method  string
		next    caddyhttp.HandlerFunc
		err     error
		outcome string // "" when not observed
	}{
		{"a 200", http.MethodGet, status(http.StatusOK), nil, "success"},
		{"nothing written", http.MethodGet, func(http.ResponseWriter, *http.Request) error { return nil }, nil, "success"},
		{"a body without WriteHeader", http.MethodPost, func(w http.ResponseWriter, r *http.Request) error {
			_, err := w.Write([]byte("ok"))
			return err
		}, nil, "success"},
		{"a body copied (ReadFrom) and flushed", http.MethodGet, func(w http.ResponseWriter, r *http.Request) error {
			if _, err := io.Copy(w, strings.NewReader("streamed")); err != nil {
				return err
			}
			return http.NewResponseController(w).Flush()
		}, nil, "success"},
		{"early hints, then a 404", http.MethodGet, func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusNotFound)
			return nil
		}, nil, "refused"},
		{"a redirect", http.MethodGet, status(http.StatusFound), nil, "success"},
		{"a 404", http.MethodGet, status(http.StatusNotFound), nil, "refused"},
		{"a 503", http.MethodGet, status(http.StatusServiceUnavailable), nil, "error"},
		{"an error for Caddy's error routes", http.MethodGet, func(http.ResponseWriter, *http.Request) error { return handlerErr }, handlerErr, "error"},
		{"a 4xx error for Caddy's error routes", http.MethodGet, func(http.ResponseWriter, *http.Request) error {
			return caddyhttp.Error(http.StatusForbidden, errors.New("denied"))
		}, nil, "refused"},
		{"a WebSocket upgrade", http.MethodGet, status(http.StatusSwitchingProtocols), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := map[string]float64{}
			for _, o := range []string{"success", "refused", "error"} {
				before[o] = metricValue(t, h, "caddy_rcns_request_duration_seconds", "binding", "http", "kind", "passthrough", "outcome", o)
			}
			err := send(tt.method, nil, tt.next)
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("the next handler's error was not returned: %v", err)
			}
			for _, o := range []string{"success", "refused", "error"} {
				got := metricValue(t, h, "caddy_rcns_request_duration_seconds", "binding", "http", "kind", "passthrough", "outcome", o) - before[o]
				want := 0.0
				if o == tt.outcome {
					want = 1
				}
				if got != want {
					t.Errorf("outcome %s: %v observations, want %v", o, got, want)
				}
			}
		})
	}

	// An AGTP request answers in the engine: its kind is never
	// passthrough, and the next handler is not called.
	total := func() float64 {
		n := 0.0
		for _, o := range []string{"success", "negotiated", "refused", "error"} {
			n += metricValue(t, h, "caddy_rcns_request_duration_seconds", "kind", "passthrough", "outcome", o)
		}
		return n
	}
	n := total()
	called := false
	if err := send("FETCH", http.Header{"Agent-ID": {benchAgent}, "Authority-Scope": {testScope}}, func(http.ResponseWriter, *http.Request) error {
		called = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if called || total() != n {
		t.Errorf("an AGTP request was passed on (%v) or observed as passthrough (%v → %v)", called, n, total())
	}
}
