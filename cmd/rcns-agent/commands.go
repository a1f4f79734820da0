package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// errUsage marks a command-line mistake (exit status 2).
var errUsage = errors.New("usage")

const usage = `usage:
  rcns-agent keygen -alg ed25519|ecdsa-p256-sha256 -out key.pem
  rcns-agent id genesis.json
  rcns-agent thumbprint -key key.pem
  rcns-agent call [-key key.pem] -agent-id ID [-scope S] [-allow-rcns]
          [-idempotency-key K] [-contract ID] [-H 'Name: v']... [-timeout 30s]
          [-cacert ca.pem] [-cert cert.pem -cert-key key.pem] [-insecure-plaintext]
          METHOD URL [JSON-BODY]
  rcns-agent key inspect|release|resolve [call flags] -for AGENT-ID
          -target-key KEY [-reason TEXT] [-status N] [-result JSON] URL
  rcns-agent verify-record -keys keys.json RECORD|-   (RECORD: the JWS text; - reads it, or an answer, from stdin)
  URL is http://, https://, agtp:// (AGTP/1.0 in plain text, loopback only
  unless -insecure-plaintext) or agtps:// (AGTP/1.0 over TLS 1.3); the
  AGTP port defaults to 4480. Without -key the request is not signed
  (for a gateway under identity header or mtls). key is the operator's
  tool for one agent's Idempotency-Key (scope inspect:all by default):
  inspect shows its state, release frees an outcome-unknown key (its
  request did not run), resolve stores an answer for it.
exit status: 0 a 2xx answer other than 262 (263 included); 1 no answer
  (connection, TLS, timeout, a bad file); 2 a usage error; 3 a 461
  confirm-first preview (nothing ran: present the contract); 4 any other
  answer (262, 4xx such as 404, 422 and 459-464, 5xx). The answer is
  printed either way. verify-record: 0 the record's signature verifies
  against keys.json (a JWK set or the gateway's manifest), 1 it does not.
`

// Exit statuses of run (documented in the package comment and usage).
const (
	// exitOK is a served answer: 2xx but 262.
	exitOK = 0
	// exitFailure is no answer: a connection, TLS or file error.
	exitFailure = 1
	// exitUsage is a command-line mistake.
	exitUsage = 2
	// exitPreview is a 461 RCNS Contract Available: a confirm-first
	// preview whose plan has not run.
	exitPreview = 3
	// exitRefused is any other answer: 262, 3xx, 4xx, 5xx.
	exitRefused = 4
)

// answerError is the outcome of call when the gateway answered with a
// status that exitFor does not count as served: the answer was printed,
// and run exits with exitFor(status).
type answerError struct{ status int }

func (e *answerError) Error() string {
	if e.status == 461 {
		return "the gateway answered 461: a confirm-first preview, nothing ran; present the contract (-contract SYNTHESIS-ID) to run it"
	}
	return fmt.Sprintf("the gateway answered %d", e.status)
}

// exitFor is the exit status of an answer with status: exitOK for 2xx
// other than 262 (AGTP's Authorization Required, a refusal), exitPreview
// for 461, exitRefused otherwise, as curl --fail treats an HTTP error.
func exitFor(status int) int {
	switch {
	case status >= 200 && status < 300 && status != 262:
		return exitOK
	case status == 461:
		return exitPreview
	default:
		return exitRefused
	}
}

// answered returns nil for an answer exitFor counts as served, else an
// *answerError.
func answered(status int) error {
	if exitFor(status) == exitOK {
		return nil
	}
	return &answerError{status: status}
}

// signatureLifetime is expires-created for call (the gateway allows at
// most 300 s).
const signatureLifetime = 60 * time.Second

// run executes one command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "keygen":
		err = keygen(args[1:], stdout, stderr)
	case "id":
		err = agentIDCmd(args[1:], stdout, stderr)
	case "thumbprint":
		err = thumbprint(args[1:], stdout, stderr)
	case "call":
		err = call(context.Background(), args[1:], stdout, stderr)
	case "key":
		err = keyCmd(context.Background(), args[1:], stdout, stderr)
	case "verify-record":
		err = verifyRecord(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "rcns-agent: unknown command %q\n%s", args[0], usage)
		return 2
	}
	var ae *answerError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp): // the FlagSet printed its help
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "rcns-agent: %v\n%s", err, usage)
		return exitUsage
	case errors.As(err, &ae):
		fmt.Fprintf(stderr, "rcns-agent: %v\n", err)
		return exitFor(ae.status)
	default:
		fmt.Fprintf(stderr, "rcns-agent: %v\n", err)
		return exitFailure
	}
}

