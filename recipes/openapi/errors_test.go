package openapi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// doc30 is a small valid OpenAPI 3.0 document; {{PATHS}} and
// {{COMPONENTS}} are replaced by each test.
const doc30 = `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
{{PATHS}}
components:
{{COMPONENTS}}
`

func doc(paths, components string) []byte {
	if components == "" {
		components = "  schemas: {}"
	}
	return []byte(strings.NewReplacer("{{PATHS}}", paths, "{{COMPONENTS}}", components).Replace(doc30))
}

const listPets = `  /pets:
    get:
      operationId: listPets
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: '#/components/schemas/Pets'}
`

// TestBadInput: every refusal names the operation (when there is one)
// and the JSON pointer, and Import returns no Result to write.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name    string
		spec    []byte
		op      string // wanted Operation ("" = none)
		ptr     string // wanted Pointer
		message string // wanted substring of Message
	}{
		{
			name: "external $ref to a file",
			spec: doc(`  /pets:
    get:
      operationId: listPets
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: 'pet.yaml#/Pet'}
`, ""),
			op:      "listPets (GET /pets)",
			ptr:     "/paths/~1pets/get/responses/200/content/application~1json/schema/$ref",
			message: `$ref "pet.yaml#/Pet" refers outside this document`,
		},
		{
			name: "external $ref to a URL, in a component",
			spec: doc(listPets, `  schemas:
    Pets: {type: array, items: {$ref: 'https://schemas.example.test/pet.json'}}`),
			op:      "listPets (GET /pets)",
			ptr:     "/components/schemas/Pets/items/$ref",
			message: "refers outside this document",
		},
		{
			name: "external $ref of a parameter",
			spec: doc(`  /pets:
    get:
      operationId: listPets
      parameters: [{$ref: 'common.yaml#/parameters/Limit'}]
      responses: {"200": {description: ok}}
`, ""),
			op:      "listPets (GET /pets)",
			ptr:     "/paths/~1pets/get/parameters/0/$ref",
			message: "refers outside this document",
		},
		{
			name: "external $ref in a component no operation uses",
			spec: doc(listPets, `  schemas:
    Pets: {type: array, items: {type: string}}
    Unused: {$ref: 'other.yaml#/Thing'}`),
			ptr:     "/components/schemas/Unused/$ref",
			message: `refers outside this document; an import reads one self-contained document (bundle external files into it first, e.g. with ` + "`redocly bundle`" + `) (no operation uses it)`,
		},
		{
			name:    "dangling $ref",
			spec:    doc(listPets, "  schemas: {}"),
			op:      "listPets (GET /pets)",
			ptr:     "/paths/~1pets/get/responses/200/content/application~1json/schema/$ref",
			message: `$ref "#/components/schemas/Pets" points to nothing in the document`,
		},
		{
			name: "schema $ref cycle",
			spec: doc(listPets, `  schemas:
    Pets: {$ref: '#/components/schemas/Animals'}
    Animals: {allOf: [{$ref: '#/components/schemas/Pets'}, {type: array}]}`),
			op:      "listPets (GET /pets)",
			ptr:     "/components/schemas/Animals",
			message: "schema cycle /components/schemas/Animals → /components/schemas/Animals/allOf/0 → /components/schemas/Pets → /components/schemas/Animals",
		},
		{
			name: "$ref chain of parameters that never ends",
			spec: doc(`  /pets:
    get:
      operationId: listPets
      parameters: [{$ref: '#/components/parameters/A'}]
      responses: {"200": {description: ok}}
`, `  parameters:
    A: {$ref: '#/components/parameters/B'}
    B: {$ref: '#/components/parameters/A'}`),
			op:      "listPets (GET /pets)",
			ptr:     "/components/parameters/A/$ref",
			message: "the $ref chain /components/parameters/A → /components/parameters/B → /components/parameters/A never reaches a value",
		},
		{
			name: "duplicate operationIds",
			spec: doc(listPets+`  /animals:
    get:
      operationId: listPets
      responses: {"200": {description: ok}}
`, `  schemas:
    Pets: {type: array}`),
			op:      "listPets (GET /animals)",
			ptr:     "/paths/~1animals/get/operationId",
			message: `operationId "listPets" is also the operationId of GET /pets (at /paths/~1pets/get)`,
		},
		{
			name: "invalid OpenAPI: a path parameter not required",
			spec: doc(`  /pets/{id}:
    get:
      operationId: getPet
      parameters: [{name: id, in: path, schema: {type: string}}]
      responses: {"200": {description: ok}}
`, ""),
			op:      "getPet (GET /pets/{id})",
			ptr:     "/paths/~1pets~1{id}/get",
			message: "invalid OpenAPI",
		},
		{
			name: "invalid OpenAPI: an invalid component",
			spec: doc(listPets, `  schemas:
    Pets: {type: list}`),
			op:      "listPets (GET /pets)",
			ptr:     "/components/schemas/Pets",
			message: "invalid OpenAPI",
		},
		{
			name:    "Swagger 2.0",
			spec:    []byte("swagger: \"2.0\"\ninfo: {title: t, version: \"1\"}\npaths: {}\n"),
			ptr:     "/swagger",
			message: "this is a Swagger 2.0 document; convert it to OpenAPI 3 first",
		},
		{
			name:    "OpenAPI 3.2",
			spec:    []byte("openapi: 3.2.0\ninfo: {title: t, version: \"1\"}\npaths: {}\n"),
			ptr:     "/openapi",
			message: "OpenAPI 3.2.0 is not supported",
		},
		{
			name:    "not YAML",
			spec:    []byte("openapi: 3.0.3\ninfo: {title: t\n"),
			message: "invalid YAML: line 2: did not find expected ',' or '}'",
		},
		{
			name:    "JSON with a duplicate key",
			spec:    []byte(`{"openapi": "3.0.3", "openapi": "3.1.0"}`),
			ptr:     "/openapi",
			message: "invalid JSON at byte 21: duplicate object member name",
		},
		{
			name:    "YAML duplicate key",
			spec:    []byte("openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths: {}\npaths: {}\n"),
			ptr:     "",
			message: `duplicate key "paths"`,
		},
		{
			name:    "YAML merge key",
			spec:    []byte("openapi: 3.0.3\nbase: &b {title: t}\ninfo: {<<: *b, version: \"1\"}\npaths: {}\n"),
			ptr:     "/info",
			message: "YAML merge keys (<<) are not supported",
		},
		{
			name:    "invalid OpenAPI: no info",
			spec:    []byte("openapi: 3.0.3\npaths: {}\n"),
			ptr:     "/info",
			message: "invalid OpenAPI: invalid info: must be an object",
		},
		{
			name:    "a top level that is not a mapping",
			spec:    []byte("- openapi\n"),
			message: "the top level must be a mapping",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Import(tt.spec, Options{Source: "spec.yaml", Upstream: "up"})
			if err == nil {
				t.Fatalf("imported %d endpoints, want an error", len(r.Endpoints))
			}
			if r != nil {
				t.Errorf("a Result came with the error: %d endpoints", len(r.Endpoints))
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T %v, want Errors", err, err)
			}
			e := es[0]
			if e.File != "spec.yaml" || e.Operation != tt.op || e.Pointer != tt.ptr || !strings.Contains(e.Message, tt.message) {
				t.Errorf("got file %q operation %q pointer %q message %q\nwant operation %q pointer %q message containing %q",
					e.File, e.Operation, e.Pointer, e.Message, tt.op, tt.ptr, tt.message)
			}
		})
	}
}

