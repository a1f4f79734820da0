package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// The MCP door from the outside: the official go-sdk's client over
// Streamable HTTP, headers added (and requests signed) by its HTTP
// client's transport, every structured result checked against the
// outputSchema the tool advertises.

// MCP _meta keys of the gateway (docs/agent-guide-mcp.md).
const (
	metaIdemKey     = "io.github.caddy-rcns/idempotency-key"
	metaAttribution = "io.github.caddy-rcns/attribution-record"
	metaAuditID     = "io.github.caddy-rcns/audit-id"
	metaReplayed    = "io.github.caddy-rcns/idempotent-replayed"
	metaStatus      = "io.github.caddy-rcns/agtp-status"
	metaAttemptID   = "io.github.caddy-rcns/rcns-attempt-id"
)

// mcpTransport adds fixed header fields to every request, signs it when
// key is set (RFC 9421, as the gateway's identity signature wants:
// Content-Digest of the body, a fresh nonce), and keeps the header of
// the last answer.
type mcpTransport struct {
	hdr   map[string]string
	key   *idvKey
	agent string // Agent-ID signed for
	base  http.RoundTripper

	mu   sync.Mutex
	last http.Header
}

func (t *mcpTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.hdr {
		r.Header.Set(k, v)
	}
	if t.key != nil {
		var body []byte
		if r.Body != nil {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			body = b
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		r.Header.Set("Agent-ID", t.agent)
		if len(body) > 0 {
			httpsig.SetContentDigest(r.Header, body)
		}
		n := make([]byte, 16)
		rand.Read(n)
		now := time.Now()
		s := &httpsig.Signer{KeyID: t.key.kid, Alg: t.key.alg, Key: t.key.signer}
		if err := s.Sign(r, httpsig.SignOptions{Created: now, Expires: now.Add(60 * time.Second), Nonce: base64.RawURLEncoding.EncodeToString(n)}); err != nil {
			return nil, err
		}
	}
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		t.mu.Lock()
		t.last = resp.Header.Clone()
		t.mu.Unlock()
	}
	return resp, err
}

// lastHeader is the header of the latest answer.
func (t *mcpTransport) lastHeader() http.Header {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// mcpConn is one SDK client session and the tools it listed.
type mcpConn struct {
	s     *mcp.ClientSession
	tr    *mcpTransport
	tools map[string]*mcp.Tool
	order []string // names as listed
}

// mcpConnect connects the SDK's client to g's MCP door at path as agent
// with Authority-Scope scope ("" omits either), lists its tools (every
// page) and checks each outputSchema compiles.
func mcpConnect(t testing.TB, g *Gateway, path, agent, scope string, kv ...string) *mcpConn {
	t.Helper()
	tr := &mcpTransport{hdr: map[string]string{}, base: http.DefaultTransport}
	if agent != "" {
		tr.hdr["Agent-ID"] = agent
	}
	if scope != "" {
		tr.hdr["Authority-Scope"] = scope
	}
	for i := 0; i+1 < len(kv); i += 2 {
		tr.hdr[kv[i]] = kv[i+1]
	}
	return mcpConnectWith(t, g.URL+path, tr)
}

func mcpConnectWith(t testing.TB, url string, tr *mcpTransport) *mcpConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "rcns-it", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr, Timeout: requestTimeout}}, nil)
	if err != nil {
		t.Fatalf("MCP connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	mc := &mcpConn{s: s, tr: tr, tools: map[string]*mcp.Tool{}}
	for tl, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		mc.tools[tl.Name] = tl
		mc.order = append(mc.order, tl.Name)
	}
	return mc
}

// names are the listed tool names in listing order.
func (c *mcpConn) names() string { return strings.Join(c.order, " ") }

// mcpResult is one tool call's answer.
type mcpResult struct {
	res        *mcp.CallToolResult
	structured map[string]any
	header     http.Header // the HTTP answer's header (sequential calls only)
}

// call calls tool with args (and _meta) and fails the test on a
// protocol error; the structured result is checked against the tool's
// outputSchema.
func (c *mcpConn) call(t testing.TB, tool string, args map[string]any, meta mcp.Meta) *mcpResult {
	t.Helper()
	r, err := c.tryCall(t, tool, args, meta)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	return r
}

// tryCall is call returning a protocol error instead of failing.
func (c *mcpConn) tryCall(t testing.TB, tool string, args map[string]any, meta mcp.Meta) (*mcpResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	res, err := c.s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
	if err != nil {
		return nil, err
	}
	r := &mcpResult{res: res, header: c.tr.lastHeader()}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: structuredContent: %v", tool, err)
	}
	if err := json.Unmarshal(raw, &r.structured); err != nil || r.structured == nil {
		t.Fatalf("%s: structuredContent is not an object: %s", tool, raw)
	}
	validateOutput(t, c.tools[tool], raw)
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content blocks, want one text block", tool, len(res.Content))
	}
	// The text is a one-line summary, then the structured content
	// serialized (the same JSON value; cut only past max_result_text).
	txt, ok := res.Content[0].(*mcp.TextContent)
	lead, body, _ := strings.Cut(txt.Text, "\n")
	var same map[string]any
	if !ok || lead == "" || (json.Unmarshal([]byte(body), &same) != nil && !strings.Contains(body, "[cut at ")) || (same != nil && !reflect.DeepEqual(same, r.structured)) {
		t.Fatalf("%s: content is not the summary and the result: %#v", tool, res.Content[0])
	}
	return r, nil
}

