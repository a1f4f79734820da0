package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

const agent = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// runCLI runs the command line and returns status, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// keygenKey runs keygen for alg and returns the key path, keyid and
// public key parsed from the printed JWK.
func keygenKey(t *testing.T, alg string) (string, string, crypto.PublicKey) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "key.pem")
	code, out, errOut := runCLI("keygen", "-alg", alg, "-out", path)
	if code != 0 {
		t.Fatalf("keygen: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "keyid ") || !strings.HasPrefix(lines[1], "jwk ") {
		t.Fatalf("keygen output:\n%s", out)
	}
	kid := strings.TrimPrefix(lines[0], "keyid ")
	var jwk map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "jwk ")), &jwk); err != nil {
		t.Fatal(err)
	}
	if _, ok := jwk["d"]; ok {
		t.Fatal("keygen printed private key material")
	}
	pub, err := httpsig.PublicKeyFromJWK(jwk)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	// thumbprint agrees with keygen.
	code, out, errOut = runCLI("thumbprint", "-key", path)
	if code != 0 || strings.TrimSpace(out) != kid {
		t.Fatalf("thumbprint = %d %q %s, want %s", code, out, errOut, kid)
	}
	return path, kid, pub
}

// resolverFor registers pub under kid for agent.
func resolverFor(kid string, pub crypto.PublicKey) httpsig.KeyResolver {
	return func(id string) (string, crypto.PublicKey, string, bool) {
		if id != kid {
			return "", nil, "", false
		}
		alg, err := httpsig.Algorithm(pub)
		return alg, pub, agent, err == nil
	}
}

// TestKeygenSignVerify: keygen → thumbprint → sign → Verify, in
// process, for both algorithms.
func TestKeygenSignVerify(t *testing.T) {
	for _, alg := range []string{httpsig.AlgEd25519, httpsig.AlgECDSAP256SHA256} {
		t.Run(alg, func(t *testing.T) {
			path, kid, pub := keygenKey(t, alg)
			key, err := httpsig.LoadPrivateKey(path)
			if err != nil {
				t.Fatal(err)
			}
			body := []byte(`{"q":"tea"}`)
			now := time.Now()
			req, err := newSignedRequest(context.Background(), key, "SEARCH", "http://gw.example/catalog?page=2", body, func(h http.Header) {
				h.Set("Agent-ID", agent)
				h.Set("Authority-Scope", "catalog:read")
			}, now)
			if err != nil {
				t.Fatal(err)
			}
			in := req.Header.Get("Signature-Input")
			for _, want := range []string{`sig1=("@method" "@authority" "@path" "@query" "agent-id" "content-type" "content-digest" "authority-scope")`, `;nonce="`, `;alg="` + alg + `"`, `;keyid="` + kid + `"`} {
				if !strings.Contains(in, want) {
					t.Fatalf("Signature-Input %s lacks %s", in, want)
				}
			}
			res, err := httpsig.Verify(req, resolverFor(kid, pub), httpsig.VerifyOptions{Now: now, Body: body, ExpectOwner: agent})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Expires.Sub(res.Created); got != 60*time.Second {
				t.Fatalf("window = %v", got)
			}
		})
	}
}

