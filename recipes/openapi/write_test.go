package openapi

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestWriteDir: a new folder is written whole; a folder of a previous
// import is replaced whole (a file of a vanished operation goes); any
// other non-empty folder is refused and left as it was.
func TestWriteDir(t *testing.T) {
	hotel := importCorpus(t, corpus{name: "hotel-3.0.yaml", opts: Options{Upstream: "hotel", QueryForSearch: true}})
	dir := filepath.Join(t.TempDir(), "endpoints")
	if err := WriteDir(dir, hotel); err != nil {
		t.Fatal(err)
	}
	names := listDir(t, dir)
	if len(names) != len(hotel.Endpoints)+1 || !slices.Contains(names, MarkerFile) || !slices.Contains(names, "createReservation.yaml") {
		t.Fatalf("wrote %v", names)
	}
	marker, _ := os.ReadFile(filepath.Join(dir, MarkerFile))
	if !strings.Contains(string(marker), "source: hotel-3.0.yaml\nsha256: "+hotel.SHA256+"\n") {
		t.Errorf("marker:\n%s", marker)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "getGuest.yaml"))
	if e, _ := endpoint(t, hotel, "getGuest.yaml"); !bytes.Equal(got, e.Data) {
		t.Error("getGuest.yaml is not the generated document")
	}

	// A re-import with fewer operations replaces the folder.
	fewer := &Result{Source: hotel.Source, Version: hotel.Version, SHA256: hotel.SHA256, Endpoints: hotel.Endpoints[:2]}
	if err := WriteDir(dir, fewer); err != nil {
		t.Fatal(err)
	}
	if names := listDir(t, dir); len(names) != 3 || slices.Contains(names, "createReservation.yaml") {
		t.Fatalf("after a re-import: %v", names)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".endpoints.import-*")); len(leftovers) != 0 {
		t.Errorf("temporary folders left: %v", leftovers)
	}

	// A hand-written folder is never replaced.
	hand := filepath.Join(t.TempDir(), "mine")
	os.MkdirAll(hand, 0o755)
	os.WriteFile(filepath.Join(hand, "fetch-guest.yaml"), []byte("method: FETCH\n"), 0o644)
	err := WriteDir(hand, hotel)
	if err == nil || !strings.Contains(err.Error(), "is not empty and was not written by import-openapi (no .import-openapi in it)") {
		t.Fatalf("hand-written folder: %v", err)
	}
	if names := listDir(t, hand); len(names) != 1 {
		t.Errorf("hand-written folder changed: %v", names)
	}
	if err := WriteDir(filepath.Join(t.TempDir(), "no", "parent"), hotel); err == nil || !strings.Contains(err.Error(), "is not a folder") {
		t.Errorf("missing parent: %v", err)
	}
}

