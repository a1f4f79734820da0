package openapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// corpus is one OpenAPI document of testdata and the options it is
// imported with.
type corpus struct {
	name string // file in testdata
	opts Options
	// digest pins each output file by size and SHA-256 instead of its
	// bytes (a large document's output is megabytes).
	digest    bool
	endpoints int // expected number of endpoints
	skipped   int
}

func corpora(t testing.TB) []corpus {
	discordMap, err := LoadOverrides("testdata/maps/discord.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return []corpus{
		{name: "petstore-3.0.yaml", endpoints: 18, skipped: 1, opts: Options{Upstream: "petstore", QueryForSearch: true, AcceptRenames: true, ScopesFromSecurity: true}},
		{name: "petstore-3.1.yaml", endpoints: 3, opts: Options{Upstream: "petstore", ScopesFromSecurity: true}},
		{name: "hotel-3.0.yaml", endpoints: 11, opts: Options{Upstream: "hotel", QueryForSearch: true}},
		{name: "features-3.0.yaml", endpoints: 7, skipped: 4, opts: Options{Upstream: "zoo", AcceptRenames: true, ScopesFromSecurity: true, Headers: map[string]string{"X-Shift": "day"}}},
		{name: "discord-3.1.json", endpoints: 237, skipped: 5, digest: true, opts: Options{Upstream: "discord", AcceptRenames: true, Overrides: discordMap}},
	}
}

// imported caches the import of each corpus for the tests that only
// read it (a Result is not modified after Import).
var imported sync.Map

func importCorpus(t testing.TB, c corpus) *Result {
	t.Helper()
	if r, ok := imported.Load(c.name); ok {
		return r.(*Result)
	}
	r := importFresh(t, c)
	imported.Store(c.name, r)
	return r
}

func importFresh(t testing.TB, c corpus) *Result {
	t.Helper()
	data, err := ReadSpec(filepath.Join("testdata", c.name))
	if err != nil {
		t.Fatal(err)
	}
	c.opts.Source = c.name
	r, err := Import(data, c.opts)
	if err != nil {
		t.Fatalf("import %s: %v", c.name, err)
	}
	return r
}

// TestGolden pins the bytes of every generated document and of the
// table; run with -update to rewrite them after a deliberate change.
func TestGolden(t *testing.T) {
	for _, c := range corpora(t) {
		t.Run(c.name, func(t *testing.T) {
			r := importCorpus(t, c)
			if len(r.Endpoints) != c.endpoints || len(r.Skipped) != c.skipped {
				t.Fatalf("%d endpoints and %d skipped, want %d and %d", len(r.Endpoints), len(r.Skipped), c.endpoints, c.skipped)
			}
			dir := filepath.Join("testdata", "golden", strings.TrimSuffix(c.name, filepath.Ext(c.name)))
			got := map[string][]byte{}
			var table bytes.Buffer
			if err := r.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			got["table.txt"] = table.Bytes()
			if c.digest {
				var sums strings.Builder
				for _, e := range r.Endpoints {
					sum := sha256.Sum256(e.Data)
					fmt.Fprintf(&sums, "%s  %d  %s\n", hex.EncodeToString(sum[:]), len(e.Data), e.File)
				}
				got["SHA256SUMS"] = []byte(sums.String())
			} else {
				for _, e := range r.Endpoints {
					got[e.File] = e.Data
				}
			}
			if *update {
				os.RemoveAll(dir)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, data := range got {
					if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create the golden files)", err)
			}
			var want []string
			for _, e := range entries {
				want = append(want, e.Name())
			}
			var have []string
			for name := range got {
				have = append(have, name)
			}
			sort.Strings(have)
			if strings.Join(have, " ") != strings.Join(want, " ") {
				t.Fatalf("files %v, golden has %v", have, want)
			}
			for _, name := range have {
				golden, _ := os.ReadFile(filepath.Join(dir, name))
				if !bytes.Equal(got[name], golden) {
					t.Errorf("%s differs from %s:\n%s", name, filepath.Join(dir, name), firstDiff(got[name], golden))
				}
			}
		})
	}
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n got  %q\n want %q", i+1, x, y)
		}
	}
	return "(same lines, different bytes)"
}

