package mcpdoor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Confirm-first as input_required (MCP 2026-07-28, SEP-2322
// multi-round-trip; docs/agent-guide-mcp.md "Confirm-first on
// 2026-07-28"). To a client on 2026-07-28 that declares the elicitation
// capability, a recipe call the engine answers 461 (the preview, which
// ran nothing) is answered with an input request instead of the
// preview result: one form elicitation, the question, asking the user
// to approve the contract the preview describes (what will run, its
// impact, its terms), and a requestState naming the preview. The
// client's retry carries the user's answer and the requestState back:
// an accepting answer presents the preview's synthesis_id
// (Contract-Synthesized), exactly as a second call with synthesis_id
// does on the older revisions, so the engine mints and runs the
// contract on the same path, with the same records and the same
// Idempotency-Key (the retry repeats the call's HTTP header fields and
// _meta). A declined or cancelled answer presents nothing: the
// preview stays pending until its expiry, as an unconfirmed 461 does,
// and the result is a tool error saying nothing ran.
//
// The requestState is sealed: an HMAC-SHA256 under Engine.SealKey of
// the synthesis_id, the agent, the tool, the digest of the call's
// arguments and an expiry. With store redis the key is the gateway's,
// shared by every node and kept across restarts, so the retry may land
// on any node; with store memory it is this process's own. A state
// altered, made for another agent or tool, for other arguments,
// expired, or sealed under another key (store memory: another process,
// or before a restart) is refused and presents nothing. A node of
// store redis that could not read the shared key yet issues no
// requestState (the older preview instead) and answers a retry 503
// store-unavailable, retryable (engine/sealkey.go).

// Names of the elicitation the door asks.
const (
	// mcpInputApprove is the input request's id and its form field:
	// a boolean, true to approve the contract.
	mcpInputApprove = "approve"
	// MCPMetaPreview is the elicitation's _meta key carrying the
	// preview's structured content (synthesis_id, contract).
	MCPMetaPreview = MCPMetaPrefix + "preview"
)

// Reason tokens of the input_required flow's tool errors (in the
// agtp catalog with their statuses).
var (
	// reasonRequestStateInvalid: the retry's requestState was not sealed
	// by this gateway for this agent, tool and arguments, or has expired.
	reasonRequestStateInvalid = agtp.RequestStateInvalid.Token
	// reasonConfirmationDeclined: the user declined or cancelled the
	// approval; nothing ran.
	reasonConfirmationDeclined = agtp.ConfirmationDeclined.Token
)

// mrtrStateVersion is the sealed state's format version.
const mrtrStateVersion = 1

// mrtrState is what a requestState seals.
type mrtrState struct {
	V       int    `json:"v"`
	SID     string `json:"sid"`
	Agent   string `json:"agent"`
	Tool    string `json:"tool"`
	Args    string `json:"args"` // hex SHA-256 of the arguments' deterministic JSON, synthesis_id left out
	Expires int64  `json:"exp"`  // Unix seconds
}

// wantsInputRequired reports whether req's client gets confirm-first
// as input_required: it speaks 2026-07-28 or later (the request's
// protocol version, and the session the SDK built for it: an older one
// has InitializeParams naming its version) and declared the
// elicitation capability (form mode, the default).
func (d *Door) wantsInputRequired(req *mcp.CallToolRequest) bool {
	if d.e.SealKey() == nil || req.ProtocolVersion() < "2026-07-28" {
		return false
	}
	if req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil && p.ProtocolVersion < "2026-07-28" {
			return false
		}
	}
	if m, ok := req.Params.Meta[mcp.MetaKeyClientCapabilities].(map[string]any); ok {
		// An object naming no elicitation decodes to none: the SDK's
		// reading of it (ClientCapabilities) would cost a decode with a
		// fresh 32 KiB buffer on every recipe call.
		if _, named := m["elicitation"]; !named {
			return false
		}
	}
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil && (caps.Elicitation.Form != nil || caps.Elicitation.URL == nil)
}

// isRetry reports whether req is a multi-round-trip retry (it carries
// a requestState or input responses).
func isRetry(req *mcp.CallToolRequest) bool {
	return req.Params.RequestState != "" || req.Params.InputResponses != nil
}

