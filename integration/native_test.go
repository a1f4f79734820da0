package integration

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// nativeExchange writes data to a fresh connection to addr and reads
// answers until the server closes it or wait passes without a byte; it
// returns the answers in order and whether the server closed.
func nativeExchange(t *testing.T, addr, data string, wait time.Duration) (answers []*wire.Response, closed bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, data); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(wait))
		r, err := wire.ReadResponse(br, wire.Limits{MaxHeaderBytes: 1 << 20}, 16<<20)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return answers, false
			}
			return answers, true
		}
		answers = append(answers, r)
	}
}

// nativeGateway is the hotel demo with the native door on, its limits
// shortened so that the timeout cases end quickly.
func nativeGateway(t *testing.T, agtpExtra string) *Gateway {
	t.Helper()
	js := startJSONServer(t, hotelDB)
	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, fill(hotelSite,
		"ENABLED", "true", "MODE", "optimistic", "HOTEL", js.URL, "EXTRA", "", "LEGACY", js.URL), "agtp")
	text = strings.Replace(text, fmt.Sprintf("agtp 127.0.0.1:%d {\n", agtpPort), fmt.Sprintf("agtp 127.0.0.1:%d {\n%s", agtpPort, agtpExtra), 1)
	return launchText(t, text, sitePort, adminPort, agtpPort)
}

