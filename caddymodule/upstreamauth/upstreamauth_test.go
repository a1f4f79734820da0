package upstreamauth

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	agentA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	agentB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestParseTemplate(t *testing.T) {
	for _, tc := range []struct {
		name, text, err string
		secret, envID   bool
	}{
		{name: "literal", text: "Bearer abc"},
		{name: "secret", text: "Bearer {secret}", secret: true},
		{name: "env per agent", text: "Bearer {env.HOTEL_{agent}}", envID: true},
		{name: "env per owner", text: "{env.X_{owner}_Y}", envID: true},
		{name: "env fixed", text: "{env.X}"},
		{name: "unknown", text: "{http.request.header.X}", err: "unknown placeholder"},
		{name: "unclosed env", text: "{env.X", err: "not closed"},
		{name: "empty env", text: "{env.}", err: "names no variable"},
		{name: "secret in env", text: "{env.{secret}}", err: "{secret} inside"},
		{name: "env in env", text: "{env.{env.X}}", err: "inside an {env"},
		{name: "stray close", text: "a}b", err: "closes no placeholder"},
		{name: "lone open", text: "a{b", err: "unknown placeholder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, err := parseTemplate(tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tm.usesSecret != tc.secret || tm.usesEnvPerID != tc.envID {
				t.Fatalf("usesSecret %v usesEnvPerID %v", tm.usesSecret, tm.usesEnvPerID)
			}
		})
	}
}

func TestSafeID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{agentA, true}, {"alice", true}, {"org:alice.smith", true},
		{"", false}, {".", false}, {"..", false}, {"a..b", false}, {"../x", false},
		{"a/b", false}, {`a\b`, false}, {"auth0|123", false}, {"a\x00", false}, {strings.Repeat("a", 257), false},
	} {
		if got := SafeID(tc.id); got != tc.ok {
			t.Errorf("SafeID(%q) = %v", tc.id, got)
		}
	}
}

func resolve(t *testing.T, p Policy, c Caller) (http.Header, *Refusal) {
	t.Helper()
	cr, r := p.Resolve(context.Background(), c, nil)
	if r == nil && cr.Kind != p.Kind() {
		t.Fatalf("kind %q, policy %q", cr.Kind, p.Kind())
	}
	return cr.Header, r
}

func TestPerAgentDir(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(filepath.Dir(dir), "outside-secret")
	must(t, os.WriteFile(filepath.Join(dir, agentA), []byte("token-a\n"), 0o600))
	must(t, os.WriteFile(outside, []byte("leak"), 0o600))
	t.Cleanup(func() { os.Remove(outside) })
	must(t, os.Symlink(outside, filepath.Join(dir, agentB)))
	p, err := NewPerCaller(PerCallerConfig{Upstream: "hotel", Kind: KindPerAgent, Dir: dir})
	must(t, err)

	h, r := resolve(t, p, Caller{AgentID: agentA})
	if r != nil || h.Get("Authorization") != "Bearer token-a" {
		t.Fatalf("agent A: %v %v", h, r)
	}
	// A symbolic link out of the directory is never followed: the
	// operator's store is broken (503 unavailable), nothing leaks.
	if _, r := resolve(t, p, Caller{AgentID: agentB}); r == nil || r.Reason != ReasonCredentialUnavailable || r.Status != 503 ||
		!strings.Contains(r.Explanation, "hotel") || strings.Contains(r.Explanation+r.Cause, "leak") {
		t.Fatalf("agent B via symlink: %+v", r)
	}
	for _, id := range []string{"", "../outside-secret", "..", "x/../" + agentA} {
		if _, r := resolve(t, p, Caller{AgentID: id}); r == nil {
			t.Fatalf("id %q resolved", id)
		}
	}
	// Rotation: the file is read at call time.
	must(t, os.WriteFile(filepath.Join(dir, agentA), []byte("token-a2"), 0o600))
	if h, _ := resolve(t, p, Caller{AgentID: agentA}); h.Get("Authorization") != "Bearer token-a2" {
		t.Fatalf("after rotation: %v", h)
	}
}

