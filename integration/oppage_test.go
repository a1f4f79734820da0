package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// The operator page (docs/operator-guide.md "The operator page") in
// headless Chromium (Debian's chromium, installed by make deps into
// .tools/bin): the page a real browser renders lists what the gateway
// holds (contracts minted here, a claim held in flight, chain heads, a
// refusal), its revoke form, clicked in the browser, revokes a contract
// as a REVOKE by the operator, and cross-site or tokenless POSTs are
// refused. Screenshots go to artifacts/operator-page/ at the repository
// root, which CI keeps (.ci/run).

// opToken is the operator page's bearer token in these tests.
const opToken = "it-operator-token-0123456789"

// opPath is where the tests serve the page.
const opPath = "/rcns/ops"

// chromiumEnv is the environment of a Chromium the tests start from the
// command line: this process's, with TMPDIR a directory of the test's
// own (the chromedp one gets the same through chromedp.Env). Chromium
// makes the folder of its singleton socket there, which it leaves
// behind when killed: /tmp/org.chromium.Chromium.* piled up, one a run
// (helper-127).
func chromiumEnv(t *testing.T) []string {
	return append(os.Environ(), "TMPDIR="+t.TempDir())
}

// chromiumBin is the browser the tests drive.
func chromiumBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(repoRoot, ".tools", "bin", "chromium")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("chromium not found at %s: run `make deps` (scripts/install-chromium.sh)", bin)
	}
	return bin
}

