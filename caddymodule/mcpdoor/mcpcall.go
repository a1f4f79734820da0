package mcpdoor

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/internal/workers"
	"github.com/caddy-rcns/caddy-rcns/policy"
)

// One tool call: its arguments become one agtp.Request (the tool's
// pair, the caller's verified identity, the AGTP headers of the HTTP
// request), engine.serve answers it, and the answer becomes the tool
// result (docs/agent-guide-mcp.md).

// MCP result _meta keys: the call's Attribution-Record, Audit-ID,
// Response-ID and AGTP status, the RCNS-Attempt-Id of a gate refusal
// (for INSPECT target=rcns-attempt), and whether it was an idempotent
// replay.
const (
	MCPMetaAttemptID          = MCPMetaPrefix + "rcns-attempt-id"
	MCPMetaAttributionRecord  = MCPMetaPrefix + "attribution-record"
	MCPMetaAuditID            = MCPMetaPrefix + "audit-id"
	MCPMetaResponseID         = MCPMetaPrefix + "response-id"
	MCPMetaStatus             = MCPMetaPrefix + "agtp-status"
	MCPMetaIdempotentReplayed = MCPMetaPrefix + "idempotent-replayed"
)

// forwarded are the HTTP request's AGTP header fields a call carries on
// to the engine (Go's canonical keys). Agent-ID is the verified one;
// signatures, Allow-RCNS and Contract-Synthesized are the door's own.
// X-Idempotency-Key goes on so that the engine's rule for it holds here
// as on the other doors (engine.LegacyIdempotencyKey: never a key,
// never ignored; beside the call's key, which the door sends as
// Idempotency-Key, it must name the same one).
var forwarded = []string{"Authority-Scope", "Owner-Id", "Request-Id", "Task-Id", "Session-Id", "Traceparent", "X-Idempotency-Key"}

// argumentReasons are the engine's reasons that mean the call's
// arguments are wrong: they answer as argumentResult, a tool error
// telling the model to fix the arguments (SEP-1303).
var argumentReasons = map[string]bool{
	agtp.InvalidInput.Token: true, agtp.ParameterConflict.Token: true, agtp.InvalidEnvelope.Token: true,
	agtp.InvalidJSON.Token: true, agtp.DuplicateKey.Token: true, agtp.InvalidBody.Token: true,
	agtp.BodyTooLarge.Token: true, agtp.InvalidPathEncoding.Token: true, agtp.PathGrammarViolation.Token: true,
	agtp.InvalidSynthesisID.Token: true, agtp.InvalidIdempotencyKey.Token: true, agtp.InvalidLimit.Token: true,
	agtp.InvalidCursor.Token: true, agtp.InvalidParameter.Token: true,
	agtp.AmbiguousIdempotencyKey.Token: true, agtp.DuplicateHeader.Token: true,
}

// keyReasons are the argumentReasons about the call's Idempotency-Key
// (an HTTP header or _meta), not its arguments: their tool error says
// to fix the key. A duplicate-header is one only when the door itself
// refused a key header sent twice (idempotencyKey): the engine never
// sees a doubled key header from this door, so a duplicate-header it
// answers names another header (keyFault).
var keyReasons = map[string]bool{
	agtp.InvalidIdempotencyKey.Token: true, agtp.AmbiguousIdempotencyKey.Token: true, agtp.DuplicateHeader.Token: true,
}

// keyFault reports whether a refusal with reason is about the call's
// Idempotency-Key: byDoor when the door refused it (engineRequest),
// false when the engine did.
func keyFault(reason string, byDoor bool) bool {
	return keyReasons[reason] && (byDoor || reason != agtp.DuplicateHeader.Token)
}

// TestHookToolCall, set by tests only (nil otherwise), runs at the
// start of each tool call, with the tool's name: a fault injected into
// the door.
var TestHookToolCall atomic.Pointer[func(tool string)]

