package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
	"go.uber.org/zap"
)

// The door's fast path (docs/performance.md "MCP door"): the go-sdk
// decodes a stateless POST five to eight times over (each decode with
// a fresh 32 KiB buffer) and builds a session, a JSON-RPC connection
// and two goroutines for it (at 2026-07-28 a few more decodes, for the
// per-request _meta triple). The commonest messages, one tools/call of
// a Tier B tool or of a recipe, are decoded here once and handed to the
// same tool handler the SDK would call
// (Door.handler); its answer is encoded as the SDK's encoder writes it
// (fastResponse around the result's own encoding; an error through
// jsonrpc.EncodeMessage), under the headers the SDK writes. Anything
// else, and anything the fast path is not sure of, goes to the SDK
// unchanged. TestMCPFastPathDifferential holds the two byte-identical
// over a corpus of requests; the mcp block's fast_path off turns it
// off. The SDK's receiving middleware (newServer) does not run here:
// both of the door's pass tools/call through, and the SDK's own
// (multi-round-trip) acts only on results with input requests, which
// no call the fast path takes gives: a recipe call from a 2026-07-28
// client that declares elicitation (confirm-first may ask it) or the
// tasks extension (the call may become a task) is the SDK's. A feature
// built on the SDK for tools/call must keep fastCall declining the
// calls it concerns.

// fastVersions are the MCP-Protocol-Version values the fast path
// serves: those for which a tool result's text does not depend on the
// revision (textFor: 2025-06-18 and later): the two whose session the
// SDK synthesizes (stateless), and fastVersionPerRequest, whose client
// states itself in each request (SEP-2575: the _meta triple and the
// standard headers, fastCall checks them as the SDK does).
var fastVersions = map[string]bool{"2025-06-18": true, "2025-11-25": true, fastVersionPerRequest: true}

// fastVersionPerRequest is the revision whose calls carry the _meta
// triple (protocolVersion, clientCapabilities, clientInfo) and the
// Mcp-Method and Mcp-Name header fields, and whose results carry
// resultType and the server's serverInfo in _meta.
const fastVersionPerRequest = "2026-07-28"

// fastAccept are the Accept values the fast path serves: the ones MCP
// clients send, each holding both media types the SDK requires.
var fastAccept = map[string]bool{"application/json, text/event-stream": true, "text/event-stream, application/json": true}

// fastHeaders are request fields in whose presence the SDK answers
// otherwise (Last-Event-ID is refused on a POST) or that the fast path
// does not reason about (a session id; before 2026-07-28 the standard
// headers, which that revision requires: fastStandardHeaders): with any
// of them the request goes to the SDK.
var fastHeaders = []string{"Last-Event-Id", "Mcp-Session-Id"}

// fastStandardHeaders are the standard header fields of a 2026-07-28
// tools/call (SEP-2243): each sent once, naming the method and the
// tool as the body does. Before 2026-07-28 the fast path declines a
// request sending either.
var fastStandardHeaders = []string{"Mcp-Method", "Mcp-Name"}

// fastMetaTriple are the _meta keys of the 2026-07-28 triple: the
// protocol version (the header's), the client's capabilities (an
// object, required) and its clientInfo (optional).
var fastMetaTriple = map[string]bool{mcp.MetaKeyProtocolVersion: true, mcp.MetaKeyClientCapabilities: true, mcp.MetaKeyClientInfo: true}

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
	version := hd["Mcp-Protocol-Version"]
	if len(version) != 1 || !fastVersions[version[0]] {
		return false
	}
	perRequest := version[0] == fastVersionPerRequest
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
	for _, k := range fastStandardHeaders {
		if v, ok := hd[k]; ok != perRequest || (ok && len(v) != 1) {
			return false
		}
	}
	if perRequest && hd.Get("Mcp-Method") != "tools/call" {
		return false
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
		if !fastMeta[k] && (!perRequest || !fastMetaTriple[k]) {
			return false
		}
	}
	var caps *mcp.ClientCapabilities
	if perRequest {
		if hd.Get("Mcp-Name") != p.Name {
			return false
		}
		if caps, ok = fastTriple(p.Meta); !ok {
			return false
		}
	}
	t := d.agentServer(rq).visible[p.Name]
	if t == nil || (t.kind != mcpTierB && t.kind != mcpRecipe) {
		return false // an unknown tool is the SDK's error; the built-in tools are left to it
	}
	if t.kind == mcpRecipe && caps != nil && (caps.Elicitation != nil || tasksDeclared(p.Meta)) {
		// A recipe call may ask (confirm-first as input_required, for
		// a client that can elicit: wantsInputRequired) or outlast
		// (a task, for one that declared the extension): the SDK's.
		return false
	}
	if perRequest && t.paramHeaders {
		// Its Mcp-Param-* fields are the SDK's to require and check; a
		// tool without x-mcp-header has none, and the SDK ignores any
		// sent (validateParamHeaders), as the fast path does.
		return false
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
		// Neither is an answer of a call the fast path takes (the SDK
		// would log an internal error, or ask a stateless client for
		// input: fastCall leaves the calls that may ask to it).
		d.e.Logger().Error("MCP door fast path: a tool answered without a result, or with input requests", zap.String("tool", t.name))
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the tool gave no result"}
	default:
		if res.Content == nil {
			res.Content = []mcp.Content{} // as the SDK's callTool: never "null"
		}
		if perRequest {
			d.annotateServerInfo(res)
		}
		// The SDK's encoder (sdkMarshal) copies a result's own
		// MarshalJSON output, compact already, unchanged.
		raw, merr := res.MarshalJSON()
		if merr == nil && perRequest {
			raw, merr = withResultTypeComplete(raw)
		}
		if merr != nil {
			resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the result failed"}
		} else {
			resp.Result = raw
		}
	}
	var data []byte
	if resp.Error == nil {
		data, err = fastResponse(id, resp.Result)
	} else {
		data, err = jsonrpc.EncodeMessage(resp)
	}
	if err != nil {
		data, _ = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the answer failed"}})
		resp.Error = nil // no status of its own
	}
	out := w.Header()
	out.Set("Cache-Control", "no-cache, no-transform")
	out.Set("Content-Type", "application/json")
	mw := &mcpWriter{ResponseWriter: w, rq: rq}
	if perRequest {
		if status := errorStatus(resp.Error); status != 0 {
			mw.WriteHeader(status)
		}
	}
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