// TestDeterministic imports each document twice: the same bytes.
func TestDeterministic(t *testing.T) {
	for _, c := range corpora(t) {
		if c.digest {
			continue // TestGolden pins it; twice would double the slowest import
		}
		a, b := importFresh(t, c), importFresh(t, c)
		for i := range a.Endpoints {
			if !bytes.Equal(a.Endpoints[i].Data, b.Endpoints[i].Data) {
				t.Errorf("%s: %s differs between two imports", c.name, a.Endpoints[i].File)
			}
		}
	}
}

// TestGeneratedDocumentsLoad checks every generated document the way the
// gateway does: each passes the endpoint schema (schema.Parse), and the
// folder WriteDir writes loads with recipes.Load, the loader behind
// `endpoints DIR`, with each endpoint's method and path as the table
// says.
func TestGeneratedDocumentsLoad(t *testing.T) {
	mp := &policy.MethodPolicy{Catalog: policy.DefaultCatalog()}
	for _, c := range corpora(t) {
		t.Run(c.name, func(t *testing.T) {
			r := importCorpus(t, c)
			for _, e := range r.Endpoints {
				if _, err := schema.Parse(e.File, e.Data, schema.KindEndpoint); err != nil {
					t.Fatalf("%s fails the endpoint schema: %v", e.File, err)
				}
			}
			for _, env := range r.Env {
				t.Setenv(env, "test-secret-"+strings.ToLower(env))
			}
			dir := filepath.Join(t.TempDir(), "endpoints")
			if err := WriteDir(dir, r); err != nil {
				t.Fatal(err)
			}
			up, err := recipes.NewUpstream(c.opts.Upstream, "http://127.0.0.1:1", recipes.UpstreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			set, err := recipes.Load([]string{dir}, nil, mp, map[string]*recipes.Upstream{c.opts.Upstream: up})
			if err != nil {
				t.Fatalf("recipes.Load: %v", err)
			}
			if len(set.Endpoints) != len(r.Endpoints) {
				t.Fatalf("loaded %d endpoints, imported %d", len(set.Endpoints), len(r.Endpoints))
			}
			want := map[string]bool{}
			for _, e := range r.Endpoints {
				want[e.Method+" "+e.Path] = true
			}
			for _, e := range set.Endpoints {
				if !want[e.Method+" "+e.Path] {
					t.Errorf("loaded %s %s, which the import did not report", e.Method, e.Path)
				}
				if e.Description == "" || e.UpstreamName() != c.opts.Upstream {
					t.Errorf("%s %s: description %q, upstream %q", e.Method, e.Path, e.Description, e.UpstreamName())
				}
			}
		})
	}
}

// TestRecipeOverImportedEndpoints: a recipe whose steps name imported
// endpoints (docs/recipes.md, "Starting from OpenAPI") loads with them,
// its step inputs checked against the imported input schemas.
func TestRecipeOverImportedEndpoints(t *testing.T) {
	r := importCorpus(t, corpus{name: "hotel-3.0.yaml", opts: Options{Upstream: "hotel", QueryForSearch: true}})
	dir := filepath.Join(t.TempDir(), "hotel")
	if err := WriteDir(dir, r); err != nil {
		t.Fatal(err)
	}
	up, err := recipes.NewUpstream("hotel", "http://127.0.0.1:1", recipes.UpstreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mp := &policy.MethodPolicy{Catalog: policy.DefaultCatalog()}
	set, err := recipes.Load([]string{dir}, []string{"testdata/recipes/book-stay.yaml"}, mp, map[string]*recipes.Upstream{"hotel": up})
	if err != nil {
		t.Fatal(err)
	}
	rec := set.Match("BOOK", "/stay")
	if rec == nil || rec.Depth() != 3 {
		t.Fatalf("recipe %+v", rec)
	}
	// A step input naming a property the imported endpoint does not have
	// is refused at load.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	text, _ := os.ReadFile("testdata/recipes/book-stay.yaml")
	os.WriteFile(bad, bytes.Replace(text, []byte("{guestId: $input.guest_id}"), []byte("{guest_id: $input.guest_id}"), 1), 0o644)
	if _, err := recipes.Load([]string{dir}, []string{bad}, mp, map[string]*recipes.Upstream{"hotel": up}); err == nil || !strings.Contains(err.Error(), "guest_id") {
		t.Fatalf("a step input with a wrong key: %v", err)
	}
}
