package integration

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpConnectOpts is mcpConnect with client options (an elicitation
// handler, the multi-round-trip middleware off).
func mcpConnectOpts(t testing.TB, g *Gateway, agent, scope string, opts *mcp.ClientOptions) *mcpConn {
	t.Helper()
	tr := &mcpTransport{hdr: map[string]string{"Agent-ID": agent, "Authority-Scope": scope}, base: http.DefaultTransport}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "rcns-it", Version: "1"}, opts)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.URL + "/mcp", HTTPClient: &http.Client{Transport: tr, Timeout: requestTimeout}}, nil)
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	mc := &mcpConn{s: s, tr: tr, tools: map[string]*mcp.Tool{}}
	for tl, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		mc.tools[tl.Name] = tl
	}
	return mc
}

// TestMCPInputRequired: confirm-first as input_required (MCP
// 2026-07-28, SEP-2322) through the real gateway with the go-sdk
// v1.8.0 client, its elicitation handler the user's approval step.
// Declined, nothing is booked and the hotel saw nothing; a requestState
// altered or replayed by another agent is refused; approved, book-room
// books once (the hotel API saw the steps once, one reservation), a
// repeated retry under the key replays; a client without elicitation
// (as an older revision's) still gets the preview and synthesis_id; the
// SDK's own loop books with the handler's approval and leaves the
// records a 461 confirmation leaves (the gate's accepted negotiation
// record, read back through INSPECT).
func TestMCPInputRequired(t *testing.T) {
	w := startHotel(t, hotelOpts{Door: "http", Extra: "\t\tmcp"})
	ctx := context.Background()
	var asked atomic.Int32
	var message string
	answer := func(action string, ok bool) func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			message = r.Params.Message
			return &mcp.ElicitResult{Action: action, Content: map[string]any{"approve": ok}}, nil
		}
	}

	// Declined: nothing booked, nothing upstream.
	before := w.Hotel.Count()
	d := mcpConnectOpts(t, w.GW, agentA1, scopeAll, &mcp.ClientOptions{ElicitationHandler: answer("decline", false)})
	r := d.call(t, "book-room", bookArgs(), nil)
	if !r.res.IsError || r.errCode() != "confirmation-declined" || asked.Load() != 1 {
		t.Fatalf("declined: %v (asked %d)", r.structured, asked.Load())
	}
	if w.Hotel.Count() != before {
		t.Fatalf("the declined booking called the hotel API %d times", w.Hotel.Count()-before)
	}
	w.assertReservations(t, 0)

	// Manual rounds (agent A1): the question, then the state refused
	// when altered or replayed by another agent, then the approved
	// retry, and the same retry again replayed under its key.
	m := mcpConnectOpts(t, w.GW, agentA1, scopeAll, &mcp.ClientOptions{ElicitationHandler: answer("accept", true), MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
	args := bookArgs()
	key := mcp.Meta{metaIdemKey: "it-ir-1"}
	first, err := m.s.CallTool(ctx, &mcp.CallToolParams{Name: "book-room", Arguments: args, Meta: key})
	if err != nil || !first.NeedsInput() || first.RequestState == "" || first.InputRequests["approve"] == nil {
		t.Fatalf("first round: %v %+v", err, first)
	}
	q, _ := first.InputRequests["approve"].(*mcp.ElicitParams)
	if q == nil || !strings.Contains(q.Message, "Approve running BOOK /room") || !strings.Contains(q.Message, "changes state") {
		t.Errorf("the question: %+v", q)
	}
	retry := func(c *mcpConn, state string) *mcp.CallToolResult {
		t.Helper()
		res, err := c.s.CallTool(ctx, &mcp.CallToolParams{Name: "book-room", Arguments: args, Meta: key, RequestState: state,
			InputResponses: mcp.InputResponseMap{"approve": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}})
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		return res
	}
	errCode := func(res *mcp.CallToolResult) string {
		sc, _ := res.StructuredContent.(map[string]any)
		return str(sc, "error", "code")
	}
	altered := []byte(first.RequestState)
	altered[5] ^= 1
	other := mcpConnectOpts(t, w.GW, agentOP, scopeAll, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
	for name, res := range map[string]*mcp.CallToolResult{"altered": retry(m, string(altered)), "another agent's": retry(other, first.RequestState)} {
		if !res.IsError || errCode(res) != "request-state-invalid" {
			t.Errorf("%s requestState: %+v, want request-state-invalid", name, res.StructuredContent)
		}
	}
	w.assertReservations(t, 0)
	if w.Hotel.Count() != before {
		t.Fatalf("refused states called the hotel API")
	}
	ok := retry(m, first.RequestState)
	again := retry(m, first.RequestState)
	okSC, _ := ok.StructuredContent.(map[string]any)
	if ok.IsError || again.IsError || again.Meta[metaReplayed] != true || str(okSC, "synthesis_id") == "" {
		t.Fatalf("approved retry %+v, repeated %+v %v", ok.StructuredContent, again.StructuredContent, again.Meta)
	}
	w.assertReservations(t, 1)
	steps := w.Hotel.Count() - before
	if steps != 3 {
		t.Errorf("the approved booking made %d hotel API calls, want the recipe's 3 steps once", steps)
	}

	// Without elicitation (as on the older revisions): the preview.
	p := mcpConnect(t, w.GW, "/mcp", agentOP, scopeAll)
	r = p.call(t, "book-room", bookArgs(), nil)
	if r.res.IsError || r.outcome() != "preview" || str(r.structured, "synthesis_id") == "" {
		t.Fatalf("client without elicitation: %v", r.structured)
	}
	w.assertReservations(t, 1)

	// The SDK's own loop (agent OP): the handler approves, one booking,
	// and the records are the 461 confirmation's: the gate's accepted
	// negotiation record names the contract (read through INSPECT).
	a := mcpConnectOpts(t, w.GW, agentOP, scopeAll, &mcp.ClientOptions{ElicitationHandler: answer("accept", true)})
	r = a.call(t, "book-room", bookArgs(), mcp.Meta{metaIdemKey: "it-ir-2"})
	res := r.wantSuccess(t, 200)
	sid := str(r.structured, "synthesis_id")
	if sid == "" || asked.Load() != 2 || !strings.Contains(message, sid) {
		t.Fatalf("approved: %v (asked %d, question %q)", r.structured, asked.Load(), message)
	}
	checkBooked(t, res, w.assertReservations(t, 2)[1])
	if n := w.Hotel.Count() - before; n != 2*steps {
		t.Errorf("two bookings made %d hotel API calls, want %d", n, 2*steps)
	}
	t.Logf("the question: %s", message)
	g := w.GW.DoHTTP(t, "INSPECT", "/?target=negotiations&kind=gate&limit=10", hdr(agentOP, scopeAll), nil)
	wantStatus(t, g, 200)
	if !strings.Contains(string(g.Body), `"synthesis_id":"`+sid+`"`) || !strings.Contains(string(g.Body), `"outcome":"accepted"`) {
		t.Errorf("INSPECT target=negotiations kind=gate lacks the accepted record of %s: %s", sid, g.Body)
	}
}
