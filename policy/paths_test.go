package policy

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestIsReservedSegment(t *testing.T) {
	p := &MethodPolicy{Allow: []string{"FROB"}, Aliases: map[string]string{"GRAB": "FETCH"}}
	tests := []struct {
		name string
		seg  string
		want bool
	}{
		{name: "lowercase method", seg: "query", want: true},
		{name: "capitalized", seg: "Query", want: true},
		{name: "hyphenated", seg: "q-uery", want: true},
		{name: "underscored", seg: "q_uery", want: true},
		{name: "percent-encoded letter", seg: "%51uery", want: true},
		{name: "percent-encoded hyphen", seg: "q%2Duery", want: true},
		{name: "mixed separators", seg: "-re_serve-", want: true},
		{name: "tier 2 catalog method", seg: "book", want: true},
		{name: "custom method", seg: "frob", want: true},
		{name: "legacy verb", seg: "get", want: true},
		{name: "alias source", seg: "grab", want: true},
		{name: "unicode long s folds to S", seg: "%C5%BFearch", want: true},
		{name: "not in shipped catalog", seg: "log"},
		{name: "plain word", seg: "rooms"},
		{name: "with digit", seg: "query2"},
		{name: "too short", seg: "qu"},
		{name: "only separators", seg: "--"},
		{name: "invalid escape", seg: "%zzquery"},
		{name: "empty", seg: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.IsReservedSegment(tt.seg); got != tt.want {
				t.Errorf("IsReservedSegment(%q) = %v, want %v", tt.seg, got, tt.want)
			}
		})
	}
}

func TestCheckPath(t *testing.T) {
	p := &MethodPolicy{}
	tests := []struct {
		name    string
		path    string
		wantSeg string // checked when wantErr
		wantErr bool
		expl    string // substring of Explanation
	}{
		{name: "root", path: "/"},
		{name: "simple", path: "/rooms"},
		{name: "nested", path: "/rooms/42/guests"},
		{name: "allowed punctuation", path: "/a:b@c!$&'()*+,;=-._~"},
		{name: "pct-encoded", path: "/caf%C3%A9"},
		{name: "legal because not in catalog", path: "/log/map"},
		{name: "query segment (§24 item 14)", path: "/query", wantErr: true, wantSeg: "query", expl: "QUERY"},
		{name: "Query segment (§24 item 14)", path: "/rooms/Query", wantErr: true, wantSeg: "Query"},
		{name: "q-uery segment (§24 item 14)", path: "/q-uery/x", wantErr: true, wantSeg: "q-uery"},
		{name: "q_uery segment (§24 item 14)", path: "/x/q_uery", wantErr: true, wantSeg: "q_uery"},
		{name: "Book", path: "/Book", wantErr: true, wantSeg: "Book"},
		{name: "re-serve", path: "/re-serve", wantErr: true, wantSeg: "re-serve"},
		{name: "legacy verb get", path: "/get", wantErr: true, wantSeg: "get"},
		{name: "percent-encoded reserved", path: "/%71uery", wantErr: true, wantSeg: "%71uery"},
		{name: "trailing slash (§24 item 15)", path: "/rooms/", wantErr: true, wantSeg: "", expl: "end with"},
		{name: "double slash", path: "/rooms//42", wantErr: true, wantSeg: "", expl: "empty segment"},
		{name: "no leading slash", path: "rooms", wantErr: true, wantSeg: "rooms", expl: "start with"},
		{name: "empty", path: "", wantErr: true, wantSeg: ""},
		{name: "space", path: "/a b", wantErr: true, wantSeg: "a b", expl: "' '"},
		{name: "query string", path: "/a?b=1", wantErr: true, wantSeg: "a?b=1"},
		{name: "braces", path: "/{id}", wantErr: true, wantSeg: "{id}"},
		{name: "bad escape", path: "/a%2", wantErr: true, wantSeg: "a%2", expl: "percent-encoding"},
		{name: "bad escape hex", path: "/a%zz", wantErr: true, wantSeg: "a%zz"},
		{name: "non-ascii character", path: "/café", wantErr: true, wantSeg: "café", expl: "the character 'é' (U+00E9)"},
		{name: "invalid utf-8 byte", path: "/caf\xe9", wantErr: true, wantSeg: "caf\xe9", expl: "byte 0xE9"},
		{name: "dot segment", path: "/a/./b", wantErr: true, wantSeg: ".", expl: "dot segment"},
		{name: "dot-dot segment", path: "/a/../b", wantErr: true, wantSeg: ".."},
		{name: "encoded dot-dot", path: "/a/%2E%2e", wantErr: true, wantSeg: "%2E%2e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := p.CheckPath(tt.path)
			if !tt.wantErr {
				if ref != nil {
					t.Fatalf("CheckPath(%q) = %v, want nil", tt.path, ref)
				}
				return
			}
			if ref == nil {
				t.Fatalf("CheckPath(%q) = nil, want 460", tt.path)
			}
			if ref.Status != StatusEndpointViolation || ref.Reason != "path-grammar-violation" {
				t.Errorf("refusal = %d %s", ref.Status, ref.Reason)
			}
			if ref.Fields["segment"] != tt.wantSeg || ref.Fields["path"] != tt.path {
				t.Errorf("Fields = %v, want segment %q path %q", ref.Fields, tt.wantSeg, tt.path)
			}
			if ref.Explanation == "" || !strings.Contains(ref.Explanation, tt.expl) {
				t.Errorf("Explanation = %q, want containing %q", ref.Explanation, tt.expl)
			}
		})
	}
}

