package wire_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// loop is the per-connection server loop proposed for the native door,
// with its knobs. The handler stands in for the engine.
type loop struct {
	Limits        wire.Limits
	IdleTimeout   time.Duration // before the first byte of each request
	HeaderTimeout time.Duration // from the first byte to the end of the head
	BodyTimeout   time.Duration // for the body, from the end of the head
	WriteTimeout  time.Duration // for each answer
	MaxBody       int64         // bytes; over it: 413 and close
	MaxRequests   int           // per connection; 0: no limit
	Linger        time.Duration // LingerClose's wait
	// Handle answers a request whose body was read in full.
	Handle func(req *wire.Request, body []byte) *wire.Response
	// OnEnd, when set, receives why the loop ended: nil after
	// MaxRequests, the read error of a quiet close (io.EOF, an idle
	// timeout), the *wire.Error answered, or a body read error.
	OnEnd func(error)
}

// serve runs the loop on c until the peer closes, a limit or a timeout
// ends it, or a framing error is answered.
func (l *loop) serve(c net.Conn) {
	end := func(err error, linger bool) {
		if l.OnEnd != nil {
			l.OnEnd(err)
		}
		if linger {
			_ = wire.LingerClose(c, l.Linger, wire.DefaultMaxDrain)
		} else {
			_ = c.Close()
		}
	}
	br := bufio.NewReader(c) // one per connection: it holds pipelined bytes
	for n := 1; ; n++ {
		// Idle: wait for the first byte of the next request. A close or a
		// timeout here ends the connection without an answer.
		_ = c.SetReadDeadline(time.Now().Add(l.IdleTimeout))
		if _, err := br.Peek(1); err != nil {
			end(err, false)
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(l.HeaderTimeout))
		req, err := wire.ReadRequest(br, l.Limits)
		if err != nil {
			var we *wire.Error
			if errors.As(err, &we) {
				l.write(c, refusal(we))
				end(err, true)
				return
			}
			end(err, false)
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(l.BodyTimeout))
		if req.ContentLength > l.MaxBody {
			l.write(c, errorResponse(413, "body-too-large", fmt.Sprintf("the request body is %d bytes; the limit is %d bytes", req.ContentLength, l.MaxBody)))
			end(wire.ErrBodyNotDrained, true)
			return
		}
		body := make([]byte, req.ContentLength)
		if _, err := io.ReadFull(req.Body, body); err != nil {
			l.write(c, errorResponse(400, "invalid-body", "the request body could not be read to its Content-Length"))
			end(err, true)
			return
		}
		resp := l.Handle(req, body)
		last := l.MaxRequests > 0 && n >= l.MaxRequests
		if !l.write(c, resp) {
			end(errors.New("write failed"), false)
			return
		}
		if last {
			end(nil, true)
			return
		}
	}
}

// write sends resp under the write deadline.
func (l *loop) write(c net.Conn, resp *wire.Response) bool {
	_ = c.SetWriteDeadline(time.Now().Add(l.WriteTimeout))
	return resp.Write(c) == nil
}

// refusal is the answer to a framing error: in HTTP/1.1 for an HTTP
// client, with the error body of spec §19 (the engine renders it, with
// the AGTP response headers, in the real door).
func refusal(e *wire.Error) *wire.Response {
	r := errorResponse(e.Status, e.Reason, e.Explanation)
	r.Proto = e.Proto
	if e.Proto != wire.Version {
		r.Header.Set("Connection", "close")
	}
	return r
}

func errorResponse(status int, reason, explanation string) *wire.Response {
	return &wire.Response{Status: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: fmt.Appendf(nil, `{"status":%d,"reason":%q,"explanation":%q}`, status, reason, explanation)}
}

// The server loop a door runs per connection, here over net.Pipe: two
// pipelined requests, answered in order, then a framing error answered
// with a 400 and the connection closed.
func Example_serve() {
	srv, cli := net.Pipe()
	l := &loop{IdleTimeout: time.Minute, HeaderTimeout: time.Minute, BodyTimeout: time.Minute, WriteTimeout: time.Minute,
		MaxBody: 1 << 20, Linger: 10 * time.Millisecond,
		Handle: func(req *wire.Request, body []byte) *wire.Response {
			return &wire.Response{Status: 263, Header: http.Header{"Task-Id": req.Header["Task-Id"]}, Body: body}
		}}
	go l.serve(srv)

	go io.WriteString(cli, "AGTP/1.0 BOOK /room\r\nTask-ID: t-1\r\nContent-Length: 2\r\n\r\n{}"+
		"AGTP/1.0 BOOK /room\r\nTask-ID: t-2\r\n\r\n"+
		"AGTP/1.0 BOOK /room\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx")
	c := wire.NewClientConn(cli)
	for range 3 {
		resp, err := c.Read()
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%d %s [%s] body=%s\n", resp.Status, resp.Reason, resp.Header.Get("Task-ID"), resp.Body)
	}
	_, err := c.Read()
	fmt.Println(errors.Is(err, io.ErrUnexpectedEOF))
	// Output:
	// 263 Proposal Approved [t-1] body={}
	// 263 Proposal Approved [t-2] body=
	// 400 Bad Request [] body={"status":400,"reason":"duplicate-header","explanation":"the Content-Length header appears more than once; send it once"}
	// true
}
