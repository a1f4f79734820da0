package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Version is the protocol version token of every request and status
// line (agtp-09 §6.5.1).
const Version = "AGTP/1.0"

// Request is one AGTP/1.0 request: the head as parsed by ReadRequest,
// or one a client builds with NewRequest and sends with Write.
type Request struct {
	// Method is the method token as sent (an RFC 9110 token; the AGTP
	// method grammar and catalog are the engine's to check).
	Method string
	// Target is the request-target as sent: origin-form, an absolute
	// path with an optional query; "/" for the two-token request line.
	Target string
	// URL is Target parsed by url.ParseRequestURI (Path, RawPath,
	// RawQuery, ForceQuery), as net/http parses an HTTP request-target.
	URL *url.URL
	// Header holds the header fields under net/http's canonical keys
	// ("Agent-Id"), values as sent without surrounding whitespace, one
	// entry per line; Host is in it (net/http moves it to a field).
	Header http.Header
	// ContentLength is the body's length in bytes: the Content-Length
	// value, 0 when the field is absent.
	ContentLength int64
	// Body reads the body: exactly ContentLength bytes, then io.EOF;
	// io.ErrUnexpectedEOF when the connection ends first, and the
	// connection's own error (a deadline) as it comes. ReadRequest
	// does not read it. For Write, Body supplies ContentLength bytes
	// (nil when ContentLength is 0).
	Body io.Reader
	// HeadBytes is how many bytes the head took on the wire (request
	// line, header lines, empty line), set by ReadRequest.
	HeadBytes int

	body *body // set by ReadRequest: Body, for DiscardBody
}

// ReadRequest reads the head of the next request from br and returns
// it with a Body bounded to its Content-Length (agtp-09 §6.5.1,
// §6.4.1; spec/RCNS.md §2.1). It reads nothing of the body: the caller
// reads Body under its own size limit (413 body-too-large), and calls
// DiscardBody before reading the next request from the same br.
//
// The grammar accepted:
//
//	request    = request-line *( field-line CRLF ) CRLF [ body ]
//	request-line = "AGTP/1.0" SP method [ SP request-target ] CRLF
//	field-line = field-name ":" OWS field-value OWS
//
// with method an RFC 9110 token and request-target origin-form
// (path-absolute [ "?" query ]); a two-token line means "/".
//
// It returns:
//   - the error of br unchanged (io.EOF for a clean close, a timeout
//     net.Error at an idle deadline) when it fails before the first
//     byte of a request: no request was started, so none is answered;
//   - an *Error (see the package documentation for the refusals) when
//     the head is malformed, over lim, or cut after its first byte (408
//     on a deadline, 400 incomplete-request on EOF): the answer to send
//     before closing the connection;
//   - the request otherwise.
//
// A missing Content-Length means no body: the drafts require the field
// on every message, but the reference client sends it only with a
// body, and a request without one is unambiguous (RFC 9112 §6.3 rule
// 6). Transfer-Encoding is refused (400 content-length-required).
func ReadRequest(br *bufio.Reader, lim Limits) (*Request, error) {
	h := &headReader{br: br, first: "request line", budget: lim.maxBytes(), strict: true}
	if _, err := br.Peek(1); err != nil {
		return nil, err
	}
	line, err := h.readLine()
	h.strict = false
	if err != nil {
		var ce *controlError
		switch {
		case errors.As(err, &ce) && ce.at == 0 && ce.c == 0x16:
			return nil, refuse(400, "invalid-request-line", "the connection opened with a TLS handshake record (0x16), and this port speaks plain-text "+Version+": use agtp:// here, or agtps:// on the TLS port")
		case errors.As(err, &ce):
			return nil, refuse(400, "invalid-request-line", fmt.Sprintf("the request line carries the control character %q at byte %d", ce.c, ce.at))
		case errors.Is(err, errTooLarge):
			return nil, refuse(431, "header-too-large", fmt.Sprintf("the request line exceeds %d bytes", lim.maxBytes()))
		case errors.Is(err, errBareLF):
			return nil, refuse(400, "invalid-request-line", "the request line ends in a bare LF: lines end in CRLF")
		}
		return nil, truncated(err, h.n)
	}
	singleton := func(key string) (string, bool) {
		name, ok := singletonKeys[key]
		return name, ok
	}
	req, e := parseRequestLine(line)
	if e != nil {
		if e.Method != "" {
			// An AGTP/1.0 line with a method token and a target the
			// server refuses: the client frames AGTP, so its head is
			// read for the identifiers the answer echoes. A head that
			// fails too keeps the line's refusal.
			hdr, err := h.readFields(lim, singleton)
			var fe *Error
			if err == nil {
				e.Header = hdr
			} else if errors.As(err, &fe) {
				e.Header = fe.Header // the well-formed fields, or nil
			}
		}
		return nil, e
	}
	req.Header, err = h.readFields(lim, singleton)
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) && fe.Header != nil {
			fe.Method, fe.URL = req.Method, req.URL
		}
		return nil, err
	}
	if _, ok := req.Header["Transfer-Encoding"]; ok {
		e := refuse(400, "content-length-required", "AGTP messages are framed by Content-Length; Transfer-Encoding (chunked) is refused (agtp-09 §6.4.1)")
		e.Method, e.Header, e.URL = req.Method, req.Header, req.URL
		return nil, e
	}
	if v, ok := req.Header["Content-Length"]; ok {
		n, e := parseContentLength(v[0])
		if e != nil {
			e.Method, e.Header, e.URL = req.Method, req.Header, req.URL
			return nil, e
		}
		req.ContentLength = n
	}
	req.HeadBytes = h.n
	req.body = &body{r: br, remaining: req.ContentLength}
	req.Body = req.body
	return req, nil
}