func nativeReq(method, target string, hdr map[string]string, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "AGTP/1.0 %s %s\r\n", method, target)
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// TestNativeFraming: the request line forms, Content-Length framing and
// the refusals of bad framing (an AGTP 400/431 in the spec's error body
// with the AGTP headers, then the connection closes), over a real Caddy.
func TestNativeFraming(t *testing.T) {
	g := nativeGateway(t, "\t\tread_header_timeout 1s\n\t\tread_timeout 2s\n\t\tidle_timeout 3s\n\t\tmax_header_size 4KiB\n")
	a1 := "Agent-ID: " + agentA1 + "\r\nAuthority-Scope: hotel:read\r\n"
	// The identifiers a refusal echoes when the codec could still read
	// the head (spec §24 item 4), as the HTTP binding does.
	const ids = "Request-ID: 01a23a78-4d4e-7612-9ccc-73bf2c3ee3c6\r\nTask-ID: task-1\r\n"
	for _, tc := range []struct {
		name, data    string
		statuses      []int
		reason        string // of the last answer, when it is a refusal
		closes        bool
		phraseOfFirst string
		wait          time.Duration // for the server to act; default 1.5 s (under idle_timeout)
		codec         bool          // refused by the codec, before the request line is a request: no path
		echo          string        // the method of a codec refusal whose head was read: Agent-ID, Request-ID and Task-ID echoed
		path          string        // with echo: the body's path, as the HTTP binding names it ("": none, a target that is not a URI path)
	}{
		{name: "two-token form is DISCOVER /", data: "AGTP/1.0 DISCOVER\r\n\r\n", statuses: []int{200}, phraseOfFirst: "OK"},
		{name: "query in the target", data: "AGTP/1.0 DISCOVER /methods?limit=1\r\n" + a1 + "\r\n", statuses: []int{200}},
		{name: "pipelined pair answered in order", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + "Task-ID: one\r\n\r\nAGTP/1.0 FETCH /guests/g-2\r\n" + a1 + "Task-ID: two\r\n\r\n", statuses: []int{200, 200}},
		{name: "missing Content-Length: no body, the rest is the next request", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + "\r\n{}\r\n\r\n", statuses: []int{200, 400}, reason: "invalid-request-line", closes: true, codec: true},
		{name: "duplicate Content-Length", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + ids + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", statuses: []int{400}, reason: "duplicate-header", closes: true, codec: true, echo: "FETCH", path: "/guests/g-1"},
		{name: "duplicate Agent-ID", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + "Agent-ID: " + agentA2 + "\r\n\r\n", statuses: []int{400}, reason: "duplicate-header", closes: true, codec: true},
		{name: "chunked", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + ids + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", statuses: []int{400}, reason: "content-length-required", closes: true, codec: true, echo: "FETCH", path: "/guests/g-1"},
		{name: "Content-Length not a number", data: "AGTP/1.0 BOOK /room\r\n" + a1 + ids + "Content-Length: 2x\r\n\r\n{}", statuses: []int{400}, reason: "invalid-content-length", closes: true, codec: true, echo: "BOOK", path: "/room"},
		{name: "header over max_header_size", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + "X-Big: " + strings.Repeat("b", 5000) + "\r\n\r\n", statuses: []int{431}, reason: "header-too-large", closes: true, codec: true},
		{name: "body over max_request_body", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + "Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{", statuses: []int{413}, reason: "body-too-large", closes: true},
		{name: "header line without a colon", data: "AGTP/1.0 FETCH /guests/g-1\r\nno colon here\r\n\r\n", statuses: []int{400}, reason: "invalid-header", closes: true, codec: true},
		{name: "header line without a colon, identifiers after it", data: "AGTP/1.0 FETCH /guests/g-1\r\nno colon here\r\n" + a1 + ids + "\r\n", statuses: []int{400}, reason: "invalid-header", closes: true, codec: true, echo: "FETCH", path: "/guests/g-1"},
		{name: "bare LF", data: "AGTP/1.0 FETCH /guests/g-1\n" + a1 + "\r\n", statuses: []int{400}, closes: true, codec: true},
		{name: "fragment", data: "AGTP/1.0 FETCH /guests/g-1#x\r\n" + a1 + ids + "\r\n", statuses: []int{400}, reason: "invalid-request-line", closes: true, codec: true, echo: "FETCH", path: "/guests/g-1#x"},
		{name: "OPTIONS * (cases/01)", data: "AGTP/1.0 OPTIONS *\r\n" + a1 + ids + "\r\n", statuses: []int{400}, reason: "invalid-request-line", closes: true, codec: true, echo: "OPTIONS", path: "*"},
		{name: "absolute-form target", data: "AGTP/1.0 FETCH agtp://h/guests/g-1\r\n" + a1 + ids + "\r\n", statuses: []int{400}, reason: "invalid-request-line", closes: true, codec: true, echo: "FETCH", path: "/guests/g-1"},
		{name: "target that is no URI path", data: "AGTP/1.0 FETCH /guests/%ZZ\r\n" + a1 + ids + "\r\n", statuses: []int{400}, reason: "invalid-request-line", closes: true, codec: true, echo: "FETCH"},
		{name: "bad target, then a bad header line", data: "AGTP/1.0 OPTIONS *\r\n" + a1 + ids + "no colon\r\n\r\n", statuses: []int{400}, reason: "invalid-request-line", closes: true, codec: true, echo: "OPTIONS", path: "*"},
		{name: "bad header line, head cut: no echo", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + ids + "no colon\r\n", statuses: []int{400}, reason: "invalid-header", closes: true, codec: true, wait: 3 * time.Second},
		{name: "stalled head: 408 at read_header_timeout", data: "AGTP/1.0 FETCH /guests/g-1\r\nAgent-ID: x", statuses: []int{408}, closes: true, wait: 6 * time.Second, codec: true},
		{name: "stalled body: cut at read_timeout", data: "AGTP/1.0 FETCH /guests/g-1\r\n" + a1 + "Content-Type: application/json\r\nContent-Length: 10\r\n\r\n{", statuses: []int{400}, reason: "invalid-body", closes: true, wait: 6 * time.Second},
		{name: "idle connection closed at idle_timeout", data: "", statuses: nil, closes: true, wait: 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait := tc.wait
			if wait == 0 {
				wait = 1500 * time.Millisecond
			}
			answers, closed := nativeExchange(t, g.AGTPAddr, tc.data, wait)
			var got []int
			for _, a := range answers {
				got = append(got, a.Status)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.statuses) {
				t.Fatalf("statuses %v, want %v (closed %v)", got, tc.statuses, closed)
			}
			if closed != tc.closes {
				t.Errorf("connection closed %v, want %v", closed, tc.closes)
			}
			if len(answers) == 0 {
				return
			}
			last := answers[len(answers)-1]
			r := &Resp{Status: last.Status, Header: last.Header, Body: last.Body, Reason: last.Reason}
			assertAGTPHeaders(t, r)
			switch {
			case last.Status >= 400 && tc.codec:
				// The uniform body (spec §19); method and path only
				// where the codec read the head (checked below).
				b := r.Object(t)
				if got, _ := b["status"].(float64); int(got) != last.Status || str(b, "explanation") == "" || b["retryable"] == nil ||
					tc.reason != "" && str(b, "reason") != tc.reason || str(b, "reason") == "" {
					t.Errorf("codec refusal body %s, want status %d, reason %q, explanation, retryable", last.Body, last.Status, tc.reason)
				}
			case last.Status >= 400:
				assertErrorBody(t, r, last.Status, tc.reason)
			}
			if last.Status >= 400 && tc.codec {
				want := map[string]string{"Agent-ID": "", "Request-ID": "", "Task-ID": ""}
				if tc.echo != "" {
					want = map[string]string{"Agent-ID": agentA1, "Request-ID": "01a23a78-4d4e-7612-9ccc-73bf2c3ee3c6", "Task-ID": "task-1"}
					if m := str(r.Object(t), "method"); m != tc.echo {
						t.Errorf("refusal body method %q, want %q: %s", m, tc.echo, last.Body)
					}
					if p := str(r.Object(t), "path"); p != tc.path {
						t.Errorf("refusal body path %q, want %q (as the HTTP binding names it): %s", p, tc.path, last.Body)
					}
				}
				for k, v := range want {
					if got := last.Header.Get(k); got != v {
						t.Errorf("%s: %q, want %q (the head was read: %v)", k, got, v, tc.echo != "")
					}
				}
			}
			if tc.phraseOfFirst != "" && answers[0].Reason != tc.phraseOfFirst {
				t.Errorf("reason phrase %q, want %q", answers[0].Reason, tc.phraseOfFirst)
			}
			if strings.HasPrefix(tc.name, "pipelined") {
				if answers[0].Header.Get("Task-ID") != "one" || answers[1].Header.Get("Task-ID") != "two" {
					t.Errorf("pipelined answers out of order: %q then %q", answers[0].Header.Get("Task-ID"), answers[1].Header.Get("Task-ID"))
				}
			}
		})
	}
}

// TestNativePersistentConnection: 100 requests one after another on one
// connection, each answered in order; then one request per connection,
// the reference client's way.
func TestNativePersistentConnection(t *testing.T) {
	g := nativeGateway(t, "")
	c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	cc := wire.NewClientConn(c)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		req, err := wire.NewRequest("FETCH", "/guests/g-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Host", g.AGTPAddr)
		req.Header["Agent-ID"] = []string{agentA1}
		req.Header["Authority-Scope"] = []string{"hotel:read"}
		req.Header["Task-ID"] = []string{fmt.Sprintf("t-%d", i)}
		resp, err := cc.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if resp.Status != 200 || resp.Header.Get("Task-ID") != fmt.Sprintf("t-%d", i) {
			t.Fatalf("request %d: %d, Task-ID %q", i, resp.Status, resp.Header.Get("Task-ID"))
		}
		seen[resp.Header.Get("Response-ID")] = true
	}
	if len(seen) != 100 {
		t.Errorf("%d distinct Response-IDs over 100 answers", len(seen))
	}
	// A client's Connection: close ends the connection after its answer
	// (the idle timeout is far away), the answer saying so too; a
	// request after it on the same connection is not read.
	answers, closed := nativeExchange(t, g.AGTPAddr,
		nativeReq("FETCH", "/guests/g-1", map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read", "Connection": "keep-alive, close"}, "")+
			nativeReq("FETCH", "/guests/g-2", map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}, ""), 5*time.Second)
	if !closed || len(answers) != 1 || answers[0].Status != 200 || answers[0].Header.Get("Connection") != "close" {
		t.Fatalf("Connection: close: closed %v, answers %v", closed, answers)
	}
	for i := 0; i < 3; i++ {
		answers, _ := nativeExchange(t, g.AGTPAddr, nativeReq("FETCH", "/guests/g-1", map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}, ""), 2*time.Second)
		if len(answers) != 1 || answers[0].Status != 200 {
			t.Fatalf("one request per connection: %v", answers)
		}
	}
}

