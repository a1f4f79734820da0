package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Response is one AGTP/1.0 response: what a server writes with Write,
// or what ReadResponse read.
type Response struct {
	// Proto is the status line's protocol: "" or Version for an AGTP
	// answer; "HTTP/1.1" to answer an HTTP request line (Error.Proto).
	// ReadResponse sets it to Version.
	Proto string
	// Status is the three-digit status code.
	Status int
	// Reason is the reason phrase; "" makes Write use StatusText(Status).
	// ReadResponse sets it as received.
	Reason string
	// Header holds the header fields. Write puts each key on the wire in
	// Spelling, one line per value, sorted by key, and never copies
	// Content-Length or Transfer-Encoding (it writes Content-Length
	// itself). ReadResponse returns net/http's canonical keys.
	Header http.Header
	// Body is the content, nil or empty for none.
	Body []byte
}

// Write sends r on w: "AGTP/1.0 CODE REASON" CRLF (agtp-09 §6.5.2),
// the header fields, "Content-Length: N" (on every response, 0 without
// a body; agtp-09 §6.4.1), the empty line and the body, in one write
// of the head and one of the body (net.Buffers: a single writev on a
// TCP connection). It fails before writing anything when Status is not
// three digits, Proto is not Version or "HTTP/1.1", or a header name
// is not a token or a value carries a control character (CR, LF, NUL…),
// so no header injection reaches the wire.
func (r *Response) Write(w io.Writer) error {
	proto := r.Proto
	switch proto {
	case "":
		proto = Version
	case Version, "HTTP/1.1":
	default:
		return fmt.Errorf("agtp wire: response protocol %q is neither %s nor HTTP/1.1", textcut.Clip(proto), Version)
	}
	if r.Status < 100 || r.Status > 999 {
		return fmt.Errorf("agtp wire: status %d is not three digits", r.Status)
	}
	reason := r.Reason
	if reason == "" {
		reason = StatusText(r.Status)
	}
	if invalidValueByte(reason) >= 0 {
		return fmt.Errorf("agtp wire: the reason phrase %q carries a control character", textcut.Clip(reason))
	}
	buf := make([]byte, 0, 1024)
	buf = append(buf, proto...)
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, int64(r.Status), 10)
	buf = append(buf, ' ')
	buf = append(buf, reason...)
	buf = append(buf, "\r\n"...)
	buf, err := appendFields(buf, r.Header, int64(len(r.Body)))
	if err != nil {
		return err
	}
	if len(r.Body) == 0 {
		_, err = w.Write(buf)
		return err
	}
	bufs := net.Buffers{buf, r.Body}
	_, err = bufs.WriteTo(w)
	return err
}

