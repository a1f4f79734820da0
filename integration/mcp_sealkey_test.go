package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// TestMCPInputRequiredAcrossNodes: with store redis the input_required
// requestState is sealed under the gateway's shared key (engine
// sealkey.go), so the go-sdk v1.8.0 client's approval may land on any
// node. The question is asked by node A; the approved retry, sent to
// node B, books once (the hotel API saw the recipe's steps once, one
// reservation); the same retry at A replays under its key; and a node
// started after the key was made (as a restarted one) accepts a state
// A sealed, and books once more for another agent.
func TestMCPInputRequiredAcrossNodes(t *testing.T) {
	_, topo := startSingleRedis(t)
	o := clusterOpts{Extra: "\t\tmcp\n", Mode: "confirm-first", Identity: "header", Agents: clusterAgents(t, nil)}
	w := startClusterWorld(t, topo.block(), o)
	ctx := context.Background()
	manual := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		t.Error("the manual client's elicitation handler was called")
		return &mcp.ElicitResult{Action: "decline"}, nil
	}, MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}
	args := bookArgs()
	question := func(g *Gateway, agent, key string) string {
		t.Helper()
		c := mcpConnectOpts(t, g, agent, scopeAll, manual)
		first, err := c.s.CallTool(ctx, &mcp.CallToolParams{Name: "book-room", Arguments: args, Meta: mcp.Meta{metaIdemKey: key}})
		if err != nil || !first.NeedsInput() || first.RequestState == "" || first.InputRequests["approve"] == nil {
			t.Fatalf("the question from %s: %v %+v", g.URL, err, first)
		}
		return first.RequestState
	}
	approve := func(g *Gateway, agent, key, state string) *mcp.CallToolResult {
		t.Helper()
		c := mcpConnectOpts(t, g, agent, scopeAll, manual)
		res, err := c.s.CallTool(ctx, &mcp.CallToolParams{Name: "book-room", Arguments: args, Meta: mcp.Meta{metaIdemKey: key}, RequestState: state,
			InputResponses: mcp.InputResponseMap{"approve": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}})
		if err != nil {
			t.Fatalf("the approval at %s: %v", g.URL, err)
		}
		return res
	}
	before := w.Hotel.Count()
	state := question(w.A, agentOP, "it-seal-1")
	if n := w.Hotel.Count() - before; n != 0 {
		t.Fatalf("the question called the hotel API %d times", n)
	}
	ok := approve(w.B, agentOP, "it-seal-1", state)
	sc, _ := ok.StructuredContent.(map[string]any)
	if ok.IsError || str(sc, "synthesis_id") == "" {
		t.Fatalf("the approval at node B: %+v", ok.StructuredContent)
	}
	rs := w.JS.Reservations(t)
	if len(rs) != 1 {
		t.Fatalf("json-server has %d reservations after the approval at B, want 1: %v", len(rs), rs)
	}
	checkBooked(t, sc["result"], rs[0])
	steps := w.Hotel.Count() - before
	if steps != 3 {
		t.Errorf("the booking approved at B made %d hotel API calls, want the recipe's 3 steps once", steps)
	}
	again := approve(w.A, agentOP, "it-seal-1", state)
	if again.IsError || again.Meta[metaReplayed] != true {
		t.Fatalf("the same approval at node A: %+v %v, want the replay", again.StructuredContent, again.Meta)
	}
	if n := w.Hotel.Count() - before; n != steps || len(w.JS.Reservations(t)) != 1 {
		t.Fatalf("the replayed approval called the hotel API (%d calls, want %d)", n, steps)
	}

	// A node that did not exist when the key was made reads it (another
	// agent: agent OP now holds an active contract for the pair).
	c := startClusterNode(t, w, topo.block(), "node-c", o)
	ok = approve(c, agentA1, "it-seal-2", question(w.A, agentA1, "it-seal-2"))
	if ok.IsError {
		t.Fatalf("the approval at the new node C: %+v", ok.StructuredContent)
	}
	if n := len(w.JS.Reservations(t)); n != 2 {
		t.Fatalf("json-server has %d reservations, want 2", n)
	}
	if n := w.Hotel.Count() - before; n != 2*steps {
		t.Errorf("two bookings made %d hotel API calls, want %d", n, 2*steps)
	}
}

// TestMCPInputRequiredStoreDownAtStart: a node started while Redis is
// down (store_required off) has no seal key and makes none of its own:
// the approval of a question node A asked is answered 503
// store-unavailable, retryable, and nothing runs; once Redis answers
// again (its data kept: appendonly) the node reads the shared key on
// use and the same approval books once.
func TestMCPInputRequiredStoreDownAtStart(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction", "--appendonly", "yes", "--appendfsync", "always")
	keepPort(srv)
	block := storeBlock("address "+srv.Addr(), "")
	o := clusterOpts{Extra: "\t\tmcp\n", Mode: "confirm-first", Identity: "header", Agents: clusterAgents(t, nil), Required: "off", Nodes: 1}
	w := startClusterWorld(t, block, o)
	ctx := context.Background()
	manual := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		t.Error("the manual client's elicitation handler was called")
		return &mcp.ElicitResult{Action: "decline"}, nil
	}, MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}
	args := bookArgs()
	key := mcp.Meta{metaIdemKey: "it-seal-down"}
	a := mcpConnectOpts(t, w.A, agentOP, scopeAll, manual)
	first, err := a.s.CallTool(ctx, &mcp.CallToolParams{Name: "book-room", Arguments: args, Meta: key})
	if err != nil || !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("the question from A: %v %+v", err, first)
	}
	srv.Stop()
	c := startClusterNode(t, w, block, "node-c", o)
	cc := mcpConnectOpts(t, c, agentOP, scopeAll, manual)
	approve := func() *mcp.CallToolResult {
		t.Helper()
		res, err := cc.s.CallTool(ctx, &mcp.CallToolParams{Name: "book-room", Arguments: args, Meta: key, RequestState: first.RequestState,
			InputResponses: mcp.InputResponseMap{"approve": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}})
		if err != nil {
			t.Fatalf("the approval at C: %v", err)
		}
		return res
	}
	before := w.Hotel.Count()
	down := approve()
	sc, _ := down.StructuredContent.(map[string]any)
	if !down.IsError || str(sc, "error", "code") != "store-unavailable" || field(sc, "error", "retryable") != true ||
		field(sc, "error", "retry_after_seconds") != float64(5) || !strings.Contains(str(sc, "error", "message"), "seal key") {
		t.Fatalf("the approval at C while Redis is down: %+v, want 503 store-unavailable, retryable after 5 s", down.StructuredContent)
	}
	if n := w.Hotel.Count() - before; n != 0 {
		t.Fatalf("the refused approval called the hotel API %d times", n)
	}
	srv.Restart()
	var ok *mcp.CallToolResult
	waitFor(t, 20*time.Second, 500*time.Millisecond, "node C to read the seal key and book", func() bool {
		ok = approve()
		sc, _ := ok.StructuredContent.(map[string]any)
		if ok.IsError && str(sc, "error", "code") != "store-unavailable" {
			t.Fatalf("the approval at C after Redis came back: %+v", ok.StructuredContent)
		}
		return !ok.IsError
	})
	if n := len(w.JS.Reservations(t)); n != 1 {
		t.Fatalf("json-server has %d reservations, want 1", n)
	}
	if n := w.Hotel.Count() - before; n != 3 {
		t.Errorf("the booking made %d hotel API calls, want the recipe's 3 steps once", n)
	}
}