// TestNativeClientClosesMidBody: a client that closes in the middle of
// its body leaves the server serving the next connection.
func TestNativeClientClosesMidBody(t *testing.T) {
	g := nativeGateway(t, "")
	c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "AGTP/1.0 BOOK /room\r\nAgent-ID: "+agentA1+"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"param")
	_ = c.Close()
	answers, _ := nativeExchange(t, g.AGTPAddr, nativeReq("FETCH", "/guests/g-1", map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}, ""), 2*time.Second)
	if len(answers) != 1 || answers[0].Status != 200 {
		t.Fatalf("after a client closed mid-body: %v", answers)
	}
}

// TestNativeTLS: agtps:// on a certificate from Caddy's tls app
// (local_certs), TLS 1.3 only with ALPN agtp, and identity mtls on the
// native door: the client certificate must name the request's
// Agent-ID (a mismatch is 401 certificate-mismatch, as on the HTTP
// door).
func TestNativeTLS(t *testing.T) {
	p := idvNewPKI(t)
	keyA1 := idvECKey(t)
	certA1 := p.issue(t, "rcns-demo-agent", keyA1, false, time.Now().Add(-time.Hour))
	a1, a2 := idvDemo("rcns-demo-agent"), idvDemo("rcns-demo-noscope")
	a1.certs, a2.certs = []string{idvSPKI(certA1)}, []string{idvSPKI(p.issue(t, "rcns-demo-noscope", idvECKey(t), false, time.Now().Add(-time.Hour)))}
	agents := idvWriteAgents(t, a1, a2)
	js := startJSONServer(t, hotelDB)
	site := fill(idvSite, "IDENTITY", "mtls", "MODE", "optimistic", "HOTEL", js.URL, "AGENTS", agents, "EXTRA", "", "LEGACY", js.URL)
	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, site, "agtp")
	text = strings.Replace(text, "\tpersist_config off\n", "\tpersist_config off\n\tlocal_certs\n", 1)
	text = strings.Replace(text, fmt.Sprintf("agtp 127.0.0.1:%d {\n", agtpPort), fmt.Sprintf(
		"agtp 127.0.0.1:%d {\n\t\ttls localhost\n\t\tclient_auth {\n\t\t\tmode verify_if_given\n\t\t\ttrust_pool file %s\n\t\t}\n", agtpPort, p.caPEM), 1)
	g := launchText(t, text, sitePort, adminPort, agtpPort)
	root := filepath.Join(filepath.Dir(g.ConfigPath), "data", "caddy", "pki", "authorities", "local", "root.crt")

	dial := func(t *testing.T, maxVersion uint16, cert bool) (*tls.Conn, error) {
		t.Helper()
		pool := x509.NewCertPool()
		if raw, err := os.ReadFile(root); err == nil {
			pool.AppendCertsFromPEM(raw)
		}
		cfg := &tls.Config{ServerName: "localhost", RootCAs: pool, MaxVersion: maxVersion, NextProtos: []string{"agtp"}}
		if cert {
			cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{certA1.Raw}, PrivateKey: keyA1, Leaf: certA1}}
		}
		return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", g.AGTPAddr, cfg)
	}
	// The certificate is issued in the background once Caddy starts.
	var c *tls.Conn
	waitFor(t, 30*time.Second, 200*time.Millisecond, "a TLS 1.3 handshake with the managed certificate", func() bool {
		var err error
		c, err = dial(t, 0, true)
		return err == nil
	})
	st := c.ConnectionState()
	if st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "agtp" {
		t.Errorf("version %x, ALPN %q; want TLS 1.3 and agtp", st.Version, st.NegotiatedProtocol)
	}
	do := func(c *tls.Conn, agent string) *wire.Response {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		cc := wire.NewClientConn(c)
		req, err := wire.NewRequest("FETCH", "/guests/g-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Host", "localhost")
		req.Header["Agent-ID"] = []string{agent}
		req.Header["Authority-Scope"] = []string{"hotel:read"}
		resp, err := cc.Do(req)
		if err != nil {
			t.Fatalf("FETCH over agtps: %v", err)
		}
		return resp
	}
	if r := do(c, agentA1); r.Status != 200 || r.Header.Get("Verification-Path") != "mtls" {
		t.Errorf("bound client certificate: %d, Verification-Path %q", r.Status, r.Header.Get("Verification-Path"))
	}
	if r := do(c, agentA2); r.Status != 401 || !strings.Contains(string(r.Body), "certificate-mismatch") {
		t.Errorf("certificate of A1 with Agent-ID A2: %d %s; want 401 certificate-mismatch", r.Status, r.Body)
	}
	_ = c.Close()
	c2, err := dial(t, 0, false)
	if err != nil {
		t.Fatalf("handshake without a client certificate (verify_if_given): %v", err)
	}
	if r := do(c2, agentA1); r.Status != 401 || !strings.Contains(string(r.Body), "certificate-required") {
		t.Errorf("no client certificate: %d %s; want 401 certificate-required", r.Status, r.Body)
	}
	_ = c2.Close()
	if c3, err := dial(t, tls.VersionTLS12, true); err == nil {
		_ = c3.Close()
		t.Errorf("a TLS 1.2 client was accepted; TLS 1.3 or higher only")
	}
	// Plain text on the TLS listener gets no AGTP answer.
	answers, _ := nativeExchange(t, g.AGTPAddr, nativeReq("DISCOVER", "/", nil, ""), time.Second)
	if len(answers) != 0 {
		t.Errorf("plain text on the agtps listener was answered: %v", answers)
	}

	// A reload that requires a client certificate applies from the very
	// first connection accepted after it (review: the accept loop had
	// read the configuration before it waited in Accept, and that
	// connection's handshake took the old TLS settings).
	// A connection kept alive across that reload is ended at its next
	// request: it was made under the old TLS settings (review: a
	// connection without a certificate went on being served).
	stricter := strings.Replace(g.Caddyfile, "mode verify_if_given", "mode require_and_verify", 1)
	if stricter == g.Caddyfile {
		t.Fatalf("no client_auth mode to change:\n%s", g.Caddyfile)
	}
	kept, err := dial(t, 0, false)
	if err != nil {
		t.Fatalf("handshake without a client certificate before the reload: %v", err)
	}
	defer kept.Close()
	keptConn := wire.NewClientConn(kept)
	keptFetch := func() (*wire.Response, error) {
		_ = kept.SetDeadline(time.Now().Add(10 * time.Second))
		req, _ := wire.NewRequest("FETCH", "/guests/g-1", nil)
		req.Header.Set("Host", "localhost")
		req.Header["Agent-ID"] = []string{agentA1}
		req.Header["Authority-Scope"] = []string{"hotel:read"}
		return keptConn.Do(req)
	}
	if r, err := keptFetch(); err != nil || r.Status != 401 {
		t.Fatalf("the kept connection before the reload: %v %v, want 401 certificate-required", err, r)
	}
	if status, body := reload(t, g, stricter); status != 200 {
		t.Fatalf("reload requiring client certificates: %d %s", status, body)
	}
	if r, err := keptFetch(); err == nil {
		t.Fatalf("a connection made without a client certificate was answered %d after the reload that requires one", r.Status)
	}
	if c4, err := dial(t, 0, false); err == nil {
		// TLS 1.3: the server's refusal arrives with the first read.
		_ = c4.SetDeadline(time.Now().Add(10 * time.Second))
		req, _ := wire.NewRequest("FETCH", "/guests/g-1", nil)
		req.Header.Set("Host", "localhost")
		req.Header["Agent-ID"] = []string{agentA1}
		resp, err := wire.NewClientConn(c4).Do(req)
		_ = c4.Close()
		if err == nil {
			t.Fatalf("the first connection after the reload, without a client certificate, was answered %d: the old client_auth applied", resp.Status)
		}
	}
	if c5, err := dial(t, 0, true); err != nil {
		t.Fatalf("a client certificate after the reload: %v", err)
	} else if r := do(c5, agentA1); r.Status != 200 {
		t.Errorf("a client certificate after the reload: %d", r.Status)
	}

	// A connection that never starts its TLS handshake does not hold up
	// a reload that closes the socket (review: it waited for
	// read_header_timeout, a minute here).
	silent := dialKept(t, g.AGTPAddr)
	time.Sleep(200 * time.Millisecond) // the handshake is being read
	start := time.Now()
	if status, body := reload(t, g, withoutAGTP(t, stricter)); status != 200 {
		t.Fatalf("reload without the agtp block: %d %s", status, body)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the reload that closed the agtps socket took %v: it waited for a handshake that never came", took)
	}
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := silent.Read(make([]byte, 64)); err == nil {
		t.Errorf("the silent connection got %d bytes after the socket closed", n)
	}
}

