package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// The MCP door (docs/doors.md "MCP door", docs/agent-guide-mcp.md) over the real binary, with the go-sdk's own client: tools per
// agent, Tier B and recipe calls, confirm-first, idempotency and the
// budget shared with the HTTP door, the failures an agent meets, and
// identity signature on the HTTP requests that carry MCP messages.
// Every structured result is checked against the outputSchema its tool
// advertises (mcpConn.tryCall).

// TestMCPToolsPerAgent: initialize (the newest revision through the
// SDK, older ones by hand) and tools/list per agent: the tools whose
// scopes the grant holds, sorted, paginated with a cursor, with
// schemas and annotations that follow the documents; the manifest lists
// the door.
func TestMCPToolsPerAgent(t *testing.T) {
	// MCP is served over HTTP: Do stays on the HTTP door whatever the suite's.
	w := startHotel(t, hotelOpts{Door: "http", Extra: "\t\tmcp {\n\t\t\tpage_size 2\n\t\t}"})

	a1 := mcpConnect(t, w.GW, "/mcp", agentA1, scopeAll)
	if got := a1.names(); got != "book-room discover_contracts discover_patterns fetch_guest fetch_property reserve_reservations" {
		t.Fatalf("rcns-demo-agent's tools (every page): %s", got)
	}
	init := a1.s.InitializeResult()
	if init == nil || init.ServerInfo == nil || init.ServerInfo.Name != "caddy-rcns-it" || init.ProtocolVersion != "2026-07-28" {
		t.Fatalf("the SDK client's session: %+v, want server caddy-rcns-it on the newest revision 2026-07-28", init)
	}
	a2 := mcpConnect(t, w.GW, "/mcp", agentA2, scopeNoRCNS)
	if got := a2.names(); got != "discover_contracts discover_patterns fetch_guest fetch_property reserve_reservations" {
		t.Fatalf("rcns-demo-noscope (no rcns:negotiate) sees: %s", got)
	}

	// The first page of two carries a cursor; the second page goes on
	// from it in name order.
	r := mcpRaw(t, w.GW, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, hdr(agentA1, scopeAll))
	var page struct {
		Result struct {
			Tools      []map[string]any `json:"tools"`
			NextCursor string           `json:"nextCursor"`
		} `json:"result"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil || len(page.Result.Tools) != 2 || page.Result.NextCursor == "" {
		t.Fatalf("tools/list page 1:\n%s", r)
	}
	r = mcpRaw(t, w.GW, "/mcp", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":%q}}`, page.Result.NextCursor), hdr(agentA1, scopeAll))
	if err := json.Unmarshal(r.Body, &page); err != nil || len(page.Result.Tools) != 2 || page.Result.Tools[0]["name"] != "discover_patterns" {
		t.Fatalf("tools/list page 2:\n%s", r)
	}

	// Older revisions are negotiated: each is answered in its own.
	for _, v := range []string{"2025-11-25", "2025-06-18", "2025-03-26"} {
		r := mcpRaw(t, w.GW, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+v+`","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}`, hdr(agentA1, ""))
		if got := str(r.JSON(), "result", "protocolVersion"); r.Status != 200 || got != v {
			t.Fatalf("initialize %s answered %q:\n%s", v, got, r)
		}
	}

	fg, rr, br := a1.tools["fetch_guest"], a1.tools["reserve_reservations"], a1.tools["book-room"]
	for _, c := range []struct {
		tool                                     *mcp.Tool
		readOnly, idempotent, destructive, world bool
	}{{fg, true, true, false, false}, {rr, false, false, false, false}, {br, false, false, false, false}} {
		a := c.tool.Annotations
		if a == nil || a.ReadOnlyHint != c.readOnly || a.IdempotentHint != c.idempotent || a.DestructiveHint == nil || *a.DestructiveHint != c.destructive ||
			a.OpenWorldHint == nil || *a.OpenWorldHint != c.world {
			t.Errorf("%s annotations = %+v", c.tool.Name, a)
		}
		if c.tool.Title == "" || len(c.tool.Description) < 80 || c.tool.OutputSchema == nil {
			t.Errorf("%s: title %q, description %q, outputSchema %v", c.tool.Name, c.tool.Title, c.tool.Description, c.tool.OutputSchema)
		}
	}
	in, _ := fg.InputSchema.(map[string]any)
	if in["additionalProperties"] != false || fmt.Sprint(in["required"]) != "[guest_id]" {
		t.Errorf("fetch_guest inputSchema = %v", in)
	}
	bin, _ := br.InputSchema.(map[string]any)
	if field(bin, "properties", "synthesis_id") == nil || !strings.Contains(br.Description, "preview") {
		t.Errorf("book-room: inputSchema %v, description %q", bin, br.Description)
	}

	m := w.GW.Do(t, "DISCOVER", "/", nil, nil).Object(t)
	hosted, _ := m["hosted_protocols"].([]any)
	if len(hosted) != 1 || str(hosted[0], "protocol") != "mcp" || str(hosted[0], "path") != "/mcp" ||
		!strings.Contains(fmt.Sprint(field(hosted[0], "protocol_versions")), "2026-07-28") {
		t.Fatalf("manifest hosted_protocols = %v", m["hosted_protocols"])
	}
}