// handler is the SDK tool handler of t. The SDK runs it on a goroutine
// of its own that recovers nothing, so a panic in it (a defect) is
// recovered here: an ERROR line with its stack, and the call answered
// JSON-RPC -32603; before, it ended the whole process.
func (d *Door) handler(t *mcpTool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if p := recover(); p != nil {
				recovered.Log(d.e.Logger(), "panic in an MCP tool call", p, zap.String("tool", t.name))
				res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the gateway reached no answer for this call (an internal error)"}
			}
		}()
		if h := TestHookToolCall.Load(); h != nil {
			(*h)(t.name)
		}
		rq, _ := ctx.Value(mcpRequestKey{}).(*mcpRequest)
		if rq == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the call did not come through the MCP door"}
		}
		rq.called(t.name)
		// Confirm-first as input_required (inputreq.go): a retry
		// carrying the user's answer presents the preview it approved.
		mrtr := t.kind == mcpRecipe && d.wantsInputRequired(req)
		retry := t.kind == mcpRecipe && isRetry(req)
		if t.kind != mcpRecipe && isRetry(req) {
			// Only a recipe's confirm-first asks a question: a
			// requestState or answers sent to another tool answer
			// nothing this gateway asked.
			const why = "this tool asked no question: a requestState or input responses belong to the call of the recipe tool that asked; nothing ran"
			meta := d.refuseCall(ctx, rq, t, req, agtp.RequestStateInvalid.New(why))
			return d.argumentResult(t, req, 400, reasonRequestStateInvalid, why, nil, meta, false), nil
		}
		if retry {
			sid, refused := d.confirmation(ctx, t, rq, req)
			if refused != nil {
				return refused, nil
			}
			confirmed, ok := withSynthesisID(req, sid)
			if !ok {
				const why = "arguments must be a JSON object"
				meta := d.refuseCall(ctx, rq, t, req, agtp.InvalidParameter.New(why))
				return d.argumentResult(t, req, 400, agtp.InvalidParameter.Token, why, nil, meta, false), nil
			}
			req = confirmed
		}
		in, keyed, jerr := d.engineRequest(ctx, rq, t, req)
		if jerr != nil {
			if jerr.Code == jsonrpc.CodeInvalidParams {
				// Arguments the door cannot turn into a request: a tool
				// error the model reads and corrects (SEP-1303), not a
				// protocol error hosts hide.
				reason, msg := agtp.InvalidParameter.Token, jerr.Message
				if r, rest, ok := strings.Cut(msg, ": "); ok && argumentReasons[r] {
					reason, msg = r, rest
				}
				meta := d.refuseCall(ctx, rq, t, req, argumentError(reason, msg))
				return d.argumentResult(t, req, 400, reason, msg, nil, meta, keyFault(reason, true)), nil
			}
			return nil, jerr
		}
		var resp *agtp.Response
		if rq.taskable && t.kind == mcpRecipe && tasksDeclared(req.Params.Meta) {
			// tasks.go: a call not answered within task_after is a task.
			var task *mcp.CallToolResult
			if resp, task = d.runAsTask(ctx, rq, t, req, in, keyed); task != nil {
				return task, nil
			}
		} else if resp = d.serveWithin(in); resp == nil {
			rq.answered("", agtp.CallTimeout.Token)
			return d.timedOut(t, keyed, req), nil
		}
		rq.answered(resp.RequestID, resp.Reason)
		res, err = d.result(t, rq, req, in.Target, resp)
		if mrtr && !retry && err == nil && resp.Status == policy.StatusContractAvailable {
			return d.previewAsInput(t, rq, req, in.Target, resp, res), nil
		}
		return res, err
	}
}