// argsDigest is the hex SHA-256 of a call's arguments as deterministic
// JSON, synthesis_id left out; "" when they are not a JSON object (the
// engine request then refuses them).
func argsDigest(raw []byte) string {
	args := map[string]any{}
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && string(raw) != "null" {
		v, e := agtp.DecodeBody(raw)
		if e != nil {
			return ""
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		args = obj
	}
	delete(args, mcpArgSynthesisID)
	b, err := jsonv2.Marshal(args, jsonv2.Deterministic(true))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// seal is the requestState of st under key: base64url(JSON) "."
// base64url(MAC).
func seal(key []byte, st mrtrState) string {
	body, _ := jsonv2.Marshal(st, jsonv2.Deterministic(true))
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// unseal checks a requestState under key (non-empty) for the call of t
// by agent with arguments digest args at now, and returns the
// synthesis_id it names; the explanation of the refusal otherwise.
func unseal(key []byte, s string, t *mcpTool, agent, args string, now time.Time) (string, string) {
	b64, mac64, ok := strings.Cut(s, ".")
	body, err1 := base64.RawURLEncoding.DecodeString(b64)
	mac, err2 := base64.RawURLEncoding.DecodeString(mac64)
	if !ok || err1 != nil || err2 != nil {
		return "", "the requestState is not one this gateway issued"
	}
	m := hmac.New(sha256.New, key)
	m.Write(body)
	if !hmac.Equal(m.Sum(nil), mac) {
		return "", "the requestState was altered, or was issued under another seal key (store memory: by another gateway process, or before a restart)"
	}
	var st mrtrState
	if jsonv2.Unmarshal(body, &st) != nil || st.V != mrtrStateVersion || st.SID == "" {
		return "", "the requestState is not one this gateway issued"
	}
	switch {
	case st.Agent != agent:
		return "", "the requestState was issued to another agent"
	case st.Tool != t.name:
		return "", fmt.Sprintf("the requestState was issued for tool %s, not %s", st.Tool, t.name)
	case st.Args != args:
		return "", "the call's arguments differ from those of the call the requestState answers"
	case now.Unix() > st.Expires:
		return "", "the requestState has expired (the preview it names has)"
	}
	return st.SID, ""
}

// previewAsInput turns the preview result res of a 461 answer resp into
// the input_required result (inputRequired), its _meta (status,
// Audit-ID, Response-ID) kept.
func (d *Door) previewAsInput(t *mcpTool, rq *mcpRequest, req *mcp.CallToolRequest, target string, resp *agtp.Response, res *mcp.CallToolResult) *mcp.CallToolResult {
	var members map[string]jsontext.Value
	_ = jsonv2.Unmarshal(resp.Body, &members)
	var preview map[string]any
	if b, ok := res.StructuredContent.(jsontext.Value); ok {
		_ = jsonv2.Unmarshal(b, &preview)
	}
	out := d.inputRequired(t, rq, req, target, members, preview)
	for k, v := range res.Meta {
		out.Meta[k] = v
	}
	return out
}

// inputRequired is the input_required result of a recipe call of t the
// engine previewed (461; members: its body): the elicitation asking
// the user to approve the contract, and the sealed state naming it.
// preview is the structured content the older revisions get.
func (d *Door) inputRequired(t *mcpTool, rq *mcpRequest, req *mcp.CallToolRequest, target string, members map[string]jsontext.Value, preview map[string]any) *mcp.CallToolResult {
	var sid, expires string
	_ = jsonv2.Unmarshal(members["synthesis_id"], &sid)
	_ = jsonv2.Unmarshal(members["expires_at"], &expires)
	exp := time.Now().Add(10 * time.Minute)
	if at, err := time.Parse(time.RFC3339, expires); err == nil {
		exp = at
	}
	state := seal(d.e.SealKey(), mrtrState{V: mrtrStateVersion, SID: sid, Agent: rq.agent.ID, Tool: t.name, Args: argsDigest(req.Params.Arguments), Expires: exp.Unix()})
	q := &mcp.ElicitParams{Mode: "form", Message: approvalMessage(t, target, sid, expires),
		RequestedSchema: map[string]any{"type": "object", "required": []any{mcpInputApprove}, "properties": map[string]any{
			mcpInputApprove: map[string]any{"type": "boolean", "title": "Approve and run",
				"description": "true runs the contract now; false (or declining) runs nothing"},
		}},
		Meta: mcp.Meta{MCPMetaPreview: preview},
	}
	return &mcp.CallToolResult{Meta: mcp.Meta{MCPMetaStatus: policy.StatusContractAvailable},
		InputRequests: mcp.InputRequestMap{mcpInputApprove: q}, RequestState: state}
}

// stepPlan names a recipe's calls in declared order, each step that
// reads earlier ones marked "after" them; the others start together,
// so the wording says no order the plan does not keep:
// "FETCH /items/{id}; GET /b (after item)".
func stepPlan(steps []*recipes.Step) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s.Endpoint.Method + " " + s.Endpoint.Path)
		if len(s.Deps) > 0 {
			b.WriteString(" (after ")
			for j, d := range s.Deps {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(steps[d].Name)
			}
			b.WriteString(")")
		}
	}
	if len(steps) > 1 {
		b.WriteString("; steps without an \"after\" start together")
	}
	return b.String()
}