// TestCall runs call against a 127.0.0.1 server that verifies every
// request with a replay cache and echoes what it verified.
func TestCall(t *testing.T) {
	for _, alg := range []string{httpsig.AlgEd25519, httpsig.AlgECDSAP256SHA256} {
		t.Run(alg, func(t *testing.T) {
			path, kid, pub := keygenKey(t, alg)
			cache := httpsig.NewReplayCache(100, nil)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				res, err := httpsig.Verify(r, resolverFor(kid, pub), httpsig.VerifyOptions{
					Body: body, ExpectOwner: r.Header.Get("Agent-ID"), Replay: cache,
				})
				w.Header().Set("Content-Type", "application/json")
				var e *httpsig.Error
				if errors.As(err, &e) {
					w.WriteHeader(http.StatusUnauthorized)
					json.NewEncoder(w).Encode(map[string]string{"reason": e.Reason, "detail": e.Detail})
					return
				}
				w.Header().Set("X-Verified-Key", res.KeyID)
				json.NewEncoder(w).Encode(map[string]any{
					"method": r.Method, "covered": res.Covered, "body": string(body),
					"contract": r.Header.Get("Contract-Synthesized"), "x-trace": r.Header.Get("X-Trace"),
				})
			}))
			defer srv.Close()
			if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
				t.Fatalf("server at %s", srv.URL)
			}

			args := []string{"call", "-key", path, "-agent-id", agent, "-scope", "orders:write", "-allow-rcns",
				"-idempotency-key", "idem-1", "-contract", "syn-42", "-H", "X-Trace: t-1",
				"BOOK", srv.URL + "/orders?dry=1", `{"item":"book"}`}
			for i := 0; i < 2; i++ { // a fresh nonce each time: never a replay
				code, out, errOut := runCLI(args...)
				if code != 0 {
					t.Fatalf("call: %d %s", code, errOut)
				}
				head, respBody, ok := strings.Cut(out, "\n\n")
				if !ok || !strings.HasPrefix(head, "HTTP/1.1 200 OK\n") {
					t.Fatalf("output:\n%s", out)
				}
				if !strings.Contains(head, "\nX-Verified-Key: "+kid) || !strings.Contains(head, "\nContent-Type: application/json") {
					t.Fatalf("headers:\n%s", head)
				}
				var got struct {
					Method   string   `json:"method"`
					Covered  []string `json:"covered"`
					Body     string   `json:"body"`
					Contract string   `json:"contract"`
					XTrace   string   `json:"x-trace"`
				}
				if err := json.Unmarshal([]byte(respBody), &got); err != nil {
					t.Fatalf("body %q: %v", respBody, err)
				}
				want := "@method @authority @path @query agent-id content-type content-digest idempotency-key authority-scope allow-rcns contract-synthesized"
				if got.Method != "BOOK" || got.Body != `{"item":"book"}` || got.Contract != "syn-42" || got.XTrace != "t-1" || strings.Join(got.Covered, " ") != want {
					t.Fatalf("server saw %+v", got)
				}
			}

			// A key the server does not know: 401 key-unknown, printed,
			// exit 4 (a refusal).
			other, _, _ := keygenKey(t, alg)
			code, out, _ := runCLI("call", "-key", other, "-agent-id", agent, "DISCOVER", srv.URL+"/")
			if code != 4 || !strings.HasPrefix(out, "HTTP/1.1 401 Unauthorized\n") || !strings.Contains(out, `"reason":"key-unknown"`) {
				t.Fatalf("unknown key: %d\n%s", code, out)
			}
		})
	}
}

// TestCallBodyNewline: a body without a final newline is printed with
// one, so the shell prompt starts on its own line; one that ends in a
// newline gets no second one, and an empty body none at all.
func TestCallBodyNewline(t *testing.T) {
	path, _, _ := keygenKey(t, "ed25519")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Query().Get("body"))
	}))
	defer srv.Close()
	for body, want := range map[string]string{`{"a":1}`: "{\"a\":1}\n", "{}\n": "{}\n", "": ""} {
		code, out, errOut := runCLI("call", "-key", path, "-agent-id", agent, "FETCH", srv.URL+"/?body="+url.QueryEscape(body))
		if code != 0 {
			t.Fatalf("call: %d %s", code, errOut)
		}
		if _, got, _ := strings.Cut(out, "\n\n"); got != want {
			t.Errorf("body %q printed as %q, want %q", body, got, want)
		}
	}
}