// parseRequestLine parses the request line (without CRLF).
func parseRequestLine(line []byte) (*Request, *Error) {
	if i := invalidValueByte(line); i >= 0 {
		return nil, refuse(400, "invalid-request-line", fmt.Sprintf("the request line carries the control character %q at byte %d", line[i], i))
	}
	s := string(line)
	parts := strings.SplitN(s, " ", 4)
	if parts[0] != Version {
		return nil, versionError(s, parts)
	}
	if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
		return nil, refuse(400, "invalid-request-line", fmt.Sprintf("the request line %q is not %s SP METHOD [SP TARGET] with single spaces (agtp-09 §6.5.1)", textcut.Clip(s), Version))
	}
	method := parts[1]
	if !validToken(method) {
		return nil, refuse(400, "invalid-request-line", fmt.Sprintf("the method %q is not a token (RFC 9110 §5.6.2)", textcut.Clip(method)))
	}
	target := "/"
	if len(parts) == 3 {
		target = parts[2]
	}
	badTarget := func(explanation string) *Error {
		e := refuse(400, "invalid-request-line", explanation)
		e.Method = method
		// The path net/http reads from such a target (a '#' kept in it,
		// an absolute-form target's path), which the HTTP door's
		// answer names: the answer here names the same (helper-148).
		if u, err := url.ParseRequestURI(target); err == nil {
			e.URL = u
		}
		return e
	}
	if strings.Contains(s, "#") {
		return nil, badTarget("the request target must not contain '#' (api-01 §5.6)")
	}
	if target[0] != '/' {
		e := badTarget(fmt.Sprintf("the request target %q is not origin-form: an absolute path with an optional query", textcut.Clip(target)))
		if target == "*" {
			e.URL = &url.URL{Path: "*"} // as net/http reads OPTIONS *: the answer names it
		}
		return nil, e
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, badTarget(fmt.Sprintf("the request target %q is not a URI path: %s", textcut.Clip(target), urlProblem(err)))
	}
	return &Request{Method: method, Target: target, URL: u}, nil
}

// urlProblem is the url package's complaint without the input it
// quotes in full.
func urlProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ee url.EscapeError
	if errors.As(err, &ee) {
		return "invalid percent-encoding"
	}
	return textcut.Clip(err.Error())
}

// versionError is the refusal of a request line whose first token is
// not Version: another AGTP version, or an HTTP request line, which is
// answered in HTTP/1.1 so an HTTP client can show it.
func versionError(s string, parts []string) *Error {
	if strings.HasPrefix(parts[0], "AGTP/") {
		return refuse(400, "unsupported-version", fmt.Sprintf("this server speaks %s, not %q", Version, textcut.Clip(parts[0])))
	}
	if last := parts[len(parts)-1]; len(parts) == 3 && strings.HasPrefix(last, "HTTP/") {
		e := refuse(400, "unsupported-version", fmt.Sprintf("this port speaks %s (agtp-09 §6.5.1), not HTTP: the request line is %s METHOD TARGET; send HTTP to the gateway's HTTP port", Version, Version))
		e.Proto = "HTTP/1.1"
		return e
	}
	return refuse(400, "invalid-request-line", fmt.Sprintf("the request line %q does not start with %s (agtp-09 §6.5.1)", textcut.Clip(s), Version))
}

// DiscardBody reads and drops what is left of the body, so the next
// request can be read from the same connection, when at most max bytes
// are left. It returns nil when the body has been consumed to its end;
// ErrBodyNotDrained when more than max bytes are left (nothing is
// read); the read error (io.ErrUnexpectedEOF, a timeout) when the body
// could not be read to its end. After any error the connection must be
// closed: where the next request starts is not known. net/http drains
// at most 256 KiB (DefaultMaxDrain) the same way.
//
// A request from ReadRequest only; on any other it returns nil.
func (r *Request) DiscardBody(max int64) error {
	b := r.body
	if b == nil {
		return nil
	}
	if b.err != nil && b.err != io.EOF {
		return b.err
	}
	if b.remaining == 0 {
		return nil
	}
	if b.remaining > max {
		return ErrBodyNotDrained
	}
	_, err := io.Copy(io.Discard, b)
	return err
}

