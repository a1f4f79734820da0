package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Default limits (Limits zero values).
const (
	// DefaultMaxHeaderBytes is Caddy's HTTP server default for
	// max_header_bytes (caddyhttp.Server.MaxHeaderBytes, 16 KiB in Caddy
	// v2.11), so the native door takes the heads the HTTP door takes.
	// net/http applies its limit to the request line and the header
	// lines together with 4096 bytes of bufio slack; this limit is
	// exact.
	DefaultMaxHeaderBytes = 16 << 10
	// DefaultMaxHeaderLines is the number of header lines a head may
	// carry (Apache httpd's LimitRequestFields default). net/http has no
	// such count: 16 KiB of the shortest lines ("a:" CRLF) would be 4,096
	// fields.
	DefaultMaxHeaderLines = 100
)

// Limits bound what ReadRequest and ReadResponse read of a message
// head. The zero value means the defaults.
type Limits struct {
	// MaxHeaderBytes bounds the head: the request (or status) line, the
	// header lines and the empty line that ends them, each counted with
	// its CRLF; bytes. 0 means DefaultMaxHeaderBytes. A head over it is
	// refused with 431 header-too-large, having read no byte past the
	// limit.
	MaxHeaderBytes int
	// MaxHeaderLines bounds the number of header lines. 0 means
	// DefaultMaxHeaderLines. One more is refused with 431
	// too-many-headers.
	MaxHeaderLines int
}

