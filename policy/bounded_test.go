package policy

import (
	"slices"
	"strings"
	"testing"
)

// TestBoundedCaller: a credential's ceiling bounds the agent's grants
// (Intersect by covering), and a scope the agent holds but the token
// lacks is 403 insufficient-scope, not 262 or 455.
func TestBoundedCaller(t *testing.T) {
	sets := func(s ...string) ScopeSet {
		out, err := ParseScopes(s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := Intersect(sets("hotel:*", "rcns:negotiate"), sets("hotel:read", "bench:read")).Strings(); !slices.Equal(got, []string{"hotel:read"}) {
		t.Fatalf("Intersect = %v, want [hotel:read]", got)
	}
	agent := &Agent{ID: "a", Scopes: sets("rcns:negotiate", "hotel:read", "hotel:book")}
	c := &Caller{Agent: agent, Bounded: true, Ceiling: sets("hotel:read")}
	if !c.Scoped() {
		t.Fatal("a bounded caller states its scopes (scope_required_for_invocation)")
	}
	tests := []struct {
		required []string
		reason   string
	}{
		{[]string{"hotel:read"}, ""},
		{[]string{"hotel:book"}, "insufficient-scope"},
		{[]string{"hotel:admin"}, "scope-exceeded"},
	}
	for _, tt := range tests {
		ref := CheckRequiredScopes(c, sets(tt.required...))
		switch {
		case tt.reason == "" && ref != nil:
			t.Errorf("%v: refused %s", tt.required, ref.Reason)
		case tt.reason != "" && (ref == nil || ref.Reason != tt.reason):
			t.Errorf("%v: %+v, want %s", tt.required, ref, tt.reason)
		}
	}
	if ref := (Gate{}).Locks34(c, nil); ref == nil || ref.Reason != "insufficient-scope" || ref.Status != StatusForbidden {
		t.Errorf("lock 3 with a token lacking rcns:negotiate: %+v, want 403 insufficient-scope", ref)
	}
	claim := &Caller{Agent: agent, Bounded: true, Ceiling: sets("hotel:read"), ScopeHeader: true, Claimed: sets("hotel:book")}
	// The claim asks for the scope, not the operation (helper-149).
	if ref := claim.BoundRefusal(); ref == nil || ref.Reason != "insufficient-scope" || !strings.Contains(ref.Explanation, "the request claims in Authority-Scope") || strings.Contains(ref.Explanation, "operation requires") {
		t.Errorf("claiming beyond the token: %+v, want insufficient-scope naming the claim", ref)
	}
	unbounded := &Caller{Agent: agent, ScopeHeader: true, Claimed: sets("hotel:read")}
	if ref := CheckRequiredScopes(unbounded, sets("hotel:book")); ref == nil || ref.Reason != "scope-required" {
		t.Errorf("unbounded, granted but not claimed: %+v, want scope-required", ref)
	}
}
