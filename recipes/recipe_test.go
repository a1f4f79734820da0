package recipes

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

func TestBuildRecipeRefusals(t *testing.T) {
	up := newUpstream(t, "http://127.0.0.1:1")
	ep := endpointDoc("FETCH", "/alpha", "GET", "/a", "")
	tests := []struct {
		name, recipe, want string
	}{
		{"unknown endpoint", recipeHead + "steps:\n  - {name: a, method: FETCH, path: /nope, input: '{}'}\noutput: '$a'\n", "not a registered Tier B endpoint"},
		{"forward reference", recipeHead + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '$b'}\n  - {name: b, method: FETCH, path: /alpha, input: '{}'}\noutput: '$a'\n", "earlier steps only"},
		{"missing composition_failed", strings.Replace(recipeHead, "errors: [composition_failed]", "errors: [other]", 1) + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{}'}\noutput: '$a'\n", "composition_failed"},
		{"bad jq", recipeHead + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '{'}\noutput: '$a'\n", "jq expression"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := schema.Parse("recipe.yaml", []byte(ep), schema.KindEndpoint)
			if err != nil {
				t.Fatal(err)
			}
			e, err := BuildEndpoint(doc, methodPolicy(), map[string]*Upstream{"up": up})
			if err != nil {
				t.Fatal(err)
			}
			rdoc, err := schema.Parse("recipe.yaml", []byte(tc.recipe), schema.KindRecipe)
			if err == nil {
				_, err = BuildRecipe(rdoc, methodPolicy(), func(m, p string) (*Endpoint, bool) {
					return e, m == e.Method && p == e.Path
				})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestContractHashIsJCSOfEndpointAndLineage(t *testing.T) {
	ep := map[string]any{"path": "/room", "method": "BOOK", "semantic": map[string]any{"confidence": 0.5, "actor": "agent"}}
	got, err := ContractHash(ep, &Lineage{RecipeName: "book-room", RecipeVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	// The RFC 8785 form written out by hand: keys sorted, no whitespace.
	canon := `{"endpoint":{"method":"BOOK","path":"/room","semantic":{"actor":"agent","confidence":0.5}},"recipe_lineage":{"recipe_name":"book-room","recipe_version":"1"}}`
	sum := sha256.Sum256([]byte(canon))
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("ContractHash = %s, want %s", got, want)
	}
	passthrough, _ := ContractHash(ep, nil)
	sum = sha256.Sum256([]byte(`{"endpoint":{"method":"BOOK","path":"/room","semantic":{"actor":"agent","confidence":0.5}},"recipe_lineage":null}`))
	if passthrough != hex.EncodeToString(sum[:]) {
		t.Fatalf("passthrough hash = %s", passthrough)
	}
}

// TestBuildRecipeChecksStepKeys: a step input mapping that builds an
// object with static keys is held to the step endpoint's input_schema
// at load; a key it does not declare, or a required key left out, would
// fail every call with an invalid-input that blames the agent.
func TestBuildRecipeChecksStepKeys(t *testing.T) {
	up := newUpstream(t, "http://127.0.0.1:1")
	eps := []string{
		endpointDoc("FETCH", "/alpha", "GET", "/a/{id}", ""), // requires id
		strings.Replace(endpointDoc("FETCH", "/beta", "GET", "/b", ""), "properties:", "patternProperties: {'^x_': {}}\n  properties:", 1),
	}
	tests := []struct {
		name, input, want string // want "": loads
	}{
		{"all keys declared, required given", `{id: $input.id, name: "n"}`, ""},
		{"unknown key", `{id: $input.id, bogus: 1}`, `at /steps/0/input: step "a": input key "bogus" is not a property of the input_schema of FETCH /alpha`},
		{"required key missing", `{name: $input.id}`, `at /steps/0/input: step "a": input has no key "id", which the input_schema of FETCH /alpha requires`},
		{"computed keys are checked at run time", `$input | {bogus: .id}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := recipeHead + "steps:\n  - {name: a, method: FETCH, path: /alpha, input: '" + tc.input + "'}\noutput: '$a'\n"
			err := tryBuildRecipe(t, up, src, eps...)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("BuildRecipe: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "recipe.yaml:") {
				t.Fatalf("err = %v, want it to name recipe.yaml and mention %q", err, tc.want)
			}
		})
	}
	// patternProperties admit keys the check cannot decide: not refused.
	src := recipeHead + "steps:\n  - {name: b, method: FETCH, path: /beta, input: '{x_any: 1}'}\noutput: '$b'\n"
	if err := tryBuildRecipe(t, up, src, eps...); err != nil {
		t.Fatalf("patternProperties endpoint: %v", err)
	}
}
