package caddymodule

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The tests here run the whole handler in process (benchHandler: the
// load test's documents, a real upstream on 127.0.0.1, records under a
// temporary records_dir) and look at one answer at a time.

// testScope is what benchAgent may claim.
const testScope = "rcns:negotiate, bench:read"

// testGateway is a provisioned handler and a next handler that counts
// the requests passed on (legacy HTTP).
type testGateway struct {
	h      *Handler
	passed int
}

func newTestGateway(t *testing.T) *testGateway {
	t.Helper()
	return &testGateway{h: benchHandler(t, benchUpstream(t).URL, false)}
}

// answer is one response, its body decoded when it is a JSON object.
type answer struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// str returns a string member of the body ("" when absent).
func (a *answer) str(key string) string {
	s, _ := a.body[key].(string)
	return s
}

func (a *answer) String() string {
	return strconv.Itoa(a.status) + " " + a.raw
}

// serve sends one request with the given body reader and Content-Length
// (from 127.0.0.1, to a loopback listener, as Caddy hands it over).
func (g *testGateway) serve(t *testing.T, method, target string, hdr map[string]string, body io.Reader, length int64) *answer {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, body)
	r.ContentLength = length
	r.Host = "127.0.0.1"
	r.RemoteAddr = "127.0.0.1:40000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	if length > 0 && r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, benchLocalAddr))
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), rec, benchServer)
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		g.passed++
		w.WriteHeader(http.StatusTeapot)
		return nil
	})
	if err := g.h.ServeHTTP(rec, r, next); err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	a := &answer{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &a.body)
	return a
}

// do sends body (a JSON value, or none when nil) as benchAgent with
// testScope plus the given headers.
func (g *testGateway) do(t *testing.T, method, target string, body any, kv ...string) *answer {
	t.Helper()
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": testScope}
	for i := 0; i+1 < len(kv); i += 2 {
		hdr[kv[i]] = kv[i+1]
	}
	if body == nil {
		return g.serve(t, method, target, hdr, nil, 0)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return g.serve(t, method, target, hdr, strings.NewReader(string(raw)), int64(len(raw)))
}

// wantError checks a §19 error body: status, reason and, when not
// empty, a fragment of the explanation.
func wantError(t *testing.T, a *answer, status int, reason, explanation string) {
	t.Helper()
	if a.status != status || a.str("reason") != reason || !strings.Contains(a.str("explanation"), explanation) {
		t.Fatalf("answer %s; want %d %s with %q in the explanation", a, status, reason, explanation)
	}
	if st, _ := a.body["status"].(float64); int(st) != status {
		t.Fatalf("body status %v differs from the HTTP status %d: %s", a.body["status"], status, a)
	}
}
