package schema

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// wantErr is one expected *Error (File is the row's file).
type wantErr struct {
	line, col int
	pointer   string
	message   string
}

// checkErrors asserts that err holds exactly the wanted errors, in order.
func checkErrors(t *testing.T, err error, file string, want []wantErr) {
	t.Helper()
	if err == nil {
		t.Fatalf("Parse succeeded, want %d error(s)", len(want))
	}
	var got []*Error
	switch e := err.(type) {
	case *Error:
		got = []*Error{e}
	case Errors:
		got = e
	default:
		t.Fatalf("error is %T (%v), want *Error or Errors", err, err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		g := got[i]
		if g.File != file || g.Line != w.line || g.Column != w.col || g.Pointer != w.pointer || g.Message != w.message {
			t.Errorf("error %d:\n got  %s:%d:%d %q %q\n want %s:%d:%d %q %q",
				i, g.File, g.Line, g.Column, g.Pointer, g.Message, file, w.line, w.col, w.pointer, w.message)
		}
	}
}

func TestLoadFileGood(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		kind  Kind
		check func(t *testing.T, d *Document)
	}{
		{
			name: "agent from the configuration reference",
			file: "testdata/good/agent.yaml",
			kind: KindAgent,
			check: func(t *testing.T, d *Document) {
				var a AgentDoc
				if err := d.Decode(&a); err != nil {
					t.Fatal(err)
				}
				want := AgentDoc{
					AgentID:   "4c7c0f6b1e2d3a4958677685940a1b2c3d4e5f60718293a4b5c6d7e8f9012345",
					Name:      "rcns-demo-agent",
					OwnerID:   "hotel-ops",
					TrustTier: 1,
					Status:    "active",
					Scopes:    []string{"rcns:negotiate", "hotel:read"},
				}
				if !reflect.DeepEqual(a, want) {
					t.Errorf("got %+v, want %+v", a, want)
				}
			},
		},
		{
			name: "minimal agent, timestamp-like name stays a string",
			file: "testdata/good/agent_minimal.yml",
			kind: KindAgent,
			check: func(t *testing.T, d *Document) {
				var a AgentDoc
				if err := d.Decode(&a); err != nil {
					t.Fatal(err)
				}
				if a.Name != "2026-01-01" || a.TrustTier != 3 || a.Status != "" || len(a.Scopes) != 0 {
					t.Errorf("got %+v", a)
				}
			},
		},
		{
			name: "endpoint from the configuration reference",
			file: "testdata/good/endpoint.yaml",
			kind: KindEndpoint,
			check: func(t *testing.T, d *Document) {
				var e EndpointDoc
				if err := d.Decode(&e); err != nil {
					t.Fatal(err)
				}
				if e.Method != "FETCH" || e.Path != "/guests/{guest_id}" || e.Description != "Fetches one guest by id." {
					t.Errorf("method/path/description = %q %q %q", e.Method, e.Path, e.Description)
				}
				wantSem := SemanticDoc{
					Intent: "Fetch one guest record.", Actor: "agent",
					Outcome: "The guest record is returned unchanged.", Capability: "retrieval",
					Confidence: 0.95, Impact: "informational", IsIdempotent: true,
				}
				if e.Semantic != wantSem {
					t.Errorf("semantic = %+v", e.Semantic)
				}
				if e.InputSchema["type"] != "object" || e.InputSchema["additionalProperties"] != false {
					t.Errorf("input_schema = %v", e.InputSchema)
				}
				if e.OutputSchema["additionalProperties"] != true {
					t.Errorf("output_schema = %v", e.OutputSchema)
				}
				if len(e.Errors) != 6 || e.Errors[5] != "guest_not_found" {
					t.Errorf("errors = %v", e.Errors)
				}
				if !reflect.DeepEqual(e.RequiredScopes, []string{"hotel:read"}) || e.Internal {
					t.Errorf("required_scopes/internal = %v %v", e.RequiredScopes, e.Internal)
				}
				wantDep := &DeprecatedDoc{DeprecatedIn: "2", RemovedIn: "3",
					Successor: &SuccessorDoc{Method: "FETCH", Path: "/v2/guests/{guest_id}"}}
				if !reflect.DeepEqual(e.Deprecated, wantDep) {
					t.Errorf("deprecated = %+v", e.Deprecated)
				}
				wantES := &ExternalServiceDoc{
					Upstream: "hotel", Method: "GET", Path: "/guests/{guest_id}",
					Query:           map[string]string{"expand": `"guest"`},
					Body:            "{name: .name}",
					Headers:         map[string]string{"X-Api-Key": "${HOTEL_API_KEY}"},
					InputTransform:  map[string]string{"guest_id": "id"},
					OutputTransform: map[string]string{"id": "guest_id"},
					ErrorMap:        map[string]string{"404": "guest_not_found"},
					TimeoutSeconds:  10,
				}
				if !reflect.DeepEqual(e.ExternalService, wantES) {
					t.Errorf("external_service = %+v", e.ExternalService)
				}
			},
		},
		{
			name: "recipe from the configuration reference",
			file: "testdata/good/recipe.yaml",
			kind: KindRecipe,
			check: func(t *testing.T, d *Document) {
				var r RecipeDoc
				if err := d.Decode(&r); err != nil {
					t.Fatal(err)
				}
				if r.Name != "book-room" || r.Version != "1" || r.Propose == nil || !*r.Propose {
					t.Errorf("name/version/propose = %q %q %v", r.Name, r.Version, r.Propose)
				}
				if r.Pattern != (PatternDoc{Method: "BOOK", PathExact: "/room"}) {
					t.Errorf("pattern = %+v", r.Pattern)
				}
				if !reflect.DeepEqual(r.RequiredScopes, []string{"hotel:book"}) {
					t.Errorf("required_scopes = %v", r.RequiredScopes)
				}
				if r.Endpoint.Semantic.Impact != "reversible" || !reflect.DeepEqual(r.Endpoint.Errors, []string{"composition_failed"}) {
					t.Errorf("endpoint = %+v", r.Endpoint)
				}
				if r.Endpoint.RequiredScopes == nil || len(r.Endpoint.RequiredScopes) != 0 {
					t.Errorf("endpoint.required_scopes = %#v, want empty", r.Endpoint.RequiredScopes)
				}
				if len(r.Steps) != 3 || r.Steps[2] != (StepDoc{Name: "reservation", Method: "RESERVE", Path: "/reservations",
					Input: "{guest_id: $guest.id, property_id: $property.id, check_in: $input.check_in, nights: $input.nights}"}) {
					t.Errorf("steps = %+v", r.Steps)
				}
				if !strings.HasPrefix(r.Output, "{reservation_id: $reservation.id") {
					t.Errorf("output = %q", r.Output)
				}
			},
		},
		{
			name: "JSON recipe with path_regex and tab indentation",
			file: "testdata/good/recipe.json",
			kind: KindRecipe,
			check: func(t *testing.T, d *Document) {
				var r RecipeDoc
				if err := d.Decode(&r); err != nil {
					t.Fatal(err)
				}
				if r.Version != "2026-01-01" || r.Propose != nil || r.Pattern.PathRegex != "/guests/[^/]+" || r.Pattern.PathExact != "" {
					t.Errorf("got %+v", r)
				}
				if r.Endpoint.Semantic.Confidence != 1 || len(r.Steps) != 1 || r.Output != "$guest" {
					t.Errorf("got %+v", r)
				}
				if line, col := d.Line("/steps/0/input"); line != 21 || col != 69 {
					t.Errorf("Line(/steps/0/input) = %d:%d, want 21:69", line, col)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := LoadFile(tt.file, tt.kind)
			if err != nil {
				t.Fatalf("LoadFile: %v", err)
			}
			if d.File != tt.file || d.Kind != tt.kind {
				t.Errorf("File, Kind = %q, %q", d.File, d.Kind)
			}
			// Value is plain JSON: it survives a round trip unchanged.
			b, err := json.Marshal(d.Value)
			if err != nil {
				t.Fatal(err)
			}
			var back any
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, d.Value) {
				t.Errorf("Value does not round-trip through JSON:\n got  %#v\n want %#v", back, d.Value)
			}
			tt.check(t, d)
		})
	}
}

