package policy

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

var floorMethods = []string{
	"QUERY", "DISCOVER", "DESCRIBE", "INSPECT", "SUMMARIZE", "PLAN", "PROPOSE",
	"EXECUTE", "DELEGATE", "ESCALATE", "CONFIRM", "SUSPEND", "NOTIFY",
	"ACTIVATE", "DEACTIVATE", "REINSTATE", "REVOKE", "DEPRECATE",
}

func TestDefaultCatalog(t *testing.T) {
	c := DefaultCatalog()
	if got := c.Version(); got != "1.0.0" {
		t.Fatalf("Version() = %q, want 1.0.0", got)
	}
	if c.Len() != 425 || len(c.Names()) != 425 {
		t.Fatalf("Len() = %d, len(Names()) = %d, want 425", c.Len(), len(c.Names()))
	}
	if !slices.IsSorted(c.Names()) {
		t.Error("Names() not sorted")
	}
	if got := len(c.Floor()); got != 18 {
		t.Errorf("len(Floor()) = %d, want 18", got)
	}
	for _, m := range floorMethods {
		if !c.IsFloor(m) || !c.Has(m) {
			t.Errorf("%s: IsFloor=%v Has=%v, want both true", m, c.IsFloor(m), c.Has(m))
		}
	}
	want := map[string]string{"GET": "FETCH", "POST": "CREATE", "PUT": "REPLACE", "DELETE": "REMOVE", "PATCH": "MODIFY"}
	got := c.LegacyAliases()
	if len(got) != len(want) {
		t.Fatalf("LegacyAliases() = %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("LegacyAliases()[%s] = %q, want %q", k, got[k], v)
		}
	}
	got["GET"] = "X"
	if c.LegacyAliases()["GET"] != "FETCH" {
		t.Error("LegacyAliases() is not a copy")
	}
	if DefaultCatalog() != c {
		t.Error("DefaultCatalog() not parsed once")
	}
}

func TestCatalogLookup(t *testing.T) {
	c := DefaultCatalog()
	tests := []struct {
		name     string
		method   string
		ok       bool
		category string
	}{
		{name: "floor", method: "QUERY", ok: true, category: "discovery"},
		{name: "alias target", method: "FETCH", ok: true},
		{name: "tier 2", method: "BOOK", ok: true},
		{name: "not in catalog", method: "FROBNICATE"},
		{name: "legacy verb", method: "GET"},
		{name: "lowercase", method: "query"},
		{name: "not in shipped catalog", method: "LOG"},
		{name: "empty", method: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, ok := c.Lookup(tt.method)
			if ok != tt.ok || c.Has(tt.method) != tt.ok {
				t.Fatalf("Lookup(%q) ok = %v, Has = %v, want %v", tt.method, ok, c.Has(tt.method), tt.ok)
			}
			if !ok {
				return
			}
			if info.Name != tt.method || len(info.Categories) == 0 {
				t.Errorf("Lookup(%q) = %+v", tt.method, info)
			}
			if tt.category != "" && !slices.Contains(info.Categories, tt.category) {
				t.Errorf("Lookup(%q).Categories = %v, want %q among them", tt.method, info.Categories, tt.category)
			}
			info.Categories[0] = "mutated"
			again, _ := c.Lookup(tt.method)
			if again.Categories[0] == "mutated" {
				t.Error("Lookup returned shared Categories")
			}
		})
	}
}