// TestNativeConfigRefused: plain text off loopback, a bad limit, and an
// empty listen list are refused by caddy validate.
func TestNativeConfigRefused(t *testing.T) {
	site := fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", "http://127.0.0.1:1", "EXTRA", "", "LEGACY", "http://127.0.0.1:1")
	for _, tc := range []struct{ option, want string }{
		{"agtp :14480", "loopback addresses only"},
		{"agtp 127.0.0.1:14480 {\n\t\tmax_connections -1\n\t}", "max_connections"},
		{"agtp 127.0.0.1:14480 {\n\t\tbogus 1\n\t}", "unknown subdirective"},
		{"agtp", "at least one listen address"},
		{"agtp 127.0.0.1:14480 {\n\t\taccess_log on\n\t}", "wrong argument count"},
		{"agtp 127.0.0.1:14480 {\n\t\thandler nosuch\n\t}", `nosuch\": no rcns handler of this name`},
		{"agtp 127.0.0.1:14480\n\tagtp 127.0.0.1:14480", "listened on twice"},
		{"agtp 127.0.0.1:14480 {\n\t\tmax_header_size 10\n\t}", `max_header_size: \"10\" is below 1KiB`},
	} {
		text, _, _, _ := renderCaddyfileDoor(t, site, "http")
		text = strings.Replace(text, "\tpersist_config off\n", "\tpersist_config off\n\t"+tc.option+"\n", 1)
		path := filepath.Join(t.TempDir(), "Caddyfile")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(caddyBin, "validate", "--config", path, "--adapter", "caddyfile")
		cmd.Dir = repoRoot // the site's documents are relative to it
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: caddy validate (err %v) does not refuse it with %q:\n%s", tc.option, err, tc.want, out)
		}
	}
}