// artifactDir is where screenshots go (created).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot, "artifacts", "operator-page")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOperatorPage: the page behind its access rule, what it lists, a
// revoke clicked in Chromium, and the cross-site refusals.
func TestOperatorPage(t *testing.T) {
	bin := chromiumBin(t)
	recDir := t.TempDir()
	js := startJSONServer(t, hotelDB)
	hold := startHoldingProxy(t, js.URL)
	extra := fmt.Sprintf(`		records_dir %s
		operator_page %s {
			allow 127.0.0.1/32 ::1
			bearer {env.RCNS_OPERATOR_TOKEN}
			operator sre-on-call
			max_rows 20
		}`, recDir, opPath)
	g := startGatewayEnv(t, fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", hold.URL,
		"EXTRA", extra, "LEGACY", js.URL), []string{"RCNS_OPERATOR_TOKEN=" + opToken})
	pageURL := g.URL + opPath

	// The access rule: no credential 401, a wrong one 401.
	for _, c := range []struct{ name, authz string }{{"no credential", ""}, {"wrong token", "Bearer nope"}} {
		t.Run("401 "+c.name, func(t *testing.T) {
			r := opGet(t, pageURL, c.authz)
			if r.StatusCode != 401 || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("GET %s with %q = %d (WWW-Authenticate %q), want 401 Bearer", opPath, c.authz, r.StatusCode, r.Header.Get("WWW-Authenticate"))
			}
		})
	}

	// State to look at: an Idempotency-Key claim held in flight (the
	// operator agent's BOOK, whose reservation write the proxy holds;
	// optimistic, so its contract is live meanwhile), a contract of A1,
	// and a refusal (A2 has no rcns:negotiate).
	heldc := make(chan *Resp, 1)
	go func() {
		r, err := tryDo(g, "BOOK", "/room", hdr(agentOP, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "held-op-1"), bookBody())
		if err != nil {
			t.Errorf("held BOOK: %v", err)
		}
		heldc <- r
	}()
	select {
	case <-hold.entered:
	case <-time.After(requestTimeout):
		t.Fatal("the held BOOK /room never reached the reservation step")
	}
	defer func() {
		hold.Release()
		select {
		case <-heldc:
		case <-time.After(requestTimeout):
		}
	}()
	a1 := g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
	a1ID := str(assertContractBody(t, a1, 263, "BOOK", "/room", recipeName, recipeVer), "synthesis_id")
	opContracts := ownContracts(t, g, agentOP)
	if len(opContracts) != 1 {
		t.Fatalf("the operator agent holds %d contracts, want 1", len(opContracts))
	}
	opID := str(opContracts[0], "synthesis_id")
	refused := g.Do(t, "BOOK", "/room", hdr(agentA2, scopeNoRCNS, "Allow-RCNS", "true"), bookBody())
	refusedReason := str(assertErrorBody(t, refused, refused.Status, ""), "reason")
	// A1's chain head, as INSPECT target=chain_head reports it (asked
	// by the operator agent, so A1's chain does not move).
	ch := builtinCall(t, g, "INSPECT", agentOP, "inspect:all", map[string]any{"target": "chain_head", "agent_id": agentA1})
	wantStatus(t, ch, 200)
	a1Head := str(ch.Object(t), "audit_id")

	// Chromium renders the page with the bearer token set on its requests.
	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
			chromedp.DisableGPU, chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+t.TempDir()))...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	auth := func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			return chromedp.Void{}, err
		}
		_, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": "Bearer " + opToken}})
		return chromedp.Void{}, err
	}
	if err := chromedp.Do(ctx, auth, chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.ID("contracts-list"))); err != nil {
		t.Fatalf("chromium loading %s: %v", pageURL, err)
	}
	dom, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, "page.png")
	for _, want := range []struct{ what, re string }{
		{"A1's contract", `data-synthesis-id="` + a1ID + `"`},
		{"the operator agent's contract", `data-synthesis-id="` + opID + `"`},
		{"A1 in the by-agent counts", `data-agent-id="` + agentA1 + `"`},
		{"the held claim", `class="claim" data-agent-id="` + agentOP + `" data-key="held-op-1"`},
		{"A1's chain head", `data-agent-id="` + agentA1 + `" data-node-id="[^"]*" data-audit-id="` + a1Head + `"`},
		{"the refusal's reason", `data-reason="` + regexp.QuoteMeta(refusedReason) + `"`},
		{"the store", `id="store-kind">memory`},
		{"the operator", `id="operator">sre-on-call`},
		{"a revoke form", `id="revoke-` + a1ID + `"`},
	} {
		if !regexp.MustCompile(want.re).MatchString(dom) {
			t.Errorf("the page Chromium rendered lacks %s (%s)", want.what, want.re)
		}
	}
	if n := len(regexp.MustCompile(`<tr class="contract"`).FindAllString(dom, -1)); n != 2 {
		t.Errorf("the page lists %d contracts, want 2", n)
	}
	if t.Failed() {
		t.Fatalf("page DOM:\n%s", dom)
	}

	// Cross-site POSTs are refused and revoke nothing: a form posted
	// from another origin, a fetch the browser marks cross-site, and a
	// POST without the page's token; a GET does not revoke.
	csrf := pageToken(t, pageURL)
	form := url.Values{"csrf": {csrf}, "synthesis_id": {opID}, "reason": {"cross-site"}}
	for _, c := range []struct {
		name   string
		form   url.Values
		header map[string]string
		status int
	}{
		{"another Origin", form, map[string]string{"Origin": "http://evil.example"}, 403},
		{"Origin null", form, map[string]string{"Origin": "null"}, 403},
		{"Sec-Fetch-Site cross-site", form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": g.URL}, 403},
		{"no token", url.Values{"synthesis_id": {opID}}, map[string]string{"Origin": g.URL}, 403},
		{"a forged token", url.Values{"csrf": {strings.Repeat("A", 54)}, "synthesis_id": {opID}}, nil, 403},
		{"no credential", form, map[string]string{"Authorization": ""}, 401},
	} {
		t.Run("refused "+c.name, func(t *testing.T) {
			r := opPost(t, pageURL+"/revoke", c.form, c.header)
			if r.StatusCode != c.status {
				t.Fatalf("POST %s/revoke (%s) = %d, want %d", opPath, c.name, r.StatusCode, c.status)
			}
		})
	}
	if r := opGet(t, pageURL+"/revoke?"+form.Encode(), "Bearer "+opToken); r.StatusCode != 405 {
		t.Errorf("GET %s/revoke = %d, want 405", opPath, r.StatusCode)
	}
	if len(ownContracts(t, g, agentOP)) != 1 {
		t.Fatal("a refused POST revoked the operator agent's contract")
	}

	// Revoke A1's contract by clicking its form's button in Chromium.
	for i, step := range []chromedp.Action[chromedp.Void]{
		chromedp.SendKeys(chromedp.CSS(`tr[data-synthesis-id="`+a1ID+`"] input[name=reason]`), "revoked from the operator page"),
		chromedp.Click(chromedp.CSS(`tr[data-synthesis-id="` + a1ID + `"] button`)),
		chromedp.WaitVisible(chromedp.ID("notice-done")),
	} {
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		err := chromedp.Do(sctx, step)
		scancel()
		if err != nil {
			t.Logf("caddy output:\n%s", g.Output())
			t.Fatalf("revoking in chromium, step %d: %v", i, err)
		}
	}
	notice, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.ID("notice-done")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notice, a1ID) || !strings.Contains(notice, "revoked by sre-on-call") {
		t.Errorf("notice after revoke = %s", notice)
	}
	shot(t, ctx, "after-revoke.png")
	after, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(after, `data-synthesis-id="`+a1ID+`"`) {
		t.Errorf("the page still lists the revoked contract")
	}

	// The gateway agrees: A1 holds no contract, presenting it is 464
	// contract-revoked, its lifecycle has an rcns_revoke naming the
	// operator, and the negotiation log a revoke record by the operator.
	if cs := contracts(t, g, agentA1); len(cs) != 0 {
		t.Errorf("A1 still holds %v", contractIDs(cs))
	}
	pr := g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Contract-Synthesized", a1ID), bookBody())
	assert464(t, pr, "contract-revoked")
	lc := builtinCall(t, g, "INSPECT", agentA1, scopeAll, map[string]any{"target": "lifecycle"})
	wantStatus(t, lc, 200)
	if !strings.Contains(string(lc.Body), `rcns_revoke`) {
		t.Errorf("A1's lifecycle has no rcns_revoke:\n%s", lc)
	}
	rec := revokeRecord(t, recDir, a1ID)
	for k, v := range map[string]any{"kind": "revoke", "outcome": "accepted", "agent_id": agentA1, "actor": "sre-on-call",
		"actor_kind": "operator", "operator_access": "bearer", "binding": "operator-page", "reason": "revoked from the operator page"} {
		if rec[k] != v {
			t.Errorf("revoke record %s = %v, want %v (record %v)", k, rec[k], v, rec)
		}
	}
	if str(rec, "granted", "state") != "revoked" {
		t.Errorf("revoke record granted = %v", rec["granted"])
	}
	// The log with the operator's record verifies as a whole.
	if out, err := exec.Command(caddyBin, "rcns", "verify-log", recDir).CombinedOutput(); err != nil {
		t.Errorf("caddy rcns verify-log %s: %v\n%s", recDir, err, out)
	}
	if len(ownContracts(t, g, agentOP)) != 1 {
		t.Error("revoking A1's contract ended the operator agent's")
	}
}