// TestMCPTierBCall: a Tier B tool call is one upstream call, its result
// validates, its Attribution-Record comes back twice, the request is
// counted with binding="mcp", and nothing for the MCP path reaches the
// next handler.
func TestMCPTierBCall(t *testing.T) {
	// MCP is served over HTTP: Do stays on the HTTP door whatever the suite's.
	w := startHotel(t, hotelOpts{Door: "http", LegacyCounter: true, Extra: "\t\tmcp"})
	c := mcpConnect(t, w.GW, "/mcp", agentA1, "hotel:read")
	before := w.Hotel.Count()
	r := c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil)
	res := r.wantSuccess(t, 200)
	if str(res, "name") != "Ada Lovelace" || w.Hotel.Count() != before+1 {
		t.Fatalf("fetch_guest: %v; hotel calls %d → %d", res, before, w.Hotel.Count())
	}
	r.wantRecord(t)
	// Who the caller was taken to be, as on the other doors (cases/02).
	if r.header == nil || r.header.Get("Owner-ID") != "hotel-ops" || r.header.Get("Trust-Tier") != "1" || r.header.Get("Verification-Path") != "header" {
		t.Errorf("MCP answer lacks the caller's Owner-ID, Trust-Tier, Verification-Path: %v", r.header)
	}
	if r.res.Meta[metaStatus] != float64(200) {
		t.Errorf("_meta agtp-status = %v", r.res.Meta[metaStatus])
	}
	// A scope claimed beyond the grant is refused 262 scope-claim-invalid
	// on this door too, and the answer still names the identified caller.
	over := mcpConnect(t, w.GW, "/mcp", agentA1, "hotel:read, vault:read")
	r = over.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil)
	r.wantError(t, "scope-claim-invalid", 262, false)
	if r.header == nil || r.header.Get("Owner-ID") != "hotel-ops" || r.header.Get("Trust-Tier") != "1" || r.header.Get("Verification-Path") != "header" {
		t.Errorf("MCP 262 scope-claim-invalid lacks the caller's Owner-ID, Trust-Tier, Verification-Path: %v", r.header)
	}
	s := scrapeMetrics(t, w.GW)
	if v := s.values[`caddy_rcns_requests_total{binding="mcp",code="200",method="FETCH"}`]; v != 1 {
		t.Errorf(`caddy_rcns_requests_total{binding="mcp",code="200",method="FETCH"} = %v, want 1`, v)
	}

	// A GET, a request without Agent-ID and an AGTP method on the MCP
	// path all stay with the door.
	for _, req := range []struct {
		method string
		hdr    map[string]string
		status int
	}{{"GET", hdr(agentA1, ""), 405}, {"POST", nil, 401}, {"FETCH", hdr(agentA1, "hotel:read"), 405}} {
		r := w.GW.DoHTTP(t, req.method, "/mcp", req.hdr, nil)
		if r.Status != req.status {
			t.Errorf("%s /mcp = %d, want %d:\n%s", req.method, r.Status, req.status, r)
		}
	}
	if n := w.Legacy.Count(); n != 0 {
		t.Fatalf("%d requests for /mcp reached the next handler", n)
	}
}