// TestNativeReloadUnderLoad: config reloads while requests keep coming,
// on long-lived connections and on a fresh connection per request, lose
// no connection and no request: every request is answered 200.
func TestNativeReloadUnderLoad(t *testing.T) {
	g := nativeGateway(t, "")
	const workers, perWorker = 4, 300
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	done := make(chan struct{})
	var answered atomic.Int64
	req := func() *wire.Request {
		r, _ := wire.NewRequest("FETCH", "/guests/g-1", nil)
		r.Header.Set("Host", g.AGTPAddr)
		r.Header["Agent-ID"] = []string{agentA1}
		r.Header["Authority-Scope"] = []string{"hotel:read"}
		return r
	}
	for w := 0; w < workers; w++ {
		wg.Add(2)
		go func() { // one persistent connection
			defer wg.Done()
			c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			cc := wire.NewClientConn(c)
			for i := 0; i < perWorker; i++ {
				select {
				case <-done:
					return
				default:
				}
				resp, err := cc.Do(req())
				if err != nil || resp.Status != 200 {
					errs <- fmt.Errorf("persistent connection, request %d: %v %v", i, err, resp)
					return
				}
				answered.Add(1)
			}
		}()
		go func() { // a fresh connection per request
			defer wg.Done()
			for i := 0; i < perWorker/3; i++ {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
				if err != nil {
					errs <- fmt.Errorf("dial %d: %v", i, err)
					return
				}
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				resp, err := wire.NewClientConn(c).Do(req())
				_ = c.Close()
				if err != nil || resp.Status != 200 {
					errs <- fmt.Errorf("fresh connection, request %d: %v %v", i, err, resp)
					return
				}
				answered.Add(1)
			}
		}()
	}
	for i := 0; i < 3; i++ {
		waitFor(t, 30*time.Second, 20*time.Millisecond, "requests between reloads", func() bool { return answered.Load() >= int64(50*(i+1)) })
		if status, body := adminLoad(t, g, g.Caddyfile); status != 200 {
			t.Fatalf("reload %d: %d %s", i, status, body)
		}
	}
	before := answered.Load()
	waitFor(t, 30*time.Second, 20*time.Millisecond, "requests after the last reload", func() bool { return answered.Load() >= before+50 })
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestNativeSigned: identity signature on the native door: @authority is
// the Host header and @path/@query come from the request line; a signed
// request is served once, and the same signature again is 401
// signature-replayed (the engine's one replay cache).
func TestNativeSigned(t *testing.T) {
	key := idvNewKey(t, httpsig.AlgEd25519)
	a1 := idvDemo("rcns-demo-agent")
	a1.keys = []map[string]any{key.jwk}
	agents := idvWriteAgents(t, a1)
	js := startJSONServer(t, hotelDB)
	g := startGatewayDoor(t, fill(idvSite, "IDENTITY", "signature", "MODE", "optimistic", "HOTEL", js.URL,
		"AGENTS", agents, "EXTRA", "", "LEGACY", js.URL), nil, "agtp")
	req, err := wire.NewRequest("FETCH", "/guests/g-1?", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Host", g.AGTPAddr)
	req.Header.Set("Agent-ID", agentA1)
	req.Header.Set("Authority-Scope", "hotel:read")
	now := time.Now()
	s := &httpsig.Signer{KeyID: key.kid, Alg: key.alg, Key: key.signer}
	if err := s.Sign(req.HTTPRequest("agtp"), httpsig.SignOptions{Created: now, Expires: now.Add(time.Minute), Nonce: "n-native-1"}); err != nil {
		t.Fatal(err)
	}
	send := func() *wire.Response {
		c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		r, err := wire.NewClientConn(c).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := send(); r.Status != 200 || r.Header.Get("Verification-Path") != "signature" {
		t.Fatalf("signed FETCH over agtp: %d %s (Verification-Path %q)", r.Status, r.Body, r.Header.Get("Verification-Path"))
	}
	if r := send(); r.Status != 401 || !strings.Contains(string(r.Body), "signature-replayed") {
		t.Fatalf("the same signature again: %d %s; want 401 signature-replayed", r.Status, r.Body)
	}
	unsigned, _ := wire.NewRequest("FETCH", "/guests/g-1", nil)
	unsigned.Header.Set("Host", g.AGTPAddr)
	unsigned.Header.Set("Agent-ID", agentA1)
	unsigned.Header.Set("Authority-Scope", "hotel:read")
	req = unsigned
	if r := send(); r.Status != 401 || !strings.Contains(string(r.Body), "signature-missing") {
		t.Fatalf("unsigned over agtp: %d %s; want 401 signature-missing", r.Status, r.Body)
	}
}

// TestNativePortCollision: a native listener on the port of an HTTP
// site fails the config load instead of splitting that port's
// connections between the two (Caddy binds both with SO_REUSEPORT).
func TestNativePortCollision(t *testing.T) {
	site := fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", "http://127.0.0.1:1", "EXTRA", "", "LEGACY", "http://127.0.0.1:1")
	text, sitePort, _, _ := renderCaddyfileDoor(t, site, "http")
	text = strings.Replace(text, "\tpersist_config off\n", fmt.Sprintf("\tpersist_config off\n\tagtp 127.0.0.1:%d\n", sitePort), 1)
	out, err := caddyRunExit(t, text)
	if err == nil || !strings.Contains(out, "give the native door a port of its own") {
		t.Fatalf("caddy run with the native door on the site's port: err %v:\n%s", err, out)
	}
}

// TestNativeReloadRemovingHandlerRefused: a reload whose native door
// names an rcns handler the new configuration no longer has (the rcns
// block renamed) is refused, naming the handler, although the running
// configuration's handler of that name is still provisioned while the
// new one is checked; the running configuration keeps answering, a
// request and a codec refusal alike, and Caddy keeps running.
func TestNativeReloadRemovingHandlerRefused(t *testing.T) {
	g := nativeGateway(t, "")
	renamed := strings.Replace(g.Caddyfile, "\trcns {\n", "\trcns {\n\t\tname renamed\n", 1)
	if renamed == g.Caddyfile {
		t.Fatalf("no rcns block to rename:\n%s", g.Caddyfile)
	}
	status, body := reload(t, g, renamed)
	if status == 200 || !strings.Contains(body, `handler \"default\": no rcns handler of this name is configured`) {
		t.Fatalf("reload that renames the native door's handler away: %d %s\nwant refused, naming the handler", status, body)
	}
	hdr := map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}
	for _, c := range []struct {
		data   string
		want   int
		closed bool
	}{
		{nativeReq("FETCH", "/guests/g-1", hdr, ""), 200, false},
		{"AGTP/1.0 FETCH /guests/g-1#x\r\nAgent-ID: " + agentA1 + "\r\n\r\n", 400, true}, // refused by the codec
	} {
		answers, closed := nativeExchange(t, g.AGTPAddr, c.data, 2*time.Second)
		if len(answers) != 1 || answers[0].Status != c.want || closed != c.closed || answers[0].Header.Get("Server-ID") != "caddy-rcns-it" {
			t.Fatalf("a native request after the refused reload: %d answers %v (closed %v), want one %d from the running configuration (closed %v)", len(answers), answers, closed, c.want, c.closed)
		}
	}
	if strings.Contains(g.Output(), "nil pointer dereference") {
		t.Fatalf("Caddy panicked:\n%s", g.Output())
	}
}

// TestNativeKeepAliveAcrossReloads: a keep-alive connection that waits
// for its next request while reloads complete is served by the newest
// configuration, its engine included, from that request on (review: the
// connection kept the configuration it waited under, whose engine the
// reload had cleaned up, and answered 503). A codec refusal on such a
// connection is the new engine's error answer too.
func TestNativeKeepAliveAcrossReloads(t *testing.T) {
	g := nativeGateway(t, "")
	c := dialKept(t, g.AGTPAddr)
	cc := wire.NewClientConn(c)
	serverID := "caddy-rcns-it"
	reloadTo := func(id string) {
		t.Helper()
		next := strings.Replace(g.Caddyfile, "server_id caddy-rcns-it\n", "server_id "+id+"\n", 1)
		if next == g.Caddyfile {
			t.Fatalf("no server_id to change:\n%s", g.Caddyfile)
		}
		if status, body := reload(t, g, next); status != 200 {
			t.Fatalf("reload to %s: %d %s", id, status, body)
		}
		serverID = id
	}
	fetch := func(when string) {
		t.Helper()
		r, _ := wire.NewRequest("FETCH", "/guests/g-1", nil)
		r.Header.Set("Host", g.AGTPAddr)
		r.Header["Agent-ID"] = []string{agentA1}
		r.Header["Authority-Scope"] = []string{"hotel:read"}
		resp, err := cc.Do(r)
		if err != nil || resp.Status != 200 || resp.Header.Get("Server-ID") != serverID {
			t.Fatalf("FETCH on the kept connection %s: %v %v, want 200 from %q", when, err, resp, serverID)
		}
	}
	fetch("before any reload")
	reloadTo("caddy-rcns-it-2")
	fetch("after a reload")
	reloadTo("caddy-rcns-it-3")
	fetch("after a second reload")
	// A head the codec refuses, on the same connection after a reload:
	// the newest engine's error answer.
	reloadTo("caddy-rcns-it-4")
	if _, err := io.WriteString(c, "AGTP/1.0 FETCH /guests/g-1#x\r\nAgent-ID: "+agentA1+"\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := cc.Read()
	if err != nil || resp.Status != 400 || resp.Header.Get("Server-ID") != serverID {
		t.Fatalf("codec refusal on the kept connection after a reload: %v %v, want 400 from %q", err, resp, serverID)
	}
}

// TestNativeReloadRaisesMaxConnections: a reload that raises
// max_connections lets a waiting connection in at once (review: the
// accept loop kept waiting on the old configuration's limit until a
// connection of it ended).
func TestNativeReloadRaisesMaxConnections(t *testing.T) {
	g := nativeGateway(t, "\t\tmax_connections 1\n")
	hdr := map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}
	held := dialKept(t, g.AGTPAddr)
	hc := bufio.NewReader(held)
	if _, err := io.WriteString(held, nativeReq("FETCH", "/guests/g-1", hdr, "")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if r, err := wire.ReadResponse(hc, wire.Limits{}, 1<<20); err != nil || r.Status != 200 {
		t.Fatalf("the held connection's request: %v %v", err, r)
	}
	raised := strings.Replace(g.Caddyfile, "max_connections 1\n", "max_connections 100\n", 1)
	if raised == g.Caddyfile {
		t.Fatalf("no max_connections to raise:\n%s", g.Caddyfile)
	}
	if status, body := reload(t, g, raised); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	// The held connection stays open (idle); a second one is served.
	answers, _ := nativeExchange(t, g.AGTPAddr, nativeReq("FETCH", "/guests/g-1", hdr, ""), 5*time.Second)
	if len(answers) != 1 || answers[0].Status != 200 {
		t.Fatalf("a second connection after raising max_connections to 100: %d answers %v within 5 s, want one 200", len(answers), answers)
	}
}

// TestNativeMaxConnectionsAcrossReloads: connections accepted under an
// earlier configuration count against the limit of the one serving now
// (review: each reload started the count afresh, and 9 connections were
// served with max_connections 3).
func TestNativeMaxConnectionsAcrossReloads(t *testing.T) {
	g := nativeGateway(t, "\t\tmax_connections 2\n")
	hdr := map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}
	fetch := func(c net.Conn, br *bufio.Reader, wait time.Duration) (*wire.Response, error) {
		_ = c.SetReadDeadline(time.Now().Add(wait))
		return wire.ReadResponse(br, wire.Limits{}, 1<<20)
	}
	var held []net.Conn
	for i := range 2 {
		c := dialKept(t, g.AGTPAddr)
		br := bufio.NewReader(c)
		if _, err := io.WriteString(c, nativeReq("FETCH", "/guests/g-1", hdr, "")); err != nil {
			t.Fatalf("write: %v", err)
		}
		if r, err := fetch(c, br, 5*time.Second); err != nil || r.Status != 200 {
			t.Fatalf("connection %d: %v %v", i+1, err, r)
		}
		held = append(held, c)
	}
	for i, id := range []string{"caddy-rcns-it-2", "caddy-rcns-it-3"} {
		next := strings.Replace(g.Caddyfile, "server_id caddy-rcns-it\n", "server_id "+id+"\n", 1)
		if status, body := reload(t, g, next); status != 200 {
			t.Fatalf("reload %d: %d %s", i+1, status, body)
		}
	}
	third := dialKept(t, g.AGTPAddr)
	br := bufio.NewReader(third)
	if _, err := io.WriteString(third, nativeReq("FETCH", "/guests/g-1", hdr, "")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if r, err := fetch(third, br, 1500*time.Millisecond); err == nil {
		t.Fatalf("a third connection with max_connections 2 and two open, after two reloads, was answered %d", r.Status)
	}
	_ = held[0].Close()
	if r, err := fetch(third, br, 5*time.Second); err != nil || r.Status != 200 {
		t.Fatalf("the third connection once one of the two ended: %v %v, want 200", err, r)
	}
}

// TestNativeStopCutsUnstartedRequests: a reload that closes the native
// socket does not wait for a connection whose request has not started
// (one that sent nothing, or half a head) nor for the drain after a
// refused head (reviews: the stop waited for read_header_timeout, a
// minute by default, or refused_body_drain_timeout, and the admin API
// with it).
func TestNativeStopCutsUnstartedRequests(t *testing.T) {
	g := nativeGateway(t, "")
	silent := dialKept(t, g.AGTPAddr)
	half := dialKept(t, g.AGTPAddr)
	if _, err := io.WriteString(half, "AGTP/1.0 FETCH /guests/g-1\r\nAgent-ID: "+agentA1); err != nil {
		t.Fatalf("write: %v", err)
	}
	refused := dialKept(t, g.AGTPAddr)
	if _, err := io.WriteString(refused, "AGTP/1.0 FETCH /guests/g-1\r\nBad Header Line\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	if r, err := wire.ReadResponse(bufio.NewReader(refused), wire.Limits{}, 1<<20); err != nil || r.Status != 400 {
		t.Fatalf("a head the codec refuses: %v %v, want 400 (then the drain, the client silent)", err, r)
	}
	time.Sleep(200 * time.Millisecond) // the head is being read, the drain runs
	start := time.Now()
	if status, body := reload(t, g, withoutAGTP(t, g.Caddyfile)); status != 200 {
		t.Fatalf("reload without the agtp block: %d %s", status, body)
	}
	// read_header_timeout and idle_timeout are a minute here, the drain
	// 10 s: a reload that waited for any took that long (the admin
	// call itself may wait up to 5 s for the old HTTP listener to go).
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("the reload that closed the native socket took %v: it waited for connections whose request had not started", took)
	}
	for name, c := range map[string]net.Conn{"silent": silent, "half a head": half} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 64)); err == nil {
			t.Errorf("the %s connection got %d bytes after the socket closed, want it closed unanswered", name, n)
		}
	}
}

