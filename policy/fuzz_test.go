package policy

import (
	"net/url"
	"strings"
	"testing"
)

func FuzzParseAuthorityScope(f *testing.F) {
	for _, s := range []string{
		"rcns:negotiate", "a:b,c:d", "a:b, c:d", " a:b\t,\tc:d ", "a:*", "*:*", "a:b,a:b",
		"", ",", "A:B", "a::b", "a:b,", "a:b c:d", "a:b:*", "ö:x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		scopes, err := ParseAuthorityScope(header)
		if err != nil {
			if scopes != nil {
				t.Fatalf("error %v with result %v", err, scopes)
			}
			return
		}
		if len(scopes) == 0 {
			t.Fatal("no error and no scopes")
		}
		seen := map[Scope]bool{}
		for _, s := range scopes {
			if seen[s] {
				t.Fatalf("duplicate %q", s)
			}
			seen[s] = true
			again, err := ParseScope(s.String())
			if err != nil || again != s {
				t.Fatalf("token %q does not round-trip: %q %v", s, again, err)
			}
			if !s.Covers(s) {
				t.Fatalf("%q does not cover itself", s)
			}
			if strings.ToLower(s.String()) != s.String() {
				t.Fatalf("token %q not lowercase", s)
			}
		}
		// Both list spellings parse to the same list.
		for _, sep := range []string{",", ", ", " ,\t"} {
			back, err := ParseAuthorityScope(strings.Join(ScopeSet(scopes).Strings(), sep))
			if err != nil || len(back) != len(scopes) {
				t.Fatalf("join with %q: %v %v", sep, back, err)
			}
			for i := range back {
				if back[i] != scopes[i] {
					t.Fatalf("join with %q: %v != %v", sep, back, scopes)
				}
			}
		}
		if ScopeSet(scopes).Missing(scopes) != nil {
			t.Fatal("a set does not cover itself")
		}
	})
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{
		"/", "/rooms", "/rooms/42", "/query", "/Query", "/q-uery", "/q_uery", "/rooms/",
		"//", "/a//b", "rooms", "", "/%51uery", "/a%2", "/caf%C3%A9", "/a/../b", "/%2e",
		"/a:b@c!$&'()*+,;=-._~", "/a?b", "/{id}", "/%C5%BFearch",
	} {
		f.Add(s)
	}
	p := &MethodPolicy{Allow: []string{"FROB"}}
	f.Fuzz(func(t *testing.T, path string) {
		ref := p.CheckPath(path)
		if ref != nil {
			if ref.Status != StatusEndpointViolation || ref.Reason != "path-grammar-violation" || ref.Explanation == "" {
				t.Fatalf("bad refusal %+v", ref)
			}
			seg, ok := ref.Fields["segment"].(string)
			if !ok || ref.Fields["path"] != path {
				t.Fatalf("bad fields %v", ref.Fields)
			}
			if seg != "" && !strings.Contains(path, seg) {
				t.Fatalf("segment %q not in path %q", seg, path)
			}
			return
		}
		if !strings.HasPrefix(path, "/") || (path != "/" && strings.HasSuffix(path, "/")) {
			t.Fatalf("accepted %q", path)
		}
		// A valid path is a valid literal template that matches itself.
		tp, err := p.ParsePathTemplate(path)
		if err != nil {
			t.Fatalf("valid path %q is not a valid template: %v", path, err)
		}
		if tp.String() != path {
			t.Fatalf("String() = %q, want %q", tp.String(), path)
		}
		if params, ok := tp.Match(path); !ok || len(params) != 0 {
			t.Fatalf("template %q does not match itself", path)
		}
		if path == "/" {
			return
		}
		segs := strings.Split(path[1:], "/")
		for _, s := range segs {
			if p.IsReservedSegment(s) {
				t.Fatalf("accepted reserved segment %q", s)
			}
		}
		// Re-escaping every decoded segment yields an equivalent path.
		var b strings.Builder
		for _, s := range segs {
			dec, ok := decodeSegment(s)
			if !ok {
				t.Fatalf("accepted undecodable segment %q", s)
			}
			b.WriteString("/" + url.PathEscape(dec))
		}
		if _, ok := tp.Match(b.String()); !ok {
			t.Fatalf("re-escaped %q does not match %q", b.String(), path)
		}
	})
}