// TestMCPDoorTransport: the checks on the HTTP request before any MCP
// message is read, each refused with the AGTP error body.
func TestMCPDoorTransport(t *testing.T) {
	// MCP is served over HTTP: Do stays on the HTTP door whatever the suite's.
	w := startHotel(t, hotelOpts{Door: "http", Extra: "\t\tmcp /agents/mcp {\n\t\t\tmax_request_body 2KiB\n\t\t\tmax_json_depth 16\n\t\t\tallowed_origins https://console.example\n\t\t}"})
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	deep := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"x":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}}}`
	for _, tc := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		reason string
	}{
		{"listed", list, hdr(agentA1, ""), 200, ""},
		{"own Origin", list, hdr(agentA1, "", "Origin", w.GW.URL), 200, ""},
		{"allowed Origin", list, hdr(agentA1, "", "Origin", "https://console.example"), 200, ""},
		{"foreign Origin", list, hdr(agentA1, "", "Origin", "https://evil.example"), 403, "origin-refused"},
		{"too large", `{"pad":"` + strings.Repeat("x", 3000) + `"}`, hdr(agentA1, ""), 413, "body-too-large"},
		{"too deep", deep, hdr(agentA1, ""), 400, "invalid-json"},
		{"no Agent-ID", list, nil, 401, "agent-unauthenticated"},
		{"unregistered agent", list, hdr(agentID("nobody"), ""), 401, "agent-unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mcpRaw(t, w.GW, "/agents/mcp", tc.body, tc.hdr)
			if tc.reason == "" {
				if r.Status != 200 || !strings.Contains(string(r.Body), "fetch_guest") {
					t.Fatalf("want the tool list:\n%s", r)
				}
				return
			}
			assertErrorBody(t, r, tc.status, tc.reason)
		})
	}
}

// TestMCPRecipeCall: a recipe tool synthesizes the contract (optimistic:
// 263, run at once); the next call is served by that contract (Tier C
// by pair); the listings show it.
func TestMCPRecipeCall(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", Extra: "\t\tmcp"})
	c := mcpConnect(t, w.GW, "/mcp", agentA1, scopeAll)
	before := w.Hotel.Count()
	r := c.call(t, "book-room", bookArgs(), nil)
	res := r.wantSuccess(t, 263)
	sid := str(r.structured, "synthesis_id")
	if sid == "" || str(r.structured, "contract", "synthesis_id") != sid || str(r.structured, "contract", "recipe_lineage", "recipe_name") != recipeName {
		t.Fatalf("book-room 263: %v", r.structured)
	}
	checkBooked(t, res, w.assertReservations(t, 1)[0])
	if w.Hotel.Count() != before+3 {
		t.Fatalf("the synthesis made %d hotel calls, want 3", w.Hotel.Count()-before)
	}
	r.wantRecord(t)

	r = c.call(t, "book-room", bookArgs(), nil)
	r.wantSuccess(t, 200)
	if str(r.structured, "synthesis_id") != sid || r.structured["contract"] != nil {
		t.Fatalf("second book-room did not run under contract %s: %v", sid, r.structured)
	}
	w.assertReservations(t, 2)

	r = c.call(t, "discover_contracts", map[string]any{"limit": 10}, nil)
	list, _ := r.wantSuccess(t, 200).([]any)
	if len(list) != 1 || str(list[0], "synthesis_id") != sid {
		t.Fatalf("discover_contracts = %v", r.structured)
	}
	r = c.call(t, "discover_patterns", nil, nil)
	pats, _ := field(r.wantSuccess(t, 200), "patterns").([]any)
	if len(pats) != 1 || str(pats[0], "recipe_name") != recipeName {
		t.Fatalf("discover_patterns = %v", r.structured)
	}
}

// TestMCPConfirmFirst: under confirm-first the first call is the 461
// preview as a tool result (nothing ran); calling again with its
// synthesis_id confirms and runs it; the contract then serves the pair.
func TestMCPConfirmFirst(t *testing.T) {
	w := startHotel(t, hotelOpts{Extra: "\t\tmcp"})
	c := mcpConnect(t, w.GW, "/mcp", agentA1, scopeAll)
	before := w.Hotel.Count()
	r := c.call(t, "book-room", bookArgs(), nil)
	if r.res.IsError || r.outcome() != "preview" || r.structured["status"] != float64(461) {
		t.Fatalf("first book-room under confirm-first: %v", r.structured)
	}
	sid := str(r.structured, "synthesis_id")
	if str(r.structured, "contract", "synthesis_id") != sid || field(r.structured, "contract", "endpoint", "semantic") == nil {
		t.Fatalf("preview lacks the contract: %v", r.structured)
	}
	if txt := r.res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, sid) || !strings.Contains(txt, "book-room") {
		t.Errorf("preview text does not say how to confirm: %q", txt)
	}
	w.assertReservations(t, 0)
	if w.Hotel.Count() != before {
		t.Fatalf("the preview called the hotel API")
	}

	args := bookArgs()
	args["synthesis_id"] = sid
	r = c.call(t, "book-room", args, nil)
	res := r.wantSuccess(t, 200)
	if str(r.structured, "synthesis_id") != sid {
		t.Fatalf("confirmation ran under %q, want %s", str(r.structured, "synthesis_id"), sid)
	}
	checkBooked(t, res, w.assertReservations(t, 1)[0])

	r = c.call(t, "book-room", bookArgs(), nil)
	r.wantSuccess(t, 200)
	if str(r.structured, "synthesis_id") != sid {
		t.Fatalf("after the confirmation the pair is not served by %s: %v", sid, r.structured)
	}
	w.assertReservations(t, 2)
}

// TestMCPIdempotency: 100 concurrent calls under one Idempotency-Key
// (the HTTP header) run once; the same key in _meta replays the answer.
func TestMCPIdempotency(t *testing.T) {
	w := startHotel(t, hotelOpts{Extra: "\t\tmcp"})
	c := mcpConnect(t, w.GW, "/mcp", agentA1, "hotel:book", "Idempotency-Key", "mcp-once-1")
	args := map[string]any{"guest_id": demoGuest, "property_id": demoProperty, "check_in": demoCheckIn, "nights": 3}
	before := w.Hotel.Count()
	var mu sync.Mutex
	outcomes := map[string]int{}
	ids := map[string]bool{}
	concurrently(t, 100, func(int) {
		r := c.call(t, "reserve_reservations", args, nil)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.outcome() == "succeeded":
			outcomes["succeeded"]++
			ids[fmt.Sprint(field(r.structured, "result", "id"))] = true
		case r.errCode() == "idempotency-key-in-flight":
			r.wantError(t, "idempotency-key-in-flight", 409, true)
			outcomes["in-flight"]++
		default:
			t.Errorf("unexpected answer: %v", r.structured)
		}
	})
	if n := w.Hotel.Count() - before; n != 1 {
		t.Fatalf("100 calls under one key made %d upstream calls, want 1 (%v)", n, outcomes)
	}
	w.assertReservations(t, 1)
	if outcomes["succeeded"] == 0 || outcomes["succeeded"]+outcomes["in-flight"] != 100 || len(ids) != 1 {
		t.Fatalf("outcomes %v, reservation ids %v", outcomes, ids)
	}
	t.Logf("100 calls under one key: %v", outcomes)

	m := mcpConnect(t, w.GW, "/mcp", agentA1, "hotel:book")
	r := m.call(t, "reserve_reservations", args, mcp.Meta{metaIdemKey: "mcp-once-1"})
	r.wantSuccess(t, 200)
	if r.res.Meta[metaReplayed] != true || !ids[fmt.Sprint(field(r.structured, "result", "id"))] {
		t.Fatalf("the _meta key did not replay the stored answer: %v %v", r.res.Meta, r.structured)
	}
	args["nights"] = 4
	r = m.call(t, "reserve_reservations", args, mcp.Meta{metaIdemKey: "mcp-once-1"})
	r.wantError(t, "idempotency-key-reused", 422, false)
	w.assertReservations(t, 1)
}

// TestMCPBudgetShared: the invocation budget is the agent's, whichever
// door spends it.
func TestMCPBudgetShared(t *testing.T) {
	w := startHotel(t, hotelOpts{Extra: "\t\trate_limit invocation 0.01 4\n\t\tmcp"})
	for i := 0; i < 2; i++ {
		wantStatus(t, w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil), 200)
	}
	c := mcpConnect(t, w.GW, "/mcp", agentA1, "hotel:read")
	for i := 0; i < 2; i++ {
		c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantSuccess(t, 200)
	}
	e := c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantError(t, "rate-limited", 429, true)
	if n, _ := e["retry_after_seconds"].(float64); n < 1 || str(e, "details", "scope") != "invocation" {
		t.Fatalf("rate-limited error = %v", e)
	}
	assertErrorBody(t, w.GW.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil), 429, "rate-limited")
}

// TestMCPFailures: an unknown input field is a tool error the model
// reads, an unknown tool a JSON-RPC error; a lock
// refusal, an upstream 503, an upstream timeout and the door's own
// timeout are tool errors with their reason and retryability.
func TestMCPFailures(t *testing.T) {
	w := startLab(t, "optimistic", "\t\tendpoints integration/testdata/mcp/endpoints\n\t\tmcp {\n\t\t\ttimeout 2s\n\t\t}")
	c := mcpConnect(t, w.GW, "/mcp", agentA1, scopeAll)

	c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest, "colour": "red"}, nil).wantArgumentError(t, "invalid-input", "input_schema")
	_, err := c.tryCall(t, "no_such_tool", nil, nil)
	wantInvalidParams(t, err, "unknown tool")

	a3 := mcpConnect(t, w.GW, "/mcp", agentA3, scopeAll)
	before := w.Hotel.Count()
	refused := a3.call(t, "book-room", bookArgs(), nil)
	refused.wantError(t, "trust-tier-insufficient", 464, false)
	if w.Hotel.Count() != before {
		t.Fatalf("a refused gate evaluation called the hotel API")
	}
	// The refusal's attempt id comes back as on the other doors, and
	// INSPECT finds it.
	id, _ := refused.res.Meta[metaAttemptID].(string)
	if !strings.HasPrefix(id, "rcns-") || refused.header.Get("RCNS-Attempt-Id") != id {
		t.Fatalf("464 over MCP: _meta attempt id %q, header %q", id, refused.header.Get("RCNS-Attempt-Id"))
	}
	if r := builtinCall(t, w.GW, "INSPECT", agentA3, scopeAll, map[string]any{"target": "rcns-attempt", "attempt_id": id}); r.Status != 200 {
		t.Fatalf("INSPECT of the MCP refusal's attempt: %s", r)
	}

	e := c.call(t, "fetch_outage", nil, nil).wantError(t, "upstream_error", 422, true)
	if field(e, "details", "upstream_status") != float64(503) {
		t.Errorf("upstream 503: details = %v", e["details"])
	}
	c.call(t, "fetch_slow", nil, nil).wantError(t, "upstream_timeout", 422, true)
	// Its retry_after_seconds is when the call it left running has
	// surely ended: the endpoint's 10 s timeout less the door's 2 s.
	if e := c.call(t, "fetch_lagging", nil, nil).wantError(t, "call-timeout", 504, true); e["retry_after_seconds"] != float64(8) {
		t.Errorf("call-timeout retry_after_seconds = %v, want 8 (the endpoint's 10 s less the door's 2 s)", e["retry_after_seconds"])
	}
}

// TestMCPSignature: under identity signature every HTTP request to the
// MCP path is verified before its message is read: the SDK's client
// signing each request is served, rcns-agent signs one, a replayed
// signature and an unsigned request are refused with the AGTP reasons.
func TestMCPSignature(t *testing.T) {
	bin := cliBuild(t)
	keyPath := filepath.Join(t.TempDir(), "agent.pem")
	out, errOut, code := cliRun(t, bin, "keygen", "-alg", "ed25519", "-out", keyPath)
	if code != 0 {
		t.Fatalf("keygen: %s%s", out, errOut)
	}
	var jwk map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if name, value, _ := strings.Cut(sc.Text(), " "); name == "jwk" {
			if err := json.Unmarshal([]byte(value), &jwk); err != nil {
				t.Fatal(err)
			}
		}
	}
	signer, err := httpsig.LoadPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := httpsig.Thumbprint(signer.Public())
	if err != nil {
		t.Fatal(err)
	}
	key := &idvKey{signer: signer, alg: httpsig.AlgEd25519, kid: kid, jwk: jwk}
	doc := idvDemo("rcns-demo-agent")
	doc.keys = []map[string]any{jwk}
	js := startJSONServer(t, hotelDB)
	g := startGateway(t, fill(idvSite, "IDENTITY", "signature", "MODE", "confirm-first", "HOTEL", js.URL,
		"AGENTS", idvWriteAgents(t, doc), "LEGACY", js.URL, "EXTRA", "\t\tmcp"))

	c := mcpConnectWith(t, g.URL+"/mcp", &mcpTransport{hdr: map[string]string{"Authority-Scope": "hotel:read"}, key: key, agent: agentA1, base: testClient.Transport})
	if !strings.Contains(c.names(), "fetch_guest") {
		t.Fatalf("signed tools/list: %s", c.names())
	}
	res := c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantSuccess(t, 200)
	if str(res, "name") != "Ada Lovelace" {
		t.Fatalf("signed fetch_guest: %v", res)
	}

	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fetch_guest","arguments":{"guest_id":"g-1"}}}`
	mcpHdr := map[string]string{"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-11-25"}
	wire := idvBuild(t, g.URL, idvCall{method: "POST", path: "/mcp", agent: agentA1, scope: "hotel:read", extra: mcpHdr, body: call, key: key})
	if r := idvSend(t, nil, wire); r.Status != 200 || !strings.Contains(string(r.Body), "Ada Lovelace") {
		t.Fatalf("signed raw tools/call:\n%s", r)
	}
	assertErrorBody(t, idvSend(t, nil, wire), 401, "signature-replayed")

	unsigned := idvBuild(t, g.URL, idvCall{method: "POST", path: "/mcp", agent: agentA1, scope: "hotel:read", extra: mcpHdr, body: call})
	assertErrorBody(t, idvSend(t, nil, unsigned), 401, "signature-missing")
	// Identity comes before the message: an unsigned request is refused
	// as such even when its body is no JSON-RPC at all.
	garbage := idvBuild(t, g.URL, idvCall{method: "POST", path: "/mcp", agent: agentA1, extra: mcpHdr, body: "{not json"})
	assertErrorBody(t, idvSend(t, nil, garbage), 401, "signature-missing")
	// A malformed Agent-ID is 400 before any signature check, as on the
	// AGTP doors (the signed one names no agent the ID cannot be).
	malformed := idvBuild(t, g.URL, idvCall{method: "POST", path: "/mcp", agent: "not-an-agent-id", scope: "hotel:read", extra: mcpHdr, body: call, key: key})
	assertErrorBody(t, idvSend(t, nil, malformed), 400, "invalid-canonical-id")
	// A body changed after signing fails its digest.
	tampered := idvBuild(t, g.URL, idvCall{method: "POST", path: "/mcp", agent: agentA1, scope: "hotel:read", extra: mcpHdr, body: call, key: key})
	tampered.body = []byte(strings.Replace(call, "g-1", "g-2", 1))
	assertErrorBody(t, idvSend(t, nil, tampered), 401, "digest-mismatch")

	// rcns-agent signs an MCP request as any other.
	out, errOut, code = cliRun(t, bin, "call", "-key", keyPath, "-agent-id", agentA1, "-scope", "hotel:read",
		"-H", "Accept: application/json, text/event-stream", "POST", g.URL+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	if code != 0 || !strings.Contains(out, " 200") || !strings.Contains(out, `"fetch_guest"`) {
		t.Fatalf("rcns-agent call POST /mcp (exit %d):\n%s%s", code, out, errOut)
	}
}

