package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// request is one request in a door-neutral form: the AGTP method, the
// target path, header fields and body.
type request struct {
	Method, Path string
	Header       map[string]string
	Body         string
}

// response is what a door read back: the status, the header fields and,
// when asked for, the body (at most maxBody bytes).
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// maxBody bounds the body a client keeps (sanity checks, synthesis);
// under load bodies are read and dropped.
const maxBody = 1 << 20

// door is how the load generator speaks to a site: HTTP/1.1 here, a
// native AGTP/1.0 door or an MCP endpoint in their own types.
type door interface {
	// connect opens one connection to addr (host:port); the client it
	// returns is used by one goroutine at a time.
	connect(ctx context.Context, addr string) (client, error)
}

// client holds one connection of a door.
type client interface {
	// do sends r and reads its answer, keeping the body when keepBody.
	// After an error the client reconnects at its next do.
	do(ctx context.Context, r *request, keepBody bool) (*response, error)
	close()
}

// httpDoor speaks HTTP/1.1 with keep-alive, one connection per client,
// as a load generator with a fixed number of connections does. The
// request is written by hand (the AGTP methods are not Go's), the
// answer read with net/http's parser.
type httpDoor struct{}

const ioTimeout = 10 * time.Second

func (httpDoor) connect(ctx context.Context, addr string) (client, error) {
	c := &httpClient{addr: addr}
	if err := c.dial(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

type httpClient struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
	buf  bytes.Buffer
}

func (c *httpClient) dial(ctx context.Context) error {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn, c.br = conn, bufio.NewReaderSize(conn, 16<<10)
	return nil
}

func (c *httpClient) do(ctx context.Context, r *request, keepBody bool) (*response, error) {
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return nil, err
		}
	}
	c.buf.Reset()
	fmt.Fprintf(&c.buf, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, r.Path, c.addr)
	for k, v := range r.Header {
		fmt.Fprintf(&c.buf, "%s: %s\r\n", k, v)
	}
	if r.Body != "" {
		c.buf.WriteString("Content-Length: " + strconv.Itoa(len(r.Body)) + "\r\n")
	}
	c.buf.WriteString("\r\n")
	c.buf.WriteString(r.Body)
	_ = c.conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.conn.Write(c.buf.Bytes()); err != nil {
		c.close()
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.close()
		return nil, err
	}
	out := &response{Status: resp.StatusCode, Header: resp.Header}
	if keepBody {
		out.Body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	}
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	if err != nil || resp.Close {
		c.close()
	}
	return out, err
}

func (c *httpClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// agtpDoor speaks the native AGTP/1.0 wire (spec §2.1) on persistent
// connections, one per client: `AGTP/1.0 METHOD PATH` request lines and
// Content-Length framing, written by hand as httpDoor's are, the answer
// read with the gateway's own codec.
type agtpDoor struct{}

func (agtpDoor) connect(ctx context.Context, addr string) (client, error) {
	c := &agtpClient{addr: addr}
	if err := c.dial(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

type agtpClient struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
	buf  bytes.Buffer
}

func (c *agtpClient) dial(ctx context.Context) error {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn, c.br = conn, bufio.NewReaderSize(conn, 16<<10)
	return nil
}

func (c *agtpClient) do(ctx context.Context, r *request, keepBody bool) (*response, error) {
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return nil, err
		}
	}
	c.buf.Reset()
	fmt.Fprintf(&c.buf, "AGTP/1.0 %s %s\r\nHost: %s\r\n", r.Method, r.Path, c.addr)
	for k, v := range r.Header {
		fmt.Fprintf(&c.buf, "%s: %s\r\n", k, v)
	}
	if r.Body != "" {
		c.buf.WriteString("Content-Length: " + strconv.Itoa(len(r.Body)) + "\r\n")
	}
	c.buf.WriteString("\r\n")
	c.buf.WriteString(r.Body)
	_ = c.conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.conn.Write(c.buf.Bytes()); err != nil {
		c.close()
		return nil, err
	}
	resp, err := wire.ReadResponse(c.br, wire.Limits{MaxHeaderBytes: 64 << 10}, maxBody)
	if err != nil {
		c.close()
		return nil, err
	}
	out := &response{Status: resp.Status, Header: resp.Header}
	if keepBody {
		out.Body = resp.Body
	}
	if resp.Header.Get("Connection") == "close" {
		c.close()
	}
	return out, nil
}

func (c *agtpClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}
