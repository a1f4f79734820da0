package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

// cmd/rcns-agent, the agent CLI of the `signature` identity mode, run as
// a black box against a real gateway.

const cliTimeout = 2 * time.Minute

// cliBuild builds cmd/rcns-agent into a temp dir.
func cliBuild(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rcns-agent")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rcns-agent")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rcns-agent: %v\n%s", err, out)
	}
	return bin
}

// cliRun runs the CLI and returns stdout, stderr and the exit code.
func cliRun(t testing.TB, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("rcns-agent %v did not finish within %s", args, cliTimeout)
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("rcns-agent %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

var cliKeyID = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

func TestAgentCLI(t *testing.T) {
	bin := cliBuild(t)
	dir := t.TempDir()

	// keygen: "keyid <thumbprint>" and "jwk <public JWK>".
	keyPath := filepath.Join(dir, "agent-key.pem")
	out, errOut, code := cliRun(t, bin, "keygen", "-alg", "ed25519", "-out", keyPath)
	if code != 0 {
		t.Fatalf("keygen exit %d:\n%s%s", code, out, errOut)
	}
	var keyid string
	var jwk map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		switch name {
		case "keyid":
			keyid = value
		case "jwk":
			if err := json.Unmarshal([]byte(value), &jwk); err != nil {
				t.Fatalf("keygen jwk line is not JSON: %v\n%s", err, out)
			}
		}
	}
	if !cliKeyID.MatchString(keyid) || jwk == nil {
		t.Fatalf("keygen output lacks keyid or jwk:\n%s", out)
	}
	if jwk["kty"] != "OKP" || jwk["crv"] != "Ed25519" {
		t.Errorf("keygen -alg ed25519 printed a %v/%v JWK", jwk["kty"], jwk["crv"])
	}
	if _, ok := jwk["d"]; ok {
		t.Fatalf("keygen printed private key material in the JWK:\n%s", out)
	}
	if fi, err := os.Stat(keyPath); err != nil {
		t.Fatalf("keygen wrote no key: %v", err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	// thumbprint agrees with keygen.
	if tp, errOut, code := cliRun(t, bin, "thumbprint", "-key", keyPath); code != 0 || strings.TrimSpace(tp) != keyid {
		t.Errorf("thumbprint = %q (exit %d, %s), want keygen's keyid %s", tp, code, errOut, keyid)
	}
	// keygen never overwrites.
	if _, _, code := cliRun(t, bin, "keygen", "-alg", "ed25519", "-out", keyPath); code == 0 {
		t.Errorf("keygen over an existing key file exited 0")
	}

	// A gateway in signature mode knowing that key for rcns-demo-agent.
	a1 := idvDemo("rcns-demo-agent")
	a1.keys = []map[string]any{jwk}
	agents := idvWriteAgents(t, a1)
	js := startJSONServer(t, hotelDB)
	g := startGateway(t, fill(idvSite,
		"IDENTITY", "signature", "MODE", "confirm-first", "HOTEL", js.URL,
		"AGENTS", agents, "EXTRA", "", "LEGACY", js.URL))

	t.Run("call FETCH 200", func(t *testing.T) {
		out, errOut, code := cliRun(t, bin, "call", "-key", keyPath, "-agent-id", agentA1, "-scope", "hotel:read",
			"FETCH", g.URL+"/guests/g-1")
		if code != 0 {
			t.Fatalf("call exit %d:\n%s%s", code, out, errOut)
		}
		status, _, _ := strings.Cut(out, "\n")
		if !strings.Contains(status, " 200") {
			t.Fatalf("call status line %q, want 200; output:\n%s", status, out)
		}
		_, body, ok := strings.Cut(out, "\n\n")
		if !ok {
			t.Fatalf("call output has no blank line before the body:\n%s", out)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &m); err != nil {
			t.Fatalf("call body is not JSON: %v\n%s", err, out)
		}
		if str(m, "result", "id") != "g-1" || str(m, "result", "name") != "Ada Lovelace" {
			t.Fatalf("call body is not guest g-1:\n%s", out)
		}
		if !strings.Contains(out, "\nAttribution-Record: ") {
			t.Errorf("call output lists no Attribution-Record header:\n%s", out)
		}
	})

	t.Run("call with a body", func(t *testing.T) {
		body := string(mustJSON(t, bookBody()))
		out, errOut, code := cliRun(t, bin, "call", "-key", keyPath, "-agent-id", agentA1, "-scope", scopeAll,
			"-allow-rcns", "BOOK", g.URL+"/room", body)
		if code != 3 { // a 461 preview: nothing ran
			t.Fatalf("call exit %d, want 3 for a 461:\n%s%s", code, out, errOut)
		}
		if status, _, _ := strings.Cut(out, "\n"); !strings.Contains(status, " 461") {
			t.Fatalf("signed BOOK /room in confirm-first: status line %q, want 461; output:\n%s", status, out)
		}
	})

	t.Run("call with another agent's id 401", func(t *testing.T) {
		out, errOut, code := cliRun(t, bin, "call", "-key", keyPath, "-agent-id", agentA2, "-scope", "hotel:read",
			"FETCH", g.URL+"/guests/g-1")
		if code != 4 { // a refusal, printed
			t.Fatalf("call exit %d, want 4:\n%s%s", code, out, errOut)
		}
		if status, _, _ := strings.Cut(out, "\n"); !strings.Contains(status, " 401") || !strings.Contains(out, `"key-unknown"`) {
			t.Fatalf("key of A1 with Agent-ID A2: want 401 key-unknown; output:\n%s", out)
		}
	})

	t.Run("id", func(t *testing.T) {
		genesis := `{"name":"rcns-it-genesis","owner_id":"hotel-ops","created":"2026-01-02T03:04:05Z",` +
			`"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}],` +
			`"weight":1.50,"unicode":"caf\u00e9 \ud83d\ude00","signature":"c2lnbmF0dXJl"}`
		path := filepath.Join(t.TempDir(), "genesis.json")
		if err := os.WriteFile(path, []byte(genesis), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := cliRun(t, bin, "id", path)
		if code != 0 {
			t.Fatalf("id exit %d:\n%s%s", code, out, errOut)
		}
		got := strings.TrimSpace(out)
		if !hex64.MatchString(got) {
			t.Fatalf("id printed %q, want 64 lowercase hex", got)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(genesis), &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "signature")
		stripped, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		canon, err := jcs.Transform(stripped)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(canon)
		if want := hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("id = %s, want sha256(JCS(genesis without signature)) = %s\ncanonical form: %s", got, want, canon)
		}
		// The signature member does not change the id.
		path2 := filepath.Join(t.TempDir(), "genesis.json")
		other := strings.Replace(genesis, `"c2lnbmF0dXJl"`, `"b3RoZXI"`, 1)
		if err := os.WriteFile(path2, []byte(other), 0o644); err != nil {
			t.Fatal(err)
		}
		if out2, _, _ := cliRun(t, bin, "id", path2); strings.TrimSpace(out2) != got {
			t.Errorf("another signature gives id %q, want %s", strings.TrimSpace(out2), got)
		}
	})
}

// TestAgentCLIHeaderIdentity is ../shared/cases/07 item 3: against a
// gateway under identity header, rcns-agent call needs no -key (nothing
// is signed), and it exits as curl --fail does: 0 for a 2xx answer, 4
// for a 4xx (a 422 included), the answer printed either way. Over the
// native door too when the suite runs there.
func TestAgentCLIHeaderIdentity(t *testing.T) {
	bin := cliBuild(t)
	w := startHotel(t, hotelOpts{})
	base := w.GW.URL
	if w.GW.AGTPAddr != "" {
		base = "agtp://" + w.GW.AGTPAddr
	}
	for _, tc := range []struct {
		name, method, path, scope, status string
		code                              int
	}{
		{"200", "FETCH", "/guests/g-1", "hotel:read", " 200", 0},
		{"422 guest_not_found", "FETCH", "/guests/g-404", "hotel:read", " 422", 4},
		{"404 without a contract", "BOOK", "/room", scopeAll, " 404", 4},
		{"262 scope-claim-invalid", "FETCH", "/guests/g-1", "vault:read", " 262", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cliRun(t, bin, "call", "-agent-id", agentA1, "-scope", tc.scope, tc.method, base+tc.path)
			status, _, _ := strings.Cut(out, "\n")
			if code != tc.code || !strings.Contains(status, tc.status) {
				t.Fatalf("call exit %d, status line %q; want %d and%s:\n%s%s", code, status, tc.code, tc.status, out, errOut)
			}
			if tc.code != 0 && !strings.Contains(errOut, "answered"+tc.status) {
				t.Errorf("stderr does not say what was answered: %q", errOut)
			}
		})
	}
}
