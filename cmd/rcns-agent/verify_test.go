package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// writeJSON writes v as JSON to a file in dir and returns its path.
func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// newRecordSigner is a records.Signer with a fresh Ed25519 key.
func newRecordSigner(t *testing.T) *records.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := records.NewSigner([]ed25519.PrivateKey{priv})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestVerifyRecord: a record the gateway's signer made verifies against
// its JWK set, given as the set or inside a manifest, as an argument or
// on standard input (alone or as rcns-agent call printed it); a record
// changed by one byte, an unsigned record, a record signed by another key
// and a key file that holds no keys are refused with exit status 1.
func TestVerifyRecord(t *testing.T) {
	dir := t.TempDir()
	s := newRecordSigner(t)
	compact, auditID, err := s.Sign(map[string]any{"agent_id": agent, "method": "FETCH", "status": 200})
	if err != nil {
		t.Fatal(err)
	}
	set := writeJSON(t, dir, "keys.json", s.JWKS())
	manifest := writeJSON(t, dir, "manifest.json", map[string]any{"agtp_version": "1.0", "server": map[string]any{"record_keys": s.JWKS()}})
	callOutput := "AGTP/1.0 200 OK\nAttribution-Record: " + compact + "\nAudit-ID: " + auditID + "\n\n{\"status\":200}\n"

	for _, tc := range []struct {
		name, keys, record, stdin string
	}{
		{"JWK set, argument", set, compact, ""},
		{"manifest, argument", manifest, compact, ""},
		{"record on stdin", set, "-", compact + "\n"},
		{"call output on stdin", manifest, "-", callOutput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin = strings.NewReader(tc.stdin)
			code, out, errOut := runCLI("verify-record", "-keys", tc.keys, tc.record)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, want := range []string{"verified: EdDSA signature by kid " + s.KeyID(), "Audit-ID: " + auditID, `"method": "FETCH"`} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}

	// The record changed by hand: "FETCH" → "QUERY" in its payload,
	// signature kept.
	parts := strings.Split(compact, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	payload = []byte(strings.Replace(string(payload), `"FETCH"`, `"QUERY"`, 1))
	changed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
	unsigned, _, err := (&records.Signer{}).Sign(map[string]any{"agent_id": agent})
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := newRecordSigner(t).Sign(map[string]any{"agent_id": agent})
	if err != nil {
		t.Fatal(err)
	}
	noKeys := writeJSON(t, dir, "none.json", map[string]any{"server": map[string]any{}})
	for _, tc := range []struct {
		name, keys, record, want string
		code                     int
	}{
		{"changed record", set, changed, "the signature does not match", 1},
		{"a file name, not a record", set, filepath.Join(dir, "rec.jws"), "is not a record (a JWS compact form", 1},
		{"unsigned record", set, unsigned, "unsigned (alg none)", 1},
		{"another key", set, other, "no key with the record's kid", 1},
		{"file without keys", noKeys, compact, "neither a JWK set", 1},
		{"missing file", filepath.Join(dir, "absent.json"), compact, "absent.json", 1},
		{"no keys flag", "", compact, "needs -keys", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"verify-record", tc.record}
			if tc.keys != "" {
				args = []string{"verify-record", "-keys", tc.keys, tc.record}
			}
			code, _, errOut := runCLI(args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d (%s), want %d mentioning %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

// TestReadRecordInput: standard input is the record alone or a call's
// printed answer; empty input is an error.
func TestReadRecordInput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a.b.c\n", "a.b.c"},
		{"AGTP/1.0 200 OK\nAudit-ID: x\nAttribution-Record: h.p.s\n\n{}\n", "h.p.s"},
		{"HTTP/2 200\r\naudit-id: x\r\nattribution-record: h.p.s\r\n\r\n{}\n", "h.p.s"},
	} {
		got, err := readRecordInput(strings.NewReader(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("readRecordInput(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := readRecordInput(strings.NewReader(" \n")); err == nil {
		t.Error("empty input accepted")
	}
	if _, err := readRecordInput(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Type: x\r\n\r\n{}")); err == nil || !strings.Contains(err.Error(), "no Attribution-Record header") {
		t.Errorf("an answer without the header: %v, want it named", err)
	}
}
