package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A test PKI for identity mtls: a CA, client and server certificates,
// and a gateway on TLS with client_auth verify_if_given.

// idvPKI is a test CA with helpers to issue server and client certs.
type idvPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  string // path
	serial int64
}

func idvNewPKI(t testing.TB) *idvPKI {
	t.Helper()
	p := &idvPKI{dir: t.TempDir(), serial: 1}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(p.serial),
		Subject:               pkix.Name{CommonName: "rcns-it agents CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("CA cert: %v", err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = key
	p.caPEM = filepath.Join(p.dir, "ca.pem")
	idvWritePEM(t, p.caPEM, "CERTIFICATE", der)
	return p
}

func idvWritePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// issue signs a leaf for key; server certs get the 127.0.0.1 IP SAN.
func (p *idvPKI) issue(t testing.TB, cn string, key *ecdsa.PrivateKey, server bool, notBefore time.Time) *x509.Certificate {
	t.Helper()
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(12 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatalf("issue %s: %v", cn, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse %s: %v", cn, err)
	}
	return c
}

func idvECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("key: %v", err)
	}
	return k
}

// idvSPKI is the agent document form of a certificate: hex SHA-256 of
// its DER SubjectPublicKeyInfo.
func idvSPKI(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// client is an HTTPS client trusting the test CA, presenting cert (none
// when nil) and dialing addr (127.0.0.1:PORT) whatever the URL host.
func (p *idvPKI) client(t testing.TB, addr string, cert *x509.Certificate, key *ecdsa.PrivateKey) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{Proxy: nil, DisableCompression: true, TLSClientConfig: cfg, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: requestTimeout, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// idvTLSCaddyfile is the harness template with an HTTPS site whose TLS
// asks for (and verifies when given) client certificates.
//
// The site is named localhost, not 127.0.0.1: Caddy attaches client_auth
// to a TLS connection policy matched by SNI, and RFC 6066 clients (Go,
// curl) send no SNI for an IP literal, so on an https://127.0.0.1 site
// no client certificate is ever requested (every AGTP request becomes
// 401 certificate-required) and, with strict SNI-Host enforcement on,
// every request is 421. Clients still connect only to 127.0.0.1
// (idvPKI.client pins the dial address).
const idvTLSCaddyfile = `{
	admin 127.0.0.1:{{ADMIN_PORT}}
	persist_config off
	auto_https disable_redirects
	skip_install_trust
}

https://localhost:{{SITE_PORT}} {
	bind 127.0.0.1
	tls {{CERT}} {{KEY}} {
		client_auth {
			mode verify_if_given
			trust_pool file {{CA}}
		}
	}
	log {
		output stderr
	}
{{SITE}}
}
`

// idvRenderTLS fills idvTLSCaddyfile and writes it into a temp dir.
func idvRenderTLS(t testing.TB, p *idvPKI, site string) (path, text string, sitePort, adminPort int) {
	t.Helper()
	sitePort, adminPort = freePort(t), freePort(t)
	text = fill(idvTLSCaddyfile,
		"ADMIN_PORT", strconv.Itoa(adminPort), "SITE_PORT", strconv.Itoa(sitePort),
		"CERT", filepath.Join(p.dir, "server.pem"), "KEY", filepath.Join(p.dir, "server-key.pem"),
		"CA", p.caPEM, "SITE", site)
	if i := strings.Index(text, "{{"); i >= 0 {
		t.Fatalf("unfilled placeholder in Caddyfile near %q", text[i:min(len(text), i+40)])
	}
	dir := t.TempDir()
	path = filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatalf("write Caddyfile: %v", err)
	}
	return path, text, sitePort, adminPort
}

// idvServerCert writes server.pem / server-key.pem into p.dir.
func idvServerCert(t testing.TB, p *idvPKI) {
	t.Helper()
	key := idvECKey(t)
	cert := p.issue(t, "127.0.0.1", key, true, time.Now().Add(-time.Hour))
	idvWritePEM(t, filepath.Join(p.dir, "server.pem"), "CERTIFICATE", cert.Raw)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("server key: %v", err)
	}
	idvWritePEM(t, filepath.Join(p.dir, "server-key.pem"), "PRIVATE KEY", der)
}

// idvStartTLSGateway runs the HTTPS Caddyfile with the harness pieces and
// waits until a TLS handshake with the test CA succeeds.
func idvStartTLSGateway(t testing.TB, p *idvPKI, site string) *Gateway {
	t.Helper()
	path, text, sitePort, adminPort := idvRenderTLS(t, p, site)
	g := &Gateway{
		Addr:       fmt.Sprintf("127.0.0.1:%d", sitePort),
		AdminURL:   fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		Caddyfile:  text,
		ConfigPath: path,
	}
	g.URL = fmt.Sprintf("https://localhost:%d", sitePort)
	state := t.TempDir()
	g.proc = startProc(t, "caddy", repoRoot, []string{
		"XDG_CONFIG_HOME=" + filepath.Join(state, "config"),
		"XDG_DATA_HOME=" + filepath.Join(state, "data"),
	}, caddyBin, "run", "--config", path, "--adapter", "caddyfile")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Caddyfile %s:\n%s", g.ConfigPath, g.Caddyfile)
			t.Logf("caddy output (tail):\n%s", g.proc.tail(logTailLines))
		}
	})
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	deadline := time.Now().Add(gatewayStartup)
	var last error
	for time.Now().Before(deadline) {
		if g.proc.exited() {
			t.Fatalf("caddy exited before serving %s (%v); output:\n%s", g.Addr, g.proc.err, g.proc.tail(logTailLines))
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{RootCAs: pool, ServerName: "localhost"}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := d.DialContext(ctx, "tcp", g.Addr)
		cancel()
		if err == nil {
			conn.Close()
			return g
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("caddy did not complete a TLS handshake on %s within %s (last: %v); output:\n%s",
		g.Addr, gatewayStartup, last, g.proc.tail(logTailLines))
	return nil
}

// idvValidateFile runs `caddy validate` on a Caddyfile path.
func idvValidateFile(t testing.TB, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), validateTimeout)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, caddyBin, "validate", "--config", path, "--adapter", "caddyfile")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(dir, "data"))
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("caddy validate did not finish within %s:\n%s", validateTimeout, out)
	}
	return string(out), err
}