// invalidParams is the JSON-RPC invalid-params error for a call.
func invalidParams(format string, args ...any) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// engineRequest turns a call of t into the AGTP request it is: the
// tool's pair (path parameters expanded, each as one segment), the
// other arguments as the envelope's parameters, and the header fields.
// keyed: the call carries an Idempotency-Key. Arguments that cannot
// make a request are a JSON-RPC invalid-params error.
func (d *Door) engineRequest(ctx context.Context, rq *mcpRequest, t *mcpTool, req *mcp.CallToolRequest) (*agtp.Request, bool, *jsonrpc.Error) {
	args := map[string]any{}
	if raw := bytes.TrimSpace(req.Params.Arguments); len(raw) > 0 && string(raw) != "null" {
		v, e := agtp.DecodeBody(raw)
		if e != nil {
			return nil, false, invalidParams("arguments: %s", e.Explanation)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false, invalidParams("arguments must be a JSON object")
		}
		args = obj
	}
	if t.args != nil {
		// A built-in listing's arguments meet the schema it advertises
		// (an endpoint's are checked by the engine, against its
		// input_schema).
		if f := t.args.Validate(args); f != nil {
			return nil, false, invalidParams("invalid-input: %s", f.Explanation)
		}
	}
	hd := rq.engineHeader()
	key, keyed, jerr := idempotencyKey(rq.header, req.Params.Meta)
	if jerr != nil {
		return nil, false, jerr
	}
	if keyed {
		hd["Idempotency-Key"] = []string{key}
	}
	target := t.path
	switch t.kind {
	case mcpTierB:
		values := make(map[string]string, len(t.params))
		for _, p := range t.params {
			v, ok := args[p]
			if !ok {
				return nil, false, invalidParams("missing argument %q: it is the path parameter {%s} of %s %s", p, p, t.method, t.path)
			}
			s, ok := segmentValue(v)
			if !ok {
				return nil, false, invalidParams("argument %q is a path parameter of %s %s and must be a string (a number or boolean is taken as its text)", p, t.method, t.path)
			}
			values[p] = s
			delete(args, p)
		}
		p, err := t.ep.Template.Expand(values)
		if err != nil {
			return nil, false, invalidParams("%v", err)
		}
		target = p
	case mcpRecipe:
		if v, ok := args[mcpArgSynthesisID]; ok {
			id, isStr := v.(string)
			if !isStr {
				return nil, false, invalidParams("argument %q must be a string", mcpArgSynthesisID)
			}
			hd["Contract-Synthesized"] = []string{id}
			delete(args, mcpArgSynthesisID)
		} else {
			hd["Allow-Rcns"] = []string{"true"} // calling a recipe tool is the opt-in (lock 2)
		}
		target = t.recipe.PathExact
		if t.regex {
			p, isStr := args[mcpArgPath].(string)
			if !isStr || !strings.HasPrefix(p, "/") {
				return nil, false, invalidParams("argument %q must be an absolute AGTP path matching %s", mcpArgPath, t.recipe.PatternPath())
			}
			// The pair the engine will route: the path in the normal
			// form every tier compares (policy.NormalizePath).
			n, err := policy.NormalizePath(p)
			if err != nil {
				return nil, false, invalidParams("argument %q: the percent-encoding is invalid: %v", mcpArgPath, err)
			}
			if !t.recipe.Matches(t.method, n) {
				return nil, false, invalidParams("path %q does not match the recipe's pattern %s", textcut.Clip(p), t.recipe.PatternPath())
			}
			if ep, _, served := d.e.RecipeSet().Route(t.method, n); served {
				return nil, false, invalidParams("%s %s is served by the Tier B endpoint %s %s, not by the recipe; call that endpoint's tool", t.method, textcut.Clip(p), ep.Method, ep.Path)
			}
			target = p
			delete(args, mcpArgPath)
		}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, false, invalidParams("the path %q is not an origin-form target: %v", textcut.Clip(target), err)
	}
	in := rq.agtpRequest(ctx, t.method, target, u, hd)
	if len(args) > 0 {
		body, err := jsonv2.Marshal(map[string]any{"parameters": args}, jsonv2.Deterministic(true))
		if err != nil {
			return nil, false, invalidParams("arguments: %v", err)
		}
		hd["Content-Type"] = []string{"application/json"}
		in.Body, in.ContentLength = bytes.NewReader(body), int64(len(body))
	}
	return in, keyed, nil
}

// engineHeader is the header of an engine request made for rq: the
// verified Agent-ID and the forwarded AGTP fields of its HTTP request.
func (rq *mcpRequest) engineHeader() http.Header {
	hd := http.Header{"Agent-Id": {rq.ident.AgentID}}
	for _, k := range forwarded {
		if v, ok := rq.header[k]; ok {
			hd[k] = v
		}
	}
	return hd
}

// agtpRequest is the agtp.Request the door hands the engine for rq:
// method and target (u parsed), header hd, the caller's transport and
// its verified identity.
func (rq *mcpRequest) agtpRequest(ctx context.Context, method, target string, u *url.URL, hd http.Header) *agtp.Request {
	return &agtp.Request{Binding: agtp.BindingMCP, Method: method, Target: target, URL: u, Host: rq.host, Header: hd,
		TLS: rq.tls, Loopback: rq.loopback, Context: ctx, Verified: rq.ident}
}

