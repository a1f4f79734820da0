package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// The door's fast path (docs/performance.md "MCP door"): the go-sdk
// decodes a stateless POST five to eight times over (each decode with
// a fresh 32 KiB buffer) and builds a session, a JSON-RPC connection
// and two goroutines for it. The commonest message, one tools/call of a
// Tier B tool from a client on a revision before 2026-07-28, is decoded
// here once and handed to the same tool handler the SDK would call
// (Door.handler); its answer is encoded with the SDK's own encoder
// (jsonrpc.EncodeMessage), under the headers the SDK writes. Anything
// else, and anything the fast path is not sure of, goes to the SDK
// unchanged. TestMCPFastPathDifferential holds the two byte-identical
// over a corpus of requests; the mcp block's fast_path off turns it
// off. The SDK's receiving middleware (newServer) does not run here:
// both of the door's pass tools/call through, and the SDK's own
// (multi-round-trip) acts only on results with input requests, which
// no Tier B tool gives. A feature built on the SDK for tools/call
// (input_required, tasks: clients on 2026-07-28, recipes) must keep
// fastCall declining the calls it concerns.

// fastVersions are the MCP-Protocol-Version values the fast path
// serves: those whose session the SDK synthesizes (stateless, before
// 2026-07-28, so no per-request _meta triple, no standard headers to
// check, no resultType) and for which a tool result's text does not
// depend on the revision (textFor: 2025-06-18 and later).
var fastVersions = map[string]bool{"2025-06-18": true, "2025-11-25": true}

// fastAccept are the Accept values the fast path serves: the ones MCP
// clients send, each holding both media types the SDK requires.
var fastAccept = map[string]bool{"application/json, text/event-stream": true, "text/event-stream, application/json": true}

// fastHeaders are request fields in whose presence the SDK answers
// otherwise (Last-Event-ID is refused on a POST) or that the fast path
// does not reason about (a session id, the 2026-07-28 standard
// headers): with any of them the request goes to the SDK.
var fastHeaders = []string{"Last-Event-Id", "Mcp-Session-Id", "Mcp-Method", "Mcp-Name"}

// fastMessage is the one JSON-RPC message the fast path reads: members
// other than these send the request to the SDK.
type fastMessage struct {
	JSONRPC string         `json:"jsonrpc"`
	ID      jsontext.Value `json:"id"`
	Method  string         `json:"method"`
	Params  jsontext.Value `json:"params"`
}

// fastParams are the tools/call params the fast path reads.
type fastParams struct {
	Name      string         `json:"name"`
	Arguments jsontext.Value `json:"arguments"`
	Meta      map[string]any `json:"_meta"`
}

// fastMeta are the request _meta keys the fast path passes on: the
// door's own. Any other (a progress token, the 2026-07-28 triple, a
// client's own) sends the request to the SDK.
var fastMeta = map[string]bool{MCPMetaIdempotencyKey: true, MCPMetaAttributionRecord: true}

// fastDecode is how the fast path reads a message: strictly (unknown
// members, duplicate names and invalid UTF-8 are refused, and so left
// to the SDK), names matched case-sensitively as the SDK matches them.
var fastDecode = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true))