// appendFields appends the header lines of h (sorted, in Spelling, no
// framing fields), "Content-Length: n" and the empty line.
func appendFields(buf []byte, h http.Header, n int64) ([]byte, error) {
	var keysArr [32]string
	keys := keysArr[:0]
	for k := range h {
		if !framingKey(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !validToken(k) {
			return nil, fmt.Errorf("agtp wire: header name %q is not a token", textcut.Clip(k))
		}
		name := Spelling(k)
		for _, v := range h[k] {
			if i := invalidValueByte(v); i >= 0 {
				return nil, fmt.Errorf("agtp wire: the %s header value carries the control character %q", name, v[i])
			}
			buf = append(buf, name...)
			buf = append(buf, ": "...)
			buf = append(buf, v...)
			buf = append(buf, "\r\n"...)
		}
	}
	buf = append(buf, "Content-Length: "...)
	buf = strconv.AppendInt(buf, n, 10)
	buf = append(buf, "\r\n\r\n"...)
	return buf, nil
}

// ErrBodyTooLarge is ReadResponse's error for a response whose
// Content-Length is over its maxBody (the body is not read).
var ErrBodyTooLarge = errors.New("agtp wire: the response body is larger than the limit")

// ReadResponse reads one response from br: the status line "AGTP/1.0
// CODE [REASON]", the header fields (under lim, with the request
// parser's rules: CRLF only, no obs-fold, valid names and values), and
// a body of Content-Length bytes (0 when the field is absent, as the
// reference implementation sends bodiless answers), which must be at
// most maxBody bytes (else ErrBodyTooLarge, wrapped, and nothing of the
// body is read). A duplicate Content-Length and Transfer-Encoding are
// errors. An HTTP status line is an error that says so: the URL names
// an HTTP port.
//
// Errors wrap the read error (io.ErrUnexpectedEOF when the connection
// ended inside the response, a net.Error on a deadline); a response
// that fails to parse leaves br at an unknown place, so the
// connection must be closed.
func ReadResponse(br *bufio.Reader, lim Limits, maxBody int64) (*Response, error) {
	h := &headReader{br: br, first: "status line", budget: lim.maxBytes()}
	line, err := h.readLine()
	if err != nil {
		return nil, responseError("status line", err, h.n, lim)
	}
	resp, err := parseStatusLine(line)
	if err != nil {
		return nil, err
	}
	resp.Header, err = h.readFields(lim, func(key string) (string, bool) {
		return "Content-Length", key == "Content-Length"
	})
	if err != nil {
		var we *Error
		if errors.As(err, &we) && we.Err != nil {
			return nil, responseError("header", we.Err, h.n, lim)
		}
		if errors.As(err, &we) {
			return nil, fmt.Errorf("agtp wire: response %s: %s", we.Reason, we.Explanation)
		}
		return nil, err
	}
	if _, ok := resp.Header["Transfer-Encoding"]; ok {
		return nil, errors.New("agtp wire: the response carries Transfer-Encoding; AGTP messages are framed by Content-Length only")
	}
	var n int64
	if v, ok := resp.Header["Content-Length"]; ok {
		var e *Error
		if n, e = parseContentLength(v[0]); e != nil {
			return nil, fmt.Errorf("agtp wire: response %s", e.Explanation)
		}
	}
	if n > maxBody {
		return nil, fmt.Errorf("%w: Content-Length %d, limit %d bytes", ErrBodyTooLarge, n, maxBody)
	}
	if n > 0 {
		resp.Body = make([]byte, n)
		if got, err := io.ReadFull(br, resp.Body); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("agtp wire: the response body ended after %d of its %d bytes: %w", got, n, err)
		}
	}
	return resp, nil
}

// responseError describes a read failure inside a response head.
func responseError(where string, err error, n int, lim Limits) error {
	switch {
	case errors.Is(err, errTooLarge):
		return fmt.Errorf("agtp wire: the response head exceeds %d bytes", lim.maxBytes())
	case errors.Is(err, errBareLF):
		return fmt.Errorf("agtp wire: the response %s ends in a bare LF", where)
	case err == io.EOF && n == 0:
		return fmt.Errorf("agtp wire: the connection closed before a response: %w", io.ErrUnexpectedEOF)
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("agtp wire: the response stopped after %d bytes: %w", n, err)
}

// parseStatusLine parses "AGTP/1.0 SP 3DIGIT [SP reason]".
func parseStatusLine(line []byte) (*Response, error) {
	if i := invalidValueByte(line); i >= 0 {
		return nil, fmt.Errorf("agtp wire: the status line carries the control character %q", line[i])
	}
	rest, ok := bytes.CutPrefix(line, []byte(Version+" "))
	if !ok {
		if bytes.HasPrefix(line, []byte("HTTP/")) {
			return nil, fmt.Errorf("agtp wire: the server answered in HTTP (%q), not %s: this is an HTTP port; use an http:// or https:// URL", clip(line), Version)
		}
		return nil, fmt.Errorf("agtp wire: the status line %q does not start with %s", clip(line), Version)
	}
	if len(rest) < 3 || len(rest) > 3 && rest[3] != ' ' {
		return nil, fmt.Errorf("agtp wire: the status line %q has no three-digit code", clip(line))
	}
	code := 0
	for _, c := range rest[:3] {
		if c < '0' || c > '9' {
			return nil, fmt.Errorf("agtp wire: the status line %q has no three-digit code", clip(line))
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 {
		return nil, fmt.Errorf("agtp wire: the status line %q has no three-digit code", clip(line))
	}
	resp := &Response{Proto: Version, Status: code}
	if len(rest) > 4 {
		resp.Reason = string(rest[4:])
	}
	return resp, nil
}