// TestMCPMTLS: under identity mtls the client certificate on the TLS
// connection that carries the MCP messages names the agent.
func TestMCPMTLS(t *testing.T) {
	p := idvNewPKI(t)
	idvServerCert(t, p)
	keyA1, keyA2 := idvECKey(t), idvECKey(t)
	certA1 := p.issue(t, "rcns-demo-agent", keyA1, false, time.Now().Add(-time.Hour))
	certA2 := p.issue(t, "rcns-demo-noscope", keyA2, false, time.Now().Add(-time.Hour))
	a1, a2 := idvDemo("rcns-demo-agent"), idvDemo("rcns-demo-noscope")
	a1.certs, a2.certs = []string{idvSPKI(certA1)}, []string{idvSPKI(certA2)}
	js := startJSONServer(t, hotelDB)
	g := idvStartTLSGateway(t, p, fill(idvSite, "IDENTITY", "mtls", "MODE", "confirm-first", "HOTEL", js.URL,
		"AGENTS", idvWriteAgents(t, a1, a2), "EXTRA", "\t\tmcp", "LEGACY", js.URL))

	tr := &mcpTransport{hdr: map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}, base: p.client(t, g.Addr, certA1, keyA1).Transport}
	c := mcpConnectWith(t, g.URL+"/mcp", tr)
	if str(c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantSuccess(t, 200), "id") != demoGuest {
		t.Fatalf("fetch_guest over mTLS failed")
	}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	for _, tc := range []struct {
		name   string
		client *http.Client
		reason string
	}{
		{"no client certificate", p.client(t, g.Addr, nil, nil), "certificate-required"},
		{"another agent's certificate", p.client(t, g.Addr, certA2, keyA2), "certificate-mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &idvWire{method: "POST", url: g.URL + "/mcp", body: []byte(list), header: http.Header{
				"Agent-Id": {agentA1}, "Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}}
			assertErrorBody(t, idvSend(t, tc.client, w), 401, tc.reason)
		})
	}
}