// withoutAGTP is a Caddyfile without its global agtp block.
func withoutAGTP(t *testing.T, text string) string {
	t.Helper()
	i := strings.Index(text, "\tagtp ")
	if i < 0 {
		t.Fatalf("no agtp block:\n%s", text)
	}
	j := strings.Index(text[i:], "\n\t}\n")
	if j < 0 {
		t.Fatalf("no end of the agtp block:\n%s", text)
	}
	return text[:i] + text[i+j+len("\n\t}\n"):]
}

// TestNativeGracefulStopAnswersRunning: a graceful stop (SIGINT) while a
// native request waits on its upstream answers that request before
// Caddy exits, as the HTTP door does (review: the connection was cut
// with no answer, the upstream call made).
func TestNativeGracefulStopAnswersRunning(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", Door: "agtp"})
	w.Hotel.SlowAfter(2*time.Second, func(r *http.Request) bool { return r.Method == "GET" && r.URL.Path == "/guests/g-1" })
	hdr := map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}
	type result struct {
		answers []*wire.Response
		closed  bool
	}
	got := make(chan result, 1)
	go func() {
		a, closed := nativeExchange(t, w.GW.AGTPAddr, nativeReq("FETCH", "/guests/g-1", hdr, ""), 10*time.Second)
		got <- result{a, closed}
	}()
	waitFor(t, 5*time.Second, 20*time.Millisecond, "the FETCH to reach the upstream", func() bool { return w.Hotel.Count() > 0 })
	w.GW.proc.stop()
	r := <-got
	if len(r.answers) != 1 || r.answers[0].Status != 200 {
		t.Fatalf("a native request running at a graceful stop: %d answers %v, want its 200\n%s", len(r.answers), r.answers, w.GW.Output())
	}
}

