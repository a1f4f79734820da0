package openapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// endpoint returns the generated document file of r as plain values,
// read back with the endpoint loader's parser.
func endpoint(t *testing.T, r *Result, file string) (*Endpoint, map[string]any) {
	t.Helper()
	for _, e := range r.Endpoints {
		if e.File == file {
			d, err := schema.Parse(file, e.Data, schema.KindEndpoint)
			if err != nil {
				t.Fatal(err)
			}
			return e, d.Value.(map[string]any)
		}
	}
	t.Fatalf("no endpoint %s", file)
	return nil, nil
}

// at returns the value at a slash-separated path of keys and indexes.
func at(v any, path string) any {
	for _, k := range strings.Split(path, "/") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i := 0
			for _, c := range k {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func featureCorpus(t *testing.T) *Result {
	for _, c := range corpora(t) {
		if c.name == "features-3.0.yaml" {
			return importCorpus(t, c)
		}
	}
	t.Fatal("no features corpus")
	return nil
}

// TestTranslation checks the OpenAPI 3.0 translations on
// testdata/features-3.0.yaml, value by value.
func TestTranslation(t *testing.T) {
	r := featureCorpus(t)
	_, get := endpoint(t, r, "getAnimal.yaml")
	_, put := endpoint(t, r, "replaceAnimal.yaml")
	_, del := endpoint(t, r, "removeAnimal.yaml")
	_, create := endpoint(t, r, "createAnimals.yaml")
	_, search := endpoint(t, r, "searchAnimals.yaml")
	_, tree := endpoint(t, r, "updateKeeperTree.yaml")
	_, rota := endpoint(t, r, "getRota.yaml")
	animal := at(get, "output_schema")
	tests := []struct {
		name string
		got  any
		want string // JSON
	}{
		{"path parameter name reduced to A-Z a-z 0-9 _", at(get, "path"), `"/animals/{animal_id}"`},
		{"upstream path keeps its segments", at(get, "external_service/path"), `"/animals/{animal_id}"`},
		{"integer path parameter is a string of digits", at(get, "input_schema/properties/animal_id"),
			`{"description":"The animal's number.","minLength":1,"pattern":"^-?[0-9]+$","type":"string"}`},
		{"input closed", at(get, "input_schema/additionalProperties"), `false`},
		{"nullable with a type", at(animal, "properties/color"), `{"enum":["black","white",null],"type":["string","null"]}`},
		{"nullable without a type", at(animal, "properties/born"), `{"anyOf":[{"allOf":[{"format":"date","type":"string"}]},{"type":"null"}]}`},
		{"exclusiveMinimum: true with minimum", at(animal, "properties/weight"), `{"exclusiveMinimum":0,"maximum":500,"type":"number"}`},
		{"example becomes examples", at(animal, "properties/name/examples"), `["Tom"]`},
		{"x- extension dropped", at(animal, "oneOf/1/allOf/0/properties/good"), `{"type":"boolean"}`},
		{"discriminator mapping selects a branch", at(animal, "oneOf/0"),
			`{"allOf":[{"properties":{"indoor":{"type":"boolean"},"kind":{"type":"string"}},"type":"object"}],"properties":{"kind":{"enum":["cat","kitten"]}},"required":["kind"]}`},
		{"discriminator without mapping uses the schema name", at(animal, "oneOf/1/properties/kind"), `{"const":"Dog"}`},
		{"writeOnly stays out of the output's required", at(animal, "required"), `["id","name","kind"]`},
		{"readOnly leaves the input", at(put, "input_schema/properties/body/properties/id"), `null`},
		{"readOnly leaves the input's required", at(put, "input_schema/properties/body/required"), `["name","kind"]`},
		{"a oneOf body is one input property", at(put, "external_service/body"), `".body"`},
		{"200 and 204 are anyOf with null", at(put, "output_schema/anyOf/1"), `{"type":"null"}`},
		{"204 is null", at(del, "output_schema"), `{"type":"null"}`},
		{"deprecated operation", at(del, "deprecated"), `{"deprecated_in":"2.1"}`},
		{"trailing slash leaves the AGTP path", at(create, "path"), `"/animals"`},
		{"trailing slash stays upstream", at(create, "external_service/path"), `"/animals/"`},
		{"an array body is one input property", at(create, "input_schema/required"), `["body"]`},
		{"query parameter mapped", at(create, "external_service/query"), `{"dry_run":".dry_run"}`},
		{"scopes from the security requirement (a:b tokens only)", at(create, "required_scopes"), `["zoo:write"]`},
		{"scopes extension", at(put, "required_scopes"), `["zoo:write"]`},
		{"renamed segment", at(search, "path"), `"/animals/searches"`},
		{"non-RE2 pattern dropped", at(search, "input_schema/properties/name"), `{"type":"string"}`},
		{"pipeDelimited array joined by |", at(search, "external_service/query/tags"), `".tags | if . == null then null else map(tostring) | join(\"|\") end"`},
		{"object query parameter left out", at(search, "input_schema/properties/filter"), `null`},
		{"deprecated query parameter", at(search, "input_schema/properties/dry_run"), `{"deprecated":true,"type":"boolean"}`},
		{"2XX is the success response", at(search, "output_schema/properties/next"), `{"type":["string","null"]}`},
		{"recursive schema through $defs", at(tree, "output_schema"),
			`{"$defs":{"Node":{"properties":{"children":{"items":{"$ref":"#/$defs/Node"},"type":"array"},"level":{"type":"integer"},"name":{"type":"string"}},"type":"object"}},"$ref":"#/$defs/Node"}`},
		{"a body property named like a path parameter keeps the body whole", at(tree, "external_service/body"), `".body"`},
		{"fixed-value header parameter, credentials, and --header", at(get, "external_service/headers"), `{"X-Api-Key":"${ZOO_API_KEY}","X-Shift":"day","X-Tenant":"zoo-1"}`},
		{"basic credentials from the environment", at(del, "external_service/headers/Authorization"), `"Basic ${ZOO_BASIC_AUTH}"`},
		{"oauth2 credentials from the environment", at(search, "external_service/headers/Authorization"), `"Bearer ${ZOO_OAUTH}"`},
		{"a required header met by --header", at(rota, "external_service/headers/X-Shift"), `"day"`},
		{"error map from the 4xx responses, 401 left to upstream_authentication_failed", at(get, "external_service/error_map"), `{"404":"not_found","409":"conflict"}`},
		{"errors list the mapped names", at(get, "errors"),
			`["upstream_timeout","upstream_connection_error","upstream_malformed_response","upstream_authentication_failed","upstream_error","not_found","conflict"]`},
		{"semantic of a safe method", at(get, "semantic"),
			`{"actor":"agent","capability":"retrieval","confidence":0.5,"impact":"informational","intent":"Fetch one animal.","is_idempotent":true,"outcome":"The upstream's answer is returned; nothing is changed."}`},
		{"POST is not idempotent", at(create, "semantic/is_idempotent"), `false`},
	}
	for _, tt := range tests {
		if got := jsonOf(tt.got); got != tt.want {
			t.Errorf("%s:\n got  %s\n want %s", tt.name, got, tt.want)
		}
	}
	if r.Env == nil || strings.Join(r.Env, " ") != "ZOO_API_KEY ZOO_BASIC_AUTH ZOO_OAUTH" {
		t.Errorf("Env %v", r.Env)
	}
}

// TestNotes: what the translation cannot carry is a note in the
// document, with its pointer, never dropped silently.
func TestNotes(t *testing.T) {
	r := featureCorpus(t)
	tests := []struct{ file, note string }{
		{"getAnimal.yaml", `/paths/~1animals~1{animal-id}/parameters/0/schema: path parameter "animal-id": minimum not checked`},
		{"getAnimal.yaml", `/paths/~1animals~1{animal-id}/get/parameters/1: optional header parameter "X-Trace-Hint" is not sent`},
		{"getAnimal.yaml", `/paths/~1animals~1{animal-id}/get/parameters/2: optional cookie parameter "session" is not sent`},
		{"searchAnimals.yaml", `/paths/~1animals~1search/get/parameters/0/schema/pattern: pattern "^(?!admin).*$" is not an RE2 regular expression`},
		{"searchAnimals.yaml", `/paths/~1animals~1search/get/parameters/2: optional query parameter "filter" is an object, which a query mapping cannot send`},
		{"searchAnimals.yaml", "AGTP path /animals/searches renames the upstream path /animals/search: search → searches"},
		{"updateKeeperTree.yaml", "/components/schemas/Node/discriminator: discriminator without oneOf or anyOf"},
		{"updateKeeperTree.yaml", "/components/schemas/Node/properties/level/exclusiveMaximum: exclusiveMaximum: true without maximum has no effect"},
		{"replaceAnimal.yaml", "/components/schemas/Animal/properties/id: readOnly: left out of the input"},
		{"createAnimals.yaml", `/paths/~1animals~1/post/security/0/oauth: OAuth scope "admin" is not a scope token`},
		{"removeAnimal.yaml", "/components/securitySchemes/basicAuth: HTTP Basic: ZOO_BASIC_AUTH must hold base64(user:password)"},
	}
	for _, tt := range tests {
		e, _ := endpoint(t, r, tt.file)
		if !slices.ContainsFunc(e.Notes, func(n string) bool { return strings.Contains(n, tt.note) }) {
			t.Errorf("%s: no note %q in %q", tt.file, tt.note, e.Notes)
		}
		if !strings.Contains(string(e.Data), "# - "+e.Notes[0]) {
			t.Errorf("%s: the notes are not at the top of the document", tt.file)
		}
	}
	skipped := map[string]string{}
	for _, s := range r.Skipped {
		skipped[s.OperationID] = s.Pointer + ": " + s.Reason
	}
	for id, want := range map[string]string{
		"headAnimal":        "/paths/~1animals~1{animal-id}/head: HEAD operations are imported only when --method-map HEAD=METHOD",
		"uploadKeeperPhoto": "/paths/~1keepers~1{id}~1photo/put/requestBody/content: the request body is multipart/form-data",
		"getKeeperBadge":    "/paths/~1keepers~1{id}~1badge.png/get/responses: the success response (200 image/png) is not JSON",
		"getKeeperJSON":     `/paths/~1keepers~1{id}.json: segment "{id}.json" holds a parameter inside other text`,
	} {
		if !strings.HasPrefix(skipped[id], want) {
			t.Errorf("skipped %s: %q, want %q", id, skipped[id], want)
		}
	}
}

// TestRequiredHeaderSkips: without --header the operation whose
// required header has no fixed value is skipped, with the flag to give.
func TestRequiredHeaderSkips(t *testing.T) {
	data, err := ReadSpec("testdata/features-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Import(data, Options{Upstream: "zoo", AcceptRenames: true, OperationIDs: []string{"getRota"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Endpoints) != 0 || len(r.Skipped) != 1 || r.NotSelected != 10 ||
		r.Skipped[0].Reason != `required header parameter "X-Shift": an endpoint sends only configured headers; give it a value with --header 'X-Shift: VALUE'` {
		t.Fatalf("endpoints %d, skipped %+v, not selected %d", len(r.Endpoints), r.Skipped, r.NotSelected)
	}
}

// TestSelection: tags, operationIds and path globs select operations;
// kinds must all hold, values of one kind any.
func TestSelection(t *testing.T) {
	data, err := ReadSpec("testdata/petstore-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{"tag", Options{Tags: []string{"store"}}, []string{"getInventory", "placeOrder", "getOrderById", "deleteOrder"}},
		{"two tags", Options{Tags: []string{"store", "user"}}, []string{"getInventory", "placeOrder", "getOrderById", "deleteOrder",
			"createUser", "createUsersWithListInput", "loginUser", "logoutUser", "getUserByName", "updateUser", "deleteUser"}},
		{"operationId", Options{OperationIDs: []string{"getPetById", "loginUser"}}, []string{"getPetById", "loginUser"}},
		{"glob within a segment", Options{Paths: []string{"/pet/*"}}, []string{"findPetsByStatus", "findPetsByTags", "getPetById", "updatePetWithForm", "deletePet"}},
		{"tag and glob", Options{Tags: []string{"user"}, Paths: []string{"/user/log*"}}, []string{"loginUser", "logoutUser"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Upstream, tt.opts.AcceptRenames = "petstore", true
			r, err := Import(data, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range r.Endpoints {
				got = append(got, e.OperationID)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") || r.NotSelected != 19-len(tt.want) {
				t.Errorf("selected %v (%d not selected), want %v", got, r.NotSelected, tt.want)
			}
		})
	}
}

// TestMethodMapping: the default map, --method-map, --query-for-search
// and a map entry, in that order of precedence.
func TestMethodMapping(t *testing.T) {
	data, err := ReadSpec("testdata/hotel-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	methods := func(opts Options) map[string]string {
		opts.Upstream = "hotel"
		r, err := Import(data, opts)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, e := range r.Endpoints {
			m[e.OperationID] = e.Method
		}
		return m
	}
	def := methods(Options{})
	if def["listGuests"] != "FETCH" || def["createGuest"] != "CREATE" || def["updateGuest"] != "MODIFY" || def["deleteGuest"] != "REMOVE" {
		t.Errorf("defaults: %v", def)
	}
	q := methods(Options{QueryForSearch: true, MethodMap: map[string]string{"POST": "SUBMIT", "GET": "RETRIEVE"},
		Overrides: map[string]Override{"createReservation": {Method: "RESERVE"}}})
	if q["listGuests"] != "QUERY" || q["getGuest"] != "RETRIEVE" || q["createGuest"] != "SUBMIT" || q["createReservation"] != "RESERVE" {
		t.Errorf("mapped: %v", q)
	}
}

// TestMutualRecursion: schemas that recur through each other's
// properties become $defs; the import ends and the result compiles.
func TestMutualRecursion(t *testing.T) {
	spec := doc(`  /a:
    get:
      operationId: getA
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: '#/components/schemas/A'}
`, `  schemas:
    A: {type: object, properties: {b: {$ref: '#/components/schemas/B'}}}
    B: {type: object, properties: {a: {$ref: '#/components/schemas/A'}, n: {type: integer}}}`)
	r, err := Import(spec, Options{Upstream: "up"})
	if err != nil {
		t.Fatal(err)
	}
	_, v := endpoint(t, r, "getA.yaml")
	want := `{"$defs":{"A":{"properties":{"b":{"properties":{"a":{"$ref":"#/$defs/A"},"n":{"type":"integer"}},"type":"object"}},"type":"object"}},"$ref":"#/$defs/A"}`
	if got := jsonOf(at(v, "output_schema")); got != want {
		t.Errorf("output_schema\n got  %s\n want %s", got, want)
	}
}
