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
		{"the oauth comparison", "mcp,oauth", []string{"b", "c/mcp", "c/oauth", "cm/mcp", "cm/oauth", "cm7/mcp", "g/mcp", "gm/mcp", "gm7/mcp"}, ""},
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
	// An MCP call's path argument is in its body, fresh per request.
	for _, s := range []*scenario{gm("mcp"), gm7("mcp")} {
		if b := s.body("t7", 41); !s.perRequest() || !strings.Contains(b, `"path":"/item/`+s.Letter+`-t7-41"`) || strings.Contains(b, "{") && strings.Contains(b, "{i}") {
			t.Errorf("%s: body %s, per request %v; want its path argument /item/%s-t7-41", s.Key, b, s.perRequest(), s.Letter)
		}
	}
	if c("nokey").perRequest() || d("nokey").perRequest() || !dk("nokey").perRequest() || !g("nokey").perRequest() {
		t.Error("perRequest: c and d are fixed, dk and g per request")
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

// TestOAuthScenarios: each scenario on the OAuth site has its twin under
// identity header on the mcp site (same request, same door), and a
// target holds it to at most that twin + 30 µs.
func TestOAuthScenarios(t *testing.T) {
	all := scenarios()
	byKey := map[string]*scenario{}
	for _, s := range all {
		byKey[s.Key] = s
	}
	n := 0
	for _, s := range all {
		if !siteNamed(s.Site).OAuth || siteNamed(s.Site).StaticOf != "" {
			continue
		}
		n++
		twin := byKey[s.Letter+"/mcp"]
		if twin == nil {
			t.Errorf("%s: no %s/mcp under identity header", s.Key, s.Letter)
			continue
		}
		if twin.Method != s.Method || twin.Path != s.Path || twin.Body != s.Body || twin.Want != s.Want {
			t.Errorf("%s differs from %s beyond the identity", s.Key, twin.Key)
		}
		found := false
		for _, tg := range targets {
			if tg.Key == s.Key && tg.Of == twin.Key && tg.Kind == kindVs && tg.Limit == 30 {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no target of at most %s + 30 µs", s.Key, twin.Key)
		}
	}
	if n != 2 {
		t.Errorf("%d scenarios on OAuth sites, want 2 (the HTTP door and MCP)", n)
	}
	if !usesOAuth([]*scenario{all[0], byKey["cm/oauth"]}) || usesOAuth([]*scenario{all[0], byKey["cm/mcp"]}) {
		t.Errorf("usesOAuth does not tell a list with an OAuth scenario from one without")
	}
}

// TestCredentialScenarios: each scenario on a site with a credential
// policy has its twin on the site's static twin (same request, same
// door, same identity mode), so the page's comparison is like for like.
func TestCredentialScenarios(t *testing.T) {
	byKey := map[string]*scenario{}
	for _, s := range scenarios() {
		byKey[s.Key] = s
	}
	n := 0
	for _, s := range scenarios() {
		st := siteNamed(s.Site)
		if st.StaticOf == "" {
			continue
		}
		n++
		twin := byKey[s.Letter+"/"+st.StaticOf]
		if twin == nil {
			t.Errorf("%s: no twin %s/%s", s.Key, s.Letter, st.StaticOf)
			continue
		}
		if twin.Method != s.Method || twin.Path != s.Path || twin.Body != s.Body || twin.Want != s.Want ||
			siteNamed(twin.Site).OAuth != st.OAuth {
			t.Errorf("%s differs from %s beyond the credential policy", s.Key, twin.Key)
		}
	}
	if n != 2 {
		t.Errorf("%d scenarios on credential sites, want 2 (exchange, assertion)", n)
	}
}

func TestWithBearer(t *testing.T) {
	h := agentHeader(scopeRead, "Content-Type", "application/json", "authorization", "Basic x")
	got := withBearer(h, "a.b.c")
	want := map[string]string{"Authorization": "Bearer a.b.c", "Content-Type": "application/json"}
	if len(got) != len(want) {
		t.Fatalf("withBearer = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("withBearer: %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if h["Agent-ID"] != agentID || h["Authority-Scope"] != scopeRead {
		t.Errorf("withBearer changed the scenario's own header fields: %v", h)
	}
}