// TestNativeLogsFollowReload: the socket's own log lines (here a head
// the codec refuses, logged at DEBUG) go to the logs of the
// configuration serving the connection, not of the one that opened the
// socket (review).
func TestNativeLogsFollowReload(t *testing.T) {
	g := nativeGateway(t, "")
	logFile := filepath.Join(t.TempDir(), "debug.log")
	withLog := strings.Replace(g.Caddyfile, "\tpersist_config off\n", fmt.Sprintf("\tpersist_config off\n\tlog {\n\t\toutput file %s\n\t\tlevel DEBUG\n\t}\n", logFile), 1)
	if withLog == g.Caddyfile {
		t.Fatalf("no global options to add a log to:\n%s", g.Caddyfile)
	}
	if status, body := reload(t, g, withLog); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	answers, _ := nativeExchange(t, g.AGTPAddr, "AGTP/1.0 FETCH /guests/g-1#x\r\nAgent-ID: "+agentA1+"\r\n\r\n", 2*time.Second)
	if len(answers) != 1 || answers[0].Status != 400 {
		t.Fatalf("a head the codec refuses: %v, want one 400", answers)
	}
	waitFor(t, 5*time.Second, 50*time.Millisecond, "the codec refusal's DEBUG line in the reloaded configuration's log file", func() bool {
		raw, _ := os.ReadFile(logFile)
		return strings.Contains(string(raw), "agtp request refused by the codec")
	})
}

// TestNativeSharedHandlerNameWarns: two rcns blocks of one name (both
// leave it unset) with the native door on load, and Caddy says at WARN
// that the door serves one of them in no fixed order; once one block
// has a name of its own, a reload says nothing.
func TestNativeSharedHandlerNameWarns(t *testing.T) {
	js := startJSONServer(t, hotelDB)
	site := fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", js.URL, "EXTRA", "", "LEGACY", js.URL)
	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, site, "agtp")
	second := fmt.Sprintf("\nhttp://127.0.0.1:%d {\n\tbind 127.0.0.1\n%s}\n", freePort(t), site)
	g := launchText(t, text+second, sitePort, adminPort, agtpPort)
	const warn = "several rcns handlers of this configuration share the native door's handler name"
	waitFor(t, 5*time.Second, 50*time.Millisecond, "the WARN about two rcns blocks named default", func() bool {
		return strings.Count(g.Output(), warn) == 1
	})
	named := text + strings.Replace(second, "\trcns {\n", "\trcns {\n\t\tname second\n", 1)
	if status, body := reload(t, g, named); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	if n := strings.Count(g.Output(), warn); n != 1 {
		t.Fatalf("after the reload that names the second block, the WARN appears %d times, want still 1:\n%s", n, g.Output())
	}
}

// TestNativeDoorServesTheRunningConfiguration: the native door answers
// with the running configuration's engine while a reload loads, and
// after a reload that fails once it has provisioned its rcns handler of
// the same name (a second handler's Redis never answers); the new
// configuration's engine answers once it has started. Server-ID tells
// the two apart.
func TestNativeDoorServesTheRunningConfiguration(t *testing.T) {
	g := nativeGateway(t, "")
	next := strings.Replace(g.Caddyfile, "server_id caddy-rcns-it\n", "server_id caddy-rcns-it-next\n", 1)
	if next == g.Caddyfile {
		t.Fatalf("no server_id to change:\n%s", g.Caddyfile)
	}
	stalled := silentListener(t)
	cfg := adaptCaddyfile(t, g, next)
	appendStalledHandler(t, cfg, stalled)

	type loaded struct {
		status int
		body   string
	}
	done := make(chan loaded, 1)
	go func() {
		status, body := adminLoadJSON(t, g, cfg)
		done <- loaded{status, body}
	}()
	hdr := map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}
	ask := func(when, want string) {
		t.Helper()
		r := g.Do(t, "FETCH", "/guests/g-1", hdr, nil)
		if r.Status != 200 || r.Header.Get("Server-ID") != want {
			t.Fatalf("native FETCH %s: %d Server-ID %q, want 200 from %q\n%s", when, r.Status, r.Header.Get("Server-ID"), want, r)
		}
	}
	during := 0
	var res loaded