func (l Limits) maxBytes() int {
	if l.MaxHeaderBytes > 0 {
		return l.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

func (l Limits) maxLines() int {
	if l.MaxHeaderLines > 0 {
		return l.MaxHeaderLines
	}
	return DefaultMaxHeaderLines
}

// Line reader failures, mapped to refusals by the caller.
var (
	errTooLarge = errors.New("head over the byte limit")
	errBareLF   = errors.New("line ends in LF without CR")
)

// headReader reads the lines of one head from br, consuming at most
// budget bytes.
type headReader struct {
	br     *bufio.Reader
	first  string // the first line's name in explanations: "request line", "status line"
	budget int    // bytes the head may still consume
	n      int    // bytes consumed
	line   []byte // scratch for the current line
	// strict makes readLine fail as soon as a control character other
	// than CR and LF arrives (controlError), without waiting for the
	// LF: a TLS ClientHello sent to a plain-text port is refused at its
	// first byte rather than at the read deadline.
	strict bool
}

// controlError is a control character at byte at of a strict line.
type controlError struct {
	c  byte
	at int
}

func (e *controlError) Error() string {
	return fmt.Sprintf("control character %q at byte %d", e.c, e.at)
}

// readLine returns the next line without its CRLF; the slice is valid
// until the next read from br, and may be br's own buffer (a line that
// arrived whole is not copied), so it must not be modified. It fails with errTooLarge when no LF comes
// within the budget, errBareLF when the LF has no CR before it, or the
// reader's error (io.EOF when the input ended first).
func (h *headReader) readLine() ([]byte, error) {
	h.line = h.line[:0]
	for {
		if h.budget == 0 {
			return nil, errTooLarge
		}
		if h.br.Buffered() == 0 {
			if _, err := h.br.Peek(1); err != nil {
				return nil, err
			}
		}
		buf, _ := h.br.Peek(h.br.Buffered())
		if len(buf) > h.budget {
			buf = buf[:h.budget]
		}
		i := bytes.IndexByte(buf, '\n')
		if i >= 0 {
			buf = buf[:i+1]
		}
		if h.strict {
			for j, c := range buf {
				if c < ' ' && c != '\r' && c != '\n' || c == 0x7f {
					return nil, &controlError{c: c, at: len(h.line) + j}
				}
			}
		}
		_, _ = h.br.Discard(len(buf)) // buffered: cannot fail
		h.budget -= len(buf)
		h.n += len(buf)
		if i >= 0 && len(h.line) == 0 {
			return crlfLine(buf) // the whole line was buffered: no copy
		}
		h.line = append(h.line, buf...)
		if i >= 0 {
			return crlfLine(h.line)
		}
	}
}

// crlfLine is l (a line with its LF) without its CRLF, or errBareLF.
func crlfLine(l []byte) ([]byte, error) {
	if len(l) < 2 || l[len(l)-2] != '\r' {
		return nil, errBareLF
	}
	return l[:len(l)-2], nil
}

// readFields reads header lines up to the empty line into a header
// map (canonical keys, values with OWS trimmed). singleton reports
// whether a canonical key may appear once only, and the name to quote.
//
// A malformed or ambiguous field line (line folding, no colon, a bad
// name, a control character in the value, a repeated singleton) is
// refused, but the lines after it are still read to the empty line,
// so the refusal's Header holds the well-formed fields (the refused
// line skipped, a repeated singleton dropped altogether) for the
// answer's echo of the identifiers. A line that cannot be read (over
// the limits, a bare LF, the connection ending) returns at once:
// then the first refusal, or that error, without Header.
func (h *headReader) readFields(lim Limits, singleton func(key string) (string, bool)) (http.Header, error) {
	hdr := make(http.Header, 8)
	// One backing array for the first values, as net/textproto does:
	// most fields carry one line.
	strs := make([]string, 0, 12)
	lines := 0
	var refused *Error // the first refused field line
	var dropped []string
	refuseLine := func(e *Error) {
		if refused == nil {
			refused = e
		}
	}
	for {
		line, err := h.readLine()
		if err != nil {
			if refused != nil {
				return nil, refused
			}
			return nil, h.fieldError(err, lim)
		}
		if len(line) == 0 {
			if refused != nil {
				for _, k := range dropped {
					delete(hdr, k)
				}
				refused.Header = hdr
				return nil, refused
			}
			return hdr, nil
		}
		lines++
		if lines > lim.maxLines() {
			return nil, refuse(431, "too-many-headers", fmt.Sprintf("the message has more than %d header lines", lim.maxLines()))
		}
		if line[0] == ' ' || line[0] == '\t' {
			refuseLine(refuse(400, "invalid-header", fmt.Sprintf("header line %d starts with whitespace: line folding (obs-fold) is not accepted (RFC 9112 §5.2)", lines)))
			continue
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			refuseLine(refuse(400, "invalid-header", fmt.Sprintf("header line %d %q has no colon: a header line is Name: value", lines, clip(line))))
			continue
		}
		name := line[:colon]
		if e := checkName(name, lines); e != nil {
			refuseLine(e)
			continue
		}
		value := trimOWS(line[colon+1:])
		if i := invalidValueByte(value); i >= 0 {
			refuseLine(refuse(400, "invalid-header", fmt.Sprintf("the %s header carries the control character %q at byte %d of its value (RFC 9110 §5.5)",
				clip(name), value[i], i)))
			continue
		}
		key := canonicalKey(name)
		vv := hdr[key]
		if vv != nil {
			if quoted, ok := singleton(key); ok {
				refuseLine(refuse(400, "duplicate-header", fmt.Sprintf("the %s header appears more than once; send it once", quoted)))
				dropped = append(dropped, key)
				continue
			}
		}
		if vv == nil && len(strs) < cap(strs) {
			strs = append(strs, string(value))
			hdr[key] = strs[len(strs)-1 : len(strs) : len(strs)]
		} else {
			hdr[key] = append(vv, string(value))
		}
	}
}

// checkName refuses a field name that is not a token (line is the
// field line's number).
func checkName(name []byte, line int) *Error {
	for _, c := range name {
		if !isTchar(c) {
			why := "a header name is a token (RFC 9110 §5.1)"
			if c == ' ' || c == '\t' {
				why = "no whitespace is allowed between a header name and its colon (RFC 9112 §5.1)"
			}
			return refuse(400, "invalid-header", fmt.Sprintf("header line %d: the name %q is not accepted: %s", line, clip(name), why))
		}
	}
	if len(name) == 0 {
		return refuse(400, "invalid-header", fmt.Sprintf("header line %d has an empty name", line))
	}
	return nil
}

// fieldError maps a line reader failure inside the header block.
func (h *headReader) fieldError(err error, lim Limits) error {
	switch {
	case errors.Is(err, errTooLarge):
		return refuse(431, "header-too-large", fmt.Sprintf("the %s and header lines exceed %d bytes", h.first, lim.maxBytes()))
	case errors.Is(err, errBareLF):
		return refuse(400, "invalid-header", "a header line ends in a bare LF: lines end in CRLF")
	}
	return truncated(err, h.n)
}

// truncated is the refusal for a head the connection stopped
// delivering after n bytes: 408 on a read deadline, else 400.
func truncated(err error, n int) *Error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	e := &Error{Status: 400, Reason: "incomplete-request", Proto: Version, Err: err,
		Explanation: fmt.Sprintf("the connection ended after %d bytes, before the empty line that ends the head", n)}
	if e.Timeout() {
		e.Status, e.Reason = 408, "request-timeout"
		e.Explanation = fmt.Sprintf("the head stopped arriving after %d bytes, before the server's read timeout", n)
	}
	return e
}

// clip is b as an explanation quotes it (textcut.Clip).
func clip(b []byte) string {
	return textcut.Clip(string(b))
}

// parseContentLength parses a Content-Length value: 1*DIGIT (RFC 9110
// §8.6) within int64.
func parseContentLength(v string) (int64, *Error) {
	if v == "" {
		return 0, refuse(400, "invalid-content-length", "Content-Length is empty: it is the body's length in decimal digits")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, refuse(400, "invalid-content-length", fmt.Sprintf("Content-Length %q is not a decimal number of bytes", textcut.Clip(v)))
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, refuse(400, "invalid-content-length", fmt.Sprintf("Content-Length %q is beyond 2^63-1", textcut.Clip(v)))
	}
	return n, nil
}