// BodyRemaining is how many body bytes have not been read yet (0 for a
// request not from ReadRequest).
func (r *Request) BodyRemaining() int64 {
	if r.body == nil {
		return 0
	}
	return r.body.remaining
}

// DefaultMaxDrain is the unread body a server discards to keep a
// connection open (net/http's limit for the same, 256 KiB).
const DefaultMaxDrain = 256 << 10

// ErrBodyNotDrained is DiscardBody's answer when more than its max is
// left of the body: the connection must be closed.
var ErrBodyNotDrained = errors.New("agtp wire: too much of the request body is unread to drain it; close the connection")

// body reads exactly remaining bytes from r.
type body struct {
	r         *bufio.Reader
	remaining int64
	err       error // sticky: io.EOF at the end, or the read error
}

// Read implements io.Reader over the rest of the body.
func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining == 0 {
		b.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.r.Read(p)
	b.remaining -= int64(n)
	switch {
	case err == io.EOF && b.remaining > 0:
		err = io.ErrUnexpectedEOF
	case err == nil && b.remaining == 0:
		err = io.EOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// HTTPRequest returns r as an *http.Request for code written against
// net/http, RFC 9421 signing and verification (policy/httpsig) first:
// both client and server derive the signature components from it, so
// they agree.
//
// scheme is "agtp" (plain text) or "agtps" (TLS); it becomes URL.Scheme,
// which policy/httpsig's @scheme and @target-uri read and whose default
// port (4480) @authority drops. Host is the Host header ("" when
// absent), which @authority reads. URL is r.URL with Scheme set (@path
// is its escaped path, @query its raw query), RequestURI is Target,
// Proto is Version. Header is r.Header itself (not a copy: a signature
// added to it lands on r). Body is r.Body (http.NoBody when
// ContentLength is 0). The caller sets TLS, RemoteAddr and the context.
// A Request without URL (not from ReadRequest or NewRequest) has Target
// parsed for it, "/" when that fails.
func (r *Request) HTTPRequest(scheme string) *http.Request {
	var u url.URL
	if r.URL != nil {
		u = *r.URL
	} else if pu, err := url.ParseRequestURI(r.Target); err == nil {
		u = *pu
	} else {
		u.Path = "/"
	}
	u.Scheme = scheme
	hr := &http.Request{
		Method:        r.Method,
		URL:           &u,
		Proto:         Version,
		ProtoMajor:    1,
		Header:        r.Header,
		Host:          r.Header.Get("Host"),
		RequestURI:    r.Target,
		ContentLength: r.ContentLength,
		Body:          http.NoBody,
	}
	if r.ContentLength != 0 && r.Body != nil {
		hr.Body = io.NopCloser(r.Body)
	}
	return hr
}

// NewRequest builds a request for method and target (origin-form:
// "/path?query") with body (nil or empty for none), checking them as
// ReadRequest would, so a client never sends what a server refuses.
// Header starts empty; the caller adds Host and the AGTP headers.
func NewRequest(method, target string, body []byte) (*Request, error) {
	req, e := parseRequestLine([]byte(Version + " " + method + " " + target))
	if e != nil {
		return nil, e
	}
	req.Header = make(http.Header)
	req.ContentLength = int64(len(body))
	if len(body) > 0 {
		req.Body = bytes.NewReader(body)
	}
	return req, nil
}

// Write sends r on w: the request line "AGTP/1.0 METHOD TARGET" (the
// three-token form, always), the header fields (sorted by map key,
// each name in Spelling, one line per value), Content-Length (always, "0" without a body), the empty
// line and ContentLength bytes of Body. Content-Length and
// Transfer-Encoding in r.Header are not copied. It fails before
// writing anything when the method, target, a header name or a header
// value is not one ReadRequest accepts (no header injection); after the
// head when Body holds fewer than ContentLength bytes (the connection
// is then unusable).
func (r *Request) Write(w io.Writer) error {
	if !validToken(r.Method) {
		return fmt.Errorf("agtp wire: method %q is not a token", textcut.Clip(r.Method))
	}
	if _, e := parseRequestLine([]byte(Version + " " + r.Method + " " + r.Target)); e != nil {
		return e
	}
	if r.ContentLength < 0 || r.ContentLength > 0 && r.Body == nil {
		return fmt.Errorf("agtp wire: ContentLength %d without a Body", r.ContentLength)
	}
	buf := make([]byte, 0, 512)
	buf = append(buf, Version...)
	buf = append(buf, ' ')
	buf = append(buf, r.Method...)
	buf = append(buf, ' ')
	buf = append(buf, r.Target...)
	buf = append(buf, "\r\n"...)
	buf, err := appendFields(buf, r.Header, r.ContentLength)
	if err != nil {
		return err
	}
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if r.ContentLength == 0 {
		return nil
	}
	n, err := io.CopyN(w, r.Body, r.ContentLength)
	if err == io.EOF {
		return fmt.Errorf("agtp wire: Body ended after %d of its %d bytes", n, r.ContentLength)
	}
	return err
}