wait:
	for {
		select {
		case res = <-done:
			break wait
		case <-time.After(300 * time.Millisecond):
			ask("while the reload loads", "caddy-rcns-it")
			during++
		}
	}
	if res.status == 200 || !strings.Contains(res.body, "store redis at "+stalled) {
		t.Fatalf("the reload with a store that never answers: %d %s\nwant refused, naming the store", res.status, res.body)
	}
	if during == 0 {
		t.Fatalf("the reload ended before a request was sent during it: the test proves nothing; make the stalled store slower")
	}
	ask("after the reload failed", "caddy-rcns-it")
	if status, body := reload(t, g, next); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	ask("after a reload that succeeded", "caddy-rcns-it-next")
}

// dialKept opens a connection to addr for a test to keep across
// reloads: a minute's deadline, closed at the test's end.
func dialKept(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return c
}

// TestNativeDoorSkipsLoadFailingAtStart: a reload whose HTTP listener
// cannot bind (the port is held) fails after the native listener of the
// new configuration may have started (Caddy starts apps in no fixed
// order); native requests sent back to back during 20 such reloads are
// all answered by the running configuration (review: 3 of them were
// answered by the failing one). A later good reload serves.
func TestNativeDoorSkipsLoadFailingAtStart(t *testing.T) {
	g := nativeGateway(t, "")
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer held.Close()
	failing := strings.Replace(g.Caddyfile, "server_id caddy-rcns-it\n", "server_id caddy-rcns-it-failing\n", 1) +
		fmt.Sprintf("\nhttp://%s {\n\trespond \"held\"\n}\n", held.Addr())
	stop := make(chan struct{})
	type tally struct{ ok, failing, other int }
	results := make(chan tally, 2)
	hdr := map[string]string{"Agent-ID": agentA1, "Authority-Scope": "hotel:read"}
	for range 2 {
		go func() {
			var n tally
			defer func() { results <- n }()
			c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
			if err != nil {
				n.other++
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			cc := wire.NewClientConn(c)
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, _ := wire.NewRequest("FETCH", "/guests/g-1", nil)
				r.Header.Set("Host", g.AGTPAddr)
				for k, v := range hdr {
					r.Header[k] = []string{v}
				}
				resp, err := cc.Do(r)
				switch {
				case err != nil || resp.Status != 200:
					n.other++
					return
				case resp.Header.Get("Server-ID") == "caddy-rcns-it-failing":
					n.failing++
				default:
					n.ok++
				}
			}
		}()
	}
	for i := range 20 {
		if status, body := reload(t, g, failing); status == 200 || !strings.Contains(body, "address already in use") {
			close(stop)
			t.Fatalf("reload %d with the HTTP port held: %d %s\nwant refused, the address in use", i, status, body)
		}
	}
	close(stop)
	var total tally
	for range 2 {
		n := <-results
		total.ok, total.failing, total.other = total.ok+n.ok, total.failing+n.failing, total.other+n.other
	}
	if total.failing > 0 || total.other > 0 || total.ok == 0 {
		t.Fatalf("native answers during 20 reloads that failed to start: %d from the running configuration, %d from the failing one, %d errors; want all from the running one", total.ok, total.failing, total.other)
	}
	t.Logf("%d native answers during the failing reloads, all from the running configuration", total.ok)
	ok := strings.Replace(g.Caddyfile, "server_id caddy-rcns-it\n", "server_id caddy-rcns-it-next\n", 1)
	if status, body := reload(t, g, ok); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	if r := g.Do(t, "FETCH", "/guests/g-1", hdr, nil); r.Status != 200 || r.Header.Get("Server-ID") != "caddy-rcns-it-next" {
		t.Fatalf("after a good reload: %d Server-ID %q, want 200 from caddy-rcns-it-next", r.Status, r.Header.Get("Server-ID"))
	}
}

// silentListener accepts TCP connections on loopback and never answers
// (a Redis that stalls); its address.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// adaptCaddyfile is the JSON configuration Caddy's admin API adapts
// text to.
func adaptCaddyfile(t *testing.T, g *Gateway, text string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.AdminURL+"/adapt", strings.NewReader(text))
	if err != nil {
		t.Fatalf("new admin request: %v", err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/adapt: %v", g.AdminURL, err)
	}
	defer resp.Body.Close()
	var out struct {
		Result map[string]any `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Result == nil {
		t.Fatalf("POST %s/adapt: %d %v", g.AdminURL, resp.StatusCode, err)
	}
	return out.Result
}

// appendStalledHandler adds, after the route list holding the rcns
// handler, a route (never matched) with a second rcns handler, named
// "stalled", whose Redis store at addr never answers: Caddy provisions
// it after the first, and the load fails once its store's read timeout
// (3 s) has passed.
func appendStalledHandler(t *testing.T, cfg map[string]any, addr string) {
	t.Helper()
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if routes, ok := v["routes"].([]any); ok {
				for _, r := range routes {
					hs, _ := r.(map[string]any)["handle"].([]any)
					for _, h := range hs {
						if hm, _ := h.(map[string]any); hm["handler"] == "rcns" {
							dup := maps.Clone(hm)
							dup["name"], dup["store"] = "stalled", "redis"
							dup["redis"] = map[string]any{"addresses": []any{addr}, "dial_timeout": "1s", "read_timeout": "3s"}
							v["routes"] = append(routes, map[string]any{
								"match":  []any{map[string]any{"path": []any{"/never-matched/*"}}},
								"handle": []any{dup},
							})
							return true
						}
					}
				}
			}
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		case []any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		}
		return false
	}
	if !walk(cfg) {
		t.Fatalf("no rcns handler in the adapted configuration")
	}
}

// adminLoadJSON loads a JSON configuration through the admin API; it
// may run on another goroutine (no t.Fatal).
func adminLoadJSON(t *testing.T, g *Gateway, cfg map[string]any) (int, string) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return 0, err.Error()
	}
	req, err := http.NewRequest(http.MethodPost, g.AdminURL+"/load", bytes.NewReader(raw))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := testClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
