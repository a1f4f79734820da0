package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCaddyfileExample runs the repository's Caddyfile.example as `make
// demo` does (addresses from the environment), replays the demo's curl
// commands, and checks that the access log keeps Agent-ID but drops the
// authority, credential and replay headers.
func TestCaddyfileExample(t *testing.T) {
	js := startJSONServer(t, hotelDB)
	site := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	exampleAGTPPort := freePort(t)
	g := startGatewayFile(t, filepath.Join(repoRoot, "Caddyfile.example"), site, []string{
		fmt.Sprintf("RCNS_AGTP_PORT=%d", exampleAGTPPort),
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		"RCNS_PORT=" + strings.TrimPrefix(site, "127.0.0.1:"),
		"HOTEL_ADDR=" + js.Addr,
	})

	// Plain HTTP passes through.
	r := g.Do(t, "GET", "/guests/g-1", nil, nil)
	_, _, direct := js.Get(t, "/guests/g-1")
	if r.Status != 200 || string(r.Body) != string(direct) {
		t.Fatalf("plain GET /guests/g-1:\n%s", r)
	}

	// 1. curl -i -X DISCOVER -H 'Agent-ID: …' http://127.0.0.1:8080/
	r = g.Do(t, "DISCOVER", "/", hdr(agentA1, ""), nil)
	wantStatus(t, r, 200)
	assertAGTPHeaders(t, r)
	if r.Header.Get("Server-ID") != "caddy-rcns-hotel-demo" {
		t.Errorf("Server-ID = %q, want the example's server_id", r.Header.Get("Server-ID"))
	}
	if _, ok := r.Object(t)["directory"].([]any); !ok {
		t.Fatalf("DISCOVER / is not a directory:\n%s", r)
	}

	// 2. Tier B FETCH /guests/g-1.
	r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, r, 200)
	if str(r.Object(t), "result", "name") != "Ada Lovelace" {
		t.Fatalf("FETCH /guests/g-1:\n%s", r)
	}

	// 3. BOOK /room synthesis (the example runs in optimistic mode).
	r = g.Do(t, "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true"), bookBody())
	b := assertContractBody(t, r, 263, "BOOK", "/room", recipeName, recipeVer)
	if r.Header.Get("Contract-Synthesized") != str(b, "synthesis_id") {
		t.Fatalf("Contract-Synthesized header %q != body synthesis_id %q", r.Header.Get("Contract-Synthesized"), str(b, "synthesis_id"))
	}
	if rs := js.Reservations(t); len(rs) != 1 {
		t.Fatalf("reservations after the demo BOOK = %v", rs)
	}

	// Access log: Agent-ID kept, sensitive headers dropped. GET with
	// Agent-ID is refused early (459) so the headers need no meaning.
	secret := "secret-value-must-not-be-logged"
	r = g.DoHTTP(t, "GET", "/guests/g-1", hdr(agentA1, "hotel:read",
		"Idempotency-Key", secret, "RCNS-Idempotency-Key", secret, "X-Idempotency-Key", secret, "Signature", "sig1=:"+secret+":",
		"Signature-Input", `sig1=("@method");keyid="`+secret+`"`,
		"Authorization", "Bearer "+secret, "X-Log-Probe", "probe-1"), nil)
	wantStatus(t, r, 459)

	var logged map[string]any
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the access log line of the probe request", func() bool {
		logged = findAccessLog(g.Output(), "probe-1")
		return logged != nil
	})
	headers, _ := field(logged, "request", "headers").(map[string]any)
	if headers == nil {
		t.Fatalf("access log line has no request headers: %v", logged)
	}
	if v, _ := headers["Agent-Id"].([]any); len(v) != 1 || v[0] != agentA1 {
		t.Errorf("access log lost Agent-ID: %v", headers)
	}
	for _, k := range []string{"Authority-Scope", "Idempotency-Key", "Rcns-Idempotency-Key", "X-Idempotency-Key", "Signature", "Signature-Input", "Authorization"} {
		if _, ok := headers[k]; ok {
			t.Errorf("access log keeps %s: %v", k, headers[k])
		}
	}
	// A Host that names no site must not bypass the filter: the example
	// site answers every host on its port.
	r = g.Raw(t, "FETCH /guests/g-1 HTTP/1.1\r\nHost: evil.example\r\nAgent-ID: "+agentA1+
		"\r\nAuthority-Scope: hotel:read\r\nIdempotency-Key: "+secret+"\r\nX-Log-Probe: probe-2\r\nConnection: close\r\n\r\n")
	wantStatus(t, r, 200)
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the access log line of the unmapped-host request", func() bool {
		return findAccessLog(g.Output(), "probe-2") != nil
	})
	// The example's native door logs too (access_log): Agent-ID kept,
	// no other header.
	native := *g
	native.AGTPAddr = fmt.Sprintf("127.0.0.1:%d", exampleAGTPPort)
	r = native.Do(t, "FETCH", "/guests/g-2", hdr(agentA1, "hotel:read", "Idempotency-Key", secret+"-native"), nil)
	wantStatus(t, r, 200)
	waitFor(t, 5*time.Second, 100*time.Millisecond, "the native door's access log line", func() bool {
		logged = findNativeAccessLog(g.Output(), "/guests/g-2")
		return logged != nil
	})
	if logged["agent_id"] != agentA1 || logged["method"] != "FETCH" || logged["status"] != float64(200) {
		t.Errorf("native access log line = %v", logged)
	}
	if strings.Contains(g.Output(), secret) {
		t.Errorf("the secret value appears in Caddy's output")
	}
}