// validateOutput checks a structured result against the outputSchema
// tool advertises (JSON Schema 2020-12, santhosh-tekuri/jsonschema).
func validateOutput(t testing.TB, tool *mcp.Tool, raw []byte) {
	t.Helper()
	if tool == nil || tool.OutputSchema == nil {
		t.Fatalf("the tool advertises no outputSchema")
	}
	sraw, _ := json.Marshal(tool.OutputSchema)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(sraw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem:///"+tool.Name+".json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem:///" + tool.Name + ".json")
	if err != nil {
		t.Fatalf("%s: outputSchema does not compile: %v", tool.Name, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Fatalf("%s: structuredContent %s does not validate against its outputSchema: %v", tool.Name, raw, err)
	}
}

// outcome is the structured result's outcome.
func (r *mcpResult) outcome() string { return str(r.structured, "outcome") }

// errCode is a failed result's error.code.
func (r *mcpResult) errCode() string { return str(r.structured, "error", "code") }

// wantError checks a tool error: isError, its code, status and
// retryable.
func (r *mcpResult) wantError(t testing.TB, code string, status int, retryable bool) map[string]any {
	t.Helper()
	e, _ := field(r.structured, "error").(map[string]any)
	if !r.res.IsError || r.outcome() != "failed" || e == nil {
		t.Fatalf("want a tool error %s, got isError=%v %v", code, r.res.IsError, r.structured)
	}
	if e["code"] != code || e["status"] != float64(status) || e["retryable"] != retryable {
		t.Fatalf("tool error = %v, want code %s, status %d, retryable %v", e, code, status, retryable)
	}
	if _, ok := e["retry_after_seconds"]; !ok {
		t.Fatalf("tool error has no retry_after_seconds: %v", e)
	}
	return e
}

// wantSuccess checks a successful result and returns its result.
func (r *mcpResult) wantSuccess(t testing.TB, status int) any {
	t.Helper()
	if r.res.IsError || r.outcome() != "succeeded" || r.structured["status"] != float64(status) {
		t.Fatalf("want success %d, got isError=%v %v", status, r.res.IsError, r.structured)
	}
	return r.structured["result"]
}

// wantRecord checks that the call's Audit-ID is in the result's _meta
// and the full Attribution-Record is not (light _meta, the door's
// default), and, for a sequential call, that the HTTP answer carries
// the record and the same Audit-ID.
func (r *mcpResult) wantRecord(t testing.TB) {
	t.Helper()
	aud, _ := r.res.Meta[metaAuditID].(string)
	if _, has := r.res.Meta[metaAttribution]; has || len(aud) != 64 {
		t.Fatalf("_meta = %v, want the Audit-ID and no Attribution-Record", r.res.Meta)
	}
	if r.header != nil && (strings.Count(r.header.Get("Attribution-Record"), ".") != 2 || r.header.Get("Audit-ID") != aud) {
		t.Fatalf("HTTP answer: Attribution-Record %q, Audit-ID %q; want a record and the _meta Audit-ID", r.header.Get("Attribution-Record"), r.header.Get("Audit-ID"))
	}
}

// wantArgumentError checks that the call's arguments were refused as a
// tool error the model reads (isError, error.code reason, the message
// mentioning want and saying how to fix it), not a JSON-RPC error.
func (r *mcpResult) wantArgumentError(t testing.TB, reason, want string) {
	t.Helper()
	e, _ := r.structured["error"].(map[string]any)
	text := ""
	if len(r.res.Content) > 0 {
		if tc, ok := r.res.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	if !r.res.IsError || str(e, "code") != reason || !strings.Contains(str(e, "message"), want) || !strings.Contains(text, "Fix the arguments") {
		t.Fatalf("want an isError result %s mentioning %q, got %v (text %q)", reason, want, r.structured, text)
	}
}

// wantInvalidParams checks that err is a JSON-RPC invalid-params error
// mentioning want.
func wantInvalidParams(t testing.TB, err error, want string) *jsonrpc.Error {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, want) {
		t.Fatalf("want JSON-RPC invalid params mentioning %q, got %v", want, err)
	}
	return je
}

// mcpRaw posts one raw MCP message (JSON-RPC) to g's MCP door.
func mcpRaw(t testing.TB, g *Gateway, path, body string, hdr map[string]string) *Resp {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	for k, v := range hdr {
		h[k] = v
	}
	return g.DoHTTP(t, "POST", path, h, []byte(body))
}

// bookArgs are the demo booking's tool arguments.
func bookArgs() map[string]any {
	return map[string]any{"guest_id": demoGuest, "property_id": demoProperty, "check_in": demoCheckIn, "nights": demoNights}
}
