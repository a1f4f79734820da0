package mcpdoor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// The door's envelope rules (docs/doors.md "MCP door", step 7): what
// the go-sdk would read loosely, and so answer other than it was sent,
// the door refuses before the SDK reads the body. The SDK reads the
// first JSON value of a body and ignores the rest, lets the last of two
// members of one name win, turns an id into a float64 and back (1.5 is
// answered as 1, 2^64 as -2^63), replaces invalid UTF-8 in an id, and
// keys a batch's calls by id (a second call with an id already seen is
// dropped, unanswered). The refusals are JSON-RPC 2.0 error responses
// (§5.1), HTTP 400, with the request's id when it could be read
// (requestID), else id null:
//
//	-32700 parse error      the body is not exactly one JSON value:
//	                        a syntax error, a byte order mark,
//	                        invalid UTF-8 or an unpaired surrogate
//	                        escape, data after the value (whitespace
//	                        aside)
//	-32600 invalid request  a message that is not a JSON object, an
//	                        empty batch; one without "jsonrpc": "2.0",
//	                        with a method that is not a string, with
//	                        neither a method nor a result or error, or
//	                        both; a response with both a result and an
//	                        error, without an id, or with an error that
//	                        is not an object; a request other than
//	                        notifications/… without an id, or a
//	                        notifications/… with one; a request
//	                        whose params MCP requires without them
//	                        (paramsRequired; null is none) (the SDK
//	                        answered these in plain text, ran a request
//	                        carrying a result, or answered 202); a
//	                        member name twice in one
//	                        object, anywhere in a message; an id that is
//	                        neither a string nor an integer the door can
//	                        echo exactly (MCP: "a string or an integer";
//	                        no null, fraction, exponent, -0, or integer
//	                        beyond ±2^53); two calls of a batch with one id
//
// Nothing of a refused body runs. The fast path (fastpath.go) reads a
// message with the same strictness (json/v2: one value, no duplicate
// names, valid UTF-8; fastID: a string or an integer of at most 15
// digits), so a message it answers never breaks these rules and it
// needs no pass of its own: envelopeFault runs only for what the fast
// path declines.

// rpcFault is a message the door refuses before the SDK reads it: the
// JSON-RPC error it answers, HTTP 400, with the request's id when it
// could be read (requestID), else id null.
type rpcFault struct {
	code    int64
	message string
	// id is the refused request's id as sent (a string, or an integer
	// the door echoes exactly); nil answers id null.
	id jsontext.Value
	// dupName: the fault is a member name given twice, where the
	// decoder stopped; whether the rest is JSON is not yet known.
	dupName bool
}

// reason is what the access log names for f (Summary.Reasons).
func (f *rpcFault) reason() string {
	if f.code == jsonrpc.CodeParseError {
		return "jsonrpc-parse-error"
	}
	return "jsonrpc-invalid-request"
}

// envelopeFault is body's fault under the door's envelope rules, nil
// when body keeps them. A parse error wins over an invalid request
// wherever each is in the body.
//
// An invalid request (-32600) that is one request whose id could be
// read is answered with that id (JSON-RPC 2.0 §5: null only when the id
// cannot be determined); a parse error, a batch, a response, and a
// message whose id is missing, given twice or one the door cannot echo
// exactly are answered with id null.
func envelopeFault(body []byte) *rpcFault {
	if agtp.StartsWithBOM(body) {
		return &rpcFault{code: jsonrpc.CodeParseError, message: "parse error: the body is not one JSON value: " + agtp.ByteOrderMarkProblem}
	}
	f := scanEnvelope(body)
	if f != nil && f.dupName {
		if p := parseFault(body); p != nil {
			return p
		}
	}
	if f != nil && f.code == jsonrpc.CodeInvalidRequest {
		f.id = requestID(body)
	}
	return f
}

