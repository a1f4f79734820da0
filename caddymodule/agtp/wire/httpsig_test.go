package wire_test

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// TestSignatureAcrossTheWire: a request signed on the client through
// HTTPRequest verifies on the server through HTTPRequest of what
// ReadRequest parsed: @authority is the Host header (4480 dropped for
// agtp and agtps), @path and @query come from the request line.
func TestSignatureAcrossTheWire(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	kid, _ := httpsig.Thumbprint(key.Public())
	keys := func(id string) (string, crypto.PublicKey, string, bool) {
		return httpsig.AlgEd25519, key.Public(), "agent", id == kid
	}
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name, scheme, host, target string
		body                       []byte
		authorities                []string
		covered                    string
	}{
		{"query and body over agtp", "agtp", "127.0.0.1:9000", "/rooms/1?dry=1&x=%2F", []byte(`{"nights":2}`), []string{"127.0.0.1:9000"},
			"@method @authority @path @query agent-id content-type content-digest authority-scope"},
		{"default port over agtps", "agtps", "GW.example:4480", "/", nil, []string{"gw.example"},
			"@method @authority @path agent-id authority-scope"},
		{"empty query over agtps", "agtps", "gw.example", "/a%20b?", nil, []string{"gw.example:4480"},
			"@method @authority @path @query agent-id authority-scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := wire.NewRequest("BOOK", tc.target, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Host", tc.host)
			req.Header.Set("Agent-ID", agentID)
			req.Header.Set("Authority-Scope", "hotel:book")
			if tc.body != nil {
				req.Header.Set("Content-Type", "application/json")
				httpsig.SetContentDigest(req.Header, tc.body)
			}
			s := &httpsig.Signer{KeyID: kid, Key: key}
			if err := s.Sign(req.HTTPRequest(tc.scheme), httpsig.SignOptions{Created: now, Expires: now.Add(time.Minute), Nonce: "n1"}); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := req.Write(&buf); err != nil {
				t.Fatal(err)
			}
			got, err := wire.ReadRequest(bufio.NewReader(&buf), wire.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(got.Body)
			res, err := httpsig.Verify(got.HTTPRequest(tc.scheme), keys, httpsig.VerifyOptions{Now: now, Body: body, Authorities: tc.authorities})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c := strings.Join(res.Covered, " "); c != tc.covered {
				t.Fatalf("covered %q, want %q", c, tc.covered)
			}
			// Another authority than the one signed is refused.
			got.Header.Set("Host", "other.example")
			if _, err := httpsig.Verify(got.HTTPRequest(tc.scheme), keys, httpsig.VerifyOptions{Now: now, Body: body}); err == nil {
				t.Fatal("a changed Host verified")
			}
		})
	}
}

const agentID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
