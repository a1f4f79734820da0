package agtp

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// DecodeBody decodes a request body as exactly one JSON value (RFC
// 8259) in one pass, with encoding/json/v2's strict reading: an object
// naming one key twice (400 duplicate-key: encoding/json would keep the
// last one), invalid UTF-8, trailing data or a syntax error (400
// invalid-json) are refused, never repaired. Errors describe the place,
// never echo the body. Numbers decode to float64 as in encoding/json.
func DecodeBody(raw []byte) (any, *Error) {
	var v any
	var opts []jsonv2.Options // none: the common case, without an option merge
	if jsonenc.HasLongDigitRun(raw) {
		// An integer beyond ±2^53 is refused rather than sent on rounded.
		opts = []jsonv2.Options{jsonenc.RefuseInexactIntegers}
	}
	err := jsonv2.Unmarshal(raw, &v, opts...)
	if err == nil {
		return v, nil
	}
	var ie *jsonenc.InexactIntegerError
	var me *jsonv2.SemanticError
	if errors.As(err, &ie) && errors.As(err, &me) {
		return nil, InvalidJSON.New(fmt.Sprintf("the integer at %s has %d digits and is beyond ±2^53, which this gateway cannot carry exactly (RFC 7493 §2.2); send it as a string",
			textcut.Clip(pointerOrRoot(me.JSONPointer)), ie.Digits))
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return nil, DuplicateKey.New(fmt.Sprintf("the request body names the key %q twice in one object (at %s)",
			textcut.Clip(se.JSONPointer.LastToken()), textcut.Clip(pointerOrRoot(se.JSONPointer.Parent()))))
	}
	if StartsWithBOM(raw) {
		return nil, InvalidJSON.New("the request body is not one JSON value: " + ByteOrderMarkProblem)
	}
	return nil, InvalidJSON.New("the request body is not one JSON value: " + jsonProblem(err))
}

// ByteOrderMarkProblem is what a door says of a JSON body or message
// that starts with a UTF-8 byte order mark, which no JSON parser here
// skips (StartsWithBOM).
const ByteOrderMarkProblem = "it starts with a UTF-8 byte order mark (EF BB BF), which JSON text sent over a network must not (RFC 8259 §8.1); send it without"

// StartsWithBOM reports whether b starts with the UTF-8 byte order mark.
func StartsWithBOM(b []byte) bool {
	return len(b) >= 3 && b[0] == 0xef && b[1] == 0xbb && b[2] == 0xbf
}

// jsonProblem describes a body decode failure without echoing the body.
func jsonProblem(err error) string {
	var se *jsontext.SyntacticError
	var me *jsonv2.SemanticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	case errors.As(err, &se):
		switch {
		case se.Err != nil && (strings.Contains(se.Err.Error(), "UTF-8") || strings.Contains(se.Err.Error(), "surrogate")):
			return fmt.Sprintf("invalid UTF-8 or an unpaired surrogate escape at byte %d", se.ByteOffset)
		case se.Err != nil && strings.Contains(se.Err.Error(), "max depth"):
			return fmt.Sprintf("nesting deeper than %d levels at byte %d", MaxJSONDepth, se.ByteOffset)
		case errors.Is(se.Err, io.ErrUnexpectedEOF):
			return "truncated"
		}
		return fmt.Sprintf("syntax error at byte %d", se.ByteOffset)
	case errors.As(err, &me):
		return fmt.Sprintf("value not representable at byte %d (%s)", me.ByteOffset, pointerOrRoot(me.JSONPointer))
	}
	return "invalid JSON"
}

// BodyReadError describes a failed request body read (read bytes of
// the want that Content-Length announced) without the error's text:
// network errors name socket addresses ("read tcp 127.0.0.1:8080->…"),
// which an answer must not carry. The log keeps the error itself.
func BodyReadError(err error, read int, want int64) *Error {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		// A request_body max_size in front of the gateway.
		return BodyTooLarge.WithFields(fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit), map[string]any{"limit_bytes": mbe.Limit})
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return InvalidBody.New(fmt.Sprintf("the request body timed out: %d of the %d bytes Content-Length announced arrived before the server's read timeout", read, want))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return InvalidBody.New(fmt.Sprintf("the request body ended early: %d of the %d bytes Content-Length announced", read, want))
	}
	return InvalidBody.New(fmt.Sprintf("the request body could not be read: the connection failed after %d of the %d bytes Content-Length announced", read, want))
}

// MaxJSONDepth is encoding/json/v2's nesting limit for decoded bodies.
const MaxJSONDepth = 10000

// pointerOrRoot renders an RFC 6901 pointer, "/" for the whole document.
func pointerOrRoot(p jsontext.Pointer) string {
	if p == "" {
		return "/"
	}
	return string(p)
}

// CheckContentEncoding refuses a request body sent with a content
// coding (Content-Encoding: gzip, br, …): the gateway reads bodies as
// sent, so it would read the coded bytes as JSON. RFC 9110 §15.5.16
// and §12.5.3: 415, with Accept-Encoding naming what is accepted (the
// caller adds "Accept-Encoding: identity"). "identity", no coding, is
// accepted.
func CheckContentEncoding(h http.Header) *Error {
	vals, ok := h["Content-Encoding"]
	if !ok {
		return nil
	}
	var codings []string
	for _, v := range vals {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		return nil
	}
	return UnsupportedContentEncoding.New(fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed, without Content-Encoding", textcut.Clip(strings.Join(codings, ", "))))
}

// CheckContentType enforces spec OP-30 on request bodies.
func CheckContentType(values []string) *Error {
	if len(values) > 1 {
		// A singleton field (RFC 9110 §8.3): which of several would be
		// meant is not knowable, so none is guessed.
		return UnsupportedContentType.New(fmt.Sprintf("Content-Type appears %d times; send it once", len(values)))
	}
	ct := ""
	if len(values) == 1 {
		ct = values[0]
	}
	if ct == "" {
		return UnsupportedContentType.New("a request with a body needs a JSON Content-Type")
	}
	switch ct { // the accepted types exactly, as agents send them: no parse
	case "application/json", MediaAGTP, "application/agtp+json", MediaEndpoint:
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil {
		switch mt {
		case "application/json", MediaAGTP, "application/agtp+json", MediaEndpoint:
			// JSON exchanged between systems is UTF-8 (RFC 8259 §8.1),
			// and the body is decoded as such: a charset naming another
			// encoding would be read wrongly, so it is refused.
			if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
				return UnsupportedContentType.New(fmt.Sprintf("Content-Type charset %q is not accepted: AGTP bodies are UTF-8 JSON (RFC 8259 §8.1); send charset=utf-8 or no charset", textcut.Clip(cs)))
			}
			return nil
		}
	}
	return UnsupportedContentType.New(fmt.Sprintf("Content-Type %q is not accepted; send application/json or %s", textcut.Clip(ct), MediaAGTP))
}
