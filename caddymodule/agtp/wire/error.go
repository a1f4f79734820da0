package wire

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
)

// Error is a request the parser refuses: the answer the server gives
// before closing the connection (the framing is lost, so no further
// request can be read from it). It carries what the uniform error body
// of spec §19 needs.
type Error struct {
	// Status is the AGTP status code of the answer: 400 for malformed
	// framing, 408 for a request that stopped arriving (a read
	// deadline), 431 for a head over Limits.
	Status int
	// Reason is the reason token (spec style, e.g. "invalid-request-line",
	// "duplicate-header", "header-too-large"); the tokens are listed in
	// the package documentation.
	Reason string
	// Explanation says what was wrong for a human; it quotes at most a
	// clipped part of the input (internal/textcut.Clip, 64 bytes, with
	// control characters escaped).
	Explanation string
	// Proto is the protocol the answer must be framed in: Version, or
	// "HTTP/1.1" when the request line was an HTTP one, so that an HTTP
	// client reads a refusal it can show.
	Proto string
	// Err is the read error behind a 408 or a truncated head (a
	// net.Error timeout, io.ErrUnexpectedEOF, a connection reset), nil
	// for a malformed one.
	Err error
	// Method is the method token of an AGTP/1.0 request line refused
	// for its target ("*", absolute-form, a '#') or of a head refused
	// for a field (Transfer-Encoding, a bad or repeated Content-Length,
	// a malformed field line) but read to its end; "" otherwise.
	Method string
	// Header holds the well-formed header fields of a refused request
	// whose head was still read to its empty line (when Method is set),
	// so that the answer can echo Agent-ID, Request-ID and Task-ID as
	// the HTTP binding does (spec §24 item 4): a refused field line is
	// left out, and a repeated singleton altogether. Nil when the head
	// could not be read to its end (a head over the limits, a bare LF,
	// the connection ending) or the request line is not AGTP/1.0 with
	// a method token.
	Header http.Header
	// URL is the request-target of a head refused for a field (Method
	// set) after its target parsed; of a request line refused for its
	// target, the URL net/http reads from that target (a '#' kept in
	// the path, an absolute-form target's path) and, for the
	// asterisk-form "*", a URL whose Path is "*", as net/http reads
	// one: the answer names the path as the HTTP binding's does. Nil
	// otherwise (no target, or one net/http does not read, as
	// "/a/%ZZ").
	URL *url.URL
}

// Error returns "agtp wire: <status> <reason>: <explanation>".
func (e *Error) Error() string {
	return "agtp wire: " + strconv.Itoa(e.Status) + " " + e.Reason + ": " + e.Explanation
}

// Unwrap returns Err, so errors.Is(err, os.ErrDeadlineExceeded) holds
// for a request cut by its read deadline.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether the request was cut by a read deadline (the
// 408 request-timeout refusal).
func (e *Error) Timeout() bool {
	var ne net.Error
	return e.Err != nil && errors.As(e.Err, &ne) && ne.Timeout()
}

func refuse(status int, reason, explanation string) *Error {
	return &Error{Status: status, Reason: reason, Explanation: explanation, Proto: Version}
}
