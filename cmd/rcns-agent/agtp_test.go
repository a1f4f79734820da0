package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// agtpServer serves one AGTP/1.0 request per connection on a loopback
// listener, over TLS when conf is set, with handle.
func agtpServer(t *testing.T, conf *tls.Config, handle func(req *wire.Request, body []byte, cs *tls.ConnectionState) *wire.Response) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				var cs *tls.ConnectionState
				if conf != nil {
					tc := tls.Server(c, conf)
					if err := tc.Handshake(); err != nil {
						return
					}
					st := tc.ConnectionState()
					cs, c = &st, tc
				}
				req, err := wire.ReadRequest(bufio.NewReader(c), wire.Limits{})
				if err != nil {
					return
				}
				body, err := io.ReadAll(req.Body)
				if err != nil {
					return
				}
				_ = handle(req, body, cs).Write(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// verifying answers status with what it verified of the signature,
// under the scheme the door would use.
func verifying(kid string, pub any, status int) func(*wire.Request, []byte, *tls.ConnectionState) *wire.Response {
	cache := httpsig.NewReplayCache(100, nil)
	return func(req *wire.Request, body []byte, cs *tls.ConnectionState) *wire.Response {
		scheme := "agtp"
		if cs != nil {
			scheme = "agtps"
		}
		res, err := httpsig.Verify(req.HTTPRequest(scheme), resolverFor(kid, pub), httpsig.VerifyOptions{
			Body: body, ExpectOwner: req.Header.Get("Agent-ID"), Replay: cache, Authorities: []string{req.Header.Get("Host")},
		})
		var e *httpsig.Error
		if errors.As(err, &e) {
			b, _ := json.Marshal(map[string]string{"reason": e.Reason, "detail": e.Detail})
			return &wire.Response{Status: 401, Header: http.Header{"Content-Type": {"application/json"}}, Body: b}
		}
		seen := map[string]any{"method": req.Method, "target": req.Target, "host": req.Header.Get("Host"), "covered": res.Covered,
			"body": string(body), "contract": req.Header.Get("Contract-Synthesized")}
		if cs != nil {
			seen["alpn"] = cs.NegotiatedProtocol
			seen["tls13"] = cs.Version == tls.VersionTLS13
			if len(cs.PeerCertificates) > 0 {
				seen["client_cn"] = cs.PeerCertificates[0].Subject.CommonName
			}
		}
		b, _ := json.Marshal(seen)
		return &wire.Response{Status: status, Header: http.Header{"Agent-Id": {req.Header.Get("Agent-ID")}, "Content-Type": {"application/json"}}, Body: b}
	}
}

// callOut runs call and splits the output into status line, header
// block and decoded JSON body.
func callOut(t *testing.T, args ...string) (string, string, map[string]any) {
	t.Helper()
	code, out, errOut := runCLI(append([]string{"call"}, args...)...)
	head, body, ok := strings.Cut(out, "\n\n")
	if !ok {
		t.Fatalf("call: exit %d: %s\noutput:\n%s", code, errOut, out)
	}
	status, fields, _ := strings.Cut(head, "\n")
	// The exit status is the one the printed status calls for (0, or 3
	// for a 461 preview, 4 for a refusal).
	var proto string
	var n int
	if _, err := fmt.Sscanf(status, "%s %d", &proto, &n); err != nil || code != exitFor(n) {
		t.Fatalf("call: exit %d for %q: %s", code, status, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return status, fields, m
}

// TestCallAGTP: call over agtp:// signs as over HTTP, the server
// verifies what the codec parsed, and the AGTP status line is printed.
func TestCallAGTP(t *testing.T) {
	for _, alg := range []string{httpsig.AlgEd25519, httpsig.AlgECDSAP256SHA256} {
		t.Run(alg, func(t *testing.T) {
			path, kid, pub := keygenKey(t, alg)
			addr := agtpServer(t, nil, verifying(kid, pub, 263))
			status, fields, got := callOut(t, "-key", path, "-agent-id", agent, "-scope", "orders:write", "-allow-rcns",
				"-idempotency-key", "idem-1", "-contract", "syn-42", "BOOK", "agtp://"+addr+"/orders?dry=1", `{"item":"book"}`)
			if status != "AGTP/1.0 263 Proposal Approved" {
				t.Fatalf("status line %q", status)
			}
			if !strings.Contains(fields, "Agent-ID: "+agent+"\n") || !strings.Contains(fields, "Content-Length: ") {
				t.Fatalf("fields:\n%s", fields)
			}
			want := "@method @authority @path @query agent-id content-type content-digest idempotency-key authority-scope allow-rcns contract-synthesized"
			if got["method"] != "BOOK" || got["target"] != "/orders?dry=1" || got["host"] != addr || got["body"] != `{"item":"book"}` ||
				got["contract"] != "syn-42" || joinAny(got["covered"]) != want {
				t.Fatalf("server saw %v", got)
			}
			// No path: the target is "/", no query component.
			status, _, got = callOut(t, "-key", path, "-agent-id", agent, "DISCOVER", "agtp://"+addr)
			if status != "AGTP/1.0 263 Proposal Approved" || got["target"] != "/" || joinAny(got["covered"]) != "@method @authority @path agent-id" {
				t.Fatalf("DISCOVER: %s %v", status, got)
			}
		})
	}
}

// TestCallAGTPS: agtps:// is TLS 1.3 with ALPN agtp, verified against
// -cacert, presenting -cert (mTLS).
func TestCallAGTPS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caFile := makeCA(t, dir)
	srvCert := issue(t, ca, caKey, "gw", x509.ExtKeyUsageServerAuth, dir, "server")
	cliFile, cliKeyFile := issueFiles(t, ca, caKey, "agent-a", x509.ExtKeyUsageClientAuth, dir, "client")
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	conf := &tls.Config{Certificates: []tls.Certificate{srvCert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"agtp"},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	path, kid, pub := keygenKey(t, httpsig.AlgEd25519)
	addr := agtpServer(t, conf, verifying(kid, pub, 461))

	status, _, got := callOut(t, "-key", path, "-agent-id", agent, "-cacert", caFile, "-cert", cliFile, "-cert-key", cliKeyFile,
		"BOOK", "agtps://"+addr+"/room", `{"nights":2}`)
	if status != "AGTP/1.0 461 RCNS Contract Available" || got["alpn"] != "agtp" || got["tls13"] != true || got["client_cn"] != "agent-a" ||
		got["target"] != "/room" || got["host"] != addr {
		t.Fatalf("%s %v", status, got)
	}

	// Without -cacert the server's certificate is not trusted.
	code, _, errOut := runCLI("call", "-key", path, "-agent-id", agent, "BOOK", "agtps://"+addr+"/room")
	if code != 1 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("untrusted server: exit %d: %s", code, errOut)
	}
}

// TestCallAGTPSRefusesTLS12: a server that stops at TLS 1.2 is refused.
func TestCallAGTPSRefusesTLS12(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caFile := makeCA(t, dir)
	srvCert := issue(t, ca, caKey, "gw", x509.ExtKeyUsageServerAuth, dir, "server")
	conf := &tls.Config{Certificates: []tls.Certificate{srvCert}, MaxVersion: tls.VersionTLS12}
	path, kid, pub := keygenKey(t, httpsig.AlgEd25519)
	addr := agtpServer(t, conf, verifying(kid, pub, 200))
	code, _, errOut := runCLI("call", "-key", path, "-agent-id", agent, "-cacert", caFile, "DISCOVER", "agtps://"+addr+"/")
	if code != 1 || !strings.Contains(errOut, "TLS 1.3") || !strings.Contains(errOut, "protocol version") {
		t.Fatalf("TLS 1.2 server: exit %d: %s", code, errOut)
	}
}

// TestCallHTTPSCACert: -cacert applies to https:// as well.
func TestCallHTTPSCACert(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) }))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	path, _, _ := keygenKey(t, httpsig.AlgEd25519)
	status, _, got := callOut(t, "-key", path, "-agent-id", agent, "-cacert", caFile, "DISCOVER", srv.URL+"/")
	if status != "HTTP/1.1 200 OK" || got["ok"] != true {
		t.Fatalf("%s %v", status, got)
	}
	if code, _, errOut := runCLI("call", "-key", path, "-agent-id", agent, "DISCOVER", srv.URL+"/"); code != 1 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("without -cacert: exit %d: %s", code, errOut)
	}
}