// TestRunWritesNothingOnError: a failing import leaves the output folder
// as it was, absent or holding the previous import.
func TestRunWritesNothingOnError(t *testing.T) {
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "bad.yaml")
	os.WriteFile(bad, doc(listPets+`  /animals:
    get:
      operationId: listPets
      responses: {"200": {description: ok}}
`, `  schemas:
    Pets: {type: array}`), 0o644)
	out := filepath.Join(tmp, "out")
	var w bytes.Buffer
	err := Run(&w, bad, out, false, Options{Upstream: "up"})
	if err == nil || !strings.Contains(err.Error(), "operationId \"listPets\" is also") {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("output folder exists after a failed import: %v", err)
	}

	// Each kind of refused document writes nothing.
	over := filepath.Join(tmp, "over.json")
	os.WriteFile(over, append([]byte(`{"openapi": "3.0.3"}`), bytes.Repeat([]byte(" "), MaxDocumentBytes)...), 0o644)
	for name, spec := range map[string][]byte{
		"external.yaml": doc(listPets, `  schemas:
    Pets: {$ref: 'pets.yaml'}`),
		"cycle.yaml": doc(listPets, `  schemas:
    Pets: {$ref: '#/components/schemas/Pets'}`),
		"invalid.yaml": doc(listPets, `  schemas:
    Pets: {type: array}`),
		"over.json": nil,
	} {
		path := filepath.Join(tmp, name)
		if spec != nil {
			os.WriteFile(path, spec, 0o644)
		}
		if err := Run(&w, path, out, false, Options{Upstream: "up"}); err == nil {
			t.Errorf("%s imported", name)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: output folder exists after a refused import", name)
		}
	}

	good := filepath.Join(tmp, "good.yaml")
	os.WriteFile(good, doc(listPets, `  schemas:
    Pets: {type: array, items: {type: string}}`), 0o644)
	w.Reset()
	if err := Run(&w, good, out, false, Options{Upstream: "up"}); err != nil {
		t.Fatal(err)
	}
	// One endpoint is counted in the singular.
	for _, want := range []string{"\n1 endpoint, 0 skipped, 0 not selected.\n", "Wrote 1 endpoint document to "} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("the import's summary lacks %q:\n%s", want, w.String())
		}
	}
	before := listDir(t, out)
	// A rename not accepted fails the whole import: nothing changes.
	renamed := filepath.Join(tmp, "renamed.yaml")
	os.WriteFile(renamed, doc(`  /order:
    post:
      operationId: placeOrder
      responses: {"200": {description: ok}}
`, ""), 0o644)
	w.Reset()
	err = Run(&w, renamed, out, false, Options{Upstream: "up"})
	if err == nil || !strings.Contains(err.Error(), "proposed AGTP path /orders") {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(w.String(), "CREATE /orders (proposed rename, not accepted)") {
		t.Errorf("the table does not show the proposal:\n%s", w.String())
	}
	if after := listDir(t, out); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("output folder changed: %v → %v", before, after)
	}
	// A dry run writes nothing, even when it succeeds.
	dry := filepath.Join(tmp, "dry")
	w.Reset()
	if err := Run(&w, good, dry, true, Options{Upstream: "up"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dry); !os.IsNotExist(err) || !strings.Contains(w.String(), "Dry run: nothing written.") {
		t.Errorf("dry run wrote %s (%v):\n%s", dry, err, w.String())
	}
	if err := Run(&w, good, "", false, Options{Upstream: "up"}); err == nil || !strings.Contains(err.Error(), "no output folder") {
		t.Errorf("no --out: %v", err)
	}
}

// TestParseFlags: --method-map and --header entries.
func TestParseFlags(t *testing.T) {
	m, err := ParseMethodMap([]string{"post=submit", "GET = RETRIEVE"})
	if err != nil || m["POST"] != "SUBMIT" || m["GET"] != "RETRIEVE" {
		t.Errorf("method map %v %v", m, err)
	}
	for _, bad := range [][]string{{"POST"}, {"POST="}, {"POST=A", "post=B"}} {
		if _, err := ParseMethodMap(bad); err == nil {
			t.Errorf("method map %q accepted", bad)
		}
	}
	h, err := ParseHeaders([]string{"X-Tenant: zoo-1", "X-Key: ${ZOO_KEY}"})
	if err != nil || h["X-Tenant"] != "zoo-1" || h["X-Key"] != "${ZOO_KEY}" {
		t.Errorf("headers %v %v", h, err)
	}
	for _, bad := range [][]string{{"X-Tenant"}, {": v"}, {"A: 1", "a: 2"}, {"X Key: 1"}, {"X-Key: a\rb"}, {"X-Key: a\x01"}} {
		if _, err := ParseHeaders(bad); err == nil {
			t.Errorf("headers %q accepted", bad)
		}
	}
}

// TestLoadOverrides reads a map file strictly.
func TestLoadOverrides(t *testing.T) {
	m, err := LoadOverrides("testdata/maps/discord.yaml")
	if err != nil || m["get_guild_template"].Path != "/guild-templates/{code}" {
		t.Fatalf("%v %v", m, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("operations:\n  placeOrder: {pathh: /orders}\n"), 0o644)
	if _, err := LoadOverrides(bad); err == nil || !strings.Contains(err.Error(), "field pathh not found") {
		t.Errorf("unknown key: %v", err)
	}
}