// TestEmbeddedCatalogMatchesSpec checks that the shipped file carries the
// same facts as spec/catalog-1.0.0.json (copied to testdata).
func TestEmbeddedCatalogMatchesSpec(t *testing.T) {
	data, err := os.ReadFile("testdata/spec-catalog-1.0.0.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Version    string              `json:"version"`
		Embedded   []string            `json:"embedded"`
		Legacy     map[string]string   `json:"legacy"`
		Categories []string            `json:"categories"`
		Methods    map[string][]string `json:"methods"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	c := DefaultCatalog()
	if c.Version() != spec.Version || c.Len() != len(spec.Methods) {
		t.Fatalf("version/len = %s/%d, spec %s/%d", c.Version(), c.Len(), spec.Version, len(spec.Methods))
	}
	for name, cats := range spec.Methods {
		info, ok := c.Lookup(name)
		if !ok || !slices.Equal(info.Categories, cats) {
			t.Errorf("%s: got %v %v, spec %v", name, ok, info.Categories, cats)
		}
	}
	floor := slices.Clone(spec.Embedded)
	slices.Sort(floor)
	if !slices.Equal(c.Floor(), floor) {
		t.Errorf("Floor() = %v, spec %v", c.Floor(), floor)
	}
	for k, v := range spec.Legacy {
		if c.LegacyAliases()[k] != v {
			t.Errorf("legacy %s = %q, spec %q", k, c.LegacyAliases()[k], v)
		}
	}
	if !slices.Equal(c.Categories(), spec.Categories) {
		t.Errorf("Categories() = %v, spec %v", c.Categories(), spec.Categories)
	}
	// The spec file's own shape is accepted by LoadCatalog too.
	c2, err := LoadCatalog(data)
	if err != nil {
		t.Fatalf("LoadCatalog(spec file): %v", err)
	}
	if !slices.Equal(c2.Names(), c.Names()) {
		t.Error("spec-shaped catalog differs from the embedded one")
	}
}

func TestLoadCatalog(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string
		check   func(t *testing.T, c *Catalog)
	}{
		{
			name: "minimal with deprecation",
			doc: `{"version":"1.1.0","embedded":["QUERY"],"legacy":{"GET":"FETCH"},"categories":["discovery","retrieval"],
			"verbs":{"QUERY":{"categories":["discovery"]},"FETCH":{"categories":["retrieval"],"description":"x"},
			"GRAB":{"categories":["retrieval"],"deprecated_in":"1.1.0","removed_in":"2.0.0","successor":"FETCH"}}}`,
			check: func(t *testing.T, c *Catalog) {
				info, ok := c.Lookup("GRAB")
				if !ok || info.DeprecatedIn != "1.1.0" || info.RemovedIn != "2.0.0" || info.Successor != "FETCH" {
					t.Errorf("GRAB = %+v", info)
				}
				if w := info.CatalogWarning(); w != "deprecated; successor=FETCH; removed_in=2.0.0" {
					t.Errorf("CatalogWarning() = %q", w)
				}
				if q, _ := c.Lookup("QUERY"); q.Deprecated() || q.CatalogWarning() != "" {
					t.Errorf("QUERY deprecated: %+v", q)
				}
			},
		},
		{name: "methods as arrays", doc: `{"version":"1","embedded":["QUERY"],"methods":{"QUERY":["discovery"]}}`},
		{name: "not json", doc: `{`, wantErr: "catalog"},
		{name: "no version", doc: `{"verbs":{"QUERY":{}}}`, wantErr: "version"},
		{name: "no verbs", doc: `{"version":"1"}`, wantErr: "no methods"},
		{name: "both verbs and methods", doc: `{"version":"1","verbs":{"QUERY":{}},"methods":{"QUERY":[]}}`, wantErr: "both"},
		{name: "lowercase name", doc: `{"version":"1","verbs":{"Query":{}}}`, wantErr: `"Query"`},
		{name: "too short", doc: `{"version":"1","verbs":{"QU":{}}}`, wantErr: `"QU"`},
		{name: "too long", doc: `{"version":"1","verbs":{"` + strings.Repeat("A", 33) + `":{}}}`, wantErr: "AAAA"},
		{name: "digit", doc: `{"version":"1","verbs":{"QUERY2":{}}}`, wantErr: `"QUERY2"`},
		{name: "legacy verb as method", doc: `{"version":"1","verbs":{"GET":{}}}`, wantErr: `"GET"`},
		{name: "floor not subset", doc: `{"version":"1","embedded":["PLAN"],"verbs":{"QUERY":{}}}`, wantErr: `floor method "PLAN"`},
		{name: "legacy target unknown", doc: `{"version":"1","legacy":{"GET":"FETCH"},"verbs":{"QUERY":{}}}`, wantErr: "FETCH"},
		{name: "legacy key unknown", doc: `{"version":"1","legacy":{"HEAD":"QUERY"},"verbs":{"QUERY":{}}}`, wantErr: "HEAD"},
		{name: "undeclared category", doc: `{"version":"1","categories":["a"],"verbs":{"QUERY":{"categories":["b"]}}}`, wantErr: `"b"`},
		{name: "unknown successor", doc: `{"version":"1","verbs":{"QUERY":{"deprecated_in":"1","successor":"NOPE"}}}`, wantErr: "NOPE"},
		{name: "removed without deprecated", doc: `{"version":"1","verbs":{"QUERY":{"removed_in":"2"}}}`, wantErr: "removed_in"},
		{name: "bad verb object", doc: `{"version":"1","verbs":{"QUERY":7}}`, wantErr: "QUERY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadCatalog([]byte(tt.doc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}
