package mcpdoor

import (
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
)

// TestStepUp: a tools/call whose tool needs a scope the agent holds but
// its token lacks is 403 insufficient-scope before the SDK sees it; a
// token with the scope, an unbounded caller, another message or an
// unknown tool pass on.
func TestStepUp(t *testing.T) {
	e := testEngine(t)
	d, err := New(e, &Config{Path: DefaultMCPPath})
	if err != nil {
		t.Fatal(err)
	}
	agent, ok := e.AgentRegistry().Lookup("677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa")
	if !ok {
		t.Fatal("bench agent not registered")
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`
	tests := []struct {
		name   string
		ident  agtp.Identity
		body   string
		reason string
	}{
		{"token lacks bench:read", agtp.Identity{Bounded: true, Scopes: []string{"rcns:negotiate"}}, call, "insufficient-scope"},
		{"token carries it", agtp.Identity{Bounded: true, Scopes: []string{"bench:read"}}, call, ""},
		{"no token bounds the grants", agtp.Identity{}, call, ""},
		{"tools/list", agtp.Identity{Bounded: true}, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, ""},
		{"unknown tool", agtp.Identity{Bounded: true}, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}`, ""},
		// The SDK matches member names exactly: "Params" is not params,
		// and must not hide the tool the SDK calls.
		{"a Params member beside params", agtp.Identity{Bounded: true, Scopes: []string{"rcns:negotiate"}},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}},"Params":{"name":"nope"}}`, "insufficient-scope"},
		{"a Method member beside method", agtp.Identity{Bounded: true, Scopes: []string{"rcns:negotiate"}},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"tools/list","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, "insufficient-scope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := d.stepUp(&mcpRequest{agent: agent, ident: &tt.ident}, []byte(tt.body))
			switch {
			case tt.reason == "" && e != nil:
				t.Fatalf("refused %s: %s", e.Reason, e.Explanation)
			case tt.reason != "" && (e == nil || e.Reason != tt.reason || e.Status != 403):
				t.Fatalf("answer %+v, want 403 %s", e, tt.reason)
			}
		})
	}
}