// approvalMessage is the elicitation's question: what will run (the
// pair, the recipe and its steps), its impact and the contract's terms.
func approvalMessage(t *mcpTool, target, sid, expires string) string {
	r := t.recipe
	var b strings.Builder
	fmt.Fprintf(&b, "Approve running %s %s? The gateway previewed contract %s from recipe %s v%s and ran nothing yet.", t.method, target, sid, r.Name, r.Version)
	if r.Description != "" {
		fmt.Fprintf(&b, " %s", sentence(r.Description))
	}
	fmt.Fprintf(&b, " It runs %d call(s): %s.", len(r.Steps), stepPlan(r.Steps))
	if r.StateChanging() {
		b.WriteString(" Impact: it changes state upstream.")
	} else {
		b.WriteString(" Impact: read-only.")
	}
	if len(r.RequiredScopes) > 0 {
		fmt.Fprintf(&b, " Scopes: %s.", strings.Join(scopeStrs(r.RequiredScopes), ", "))
	}
	if expires != "" {
		fmt.Fprintf(&b, " The offer expires at %s.", expires)
	}
	return b.String()
}

// confirmation reads the retry of a recipe call: the sealed state and
// the user's answer. It returns the synthesis_id to present when the
// user approved; otherwise the tool error to answer with (state
// refused, or declined: nothing ran).
func (d *Door) confirmation(ctx context.Context, t *mcpTool, rq *mcpRequest, req *mcp.CallToolRequest) (string, *mcp.CallToolResult) {
	fail := func(status int, reason, msg string, retryable bool, retryAfter *int, details map[string]any) *mcp.CallToolResult {
		meta := d.refuseCall(ctx, rq, t, req, &agtp.Error{Status: status, Reason: reason, Explanation: msg, Retryable: retryable})
		out := map[string]any{"outcome": "failed", "error": errorObject(status, reason, msg, retryable, retryAfter, details)}
		res, err := d.toolResult(req, out, errorSummary(reason, msg, retryable, retryAfter), true, meta)
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: reason + ": " + msg}}}
		}
		return res
	}
	key := d.e.SealKey()
	if len(key) == 0 {
		// The node reads the key again at most once per SealRetryEvery.
		sealRetry := int(engine.SealRetryEvery / time.Second)
		return "", fail(503, agtp.StoreUnavailable.Token, "this gateway node cannot read the shared seal key from the store yet, so it cannot check the requestState; nothing was presented or run. Retry the same call later.", true, &sealRetry, nil)
	}
	sid, why := unseal(key, req.Params.RequestState, t, rq.agent.ID, argsDigest(req.Params.Arguments), time.Now())
	if why != "" {
		return "", fail(400, reasonRequestStateInvalid, why+"; nothing was presented or run. Call "+t.name+" again without requestState to be asked anew.", false, nil, nil)
	}
	ans, _ := req.Params.InputResponses[mcpInputApprove].(*mcp.ElicitResult)
	if ans == nil {
		return "", fail(400, reasonRequestStateInvalid, fmt.Sprintf("the retry carries no elicitation answer for input request %q; nothing ran", mcpInputApprove), false, nil, nil)
	}
	if ans.Action == "accept" && ans.Content[mcpInputApprove] == true {
		return sid, nil
	}
	action := ans.Action
	if action == "accept" {
		action = "accept without approve: true"
	}
	return "", fail(409, reasonConfirmationDeclined,
		fmt.Sprintf("the user did not approve contract %s (%s); nothing ran and nothing was minted. Its preview lapses unconfirmed; call %s again to be asked again.", sid, action, t.name),
		true, nil, map[string]any{"synthesis_id": sid, "action": ans.Action})
}

// withSynthesisID is req with synthesis_id added to its arguments, the
// presentation of a preview (engineRequest reads it as on the older
// revisions); the original request is not modified.
func withSynthesisID(req *mcp.CallToolRequest, sid string) (*mcp.CallToolRequest, bool) {
	args := map[string]any{}
	if raw := bytes.TrimSpace(req.Params.Arguments); len(raw) > 0 && string(raw) != "null" {
		v, e := agtp.DecodeBody(raw)
		if e != nil {
			return nil, false
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		args = obj
	}
	args[mcpArgSynthesisID] = sid
	b, err := jsonv2.Marshal(args, jsonv2.Deterministic(true))
	if err != nil {
		return nil, false
	}
	p := *req.Params
	p.Arguments = b
	r := *req
	r.Params = &p
	return &r, true
}
