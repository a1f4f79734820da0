package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
	"github.com/caddy-rcns/caddy-rcns/recipes"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// inputReqGateway is a confirm-first gateway with the MCP door, served
// on loopback, with a second agent (other) beside the bench agent; the
// MCP URL and the count of the calls its upstream answered.
func inputReqGateway(t *testing.T) (*Handler, string, string, *atomic.Int32) {
	t.Helper()
	sum := sha256.Sum256([]byte("rcns-other-agent"))
	other := hex.EncodeToString(sum[:])
	dir := t.TempDir()
	doc := "agent_id: " + other + "\nname: rcns-other-agent\nowner_id: bench-ops\ntrust_tier: 1\nstatus: active\nscopes: [rcns:negotiate, bench:read]\n"
	if err := os.WriteFile(filepath.Join(dir, "other.yaml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	h, calls := confirmFirstHandler(t, func(h *Handler) {
		h.MCP = &mcpdoor.Config{}
		h.Agents = append(h.Agents, dir)
	})
	srv := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, benchServer)
		if err := h.ServeHTTP(w, r, notFound); err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	}))
	return h, srv.URL + "/mcp", other, calls
}

// inputReqClient is the go-sdk client (2026-07-28) of url as agent, its
// elicitation handler elicit; manual: the multi-round-trip middleware
// off (the test retries itself).
func inputReqClient(t *testing.T, url, agent string, elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error), manual bool) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{ElicitationHandler: elicit}
	if manual {
		opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "rcns-test", Version: "1"}, opts)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: headerTransport{h: map[string]string{"Agent-ID": agent, "Authority-Scope": "rcns:negotiate, bench:read"}, base: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// structured is a result's structured content as a map.
func structured(res *mcp.CallToolResult) map[string]any {
	var sc map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &sc)
	return sc
}