// segmentValue is a path parameter's argument as one path segment's
// text: a string as is, a number or boolean as JSON writes it.
func segmentValue(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// idempotencyKey is the call's Idempotency-Key: the HTTP request's
// Idempotency-Key header, its alias RCNS-Idempotency-Key (as on the
// other doors, idempotencyKeyOf), or the request _meta field
// MCPMetaIdempotencyKey. Each header at most once; given in several
// places, they must name the same key. The key's syntax is the engine's
// to check.
func idempotencyKey(h http.Header, meta mcp.Meta) (string, bool, *jsonrpc.Error) {
	type source struct{ name, value string }
	var got []source
	for _, name := range []string{"Idempotency-Key", engine.IdempotencyKeyAlias} {
		v, ok := h[http.CanonicalHeaderKey(name)]
		if !ok {
			continue
		}
		if len(v) != 1 {
			return "", false, invalidParams("%s: the %s header appears more than once; send it once", agtp.DuplicateHeader.Token, name)
		}
		got = append(got, source{"the " + name + " header", v[0]})
	}
	if mv, ok := meta[MCPMetaIdempotencyKey]; ok {
		s, isString := mv.(string)
		if !isString {
			return "", false, invalidParams("%s: _meta[%q] must be a string", agtp.InvalidIdempotencyKey.Token, MCPMetaIdempotencyKey)
		}
		got = append(got, source{fmt.Sprintf("_meta[%q]", MCPMetaIdempotencyKey), s})
	}
	if len(got) == 0 {
		return "", false, nil
	}
	for _, s := range got[1:] {
		if !engine.SameIdempotencyKey(got[0].value, s.value) {
			return "", false, invalidParams("%s: %s and %s differ; send one", agtp.AmbiguousIdempotencyKey.Token, got[0].name, s.name)
		}
	}
	return got[0].value, true, nil
}

// serveWithin runs in through the engine and waits at most the door's
// timeout for the answer; nil when it did not come in time. The call
// then goes on (the engine detaches upstream calls from the caller, as
// for an HTTP client that disconnects) and a keyed call's answer is
// stored for its replay.
func (d *Door) serveWithin(in *agtp.Request) *agtp.Response {
	done := make(chan *agtp.Response, 1)
	workers.Go(func() { // a reused goroutine: its stack is grown already (internal/workers)
		defer func() {
			if p := recover(); p != nil {
				recovered.Log(d.e.Logger(), "panic in an MCP tool call", p, zap.String("method", in.Method), zap.String("target", in.Target))
				done <- nil
			}
		}()
		done <- d.e.Serve(in.Context, in)
	})
	timer := time.NewTimer(d.timeout())
	defer timer.Stop()
	select {
	case resp := <-done:
		if resp == nil {
			resp = internalErrorResponse()
		}
		return resp
	case <-timer.C:
		return nil
	}
}

// internalErrorResponse stands for an answer the engine did not give.
func internalErrorResponse() *agtp.Response {
	return &agtp.Response{Status: 500, Body: []byte(`{"status":500,"reason":"internal-error","explanation":"the gateway reached no answer for this call","retryable":true}`)}
}

// timedOut is the tool error of a call that outlived the door's
// timeout. It may be repeated when the tool is idempotent or the call
// was keyed (its repeat then waits for, or replays, the first answer).
func (d *Door) timedOut(t *mcpTool, keyed bool, req *mcp.CallToolRequest) *mcp.CallToolResult {
	msg := fmt.Sprintf("the call did not finish within %s; it goes on at the gateway", agtp.FormatDuration(d.timeout()))
	if keyed {
		msg += ", and a repeat with the same Idempotency-Key gets its answer"
	}
	e := &agtp.Error{Status: agtp.CallTimeout.Status, Reason: agtp.CallTimeout.Token, Explanation: msg, Retryable: t.idempotent || keyed}
	var after *int
	if e.Retryable {
		// A repeat sooner would run the call a second time beside the
		// first (unkeyed), or meet it in flight (keyed).
		n := d.retryAfterTimeout(t)
		after = &n
	}
	out := map[string]any{"outcome": "failed", "error": errorObject(e.Status, e.Reason, e.Explanation, e.Retryable, after, nil)}
	res, err := d.toolResult(req, out, errorSummary(e.Reason, e.Explanation, e.Retryable, nil), true, nil)
	if err != nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: e.Error()}}}
	}
	return res
}

