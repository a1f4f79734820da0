package engine

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// TestFingerprintTarget: the Idempotency-Key fingerprint compares the
// path in RFC 3986 normal form and the query as its readers see it (the
// last value of each key, in key order), never the raw request target
// (ARCHITECTURE.md "Idempotency").
func TestFingerprintTarget(t *testing.T) {
	tests := []struct {
		name, target, want string
	}{
		{"plain", "/room", "/room"},
		{"empty query is none", "/room?", "/room"},
		{"separators only", "/room?&&", "/room"},
		{"unreserved escape decoded", "/%72oom", "/room"},
		{"reserved escape kept, hex upper-cased", "/a%2fb?", "/a%2Fb"},
		{"keys sorted", "/room?b=2&a=1", "/room?a=1&b=2"},
		{"last value of a repeated key", "/room?a=0&b=2&a=1", "/room?a=1&b=2"},
		{"one key in two spellings", "/room?%61=0&a=1", "/room?a=1"},
		{"escapes in the query decoded", "/room?n=%67-1&s=a+b", "/room?n=g-1&s=a+b"},
		{"valueless key", "/room?flag", "/room?flag="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("BOOK", tt.target, nil)
			q, err := agtp.ParseQuery(r.URL.RawQuery)
			if err != nil {
				t.Fatal(err)
			}
			path, err := policy.NormalizePath(r.URL.EscapedPath())
			if err != nil {
				t.Fatal(err)
			}
			x := &exchange{query: q, requestPath: path} // as dispatch sets them
			if got := x.fingerprintTarget(); got != tt.want {
				t.Errorf("fingerprintTarget(%s) = %q, want %q", tt.target, got, tt.want)
			}
		})
	}
}

// TestUnacceptedAgentIDNotRecorded: an Agent-ID that is malformed, or
// well-formed but unknown, is refused without naming the
// Attribution-Record or its chain: the record has no agent_id and chains
// as an anonymous request's does. A malformed one is not echoed. Every
// malformed Agent-ID became a chain key of its own, up to the header
// limit in size (a few hundred junk requests grew the chain file by
// megabytes), and the signed record carried it as agent_id.
func TestUnacceptedAgentIDNotRecorded(t *testing.T) {
	te := newTestEngine(t)
	// The records store opens on the first request; an anonymous one
	// also starts the anonymous chain.
	if a := te.serve(t, "DISCOVER", "/", nil, ""); a.Status != 200 {
		t.Fatalf("DISCOVER /: %s", a)
	}
	chains := te.st.records.chains
	before := chains.Len()
	unknown := strings.Repeat("ab", 32)
	for i, tc := range []struct {
		agentID string
		status  int
		reason  string
		echoed  bool
	}{
		{"EVIL<script>", 400, "invalid-canonical-id", false},
		{strings.Repeat("Z", 12000), 400, "invalid-canonical-id", false},
		{strings.ToUpper(testAgent), 400, "invalid-canonical-id", false},
		{unknown, 401, "agent-unauthenticated", true},
	} {
		// With a well-formed Owner-ID: the record names neither the
		// agent nor the owner it claimed (the owner used to be stated).
		a := te.serve(t, "FETCH", "/items/1", http.Header{"Agent-Id": {tc.agentID}, "Owner-Id": {"victim-owner"}, "Authority-Scope": {"bench:read"}}, "")
		wantError(t, a, tc.status, tc.reason, "")
		if v, ok := attributionPayload(t, a)["owner_id"]; ok {
			t.Errorf("case %d: the Attribution-Record names owner_id %v", i, v)
		}
		if got := a.header("Agent-ID"); (got != "") != tc.echoed {
			t.Errorf("case %d: Agent-ID echoed as %q, want echoed %v", i, textcut.Clip(got), tc.echoed)
		}
		if strings.Contains(string(a.Body), tc.agentID) {
			t.Errorf("case %d: the body quotes the Agent-ID: %s", i, textcut.Clip(string(a.Body)))
		}
		if v, ok := attributionPayload(t, a)["agent_id"]; ok {
			t.Errorf("case %d: the Attribution-Record names agent_id %v", i, textcut.Clip(fmt.Sprint(v)))
		}
	}
	if n := chains.Len(); n != before {
		t.Errorf("the refusals added %d chains, want none (they chain as anonymous requests do)", n-before)
	}
	if chains.Next(unknown) != records.ZeroHash {
		t.Errorf("an unknown agent's refusal started a chain of its own")
	}
	// An Owner-ID the registry contradicts is refused and not recorded:
	// the record states the agent's registry owner, as every record
	// naming a registered agent does.
	a := te.serve(t, "FETCH", "/items/1", http.Header{"Agent-Id": {testAgent}, "Owner-Id": {"someone-else"}, "Authority-Scope": {"bench:read"}}, "")
	wantError(t, a, 401, "owner-mismatch", "")
	if v := attributionPayload(t, a)["owner_id"]; v != "bench-ops" {
		t.Errorf("the owner-mismatch record names owner_id %v, want the registry owner bench-ops", v)
	}
	// A registered agent's answers still name it and chain under it.
	a = te.serve(t, "FETCH", "/items/1", http.Header{"Agent-Id": {testAgent}, "Authority-Scope": {"bench:read"}}, "")
	if p := attributionPayload(t, a); a.Status != 200 || p["agent_id"] != testAgent || a.header("Agent-ID") != testAgent || p["owner_id"] != "bench-ops" {
		t.Fatalf("registered agent: %s (record %v; want its registry owner bench-ops)", a, p)
	}
	if chains.Next(testAgent) != a.header("Audit-ID") {
		t.Errorf("the registered agent's chain head is not its last Audit-ID")
	}
}

// wantError checks a spec §19 error body: status, reason and, when not
// empty, a part of the explanation.
func wantError(t *testing.T, a *testAnswer, status int, reason, explanation string) {
	t.Helper()
	if a.Status != status || a.str("reason") != reason || !strings.Contains(a.str("explanation"), explanation) {
		t.Fatalf("answer %s; want %d %s with %q in the explanation", a, status, reason, explanation)
	}
	if st, _ := a.body["status"].(float64); int(st) != status {
		t.Fatalf("body status %v differs from the status %d: %s", a.body["status"], status, a)
	}
}

// attributionPayload decodes the payload of an answer's
// Attribution-Record (a compact JWS).
func attributionPayload(t *testing.T, a *testAnswer) map[string]any {
	t.Helper()
	parts := strings.Split(a.header("Attribution-Record"), ".")
	if len(parts) != 3 {
		t.Fatalf("Attribution-Record %q is not a compact JWS", a.header("Attribution-Record"))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}