// TestDocumentSizeLimit: a document of MaxDocumentBytes is read, one
// byte more is refused by Import and by ReadSpec, without parsing it.
func TestDocumentSizeLimit(t *testing.T) {
	small := []byte(`{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {}}`)
	exact := append(append([]byte{}, small...), []byte(strings.Repeat(" ", MaxDocumentBytes-len(small)))...)
	if len(exact) != 50<<20 {
		t.Fatalf("limit is %d bytes, documented as 50 MiB", len(exact))
	}
	r, err := Import(exact, Options{Source: "exact.json", Upstream: "up"})
	if err != nil || len(r.Endpoints) != 0 || r.Version != "3.0.3" {
		t.Fatalf("a document of exactly %d bytes: %v", MaxDocumentBytes, err)
	}
	over := append(exact, ' ')
	_, err = Import(over, Options{Source: "over.json", Upstream: "up"})
	if err == nil || !strings.Contains(err.Error(), "over.json: the document is larger than 52428800 bytes (50 MiB)") {
		t.Fatalf("Import of %d bytes: %v", len(over), err)
	}
	path := filepath.Join(t.TempDir(), "over.json")
	if err := os.WriteFile(path, over, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSpec(path); err == nil || !strings.Contains(err.Error(), "larger than 52428800 bytes") {
		t.Fatalf("ReadSpec of %d bytes: %v", len(over), err)
	}
}

// TestAliasExpansionBounded: a small YAML document whose aliases expand
// to billions of values is refused at MaxDocumentValues, quickly.
func TestAliasExpansionBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		prev := "*a" + itoa(i-1)
		b.WriteString("a" + itoa(i) + ": &a" + itoa(i) + " [" + strings.Repeat(prev+", ", 9) + prev + "]\n")
	}
	start := time.Now()
	_, err := Import([]byte(b.String()), Options{Source: "bomb.yaml", Upstream: "up"})
	if err == nil || !strings.Contains(err.Error(), "more than 4000000 values") {
		t.Fatalf("alias bomb: %v", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("refusing the alias bomb took %v", d) // a bound against hanging, not a timing assertion
	}
}