// retryAfterTimeout is a timed-out call's retry_after_seconds: the
// whole seconds, at least 1, until the work it left running here has
// ended at the latest: the tool's own bound less the door's timeout the
// call already waited. A Tier B call's bound is its credential's
// resolution and its endpoint's call timeout (engine.CallBound); a
// recipe's is composition_timeout, which bounds its plan, a token
// exchange included; a listing runs no upstream call (1).
func (d *Door) retryAfterTimeout(t *mcpTool) int {
	var bound time.Duration
	switch {
	case t.kind == mcpTierB && t.ep != nil:
		bound = d.e.CallBound(t.ep)
	case t.kind == mcpRecipe:
		bound = time.Duration(d.e.CompositionTimeout)
	}
	left := bound - d.timeout()
	return max(1, int((left+time.Second-1)/time.Second))
}

// result turns the engine's answer into the tool result: 200 and 263
// succeed, 461 is the preview, anything else is a tool error (an
// answer saying the arguments were wrong included: argumentResult).
// The call's Attribution-Record and Audit-ID go into the result's _meta
// and onto the HTTP answer.
func (d *Door) result(t *mcpTool, rq *mcpRequest, req *mcp.CallToolRequest, target string, resp *agtp.Response) (*mcp.CallToolResult, error) {
	meta := d.recordMeta(rq, req, resp)
	if resp.Get("Idempotent-Replayed") == "true" {
		meta[MCPMetaIdempotentReplayed] = true
	}
	// A DISCOVER built-in answers its listing as the body itself; every
	// other answer is a JSON object (an envelope, a contract body, an
	// error body).
	listing := (t.kind == mcpContracts || t.kind == mcpPatterns) && resp.Status == 200
	var members map[string]jsontext.Value
	if !listing {
		if err := jsonv2.Unmarshal(resp.Body, &members); err != nil {
			d.e.Logger().Error("MCP door: an engine answer is not a JSON object", zap.Int("status", resp.Status), zap.Error(err))
			members = map[string]jsontext.Value{}
		}
	}
	var out map[string]any
	var summary string
	isError := false
	switch resp.Status {
	case 200, policy.StatusProposalApproved:
		result := members["result"]
		if listing {
			result = jsontext.Value(resp.Body)
		}
		out = map[string]any{"outcome": "succeeded", "status": resp.Status, "result": rawOrNull(result)}
		if e := d.boundResult(t, out); e != nil {
			e.Explanation = fmt.Sprintf("%s %s ran (%d) but %s", t.method, target, resp.Status, e.Explanation)
			out = map[string]any{"outcome": "failed", "error": errorObject(e.Status, e.Reason, e.Explanation, false, nil, nil)}
			return d.toolResult(req, out, errorSummary(e.Reason, e.Explanation, false, nil), true, meta)
		}
		sid := resp.Get("Contract-Synthesized")
		if sid != "" && t.kind == mcpRecipe {
			out["synthesis_id"] = sid
		}
		if resp.Status == policy.StatusProposalApproved {
			c := map[string]jsontext.Value{}
			for _, k := range []string{"synthesis_id", "method", "path", "recipe_lineage", "contract_hash", "negotiation_origin", "issued_at", "expires_at"} {
				if v, ok := members[k]; ok {
					c[k] = v
				}
			}
			out["contract"] = c
		}
		if t.kind == mcpContracts {
			if c := nextCursor(resp.Get("Link")); c != "" {
				out["next_cursor"] = c
			}
		}
		summary = successSummary(t, target, resp.Status, sid)
	case policy.StatusContractAvailable:
		c := make(map[string]jsontext.Value, len(members))
		for k, v := range members {
			if k != "status" {
				c[k] = v
			}
		}
		var sid string
		_ = jsonv2.Unmarshal(members["synthesis_id"], &sid)
		out = map[string]any{"outcome": "preview", "status": resp.Status, "synthesis_id": sid, "contract": c}
		summary = fmt.Sprintf("%s %s: the gateway previews contract %s (461, confirm-first) and ran nothing. To run it, call %s again with the same arguments and synthesis_id %q.",
			t.method, target, sid, t.name, sid)
	default:
		var b struct {
			Reason      string `json:"reason"`
			Explanation string `json:"explanation"`
			Retryable   bool   `json:"retryable"`
		}
		_ = jsonv2.Unmarshal(resp.Body, &b)
		if b.Reason == "" {
			b.Reason, b.Explanation = agtp.InternalError.Token, "the gateway's answer had no reason"
		}
		retryAfter := retryAfterSeconds(members, resp.Get("Retry-After"))
		details := errorDetails(members)
		if argumentReasons[b.Reason] {
			return d.argumentResult(t, req, resp.Status, b.Reason, b.Explanation, details, meta, keyFault(b.Reason, false)), nil
		}
		isError = true
		out = map[string]any{"outcome": "failed", "error": errorObject(resp.Status, b.Reason, b.Explanation, b.Retryable, retryAfter, details)}
		summary = errorSummary(b.Reason, b.Explanation, b.Retryable, retryAfter)
	}
	return d.toolResult(req, out, summary, isError, meta)
}