// TestCallAGTPRefusals: what call refuses before sending.
func TestCallAGTPRefusals(t *testing.T) {
	path, _, _ := keygenKey(t, httpsig.AlgEd25519)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"plain text off loopback", []string{"DISCOVER", "agtp://192.0.2.1:4480/"}, 1, "not a loopback address"},
		{"plain text off loopback, default port", []string{"DISCOVER", "agtp://[2001:db8::1]/"}, 1, "[2001:db8::1]:4480 is not a loopback address"},
		{"fragment", []string{"DISCOVER", "agtp://127.0.0.1:4480/x#f"}, 2, "no fragment"},
		{"no host", []string{"DISCOVER", "agtp:///x"}, 2, "names no host"},
		{"user information", []string{"DISCOVER", "agtps://u:p@127.0.0.1/x"}, 2, "no user information"},
		{"bad port", []string{"DISCOVER", "agtp://127.0.0.1:99999/x"}, 2, "not 1-65535"},
		{"method not a token", []string{"QU(ERY", "agtp://127.0.0.1:4480/x"}, 1, "not a token"},
		{"-cert without -cert-key", []string{"-cert", "c.pem", "DISCOVER", "agtps://127.0.0.1/"}, 2, "go together"},
		{"unknown scheme", []string{"DISCOVER", "agtpx://127.0.0.1/"}, 1, "want http, https, agtp or agtps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(append([]string{"call", "-key", path, "-agent-id", agent}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.says) {
				t.Fatalf("exit %d, want %d; stderr %q lacks %q", code, tc.code, errOut, tc.says)
			}
		})
	}
}

func joinAny(v any) string {
	l, _ := v.([]any)
	s := make([]string, len(l))
	for i, x := range l {
		s[i], _ = x.(string)
	}
	return strings.Join(s, " ")
}

// makeCA makes a self-signed P-256 CA and writes its certificate to
// dir/ca.pem.
func makeCA(t *testing.T, dir string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	f := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca, key, f
}

// issueFiles issues a leaf for cn (IP SAN 127.0.0.1) and writes it and
// its key as dir/name.pem and dir/name-key.pem.
func issueFiles(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage, dir, name string) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	cf, kf := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cf, kf
}

// issue is issueFiles loaded as a tls.Certificate.
func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage, dir, name string) tls.Certificate {
	t.Helper()
	cf, kf := issueFiles(t, ca, caKey, cn, usage, dir, name)
	c, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
