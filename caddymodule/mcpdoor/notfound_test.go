package mcpdoor

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMethodNotFoundWriter: mcpWriter turns the SDK's text/plain 400 for
// an unknown method into JSON-RPC -32601 (HTTP 200), keeps the
// X-Content-Type-Options the operator set before the SDK ran (and drops
// the one http.Error added), and passes the SDK's other 400s through
// unchanged, a bodiless one included (helper-66).
func TestMethodNotFoundWriter(t *testing.T) {
	const call = `{"jsonrpc":"2.0","id":7,"method":"roots/list"}`
	serve := func(preset []string, sdk func(http.ResponseWriter)) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		if preset != nil {
			rec.Header()["X-Content-Type-Options"] = preset
		}
		mw := &mcpWriter{ResponseWriter: rec, rq: &mcpRequest{}, body: []byte(call), xcto: rec.Header()["X-Content-Type-Options"]}
		sdk(mw)
		mw.finish()
		return rec
	}
	notHandled := func(w http.ResponseWriter) {
		http.Error(w, `JSON RPC not handled: "roots/list" unsupported`, http.StatusBadRequest)
	}
	for _, preset := range [][]string{nil, {"nosniff"}} {
		rec := serve(preset, notHandled)
		want := `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"method not found: \"roots/list\" is not a method this MCP server serves (docs/agent-guide-mcp.md lists them)"}}`
		if rec.Code != 200 || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("preset %v: %d %q %s, want 200 application/json %s", preset, rec.Code, rec.Header().Get("Content-Type"), rec.Body, want)
		}
		if got := rec.Header()["X-Content-Type-Options"]; len(got) != len(preset) {
			t.Errorf("X-Content-Type-Options %v, want the operator's %v", got, preset)
		}
	}
	if rec := serve(nil, func(w http.ResponseWriter) { http.Error(w, "Bad Request: missing id", http.StatusBadRequest) }); rec.Code != 400 || rec.Body.String() != "Bad Request: missing id\n" {
		t.Errorf("another SDK 400: %d %q, want it unchanged", rec.Code, rec.Body)
	}
	if rec := serve(nil, func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadRequest) }); rec.Code != 400 || rec.Body.Len() != 0 {
		t.Errorf("a bodiless 400: %d %q", rec.Code, rec.Body)
	}
}

// TestMCPWriterStatus: the first status the SDK gives is the answer's
// (a second is dropped, as net/http drops it); a Write without one is a
// 200, or the status a handler asked for (mcpRequest.answerStatus), and
// so is an explicit 200; another status stays the SDK's.
func TestMCPWriterStatus(t *testing.T) {
	for _, c := range []struct {
		name   string
		asked  int
		sdk    func(http.ResponseWriter)
		status int
	}{
		{"two statuses", 0, func(w http.ResponseWriter) { w.WriteHeader(201); w.WriteHeader(500); _, _ = w.Write([]byte("x")) }, 201},
		{"write alone", 0, func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200},
		{"write alone, 400 asked", 400, func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 400},
		{"200, 400 asked", 400, func(w http.ResponseWriter) { w.WriteHeader(200); _, _ = w.Write([]byte("x")) }, 400},
		{"404, 400 asked", 400, func(w http.ResponseWriter) { w.WriteHeader(404); _, _ = w.Write([]byte("x")) }, 404},
	} {
		rec := httptest.NewRecorder()
		rq := &mcpRequest{}
		if c.asked != 0 {
			rq.answerStatus(c.asked)
		}
		mw := &mcpWriter{ResponseWriter: rec, rq: rq, body: []byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get"}`)}
		c.sdk(mw)
		mw.finish()
		if rec.Code != c.status || rec.Body.String() != "x" {
			t.Errorf("%s: %d %q, want %d \"x\"", c.name, rec.Code, rec.Body, c.status)
		}
	}
}