func TestCheckPathCustomMethod(t *testing.T) {
	p := &MethodPolicy{Allow: []string{"FROB"}}
	if ref := p.CheckPath("/frob"); ref == nil || ref.Fields["segment"] != "frob" {
		t.Errorf("CheckPath(/frob) = %v, want 460 naming frob", ref)
	}
	if ref := (&MethodPolicy{}).CheckPath("/frob"); ref != nil {
		t.Errorf("without custom FROB, CheckPath(/frob) = %v", ref)
	}
}

func TestParsePathTemplate(t *testing.T) {
	p := &MethodPolicy{}
	tests := []struct {
		name       string
		tmpl       string
		wantParams []string
		wantErr    string
	}{
		{name: "root", tmpl: "/", wantParams: []string{}},
		{name: "literal", tmpl: "/rooms", wantParams: []string{}},
		{name: "params", tmpl: "/rooms/{room_id}/guests/{Guest2}", wantParams: []string{"room_id", "Guest2"}},
		{name: "param named like a method", tmpl: "/rooms/{query}", wantParams: []string{"query"}},
		{name: "reserved literal", tmpl: "/rooms/book", wantErr: `"book"`},
		{name: "prefix param", tmpl: "/rooms/prefix-{id}", wantErr: "whole segment"},
		{name: "rfc6570 form", tmpl: "/rooms/{+id}", wantErr: "whole segment"},
		{name: "empty param", tmpl: "/rooms/{}", wantErr: "whole segment"},
		{name: "duplicate param", tmpl: "/{id}/x/{id}", wantErr: "twice"},
		{name: "trailing slash", tmpl: "/rooms/", wantErr: "end with"},
		{name: "empty segment", tmpl: "/rooms//x", wantErr: "empty segment"},
		{name: "no leading slash", tmpl: "rooms", wantErr: "start with"},
		{name: "bad char", tmpl: "/ro oms", wantErr: "ro oms"},
		{name: "dot segment", tmpl: "/a/..", wantErr: "dot segment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := p.ParsePathTemplate(tt.tmpl)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tp.String() != tt.tmpl || !slices.Equal(tp.Params(), tt.wantParams) {
				t.Errorf("String() = %q, Params() = %v", tp.String(), tp.Params())
			}
		})
	}
}

func TestParseRawTemplate(t *testing.T) {
	tests := []struct {
		name    string
		tmpl    string
		wantErr bool
	}{
		{name: "reserved literal allowed", tmpl: "/api/search/{id}"},
		{name: "trailing slash kept", tmpl: "/api/items/"},
		{name: "root", tmpl: "/"},
		{name: "prefix param refused", tmpl: "/api/v{n}", wantErr: true},
		{name: "empty segment refused", tmpl: "/api//x", wantErr: true},
		{name: "no leading slash", tmpl: "api", wantErr: true},
		{name: "query refused", tmpl: "/api?x=1", wantErr: true},
		{name: "dot-dot refused", tmpl: "/api/../admin", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRawTemplate(tt.tmpl)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseRawTemplate(%q) err = %v, wantErr %v", tt.tmpl, err, tt.wantErr)
			}
		})
	}
}