// parseFault is the -32700 fault of body when it is not exactly one
// JSON value (duplicate names allowed: they are the other rule's).
func parseFault(body []byte) *rpcFault {
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	if err := dec.SkipValue(); err != nil {
		return syntaxFault(err)
	}
	return trailingFault(dec)
}

// trailingFault is the -32700 fault of data after the value dec read
// (nil when only whitespace follows).
func trailingFault(dec *jsontext.Decoder) *rpcFault {
	at := dec.InputOffset()
	if _, err := dec.ReadToken(); err != io.EOF {
		return &rpcFault{code: jsonrpc.CodeParseError, message: fmt.Sprintf("parse error: the body holds data after the JSON-RPC message (from byte %d): send exactly one message or one batch per request", at)}
	}
	return nil
}

// syntaxFault is the -32700 fault of a decoder error: where, never
// what (the body is not echoed).
func syntaxFault(err error) *rpcFault {
	what := "not JSON"
	var se *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		what = "truncated"
	case errors.As(err, &se):
		switch msg := se.Err.Error(); {
		case errors.Is(se.Err, io.ErrUnexpectedEOF):
			what = "truncated"
		case strings.Contains(msg, "UTF-8") || strings.Contains(msg, "surrogate"):
			what = fmt.Sprintf("invalid UTF-8 or an unpaired surrogate escape at byte %d", se.ByteOffset)
		default:
			what = fmt.Sprintf("a syntax error at byte %d", se.ByteOffset)
		}
	}
	return &rpcFault{code: jsonrpc.CodeParseError, message: "parse error: the body is not one JSON value: " + what}
}

// invalid is a -32600 fault.
func invalid(format string, args ...any) *rpcFault {
	return &rpcFault{code: jsonrpc.CodeInvalidRequest, message: "invalid request: " + fmt.Sprintf(format, args...)}
}

// envelopeDecoders keep scanEnvelope's decoders, whose name sets (the
// duplicate-name check, most of a pass's allocations) are reused.
var envelopeDecoders = sync.Pool{New: func() any { return jsontext.NewDecoder(emptyBuffer) }}

// emptyBuffer is what a pooled decoder reads between uses.
var emptyBuffer = new(bytes.Buffer)

// scanEnvelope reads body once, strictly (duplicate names and invalid
// UTF-8 are errors), checking each message's id and, in a batch, that
// no two calls share one. An invalid request found first is kept while
// the scan goes on, so that a later parse error wins.
func scanEnvelope(body []byte) *rpcFault {
	dec := envelopeDecoders.Get().(*jsontext.Decoder)
	dec.Reset(bytes.NewBuffer(body)) // a Buffer is read in place, not copied
	defer func() {
		dec.Reset(emptyBuffer) // drop body
		envelopeDecoders.Put(dec)
	}()
	var first *rpcFault
	note := func(f *rpcFault) {
		if first == nil {
			first = f
		}
	}
	stop := func(err error) *rpcFault { // the decoder failed: a duplicate name or a parse error
		var se *jsontext.SyntacticError
		if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
			if first != nil {
				return &rpcFault{code: first.code, message: first.message, dupName: true}
			}
			where := string(se.JSONPointer.Parent())
			if where == "" {
				where = "/"
			}
			f := invalid("the message names the member %q twice in one object (at %s); name each member once", textcut.Clip(se.JSONPointer.LastToken()), textcut.Clip(where))
			f.dupName = true
			return f
		}
		return syntaxFault(err)
	}
	switch dec.PeekKind() {
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return stop(err)
		}
		calls := map[string]bool{}
		n := 0
		for dec.PeekKind() != ']' {
			if dec.PeekKind() == 0 { // an error or the end: ReadToken says which
				_, err := dec.ReadToken()
				return stop(err)
			}
			if err := scanMessage(dec, n, calls, note); err != nil {
				return stop(err)
			}
			n++
		}
		if _, err := dec.ReadToken(); err != nil {
			return stop(err)
		}
		if n == 0 {
			note(invalid("the batch is empty: send at least one message"))
		}
	case 0:
		_, err := dec.ReadToken()
		return stop(err)
	default:
		if err := scanMessage(dec, -1, nil, note); err != nil {
			return stop(err)
		}
	}
	if f := trailingFault(dec); f != nil {
		return f
	}
	return first
}