// findNativeAccessLog returns the agtp.log.access line of the request
// for uri.
func findNativeAccessLog(output, uri string) map[string]any {
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, `"agtp.log.access"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["uri"] == uri {
			return m
		}
	}
	return nil
}

// findAccessLog returns the JSON access-log line whose request carried
// X-Log-Probe: probe.
func findAccessLog(output, probe string) map[string]any {
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, probe) || !strings.HasPrefix(strings.TrimSpace(line), "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if h, _ := field(m, "request", "headers", "X-Log-Probe").([]any); len(h) == 1 && h[0] == probe {
			return m
		}
	}
	return nil
}

// TestCaddyfileExampleSignedRecords is ../shared/cases/07 item 6, as
// `make demo` runs it: Caddyfile.example with RCNS_RECORD_KEYS set signs
// the Attribution-Records, the manifest publishes the key, and the
// README's `rcns-agent verify-record -keys manifest.json -` accepts an
// answer's record (its Audit-ID printed) and refuses it changed by hand.
func TestCaddyfileExampleSignedRecords(t *testing.T) {
	bin := cliBuild(t)
	js := startJSONServer(t, hotelDB)
	keyPath, _ := writeEd25519Key(t)
	site := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	g := startGatewayFile(t, filepath.Join(repoRoot, "Caddyfile.example"), site, []string{
		fmt.Sprintf("RCNS_ADMIN=127.0.0.1:%d", freePort(t)),
		"RCNS_PORT=" + strings.TrimPrefix(site, "127.0.0.1:"),
		"HOTEL_ADDR=" + js.Addr,
		"RCNS_RECORD_KEYS=" + keyPath,
	})
	if strings.Contains(g.Output(), "no record_keys configured") {
		t.Errorf("the gateway warns that its records are unsigned:\n%s", g.Output())
	}
	man := g.Do(t, "DISCOVER", "/", nil, nil)
	wantStatus(t, man, 200)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(manifest, man.Body, 0o644); err != nil {
		t.Fatal(err)
	}

	r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, r, 200)
	record := r.Header.Get("Attribution-Record")
	out, errOut, code := cliRun(t, bin, "verify-record", "-keys", manifest, record)
	if code != 0 || !strings.Contains(out, "Audit-ID: "+r.Header.Get("Audit-ID")) || !strings.Contains(out, `"method": "FETCH"`) {
		t.Fatalf("verify-record exit %d:\n%s%s", code, out, errOut)
	}

	// The same record with its payload changed (status 200 → 201).
	parts := strings.Split(record, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !strings.Contains(string(payload), `"status":200`) {
		t.Fatalf("record payload %s (%v)", payload, err)
	}
	payload = []byte(strings.Replace(string(payload), `"status":200`, `"status":201`, 1))
	changed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
	if out, errOut, code := cliRun(t, bin, "verify-record", "-keys", manifest, changed); code != 1 || !strings.Contains(errOut, "the signature does not match") {
		t.Fatalf("verify-record accepted a changed record: exit %d:\n%s%s", code, out, errOut)
	}
}