func TestTemplateMatch(t *testing.T) {
	tests := []struct {
		name   string
		tmpl   string
		raw    bool
		path   string
		want   map[string]string
		wantOK bool
	}{
		{name: "root", tmpl: "/", path: "/", want: map[string]string{}, wantOK: true},
		{name: "root vs other", tmpl: "/", path: "/rooms"},
		{name: "literal", tmpl: "/rooms", path: "/rooms", want: map[string]string{}, wantOK: true},
		{name: "literal encoded equivalent", tmpl: "/rooms", path: "/r%6Foms", want: map[string]string{}, wantOK: true},
		{name: "literal case differs", tmpl: "/rooms", path: "/Rooms"},
		{name: "param", tmpl: "/rooms/{id}", path: "/rooms/42", want: map[string]string{"id": "42"}, wantOK: true},
		{name: "param decoded", tmpl: "/rooms/{id}", path: "/rooms/a%2Fb%20c", want: map[string]string{"id": "a/b c"}, wantOK: true},
		{name: "param never empty", tmpl: "/rooms/{id}", path: "/rooms/"},
		{name: "too many segments", tmpl: "/rooms/{id}", path: "/rooms/1/2"},
		{name: "too few segments", tmpl: "/rooms/{id}", path: "/rooms"},
		{name: "bad escape", tmpl: "/rooms/{id}", path: "/rooms/%zz"},
		{name: "no leading slash", tmpl: "/rooms/{id}", path: "rooms/1"},
		{name: "two params", tmpl: "/{a}/x/{b}", path: "/1/x/2", want: map[string]string{"a": "1", "b": "2"}, wantOK: true},
		{name: "raw trailing slash", tmpl: "/api/{id}/", raw: true, path: "/api/7/", want: map[string]string{"id": "7"}, wantOK: true},
		{name: "raw trailing slash required", tmpl: "/api/{id}/", raw: true, path: "/api/7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tp *PathTemplate
			var err error
			if tt.raw {
				tp, err = ParseRawTemplate(tt.tmpl)
			} else {
				tp, err = (&MethodPolicy{}).ParsePathTemplate(tt.tmpl)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := tp.Match(tt.path)
			if ok != tt.wantOK || !maps.Equal(got, tt.want) {
				t.Errorf("Match(%q) = %v, %v; want %v, %v", tt.path, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestTemplateExpand(t *testing.T) {
	tests := []struct {
		name    string
		tmpl    string
		values  map[string]string
		want    string
		wantErr string
	}{
		{name: "root", tmpl: "/", want: "/"},
		{name: "literal", tmpl: "/api/search", want: "/api/search"},
		{name: "simple", tmpl: "/api/rooms/{id}", values: map[string]string{"id": "42", "extra": "x"}, want: "/api/rooms/42"},
		{name: "slash escaped", tmpl: "/api/rooms/{id}", values: map[string]string{"id": "../admin"}, want: "/api/rooms/..%2Fadmin"},
		{name: "query and fragment escaped", tmpl: "/a/{id}", values: map[string]string{"id": "x?y=1#z"}, want: "/a/x%3Fy=1%23z"},
		{name: "crlf escaped", tmpl: "/a/{id}", values: map[string]string{"id": "x\r\nHost: evil"}, want: "/a/x%0D%0AHost:%20evil"},
		{name: "percent escaped", tmpl: "/a/{id}", values: map[string]string{"id": "%2F"}, want: "/a/%252F"},
		{name: "trailing slash", tmpl: "/a/{id}/", values: map[string]string{"id": "1"}, want: "/a/1/"},
		{name: "missing", tmpl: "/a/{id}", wantErr: "no value for parameter {id}"},
		{name: "empty", tmpl: "/a/{id}", values: map[string]string{"id": ""}, wantErr: "empty value"},
		{name: "dot", tmpl: "/a/{id}", values: map[string]string{"id": "."}, wantErr: "dot segment"},
		{name: "dot-dot", tmpl: "/a/{id}", values: map[string]string{"id": ".."}, wantErr: "dot segment"},
		{name: "two parameters", tmpl: "/a/{x}/b/{y}", values: map[string]string{"y": "2", "x": "1"}, want: "/a/1/b/2"},
		{name: "second missing", tmpl: "/a/{x}/b/{y}", values: map[string]string{"x": "1"}, wantErr: "no value for parameter {y}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := ParseRawTemplate(tt.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tp.Expand(tt.values)
			// ExpandParams with the same values in Params order agrees
			// with Expand, errors included.
			var ordered []string
			for _, name := range tp.Params() {
				if v, ok := tt.values[name]; ok {
					ordered = append(ordered, v)
				}
			}
			if got2, err2 := tp.ExpandParams(ordered); got2 != got || (err2 == nil) != (err == nil) || (err != nil && err2.Error() != err.Error()) {
				t.Errorf("ExpandParams(%q) = %q, %v; Expand gave %q, %v", ordered, got2, err2, got, err)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Expand err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Expand = %q, %v; want %q", got, err, tt.want)
			}
			// Round trip: the expanded path matches and yields the values.
			back, ok := tp.Match(got)
			if !ok {
				t.Fatalf("Match(%q) failed", got)
			}
			for _, name := range tp.Params() {
				if back[name] != tt.values[name] {
					t.Errorf("round trip %s = %q, want %q", name, back[name], tt.values[name])
				}
			}
		})
	}
}

func mustTemplate(t *testing.T, s string) *PathTemplate {
	t.Helper()
	tp, err := (&MethodPolicy{}).ParsePathTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func TestRouteTableAdd(t *testing.T) {
	tests := []struct {
		name    string
		first   [2]string
		second  [2]string
		wantErr string
	}{
		{name: "duplicate literal", first: [2]string{"RESERVE", "/rooms"}, second: [2]string{"RESERVE", "/rooms"}, wantErr: "already registered"},
		{name: "duplicate up to param names", first: [2]string{"RESERVE", "/rooms/{id}"}, second: [2]string{"RESERVE", "/rooms/{room}"}, wantErr: "already registered"},
		{name: "duplicate up to encoding", first: [2]string{"RESERVE", "/rooms"}, second: [2]string{"RESERVE", "/r%6Foms"}, wantErr: "already registered"},
		{name: "ambiguous equal params", first: [2]string{"RESERVE", "/{a}/x"}, second: [2]string{"RESERVE", "/y/{b}"}, wantErr: "ambiguous"},
		{name: "different method fine", first: [2]string{"RESERVE", "/rooms"}, second: [2]string{"CANCEL", "/rooms"}},
		{name: "different param count fine", first: [2]string{"RESERVE", "/rooms/{id}"}, second: [2]string{"RESERVE", "/{a}/{b}"}},
		{name: "disjoint literals fine", first: [2]string{"RESERVE", "/{a}/x"}, second: [2]string{"RESERVE", "/{b}/y"}},
		{name: "different segment count fine", first: [2]string{"RESERVE", "/{a}"}, second: [2]string{"RESERVE", "/{a}/{b}/{c}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rt RouteTable[int]
			if err := rt.Add(tt.first[0], mustTemplate(t, tt.first[1]), 1); err != nil {
				t.Fatal(err)
			}
			err := rt.Add(tt.second[0], mustTemplate(t, tt.second[1]), 2)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Add = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Add = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
	var rt RouteTable[int]
	if err := rt.Add("RESERVE", nil, 1); err == nil {
		t.Error("Add(nil template) succeeded")
	}
	if err := rt.Add("reserve", mustTemplate(t, "/x"), 1); err == nil {
		t.Error("Add(lowercase method) succeeded")
	}
}

func TestRouteTableLookup(t *testing.T) {
	var rt RouteTable[string]
	for _, r := range [][2]string{
		{"RESERVE", "/rooms/{id}/{slot}"},
		{"RESERVE", "/rooms/{id}"},
		{"RESERVE", "/rooms/vip"},
		{"RESERVE", "/rooms/vip/{slot}"},
		{"RESERVE", "/"},
		{"CANCEL", "/rooms/{id}"},
		{"CANCEL", "/rooms/vip"},
		{"AUDIT", "/ledger"},
	} {
		if err := rt.Add(r[0], mustTemplate(t, r[1]), r[0]+" "+r[1]); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name       string
		method     string
		path       string
		want       string
		wantParams map[string]string
		wantOK     bool
	}{
		{name: "exact literal wins", method: "RESERVE", path: "/rooms/vip", want: "RESERVE /rooms/vip", wantParams: map[string]string{}, wantOK: true},
		{name: "template", method: "RESERVE", path: "/rooms/7", want: "RESERVE /rooms/{id}", wantParams: map[string]string{"id": "7"}, wantOK: true},
		{name: "fewest params wins", method: "RESERVE", path: "/rooms/vip/am", want: "RESERVE /rooms/vip/{slot}", wantParams: map[string]string{"slot": "am"}, wantOK: true},
		{name: "more params when needed", method: "RESERVE", path: "/rooms/7/am", want: "RESERVE /rooms/{id}/{slot}", wantParams: map[string]string{"id": "7", "slot": "am"}, wantOK: true},
		{name: "root", method: "RESERVE", path: "/", want: "RESERVE /", wantParams: map[string]string{}, wantOK: true},
		{name: "other method", method: "CANCEL", path: "/rooms/7", want: "CANCEL /rooms/{id}", wantParams: map[string]string{"id": "7"}, wantOK: true},
		{name: "unknown method", method: "BOOK", path: "/rooms/7"},
		{name: "unknown path", method: "RESERVE", path: "/nope/a/b/c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := rt.Lookup(tt.method, tt.path)
			if ok != tt.wantOK {
				t.Fatalf("Lookup ok = %v, want %v", ok, tt.wantOK)
			}
			if !ok {
				return
			}
			if m.Value != tt.want || !maps.Equal(m.Params, tt.wantParams) || m.Template == nil || m.Value != tt.method+" "+m.Template.String() {
				t.Errorf("Lookup = %+v, want %q %v", m, tt.want, tt.wantParams)
			}
		})
	}
	methodTests := []struct {
		name string
		path string
		want []string
	}{
		{name: "two methods", path: "/rooms/vip", want: []string{"CANCEL", "RESERVE"}},
		{name: "one method", path: "/ledger", want: []string{"AUDIT"}},
		{name: "none", path: "/nowhere", want: []string{}},
	}
	for _, tt := range methodTests {
		t.Run("MethodsForPath "+tt.name, func(t *testing.T) {
			if got := rt.MethodsForPath(tt.path); !slices.Equal(got, tt.want) || got == nil {
				t.Errorf("MethodsForPath(%s) = %#v, want %v", tt.path, got, tt.want)
			}
		})
	}
	all := rt.All()
	if len(all) != 8 || rt.Len() != 8 {
		t.Fatalf("All() has %d routes, Len() = %d", len(all), rt.Len())
	}
	var keys []string
	for _, m := range all {
		if m.Params != nil {
			t.Error("All() route has Params")
		}
		keys = append(keys, m.Value)
	}
	if !slices.IsSorted(keys) {
		t.Errorf("All() not in (method, template) order: %v", keys)
	}
}

func TestNormalizePath(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "no escapes", in: "/room", want: "/room"},
		{name: "unreserved decoded", in: "/%72oom", want: "/room"},
		{name: "hyphen decoded", in: "/guests/g%2D1", want: "/guests/g-1"},
		{name: "reserved kept, hex upper-cased", in: "/a%2fb", want: "/a%2Fb"},
		{name: "valid UTF-8 kept escaped", in: "/caf%c3%a9", want: "/caf%C3%A9"},
		{name: "invalid UTF-8", in: "/guests/%c0%ae", wantErr: true},
		{name: "truncated escape", in: "/a%2", wantErr: true},
		{name: "non-hex escape", in: "/a%zz", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizePath(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("NormalizePath(%q) err = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("NormalizePath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestCheckPathCharacters: the raw request path's characters, as sent,
// against RCNS §6; url.URL would have re-escaped the bad ones.
func TestCheckPathCharacters(t *testing.T) {
	for _, ok := range []string{"/", "/items/1", "/a/b%20c/d", "/x:y@z/!$&'()*+,;=-._~", "/room/", "//", "/%7B"} {
		if ref := CheckPathCharacters(ok); ref != nil {
			t.Errorf("CheckPathCharacters(%q) = %s, want nil", ok, ref.Explanation)
		}
	}
	for _, tt := range []struct{ path, seg string }{
		{"/guests/{guest_id}", "{guest_id}"},
		{"/a|b", "a|b"},
		{"/a^b/c", "a^b"},
		{"/x/a`b", "a`b"},
		{"/a<b", "a<b"},
		{"/a\"b", "a\"b"},
		{"/a\\b", "a\\b"},
		{"/a b", "a b"},
		{"/caf\u00e9", "caf\u00e9"},
		{"/a%zz", "a%zz"},
		{"/a%4", "a%4"},
	} {
		ref := CheckPathCharacters(tt.path)
		if ref == nil {
			t.Errorf("CheckPathCharacters(%q) = nil, want a refusal", tt.path)
			continue
		}
		if ref.Status != StatusEndpointViolation || ref.Reason != "path-grammar-violation" || ref.Fields["segment"] != tt.seg {
			t.Errorf("CheckPathCharacters(%q) = %d %s segment %v, want 460 path-grammar-violation segment %q", tt.path, ref.Status, ref.Reason, ref.Fields["segment"], tt.seg)
		}
	}
}
