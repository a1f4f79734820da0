package policy

import (
	"maps"
	"strings"
	"testing"
)

func TestAllowRCNS(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "true", in: "true", want: true},
		{name: "absent", in: ""},
		{name: "false (§24 item 18)", in: "false"},
		{name: "TRUE (§24 item 18)", in: "TRUE"},
		{name: "1 (§24 item 18)", in: "1"},
		{name: "optimistic (§24 item 18)", in: "optimistic"},
		{name: "True", in: "True"},
		{name: "padded", in: " true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AllowRCNS(tt.in); got != tt.want {
				t.Errorf("AllowRCNS(%q) = %v, want %v", tt.in, got, tt.want)
			}
			if got, want := KnownAllowRCNS(tt.in), tt.in == "true" || tt.in == "false"; got != want {
				t.Errorf("KnownAllowRCNS(%q) = %v, want %v", tt.in, got, want)
			}
		})
	}
}

func TestLockString(t *testing.T) {
	tests := []struct {
		name string
		l    Lock
		want string
	}{
		{name: "lock 1", l: LockServerPolicy, want: "server_policy"},
		{name: "lock 2", l: LockCallerOptIn, want: "caller_opt_in"},
		{name: "lock 3", l: LockCallerScope, want: "caller_scope"},
		{name: "lock 4", l: LockTrustTier, want: "trust_tier"},
		{name: "unknown", l: 9, want: "lock(9)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLocks12(t *testing.T) {
	tests := []struct {
		name        string
		gate        Gate
		optIn       bool
		wantStates  LockStates
		wantProceed bool
		wantReason  string
	}{
		{name: "no opt-in, disabled: plain 404/405 (OP-1)", gate: Gate{}, optIn: false,
			wantStates: LockStates{LockNotEvaluated, LockClosed, LockNotEvaluated, LockNotEvaluated}},
		{name: "no opt-in, enabled: plain 404/405", gate: Gate{Enabled: true}, optIn: false,
			wantStates: LockStates{LockNotEvaluated, LockClosed, LockNotEvaluated, LockNotEvaluated}},
		{name: "opt-in, disabled: 464 rcns-disabled (§24 item 28)", gate: Gate{}, optIn: true,
			wantStates: LockStates{LockClosed, LockOpen, LockNotEvaluated, LockNotEvaluated}, wantReason: "rcns-disabled"},
		{name: "opt-in, enabled: proceed", gate: Gate{Enabled: true}, optIn: true,
			wantStates: LockStates{LockOpen, LockOpen, LockNotEvaluated, LockNotEvaluated}, wantProceed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states, proceed, ref := tt.gate.Locks12(tt.optIn)
			if states != tt.wantStates || proceed != tt.wantProceed {
				t.Errorf("Locks12 = %v %v, want %v %v", states, proceed, tt.wantStates, tt.wantProceed)
			}
			if tt.wantReason == "" {
				if ref != nil {
					t.Errorf("refusal = %v, want nil", ref)
				}
				return
			}
			if ref == nil || ref.Status != StatusNoContract || ref.Reason != tt.wantReason || ref.Explanation == "" {
				t.Errorf("refusal = %v, want 464 %s", ref, tt.wantReason)
			}
		})
	}
}

func TestLocks34(t *testing.T) {
	reg := fixtureRegistry(t)
	caller := func(id, scope string, present bool) *Caller {
		c, ref := ResolveCaller(reg, id, "", scope, present)
		if ref != nil {
			t.Fatal(ref)
		}
		return c
	}
	tests := []struct {
		name       string
		gate       Gate
		c          *Caller
		wantStatus int
		wantReason string
		want3      LockState
		want4      LockState
	}{
		{name: "A1 all open", gate: Gate{Enabled: true}, c: caller(idA1, "", false), want3: LockOpen, want4: LockOpen},
		{name: "A1 claims rcns:negotiate", gate: Gate{Enabled: true}, c: caller(idA1, "rcns:negotiate", true), want3: LockOpen, want4: LockOpen},
		{name: "A2 lacks rcns:negotiate (§24 item 29)", gate: Gate{Enabled: true}, c: caller(idA2, "", false),
			wantStatus: 262, wantReason: "scope-required", want3: LockClosed, want4: LockNotEvaluated},
		{name: "A1 claim leaves out rcns:negotiate: still 262", gate: Gate{Enabled: true}, c: caller(idA1, "booking:read", true),
			wantStatus: 262, wantReason: "scope-required", want3: LockClosed, want4: LockNotEvaluated},
		{name: "A3 tier 2 vs default min 1 (§24 item 30)", gate: Gate{Enabled: true}, c: caller(idA3, "", false),
			wantStatus: 464, wantReason: "trust-tier-insufficient", want3: LockOpen, want4: LockClosed},
		{name: "A3 tier 2 vs min 2", gate: Gate{Enabled: true, MinTrustTier: 2}, c: caller(idA3, "", false), want3: LockOpen, want4: LockOpen},
		{name: "unset tier counts as 2", gate: Gate{Enabled: true}, c: &Caller{Agent: &Agent{Scopes: ScopeSet{ScopeNegotiate}}},
			wantStatus: 464, wantReason: "trust-tier-insufficient", want3: LockOpen, want4: LockClosed},
		{name: "unset tier vs min 2", gate: Gate{Enabled: true, MinTrustTier: 2}, c: &Caller{Agent: &Agent{Scopes: ScopeSet{ScopeNegotiate}}}, want3: LockOpen, want4: LockOpen},
		{name: "wildcard grant opens lock 3", gate: Gate{Enabled: true, MinTrustTier: 3}, c: &Caller{Agent: &Agent{TrustTier: 3, Scopes: ScopeSet{MustParseScope("rcns:*")}}}, want3: LockOpen, want4: LockOpen},
		{name: "nil caller", gate: Gate{Enabled: true}, c: nil, wantStatus: 262, wantReason: "scope-required", want3: LockClosed, want4: LockNotEvaluated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states, _, _ := tt.gate.Locks12(true)
			ref := tt.gate.Locks34(tt.c, &states)
			if states[LockCallerScope-1] != tt.want3 || states[LockTrustTier-1] != tt.want4 {
				t.Errorf("states = %v, want lock3 %s lock4 %s", states, tt.want3, tt.want4)
			}
			if tt.wantStatus == 0 {
				if ref != nil {
					t.Fatalf("Locks34 = %v, want nil", ref)
				}
				return
			}
			if ref == nil || ref.Status != tt.wantStatus || ref.Reason != tt.wantReason || ref.Explanation == "" {
				t.Fatalf("Locks34 = %v, want %d %s", ref, tt.wantStatus, tt.wantReason)
			}
			if tt.wantStatus == 262 && (ref.Fields["type"] != "scope-required" || ref.Fields["scope"] != "rcns:negotiate") {
				t.Errorf("Fields = %v", ref.Fields)
			}
		})
	}
	if ref := (Gate{}).Locks34(caller(idA1, "", false), nil); ref != nil {
		t.Errorf("Locks34 with nil states = %v", ref)
	}
}

func TestLockStatesMap(t *testing.T) {
	got := LockStates{LockOpen, LockOpen, LockClosed}.Map()
	want := map[string]string{"server_policy": "open", "caller_opt_in": "open", "caller_scope": "closed", "trust_tier": "not-evaluated"}
	if !maps.Equal(got, want) {
		t.Errorf("Map() = %v, want %v", got, want)
	}
}

func TestRefusalError(t *testing.T) {
	r := &Refusal{Status: 459, Reason: "method-not-in-catalog", Explanation: "Method FROBNICATE is not in the catalog."}
	if got := r.Error(); got != "459 method-not-in-catalog: Method FROBNICATE is not in the catalog." {
		t.Errorf("Error() = %q", got)
	}
	var nilRef *Refusal
	if !strings.Contains(nilRef.Error(), "nil") {
		t.Error("nil Refusal Error()")
	}
	var err error = r
	if err.Error() == "" {
		t.Error("empty error")
	}
}
