package policy_test

import (
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/policy"
)

// TestRefusalsNameTheCatalogPage is ../shared/cases/07 item 1: the 459
// for a method outside the catalog (direct or through an alias) and the
// 460 for a path segment equal to a method name name their rule and the
// docs page listing the catalog, within agtp.MaxExplanationBytes, as a
// path template refused at load does.
func TestRefusalsNameTheCatalogPage(t *testing.T) {
	p := &policy.MethodPolicy{Aliases: map[string]string{"GRAB": "NOSUCHMETHODATALLXXXXXXXXXXXXXXX"}}
	long := strings.Repeat("X", 32)
	check := func(what, expl, rule string) {
		t.Helper()
		if !strings.Contains(expl, policy.MethodsDoc) || !strings.Contains(expl, rule) {
			t.Errorf("%s: explanation %q does not name %q and %q", what, expl, rule, policy.MethodsDoc)
		}
		if len(expl) > agtp.MaxExplanationBytes {
			t.Errorf("%s: explanation is %d bytes, above %d", what, len(expl), agtp.MaxExplanationBytes)
		}
	}
	for _, m := range []string{"LENDX", long, "GRAB"} {
		_, ref := p.ResolveMethod(m)
		if ref == nil || ref.Status != 459 || ref.Reason != "method-not-in-catalog" {
			t.Fatalf("ResolveMethod(%s) = %+v, want 459 method-not-in-catalog", m, ref)
		}
		check(m, ref.Explanation, "api-01 §3")
	}
	// A legacy verb not enabled names its AGTP method (GET → FETCH).
	for verb, want := range map[string]string{"GET": "use FETCH", "DELETE": "use REMOVE"} {
		_, ref := p.ResolveMethod(verb)
		if ref == nil || ref.Reason != "legacy-method-not-enabled" {
			t.Fatalf("ResolveMethod(%s) = %+v, want 459 legacy-method-not-enabled", verb, ref)
		}
		check(verb, ref.Explanation, want)
	}
	for _, path := range []string{"/echo", "/members/E-cho", "/lend"} {
		ref := p.CheckPath(path)
		if ref == nil || ref.Status != 460 || ref.Reason != "path-grammar-violation" {
			t.Fatalf("CheckPath(%s) = %+v, want 460 path-grammar-violation", path, ref)
		}
		check(path, ref.Explanation, "api-01 §5")
	}
	if _, err := p.ParsePathTemplate("/loans/{id}/lend"); err == nil || !strings.Contains(err.Error(), policy.MethodsDoc) {
		t.Errorf("ParsePathTemplate(/loans/{id}/lend) = %v, want the docs page named", err)
	}
}
