package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Fixture agents after RCNS §24: A1 tier 1 with rcns:negotiate, A2 tier 1
// without it, A3 tier 2 with it, OP with inspect:all.
var (
	idA1  = strings.Repeat("a1", 32)
	idA2  = strings.Repeat("a2", 32)
	idA3  = strings.Repeat("a3", 32)
	idOP  = strings.Repeat("0f", 32)
	idSus = strings.Repeat("5", 64)
	idRet = strings.Repeat("7", 64)
	idDep = strings.Repeat("d", 64)
)

func fixtureRegistry(t *testing.T) *Registry {
	t.Helper()
	scopes := func(s ...string) ScopeSet {
		set, err := ParseScopes(s)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	reg, err := NewRegistry([]Agent{
		{ID: idA1, Name: "A1", OwnerID: "org:acme", Scopes: scopes("rcns:negotiate", "booking:*"), TrustTier: 1, Status: AgentActive},
		{ID: idA2, Name: "A2", OwnerID: "org:acme", Scopes: scopes("booking:read"), TrustTier: 1},
		{ID: idA3, Name: "A3", OwnerID: "org.other", Scopes: scopes("rcns:negotiate", "booking:read"), TrustTier: 2, Status: AgentActive},
		{ID: idOP, Name: "OP", OwnerID: "ops", Scopes: scopes("inspect:all"), TrustTier: 1, Status: AgentActive},
		{ID: idSus, Name: "S", Scopes: scopes("a:b"), TrustTier: 1, Status: AgentSuspended},
		{ID: idRet, Name: "R", Scopes: scopes("a:b"), TrustTier: 1, Status: AgentRetired},
		{ID: idDep, Name: "D", Scopes: scopes("a:b"), TrustTier: 3, Status: AgentDeprecated},
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestValidAgentID(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "64 lowercase hex", in: idA1, want: true},
		{name: "uppercase hex", in: strings.ToUpper(idA1)},
		{name: "63 chars", in: idA1[:63]},
		{name: "65 chars", in: idA1 + "0"},
		{name: "non-hex", in: strings.Repeat("g", 64)},
		{name: "empty", in: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidAgentID(tt.in); got != tt.want {
				t.Errorf("ValidAgentID(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestNewRegistry(t *testing.T) {
	ok := Agent{ID: idA1, Name: "A1", TrustTier: 1, Status: AgentActive}
	tests := []struct {
		name    string
		agents  []Agent
		wantErr string
	}{
		{name: "empty", agents: nil},
		{name: "one", agents: []Agent{ok}},
		{name: "default status", agents: []Agent{{ID: idA1, TrustTier: 2}}},
		{name: "invalid id", agents: []Agent{{ID: "abc", Name: "bad", TrustTier: 1}}, wantErr: `"abc"`},
		{name: "duplicate id", agents: []Agent{ok, ok}, wantErr: "duplicate"},
		{name: "tier zero", agents: []Agent{{ID: idA1, Name: "A1", TrustTier: 0}}, wantErr: "trust tier 0"},
		{name: "tier four", agents: []Agent{{ID: idA1, Name: "A1", TrustTier: 4}}, wantErr: "trust tier 4"},
		{name: "unknown status", agents: []Agent{{ID: idA1, Name: "A1", TrustTier: 1, Status: "paused"}}, wantErr: `"paused"`},
		{name: "bad owner", agents: []Agent{{ID: idA1, Name: "A1", TrustTier: 1, OwnerID: "a b"}}, wantErr: "owner"},
		{name: "zero scope", agents: []Agent{{ID: idA1, Name: "A1", TrustTier: 1, Scopes: ScopeSet{{}}}}, wantErr: "empty scope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, err := NewRegistry(tt.agents)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if reg.Len() != len(tt.agents) {
				t.Errorf("Len() = %d", reg.Len())
			}
		})
	}
	// Registry copies its input.
	in := []Agent{{ID: idA1, TrustTier: 1, Scopes: ScopeSet{ScopeNegotiate}}}
	reg, err := NewRegistry(in)
	if err != nil {
		t.Fatal(err)
	}
	in[0].Scopes[0] = MustParseScope("x:y")
	in[0].TrustTier = 3
	a, _ := reg.Lookup(idA1)
	if a.Scopes[0] != ScopeNegotiate || a.TrustTier != 1 || a.Status != AgentActive {
		t.Errorf("registry agent changed with input: %+v", a)
	}
	if !slices.Equal(reg.IDs(), []string{idA1}) {
		t.Errorf("IDs() = %v", reg.IDs())
	}
}

func TestResolveCaller(t *testing.T) {
	reg := fixtureRegistry(t)
	tests := []struct {
		name        string
		agentID     string
		ownerID     string
		scope       string
		present     bool
		wantStatus  int // 0 = success
		wantReason  string
		wantMissing []string
		wantEff     []string
	}{
		{name: "inherit granted scopes", agentID: idA1, wantEff: []string{"rcns:negotiate", "booking:*"}},
		{name: "claim subset", agentID: idA1, ownerID: "org:acme", scope: "booking:write", present: true, wantEff: []string{"booking:write"}},
		{name: "claim with and without spaces", agentID: idA1, scope: "booking:write,rcns:negotiate", present: true, wantEff: []string{"booking:write", "rcns:negotiate"}},
		{name: "claim with spaces", agentID: idA1, scope: "booking:write, rcns:negotiate", present: true, wantEff: []string{"booking:write", "rcns:negotiate"}},
		{name: "deprecated agent served", agentID: idDep, wantEff: []string{"a:b"}},
		{name: "malformed agent id (§24 item 19)", agentID: strings.ToUpper(idA1), wantStatus: 400, wantReason: "invalid-canonical-id"},
		{name: "empty agent id", agentID: "", wantStatus: 400, wantReason: "invalid-canonical-id"},
		{name: "unknown agent (§24 item 20)", agentID: strings.Repeat("e", 64), wantStatus: 401, wantReason: "agent-unauthenticated"},
		{name: "malformed owner id", agentID: idA1, ownerID: "org acme", wantStatus: 400, wantReason: "invalid-owner-id"},
		{name: "owner mismatch", agentID: idA1, ownerID: "org:other", wantStatus: 401, wantReason: "owner-mismatch"},
		{name: "suspended", agentID: idSus, wantStatus: 503, wantReason: "agent-suspended"},
		{name: "retired", agentID: idRet, wantStatus: 410, wantReason: "agent-retired"},
		{name: "unparsable scope", agentID: idA1, scope: "Booking:write", present: true, wantStatus: 400, wantReason: "invalid-authority-scope"},
		{name: "present but empty scope", agentID: idA1, scope: "", present: true, wantStatus: 400, wantReason: "invalid-authority-scope"},
		{name: "claim not granted (§24 item 21)", agentID: idA2, scope: "booking:read, rcns:negotiate", present: true, wantStatus: 262, wantReason: "scope-claim-invalid", wantMissing: []string{"rcns:negotiate"}},
		{name: "claim broader than grant", agentID: idA2, scope: "booking:*", present: true, wantStatus: 262, wantReason: "scope-claim-invalid", wantMissing: []string{"booking:*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ref := ResolveCaller(reg, tt.agentID, tt.ownerID, tt.scope, tt.present)
			if tt.wantStatus != 0 {
				if ref == nil {
					t.Fatalf("ResolveCaller succeeded, want %d %s", tt.wantStatus, tt.wantReason)
				}
				if ref.Status != tt.wantStatus || ref.Reason != tt.wantReason || ref.Explanation == "" {
					t.Errorf("refusal = %v, want %d %s", ref, tt.wantStatus, tt.wantReason)
				}
				if tt.wantMissing != nil {
					if ref.Fields["type"] != "scope-claim-invalid" || !slices.Equal(ref.Fields["missing_scopes"].([]string), tt.wantMissing) {
						t.Errorf("Fields = %v, want missing %v", ref.Fields, tt.wantMissing)
					}
				}
				// The agent is identified under scope-claim-invalid only.
				if identified := tt.wantReason == "scope-claim-invalid"; (c != nil) != identified || identified && c.Agent.ID != tt.agentID {
					t.Errorf("Caller = %+v with %s, want one only for scope-claim-invalid", c, tt.wantReason)
				}
				return
			}
			if ref != nil {
				t.Fatalf("ResolveCaller refused: %v", ref)
			}
			if c.Agent.ID != tt.agentID || c.ScopeHeader != tt.present {
				t.Errorf("Caller = %+v", c)
			}
			if got := c.Effective().Strings(); !slices.Equal(got, tt.wantEff) {
				t.Errorf("Effective() = %v, want %v", got, tt.wantEff)
			}
		})
	}
	// An Authority-Scope character outside ASCII is named as the
	// character, not as its first byte read as Latin-1.
	if _, ref := ResolveCaller(reg, idA1, "", "hotel:réad", true); ref == nil || ref.Status != 400 ||
		!strings.Contains(ref.Explanation, "character 'é' (U+00E9) is not allowed") || strings.Contains(ref.Explanation, "Ã") {
		t.Errorf("Authority-Scope hotel:réad: %v", ref)
	}
	// A malformed Agent-ID or Owner-ID is refused without being
	// echoed: the explanation names the header, not its value.
	if _, ref := ResolveCaller(reg, strings.Repeat("a", 63)+"é", "", "", false); ref == nil || ref.Status != 400 ||
		ref.Reason != "invalid-canonical-id" || strings.Contains(ref.Explanation, "aaaa") {
		t.Errorf("malformed Agent-ID: %v", ref)
	}
	if _, ref := ResolveCaller(reg, idA1, "secret owner", "", false); ref == nil || ref.Status != 400 ||
		ref.Reason != "invalid-owner-id" || strings.Contains(ref.Explanation, "secret") {
		t.Errorf("malformed Owner-ID: %v", ref)
	}
	if _, ref := ResolveCaller(nil, idA1, "", "", false); ref == nil || ref.Status != 401 {
		t.Errorf("nil registry: %v, want 401", ref)
	}
}

// TestScopeClaimInvalidEchoBounded: a 262 scope-claim-invalid echoes at
// most 8 of the claimed tokens it refuses, each cut to 64 bytes, and says
// how many there are in all. An Authority-Scope of 1500 ungranted tokens
// gave a 14.6 KB answer listing each twice (explanation and
// missing_scopes).
func TestScopeClaimInvalidEchoBounded(t *testing.T) {
	reg := fixtureRegistry(t)
	long := "x:" + strings.Repeat("y", 200)
	tests := []struct {
		name       string
		scope      string
		wantListed []string
		wantCount  int    // missing_scope_count; 0 = absent
		wantWords  string // in the explanation
	}{
		{name: "eight listed whole", scope: "a:1, a:2, a:3, a:4, a:5, a:6, a:7, a:8",
			wantListed: []string{"a:1", "a:2", "a:3", "a:4", "a:5", "a:6", "a:7", "a:8"},
			wantWords:  "claims a:1, a:2, a:3, a:4, a:5, a:6, a:7, a:8, which"},
		{name: "1500 cut to eight", scope: func() string {
			toks := []string{"booking:read"}
			for i := range 1500 {
				toks = append(toks, fmt.Sprintf("a:%d", i), fmt.Sprintf("a:%d", i))
			}
			return strings.Join(toks, ", ")
		}(),
			wantListed: []string{"a:0", "a:1", "a:2", "a:3", "a:4", "a:5", "a:6", "a:7"},
			wantCount:  1500, wantWords: "claims a:0, a:1, a:2, a:3, a:4, a:5, a:6, a:7 and 1492 more, which"},
		{name: "long token cut", scope: long,
			wantListed: []string{long[:64] + "…"}, wantWords: "claims " + long[:64] + "…, which"},
		// 66 bytes: cut after 64 like every other echo (a cut that
		// counted the ellipsis in the budget kept it whole).
		{name: "token just over 64 bytes cut", scope: long[:66],
			wantListed: []string{long[:64] + "…"}, wantWords: "claims " + long[:64] + "…, which"},
		{name: "64-byte token whole", scope: long[:64],
			wantListed: []string{long[:64]}, wantWords: "claims " + long[:64] + ", which"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ref := ResolveCaller(reg, idA2, "", tt.scope, true)
			if ref == nil || ref.Status != 262 || ref.Reason != "scope-claim-invalid" {
				t.Fatalf("refusal = %v, want 262 scope-claim-invalid", ref)
			}
			if got, _ := ref.Fields["missing_scopes"].([]string); !slices.Equal(got, tt.wantListed) {
				t.Errorf("missing_scopes = %v, want %v", got, tt.wantListed)
			}
			if got, ok := ref.Fields["missing_scope_count"]; tt.wantCount == 0 && ok || tt.wantCount != 0 && got != tt.wantCount {
				t.Errorf("missing_scope_count = %v (present %v), want %d", got, ok, tt.wantCount)
			}
			if !strings.Contains(ref.Explanation, tt.wantWords) {
				t.Errorf("explanation %q does not contain %q", ref.Explanation, tt.wantWords)
			}
			if len(ref.Explanation) > 300 {
				t.Errorf("explanation is %d bytes", len(ref.Explanation))
			}
		})
	}
}

func TestCheckRequiredScopes(t *testing.T) {
	reg := fixtureRegistry(t)
	caller := func(id, scope string, present bool) *Caller {
		c, ref := ResolveCaller(reg, id, "", scope, present)
		if ref != nil {
			t.Fatal(ref)
		}
		return c
	}
	tests := []struct {
		name        string
		c           *Caller
		required    []string
		wantStatus  int
		wantReason  string
		wantMissing []string
	}{
		{name: "covered by inherited grant", c: caller(idA1, "", false), required: []string{"booking:write"}},
		{name: "covered by claim", c: caller(idA1, "booking:write", true), required: []string{"booking:write"}},
		{name: "nothing required", c: caller(idA2, "booking:read", true), required: nil},
		{name: "granted but not claimed", c: caller(idA1, "booking:read", true), required: []string{"booking:write"}, wantStatus: 262, wantReason: "scope-required", wantMissing: []string{"booking:write"}},
		{name: "not granted", c: caller(idA2, "", false), required: []string{"booking:write"}, wantStatus: 455, wantReason: "scope-exceeded", wantMissing: []string{"booking:write"}},
		{name: "mixed: one unclaimed, one ungranted", c: caller(idA1, "booking:read", true), required: []string{"booking:write", "inspect:all"}, wantStatus: 455, wantReason: "scope-exceeded", wantMissing: []string{"inspect:all"}},
		{name: "nil caller", c: nil, required: []string{"a:b"}, wantStatus: 455, wantReason: "scope-exceeded", wantMissing: []string{"a:b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := ParseScopes(tt.required)
			if err != nil {
				t.Fatal(err)
			}
			ref := CheckRequiredScopes(tt.c, req)
			if tt.wantStatus == 0 {
				if ref != nil {
					t.Fatalf("CheckRequiredScopes = %v, want nil", ref)
				}
				return
			}
			if ref == nil || ref.Status != tt.wantStatus || ref.Reason != tt.wantReason || ref.Explanation == "" {
				t.Fatalf("CheckRequiredScopes = %v, want %d %s", ref, tt.wantStatus, tt.wantReason)
			}
			if got := ref.Fields["missing_scopes"].([]string); !slices.Equal(got, tt.wantMissing) {
				t.Errorf("missing_scopes = %v, want %v", got, tt.wantMissing)
			}
			if tt.wantStatus == 262 && ref.Fields["type"] != "scope-required" {
				t.Errorf("type = %v", ref.Fields["type"])
			}
		})
	}
}