// TestAgentID checks the Agent-ID against a hand-canonicalized
// document: the signature member is dropped, members sorted, numbers
// and whitespace normalized (RFC 8785).
func TestAgentID(t *testing.T) {
	canonical := `{"b":[1,2,"é"],"name":"agent-a","version":"1"}`
	sum := sha256.Sum256([]byte(canonical))
	want := hex.EncodeToString(sum[:])
	dir := t.TempDir()
	for i, doc := range []string{
		`{"name":"agent-a","version":"1","b":[1,2.0,"\u00e9"],"signature":"abc"}`,
		"{\n  \"signature\": {\"alg\": \"x\"},\n  \"version\": \"1\",\n  \"b\": [1.0, 2, \"é\"],\n  \"name\": \"agent-a\"\n}",
		canonical,
	} {
		p := filepath.Join(dir, "g.json")
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI("id", p)
		if code != 0 || strings.TrimSpace(out) != want {
			t.Fatalf("doc %d: %d %q %s, want %s", i, code, out, errOut, want)
		}
	}
	for name, doc := range map[string]string{
		"duplicate member": `{"a":1,"a":2}`,
		"not an object":    `[1,2]`,
		"not JSON":         `{`,
	} {
		if _, err := agentID([]byte(doc)); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
}

// TestUsage checks exit statuses for command-line mistakes.
func TestUsage(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "k.pem")
	if code, _, _ := runCLI("keygen", "-out", existing); code != 0 {
		t.Fatal("keygen")
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"no command", nil, 2},
		{"unknown command", []string{"frobnicate"}, 2},
		{"keygen bad alg", []string{"keygen", "-alg", "rsa", "-out", filepath.Join(dir, "x.pem")}, 2},
		{"keygen no out", []string{"keygen"}, 2},
		{"keygen existing file", []string{"keygen", "-out", existing}, 1},
		{"thumbprint no key", []string{"thumbprint"}, 2},
		{"thumbprint missing file", []string{"thumbprint", "-key", filepath.Join(dir, "absent.pem")}, 1},
		{"id no file", []string{"id"}, 2},
		{"call no agent-id", []string{"call", "-key", existing, "GET", "http://127.0.0.1:1/"}, 2},
		{"call empty key", []string{"call", "-key", "", "-agent-id", agent, "GET", "http://127.0.0.1:1/"}, 2},
		{"call unsigned, no answer", []string{"call", "-agent-id", agent, "FETCH", "http://127.0.0.1:1/"}, 1},
		{"call bad body", []string{"call", "-key", existing, "-agent-id", agent, "POST", "http://127.0.0.1:1/", "{"}, 2},
		{"call bad header", []string{"call", "-key", existing, "-agent-id", agent, "-H", "nocolon", "GET", "http://127.0.0.1:1/"}, 2},
		{"call bad scheme", []string{"call", "-key", existing, "-agent-id", agent, "GET", "ftp://127.0.0.1/"}, 1},
		// "$(uuidgen)" where uuidgen is missing: refused, not sent without the key.
		{"call empty idempotency key", []string{"call", "-key", existing, "-agent-id", agent, "-idempotency-key", "", "BOOK", "http://127.0.0.1:1/"}, 2},
		{"call empty contract", []string{"call", "-key", existing, "-agent-id", agent, "-contract=", "BOOK", "http://127.0.0.1:1/"}, 2},
		// No Authority-Scope would carry the whole grant, not a narrow claim.
		{"call empty scope", []string{"call", "-key", existing, "-agent-id", agent, "-scope", "", "DISCOVER", "http://127.0.0.1:1/"}, 2},
		{"help", []string{"help"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, errOut := runCLI(tc.args...); code != tc.code {
				t.Fatalf("exit %d, want %d (%s)", code, tc.code, errOut)
			}
		})
	}
}

// TestCallUnsigned: without -key the request goes unsigned (a gateway
// under identity header or mtls signs nothing), with its headers and a
// Content-Digest for the body.
func TestCallUnsigned(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"signature": r.Header.Get("Signature"), "signature-input": r.Header.Get("Signature-Input"),
			"agent": r.Header.Get("Agent-ID"), "scope": r.Header.Get("Authority-Scope"), "digest": r.Header.Get("Content-Digest")})
	}))
	defer srv.Close()
	code, out, errOut := runCLI("call", "-agent-id", agent, "-scope", "hotel:read", "BOOK", srv.URL+"/room", `{"a":1}`)
	if code != 0 {
		t.Fatalf("unsigned call: %d %s", code, errOut)
	}
	_, body, _ := strings.Cut(out, "\n\n")
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if got["signature"] != "" || got["signature-input"] != "" || got["agent"] != agent || got["scope"] != "hotel:read" || got["digest"] == "" {
		t.Fatalf("server saw %v; want no signature, the Agent-ID, the scope and a Content-Digest", got)
	}
}