// usageErr wraps a usage mistake.
func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// newFlags is a FlagSet that reports errors to stderr without exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args into fs, mapping errors to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// keygen makes a key pair, writes the private key and prints keyid and
// public JWK.
func keygen(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keygen", stderr)
	alg := fs.String("alg", httpsig.AlgEd25519, "ed25519 or ecdsa-p256-sha256")
	out := fs.String("out", "", "private key file to create (PEM PKCS#8, mode 0600)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() != 0 {
		return usageErr("keygen needs -out and no arguments")
	}
	var key crypto.Signer
	switch *alg {
	case httpsig.AlgEd25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		key = k
	case httpsig.AlgECDSAP256SHA256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		key = k
	default:
		return usageErr("unsupported -alg %q", *alg)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return printKey(stdout, key.Public())
}

// printKey prints "keyid <thumbprint>" and "jwk <public JWK>".
func printKey(w io.Writer, pub crypto.PublicKey) error {
	kid, err := httpsig.Thumbprint(pub)
	if err != nil {
		return err
	}
	jwk, err := httpsig.JWKFromPublic(pub)
	if err != nil {
		return err
	}
	b, err := json.Marshal(jwk)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "keyid %s\njwk %s\n", kid, b)
	return err
}

// thumbprint prints the keyid of -key.
func thumbprint(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("thumbprint", stderr)
	keyPath := fs.String("key", "", "private key file (PEM)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *keyPath == "" || fs.NArg() != 0 {
		return usageErr("thumbprint needs -key and no arguments")
	}
	key, err := httpsig.LoadPrivateKey(*keyPath)
	if err != nil {
		return err
	}
	kid, err := httpsig.Thumbprint(key.Public())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, kid)
	return err
}

// agentIDCmd prints the Agent-ID of a genesis document.
func agentIDCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("id", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("id needs one genesis.json argument")
	}
	doc, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	id, err := agentID(doc)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, id)
	return err
}

