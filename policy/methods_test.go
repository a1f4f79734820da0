package policy

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestValidMethodToken(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "floor", in: "QUERY", want: true},
		{name: "three letters", in: "ABC", want: true},
		{name: "thirty-two letters", in: strings.Repeat("A", 32), want: true},
		{name: "two letters", in: "AB"},
		{name: "thirty-three letters", in: strings.Repeat("A", 33)},
		{name: "lowercase", in: "query"},
		{name: "mixed case", in: "Query"},
		{name: "digit", in: "QUERY2"},
		{name: "hyphen", in: "RE-SERVE"},
		{name: "underscore", in: "RE_SERVE"},
		{name: "empty", in: ""},
		{name: "non-ascii", in: "QUÉRY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidMethodToken(tt.in); got != tt.want {
				t.Errorf("ValidMethodToken(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestResolveMethod(t *testing.T) {
	def := &MethodPolicy{}
	getOnly := &MethodPolicy{Legacy: []string{"GET"}}
	tests := []struct {
		name       string
		policy     *MethodPolicy
		wire       string
		wantMethod string
		wantReq    string
		wantInfo   bool
		wantReason string // "" = no refusal
	}{
		{name: "FROBNICATE not in catalog (§24 item 9)", policy: def, wire: "FROBNICATE", wantReason: "method-not-in-catalog"},
		{name: "lowercase token (§24 item 10)", policy: def, wire: "query", wantReason: "invalid-method-token"},
		{name: "two-char token (§24 item 10)", policy: def, wire: "QU", wantReason: "invalid-method-token"},
		{name: "digit token (§24 item 10)", policy: def, wire: "BOOK2", wantReason: "invalid-method-token"},
		{name: "empty token", policy: def, wire: "", wantReason: "invalid-method-token"},
		{name: "GET with legacy NONE default (§24 item 12)", policy: def, wire: "GET", wantReason: "legacy-method-not-enabled"},
		{name: "GET with explicit NONE", policy: &MethodPolicy{Legacy: []string{"NONE"}}, wire: "GET", wantReason: "legacy-method-not-enabled"},
		{name: "POST not admitted by GET-only", policy: getOnly, wire: "POST", wantReason: "legacy-method-not-enabled"},
		{name: "GET admitted aliases to FETCH (§24 item 91)", policy: getOnly, wire: "GET", wantMethod: "FETCH", wantReq: "GET", wantInfo: true},
		{name: "legacy star admits DELETE", policy: &MethodPolicy{Legacy: []string{"*"}}, wire: "DELETE", wantMethod: "REMOVE", wantReq: "DELETE", wantInfo: true},
		{name: "admitted GET with aliasing disabled stays GET", policy: &MethodPolicy{Legacy: []string{"GET"}, Aliases: map[string]string{}}, wire: "GET", wantMethod: "GET"},
		{name: "catalog method", policy: def, wire: "BOOK", wantMethod: "BOOK", wantInfo: true},
		{name: "alias target method direct", policy: def, wire: "FETCH", wantMethod: "FETCH", wantInfo: true},
		{name: "custom method via allow", policy: &MethodPolicy{Allow: []string{"FROBNICATE"}}, wire: "FROBNICATE", wantMethod: "FROBNICATE"},
		{name: "custom method via custom", policy: &MethodPolicy{Custom: []string{"FROBNICATE"}}, wire: "FROBNICATE", wantMethod: "FROBNICATE"},
		{name: "custom alias source", policy: &MethodPolicy{Aliases: map[string]string{"GRAB": "FETCH"}}, wire: "GRAB", wantMethod: "FETCH", wantReq: "GRAB", wantInfo: true},
		{name: "alias to unknown refused", policy: &MethodPolicy{Aliases: map[string]string{"GRAB": "NOPE"}}, wire: "GRAB", wantReason: "method-not-in-catalog"},
		{name: "not in shipped catalog", policy: def, wire: "LOG", wantReason: "method-not-in-catalog"},
		{name: "floor never aliased", policy: &MethodPolicy{Aliases: map[string]string{"QUERY": "FETCH"}}, wire: "QUERY", wantMethod: "QUERY", wantInfo: true},
		{name: "nil policy", policy: nil, wire: "BOOK", wantMethod: "BOOK", wantInfo: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ref := tt.policy.ResolveMethod(tt.wire)
			if tt.wantReason != "" {
				if ref == nil {
					t.Fatalf("ResolveMethod(%q) = %+v, want 459 %s", tt.wire, got, tt.wantReason)
				}
				if ref.Status != StatusMethodViolation || ref.Reason != tt.wantReason {
					t.Errorf("refusal = %d %s, want 459 %s", ref.Status, ref.Reason, tt.wantReason)
				}
				if ref.Fields["method"] != tt.wire || ref.Fields["catalog_version"] != "1.0.0" {
					t.Errorf("Fields = %v, want method %q and catalog_version 1.0.0", ref.Fields, tt.wire)
				}
				if tt.wire != "" && !strings.Contains(ref.Explanation, tt.wire) {
					t.Errorf("Explanation %q does not name %q", ref.Explanation, tt.wire)
				}
				if ref.Retryable {
					t.Error("459 marked retryable")
				}
				return
			}
			if ref != nil {
				t.Fatalf("ResolveMethod(%q) refused: %v", tt.wire, ref)
			}
			if got.Method != tt.wantMethod || got.Requested != tt.wantReq || (got.Info != nil) != tt.wantInfo {
				t.Errorf("ResolveMethod(%q) = {%s %s info:%v}, want {%s %s info:%v}", tt.wire, got.Method, got.Requested, got.Info != nil, tt.wantMethod, tt.wantReq, tt.wantInfo)
			}
			if got.Info != nil && got.Info.Name != got.Method {
				t.Errorf("Info.Name = %q, Method = %q", got.Info.Name, got.Method)
			}
		})
	}
}