// fastCall answers r (its body read, its caller rq identified) when it
// is one tools/call the fast path serves, and reports whether it did;
// false leaves r untouched for the SDK.
func (d *Door) fastCall(w http.ResponseWriter, r *http.Request, rq *mcpRequest, body []byte) bool {
	if d.cfg.DisableFastPath || r.Method != http.MethodPost || len(body) == 0 {
		return false
	}
	hd := r.Header
	if v := hd["Mcp-Protocol-Version"]; len(v) != 1 || !fastVersions[v[0]] {
		return false
	}
	if v := hd["Content-Type"]; len(v) != 1 || v[0] != "application/json" {
		return false
	}
	if v := hd["Accept"]; len(v) != 1 || !fastAccept[v[0]] {
		return false
	}
	for _, k := range fastHeaders {
		if _, ok := hd[k]; ok {
			return false
		}
	}
	if i := bytes.IndexFunc(body, func(r rune) bool { return r != ' ' && r != '\t' && r != '\r' && r != '\n' }); i < 0 || body[i] != '{' {
		return false // a batch, or not a message
	}
	var msg fastMessage
	if jsonv2.Unmarshal(body, &msg, fastDecode) != nil || msg.JSONRPC != "2.0" || msg.Method != "tools/call" || msg.Params.Kind() != '{' {
		return false
	}
	id, ok := fastID(msg.ID)
	if !ok {
		return false
	}
	var p fastParams
	if jsonv2.Unmarshal(msg.Params, &p, fastDecode) != nil || p.Name == "" {
		return false
	}
	if p.Arguments != nil && p.Arguments.Kind() != '{' {
		return false
	}
	for k := range p.Meta {
		if !fastMeta[k] {
			return false
		}
	}
	t := d.agentServer(rq).visible[p.Name]
	if t == nil || t.kind != mcpTierB {
		return false // an unknown tool is the SDK's error; recipes may preview, ask or outlast
	}
	// From here the answer is the fast path's, as the SDK's session
	// would give it: callTool, then the JSON response.
	req := &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Name: p.Name, Arguments: json.RawMessage(p.Arguments), Meta: p.Meta},
		Extra:  &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: hd},
	}
	res, err := d.handler(t)(context.WithValue(r.Context(), mcpRequestKey{}, rq), req)
	resp := &jsonrpc.Response{ID: id}
	switch {
	case err != nil:
		resp.Error = err
	case res == nil || res.InputRequests != nil:
		// Neither is a Tier B tool's answer (the SDK would log an
		// internal error, or ask a stateless client for input).
		d.e.Logger().Error("MCP door fast path: a Tier B tool answered without a result, or with input requests", zap.String("tool", t.name))
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the tool gave no result"}
	default:
		if res.Content == nil {
			res.Content = []mcp.Content{} // as the SDK's callTool: never "null"
		}
		raw, merr := sdkMarshal(res)
		if merr != nil {
			resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the result failed"}
		} else {
			resp.Result = raw
		}
	}
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		data, _ = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the answer failed"}})
	}
	out := w.Header()
	out.Set("Cache-Control", "no-cache, no-transform")
	out.Set("Content-Type", "application/json")
	mw := &mcpWriter{ResponseWriter: w, rq: rq}
	_, _ = mw.Write(data)
	d.fastServed.Add(1)
	return true
}

// fastID is a message's id as the SDK decodes it (jsonrpc.MakeID of a
// string, or of a number as float64): a string, or an integer of at
// most 15 digits (exact as a float64), not -0; false for anything else
// (null, absent, fractions, exponents, big numbers, -0), which the
// envelope rules refuse or the SDK answers.
func fastID(raw jsontext.Value) (jsonrpc.ID, bool) {
	switch raw.Kind() {
	case '"':
		var s string
		if jsonv2.Unmarshal(raw, &s) != nil {
			return jsonrpc.ID{}, false
		}
		id, err := jsonrpc.MakeID(s)
		return id, err == nil
	case '0':
		digits := string(raw)
		if len(digits) > 0 && digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && (len(digits) > 1 || len(digits) < len(raw))) { // -0 is the envelope rules' (envelope.go)
			return jsonrpc.ID{}, false
		}
		for _, c := range []byte(digits) {
			if c < '0' || c > '9' {
				return jsonrpc.ID{}, false
			}
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return jsonrpc.ID{}, false
		}
		id, err := jsonrpc.MakeID(float64(n))
		return id, err == nil
	}
	return jsonrpc.ID{}, false
}

// sdkMarshal is v as the SDK's JSON-RPC layer marshals a result
// (internal/jsonrpc2 marshalToRaw): encoding/json without HTML
// escaping, without the encoder's trailing newline.
func sdkMarshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