// toolResult is the tool result of out (the structured content) with
// its text (textFor) and _meta.
func (d *Door) toolResult(req *mcp.CallToolRequest, out map[string]any, summary string, isError bool, meta mcp.Meta) (*mcp.CallToolResult, error) {
	structured, err := jsonv2.Marshal(out, jsonv2.Deterministic(true))
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the result failed"}
	}
	return &mcp.CallToolResult{Meta: meta, IsError: isError, StructuredContent: jsontext.Value(structured),
		Content: []mcp.Content{&mcp.TextContent{Text: textFor(req, structured, summary, d.cfg.MaxResultText)}}}, nil
}

// argumentResult is the tool error of a call whose arguments are wrong
// (MCP 2025-11-25, SEP-1303: input errors are tool results with
// isError, so the model can read and correct them): status (the
// engine's, or 400 for what the door refused itself, as _meta says), the
// reason token, the explanation with the violations (details: the
// engine's violation list, when it gave one), and how to fix it: the
// call's Idempotency-Key when key (keyFault), else the arguments or,
// for a header sent twice, the headers.
func (d *Door) argumentResult(t *mcpTool, req *mcp.CallToolRequest, status int, reason, explanation string, details map[string]any, meta mcp.Meta, key bool) *mcp.CallToolResult {
	fix := fmt.Sprintf("Fix the arguments to match the inputSchema of %s and call it again.", t.name)
	switch {
	case key:
		fix = "Fix the call's Idempotency-Key (its HTTP header, or _meta[\"" + MCPMetaIdempotencyKey + "\"]) and call it again."
	case reason == agtp.DuplicateHeader.Token:
		fix = "Send each of the call's headers once and call it again."
	}
	msg := sentence(explanation) + " " + fix
	out := map[string]any{"outcome": "failed", "error": errorObject(status, reason, msg, false, nil, details)}
	res, err := d.toolResult(req, out, reason+": "+msg, true, meta)
	if err != nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: reason + ": " + explanation}}}
	}
	return res
}

// recordMeta is the result _meta of the engine's answer resp to a call:
// its status, Audit-ID, Response-ID and RCNS-Attempt-Id, and its
// Attribution-Record when the door's meta_attribution_record or the
// call's own _meta asks for it. The Attribution-Record, Audit-ID and
// RCNS-Attempt-Id also go onto rq's HTTP answer.
func (d *Door) recordMeta(rq *mcpRequest, req *mcp.CallToolRequest, resp *agtp.Response) mcp.Meta {
	meta := mcp.Meta{MCPMetaStatus: resp.Status}
	wantRecord := d.cfg.MetaAttributionRecord || req.Params.Meta[MCPMetaAttributionRecord] == true
	for _, f := range [...]struct{ field, key string }{
		{"Attribution-Record", MCPMetaAttributionRecord}, {"Audit-ID", MCPMetaAuditID}, {"Response-ID", MCPMetaResponseID},
		{"RCNS-Attempt-Id", MCPMetaAttemptID},
	} {
		if v := resp.Get(f.field); v != "" {
			if f.key != MCPMetaAttributionRecord || wantRecord {
				meta[f.key] = v
			}
			if f.field != "Response-ID" {
				rq.addOut(agtp.Field{Name: f.field, Value: v})
			}
		}
	}
	return meta
}

