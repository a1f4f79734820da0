package recipes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

// authServer answers {"id": …} and records the Authorization header of
// every request it gets.
type authServer struct {
	mu   sync.Mutex
	seen []string
}

func (a *authServer) start(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Header.Get("Authorization"))
		a.mu.Unlock()
		fmt.Fprintf(w, `{"id":%q}`, strings.TrimPrefix(r.URL.Path, "/"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func (a *authServer) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.seen
	a.seen = nil
	return s
}

// settingsEndpoints are captureEndpoints with extra external_service
// members (indented two spaces) on both.
func settingsEndpoints(extra string) []string {
	return []string{
		endpointDoc("FETCH", "/alpha", "GET", "/a/{id}", extra),
		endpointDoc("FETCH", "/beta", "GET", "/b/{id}", extra),
	}
}

// TestPlanHoldsNoCallSettings: a captured plan carries no endpoint
// header (the static upstream credential) and no timeout, and rotating
// either leaves the plan (and its hash) as it was.
func TestPlanHoldsNoCallSettings(t *testing.T) {
	up := newUpstream(t, echoServer(t, "").URL)
	old, _ := buildSet(t, up, captureRecipe, settingsEndpoints("  headers: {Authorization: Bearer old-key, X-Tenant: t1}\n  timeout_seconds: 1\n")...)
	plan, hash, err := old.Plan()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"old-key", "Authorization", "X-Tenant", "headers", "timeout_seconds"} {
		if strings.Contains(string(plan), s) {
			t.Fatalf("the captured plan holds %q: %s", s, plan)
		}
	}
	rotated, _ := buildSet(t, up, captureRecipe, settingsEndpoints("  headers: {Authorization: Bearer new-key}\n  timeout_seconds: 5\n")...)
	if _, h, _ := rotated.Plan(); h != hash {
		t.Fatalf("rotating a header and a timeout changed the plan hash %s -> %s", hash, h)
	}
}

// TestRestoredStepTakesCurrentCallSettings: a contract minted under a
// configuration whose endpoints send "Bearer old-key" and wait 1 s,
// presented under one that sends "Bearer new-key" and waits 5 s, sends
// the new header and waits the new timeout, whether the new
// configuration loaded the recipe (its own recipe serves the plan) or
// only the endpoints (the plan is rebuilt); an endpoint that had no
// header at mint sends the one added since.
func TestRestoredStepTakesCurrentCallSettings(t *testing.T) {
	for _, tc := range []struct{ name, mint string }{
		{"rotated header", "  headers: {Authorization: Bearer old-key}\n  timeout_seconds: 1\n"},
		{"header added since", ""},
	} {
		for _, loaded := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/recipe loaded %v", tc.name, loaded), func(t *testing.T) {
				var as authServer
				up := newUpstream(t, as.start(t).URL)
				minted, _ := buildSet(t, up, captureRecipe, settingsEndpoints(tc.mint)...)
				plan, hash, err := minted.Plan()
				if err != nil {
					t.Fatal(err)
				}
				cur, eps := buildSet(t, up, captureRecipe, settingsEndpoints("  headers: {Authorization: Bearer new-key}\n  timeout_seconds: 5\n")...)
				var known []*Recipe
				if loaded {
					known = []*Recipe{cur}
				}
				rr := restoreOn(t, up, eps, known, hash, plan)
				if rr.UnavailableEndpoints() != nil || rr.MissingUpstreams() != nil {
					t.Fatalf("unavailable %v, missing %v; want none", rr.UnavailableEndpoints(), rr.MissingUpstreams())
				}
				for _, s := range rr.Steps {
					if got := s.Endpoint.Timeout(); got != 5*time.Second {
						t.Fatalf("step %s waits %v, want the current 5s", s.Name, got)
					}
				}
				if _, _, cf := rr.Execute(context.Background(), map[string]any{"id": "x"}, 10*time.Second); cf != nil {
					t.Fatal(cf)
				}
				if got := as.take(); !slices.Equal(got, []string{"Bearer new-key", "Bearer new-key"}) {
					t.Fatalf("upstream saw Authorization %q, want the current Bearer new-key on both steps", got)
				}
			})
		}
	}
}

