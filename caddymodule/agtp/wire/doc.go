// Package wire is the AGTP/1.0 codec: the native wire of agtp-09 §6
// and the bindings draft's TCP/TLS section (spec/RCNS.md §2.1), shared
// by the gateway's native door and by rcns-agent. It imports no caddy.
//
// # Messages
//
//	AGTP/1.0 SP METHOD [SP request-target] CRLF     (two tokens: target "/")
//	Name: value CRLF                                 (zero or more)
//	CRLF
//	body                                             (Content-Length bytes)
//
//	AGTP/1.0 SP CODE SP REASON CRLF
//	Name: value CRLF
//	Content-Length: N CRLF                           (always, 0 without a body)
//	CRLF
//	body
//
// ReadRequest parses a request head and hands back the body as a
// reader bounded to Content-Length: the engine applies its own body
// limit. Request.Write and ReadResponse are the client side;
// Response.Write the server side. StatusText gives the spec's reason
// phrases (263 "Proposal Approved", 461 "RCNS Contract Available", …).
//
// # Decisions
//
//   - Lines end in CRLF only; a bare LF is refused, as is a bare CR or
//     any other control character in a line (RFC 9112 §2.2 allows
//     servers to accept bare LF; AGTP has no legacy to tolerate).
//   - Header names are case-insensitive. Header maps use net/http's
//     canonical keys, so net/http-based code (policy/httpsig) reads
//     them; the writers put names on the wire in AGTP spelling
//     (Spelling: "Agent-ID", not "Agent-Id").
//   - A missing Content-Length on a request means no body. The drafts
//     require it on every message (agtp-09 §6.4.1), but the reference
//     client sends it only with a body and a request without it is
//     unambiguous. Two Content-Length lines, even with equal values,
//     are refused (400 duplicate-header), as is any other repeated
//     member of Singletons. Transfer-Encoding is refused.
//   - The request-target is origin-form only and is parsed as net/http
//     parses an HTTP one (url.ParseRequestURI), so both doors accept
//     the same targets; bytes above 0x7F pass, for the engine's path
//     grammar (460) to judge, as on the HTTP door.
//   - Limits default to Caddy's HTTP server: 16 KiB for the head
//     (request line and header lines together) and, with no
//     counterpart in net/http, 100 header lines.
//
// # Refusals
//
// ReadRequest's *Error values (reason tokens shared with the HTTP door
// where the meaning is the same):
//
//	400 invalid-request-line     not "AGTP/1.0 SP METHOD [SP TARGET]" with single spaces;
//	                             a method that is not a token; '#' anywhere in the line;
//	                             a target that is not origin-form ("*", absolute-form) or not a URI path;
//	                             a bare LF or a control character in the line
//	400 unsupported-version      another AGTP version (AGTP/2.0); an HTTP request line
//	                             (answered as HTTP/1.1: Error.Proto)
//	400 invalid-header           a line without a colon; obs-fold; whitespace before the colon;
//	                             a name that is not a token; a control character in a value; a bare LF
//	400 duplicate-header         a member of Singletons sent twice
//	400 content-length-required  Transfer-Encoding (chunked) present
//	400 invalid-content-length   Content-Length is not 1*DIGIT or is beyond int64
//	400 incomplete-request       the connection ended inside the head
//	408 request-timeout          a read deadline passed inside the head (Error.Timeout)
//	431 header-too-large         the head is over Limits.MaxHeaderBytes
//	431 too-many-headers         more than Limits.MaxHeaderLines header lines
//
// After any of them the connection must be closed (LingerClose): where
// the next request would start is unknown.
//
// # Serving a connection
//
// One goroutine per connection, one bufio.Reader for its life (it
// holds bytes of pipelined requests), and for each request: wait for
// its first byte under the idle deadline (a close or an idle timeout
// there ends the connection quietly); read the head under the header
// deadline; read the body under the read deadline; answer under the
// write deadline; DiscardBody before reading on. Answers go out in
// request order because the next request is read only after the
// previous answer is written. The example shows the loop.
package wire