// TestBadOptions: options are checked before the document is read.
func TestBadOptions(t *testing.T) {
	spec := doc(listPets, `  schemas:
    Pets: {type: array}`)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no upstream", Options{}, "no upstream: give the name of the Caddyfile upstream"},
		{"upstream with a space", Options{Upstream: "pet store"}, `upstream "pet store": the name must match`},
		{"legacy verb", Options{Upstream: "up", MethodMap: map[string]string{"GET": "POST"}}, "method map GET=POST: a legacy verb cannot be an endpoint's method"},
		{"not a catalog method", Options{Upstream: "up", MethodMap: map[string]string{"GET": "FROBNICATE"}}, "method map GET=FROBNICATE: not a method of the catalog 1.0.0"},
		{"TRACE mapped", Options{Upstream: "up", MethodMap: map[string]string{"TRACE": "FETCH"}}, "method map TRACE=FETCH: TRACE is not an HTTP method an endpoint can call"},
		{"bad scope", Options{Upstream: "up", Scopes: []string{"read"}}, `scope "read"`},
		{"managed header", Options{Upstream: "up", Headers: map[string]string{"Content-Type": "text/plain"}}, "header Content-Type is set by the gateway"},
		{"timeout out of range", Options{Upstream: "up", TimeoutSeconds: 7200}, "timeout 7200 s is outside 0.001 to 3600 s"},
		{"bad glob", Options{Upstream: "up", Paths: []string{"/pets/["}}, `path glob "/pets/["`},
		{"map entry for no operation", Options{Upstream: "up", Overrides: map[string]Override{"listPet": {Path: "/p"}}}, `map entry "listPet" names no operation of the document`},
		{"map entry with a legacy verb", Options{Upstream: "up", Overrides: map[string]Override{"listPets": {Method: "GET"}}}, `map entry "listPets": method GET: a legacy verb`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Import(spec, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// TestRenameRefused: a path segment equal to a method name is refused
// with the proposal, until the rename is accepted by flag or map entry.
func TestRenameRefused(t *testing.T) {
	spec := doc(`  /store/order:
    post:
      operationId: placeOrder
      responses: {"200": {description: ok}}
`, "")
	r, err := Import(spec, Options{Source: "spec.yaml", Upstream: "up"})
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("got %v, want one refusal", err)
	}
	if e := es[0]; e.Operation != "placeOrder (POST /store/order)" || e.Pointer != "/paths/~1store~1order" ||
		!strings.Contains(e.Message, "order → orders; proposed AGTP path /store/orders: accept it with --accept-renames") {
		t.Errorf("refusal %+v", e)
	}
	if r == nil || len(r.Endpoints) != 1 || !r.Endpoints[0].Proposed || r.Endpoints[0].Accepted || r.Endpoints[0].Path != "/store/orders" {
		t.Fatalf("the Result of a dry run should show the proposal: %+v", r)
	}
	for _, opts := range []Options{
		{Upstream: "up", AcceptRenames: true},
		{Upstream: "up", Overrides: map[string]Override{"placeOrder": {Path: "/store/purchase-orders", Method: "PURCHASE"}}},
	} {
		r, err := Import(spec, opts)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		e := r.Endpoints[0]
		if !e.Accepted || (opts.AcceptRenames && (e.Path != "/store/orders" || e.Method != "CREATE")) ||
			(!opts.AcceptRenames && (e.Path != "/store/purchase-orders" || e.Method != "PURCHASE")) {
			t.Errorf("%+v: endpoint %s %s accepted %v", opts, e.Method, e.Path, e.Accepted)
		}
	}
	_, err = Import(spec, Options{Upstream: "up", Overrides: map[string]Override{"placeOrder": {Path: "/store/order"}}})
	if err == nil || !strings.Contains(err.Error(), `map entry path /store/order: path template "/store/order"`) {
		t.Fatalf("a map entry with a reserved segment: %v", err)
	}
}

// TestRouteCollision: two operations on one AGTP route are refused.
func TestRouteCollision(t *testing.T) {
	spec := doc(`  /pets/{id}:
    get:
      operationId: getPet
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
  /pets/mine:
    get:
      operationId: getMine
      responses: {"200": {description: ok}}
  /animals/{id}:
    get:
      operationId: getAnimal
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
`, "")
	_, err := Import(spec, Options{Upstream: "up", Overrides: map[string]Override{"getAnimal": {Path: "/pets/{id}"}}})
	if err == nil || !strings.Contains(err.Error(), "operation getAnimal (GET /animals/{id}): at /paths/~1animals~1{id}/get: AGTP FETCH /pets/{id}: route FETCH /pets/{id}: already registered") {
		t.Fatalf("got %v", err)
	}
}