// ownContracts lists the contracts agent originated (DISCOVER
// /contracts lists every agent's to a caller with inspect:all).
func ownContracts(t *testing.T, g *Gateway, agent string) []any {
	t.Helper()
	var own []any
	for _, c := range contracts(t, g, agent) {
		if str(c, "originating_agent_id") == agent {
			own = append(own, c)
		}
	}
	return own
}

// shot saves a full-page screenshot of the browser's page.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// opClient is the tests' plain HTTP client for the page (no redirects
// followed: a revoke answers 303).
var opClient = &http.Client{Timeout: requestTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// opGet GETs url with Authorization authz ("" none), body read.
func opGet(t *testing.T, u, authz string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := opClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

// opPost POSTs form to u with the bearer token and header (a header
// given "" is removed).
func opPost(t *testing.T, u string, form url.Values, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+opToken)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := opClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// pageToken loads the page with the bearer token and returns its
// revoke forms' CSRF token.
func pageToken(t *testing.T, u string) string {
	t.Helper()
	r := opGet(t, u, "Bearer "+opToken)
	body, _ := io.ReadAll(r.Body)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	if r.StatusCode != 200 || m == nil {
		t.Fatalf("GET %s = %d with no CSRF token:\n%s", u, r.StatusCode, body)
	}
	return string(m[1])
}

// revokeRecord finds the negotiation record of kind revoke for the
// contract id under recDir.
func revokeRecord(t *testing.T, recDir, id string) map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(recDir, "negotiations", "*.jsonl"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			if rec["kind"] == "revoke" && str(rec, "requested", "synthesis_id") == id {
				return rec
			}
		}
	}
	t.Fatalf("no revoke record for %s in %s/negotiations (%v)", id, recDir, files)
	return nil
}