// TestFloorNeverRefused is §24 item 11 at the unit level, under
// restrictive policies too.
func TestFloorNeverRefused(t *testing.T) {
	policies := []struct {
		name string
		p    *MethodPolicy
	}{
		{name: "default", p: &MethodPolicy{}},
		{name: "narrow allow", p: &MethodPolicy{Allow: []string{"BOOK"}}},
		{name: "aliasing disabled", p: &MethodPolicy{Aliases: map[string]string{}}},
	}
	for _, pp := range policies {
		t.Run(pp.name, func(t *testing.T) {
			for _, m := range floorMethods {
				got, ref := pp.p.ResolveMethod(m)
				if ref != nil || got.Method != m {
					t.Errorf("ResolveMethod(%s) = %+v, %v", m, got, ref)
				}
				if pp.p.Disallowed(m) {
					t.Errorf("Disallowed(%s) = true", m)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		p       *MethodPolicy
		wantErr string // "" = valid
	}{
		{name: "zero value", p: &MethodPolicy{}},
		{name: "legacy subset", p: &MethodPolicy{Legacy: []string{"GET", "PATCH"}}},
		{name: "legacy star", p: &MethodPolicy{Legacy: []string{"*"}}},
		{name: "legacy NONE", p: &MethodPolicy{Legacy: []string{"NONE"}}},
		{name: "legacy HEAD", p: &MethodPolicy{Legacy: []string{"HEAD"}}, wantErr: `"HEAD"`},
		{name: "legacy lowercase", p: &MethodPolicy{Legacy: []string{"get"}}, wantErr: `"get"`},
		{name: "legacy NONE with GET", p: &MethodPolicy{Legacy: []string{"NONE", "GET"}}, wantErr: `"NONE"`},
		{name: "legacy none lowercase", p: &MethodPolicy{Legacy: []string{"none"}}, wantErr: `"none"`},
		{name: "alias chain A→B→C rejected (§24 item 87)", p: &MethodPolicy{Aliases: map[string]string{"GRAB": "TAKE", "TAKE": "FETCH"}}, wantErr: "chain GRAB→TAKE→FETCH"},
		{name: "alias cycle", p: &MethodPolicy{Aliases: map[string]string{"GRAB": "TAKE", "TAKE": "GRAB"}}, wantErr: "cycle"},
		{name: "alias self cycle", p: &MethodPolicy{Aliases: map[string]string{"GRAB": "GRAB"}}, wantErr: "GRAB→GRAB is a cycle"},
		{name: "alias target unknown", p: &MethodPolicy{Aliases: map[string]string{"GRAB": "NOPE"}}, wantErr: "NOPE is neither"},
		{name: "alias target custom", p: &MethodPolicy{Allow: []string{"FROB"}, Aliases: map[string]string{"GRAB": "FROB"}}},
		{name: "alias target lowercase", p: &MethodPolicy{Aliases: map[string]string{"GRAB": "fetch"}}, wantErr: `"fetch"`},
		{name: "alias source lowercase", p: &MethodPolicy{Aliases: map[string]string{"grab": "FETCH"}}, wantErr: `"grab"`},
		{name: "alias floor source", p: &MethodPolicy{Aliases: map[string]string{"QUERY": "FETCH"}}, wantErr: "floor method QUERY"},
		{name: "alias empty map", p: &MethodPolicy{Aliases: map[string]string{}}},
		{name: "custom lowercase", p: &MethodPolicy{Allow: []string{"frob"}}, wantErr: `"frob"`},
		{name: "custom two chars", p: &MethodPolicy{Allow: []string{"FR"}}, wantErr: `"FR"`},
		{name: "custom field digit", p: &MethodPolicy{Custom: []string{"FROB2"}}, wantErr: `"FROB2"`},
		{name: "custom field legacy verb", p: &MethodPolicy{Custom: []string{"GET"}}, wantErr: `"GET"`},
		{name: "allow star mixed", p: &MethodPolicy{Allow: []string{"*", "BOOK"}}, wantErr: `"*"`},
		{name: "disallow bad token", p: &MethodPolicy{Disallow: []string{"bo"}}, wantErr: `"bo"`},
		{name: "redirect ok", p: &MethodPolicy{Redirects: []Redirect{{FromMethod: "BOOK", FromPath: "/old", ToMethod: "RESERVE", ToPath: "/rooms"}}}},
		{name: "redirect bad from method", p: &MethodPolicy{Redirects: []Redirect{{FromMethod: "book", ToMethod: "RESERVE"}}}, wantErr: `from_method "book"`},
		{name: "redirect bad to method", p: &MethodPolicy{Redirects: []Redirect{{FromMethod: "BOOK", ToMethod: ""}}}, wantErr: `to_method ""`},
		{name: "redirect to reserved path", p: &MethodPolicy{Redirects: []Redirect{{FromMethod: "BOOK", ToMethod: "RESERVE", ToPath: "/query"}}}, wantErr: `to_path "/query"`},
		{name: "redirect bad from path", p: &MethodPolicy{Redirects: []Redirect{{FromMethod: "BOOK", FromPath: "old", ToMethod: "RESERVE"}}}, wantErr: `from_path "old"`},
		{name: "redirect from reserved path allowed", p: &MethodPolicy{Redirects: []Redirect{{FromMethod: "BOOK", FromPath: "/book", ToMethod: "RESERVE", ToPath: "/rooms"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	p := &MethodPolicy{
		Legacy:    []string{"GET"},
		Aliases:   map[string]string{},
		Disallow:  []string{"FROBNICATE", "BOOK"},
		Redirects: []Redirect{{FromMethod: "BOOK", ToMethod: "NOPE"}, {FromMethod: "ZZZZ", ToMethod: "BOOK"}},
	}
	w := strings.Join(p.Warnings(), "\n")
	for _, want := range []string{`disallow[0] "FROBNICATE"`, `to_method "NOPE"`, `from_method "ZZZZ"`, "admits GET without an alias"} {
		if !strings.Contains(w, want) {
			t.Errorf("Warnings() = %q, missing %q", w, want)
		}
	}
	if strings.Contains(w, `"BOOK" is not`) {
		t.Errorf("Warnings() flags BOOK: %q", w)
	}
	if got := (&MethodPolicy{}).Warnings(); len(got) != 0 {
		t.Errorf("zero policy Warnings() = %v", got)
	}
}

func TestDisallowed(t *testing.T) {
	tests := []struct {
		name   string
		p      *MethodPolicy
		method string
		want   bool
	}{
		{name: "default allows catalog", p: &MethodPolicy{}, method: "BOOK"},
		{name: "star allows catalog", p: &MethodPolicy{Allow: []string{"*"}}, method: "BOOK"},
		{name: "disallow list (§24 item 13)", p: &MethodPolicy{Disallow: []string{"BOOK"}}, method: "BOOK", want: true},
		{name: "allow array excludes", p: &MethodPolicy{Allow: []string{"RESERVE"}}, method: "BOOK", want: true},
		{name: "allow array includes", p: &MethodPolicy{Allow: []string{"RESERVE", "BOOK"}}, method: "BOOK"},
		{name: "allow array never excludes floor", p: &MethodPolicy{Allow: []string{"RESERVE"}}, method: "DISCOVER"},
		{name: "disallow can exclude floor", p: &MethodPolicy{Disallow: []string{"PLAN"}}, method: "PLAN", want: true},
		{name: "disallow wins over allow", p: &MethodPolicy{Allow: []string{"BOOK"}, Disallow: []string{"BOOK"}}, method: "BOOK", want: true},
		{name: "custom allowed", p: &MethodPolicy{Allow: []string{"FROB"}}, method: "FROB"},
		{name: "empty allow array allows floor only", p: &MethodPolicy{Allow: []string{}}, method: "BOOK", want: true},
		{name: "nil policy", p: nil, method: "BOOK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Disallowed(tt.method); got != tt.want {
				t.Errorf("Disallowed(%s) = %v, want %v", tt.method, got, tt.want)
			}
		})
	}
}

func TestCustomMethodsAndIsMethod(t *testing.T) {
	p := &MethodPolicy{Allow: []string{"ZAP", "BOOK", "FROB", "ZAP", "GET", "bad"}, Custom: []string{"WIBBLE"}}
	if got, want := p.CustomMethods(), []string{"FROB", "WIBBLE", "ZAP"}; !slices.Equal(got, want) {
		t.Errorf("CustomMethods() = %v, want %v", got, want)
	}
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "catalog", in: "BOOK", want: true},
		{name: "floor", in: "QUERY", want: true},
		{name: "custom from allow", in: "FROB", want: true},
		{name: "custom from custom", in: "WIBBLE", want: true},
		{name: "legacy verb", in: "GET"},
		{name: "invalid token in allow", in: "bad"},
		{name: "unknown", in: "FROBNICATE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.IsMethod(tt.in); got != tt.want {
				t.Errorf("IsMethod(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
	if got := (&MethodPolicy{}).CustomMethods(); got == nil || len(got) != 0 {
		t.Errorf("zero policy CustomMethods() = %#v, want empty non-nil", got)
	}
}

func TestApplyRedirects(t *testing.T) {
	p := &MethodPolicy{Redirects: []Redirect{
		{FromMethod: "BOOK", FromPath: "/old-rooms", ToMethod: "RESERVE", ToPath: "/rooms"},
		{FromMethod: "BOOK", ToMethod: "RESERVE"},
		{FromMethod: "FETCH", FromPath: "/legacy", ToMethod: "FETCH", ToPath: "/items"},
		{FromMethod: "CANCEL", ToMethod: "NOPE"}, // unknown target: skipped
		{FromMethod: "CANCEL", ToMethod: "REFUND"},
	}}
	tests := []struct {
		name                 string
		method, path         string
		wantMethod, wantPath string
	}{
		{name: "first match with path", method: "BOOK", path: "/old-rooms", wantMethod: "RESERVE", wantPath: "/rooms"},
		{name: "any path keeps path", method: "BOOK", path: "/suites", wantMethod: "RESERVE", wantPath: "/suites"},
		{name: "path only rewrite", method: "FETCH", path: "/legacy", wantMethod: "FETCH", wantPath: "/items"},
		{name: "no match", method: "FETCH", path: "/other", wantMethod: "FETCH", wantPath: "/other"},
		{name: "unknown target skipped", method: "CANCEL", path: "/x", wantMethod: "REFUND", wantPath: "/x"},
		{name: "single pass", method: "RESERVE", path: "/rooms", wantMethod: "RESERVE", wantPath: "/rooms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, path := p.ApplyRedirects(tt.method, tt.path)
			if m != tt.wantMethod || path != tt.wantPath {
				t.Errorf("ApplyRedirects(%s, %s) = %s %s, want %s %s", tt.method, tt.path, m, path, tt.wantMethod, tt.wantPath)
			}
		})
	}
}

func TestRedirectsFor(t *testing.T) {
	p := &MethodPolicy{Redirects: []Redirect{
		{FromMethod: "BOOK", FromPath: "/old", ToMethod: "RESERVE"},
		{FromMethod: "BOOK", ToMethod: "SCHEDULE"},
		{FromMethod: "CANCEL", FromPath: "/other", ToMethod: "REFUND"},
	}}
	tests := []struct {
		name string
		path string
		want map[string]string
	}{
		{name: "specific first", path: "/old", want: map[string]string{"BOOK": "RESERVE"}},
		{name: "any path", path: "/x", want: map[string]string{"BOOK": "SCHEDULE"}},
		{name: "two methods", path: "/other", want: map[string]string{"BOOK": "SCHEDULE", "CANCEL": "REFUND"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.RedirectsFor(tt.path); !maps.Equal(got, tt.want) {
				t.Errorf("RedirectsFor(%s) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
	if got := (&MethodPolicy{}).RedirectsFor("/x"); got == nil || len(got) != 0 {
		t.Errorf("RedirectsFor with no redirects = %#v, want empty non-nil", got)
	}
}