// TestRestoredStepOfChangedEndpoint: a step whose endpoint the running
// configuration removed, or changed in what the step agreed to (here the
// upstream path), is unavailable: named, never called. A change of the
// endpoint's description (not a step term) leaves it bound.
func TestRestoredStepOfChangedEndpoint(t *testing.T) {
	var as authServer
	up := newUpstream(t, as.start(t).URL)
	minted, _ := buildSet(t, up, captureRecipe, captureEndpoints()...)
	plan, hash, err := minted.Plan()
	if err != nil {
		t.Fatal(err)
	}
	beta := endpointDoc("FETCH", "/beta", "GET", "/b/{id}", "")
	for _, tc := range []struct {
		name string
		eps  []string
		want []string
	}{
		{"path changed", []string{endpointDoc("FETCH", "/alpha", "GET", "/a2/{id}", ""), beta}, []string{"FETCH /alpha"}},
		{"removed", []string{beta}, []string{"FETCH /alpha"}},
		{"description changed", []string{strings.Replace(endpointDoc("FETCH", "/alpha", "GET", "/a/{id}", ""), "description: test endpoint", "description: reworded", 1), beta}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps := map[string]*Endpoint{}
			for _, src := range tc.eps {
				e := buildEndpoint(t, src, up)
				eps[e.Method+" "+e.Path] = e
			}
			rr := restoreOn(t, up, eps, nil, hash, plan)
			if got := rr.UnavailableEndpoints(); !slices.Equal(got, tc.want) {
				t.Fatalf("UnavailableEndpoints = %v, want %v", got, tc.want)
			}
			_, _, cf := rr.Execute(context.Background(), map[string]any{"id": "x"}, 5*time.Second)
			if tc.want == nil {
				if cf != nil {
					t.Fatal(cf)
				}
				return
			}
			if cf == nil || cf.Cause.Sent || !strings.Contains(cf.Cause.Explanation, "FETCH /alpha") {
				t.Fatalf("Execute = %v, want an unsent failure naming FETCH /alpha", cf)
			}
			if got := as.take(); len(got) != 0 {
				t.Fatalf("an unavailable step called the upstream %d times", len(got))
			}
		})
	}
}

// TestRestoreLegacyPlanIgnoresFrozenHeaders: a version-1 plan (as stored
// before this format, its endpoint documents holding headers and
// timeouts) restores to the version-2 plan without them: the step sends
// the running configuration's header, never the stored one, and the
// captured contract still resolves to the restored recipe.
func TestRestoreLegacyPlanIgnoresFrozenHeaders(t *testing.T) {
	var as authServer
	up := newUpstream(t, as.start(t).URL)
	r, eps := buildSet(t, up, captureRecipe, settingsEndpoints("  headers: {Authorization: Bearer new-key}\n")...)
	plan, hash, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(plan, &v); err != nil {
		t.Fatal(err)
	}
	v["version"] = 1
	for _, e := range v["endpoints"].([]any) {
		svc := e.(map[string]any)["external_service"].(map[string]any)
		svc["headers"] = map[string]any{"Authorization": "Bearer leaked-key"}
		svc["timeout_seconds"] = 1
	}
	raw, _ := json.Marshal(v)
	legacy, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	lhash := PlanHash(legacy)
	rr := restoreOn(t, up, eps, []*Recipe{r}, lhash, legacy)
	if p, h, _ := rr.Plan(); h != hash || strings.Contains(string(p), "leaked-key") {
		t.Fatalf("a legacy plan restores to plan %s (%s), want %s without its headers", h, p, hash)
	}
	cc := CapturedContract{SynthesisID: NewSynthesisID(), OriginatingAgentID: strings.Repeat("a", 64), PlanHash: lhash}
	if _, err := cc.Contract(rr); err != nil {
		t.Fatalf("the contract of a legacy plan: %v", err)
	}
	if _, _, cf := rr.Execute(context.Background(), map[string]any{"id": "x"}, 5*time.Second); cf != nil {
		t.Fatal(cf)
	}
	if got := as.take(); !slices.Equal(got, []string{"Bearer new-key", "Bearer new-key"}) {
		t.Fatalf("upstream saw Authorization %q, want the current Bearer new-key", got)
	}
	if rr.Steps[0].Endpoint.Timeout() != up.Timeout {
		t.Fatalf("step timeout %v, want the current endpoint's (its upstream's %v), not the stored 1s", rr.Steps[0].Endpoint.Timeout(), up.Timeout)
	}
}

// restoreOn restores the captured plan (hash, plan) with a Restorer
// over upstream "up" and the endpoints eps, known recipes loaded; it
// fails the test on any error.
func restoreOn(t *testing.T, up *Upstream, eps map[string]*Endpoint, known []*Recipe, hash string, plan []byte) *Recipe {
	t.Helper()
	rs, err := NewRestorer(methodPolicy(), map[string]*Upstream{"up": up}, endpointList(eps), known, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	rr, err := rs.Restore(hash, plan)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}
