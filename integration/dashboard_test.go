package integration

// The Grafana dashboard and the alert rules against a real Prometheus
// scraping a live gateway: every panel's query resolves, and every rule
// loads healthy.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// prometheusStartup bounds Prometheus's start (its TSDB on a fresh
	// directory, the rules loaded).
	prometheusStartup = 30 * time.Second
	// dashboardSettle bounds the wait for the scrapes after the traffic
	// to show in every panel (scrape and rule interval 1 s).
	dashboardSettle = 30 * time.Second
)

// TestDashboardQueriesResolve starts Debian's Prometheus (make deps
// installs it into .tools/bin), scraping a live gateway (the lab world
// with store redis, a rate limit and the MCP door) every second with
// docs/prometheus/alerts.yml loaded, sends the traffic every panel of
// docs/grafana/caddy-rcns.json charts (a legacy request passed through,
// a synthesis and its steps, a Tier B call, an upstream timeout, a rate
// limit refusal, an MCP tool call, built-ins and refusals), and checks
// through Prometheus's HTTP API that:
//
//   - every rule of alerts.yml is loaded with health ok;
//   - the dashboard's instance variable lists the gateway;
//   - every panel's query (with $instance the variable's All, .*, and
//     $__rate_interval 1m) evaluates and returns at least one series;
//   - the latency row tells legacy requests (binding http, kind
//     passthrough) from agent requests, with a number for each kind
//     the traffic caused, on the http and mcp doors.
//
// It does not depend on the door and runs in the HTTP door's pass only.
func TestDashboardQueriesResolve(t *testing.T) {
	promBin := filepath.Join(repoRoot, ".tools", "bin", "prometheus")
	if _, err := os.Stat(promBin); err != nil {
		t.Fatalf("the Prometheus server is missing (%v): run make deps", err)
	}
	_, redis := startSingleRedis(t)
	w := startLab(t, "optimistic", "\t\trate_limit rcns 3 3\n\t\tmcp\n"+redis.block())
	g := w.GW
	adminAddr := strings.TrimPrefix(g.AdminURL, "http://")

	// Prometheus: scrape the gateway's admin /metrics every second and
	// evaluate the shipped rules every second.
	dir := t.TempDir()
	rules := filepath.Join(repoRoot, "docs", "prometheus", "alerts.yml")
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: caddy-rcns
    metrics_path: /metrics
    static_configs:
      - targets: ['%s']
`, rules, adminAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	promURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	p := startProc(t, "prometheus", dir, nil, promBin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+strings.TrimPrefix(promURL, "http://"),
		"--log.level=warn")
	waitHTTP(t, p, promURL+"/-/ready", prometheusStartup)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.tail(50))
		}
	})

	// The rules: all of alerts.yml, each healthy.
	var rulesAnswer struct {
		Status string `json:"status"`
		Data   struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	wantRules := countRules(t, rules)
	waitFor(t, prometheusStartup, 200*time.Millisecond, "the rules evaluated", func() bool {
		promGet(t, promURL+"/api/v1/rules", &rulesAnswer)
		n := 0
		for _, gr := range rulesAnswer.Data.Groups {
			for _, r := range gr.Rules {
				if r.Health == "ok" {
					n++
				}
			}
		}
		return n == wantRules
	})

	// The traffic every panel charts.
	const readScope = "hotel:read"
	if r := g.DoHTTP(t, "GET", "/guests/"+demoGuest, nil, nil); r.Status != 200 {
		t.Fatalf("a legacy GET passed through = %d:\n%s", r.Status, r)
	}
	wantStatus(t, g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody()), 263)
	wantStatus(t, g.Do(t, "FETCH", "/guests/"+demoGuest, hdr(agentA1, readScope, "Idempotency-Key", fmt.Sprintf("dash-%d", time.Now().UnixNano())), nil), 200)
	assertNamedError(t, g.Do(t, "FETCH", "/slow", hdr(agentA1, readScope), nil), "upstream_timeout")
	assertErrorBody(t, g.Do(t, "BOOK", "/room", hdr(agentA2, scopeNoRCNS, "Allow-RCNS", "true"), bookBody()), 262, "scope-required")
	wantStatus(t, g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil), 200)
	limited := false
	for i := 0; i < 6 && !limited; i++ { // the budget is 3 evaluations; the synthesis spent one
		limited = gateNowhere(t, g, agentA1, scopeAll).Status == http.StatusTooManyRequests
	}
	if !limited {
		t.Fatal("no 429 within 6 gate evaluations under rate_limit rcns 3 3")
	}
	c := mcpConnect(t, g, "/mcp", agentA1, readScope)
	c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantSuccess(t, 200)

	// A histogram child appears with its first request, so rate() sees
	// that one as no increase: once Prometheus has scraped the children,
	// each kind of the latency row is sent again.
	waitFor(t, dashboardSettle, 200*time.Millisecond, "the request duration children scraped", func() bool {
		return len(promQuery(t, promURL, `caddy_rcns_request_duration_seconds_count{binding=~"http|mcp"}`)) >= 5
	})
	if r := g.DoHTTP(t, "GET", "/guests/"+demoGuest, nil, nil); r.Status != 200 {
		t.Fatalf("a legacy GET passed through = %d:\n%s", r.Status, r)
	}
	wantStatus(t, g.Do(t, "FETCH", "/guests/"+demoGuest, hdr(agentA1, readScope), nil), 200)
	wantStatus(t, g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil), 200)
	wantStatus(t, gateNowhere(t, g, agentA1, scopeAll), http.StatusTooManyRequests)
	c.call(t, "fetch_guest", map[string]any{"guest_id": demoGuest}, nil).wantSuccess(t, 200)

	// The dashboard's queries, as Grafana sends them with All selected.
	var dash struct {
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
				AllValue   string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "grafana", "caddy-rcns.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	allInstances := ".*"
	for _, v := range dash.Templating.List {
		if v.Name != "instance" {
			continue
		}
		allInstances = v.AllValue
		metric, ok := strings.CutPrefix(v.Definition, "label_values(")
		metric, _, _ = strings.Cut(metric, ",")
		if !ok || metric == "" {
			t.Fatalf("the instance variable is not a label_values query: %q", v.Definition)
		}
		var values struct {
			Data []string `json:"data"`
		}
		waitFor(t, dashboardSettle, 200*time.Millisecond, "the instance variable lists the gateway", func() bool {
			promGet(t, promURL+"/api/v1/label/instance/values?match[]="+url.QueryEscape(metric), &values)
			for _, v := range values.Data {
				if v == adminAddr {
					return true
				}
			}
			return false
		})
	}
	type query struct{ panel, expr string }
	var queries []query
	for _, pn := range dash.Panels {
		for _, tg := range pn.Targets {
			e := strings.ReplaceAll(tg.Expr, "$instance", allInstances)
			e = strings.ReplaceAll(e, "$__rate_interval", "1m")
			if strings.Contains(e, "$") {
				t.Errorf("panel %d %q: a variable the test does not set: %s", pn.ID, pn.Title, e)
				continue
			}
			queries = append(queries, query{fmt.Sprintf("%d %s", pn.ID, pn.Title), e})
		}
	}
	if len(queries) < 20 {
		t.Fatalf("the dashboard has %d queries; expected its 20 panels' at least", len(queries))
	}

	// Every query resolves once the traffic is scraped; the latency row
	// has a number for each kind sent.
	latency := map[string]bool{ // binding/kind the traffic caused
		"http/passthrough": false, "http/gate": false, "http/tier_b": false, "http/builtin": false, "mcp/tier_b": false,
	}
	var empty []string
	deadline := time.Now().Add(dashboardSettle)
	for {
		empty = empty[:0]
		for _, q := range queries {
			res := promQuery(t, promURL, q.expr)
			if len(res) == 0 {
				empty = append(empty, q.panel+": "+q.expr)
			}
			if strings.Contains(q.expr, "caddy_rcns_request_duration_seconds_bucket") {
				for _, s := range res {
					if !math.IsNaN(s.value) {
						latency[s.metric["binding"]+"/"+s.metric["kind"]] = true
					}
				}
			}
		}
		missing := []string{}
		for k, ok := range latency {
			if !ok {
				missing = append(missing, k)
			}
		}
		if len(empty) == 0 && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			t.Fatalf("after %s of scrapes, %d dashboard queries return no series:\n%s\nlatency row without a value for: %v",
				dashboardSettle, len(empty), strings.Join(empty, "\n"), missing)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// countRules is the number of rules (alert: lines) in the rule file.
func countRules(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "- alert:") {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("%s holds no alert", path)
	}
	return n
}

// promGet GETs a Prometheus API URL and decodes its JSON answer into
// out; it fails the test on a non-200 answer.
func promGet(t *testing.T, u string, out any) {
	t.Helper()
	resp, err := testClient.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d: %s", u, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, body)
	}
}

// promSample is one series of an instant query's vector.
type promSample struct {
	metric map[string]string
	value  float64
}

// promQuery evaluates expr now (an instant query); it fails the test
// when Prometheus refuses the query (a syntax error, an unknown
// function) or answers other than a vector.
func promQuery(t *testing.T, promURL, expr string) []promSample {
	t.Helper()
	var a struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	promGet(t, promURL+"/api/v1/query?query="+url.QueryEscape(expr), &a)
	if a.Status != "success" || a.Data.ResultType != "vector" {
		t.Fatalf("query %s: status %s, result type %s", expr, a.Status, a.Data.ResultType)
	}
	out := make([]promSample, 0, len(a.Data.Result))
	for _, r := range a.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %s: value %v: %v", expr, r.Value[1], err)
		}
		out = append(out, promSample{metric: r.Metric, value: v})
	}
	return out
}