// agentID computes the canonical Agent-ID of an Agent Genesis document
// (RCNS spec "Agent-ID"): lowercase hex SHA-256 of the RFC 8785 JCS
// form of the document with its top-level "signature" member removed.
// The document must be a JSON object without duplicate members.
func agentID(genesis []byte) (string, error) {
	// JCS validates the document (syntax, duplicate names) first.
	if _, err := jcs.Transform(genesis); err != nil {
		return "", fmt.Errorf("genesis: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(genesis, &obj); err != nil {
		return "", fmt.Errorf("genesis is not a JSON object: %w", err)
	}
	delete(obj, "signature")
	stripped, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(stripped)
	if err != nil {
		return "", fmt.Errorf("genesis: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// headerFlags collects repeated -H 'Name: value' flags.
type headerFlags []string

// String joins the collected values.
func (h *headerFlags) String() string { return strings.Join(*h, ", ") }

// Set appends one value.
func (h *headerFlags) Set(v string) error {
	name, _, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("header %q is not 'Name: value'", v)
	}
	*h = append(*h, v)
	return nil
}

// call sends one signed AGTP request and prints the response: over
// HTTP for http:// and https:// URLs (the HTTP binding, spec §2.3), on
// the native AGTP/1.0 wire for agtp:// and agtps:// (spec §2.1).
func call(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("call", stderr)
	o := callFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 || fs.NArg() > 3 {
		return usageErr("call needs METHOD URL [JSON-BODY]")
	}
	var body []byte
	if fs.NArg() == 3 {
		body = []byte(fs.Arg(2))
		if !json.Valid(body) {
			return usageErr("JSON-BODY is not valid JSON")
		}
	}
	return o.send(ctx, fs, fs.Arg(0), fs.Arg(1), body, stdout)
}

// callOpts are the flags of call (and of the commands built on it).
type callOpts struct {
	keyPath, agent, scope, idem, contract *string
	allow, plaintext                      *bool
	timeout                               *time.Duration
	caFile, certFile, certKey             *string
	headers                               headerFlags
}

// callFlags declares call's flags on fs.
func callFlags(fs *flag.FlagSet) *callOpts {
	o := &callOpts{}
	o.keyPath = fs.String("key", "", "private key file (PEM) to sign with; leave it out for a gateway under identity header or mtls (the request goes unsigned)")
	o.agent = fs.String("agent-id", "", "Agent-ID of the calling agent")
	o.scope = fs.String("scope", "", "Authority-Scope header value")
	o.allow = fs.Bool("allow-rcns", false, "send Allow-RCNS: true")
	o.idem = fs.String("idempotency-key", "", "Idempotency-Key header value")
	o.contract = fs.String("contract", "", "Contract-Synthesized header value (a synthesis_id)")
	o.timeout = fs.Duration("timeout", 30*time.Second, "whole-request timeout")
	o.caFile = fs.String("cacert", "", "PEM file of the CA certificates that https:// and agtps:// servers are verified against (default: the system's)")
	o.certFile = fs.String("cert", "", "client certificate chain (PEM) presented to https:// and agtps:// servers (mTLS); needs -cert-key")
	o.certKey = fs.String("cert-key", "", "private key (PEM) of -cert")
	o.plaintext = fs.Bool("insecure-plaintext", false, "allow agtp:// (plain text) to a host that is not loopback")
	fs.Var(&o.headers, "H", "extra header 'Name: value' (repeatable; not covered unless a default component; a Content-Type replaces the application/json sent with a body)")
	return o
}

// send checks the parsed flags of fs and sends METHOD target with body
// (nil: none), printing the answer; an answer other than 2xx (but 262)
// is an *answerError.
func (o *callOpts) send(ctx context.Context, fs *flag.FlagSet, method, target string, body []byte, stdout io.Writer) error {
	keyPath, agent, scope, allow, idem, contract := o.keyPath, o.agent, o.scope, o.allow, o.idem, o.contract
	timeout, caFile, certFile, certKey, plaintext, headers := o.timeout, o.caFile, o.certFile, o.certKey, o.plaintext, o.headers
	bearer := slices.ContainsFunc(headers, func(hv string) bool {
		name, _, _ := strings.Cut(hv, ":")
		return strings.EqualFold(strings.TrimSpace(name), "Authorization")
	})
	switch {
	case *agent == "" && *keyPath != "":
		return usageErr(fs.Name() + " -key needs -agent-id (the signature covers it)")
	case *agent == "" && !bearer:
		return usageErr(fs.Name() + " needs -agent-id, or an access token (-H 'Authorization: Bearer …') under identity oauth")
	}
	if err := refuseEmpty(fs, "key", "idempotency-key", "contract", "scope", "cacert", "cert", "cert-key"); err != nil {
		return err
	}
	if (*certFile == "") != (*certKey == "") {
		return usageErr("-cert and -cert-key go together")
	}
	var key crypto.Signer // nil: unsigned
	if *keyPath != "" {
		k, err := httpsig.LoadPrivateKey(*keyPath)
		if err != nil {
			return err
		}
		key = k
	}
	tlsConf, err := clientTLS(*caFile, *certFile, *certKey)
	if err != nil {
		return err
	}
	setHeaders := func(h http.Header) {
		for _, hv := range headers {
			name, value, _ := strings.Cut(hv, ":")
			h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		}
		if *agent != "" {
			h.Set("Agent-ID", *agent)
		}
		if *scope != "" {
			h.Set("Authority-Scope", *scope)
		}
		if *allow {
			h.Set("Allow-RCNS", "true")
		}
		if *idem != "" {
			h.Set("Idempotency-Key", *idem)
		}
		if *contract != "" {
			h.Set("Contract-Synthesized", *contract)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if u, err := url.Parse(target); err == nil && (u.Scheme == "agtp" || u.Scheme == "agtps") {
		req, err := newSignedAGTPRequest(key, method, u, body, setHeaders, time.Now())
		if err != nil {
			return err
		}
		resp, err := exchangeAGTP(ctx, u, req, tlsConf, *plaintext)
		if err != nil {
			return err
		}
		if err := printAGTPResponse(stdout, resp); err != nil {
			return err
		}
		return answered(resp.Status)
	}
	req, err := newSignedRequest(ctx, key, method, target, body, setHeaders, time.Now())
	if err != nil {
		return err
	}
	client := http.DefaultClient
	if tlsConf != nil {
		client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tlsConf}}
	}
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := printResponse(stdout, resp); err != nil {
		return err
	}
	return answered(resp.StatusCode)
}

// refuseEmpty is a usage error when one of the named flags was given
// with an empty value: `-idempotency-key "$(uuidgen)"` on a machine
// without uuidgen would otherwise send no Idempotency-Key, silently
// losing the at-most-once protection the caller asked for, and an empty
// -scope would send no Authority-Scope, which gives the request the
// agent's whole grant (spec §3) instead of the narrow claim intended.
func refuseEmpty(fs *flag.FlagSet, names ...string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && slices.Contains(names, f.Name) && f.Value.String() == "" {
			err = usageErr("-%s was given an empty value (did a command substitution fail?); give a value or leave the flag out", f.Name)
		}
	})
	return err
}

// newSignedRequest builds METHOD target with body (JSON, may be nil;
// sent as application/json unless setHeaders set a Content-Type: -H),
// lets setHeaders add fields, and signs it under sig1 at now with
// DefaultComponents, expires now+60s and a random nonce; with a nil key
// it is sent unsigned (a Content-Digest is still set for a body).
func newSignedRequest(ctx context.Context, key crypto.Signer, method, target string, body []byte, setHeaders func(http.Header), now time.Time) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("URL scheme %q: want http, https, agtp or agtps", req.URL.Scheme)
	}
	setHeaders(req.Header)
	if body != nil {
		if req.Header.Get("Content-Type") == "" { // a -H Content-Type is sent as given
			req.Header.Set("Content-Type", "application/json")
		}
		httpsig.SetContentDigest(req.Header, body)
	}
	if key == nil {
		return req, nil
	}
	if err := sign(req, key, now); err != nil {
		return nil, err
	}
	return req, nil
}

