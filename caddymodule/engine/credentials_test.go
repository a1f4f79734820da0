package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestCredentialReasonsInCatalog: the reason tokens and statuses the
// upstreamauth policies answer are the catalog's (docs/troubleshooting.md).
func TestCredentialReasonsInCatalog(t *testing.T) {
	for _, tc := range []struct {
		token  string
		status int
	}{
		{upstreamauth.ReasonCredentialMissing, upstreamauth.StatusCredentialMissing},
		{upstreamauth.ReasonCredentialUnavailable, upstreamauth.StatusCredentialUnavailable},
		{upstreamauth.ReasonExchangeRefused, upstreamauth.StatusExchangeRefused},
		{upstreamauth.ReasonExchangeMisconfigured, upstreamauth.StatusExchangeMisconfigured},
		{upstreamauth.ReasonIssuerUnavailable, upstreamauth.StatusIssuerUnavailable},
	} {
		cat := agtp.Lookup(tc.token)
		if len(cat) != 1 || cat[0].Status != tc.status {
			t.Errorf("reason %q status %d: catalog has %+v", tc.token, tc.status, cat)
		}
	}
}

func TestCredentialRefusal(t *testing.T) {
	e, extra := credentialRefusal(&upstreamauth.Refusal{Upstream: "hotel", Reason: upstreamauth.ReasonCredentialMissing,
		Status: 424, Explanation: "upstream hotel (credentials per_agent): the gateway keeps no credential for this agent"}, "get-room")
	if e.Status != 424 || e.Reason != "upstream-credential-missing" || e.Retryable || extra != nil ||
		e.Fields["upstream"] != "hotel" || e.Fields["step"] != "get-room" || strings.Count(e.Explanation, "nothing was") != 1 ||
		!strings.Contains(e.Explanation, "nothing was run") {
		t.Fatalf("%+v %v", e, extra)
	}
	e, extra = credentialRefusal(&upstreamauth.Refusal{Upstream: "hotel", Reason: agtp.IssuerUnavailable.Token, Status: 503,
		RetryAfter: 1500 * time.Millisecond, Explanation: "down"}, "s")
	if e.Status != 503 || !e.Retryable || extra["Retry-After"] != "2" || e.Fields["retry_after_seconds"] != 2 {
		t.Fatalf("%+v %v", e, extra)
	}
}

func TestStaticHeader(t *testing.T) {
	t.Setenv("RCNS_TEST_KEY", "k1")
	h, err := staticHeader(map[string]string{"X-Api-Key": "pre-{env.RCNS_TEST_KEY}-post"})
	if err != nil || h.Get("X-Api-Key") != "pre-k1-post" {
		t.Fatalf("%v %v", h, err)
	}
	for _, in := range []map[string]string{
		{"X-Api-Key": "{env.RCNS_TEST_UNSET_VARIABLE}"},
		{"X-Api-Key": "{env.RCNS_TEST_KEY"},
		{"Bad Name": "v"},
		{"X": ""},
	} {
		if _, err := staticHeader(in); err == nil {
			t.Errorf("%v: no error", in)
		}
	}
}

func TestNewCredentialPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		cc   *CredentialsConfig
		kind upstreamauth.Kind
		err  string
	}{
		{"nil", nil, upstreamauth.KindStatic, ""},
		{"static", &CredentialsConfig{Policy: "static"}, upstreamauth.KindStatic, ""},
		{"static dir", &CredentialsConfig{Policy: "static", Dir: "/tmp"}, "", "takes no dir"},
		{"per_agent dir", &CredentialsConfig{Policy: "per_agent", Dir: t.TempDir()}, upstreamauth.KindPerAgent, ""},
		{"per_owner env", &CredentialsConfig{Policy: "per_owner", Header: map[string]string{"Authorization": "Bearer {env.T_{owner}}"}}, upstreamauth.KindPerOwner, ""},
		{"unknown", &CredentialsConfig{Policy: "magic"}, "", "is not one of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newCredentialPolicy("hotel", tc.cc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "hotel") {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil || p.Kind() != tc.kind {
				t.Fatalf("%v %v", p, err)
			}
		})
	}
}

// TestCredentialSourceBroken: a per_agent dir that goes away at run time
// answers 503 upstream-credential-unavailable (Retry-After, no path in
// the body), logs a bounded WARN line with the cause, and counts in
// caddy_rcns_upstream_credential_refusals_total by upstream and reason;
// the agent's own missing file stays 424 upstream-credential-missing.
func TestCredentialSourceBroken(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "pa")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, testAgent), []byte("secret-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	te := newTestEngine(t, func(c *Config) {
		c.Upstreams["bench"].Credentials = &CredentialsConfig{Policy: CredentialsPerAgent, Dir: dir}
	})
	core, logs := observer.New(zap.DebugLevel)
	te.logger = zap.New(core)
	count := func(reason string) float64 {
		return testutil.ToFloat64(te.metrics.credentialRefusals.WithLabelValues("bench", reason))
	}
	if a := te.do(t, "FETCH", "/items/1", nil); a.Status != 200 {
		t.Fatalf("with the dir: %s", a)
	}
	if err := os.Rename(filepath.Join(dir, testAgent), filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	if a := te.do(t, "FETCH", "/items/1", nil); a.Status != 424 || a.str("reason") != upstreamauth.ReasonCredentialMissing {
		t.Fatalf("no file for the agent: %s", a)
	}
	if count(upstreamauth.ReasonCredentialMissing) != 1 || logs.FilterMessage("upstream credential refused").FilterLevelExact(zap.InfoLevel).Len() != 1 {
		t.Errorf("missing: counted %v, logs %v", count(upstreamauth.ReasonCredentialMissing), logs.All())
	}
	if err := os.Rename(dir, dir+".bak"); err != nil {
		t.Fatal(err)
	}
	const n = 3 * LogBurst
	for i := range n {
		a := te.do(t, "FETCH", "/items/1", nil)
		if a.Status != 503 || a.str("reason") != upstreamauth.ReasonCredentialUnavailable || a.header("Retry-After") != "30" ||
			a.body["retryable"] != true || strings.Contains(string(a.Body), base) {
			t.Fatalf("request %d, dir gone: %s (Retry-After %q)", i, a, a.header("Retry-After"))
		}
	}
	if got := count(upstreamauth.ReasonCredentialUnavailable); got != n {
		t.Errorf("unavailable counted %v times, want %d", got, n)
	}
	warns := logs.FilterMessage("upstream credential unavailable").FilterLevelExact(zap.WarnLevel)
	if warns.Len() == 0 || warns.Len() > LogBurst {
		t.Fatalf("%d WARN lines for %d refusals, want 1..%d", warns.Len(), n, LogBurst)
	}
	f := warns.All()[0].ContextMap()
	if cause, _ := f["cause"].(string); !strings.Contains(cause, dir) || f["upstream"] != "bench" || f["reason"] != upstreamauth.ReasonCredentialUnavailable {
		t.Errorf("WARN line fields: %v", f)
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.ContextMap()), "secret-value") {
			t.Errorf("a log line names the secret: %v", e.ContextMap())
		}
	}
}
