package benchref

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// eofReader records whether its reader was read to the end.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.EOF) {
		e.eof = true
	}
	return n, err
}

// TestExchange: one request reads the whole body, makes one GET to the
// configured upstream path, and answers with exactly the fixed header
// fields and body.
func TestExchange(t *testing.T) {
	var calls atomic.Int32
	var status atomic.Int32
	status.Store(http.StatusOK)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodGet || r.URL.Path != "/items/1" {
			t.Errorf("upstream got %s %s, want GET /items/1", r.Method, r.URL.Path)
		}
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, `{"id":"1"}`)
	}))
	defer up.Close()
	e := &Exchange{
		Upstream: strings.TrimPrefix(up.URL, "http://"), Path: "/items/1",
		Headers:     map[string]string{"agtp-api-version": "1", "Contract-Synthesized": "syn-x"},
		Body:        `{"status":200}`,
		ContentType: "application/vnd.agtp+json",
	}
	if err := e.setup(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Cleanup() }()

	body := &eofReader{r: strings.NewReader(`{"parameters":{"item_id":"1"}}`)}
	rec := httptest.NewRecorder()
	if err := e.ServeHTTP(rec, httptest.NewRequest("LOOKUP", "/item/d-1", body), nil); err != nil {
		t.Fatal(err)
	}
	if !body.eof || calls.Load() != 1 {
		t.Errorf("body read to its end: %v; upstream calls: %d, want true and 1", body.eof, calls.Load())
	}
	want := http.Header{"Agtp-Api-Version": {"1"}, "Contract-Synthesized": {"syn-x"},
		"Content-Type": {"application/vnd.agtp+json"}, "Content-Length": {"14"}}
	if rec.Code != 200 || rec.Body.String() != `{"status":200}` || len(rec.Header()) != len(want) {
		t.Fatalf("answer %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
	for k, v := range want {
		if got := rec.Header().Get(k); got != v[0] {
			t.Errorf("%s = %q, want %q", k, got, v[0])
		}
	}

	// A body over the bound is 413; an upstream error status is 502.
	big := strings.NewReader(strings.Repeat("x", MaxBodyBytes+1))
	err := e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("LOOKUP", "/item/d-1", big), nil)
	var he caddyhttp.HandlerError
	if !errors.As(err, &he) || he.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("body of %d bytes: %v, want 413", MaxBodyBytes+1, err)
	}
	status.Store(http.StatusInternalServerError)
	err = e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("LOOKUP", "/item/d-1", nil), nil)
	if !errors.As(err, &he) || he.StatusCode != http.StatusBadGateway {
		t.Errorf("upstream 500: %v, want 502", err)
	}
}

func TestExchangeConfig(t *testing.T) {
	d := caddyfile.NewTestDispenser(`bench_exchange {
		upstream 127.0.0.1:9
		path /items/1
		body "{\"status\":200}"
		content_type application/vnd.agtp+json
		header Agent-ID abc
		header Audit-ID def
	}`)
	var e Exchange
	if err := e.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if e.Upstream != "127.0.0.1:9" || e.Path != "/items/1" || e.Body != `{"status":200}` || e.ContentType != "application/vnd.agtp+json" ||
		len(e.Headers) != 2 || e.Headers["Audit-ID"] != "def" {
		t.Errorf("parsed %+v", e)
	}
	for _, bad := range []string{
		"bench_exchange {\n header Agent-ID\n}",
		"bench_exchange {\n nosuch x\n}",
		"bench_exchange 127.0.0.1:9",
	} {
		var e Exchange
		if err := e.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for _, bad := range []Exchange{{Upstream: "10.0.0.1:80", Path: "/x"}, {Upstream: "127.0.0.1", Path: "/x"}, {Upstream: "127.0.0.1:80", Path: "x"}} {
		if err := bad.setup(); err == nil {
			t.Errorf("%+v: setup accepted it", bad)
		}
	}
}
