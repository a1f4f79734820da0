package caddymodule

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantRequestHash recomputes RCNS §16.2 request_hash from the request
// alone, as an auditor holding it would: SHA-256 over the 8-byte
// big-endian length and bytes of the method, of the target as sent and
// of the SHA-256 of the body.
func wantRequestHash(method, target, body string) string {
	bodySum := sha256.Sum256([]byte(body))
	h := sha256.New()
	for _, part := range [][]byte{[]byte(method), []byte(target), bodySum[:]} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestAttributionRequestHashAndActionID: every Attribution-Record given
// after the request was read carries request_hash (RCNS §16.2), the
// request as sent (method, target as spelled, escapes included, body
// bytes); an answer given before the body was read carries none. An
// answer that ran something state-changing (a Tier B endpoint or a
// contract whose semantic.impact is reversible or irreversible) carries
// an action_id, a fresh UUIDv7 per action; informational ones, refusals
// and built-in methods carry none. Both were missing from every record
// (fresh-user review).
func TestAttributionRequestHashAndActionID(t *testing.T) {
	dir := t.TempDir()
	eps, rcs := filepath.Join(dir, "endpoints"), filepath.Join(dir, "recipes")
	for _, d := range []string{eps, rcs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join("..", "scripts", "bench", "docs", p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// A reversible Tier B endpoint and a reversible recipe over the bench
	// upstream's GET /items/{id}: what the operator declares decides.
	ep := strings.NewReplacer("method: FETCH", "method: RESERVE", "impact: informational", "impact: reversible").Replace(read("endpoints/fetch-item.yaml"))
	rc := strings.NewReplacer("name: lookup-item", "name: hold-item", "method: LOOKUP", "method: ACQUIRE",
		"path_regex: '/item/[A-Za-z0-9-]+'", "path_regex: '/hold/[A-Za-z0-9-]+'", "    impact: informational", "    impact: reversible").Replace(read("recipes/lookup-item.yaml"))
	if err := os.WriteFile(filepath.Join(eps, "reserve-item.yaml"), []byte(ep), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rcs, "hold-item.yaml"), []byte(rc), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &testGateway{h: benchHandlerWith(t, benchUpstream(t).URL, false, eps, rcs)}

	hdr := func(kv ...string) map[string]string {
		h := map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "rcns:negotiate, bench:read"}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	body := `{"parameters":{"item_id":"1"}}`
	seen := map[string]bool{}
	for _, tc := range []struct {
		name, method, target string
		hdr                  map[string]string
		body                 string
		status               int
		hashed, action       bool
	}{
		{"informational Tier B", "FETCH", "/items/%31", hdr(), "", 200, true, false},
		{"reversible Tier B", "RESERVE", "/items/7", hdr(), "", 200, true, true},
		{"reversible Tier B again: a new action", "RESERVE", "/items/7", hdr(), "", 200, true, true},
		{"informational synthesis", "LOOKUP", "/item/a1", hdr("Allow-RCNS", "true", "Content-Type", "application/json"), body, 263, true, false},
		{"reversible synthesis", "ACQUIRE", "/hold/h1", hdr("Allow-RCNS", "true", "Content-Type", "application/json"), body, 263, true, true},
		{"reversible contract by pair", "ACQUIRE", "/hold/h1", hdr("Content-Type", "application/json"), body, 200, true, true},
		{"refused after the body was read", "ACQUIRE", "/nothing/here/x", hdr("Allow-RCNS", "true", "Content-Type", "application/json"), body, 464, true, false},
		{"built-in", "DISCOVER", "/methods", hdr(), "", 200, true, false},
		{"refused before the body was read", "ACQUIRE", "/hold/h1", hdr("Content-Type", "application/json", "Content-Encoding", "gzip"), body, 415, false, false},
	} {
		var a *answer
		if tc.body == "" {
			a = g.serve(t, tc.method, tc.target, tc.hdr, nil, 0)
		} else {
			a = g.serve(t, tc.method, tc.target, tc.hdr, strings.NewReader(tc.body), int64(len(tc.body)))
		}
		if a.status != tc.status {
			t.Fatalf("%s: answer %s; want %d", tc.name, a, tc.status)
		}
		p := attributionPayload(t, a)
		got, has := p["request_hash"].(string)
		switch {
		case tc.hashed && got != wantRequestHash(tc.method, tc.target, tc.body):
			t.Errorf("%s: request_hash %q, want %q", tc.name, got, wantRequestHash(tc.method, tc.target, tc.body))
		case !tc.hashed && has:
			t.Errorf("%s: request_hash %q on an answer given before the body was read", tc.name, got)
		}
		id, hasAction := p["action_id"].(string)
		switch {
		case tc.action && (len(id) != 36 || id[14] != '7'):
			t.Errorf("%s: action_id %q, want a UUIDv7 (payload %v)", tc.name, id, p)
		case tc.action && seen[id]:
			t.Errorf("%s: action_id %q repeats an earlier action's", tc.name, id)
		case !tc.action && hasAction:
			t.Errorf("%s: action_id %q on an answer that changed nothing", tc.name, id)
		}
		seen[id] = true
	}
}