// TestCallExitStatus: call exits as curl --fail does, with the answer
// printed either way: 0 for 2xx but 262, 3 for a 461 preview, 4 for
// every other answer.
func TestCallExitStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var status int
		fmt.Sscan(r.URL.Query().Get("status"), &status)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"status":%d}`, status)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		status, code int
		stderr       string
	}{
		{200, 0, ""}, {204, 0, ""}, {263, 0, ""},
		{262, 4, "answered 262"}, {461, 3, "present the contract"},
		{404, 4, "answered 404"}, {422, 4, "answered 422"}, {459, 4, "answered 459"}, {464, 4, "answered 464"},
		{500, 4, "answered 500"}, {503, 4, "answered 503"},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			code, out, errOut := runCLI("call", "-agent-id", agent, "FETCH", srv.URL+"/?status="+strconv.Itoa(tc.status))
			if code != tc.code || !strings.Contains(errOut, tc.stderr) || (tc.stderr == "" && errOut != "") {
				t.Fatalf("exit %d, stderr %q; want %d with %q", code, errOut, tc.code, tc.stderr)
			}
			if tc.status != 204 && !strings.Contains(out, fmt.Sprintf(`{"status":%d}`, tc.status)) {
				t.Fatalf("the answer was not printed:\n%s", out)
			}
		})
	}
}

// TestKeyCommand: key inspect, release and resolve send the operator's
// INSPECT or REVOKE target=idempotency-key with the named agent and key
// (scope inspect:all unless given), and refuse flags that do not fit.
func TestKeyCommand(t *testing.T) {
	var seen struct {
		method, scope, idem string
		body                map[string]any
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.method, seen.scope, seen.idem = r.Method, r.Header.Get("Authority-Scope"), r.Header.Get("Idempotency-Key")
		seen.body = nil
		_ = json.NewDecoder(r.Body).Decode(&seen.body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":200}`)
	}))
	defer srv.Close()
	other := strings.Repeat("b", 64)
	for _, tc := range []struct {
		name   string
		args   []string
		method string
		params map[string]any
	}{
		{"inspect", []string{"key", "inspect", "-agent-id", agent, "-for", other, "-target-key", "k-1", srv.URL + "/"}, "INSPECT",
			map[string]any{"target": "idempotency-key", "agent_id": other, "key": "k-1"}},
		{"release", []string{"key", "release", "-agent-id", agent, "-for", other, "-target-key", "k-1", "-reason", "checked", srv.URL + "/"}, "REVOKE",
			map[string]any{"target": "idempotency-key", "agent_id": other, "key": "k-1", "action": "release", "reason": "checked"}},
		{"resolve", []string{"key", "resolve", "-agent-id", agent, "-for", other, "-target-key", "k-1", "-status", "201", "-result", `{"id":7}`, srv.URL + "/"}, "REVOKE",
			map[string]any{"target": "idempotency-key", "agent_id": other, "key": "k-1", "action": "resolve", "status": float64(201), "result": map[string]any{"id": float64(7)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			want := map[string]any{"parameters": tc.params}
			if seen.method != tc.method || seen.scope != "inspect:all" || seen.idem != "" || fmt.Sprint(seen.body) != fmt.Sprint(want) {
				t.Fatalf("server saw %s scope %q key %q body %v; want %s scope inspect:all, no Idempotency-Key, body %v",
					seen.method, seen.scope, seen.idem, seen.body, tc.method, want)
			}
		})
	}
	for _, bad := range [][]string{
		{"key"}, {"key", "drop"},
		{"key", "release", "-agent-id", agent, "-target-key", "k", srv.URL},
		{"key", "release", "-agent-id", agent, "-for", other, "-target-key", "k", "-status", "200", srv.URL},
		{"key", "resolve", "-agent-id", agent, "-for", other, "-target-key", "k", "-result", "{", srv.URL},
		{"key", "inspect", "-agent-id", agent, "-for", other, "-target-key", "k"},
		{"key", "inspect", "-agent-id", agent, "-for", other, "-target-key", "k", "-reason", "why", srv.URL},
		{"key", "inspect", "-agent-id", agent, srv.URL, "-for", other, "-target-key", "k"},
	} {
		if code, _, _ := runCLI(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", bad, code)
		}
	}
}

// TestContentTypeFromFlag: a body goes as application/json unless -H
// named a Content-Type, which is then sent as given, on both doors.
func TestContentTypeFromFlag(t *testing.T) {
	body := []byte(`{"q":"tea"}`)
	u, err := url.Parse("agtp://127.0.0.1:4480/catalog")
	if err != nil {
		t.Fatal(err)
	}
	for _, given := range []string{"", "text/plain"} {
		set := func(h http.Header) {
			if given != "" {
				h.Set("Content-Type", given)
			}
		}
		want := cmp.Or(given, "application/json")
		hr, err := newSignedRequest(context.Background(), nil, "SEARCH", "http://127.0.0.1:8080/catalog", body, set, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ar, err := newSignedAGTPRequest(nil, "SEARCH", u, body, set, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := hr.Header.Values("Content-Type"); len(got) != 1 || got[0] != want {
			t.Errorf("-H Content-Type %q: HTTP request sent %q, want %q", given, got, want)
		}
		if got := ar.Header.Values("Content-Type"); len(got) != 1 || got[0] != want {
			t.Errorf("-H Content-Type %q: AGTP request sent %q, want %q", given, got, want)
		}
	}
}
