package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// agtpPort is the AGTP port (agtp-09 §6.1), used when an agtp:// or
// agtps:// URL names none.
const agtpPort = "4480"

// maxAnswerBytes bounds an AGTP answer's body (bytes).
const maxAnswerBytes = wire.DefaultMaxResponseBody

// newSignedAGTPRequest builds the AGTP/1.0 request METHOD u with body
// (JSON, may be nil; sent as application/json unless setHeaders set a
// Content-Type: -H): target u's path and query, Host u's host[:port]
// as written, the fields setHeaders adds, and signed as an HTTP request
// is (sign) over the components wire.Request.HTTPRequest derives, so
// @authority is the Host header and @path and @query come from the
// request line.
func newSignedAGTPRequest(key crypto.Signer, method string, u *url.URL, body []byte, setHeaders func(http.Header), now time.Time) (*wire.Request, error) {
	if err := checkAGTPURL(u); err != nil {
		return nil, err
	}
	req, err := wire.NewRequest(method, u.RequestURI(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Host", u.Host)
	setHeaders(req.Header)
	if body != nil {
		if req.Header.Get("Content-Type") == "" { // a -H Content-Type is sent as given
			req.Header.Set("Content-Type", "application/json")
		}
		httpsig.SetContentDigest(req.Header, body)
	}
	if key == nil {
		return req, nil // unsigned (identity header or mtls)
	}
	if err := sign(req.HTTPRequest(u.Scheme), key, now); err != nil {
		return nil, err
	}
	return req, nil
}

// checkAGTPURL refuses what an agtp:// or agtps:// URL cannot carry.
func checkAGTPURL(u *url.URL) error {
	switch {
	case u.Host == "" || u.Hostname() == "":
		return usageErr("%s URL %q names no host", u.Scheme, u.Redacted())
	case u.User != nil:
		return usageErr("%s URLs carry no user information", u.Scheme)
	case u.Fragment != "" || u.RawFragment != "":
		return usageErr("%s URLs carry no fragment: AGTP refuses '#' in the request line", u.Scheme)
	case u.Opaque != "":
		return usageErr("%s URL %q is not scheme://host[:port]/path", u.Scheme, u.Redacted())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return usageErr("%s URL port %q is not 1-65535", u.Scheme, p)
		}
	}
	return nil
}

// exchangeAGTP connects to u's host and port (4480 by default), over
// TLS 1.3 with ALPN "agtp" for agtps:// (tlsConf adds the roots and
// client certificate), in plain text for agtp:// (only to a loopback
// address unless allowPlain), sends req, reads its answer and closes.
// ctx bounds the whole exchange.
func exchangeAGTP(ctx context.Context, u *url.URL, req *wire.Request, tlsConf *tls.Config, allowPlain bool) (*wire.Response, error) {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = agtpPort
	}
	addr := net.JoinHostPort(host, port)
	plain := u.Scheme == "agtp"
	if ip := net.ParseIP(host); plain && !allowPlain && ip != nil && !ip.IsLoopback() {
		return nil, plaintextRefused(addr)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if plain && !allowPlain && !loopbackAddr(conn.RemoteAddr()) {
		return nil, plaintextRefused(conn.RemoteAddr().String())
	}
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return nil, err
		}
	}
	c := net.Conn(conn)
	if !plain {
		conf := &tls.Config{}
		if tlsConf != nil {
			conf = tlsConf.Clone()
		}
		conf.MinVersion = tls.VersionTLS13 // agtp-09 §11.1; bind-00 §4.2
		conf.NextProtos = []string{"agtp"}
		conf.ServerName = host
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("agtps: TLS handshake with %s (AGTP requires TLS 1.3): %w", addr, err)
		}
		c = tc
	}
	cc := wire.NewClientConn(c)
	cc.MaxBodyBytes = maxAnswerBytes
	return cc.Do(req)
}

func plaintextRefused(addr string) error {
	return fmt.Errorf("agtp:// sends in plain text and %s is not a loopback address: use agtps://, or -insecure-plaintext to send anyway", addr)
}

// loopbackAddr reports whether a is a TCP address on a loopback IP.
func loopbackAddr(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// clientTLS is the TLS client configuration of the -cacert, -cert and
// -cert-key flags: nil when none is set (the system roots, no client
// certificate).
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" {
		return nil, nil
	}
	conf := &tls.Config{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert %s holds no PEM certificate", caFile)
		}
		conf.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("-cert/-cert-key: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// printAGTPResponse prints an AGTP answer as printResponse prints an
// HTTP one: "AGTP/1.0 CODE REASON" with the reason phrase the server
// sent, the fields, the body.
func printAGTPResponse(w io.Writer, resp *wire.Response) error {
	line := resp.Proto + " " + strconv.Itoa(resp.Status)
	if resp.Reason != "" {
		line += " " + resp.Reason
	}
	return printAnswer(w, line, resp.Header, bytes.NewReader(resp.Body))
}