// fastResponse is the JSON-RPC response of id with result (compact
// JSON) as the SDK's jsonrpc.EncodeMessage writes it: its wire
// struct's members in their order, the id encoded as its encoder
// encodes it (sdkMarshal), the result copied as it is (that encoder's
// compaction of compact JSON changes nothing), without passing the
// result through a second encoder. TestMCPFastPathDifferential and
// TestMCPFastPathRecipes hold the bytes equal to the SDK's.
func fastResponse(id jsonrpc.ID, result json.RawMessage) ([]byte, error) {
	idJSON, err := sdkMarshal(id.Raw())
	if err != nil {
		return nil, err
	}
	const head, mid = `{"jsonrpc":"2.0","id":`, `,"result":`
	out := make([]byte, 0, len(head)+len(idJSON)+len(mid)+len(result)+1)
	out = append(out, head...)
	out = append(out, idJSON...)
	out = append(out, mid...)
	out = append(out, result...)
	return append(out, '}'), nil
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

// fastTriple reports whether meta's 2026-07-28 triple is one the SDK
// accepts (validateRequestMeta, v1.8.0): the protocol version
// "2026-07-28" (the header's, checked before), the client's
// capabilities an object decoding as the SDK decodes them (its V2
// shape), and clientInfo, when sent, an object decoding as an
// Implementation; and returns the capabilities. Anything else (null,
// another type, a member of the wrong type) is the SDK's -32602 to
// answer: false.
func fastTriple(meta map[string]any) (*mcp.ClientCapabilities, bool) {
	if v, _ := meta[mcp.MetaKeyProtocolVersion].(string); v != fastVersionPerRequest {
		return nil, false
	}
	var caps struct {
		mcp.ClientCapabilities
		// The SDK's clientCapabilitiesV2 field: decoded as it decodes
		// it (roots is deprecated at 2026-07-28, still accepted).
		//lint:ignore SA1019 the SDK's own decoding is mirrored, deprecated fields included
		Roots *mcp.RootCapabilities `json:"roots,omitempty"`
	}
	if !sdkMetaValue(meta, mcp.MetaKeyClientCapabilities, &caps) {
		return nil, false
	}
	if _, sent := meta[mcp.MetaKeyClientInfo]; sent {
		var info *mcp.Implementation
		if !sdkMetaValue(meta, mcp.MetaKeyClientInfo, &info) {
			return nil, false
		}
	}
	return &caps.ClientCapabilities, true
}

// sdkMetaValue decodes meta[key] into to as the SDK's decodeMetaValue
// does (encoded with encoding/json, decoded as its decoder decodes: an
// absent or null value, or one that does not decode, is false). Only
// objects are taken (the SDK's types here are all structs). The value
// encoded is one whole JSON value, so it is parsed in place
// (segmentio's Parse, which the SDK's Decoder.Decode calls on the value
// it read) rather than through a Decoder and its 32 KiB buffer.
func sdkMetaValue(meta map[string]any, key string, to any) bool {
	v, ok := meta[key].(map[string]any)
	if !ok {
		return false
	}
	data, err := json.Marshal(v)
	if err != nil {
		return false
	}
	rest, err := segjson.Parse(data, to, segjson.DontMatchCaseInsensitiveStructFields)
	return err == nil && len(rest) == 0
}

// annotateServerInfo sets the door's serverInfo on res's _meta unless
// the tool set one, as the SDK does for every result at 2026-07-28
// (annotateServerInfo, SEP-2575).
func (d *Door) annotateServerInfo(res *mcp.CallToolResult) {
	m := res.GetMeta()
	if m == nil {
		m = map[string]any{}
	}
	if _, ok := m[mcp.MetaKeyServerInfo]; ok {
		return
	}
	m[mcp.MetaKeyServerInfo] = d.impl
	res.SetMeta(m)
}

// withResultTypeComplete is a tool result's JSON (an object) with the
// member resultType "complete" last, where the SDK's CallToolResult
// encoding puts it for a 2026-07-28 client (setCompleteResultType: an
// unexported field, so not settable from here).
func withResultTypeComplete(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimRight(raw, " \t\r\n")
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return nil, errors.New("mcpdoor: a tool result that is not a JSON object")
	}
	const member = `"resultType":"complete"}`
	out := make(json.RawMessage, 0, len(raw)+len(member)+1)
	out = append(out, raw[:len(raw)-1]...)
	if len(raw) > 2 {
		out = append(out, ',')
	}
	return append(out, member...), nil
}

// errorStatus is the HTTP status of a JSON-RPC error answered to a
// 2026-07-28 client, as the SDK gives it (extractErrorStatus, SEP-2575):
// 404 for -32601, 400 for -32602, -32022 and -32021; 0 (200) for any
// other, and for no error.
func errorStatus(err error) int {
	var jerr *jsonrpc.Error
	if !errors.As(err, &jerr) {
		return 0
	}
	switch jerr.Code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return 0
}