// refuseCall answers e, the door's own refusal of a call of t (arguments
// it cannot turn into a request, a requestState it cannot take, a
// declined confirmation), as the engine answers any refusal
// (engine.Refuse: an Attribution-Record for the call's agent, chained
// and kept as every record is, the answer counted in the requests
// metric): spec §2.3, every response carries one. No AGTP request was
// made, so the record's method is the tool's and its request_hash
// commits to the tool's method, its path (the endpoint's template or
// the recipe's pattern) and the call's arguments as sent (the bytes of
// params.arguments; none: empty), which tells refused calls apart and
// lets an auditor holding the call recompute it. It notes the answer
// for the access log and returns the tool result's _meta (recordMeta:
// the record's Audit-ID and Response-ID; the record and its Audit-ID
// also go onto the HTTP answer), as an engine answer's.
func (d *Door) refuseCall(ctx context.Context, rq *mcpRequest, t *mcpTool, req *mcp.CallToolRequest, e *agtp.Error) mcp.Meta {
	in := rq.agtpRequest(ctx, t.method, t.path, &url.URL{Path: t.path}, rq.engineHeader())
	args := []byte(req.Params.Arguments)
	in.ContentLength = int64(len(args))
	resp := d.e.Refuse(in, e, engine.Refusal{Agent: rq.agent, Body: args, BodyRead: true, Method: t.method})
	rq.answered(resp.RequestID, resp.Reason)
	return d.recordMeta(rq, req, resp)
}

// argumentError is the door's refusal of a call's arguments with
// reason (one of argumentReasons) and explanation: the reason's
// catalog entry at 400, every argument refusal's status.
func argumentError(reason, explanation string) *agtp.Error {
	for _, r := range agtp.Lookup(reason) {
		if r.Status == http.StatusBadRequest {
			return r.New(explanation)
		}
	}
	return &agtp.Error{Status: http.StatusBadRequest, Reason: reason, Explanation: explanation}
}

// rawOrNull is v, or JSON null when the member was absent.
func rawOrNull(v jsontext.Value) jsontext.Value {
	if len(v) == 0 {
		return jsontext.Value("null")
	}
	return v
}

// errorObject is the structured tool error (mcpErrorSchema).
func errorObject(status int, reason, explanation string, retryable bool, retryAfter *int, details map[string]any) map[string]any {
	o := map[string]any{"code": reason, "message": explanation, "retryable": retryable, "status": status, "retry_after_seconds": nil}
	if retryAfter != nil {
		o["retry_after_seconds"] = *retryAfter
	}
	if len(details) > 0 {
		o["details"] = details
	}
	return o
}

// errorFields are the members of an AGTP error body that errorObject
// carries itself, or that name the request the door made.
var errorFields = map[string]bool{"status": true, "reason": true, "explanation": true, "retryable": true,
	"method": true, "path": true, "task_id": true, "retry_after_seconds": true}

// errorDetails are an error body's other members; an upstream failure's
// error.details (the upstream, its status) are lifted up, since code
// already is the error's code.
func errorDetails(members map[string]jsontext.Value) map[string]any {
	out := map[string]any{}
	for k, v := range members {
		if errorFields[k] {
			continue
		}
		if k == "error" {
			var e struct {
				Details map[string]jsontext.Value `json:"details"`
			}
			if jsonv2.Unmarshal(v, &e) == nil && e.Details != nil {
				for dk, dv := range e.Details {
					out[dk] = dv
				}
				continue
			}
		}
		out[k] = v
	}
	return out
}

// retryAfterSeconds is the delay a refusal names: its body's
// retry_after_seconds, else its Retry-After field; nil when none.
func retryAfterSeconds(members map[string]jsontext.Value, header string) *int {
	var n int
	if v, ok := members["retry_after_seconds"]; ok && jsonv2.Unmarshal(v, &n) == nil && n >= 0 {
		return &n
	}
	if header != "" {
		if n, err := strconv.Atoi(header); err == nil && n >= 0 {
			return &n
		}
	}
	return nil
}

// nextCursor is the cursor of a Link rel="next" field
// (`</contracts?limit=N&cursor=C>; rel="next"`), "" when none.
func nextCursor(link string) string {
	start, end := strings.IndexByte(link, '<'), strings.IndexByte(link, '>')
	if start < 0 || end < start || !strings.Contains(link[end:], `rel="next"`) {
		return ""
	}
	u, err := url.Parse(link[start+1 : end])
	if err != nil {
		return ""
	}
	return u.Query().Get("cursor")
}