// TestMCPInputRequired: confirm-first as input_required (MCP
// 2026-07-28, SEP-2322) with the go-sdk's own client. Approved through
// the elicitation, the call mints and runs the contract (the upstream
// called once, the contract active); its retry replayed with the same
// Idempotency-Key runs nothing more; a declined answer runs nothing and
// leaves the preview pending; a requestState altered, replayed by
// another agent or for other arguments, or sent to a tool that asked
// nothing, is refused; a 2025-11-25 client
// still gets the preview and synthesis_id.
func TestMCPInputRequired(t *testing.T) {
	h, url, other, calls := inputReqGateway(t)
	ctx := context.Background()
	var asked atomic.Int32
	var question *mcp.ElicitParams
	approve := func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Add(1)
		question = r.Params
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}
	contractState := func(path string) string {
		for _, c := range h.state.MemoryStore().ContractStore().List(benchAgent) {
			if c.Path == path {
				return h.state.MemoryStore().ContractStore().State(c)
			}
		}
		return ""
	}

	// Approved: the elicitation is the question, the retry its answer.
	s := inputReqClient(t, url, benchAgent, approve, false)
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "lookup-item", Arguments: map[string]any{"path": "/item/ir-1", "item_id": "1"},
		Meta: mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: "k-ir-1"}})
	if err != nil || res.IsError {
		t.Fatalf("approved call: %v %+v", err, res)
	}
	sc := structured(res)
	if sc["outcome"] != "succeeded" || sc["status"] != float64(200) || sc["synthesis_id"] == nil || asked.Load() != 1 || calls.Load() != 1 {
		t.Fatalf("approved call: %v (asked %d, upstream %d)", sc, asked.Load(), calls.Load())
	}
	if !strings.Contains(question.Message, "Approve running LOOKUP /item/ir-1") || !strings.Contains(question.Message, "FETCH /items/{item_id}") ||
		!strings.Contains(question.Message, "read-only") || question.Meta[mcpdoor.MCPMetaPreview] == nil {
		t.Errorf("the question: %q %v", question.Message, question.Meta)
	}
	if st := contractState("/item/ir-1"); st != recipes.StateActive {
		t.Errorf("approved contract is %q, want active", st)
	}

	// Manual rounds: the input_required result, then the retries.
	m := inputReqClient(t, url, benchAgent, approve, true)
	args := map[string]any{"path": "/item/ir-2", "item_id": "1"}
	key := mcp.Meta{mcpdoor.MCPMetaIdempotencyKey: "k-ir-2"}
	first, err := m.CallTool(ctx, &mcp.CallToolParams{Name: "lookup-item", Arguments: args, Meta: key})
	if err != nil || !first.NeedsInput() || first.RequestState == "" || first.InputRequests["approve"] == nil || len(first.Content) != 0 {
		t.Fatalf("first round: %v %+v", err, first)
	}
	if calls.Load() != 1 || contractState("/item/ir-2") != recipes.StatePending {
		t.Fatalf("the first round ran something: upstream %d, contract %q", calls.Load(), contractState("/item/ir-2"))
	}
	retry := func(s *mcp.ClientSession, args map[string]any, state string, action string, approve bool) map[string]any {
		t.Helper()
		r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "lookup-item", Arguments: args, Meta: key, RequestState: state,
			InputResponses: mcp.InputResponseMap{"approve": &mcp.ElicitResult{Action: action, Content: map[string]any{"approve": approve}}}})
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		sc := structured(r)
		if r.IsError != (sc["outcome"] == "failed") {
			t.Errorf("retry: isError %v for %v", r.IsError, sc)
		}
		return sc
	}
	code := func(sc map[string]any) any {
		e, _ := sc["error"].(map[string]any)
		return e["code"]
	}
	// Refused states present nothing.
	tampered := []byte(first.RequestState)
	tampered[3] ^= 1
	for name, c := range map[string]struct {
		s     *mcp.ClientSession
		args  map[string]any
		state string
	}{
		"altered":         {m, args, string(tampered)},
		"truncated":       {m, args, first.RequestState[:len(first.RequestState)-2]},
		"other agent":     {inputReqClient(t, url, other, approve, true), args, first.RequestState},
		"other arguments": {m, map[string]any{"path": "/item/ir-2", "item_id": "2"}, first.RequestState},
	} {
		if sc := retry(c.s, c.args, c.state, "accept", true); code(sc) != "request-state-invalid" {
			t.Errorf("%s requestState: %v, want request-state-invalid", name, sc)
		}
	}
	// A requestState sent to a tool that asked no question (a Tier B
	// endpoint, a built-in) is refused and runs nothing.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{{"fetch_item", map[string]any{"item_id": "1"}}, {"discover_contracts", map[string]any{}}} {
		r, err := m.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args, RequestState: first.RequestState,
			InputResponses: mcp.InputResponseMap{"approve": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}})
		if err != nil || !r.IsError || code(structured(r)) != "request-state-invalid" {
			t.Errorf("requestState sent to %s: %v %+v, want request-state-invalid", c.tool, err, r)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("a requestState sent to another tool ran something: upstream %d", calls.Load())
	}
	// Declined: nothing ran, the preview stays pending.
	for _, d := range []struct {
		action  string
		approve bool
	}{{"decline", false}, {"cancel", false}, {"accept", false}} {
		sc := retry(m, args, first.RequestState, d.action, d.approve)
		if code(sc) != "confirmation-declined" {
			t.Errorf("%s: %v, want confirmation-declined", d.action, sc)
		}
	}
	if calls.Load() != 1 || contractState("/item/ir-2") != recipes.StatePending {
		t.Fatalf("refused or declined rounds ran something: upstream %d, contract %q", calls.Load(), contractState("/item/ir-2"))
	}
	// Approved, then the same retry again with the key: replayed.
	if sc := retry(m, args, first.RequestState, "accept", true); sc["outcome"] != "succeeded" || sc["status"] != float64(200) {
		t.Fatalf("approved retry: %v", sc)
	}
	r2, err := m.CallTool(ctx, &mcp.CallToolParams{Name: "lookup-item", Arguments: args, Meta: key, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{"approve": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}})
	if err != nil || structured(r2)["outcome"] != "succeeded" || r2.Meta[mcpdoor.MCPMetaIdempotentReplayed] != true {
		t.Fatalf("repeated retry: %v %+v", err, r2)
	}
	if calls.Load() != 2 || contractState("/item/ir-2") != recipes.StateActive {
		t.Errorf("after approval: upstream %d (want 2), contract %q", calls.Load(), contractState("/item/ir-2"))
	}

	// A 2025-11-25 client keeps the preview and synthesis_id.
	hdr := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read", "Mcp-Protocol-Version": "2025-11-25"}
	status, _, body := mcpPost(t, url, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"lookup-item","arguments":{"path":"/item/ir-3","item_id":"1"}}}`, hdr)
	if status != 200 || !strings.Contains(body, `"outcome":"preview"`) || !strings.Contains(body, `"synthesis_id"`) || strings.Contains(body, "inputRequests") {
		t.Fatalf("2025-11-25 client: %d %s", status, body)
	}
	// A 2026-07-28 client without the elicitation capability too.
	n := inputReqClient(t, url, benchAgent, nil, true)
	res, err = n.CallTool(ctx, &mcp.CallToolParams{Name: "lookup-item", Arguments: map[string]any{"path": "/item/ir-4", "item_id": "1"}})
	if err != nil || res.NeedsInput() || structured(res)["outcome"] != "preview" {
		t.Fatalf("client without elicitation: %v %+v", err, res)
	}
	if calls.Load() != 2 {
		t.Errorf("previews ran something: upstream %d", calls.Load())
	}
}