// TestOperatorPageRedis: over store redis the page's Store section
// follows Redis: reachable with a ping time and INFO memory, full once
// Redis refused a write over maxmemory, unreachable while it is
// stopped. The page is rendered by the chromium command line (the rule
// here is loopback alone, so no header is needed): --dump-dom for the
// DOM, --screenshot for the artefact.
func TestOperatorPageRedis(t *testing.T) {
	bin := chromiumBin(t)
	srv, topo := startSingleRedis(t)
	js := startJSONServer(t, hotelDB)
	extra := storeBlock(topo.lines, "oppage") + "\t\toperator_page " + opPath + "\n"
	g := startGateway(t, fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", js.URL,
		"EXTRA", extra, "LEGACY", js.URL))
	pageURL := g.URL + opPath
	dumpDOM := func(t *testing.T) string {
		t.Helper()
		cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir="+t.TempDir(), "--dump-dom", pageURL)
		cmd.Env = chromiumEnv(t)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom %s: %v", pageURL, err)
		}
		return string(out)
	}
	cell := func(dom, id string) string {
		m := regexp.MustCompile(`id="` + id + `">(.*?)</td>`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no #%s in the page:\n%s", id, dom)
		}
		return m[1]
	}

	dom := dumpDOM(t)
	if k := cell(dom, "store-kind"); !strings.Contains(k, "redis") || !strings.Contains(k, srv.Addr()) {
		t.Errorf("store kind %q, want redis at %s", k, srv.Addr())
	}
	if r := cell(dom, "store-reachable"); !strings.Contains(r, "yes") || !strings.Contains(r, "ping") {
		t.Errorf("reachable %q, want yes with a ping time", r)
	}
	if f := cell(dom, "store-full"); !strings.HasPrefix(f, "no") || !strings.Contains(f, "MiB") {
		t.Errorf("full %q, want no, with INFO memory's used", f)
	}

	// Over maxmemory, a keyed request's claim is refused (503, nothing
	// runs) and the page says full.
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	r := g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", "oom-1"), bookBody())
	assertErrorBody(t, r, 503, "store-unavailable")
	dom = dumpDOM(t)
	if f := cell(dom, "store-full"); !strings.Contains(f, "full") {
		t.Errorf("full %q after an OOM refusal, want full", f)
	}
	shotCLI(t, bin, pageURL, "redis-full.png")
	if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}

	// Stopped: the page still renders, and says so.
	srv.Stop()
	dom = dumpDOM(t)
	if r := cell(dom, "store-reachable"); !strings.Contains(r, "no") {
		t.Errorf("reachable %q with Redis stopped, want no", r)
	}
	if !strings.Contains(dom, `id="contracts-error"`) {
		t.Errorf("the contracts section does not say the store did not answer")
	}
	shotCLI(t, bin, pageURL, "redis-down.png")
	srv.Restart()
}

// shotCLI screenshots u with the chromium command line into the
// artefact directory.
func shotCLI(t *testing.T, bin, u, name string) {
	t.Helper()
	path := filepath.Join(artifactDir(t), name)
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir="+t.TempDir(), "--hide-scrollbars",
		"--window-size=1400,1100", "--screenshot="+path, u)
	cmd.Env = chromiumEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", path, err)
	}
	t.Logf("screenshot: %s", path)
}