// successSummary is the lead-in of a successful call's text: what ran
// (textFor appends the result).
func successSummary(t *mcpTool, target string, status int, sid string) string {
	switch {
	case status == policy.StatusProposalApproved:
		return fmt.Sprintf("%s %s: contract %s was synthesized from recipe %s v%s and run (263); the result follows.",
			t.method, target, sid, t.recipe.Name, t.recipe.Version)
	case sid != "":
		return fmt.Sprintf("%s %s ran under contract %s (200); the result follows.", t.method, target, sid)
	}
	return fmt.Sprintf("%s %s answered 200; the result follows.", t.method, target)
}

// errorSummary is the short text of a tool error: "REASON: explanation."
// and whether it may be retried.
func errorSummary(reason, explanation string, retryable bool, retryAfter *int) string {
	s := reason + ": " + sentence(explanation)
	switch {
	case retryable && retryAfter != nil:
		s += fmt.Sprintf(" Retryable after %d s.", *retryAfter)
	case retryable:
		s += " Retryable."
	default:
		s += " Not retryable unchanged."
	}
	return s
}

// textFor is a result's text content (MCP 2025-06-18: a tool returning
// structured content SHOULD also return it serialized in a text
// block): the summary as a lead-in, then the structured content itself,
// cut at limit bytes in all (at a UTF-8 boundary) with a note saying how much
// was left out; clients that hand only the text to the model then show
// it the result. A client on a revision before 2025-06-18, which has no
// structuredContent, gets the structured content alone, uncut.
func textFor(req *mcp.CallToolRequest, structured []byte, summary string, limit int) string {
	if v := req.ProtocolVersion(); v != "" && v < "2025-06-18" {
		return string(structured)
	}
	body := string(structured)
	if room := limit - len(summary) - 1; len(body) > room {
		cut := max(room, 0)
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body = body[:cut] + fmt.Sprintf("… [cut at %d of %d bytes: the whole result is in structuredContent; narrow the query for less]", cut, len(structured))
	}
	return summary + "\n" + body
}

// resultBound is the max_result_bytes of t's results: its endpoint's,
// else the door's.
func (d *Door) resultBound(t *mcpTool) int64 {
	if t.ep != nil && t.ep.MaxResultBytes > 0 {
		return t.ep.MaxResultBytes
	}
	return d.cfg.MaxResultBytes
}

// boundResult holds out's result (raw JSON) to resultBound: an array
// over it is cut at an item boundary, keeping the items that fit, and
// out gains truncated, total_items, returned_items and a note (nothing
// is cut silently); any other result over it is result-too-large.
func (d *Door) boundResult(t *mcpTool, out map[string]any) *agtp.Error {
	raw, _ := out["result"].(jsontext.Value)
	limit := d.resultBound(t)
	if int64(len(raw)) <= limit {
		return nil
	}
	if raw.Kind() != '[' {
		return agtp.ResultTooLarge.Newf("its result is %d bytes, over the bound of %d bytes (max_result_bytes), and is not an array that could be cut: narrow the call's parameters, or read the result over the HTTP binding", len(raw), limit)
	}
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.ReadToken(); err != nil { // '['
		return agtp.ResultTooLarge.Newf("its result is %d bytes, over %d (max_result_bytes)", len(raw), limit)
	}
	kept := []byte{'['}
	total, returned := 0, 0
	for dec.PeekKind() != ']' && dec.PeekKind() != 0 {
		v, err := dec.ReadValue()
		if err != nil {
			break
		}
		total++
		if returned == total-1 && int64(len(kept)+len(v)+2) <= limit {
			if returned > 0 {
				kept = append(kept, ',')
			}
			kept = append(kept, v...)
			returned++
		}
	}
	kept = append(kept, ']')
	out["result"] = jsontext.Value(kept)
	out["truncated"], out["total_items"], out["returned_items"] = true, total, returned
	out["note"] = fmt.Sprintf("The result is cut to its first %d of %d items: the whole is %d bytes, over the bound of %d bytes (max_result_bytes). Narrow the call's parameters (a filter, a page or a limit, where the tool takes one) to see the rest.",
		returned, total, len(raw), limit)
	return nil
}
