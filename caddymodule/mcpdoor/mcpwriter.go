package mcpdoor

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"

	segjson "github.com/segmentio/encoding/json"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// mcpWriter adds the fields the tool calls collected (Attribution-Record,
// Audit-ID) to the HTTP answer the SDK writes once the calls are done
// (JSON responses).
//
// It also turns the SDK's transport-level refusal of a method it does
// not know (HTTP 400, text/plain "JSON RPC not handled: …", which the
// SDK sends for protocol versions before 2026-07-28) into the JSON-RPC
// -32601 method-not-found answer the door gives every other method it
// does not serve (JSON-RPC 2.0 §5.1; docs/agent-guide-mcp.md), when the
// message is one call with an id. A batch or a notification keeps the
// SDK's 400.
type mcpWriter struct {
	http.ResponseWriter
	rq    *mcpRequest
	wrote bool
	// body is the HTTP request's body: the JSON-RPC message(s).
	body []byte
	// held is a 400 the SDK began, not yet written: its first Write
	// tells whether it is the unknown-method refusal.
	held bool
	// sent: the status was given (written, or held).
	sent bool
	// xcto is the answer's X-Content-Type-Options before the SDK ran
	// (set by the operator's header directive, or nil), which the
	// SDK's http.Error overwrites.
	xcto []string
}

func (w *mcpWriter) addFields() {
	if w.wrote {
		return
	}
	w.wrote = true
	w.rq.mu.Lock()
	defer w.rq.mu.Unlock()
	hd := w.ResponseWriter.Header()
	for _, f := range w.rq.out {
		hd[f.Name] = append(hd[f.Name], f.Value)
	}
}

// WriteHeader adds the collected fields, then writes the status (a 400
// is held until its first Write). A 200 becomes the status a handler
// asked for (mcpRequest.answerStatus); only the first status counts.
func (w *mcpWriter) WriteHeader(code int) {
	w.addFields()
	if w.sent {
		return
	}
	w.sent = true
	if code == http.StatusOK {
		w.rq.mu.Lock()
		code = cmp.Or(w.rq.status, code)
		w.rq.mu.Unlock()
	}
	if code == http.StatusBadRequest && !w.held && w.body != nil {
		w.held = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write adds the collected fields before the first byte, and answers a
// held 400 that is the unknown-method refusal with -32601 instead.
func (w *mcpWriter) Write(b []byte) (int, error) {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	if w.held {
		w.held = false
		if methodNotFound(w.ResponseWriter, w.body, b, w.xcto) {
			return len(b), nil
		}
		w.ResponseWriter.WriteHeader(http.StatusBadRequest)
	}
	return w.ResponseWriter.Write(b)
}

// finish writes a held 400 the SDK wrote no body for.
func (w *mcpWriter) finish() {
	if w.held {
		w.held = false
		w.ResponseWriter.WriteHeader(http.StatusBadRequest)
	}
}

// notHandledPrefix begins the SDK's text/plain refusal of a method it
// does not know (jsonrpc2.ErrNotHandled: "JSON RPC not handled: %q
// unsupported").
const notHandledPrefix = "JSON RPC not handled: "

// methodNotFound writes the JSON-RPC -32601 answer (HTTP 200,
// application/json, the call's own id) when sdkBody, the start of the
// SDK's 400, is its unknown-method refusal and body is one JSON-RPC
// call; it reports whether it wrote. The message names the method.
// body is read as the SDK reads it (its decoder, segmentio/encoding,
// with member names matched exactly and the first JSON value only), so
// the id and method answered are the ones the SDK refused. xcto is the
// X-Content-Type-Options the answer had before the SDK's http.Error set
// it (nil: none).
func methodNotFound(w http.ResponseWriter, body, sdkBody []byte, xcto []string) bool {
	if !bytes.HasPrefix(sdkBody, []byte(notHandledPrefix)) || batchLen(body) > 0 {
		return false
	}
	var call struct {
		ID     segjson.RawMessage `json:"id"`
		Method string             `json:"method"`
	}
	if decodeAsSDK(body, &call) != nil || len(call.ID) == 0 || string(call.ID) == "null" {
		return false
	}
	msg, err := json.Marshal(methodNotFoundAnswer{JSONRPC: "2.0", ID: call.ID, Error: rpcError{Code: -32601,
		Message: fmt.Sprintf("method not found: %q is not a method this MCP server serves (docs/agent-guide-mcp.md lists them)", textcut.Clip(call.Method))}})
	if err != nil {
		return false
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-cache, no-transform") // as the SDK's JSON answers
	if xcto == nil {
		hd.Del("X-Content-Type-Options")
	} else {
		hd["X-Content-Type-Options"] = xcto
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(msg)
	return true
}

// methodNotFoundAnswer is methodNotFound's JSON-RPC error response, its
// members in the SDK's order.
type methodNotFoundAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   rpcError        `json:"error"`
}

// rpcError is a JSON-RPC 2.0 error object (§5.1).
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Flush flushes the underlying writer (server-sent events).
func (w *mcpWriter) Flush() {
	w.addFields()
	w.finish()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is the underlying writer (http.ResponseController).
func (w *mcpWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
