package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hotelOpenAPI describes json-server's hotel routes (OpenAPI 3.0).
const hotelOpenAPI = "recipes/openapi/testdata/hotel-3.0.yaml"

// importOpenAPI runs `caddy rcns import-openapi args...` and returns its
// stdout, stderr and exit code.
func importOpenAPI(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	return cliRun(t, caddyBin, append([]string{"rcns", "import-openapi"}, args...)...)
}

// readFolder returns the files of dir by name.
func readFolder(t testing.TB, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// TestImportOpenAPI imports an OpenAPI description of the hotel API with
// the real binary, loads the folder into a real Caddy in front of
// json-server and calls imported endpoints over the HTTP door (issue
// 22).
func TestImportOpenAPI(t *testing.T) {
	tmp := t.TempDir()
	out := filepath.Join(tmp, "hotel-endpoints")
	args := []string{"--upstream", "hotel", "--query-for-search", filepath.Join(repoRoot, hotelOpenAPI)}

	// A dry run prints the table and writes nothing.
	stdout, stderr, code := importOpenAPI(t, append([]string{"--dry-run", "--out", out}, args...)...)
	if code != 0 || !strings.Contains(stdout, "QUERY /properties") || !strings.Contains(stdout, "Dry run: nothing written.") {
		t.Fatalf("dry run exit %d:\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("the dry run wrote %s", out)
	}

	stdout, stderr, code = importOpenAPI(t, append([]string{"--out", out}, args...)...)
	if code != 0 || !strings.Contains(stdout, "Wrote 11 endpoint documents to "+out) {
		t.Fatalf("import exit %d:\n%s%s", code, stdout, stderr)
	}
	first := readFolder(t, out)
	if len(first) != 12 || !strings.Contains(first["createReservation.yaml"], "method: CREATE") {
		t.Fatalf("wrote %d files", len(first))
	}

	// The same document and flags give the same bytes.
	again := filepath.Join(tmp, "again")
	if _, stderr, code := importOpenAPI(t, append([]string{"--out", again}, args...)...); code != 0 {
		t.Fatalf("second import exit %d: %s", code, stderr)
	}
	for name, data := range readFolder(t, again) {
		if first[name] != data {
			t.Errorf("%s differs between two imports", name)
		}
	}

	// A refused import names the operation and leaves the folder as it
	// was.
	bad := filepath.Join(tmp, "dup.yaml")
	spec, err := os.ReadFile(filepath.Join(repoRoot, hotelOpenAPI))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bad, bytes.Replace(spec, []byte("operationId: getProperty"), []byte("operationId: getGuest"), 1), 0o644)
	_, stderr, code = importOpenAPI(t, "--upstream", "hotel", "--out", out, bad)
	if code == 0 || !strings.Contains(stderr, `operation getGuest (GET /properties/{propertyId}): at /paths/~1properties~1{propertyId}/get/operationId: operationId "getGuest" is also the operationId of GET /guests/{guestId}`) {
		t.Fatalf("duplicate operationId: exit %d:\n%s", code, stderr)
	}
	for name, data := range readFolder(t, out) {
		if first[name] != data {
			t.Errorf("%s changed after a refused import", name)
		}
	}

	js := startJSONServer(t, hotelDB)
	site := fill(`
	rcns {
		server_id caddy-rcns-it
		identity header
		upstream hotel {{HOTEL}}
		agents examples/hotel/agents
		endpoints {{DIR}}
	}
	reverse_proxy {{HOTEL}}
`, "HOTEL", js.URL, "DIR", out)
	if text, err := caddyValidate(t, site); err != nil {
		t.Fatalf("caddy validate: %v\n%s", err, text)
	}
	g := startGateway(t, site)

	t.Run("FETCH an imported path with a parameter", func(t *testing.T) {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
		wantStatus(t, r, 200)
		assertAGTPHeaders(t, r)
		if b := r.Object(t); str(b, "result", "name") != "Ada Lovelace" || str(b, "result", "email") != "ada@example.com" {
			t.Errorf("FETCH /guests/g-1:\n%s", r)
		}
	})

	t.Run("QUERY a search with a query parameter", func(t *testing.T) {
		r := g.Do(t, "QUERY", "/properties", hdr(agentA1, "hotel:read"),
			map[string]any{"parameters": map[string]any{"city": "Porto"}})
		wantStatus(t, r, 200)
		list, _ := r.Object(t)["result"].([]any)
		if len(list) != 1 || str(list[0], "id") != "p-2" || str(list[0], "name") != "Old Town Inn" {
			t.Errorf("QUERY /properties city=Porto:\n%s", r)
		}
	})

	t.Run("CREATE from a flattened request body", func(t *testing.T) {
		params := map[string]any{"guest_id": "g-2", "property_id": "p-1", "check_in": "2027-03-01", "nights": 3}
		r := g.Do(t, "CREATE", "/reservations", hdr(agentA1, "hotel:read, hotel:book"), map[string]any{"parameters": params})
		wantStatus(t, r, 200)
		status, _, body := js.Get(t, "/reservations")
		list, _ := decodeJSON(t, body).([]any)
		if status != 200 || len(list) != 1 || str(list[0], "guest_id") != "g-2" || field(list[0], "nights") != float64(3) {
			t.Fatalf("json-server reservations %d %s", status, body)
		}
		if field(r.Object(t), "result", "id") != field(list[0], "id") || str(r.Object(t), "result", "check_in") != "2027-03-01" {
			t.Errorf("CREATE result %s, stored %s", r.Body, body)
		}
	})

	// The scopes come from the document's x-rcns-scopes: creating needs
	// hotel:book claimed.
	t.Run("imported required_scopes apply", func(t *testing.T) {
		params := map[string]any{"guest_id": "g-1", "property_id": "p-1", "check_in": "2027-04-01", "nights": 1}
		r := g.Do(t, "CREATE", "/reservations", hdr(agentA1, "hotel:read"), map[string]any{"parameters": params})
		b := assertErrorBody(t, r, 262, "scope-required")
		if missing, _ := b["missing_scopes"].([]any); len(missing) != 1 || missing[0] != "hotel:book" {
			t.Errorf("missing_scopes %v:\n%s", b["missing_scopes"], r)
		}
		if n := len(js.Reservations(t)); n != 1 {
			t.Errorf("%d reservations after a refused CREATE, want 1", n)
		}
	})
}