func TestLoadFileBad(t *testing.T) {
	const tagMsg = "only !!str, !!int, !!float, !!bool, !!null, !!map, !!seq"
	tests := []struct {
		name string
		file string
		kind Kind
		want []wantErr
	}{
		{"empty file", "empty.yaml", KindAgent, []wantErr{{0, 0, "", "empty document"}}},
		{"syntax error", "agent_syntax.yaml", KindAgent, []wantErr{{5, 0, "", "invalid YAML: did not find expected ',' or ']'"}}},
		{"second document", "agent_two_documents.yaml", KindAgent, []wantErr{{5, 1, "", "more than one YAML document; a file holds exactly one"}}},
		{"not a mapping", "agent_not_mapping.yaml", KindAgent, []wantErr{{1, 1, "", "document is a sequence, want a mapping"}}},
		{"duplicate key", "agent_duplicate_key.yaml", KindAgent, []wantErr{{5, 1, "/name", "duplicate key 'name' (first at line 2)"}}},
		{"anchor", "agent_anchor.yaml", KindAgent, []wantErr{{2, 7, "/name", "YAML anchors are not allowed (&n)"}}},
		{"alias", "agent_alias.yaml", KindAgent, []wantErr{
			{2, 7, "/name", "YAML anchors are not allowed (&n)"},
			{7, 5, "/scopes/1", "YAML aliases are not allowed (*n)"},
		}},
		{"merge key", "agent_merge_key.yaml", KindAgent, []wantErr{{5, 1, "", "YAML merge keys (<<) are not allowed"}}},
		{"custom tag", "agent_custom_tag.yaml", KindAgent, []wantErr{{3, 11, "/owner_id", "YAML tag !secret is not allowed here (" + tagMsg + ")"}}},
		{"non-string key", "agent_int_key.yaml", KindAgent, []wantErr{{5, 1, "", "mapping key 42 is a number, want a string (quote it)"}}},
		{"missing property", "agent_missing.yaml", KindAgent, []wantErr{{1, 1, "", "missing property 'trust_tier'"}}},
		{"bad agent id", "agent_id.yaml", KindAgent, []wantErr{{1, 1, "/agent_id", "'4C7C' is not a valid Agent-ID: want 64 lower-case hex digits (RCNS §3)"}}},
		{"trust tier above 3", "agent_trust_tier.yaml", KindAgent, []wantErr{{4, 1, "/trust_tier", "got 4, want at most 3"}}},
		{"unknown status", "agent_status.yaml", KindAgent, []wantErr{{5, 1, "/status", "got 'gone', want one of 'active', 'deprecated', 'suspended', 'retired'"}}},
		{"bad scope token", "agent_scope.yaml", KindAgent, []wantErr{{7, 5, "/scopes/1",
			"'Hotel' is not a valid scope token: want two or more ':'-separated segments, each '*' or of a-z 0-9 _ -, like hotel:read (RCNS §3, §11.4)"}}},

		{"semantic without impact", "endpoint_missing_impact.yaml", KindEndpoint, []wantErr{{4, 1, "/semantic", "missing property 'impact'"}}},
		{"confidence above 1", "endpoint_confidence.yaml", KindEndpoint, []wantErr{{9, 3, "/semantic/confidence", "got 1.5, want at most 1"}}},
		{"unknown field in external_service", "endpoint_unknown_field.yaml", KindEndpoint, []wantErr{{19, 3, "/external_service", "additional property 'url' not allowed"}}},
		{"error_map key not a status", "endpoint_error_map_key.yaml", KindEndpoint, []wantErr{{21, 5, "/external_service/error_map",
			"key '999' not allowed, want a key matching ^[1-5][0-9][0-9]$"}}},
		{"timeout zero", "endpoint_timeout.yaml", KindEndpoint, []wantErr{{19, 3, "/external_service/timeout_seconds",
			"0 is not a valid per-call timeout: want a number of seconds from 0.001 (1 ms) to 3600 (1 h)"}}},
		{"upstream_error not listed", "endpoint_missing_upstream_error.yaml", KindEndpoint, []wantErr{{14, 1, "/errors", "must list 'upstream_error'"}}},
		{"upstream method not HTTP", "endpoint_upstream_method.yaml", KindEndpoint, []wantErr{{17, 3, "/external_service/method",
			"got 'FETCH', want one of 'GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'"}}},
		{"partial-segment template", "endpoint_path.yaml", KindEndpoint, []wantErr{{2, 1, "/path",
			"'/guests/prefix-{guest_id}' is not a valid AGTP path template: want '/' or '/'-separated segments, each literal (unreserved, sub-delims, ':', '@', %XX) or a whole {name} of A-Z a-z 0-9 _, no trailing '/' (RCNS §6)"}}},
		{"internal not a boolean", "endpoint_internal.yaml", KindEndpoint, []wantErr{{19, 1, "/internal", "got string, want boolean"}}},

		{"bare integer version", "recipe_version_number.yaml", KindRecipe, []wantErr{{2, 1, "/version", "got number, want string"}}},
		{"bare float version", "recipe_version_float.yaml", KindRecipe, []wantErr{{2, 1, "/version", "got number, want string"}}},
		{"duplicate version", "recipe_duplicate_version.yaml", KindRecipe, []wantErr{{3, 1, "/version", "duplicate key 'version' (first at line 2)"}}},
		{"path_exact and path_regex", "recipe_both_paths.yaml", KindRecipe, []wantErr{{3, 1, "/pattern", "want exactly one of 'path_exact', 'path_regex', got more than one"}}},
		{"neither path_exact nor path_regex", "recipe_no_path.yaml", KindRecipe, []wantErr{{3, 1, "/pattern", "want exactly one of 'path_exact', 'path_regex', got none"}}},
		{"unknown field in a step", "recipe_unknown_field.yaml", KindRecipe, []wantErr{{19, 5, "/steps/1", "additional property 'url' not allowed"}}},
		{"step named input", "recipe_step_name_input.yaml", KindRecipe, []wantErr{{17, 5, "/steps/1/name", "must not be 'input'"}}},
		{"step name upper case", "recipe_step_name_pattern.yaml", KindRecipe, []wantErr{{17, 5, "/steps/1/name",
			"'Reservation' is not a valid step name: want a-z 0-9 and '_', starting with a letter"}}},
		{"composition_failed not listed", "recipe_composition_failed.yaml", KindRecipe, []wantErr{{11, 3, "/endpoint/errors", "must list 'composition_failed'"}}},
		{"bad recipe name", "recipe_name.yaml", KindRecipe, []wantErr{{1, 1, "/name",
			"'Book_Room' is not a valid recipe name: want a-z 0-9 and '-', starting with a letter or digit"}}},
		{"missing output", "recipe_missing_output.yaml", KindRecipe, []wantErr{{1, 1, "", "missing property 'output'"}}},
		{"no steps", "recipe_no_steps.yaml", KindRecipe, []wantErr{{12, 1, "/steps", "must not be empty"}}},
		{"JSON duplicate key", "recipe_duplicate_key.json", KindRecipe, []wantErr{{15, 3, "/name", "duplicate key 'name' (first at line 2)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join("testdata", "bad", tt.file)
			_, err := LoadFile(file, tt.kind)
			checkErrors(t, err, file, tt.want)
		})
	}
}

func TestParseInline(t *testing.T) {
	const agent = "agent_id: 4c7c0f6b1e2d3a4958677685940a1b2c3d4e5f60718293a4b5c6d7e8f9012345\nowner_id: ops\ntrust_tier: 1\n"
	tests := []struct {
		name string
		doc  string
		want []wantErr // nil: Parse must succeed
	}{
		{"timestamp name stays a string", agent + "name: 2026-01-01T10:00:00Z\n", nil},
		{"explicit !!str on a number", agent + "name: !!str 42\n", nil},
		{"long-form core tag", agent + "name: !<tag:yaml.org,2002:str> demo\n", nil},
		{"explicit !!timestamp refused", agent + "name: !!timestamp 2026-01-01\n",
			[]wantErr{{4, 7, "/name", "YAML tag !!timestamp is not allowed here (only !!str, !!int, !!float, !!bool, !!null, !!map, !!seq)"}}},
		{"!!binary refused", agent + "name: !!binary ZGVtbw==\n",
			[]wantErr{{4, 7, "/name", "YAML tag !!binary is not allowed here (only !!str, !!int, !!float, !!bool, !!null, !!map, !!seq)"}}},
		{"!!str on a mapping refused", agent + "name: !!str {a: b}\n",
			[]wantErr{{4, 7, "/name", "YAML tag !!str is not allowed here (only !!str, !!int, !!float, !!bool, !!null, !!map, !!seq)"}}},
		{"bad explicit !!int", agent + "name: !!int x\n", []wantErr{{4, 7, "/name", "'x' is not a valid !!int"}}},
		{"infinite number", agent + "name: demo\nscopes: .inf\n",
			[]wantErr{{5, 9, "/scopes", "number .inf is not finite; JSON has no such number"}}},
		{"number beyond float64 is a number", agent + "name: demo\nscopes: [1e400]\n",
			[]wantErr{{5, 10, "/scopes/0", "got number, want string"}}},
		{"quoted huge number stays a string", agent + "name: '1e400'\n", nil},
		{"null key", agent + "name: demo\n~: x\n", []wantErr{{5, 1, "", "mapping key ~ is null, want a string (quote it)"}}},
		{"sequence key", agent + "name: demo\n? [a]\n: x\n", []wantErr{{5, 3, "", "mapping key is a sequence, want a string"}}},
		{"null value", agent + "name:\n", []wantErr{{4, 1, "/name", "got null, want string"}}},
		{"empty document marker", "---\n", []wantErr{{0, 0, "", "empty document"}}},
		{"scalar document", "hello\n", []wantErr{{1, 1, "", "document is a string, want a mapping"}}},
		{"hex integer is a number", agent + "name: 0x10\n", []wantErr{{4, 1, "/name", "got number, want string"}}},
		{"several problems sorted by line", "agent_id: x\nname: 1\nowner_id: ops\ntrust_tier: 0\nextra: 1\n", []wantErr{
			{1, 1, "/agent_id", "'x' is not a valid Agent-ID: want 64 lower-case hex digits (RCNS §3)"},
			{2, 1, "/name", "got number, want string"},
			{4, 1, "/trust_tier", "got 0, want at least 1"},
			{5, 1, "", "additional property 'extra' not allowed"},
		}},
		{"nested key with slash and tilde", agent + "name: demo\nscopes: {a/b~c: 1}\n", []wantErr{{5, 1, "/scopes", "got object, want array"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse("inline.yaml", []byte(tt.doc), KindAgent)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				var a AgentDoc
				if err := d.Decode(&a); err != nil {
					t.Fatal(err)
				}
				if a.Name == "" {
					t.Errorf("name is empty")
				}
				return
			}
			checkErrors(t, err, "inline.yaml", tt.want)
		})
	}
}

func TestParseUnknownKind(t *testing.T) {
	_, err := Parse("x.yaml", []byte("a: 1\n"), Kind("widget"))
	var e *Error
	if !errors.As(err, &e) || e.Message != `unknown document kind "widget"` {
		t.Fatalf("got %v", err)
	}
}

func TestLoadPaths(t *testing.T) {
	empty := t.TempDir()
	tests := []struct {
		name      string
		paths     []string
		kind      Kind
		wantFiles []string
		wantErr   string // substring of the error; "" = success
	}{
		{
			name:  "directory: yaml, yml and json only, sorted, no subdirectories or dotfiles",
			paths: []string{"testdata/agents"},
			kind:  KindAgent,
			wantFiles: []string{
				filepath.Join("testdata/agents", "10-demo.yaml"),
				filepath.Join("testdata/agents", "20-minimal.yml"),
			},
		},
		{
			name:      "files and directories in the order given",
			paths:     []string{"testdata/good/agent_minimal.yml", "testdata/agents", empty},
			kind:      KindAgent,
			wantFiles: []string{"testdata/good/agent_minimal.yml", filepath.Join("testdata/agents", "10-demo.yaml"), filepath.Join("testdata/agents", "20-minimal.yml")},
		},
		{
			name:  "empty directory",
			paths: []string{empty},
			kind:  KindRecipe,
		},
		{
			name:    "missing path",
			paths:   []string{"testdata/no-such-dir"},
			kind:    KindAgent,
			wantErr: "testdata/no-such-dir: cannot stat: no such file or directory (given as a path of agent documents, as `agents`; a relative path is read from the working directory)",
		},
		{
			name:    "every bad file is reported",
			paths:   []string{"testdata/bad/agent_status.yaml", "testdata/bad/agent_trust_tier.yaml", "testdata/good/agent.yaml"},
			kind:    KindAgent,
			wantErr: "testdata/bad/agent_status.yaml:5:1: at /status: got 'gone', want one of 'active', 'deprecated', 'suspended', 'retired'\ntestdata/bad/agent_trust_tier.yaml:4:1: at /trust_tier: got 4, want at most 3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := LoadPaths(tt.paths, tt.kind)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if docs != nil {
					t.Errorf("docs = %v, want nil on error", docs)
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Errorf("errors.As(*Error) failed on %T", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var files []string
			for _, d := range docs {
				files = append(files, d.File)
			}
			if !reflect.DeepEqual(files, tt.wantFiles) {
				t.Errorf("files = %q, want %q", files, tt.wantFiles)
			}
		})
	}
}

func TestDocumentLineAndErrorf(t *testing.T) {
	d, err := LoadFile("testdata/good/recipe.yaml", KindRecipe)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		pointer   string
		line, col int
	}{
		{"root", "", 1, 1},
		{"top-level key", "/pattern", 6, 1},
		{"nested key", "/pattern/path_exact", 8, 3},
		{"sequence item", "/steps/1", 38, 5},
		{"field of an item", "/steps/1/method", 39, 5},
		{"inside a user schema", "/endpoint/input_schema/properties/nights", 27, 7},
		{"missing child falls back to the parent", "/steps/1/nope/deeper", 38, 5},
		{"missing top-level falls back to the root", "/nope", 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, col := d.Line(tt.pointer)
			if line != tt.line || col != tt.col {
				t.Errorf("Line(%q) = %d:%d, want %d:%d", tt.pointer, line, col, tt.line, tt.col)
			}
		})
	}
	err = d.Errorf("/steps/1/path", "no endpoint %s %s is registered", "FETCH", "/properties/{property_id}")
	want := "testdata/good/recipe.yaml:40:5: at /steps/1/path: no endpoint FETCH /properties/{property_id} is registered"
	if err.Error() != want {
		t.Errorf("Errorf = %q, want %q", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 40 || e.Column != 5 || e.Pointer != "/steps/1/path" {
		t.Errorf("Errorf fields = %+v", e)
	}
}

func TestLineEscapedPointer(t *testing.T) {
	data, err := os.ReadFile("testdata/good/endpoint.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "    guest_id: {type: string}\n",
		"    guest_id: {type: string}\n    a/b~c: {type: string}\n", 1))
	d, err := Parse("endpoint.yaml", data, KindEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	if line, col := d.Line("/input_schema/properties/a~1b~0c"); line != 18 || col != 5 {
		t.Errorf("Line = %d:%d, want 18:5", line, col)
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"full", &Error{File: "a.yaml", Line: 3, Column: 5, Pointer: "/x", Message: "bad"}, "a.yaml:3:5: at /x: bad"},
		{"no pointer", &Error{File: "a.yaml", Line: 3, Column: 5, Message: "bad"}, "a.yaml:3:5: bad"},
		{"line only", &Error{File: "a.yaml", Line: 3, Message: "bad"}, "a.yaml:3: bad"},
		{"no location", &Error{File: "a.yaml", Message: "bad"}, "a.yaml: bad"},
		{"list sorted by file and line", Errors{
			{File: "b.yaml", Line: 1, Column: 1, Message: "third"},
			{File: "a.yaml", Line: 9, Column: 1, Message: "second"},
			{File: "a.yaml", Line: 2, Column: 1, Message: "first"},
		}, "a.yaml:2:1: first\na.yaml:9:1: second\nb.yaml:1:1: third"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecodeDisallowsUnknownFields(t *testing.T) {
	d, err := LoadFile("testdata/good/agent.yaml", KindAgent)
	if err != nil {
		t.Fatal(err)
	}
	var partial struct {
		AgentID string `json:"agent_id"`
	}
	if err := d.Decode(&partial); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("Decode into a narrower struct: err = %v, want unknown field", err)
	}
}

func TestValidateSemantic(t *testing.T) {
	good := func() map[string]any {
		return map[string]any{
			"intent": "Book a room.", "actor": "agent", "outcome": "A reservation exists.",
			"capability": "transaction", "confidence": 0.5, "impact": "reversible", "is_idempotent": false,
		}
	}
	with := func(k string, v any) map[string]any {
		m := good()
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name string
		in   any
		want []string
	}{
		{"valid", good(), nil},
		{"extra field tolerated", with("x_note", "hi"), nil},
		{"json.Number confidence", with("confidence", json.Number("1")), nil},
		{"integer confidence", with("confidence", 0), nil},
		{"not an object", []any{}, []string{"semantic block is an array, want an object"}},
		{"missing impact", with("impact", nil), []string{"missing field 'impact'"}},
		{"everything missing", map[string]any{}, []string{
			"missing field 'intent'", "missing field 'actor'", "missing field 'outcome'", "missing field 'capability'",
			"missing field 'confidence'", "missing field 'impact'", "missing field 'is_idempotent'",
		}},
		{"confidence above 1", with("confidence", 1.5), []string{"confidence 1.5 is outside [0, 1]"}},
		{"confidence below 0", with("confidence", json.Number("-0.1")), []string{"confidence -0.1 is outside [0, 1]"}},
		{"confidence a string", with("confidence", "high"), []string{"confidence is a string, want a number"}},
		{"unknown capability", with("capability", "magic"), []string{
			"unknown capability 'magic', want one of 'discovery', 'retrieval', 'analysis', 'transaction', 'modification', 'creation', 'notification', 'mechanics', 'domain_spanning'"}},
		{"unknown impact", with("impact", "catastrophic"), []string{
			"unknown impact 'catastrophic', want one of 'informational', 'reversible', 'irreversible'"}},
		{"empty intent", with("intent", ""), []string{"intent is empty"}},
		{"actor not a string", with("actor", 3.0), []string{"actor is a number, want a string"}},
		{"is_idempotent a string", with("is_idempotent", "yes"), []string{"is_idempotent is a string, want a boolean"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidateSemantic(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestParseConcurrent exercises the lazy schema compilation under -race.
func TestParseConcurrent(t *testing.T) {
	data, err := os.ReadFile("testdata/good/recipe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := Parse("recipe.yaml", data, KindRecipe); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("{\"a\": 1e999}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, k := range []Kind{KindAgent, KindEndpoint, KindRecipe} {
			d, err := Parse("fuzz.yaml", data, k)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("kind %s: error %T is not an *Error: %v", k, err, err)
				}
				_ = err.Error()
				continue
			}
			if _, err := json.Marshal(d.Value); err != nil {
				t.Fatalf("kind %s: Value does not marshal: %v", k, err)
			}
			if line, _ := d.Line(""); line < 1 {
				t.Fatalf("kind %s: root line %d", k, line)
			}
		}
	})
}

// TestEndpointTimeoutBounds: timeout_seconds outside MinTimeoutSeconds
// to MaxTimeoutSeconds is refused by the schema, with the knob and its
// range named (1e12 would overflow time.Duration; 1e-10 would be 0).
func TestEndpointTimeoutBounds(t *testing.T) {
	raw, err := os.ReadFile("testdata/bad/endpoint_timeout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const bounds = "want a number of seconds from 0.001 (1 ms) to 3600 (1 h)"
	tests := []struct {
		value string
		want  string // "": accepted
	}{
		{"1e12", "1e+12 is not a valid per-call timeout: " + bounds},
		// Beyond float64: the YAML library resolves the literal as a
		// string; it is a number out of range, not "got string".
		{"1e400", "number 1e400 is out of range: " + bounds},
		{"-1e400", "number -1e400 is out of range: " + bounds},
		{"1" + strings.Repeat("0", 400), "number 1" + strings.Repeat("0", 400) + " is out of range: " + bounds},
		{"3600.5", "3600.5 is not a valid per-call timeout: " + bounds},
		{"0.0000000001", "1e-10 is not a valid per-call timeout: " + bounds},
		{"0.0009", "0.0009 is not a valid per-call timeout: " + bounds},
		{"-5", "-5 is not a valid per-call timeout: " + bounds},
		{"0.001", ""},
		{"3600", ""},
		{"30", ""},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			src := strings.Replace(string(raw), "timeout_seconds: 0", "timeout_seconds: "+tt.value, 1)
			_, err := Parse("ep.yaml", []byte(src), KindEndpoint)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			checkErrors(t, err, "ep.yaml", []wantErr{{19, 3, "/external_service/timeout_seconds", tt.want}})
		})
	}
}

// TestHugeNumberNeverAccepted: a number literal beyond float64's range
// where the schema takes any value (inside input_schema) is refused as
// out of range, not accepted as a string or as its stand-in.
func TestHugeNumberNeverAccepted(t *testing.T) {
	raw, err := os.ReadFile("testdata/bad/endpoint_timeout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(raw), "timeout_seconds: 0", "timeout_seconds: 1", 1)
	src = strings.Replace(src, "additionalProperties: false}", "additionalProperties: false, maxProperties: 1e400}", 1)
	_, err = Parse("ep.yaml", []byte(src), KindEndpoint)
	checkErrors(t, err, "ep.yaml", []wantErr{{12, 59, "/input_schema/maxProperties",
		"number 1e400 is out of range: a number here must fit a 64-bit float (at most about 1.8e308 in magnitude)"}})
}

// TestTimeoutBoundsMatchSchema holds MinTimeoutSeconds and
// MaxTimeoutSeconds to the bounds written in endpoint.schema.json.
func TestTimeoutBoundsMatchSchema(t *testing.T) {
	c, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	loc := schemaBase + "endpoint.schema.json#/properties/external_service/properties/timeout_seconds"
	for kw, want := range map[string]float64{"minimum": MinTimeoutSeconds, "maximum": MaxTimeoutSeconds} {
		got, ok := c.lookup(loc, kw).(json.Number)
		if !ok {
			t.Fatalf("timeout_seconds has no %s (%T)", kw, c.lookup(loc, kw))
		}
		if f, err := got.Float64(); err != nil || f != want {
			t.Errorf("schema %s = %s, want %v", kw, got, want)
		}
	}
}
