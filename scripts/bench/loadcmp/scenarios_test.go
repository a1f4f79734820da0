package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestScenarioListRuns: the shipped list passes checkScenarios, and the
// Caddyfile has a listener for every site and no port loadcmp does not
// set (a site added on one side only fails here, not after a build).
func TestScenarioListRuns(t *testing.T) {
	if err := checkScenarios(scenarios()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	for _, m := range regexp.MustCompile(`\{\$(BENCH_PORT_[A-Z0-9_]+)\}`).FindAllStringSubmatch(string(raw), -1) {
		inFile[m[1]] = true
	}
	var want []string
	for _, s := range sites {
		want = append(want, s.envName())
		if !inFile[s.envName()] {
			t.Errorf("site %s: the Caddyfile has no listener on {$%s}", s.Name, s.envName())
		}
		delete(inFile, s.envName())
	}
	for k := range inFile {
		t.Errorf("the Caddyfile listens on {$%s}, which no site of scenarios.go sets (sites: %v)", k, want)
	}
}

func TestCheckScenariosRefuses(t *testing.T) {
	b := scenarios()[0]
	all := func(extra ...*scenario) []*scenario { return append(scenarios(), extra...) }
	for _, tc := range []struct {
		name string
		list []*scenario
		want string
	}{
		{"duplicate key", all(c("nokey")), `"c/nokey" is listed twice`},
		{"unknown site", all(&scenario{Key: "c/valkey", Letter: "c", Site: "valkey", Want: 200, Phase: phaseLoad}), `no site "valkey"`},
		{"letter without description", all(&scenario{Key: "z/nokey", Letter: "z", Site: "nokey", Want: 200, Phase: phaseLoad}), `letter "z"`},
		{"bad status", all(&scenario{Key: "x/nokey", Letter: "c", Site: "nokey", Want: 2000, Phase: phaseLoad}), "expected status 2000"},
		{"unknown phase", all(&scenario{Key: "x/nokey", Letter: "c", Site: "nokey", Want: 200, Phase: "soak"}), `phase "soak"`},
		{"b not first", append(scenarios()[1:], b), "must come first"},
		{"target without its scenario", []*scenario{b, c("nokey")}, `no scenario "d/nokey"`},
	} {
		err := checkScenarios(tc.list)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one with %q", tc.name, err, tc.want)
		}
	}
}

func TestFilterScenarios(t *testing.T) {
	for _, tc := range []struct {
		name, only string
		want       []string // keys, sorted
		err        string
	}{
		{"everything", "", nil, ""},
		{"one key", "d/nokey", []string{"b", "d/nokey"}, ""},
		{"a letter", "f", []string{"b", "f/ed25519", "f/group", "f/nokey", "f/redis"}, ""},
		{"a site", "group", []string{"b", "f/group", "g/group"}, ""},
		{"trailing comma and spaces", " c/nokey , ", []string{"b", "c/nokey"}, ""},
		{"unknown token", "c/nokey,zz", nil, `"zz" names no scenario`},
		{"half a key", "c/", nil, `"c/" names no scenario`},
	} {
		got, err := filterScenarios(scenarios(), tc.only)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if tc.want == nil {
			if len(got) != len(scenarios()) {
				t.Errorf("%s: %d scenarios, want all %d", tc.name, len(got), len(scenarios()))
			}
			continue
		}
		var keys []string
		for _, s := range got {
			keys = append(keys, s.Key)
		}
		sort.Strings(keys)
		if strings.Join(keys, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: %v, want %v", tc.name, keys, tc.want)
		}
	}
}

func TestScenarioPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *scenario
		want string
	}{
		{"fixed", c("nokey"), "/items/1"},
		{"per run", d("nokey"), "/item/d-t7"},
		{"per request", g("nokey"), "/item/g-t7-41"},
	} {
		if got := tc.s.path("t7", 41); got != tc.want {
			t.Errorf("%s: path = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestProfileKeys(t *testing.T) {
	if keys, err := profileKeys(" b, d/nokey ,"); err != nil || strings.Join(keys, ",") != "b,d/nokey" {
		t.Errorf("profileKeys = %v, %v; want [b d/nokey]", keys, err)
	}
	for _, bad := range []string{"nonsense", "e1/nokey", "c"} {
		if _, err := profileKeys(bad); err == nil || !strings.Contains(err.Error(), "names no load scenario") {
			t.Errorf("profileKeys(%q): err = %v, want names no load scenario", bad, err)
		}
	}
}