// TestPerAgentDirBroken: the caller's own missing file is 424
// upstream-credential-missing; a source the gateway cannot read is 503
// upstream-credential-unavailable with Retry-After, its explanation
// naming neither path nor secret and its Cause (for the log) the path
// and error.
func TestPerAgentDirBroken(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "pa")
	must(t, os.Mkdir(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, agentA), []byte("token-a"), 0o600))
	p, err := NewPerCaller(PerCallerConfig{Upstream: "hotel", Kind: KindPerAgent, Dir: dir})
	must(t, err)
	unavailable := func(name string, c Caller, cause string) {
		t.Helper()
		_, r := resolve(t, p, c)
		if r == nil || r.Reason != ReasonCredentialUnavailable || r.Status != StatusCredentialUnavailable || r.RetryAfter != CredentialUnavailableRetryAfter {
			t.Fatalf("%s: %+v, want 503 %s with Retry-After", name, r, ReasonCredentialUnavailable)
		}
		if strings.Contains(r.Explanation, base) || strings.Contains(r.Explanation, "token-") || !strings.Contains(r.Explanation, "hotel") {
			t.Errorf("%s: explanation %q names a path or secret, or not the upstream", name, r.Explanation)
		}
		if !strings.Contains(r.Cause, cause) || strings.Contains(r.Cause, "token-") {
			t.Errorf("%s: cause %q lacks %q or names the secret", name, r.Cause, cause)
		}
	}
	// Another agent's file is absent: the agent's problem, 424.
	if _, r := resolve(t, p, Caller{AgentID: agentB}); r == nil || r.Reason != ReasonCredentialMissing || r.Status != 424 || r.Cause != "" {
		t.Fatalf("no file for agent B: %+v", r)
	}
	// Empty, oversized, a directory in place of a file.
	must(t, os.WriteFile(filepath.Join(dir, agentB), []byte(" \n"), 0o600))
	unavailable("empty file", Caller{AgentID: agentB}, "is empty")
	must(t, os.WriteFile(filepath.Join(dir, agentB), []byte(strings.Repeat("x", MaxSecretFileBytes+1)), 0o600))
	unavailable("oversized file", Caller{AgentID: agentB}, "larger than")
	must(t, os.Remove(filepath.Join(dir, agentB)))
	must(t, os.Mkdir(filepath.Join(dir, agentB), 0o700))
	unavailable("directory", Caller{AgentID: agentB}, "not a regular file")
	// Unreadable file (permission bits do not bind root).
	if os.Geteuid() != 0 {
		must(t, os.Chmod(filepath.Join(dir, agentA), 0))
		unavailable("unreadable file", Caller{AgentID: agentA}, "permission denied")
		must(t, os.Chmod(filepath.Join(dir, agentA), 0o600))
	}
	// The directory moved away at run time (an unmounted volume): every
	// agent, even one whose file was there, gets 503, not 424.
	must(t, os.Rename(dir, dir+".bak"))
	unavailable("dir gone, agent A", Caller{AgentID: agentA}, dir)
	unavailable("dir gone, agent B", Caller{AgentID: agentB}, "no such file")
	must(t, os.Rename(dir+".bak", dir))
	if h, r := resolve(t, p, Caller{AgentID: agentA}); r != nil || h.Get("Authorization") != "Bearer token-a" {
		t.Fatalf("dir back: %v %+v", h, r)
	}
}

func TestPerOwnerMapping(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "owners.yaml")
	must(t, os.WriteFile(file, []byte("alice: s-alice\nbob:\n  X-Api-Key: k-bob\n  X-User: bob\n"), 0o600))
	p, err := NewPerCaller(PerCallerConfig{Upstream: "hotel", Kind: KindPerOwner, File: file,
		Header: map[string]string{"authorization": "Token {secret}", "X-Acting-Agent": "{agent}"}})
	must(t, err)
	h, r := resolve(t, p, Caller{AgentID: agentA, OwnerID: "alice"})
	if r != nil || h.Get("Authorization") != "Token s-alice" || h.Get("X-Acting-Agent") != agentA {
		t.Fatalf("alice: %v %v", h, r)
	}
	h, r = resolve(t, p, Caller{AgentID: agentA, OwnerID: "bob"})
	if r != nil || h.Get("X-Api-Key") != "k-bob" || h.Get("X-User") != "bob" || h.Get("Authorization") != "" {
		t.Fatalf("bob: %v %v", h, r)
	}
	for _, c := range []Caller{{AgentID: agentA}, {AgentID: agentA, OwnerID: "carol"}} {
		_, r := resolve(t, p, c)
		if r == nil || r.Reason != ReasonCredentialMissing || strings.Contains(r.Explanation, "s-alice") {
			t.Fatalf("%+v: %+v", c, r)
		}
	}
}