func FuzzResolveMethod(f *testing.F) {
	for _, s := range []string{"QUERY", "FROBNICATE", "GET", "get", "QU", "BOOK2", "FETCH", "GRAB", "", "DELETE", "FROB"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	cat := DefaultCatalog()
	f.Fuzz(func(t *testing.T, wire string, legacy bool) {
		p := &MethodPolicy{Allow: []string{"*"}, Custom: []string{"FROB"}, Aliases: map[string]string{"GRAB": "FETCH", "GET": "FETCH"}}
		if legacy {
			p.Legacy = []string{"*"}
		}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		res, ref := p.ResolveMethod(wire)
		if cat.IsFloor(wire) && (ref != nil || res.Method != wire) {
			t.Fatalf("floor method %q refused: %v", wire, ref)
		}
		if ref != nil {
			if ref.Status != StatusMethodViolation || ref.Fields["method"] != wire || ref.Fields["catalog_version"] != cat.Version() || ref.Explanation == "" {
				t.Fatalf("bad refusal %+v", ref)
			}
			if res != (ResolvedMethod{}) {
				t.Fatalf("refusal with result %+v", res)
			}
			if ValidMethodToken(wire) && !IsLegacyVerb(wire) && p.IsMethod(wire) {
				t.Fatalf("method %q of this server refused", wire)
			}
			return
		}
		if !ValidMethodToken(res.Method) || !ValidMethodToken(wire) {
			t.Fatalf("resolved invalid token: wire %q → %q", wire, res.Method)
		}
		if !p.IsMethod(res.Method) && !p.legacyAdmitted(res.Method) {
			t.Fatalf("resolved %q to unknown %q", wire, res.Method)
		}
		if (res.Requested != "") != (res.Method != wire) || (res.Requested != "" && res.Requested != wire) {
			t.Fatalf("Requested = %q for wire %q → %q", res.Requested, wire, res.Method)
		}
		if (res.Info != nil) != cat.Has(res.Method) {
			t.Fatalf("Info presence wrong for %q", res.Method)
		}
		// Resolution is idempotent: the dispatched method resolves to itself.
		again, ref := p.ResolveMethod(res.Method)
		if ref != nil || again.Method != res.Method || again.Requested != "" {
			t.Fatalf("re-resolving %q: %+v %v", res.Method, again, ref)
		}
	})
}

func FuzzTemplateExpand(f *testing.F) {
	for _, s := range []string{"42", "a/b", "..", ".", "", "x?y#z", "\r\n", "%2F", "é"} {
		f.Add(s)
	}
	tp, err := ParseRawTemplate("/api/rooms/{id}/slots")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		out, err := tp.Expand(map[string]string{"id": v})
		if err != nil {
			if v != "" && v != "." && v != ".." {
				t.Fatalf("Expand(%q): %v", v, err)
			}
			return
		}
		if strings.Count(out, "/") != 4 || strings.ContainsAny(out, "?#\r\n") || !strings.HasPrefix(out, "/api/rooms/") || !strings.HasSuffix(out, "/slots") {
			t.Fatalf("Expand(%q) = %q changes the path structure", v, out)
		}
		back, ok := tp.Match(out)
		if !ok || back["id"] != v {
			t.Fatalf("Match(%q) = %v %v, want id %q", out, back, ok, v)
		}
	})
}

// FuzzNormalizePath: normalizing is idempotent and never panics.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/room", "/%72oom", "/a%2fb", "/%c0%ae", "/a%2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		once, err := NormalizePath(in)
		if err != nil {
			return
		}
		twice, err := NormalizePath(once)
		if err != nil || twice != once {
			t.Fatalf("NormalizePath not idempotent: %q → %q → %q (%v)", in, once, twice, err)
		}
	})
}