// sign signs req under sig1 at now with DefaultComponents, expires
// now+60s and a random nonce.
func sign(req *http.Request, key crypto.Signer, now time.Time) error {
	alg, err := httpsig.Algorithm(key.Public())
	if err != nil {
		return err
	}
	kid, err := httpsig.Thumbprint(key.Public())
	if err != nil {
		return err
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	s := &httpsig.Signer{KeyID: kid, Alg: alg, Key: key}
	return s.Sign(req, httpsig.SignOptions{
		Created: now,
		Expires: now.Add(signatureLifetime),
		Nonce:   base64.RawURLEncoding.EncodeToString(nonce),
	})
}

// printResponse writes the status line, the header fields sorted by
// name (one line per value) and the body.
func printResponse(w io.Writer, resp *http.Response) error {
	return printAnswer(w, resp.Proto+" "+resp.Status, resp.Header, resp.Body)
}

// printAnswer writes statusLine, the header fields sorted by name in
// AGTP spelling (wire.Spelling: "Agent-ID"), one line per value, an
// empty line and the body.
func printAnswer(w io.Writer, statusLine string, h http.Header, body io.Reader) error {
	var b strings.Builder
	b.WriteString(statusLine + "\n")
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, v := range h[name] {
			fmt.Fprintf(&b, "%s: %s\n", wire.Spelling(name), v)
		}
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	lw := &lastByteWriter{w: w}
	if _, err := io.Copy(lw, body); err != nil {
		return err
	}
	if lw.n > 0 && lw.last != '\n' {
		_, err := io.WriteString(w, "\n") // the shell prompt starts on its own line
		return err
	}
	return nil
}

// lastByteWriter passes writes to w and remembers how many bytes went
// through and the last of them.
type lastByteWriter struct {
	w    io.Writer
	n    int64
	last byte
}

func (l *lastByteWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.n += int64(n)
		l.last = p[n-1]
	}
	return n, err
}
