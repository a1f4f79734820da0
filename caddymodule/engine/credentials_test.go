package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
)

// TestCredentialReasonsInCatalog: the reason tokens and statuses the
// upstreamauth policies answer are the catalog's (docs/troubleshooting.md).
func TestCredentialReasonsInCatalog(t *testing.T) {
	for _, tc := range []struct {
		token  string
		status int
	}{
		{upstreamauth.ReasonCredentialMissing, upstreamauth.StatusCredentialMissing},
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
		e.Fields["upstream"] != "hotel" || e.Fields["step"] != "get-room" || !strings.Contains(e.Explanation, "nothing was run") {
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
