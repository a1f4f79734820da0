package mcpdoor

import (
	"testing"

	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// TestStepPlan: the approval question says which steps wait for which
// and that the others start together, never "then" between parallel
// steps (the plan runs a step once the steps it reads have answered).
func TestStepPlan(t *testing.T) {
	ep := func(m, p string) *recipes.Endpoint { return &recipes.Endpoint{Method: m, Path: p} }
	for _, c := range []struct {
		name  string
		steps []*recipes.Step
		want  string
	}{
		{"one", []*recipes.Step{{Name: "item", Endpoint: ep("GET", "/items/{id}")}}, "GET /items/{id}"},
		{"parallel then a join", []*recipes.Step{
			{Name: "a", Index: 0, Endpoint: ep("GET", "/a")},
			{Name: "b", Index: 1, Endpoint: ep("GET", "/b")},
			{Name: "c", Index: 2, Endpoint: ep("POST", "/c"), Deps: []int{0, 1}},
		}, `GET /a; GET /b; POST /c (after a, b); steps without an "after" start together`},
	} {
		if got := stepPlan(c.steps); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