// scanMessage reads one message (the batch's n-th, or the body's when
// n is -1) and notes its faults; calls holds the ids of the batch's
// calls read so far (nil outside a batch). It returns the decoder's
// error, after which nothing more can be read.
func scanMessage(dec *jsontext.Decoder, n int, calls map[string]bool, note func(*rpcFault)) error {
	which := "the message"
	if n >= 0 {
		which = "message " + strconv.Itoa(n) + " of the batch"
	}
	if dec.PeekKind() != '{' {
		if err := dec.SkipValue(); err != nil {
			return err
		}
		note(invalid("%s is not a JSON object (JSON-RPC 2.0 §4)", which))
		return nil
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	var id string // the id's key in calls: its kind and value
	call, version, params, hasID := false, false, false, false
	results, errs := 0, 0 // result and error members
	// needs: the method's params are required (paramsRequired's
	// words); notification: its name starts notifications/.
	needs, notification, errKind := "", false, jsontext.Kind(0)
	paramsKind := jsontext.Kind(0) // the params member's kind, when sent
	for dec.PeekKind() != '}' {
		raw, err := dec.ReadValue() // the name, as sent (valid until the next read)
		if err != nil {
			return err
		}
		name := string(raw) // not allocated: compared only
		if bytes.IndexByte(raw, '\\') >= 0 {
			name = unescaped(raw)
		}
		switch name {
		case `"jsonrpc"`:
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			version = true
			if v.Kind() != '"' || (string(v) != `"2.0"` && unescaped(v) != `"2.0"`) {
				note(invalid("%s has \"jsonrpc\": %s; a JSON-RPC 2.0 message carries \"jsonrpc\": \"2.0\"", which, textcut.Clip(string(v))))
			}
			continue
		case `"method"`:
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			call = true
			if v.Kind() != '"' {
				note(invalid("%s has a method that is not a string (%s)", which, textcut.Clip(string(v))))
				continue
			}
			m := v[1 : len(v)-1] // read here: v is valid until the next read
			if bytes.IndexByte(v, '\\') >= 0 {
				m, _ = jsontext.AppendUnquote(nil, v)
			}
			notification = bytes.HasPrefix(m, []byte("notifications/"))
			needs = paramsRequired[string(m)] // not allocated: a lookup
			continue
		case `"result"`:
			results++
		case `"error"`:
			errs++
			errKind = dec.PeekKind()
		case `"params"`:
			paramsKind = dec.PeekKind()
			params = paramsKind != 'n' // "params": null is none
		case `"id"`:
			hasID = true
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			key, f := idKey(v, which, calls != nil)
			if f != nil {
				note(f)
			}
			id = key
			continue
		}
		if err := dec.SkipValue(); err != nil {
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil { // '}'
		return err
	}
	response := results+errs > 0
	switch {
	case !version:
		note(invalid("%s has no \"jsonrpc\": \"2.0\" member (JSON-RPC 2.0 §4)", which))
	case !call && !response:
		note(invalid("%s has no method (a request or notification) and no result or error (a response)", which))
	case call && response:
		note(invalid("%s has both a method (a request) and a result or error (a response): send one", which))
	case response && (results > 0) == (errs > 0):
		note(invalid("%s has both a result and an error (JSON-RPC 2.0 §5: one of them)", which))
	case response && !hasID:
		note(invalid("%s is a response without an id (JSON-RPC 2.0 §5)", which))
	case errs > 0 && errKind != '{':
		note(invalid("%s has an error that is not an object with code and message (JSON-RPC 2.0 §5.1)", which))
	case call && hasID && notification:
		note(invalid("%s is a notification with an id: a notifications/… message carries none (JSON-RPC 2.0 §4.1)", which))
	case call && !hasID && !notification:
		note(invalid("%s is a request without an id: only notifications/… are sent without one (give the request an id)", which))
	case call && params && paramsKind != '{':
		// JSON-RPC allows by-position params (an array); every MCP
		// method takes named ones (the SDK answered with its Go types).
		note(invalid("%s has params that are %s, not an object: MCP methods take named parameters, send \"params\": {…} (or none)", which, kindName(paramsKind)))
	case call && !params && needs != "":
		note(invalid("%s %s", which, needs))
	}
	if calls != nil && call && id != "" {
		if calls[id] {
			shown := id[1:]
			if id[0] == 's' {
				shown = strconv.Quote(shown)
			}
			note(invalid("two calls of the batch have the id %s (the second is %s): give each call of a batch its own id; nothing in the batch ran", textcut.Clip(shown), which))
		}
		calls[id] = true
	}
	return nil
}

// paramsRequired are the MCP requests whose params the schema requires,
// each with the refusal's words (what to send): the door refuses them without params as the
// other envelope faults (the SDK answered in plain text, or with code
// 0). A method not listed here is left to the SDK.
var paramsRequired = map[string]string{
	"tools/call":            `calls tools/call without params (or with "params": null): send "params": {"name": the tool's name, "arguments": {…}}`,
	"initialize":            `calls initialize without params (or with "params": null): send "params": {"protocolVersion": …, "capabilities": {…}, "clientInfo": {…}}`,
	"resources/read":        `calls resources/read without params (or with "params": null): send "params": {"uri": …}`,
	"resources/subscribe":   `calls resources/subscribe without params (or with "params": null): send "params": {"uri": …}`,
	"resources/unsubscribe": `calls resources/unsubscribe without params (or with "params": null): send "params": {"uri": …}`,
	"prompts/get":           `calls prompts/get without params (or with "params": null): send "params": {"name": …}`,
	"completion/complete":   `calls completion/complete without params (or with "params": null): send "params": {"ref": {…}, "argument": {…}}`,
	"logging/setLevel":      `calls logging/setLevel without params (or with "params": null): send "params": {"level": …}`,
}

// writeFault answers f: a JSON-RPC error response with f's id, or id
// null (the SDK's encoder would leave the member out), HTTP 400,
// application/json, under the header fields of the SDK's JSON answers.
func writeFault(w http.ResponseWriter, f *rpcFault) {
	id := json.RawMessage("null")
	if f.id != nil {
		id = json.RawMessage(f.id)
	}
	data, err := json.Marshal(methodNotFoundAnswer{JSONRPC: "2.0", ID: id, Error: rpcError{Code: int(f.code), Message: f.message}})
	if err != nil { // not reached: a code and a string encode
		http.Error(w, f.message, http.StatusBadRequest)
		return
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-cache, no-transform")
	hd.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(data)
}

// sdkVersions are the protocol versions the SDK's servers negotiate (the
// door narrows none).
var sdkVersions = mcp.SupportedProtocolVersions()

// sdkTransportOK reports whether the go-sdk's stateless handler
// (v1.8.0, StreamableHTTPHandler.ServeHTTP and serveStateless) would
// read r's message rather than refuse r at the transport: a POST, an
// MCP-Protocol-Version it supports (or none, or one it takes for
// 2026-07-28 or later), a Content-Type whose media type is
// application/json, and an Accept naming both application/json and
// text/event-stream (or wildcards covering them). The door's envelope
// rules judge a message only when the SDK would read it: the SDK's
// 405, 415 and 400 come first, as for a message that keeps the rules.
// TestTransportRulesFirst holds the two to the same answers.
func sdkTransportOK(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && v < "2026-07-28" && !slices.Contains(sdkVersions, v) {
		return false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return false
		}
	}
	if a := r.Header["Accept"]; len(a) == 1 && fastAccept[a[0]] {
		return true // what every SDK client sends: no parse on the fast path's way
	}
	var jsonOK, streamOK bool
	for _, value := range r.Header.Values("Accept") {
		for token := range strings.SplitSeq(value, ",") {
			base, _, _ := strings.Cut(token, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

// sdkBatches reports whether the go-sdk (v1.8.0, servePOST) reads a
// JSON-RPC batch sent with r's MCP-Protocol-Version: one before
// 2025-06-18, or none (which it takes for 2025-03-26). From 2025-06-18
// on it refuses every batch, 400 "JSON-RPC batching is not supported",
// before reading a message of it. TestTransportRulesFirst holds the two
// to the same answers.
func sdkBatches(r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	return v == "" || v < "2025-06-18"
}

// refuseBatch writes the go-sdk's refusal of a batch sent under a
// revision without batches (sdkBatches false), byte for byte: the SDK
// (v1.8.0, servePOST) decodes every message of the batch before it
// answers so, which for a 1 MiB batch of small messages costs seconds
// of CPU; the door answers first, reading none of them.
// TestBatchRefusedAsSDK holds the two to the same answer.
func refuseBatch(w http.ResponseWriter, r *http.Request) {
	http.Error(w, fmt.Sprintf("JSON-RPC batching is not supported in 2025-06-18 and later (request version: %s)", r.Header.Get("Mcp-Protocol-Version")), http.StatusBadRequest)
}

// headerFault is the refusal of a POST whose singleton header fields
// the SDK would read loosely (it reads the first of several): an
// MCP-Protocol-Version or a Content-Type sent more than once, and from
// 2026-07-28 on an Mcp-Method, Mcp-Name or Mcp-Param-* field (RFC 9110
// §5.3: which one is meant is not knowable; a proxy reading the last
// would see another call than the one that runs), or a JSON Content-Type
// naming a charset other than UTF-8 (RFC 8259 §8.1: the SDK reads the
// body as UTF-8 whatever the charset says). The answers are the SDK's
// own for those fields, in plain text: 400 for the version, 415 for
// the media type. "" when the fields are sound; the fast path's
// requests (one exact application/json, one version) cost two lookups.
func headerFault(hd http.Header) (msg string, status int) {
	v := hd["Mcp-Protocol-Version"]
	if len(v) > 1 {
		return fmt.Sprintf("Bad Request: MCP-Protocol-Version appears %d times; send it once", len(v)), http.StatusBadRequest
	}
	if len(v) == 1 && v[0] >= "2026-07-28" {
		// The standard header fields the SDK reads from this revision
		// on (SEP-2243: Mcp-Method, Mcp-Name, Mcp-Param-*), each with
		// header.Get, the first of several.
		for k, vals := range hd {
			if len(vals) > 1 && (k == "Mcp-Method" || k == "Mcp-Name" || strings.HasPrefix(k, "Mcp-Param-")) {
				return fmt.Sprintf("Bad Request: %s appears %d times; send it once", k, len(vals)), http.StatusBadRequest
			}
		}
	}
	ct := hd["Content-Type"]
	if len(ct) > 1 {
		return fmt.Sprintf("Content-Type appears %d times; send 'application/json' once", len(ct)), http.StatusUnsupportedMediaType
	}
	if len(ct) == 0 || ct[0] == "application/json" {
		return "", 0
	}
	mt, params, err := mime.ParseMediaType(ct[0])
	if err != nil || mt != "application/json" {
		return "", 0 // the SDK's 415
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fmt.Sprintf("Content-Type charset %q is not accepted: MCP messages are UTF-8 JSON (RFC 8259 §8.1); send charset=utf-8 or no charset", textcut.Clip(cs)), http.StatusUnsupportedMediaType
	}
	return "", 0
}

// sdkParams holds, for each request method the go-sdk's server decodes
// (v1.8.0, its serverMethodInfos; notifications aside), a new value of
// the params type it decodes that method's params into: paramsFault
// decodes a message's params as the SDK will, to word its refusal.
var sdkParams = map[string]func() any{
	"initialize":               func() any { return new(mcp.InitializeParams) },
	"ping":                     func() any { return new(mcp.PingParams) },
	"tools/list":               func() any { return new(mcp.ListToolsParams) },
	"tools/call":               func() any { return new(mcp.CallToolParamsRaw) },
	"prompts/list":             func() any { return new(mcp.ListPromptsParams) },
	"prompts/get":              func() any { return new(mcp.GetPromptParams) },
	"resources/list":           func() any { return new(mcp.ListResourcesParams) },
	"resources/templates/list": func() any { return new(mcp.ListResourceTemplatesParams) },
	"resources/read":           func() any { return new(mcp.ReadResourceParams) },
	"resources/subscribe":      func() any { return new(mcp.SubscribeParams) },
	"resources/unsubscribe":    func() any { return new(mcp.UnsubscribeParams) },
	"logging/setLevel": func() any {
		//lint:ignore SA1019 the SDK still decodes logging/setLevel into it (deprecated at 2026-07-28, still served)
		return new(mcp.SetLoggingLevelParams)
	},
	"completion/complete": func() any { return new(mcp.CompleteParams) },
	// The tasks extension's methods, the door's own (addTasksMethods),
	// which the SDK decodes as it does its own.
	"tasks/get":    func() any { return new(tasksParams) },
	"tasks/update": func() any { return new(tasksParams) },
	"tasks/cancel": func() any { return new(tasksParams) },
}

// paramsFault answers (HTTP 200, as the SDK answers a call's error) a
// single call of a method the SDK serves whose params the SDK cannot
// decode into its types: -32602 invalid params (JSON-RPC 2.0 §5.1)
// with the call's id, naming the member at fault by its path in params,
// the JSON type it must have and the one it has ("params.name must be
// a string, not a number"), or a tools/call without a tool's name. The
// SDK answers these -32602 too ("unknown tool \"\"" for the latter), but in
// its Go types' words ("cannot unmarshal … into Go struct field
// mcp.CallToolParamsRaw.name of type string"), and an initialize with
// code 0 (v1.8.0: its initialize decoder does not wrap
// ErrInvalidParams, as its other methods' do). It reports whether it
// answered. body keeps the envelope rules; a batch (2025-03-26) and a
// notification are left to the SDK, and so is every message from 2026-07-28
// on (version is the request's MCP-Protocol-Version), whose
// transport checks (the _meta triple, the Mcp-Method and Mcp-Name
// fields) the SDK makes before it decodes params and answers first,
// at HTTP 400.
func paramsFault(w http.ResponseWriter, version string, body []byte) bool {
	if version >= fastVersionPerRequest || batchLen(body) > 0 {
		return false
	}
	var msg struct {
		ID     any                `json:"id"`
		Method string             `json:"method"`
		Params segjson.RawMessage `json:"params"`
	}
	if decodeAsSDK(body, &msg) != nil || msg.ID == nil {
		return false
	}
	newParams, ok := sdkParams[msg.Method]
	noParams := len(msg.Params) == 0 || string(msg.Params) == "null"
	if !ok || noParams && !undeclared[msg.Method] {
		return false
	}
	p := newParams()
	code, words := int64(jsonrpc.CodeInvalidParams), ""
	if undeclared[msg.Method] {
		// The SDK decodes the params before declaredOnly refuses the
		// method, and then answers "method not found" in its own
		// words: whatever the params hold (none included), the method
		// is not served.
		code, words = jsonrpc.CodeMethodNotFound, undeclaredWords(msg.Method)
	} else if err := decodeAsSDK(msg.Params, p); err != nil {
		words = paramsFaultWords(err)
	} else if c, ok := p.(*mcp.CallToolParamsRaw); ok && c.Name == "" {
		// The SDK's answer: -32602 unknown tool "".
		words = "params.name is required: the name of a tool that tools/list lists, a string"
	} else {
		return false
	}
	id, idErr := jsonrpc.MakeID(msg.ID)
	if idErr != nil {
		return false
	}
	if code == jsonrpc.CodeInvalidParams {
		words = "invalid params: " + msg.Method + ": " + words
	}
	data, encErr := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: words}})
	if encErr != nil {
		return false
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-cache, no-transform")
	hd.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return true
}

// paramsFaultWords words err, the SDK's decoder's error for a message's
// params, for a client: a member of the wrong JSON type by its path and
// both types; another error (a type's own check, such as an unknown
// content type) as the decoder said it, clipped.
func paramsFaultWords(err error) string {
	var te *segjson.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return textcut.Clip(strings.TrimPrefix(err.Error(), "json: "))
	}
	got := ""
	if v, uerr := strconv.Unquote(te.Value); uerr == nil {
		if v = strings.TrimLeft(v, " \t\r\n"); v != "" {
			got = jsonKindOf(v[0])
		}
	}
	want, field := jsonTypeName(te.Type), textcut.Clip(memberPath(te.Field))
	switch {
	case want == "":
		return fmt.Sprintf("params.%s has the wrong type; see the method's schema in the MCP specification", field)
	case got == "":
		return fmt.Sprintf("params.%s must be %s", field, want)
	case got == "a number" && want == "a number":
		return fmt.Sprintf("params.%s is a number out of range (beyond about ±1.8e308)", field)
	case got == "a number" && want == "an integer":
		return fmt.Sprintf("params.%s must be an integer in range, not a fraction or a number this large", field)
	}
	return fmt.Sprintf("params.%s must be %s, not %s", field, want, got)
}

// memberPath is a decoder's dotted field path with its array indexes
// in brackets: "icons.0.src" is "icons[0].src".
func memberPath(dotted string) string {
	var b strings.Builder
	for i, p := range strings.Split(dotted, ".") {
		switch _, err := strconv.ParseUint(p, 10, 64); {
		case i > 0 && err == nil:
			b.WriteString("[" + p + "]")
		case i > 0:
			b.WriteString("." + p)
		default:
			b.WriteString(p)
		}
	}
	return b.String()
}

// jsonKindOf names the kind of the JSON value that starts with byte c
// ("a number", "an object", ...), "" for a byte no value starts with.
func jsonKindOf(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "true or false"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	return ""
}

// jsonTypeName is the JSON type a value decoded into Go type t must
// have ("a string", "an object", ...), "" for a type that takes any.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string (base64)"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return ""
}

// decodeAsSDK decodes the first JSON value of body into v as the SDK
// reads a message (segmentio/encoding, member names matched exactly),
// so that what the door reads of a message before the SDK (step-up,
// task candidates, initialize) is what the SDK then serves: encoding/json
// would also match "Method" or "PARAMS" to a field, and let such a
// member override the one the SDK reads. It parses body in place
// (segmentio's Parse, what the SDK's Decoder.Decode calls on the first
// value it reads, with the same flag), leaving what follows that value
// unread, rather than through a Decoder and the 32 KiB buffer each
// Decoder takes: this runs for every tools/call under identity oauth
// (stepUp).
func decodeAsSDK(body []byte, v any) error {
	_, err := segjson.Parse(body, v, segjson.DontMatchCaseInsensitiveStructFields)
	return err
}

// kindName names a JSON value's kind for a refusal: "an array", "a
// string", "a number", "true or false".
func kindName(k jsontext.Kind) string {
	switch k {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "true or false"
	}
	return "not an object"
}