func TestPerAgentEnv(t *testing.T) {
	t.Setenv("HOTEL_TOKEN_"+agentA, "env-a")
	p, err := NewPerCaller(PerCallerConfig{Upstream: "hotel", Kind: KindPerAgent,
		Header: map[string]string{"Authorization": "Bearer {env.HOTEL_TOKEN_{agent}}"}})
	must(t, err)
	if h, r := resolve(t, p, Caller{AgentID: agentA}); r != nil || h.Get("Authorization") != "Bearer env-a" {
		t.Fatalf("A: %v %v", h, r)
	}
	if _, r := resolve(t, p, Caller{AgentID: agentB}); r == nil || r.Reason != ReasonCredentialMissing || strings.Contains(r.Explanation, "HOTEL_TOKEN") {
		t.Fatalf("B: %+v", r)
	}
	t.Setenv("HOTEL_TOKEN_"+agentB, "bad\r\nX-Injected: 1")
	if _, r := resolve(t, p, Caller{AgentID: agentB}); r == nil {
		t.Fatal("a value with CR LF resolved")
	}
}

func TestNewPerCallerErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	must(t, os.WriteFile(bad, []byte(`["not", "an", "object"]`), 0o600))
	dup := filepath.Join(dir, "dup.yaml")
	must(t, os.WriteFile(dup, []byte("a: x\na: y\n"), 0o600))
	crlf := filepath.Join(dir, "crlf.json")
	must(t, os.WriteFile(crlf, []byte(`{"a": "x\r\ny"}`), 0o600))
	for _, tc := range []struct {
		name string
		cfg  PerCallerConfig
		err  string
	}{
		{"kind", PerCallerConfig{Kind: "static", Dir: dir}, "neither"},
		{"no source", PerCallerConfig{Kind: KindPerAgent}, "needs a source"},
		{"two sources", PerCallerConfig{Kind: KindPerAgent, Dir: dir, File: bad}, "exclusive"},
		{"secret without source", PerCallerConfig{Kind: KindPerAgent, Header: map[string]string{"A": "{secret} {env.X_{agent}}"}}, "no dir or file"},
		{"env without id", PerCallerConfig{Kind: KindPerAgent, Header: map[string]string{"A": "{env.X}"}}, "no per-caller secret"},
		{"bad header name", PerCallerConfig{Kind: KindPerAgent, Dir: dir, Header: map[string]string{"A B": "{secret}"}}, "not a header name"},
		{"missing dir", PerCallerConfig{Kind: KindPerAgent, Dir: filepath.Join(dir, "nope")}, "dir"},
		{"missing file", PerCallerConfig{Kind: KindPerAgent, File: filepath.Join(dir, "nope")}, "no such file"},
		{"array", PerCallerConfig{Kind: KindPerAgent, File: bad}, "not an object"},
		{"duplicate", PerCallerConfig{Kind: KindPerAgent, File: dup}, "twice"},
		{"crlf", PerCallerConfig{Kind: KindPerAgent, File: crlf}, "not a header value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Upstream = "hotel"
			_, err := NewPerCaller(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "hotel") {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestStatic(t *testing.T) {
	s := Static{Header: http.Header{"X-Key": {"k"}}}
	h, r := resolve(t, s, Caller{})
	if r != nil || h.Get("X-Key") != "k" {
		t.Fatalf("%v %v", h, r)
	}
	h.Set("X-Key", "changed")
	if s.Header.Get("X-Key") != "k" {
		t.Fatal("Resolve handed out its own header")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
