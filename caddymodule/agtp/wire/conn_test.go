package wire_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// echo answers 200 with the request's Task-ID and a JSON echo of
// method, target and body.
func echo(req *wire.Request, body []byte) *wire.Response {
	b, _ := json.Marshal(map[string]string{"method": req.Method, "target": req.Target, "body": string(body)})
	return &wire.Response{Status: 200, Header: http.Header{"Task-Id": req.Header["Task-Id"], "Content-Type": {"application/json"}}, Body: b}
}

// testServer is a loopback listener running l on each connection; ends
// receives each connection's OnEnd error.
type testServer struct {
	ln    net.Listener
	ends  chan error
	conns int
	mu    sync.Mutex
	wg    sync.WaitGroup
}

// startServer listens on 127.0.0.1 and serves with l (OnEnd is set
// here). It stops when the test ends.
func startServer(t *testing.T, l *loop) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{ln: ln, ends: make(chan error, 256)}
	l.OnEnd = func(err error) { s.ends <- err }
	if l.Handle == nil {
		l.Handle = echo
	}
	for _, d := range []*time.Duration{&l.IdleTimeout, &l.HeaderTimeout, &l.BodyTimeout, &l.WriteTimeout} {
		if *d == 0 {
			*d = time.Minute
		}
	}
	if l.MaxBody == 0 {
		l.MaxBody = 1 << 20
	}
	if l.Linger == 0 {
		l.Linger = 200 * time.Millisecond
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); l.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *testServer) dial(t *testing.T) *wire.ClientConn {
	t.Helper()
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A bound on every client read: a hung test fails instead of waiting.
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return wire.NewClientConn(c)
}

// end waits for the next connection end the server reports.
func (s *testServer) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.ends:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the server loop did not end")
		return nil
	}
}

func newReq(t *testing.T, method, target, task string, body []byte) *wire.Request {
	t.Helper()
	req, err := wire.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Host", "127.0.0.1")
	req.Header.Set("Task-ID", task)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// checkEcho asserts resp is echo's answer to method target with body.
func checkEcho(t *testing.T, resp *wire.Response, task, method, target, body string) {
	t.Helper()
	var got map[string]string
	if err := json.Unmarshal(resp.Body, &got); err != nil {
		t.Fatalf("answer body %q: %v", resp.Body, err)
	}
	if resp.Status != 200 || resp.Header.Get("Task-ID") != task || got["method"] != method || got["target"] != target || got["body"] != body {
		t.Fatalf("answer %d %v %v, want task %s: %s %s %q", resp.Status, resp.Header, got, task, method, target, body)
	}
}

// TestPersistentConnection: 100 requests one after another on one
// connection, each answered in turn.
func TestPersistentConnection(t *testing.T) {
	s := startServer(t, &loop{})
	c := s.dial(t)
	for i := range 100 {
		task := fmt.Sprintf("t-%d", i)
		var body []byte
		if i%2 == 0 {
			body = fmt.Appendf(nil, `{"n":%d}`, i)
		}
		resp, err := c.Do(newReq(t, "QUERY", fmt.Sprintf("/items/%d?page=%d", i, i), task, body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		checkEcho(t, resp, task, "QUERY", fmt.Sprintf("/items/%d?page=%d", i, i), string(body))
	}
	c.Close()
	if err := s.end(t); err != io.EOF {
		t.Fatalf("the loop ended with %v, want io.EOF (a quiet close)", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns != 1 {
		t.Fatalf("%d connections accepted, want 1", s.conns)
	}
}

// TestPipelined: two requests written at once are answered in order.
func TestPipelined(t *testing.T) {
	s := startServer(t, &loop{})
	c := s.dial(t)
	var head strings.Builder
	for _, r := range []*wire.Request{
		newReq(t, "BOOK", "/room", "t-1", []byte(`{"a":1}`)),
		newReq(t, "FETCH", "/room/1", "t-2", nil),
	} {
		if err := r.Write(&head); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(c.Conn, head.String()); err != nil { // one write, one segment
		t.Fatal(err)
	}
	for _, w := range []struct{ task, method, target, body string }{
		{"t-1", "BOOK", "/room", `{"a":1}`}, {"t-2", "FETCH", "/room/1", ""},
	} {
		resp, err := c.Read()
		if err != nil {
			t.Fatal(err)
		}
		checkEcho(t, resp, w.task, w.method, w.target, w.body)
	}
}

// TestOneRequestPerConnection: the reference client's way: connect,
// send one request, read the answer, close. The loop ends quietly.
func TestOneRequestPerConnection(t *testing.T) {
	s := startServer(t, &loop{})
	for i := range 20 {
		c := s.dial(t)
		task := fmt.Sprintf("t-%d", i)
		resp, err := c.Do(newReq(t, "DISCOVER", "/", task, nil))
		if err != nil {
			t.Fatal(err)
		}
		checkEcho(t, resp, task, "DISCOVER", "/", "")
		c.Close()
		if err := s.end(t); err != io.EOF {
			t.Fatalf("connection %d ended with %v, want io.EOF", i, err)
		}
	}
}

// TestMaxRequestsPerConnection: after the last allowed answer the
// server closes.
func TestMaxRequestsPerConnection(t *testing.T) {
	s := startServer(t, &loop{MaxRequests: 3})
	c := s.dial(t)
	for i := range 3 {
		if _, err := c.Do(newReq(t, "QUERY", "/", fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.end(t); err != nil {
		t.Fatalf("end %v", err)
	}
	if _, err := c.Do(newReq(t, "QUERY", "/", "4", nil)); err == nil {
		t.Fatal("a fourth request was answered")
	}
}

// TestStalledClient: a client that stops sending is cut at its
// deadline. Idle (no byte of a request): closed without an answer.
// Inside the head: a typed timeout, answered 408. Inside the body: the
// body read's timeout, answered 400 invalid-body.
func TestStalledClient(t *testing.T) {
	const cut = 50 * time.Millisecond
	s := startServer(t, &loop{IdleTimeout: cut, HeaderTimeout: cut, BodyTimeout: cut})

	t.Run("idle", func(t *testing.T) {
		c := s.dial(t)
		err := s.end(t)
		var we *wire.Error
		if errors.As(err, &we) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("idle end %v, want the bare deadline error", err)
		}
		if n, err := c.Reader.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("client read %d, %v; want EOF without an answer", n, err)
		}
	})
	t.Run("inside the head", func(t *testing.T) {
		c := s.dial(t)
		io.WriteString(c.Conn, "AGTP/1.0 QUERY /x\r\nHost: 127.0.0.1\r\nAgent-")
		err := s.end(t)
		var we *wire.Error
		if !errors.As(err, &we) || we.Status != 408 || we.Reason != "request-timeout" || !we.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("end %v, want a 408 request-timeout *wire.Error wrapping the deadline", err)
		}
		resp, err := c.Read()
		if err != nil || resp.Status != 408 || resp.Reason != "Request Timeout" || !strings.Contains(string(resp.Body), `"request-timeout"`) {
			t.Fatalf("answer %+v %v", resp, err)
		}
	})
	t.Run("inside the body", func(t *testing.T) {
		c := s.dial(t)
		io.WriteString(c.Conn, "AGTP/1.0 BOOK /x\r\nContent-Length: 10\r\n\r\n{\"a\"")
		err := s.end(t)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("end %v, want the body read's deadline", err)
		}
		resp, err := c.Read()
		if err != nil || resp.Status != 400 || !strings.Contains(string(resp.Body), `"invalid-body"`) {
			t.Fatalf("answer %+v %v", resp, err)
		}
	})
}

// TestClientClosesMidBody: the body read ends in io.ErrUnexpectedEOF.
func TestClientClosesMidBody(t *testing.T) {
	s := startServer(t, &loop{})
	c := s.dial(t)
	io.WriteString(c.Conn, "AGTP/1.0 BOOK /x\r\nContent-Length: 100\r\n\r\n{\"guest\":")
	c.Close()
	if err := s.end(t); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("end %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestClientClosesMidHead: a 400 incomplete-request, which nobody reads.
func TestClientClosesMidHead(t *testing.T) {
	s := startServer(t, &loop{})
	c := s.dial(t)
	io.WriteString(c.Conn, "AGTP/1.0 BOOK /x\r\nHost")
	c.Close()
	var we *wire.Error
	if err := s.end(t); !errors.As(err, &we) || we.Reason != "incomplete-request" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("end %v, want incomplete-request", err)
	}
}

// TestOversized: a head over the limit is answered 431, a body over
// the engine's limit 413, each read by the client although it sent
// more than the server read (LingerClose), then the connection closes.
func TestOversized(t *testing.T) {
	s := startServer(t, &loop{MaxBody: 1 << 10})
	for _, tc := range []struct {
		name, send, reason string
		status             int
	}{
		{"head", "AGTP/1.0 QUERY /x\r\nX-Big: " + strings.Repeat("b", 20<<10) + "\r\n\r\n", "header-too-large", 431},
		{"body", "AGTP/1.0 BOOK /x\r\nContent-Length: 1048576\r\n\r\n" + strings.Repeat("b", 64<<10), "body-too-large", 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := s.dial(t)
			go io.WriteString(c.Conn, tc.send)
			resp, err := c.Read()
			if err != nil || resp.Status != tc.status || !strings.Contains(string(resp.Body), `"`+tc.reason+`"`) {
				t.Fatalf("answer %+v %v, want %d %s", resp, err, tc.status, tc.reason)
			}
			s.end(t)
			if _, err := c.Reader.ReadByte(); err != io.EOF {
				t.Fatalf("after the answer: %v, want EOF", err)
			}
		})
	}
}

// TestHTTPClientRefused: an HTTP client sent to the AGTP port reads an
// HTTP/1.1 400 that says what the port speaks.
func TestHTTPClientRefused(t *testing.T) {
	s := startServer(t, &loop{})
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + s.ln.Addr().String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"unsupported-version"`) || !strings.Contains(string(b), "this port speaks AGTP/1.0") {
		t.Fatalf("HTTP client got %s %s", resp.Status, b)
	}
}

// TestByteAtATime: a request that arrives one byte per segment parses
// as one sent at once.
func TestByteAtATime(t *testing.T) {
	s := startServer(t, &loop{})
	c := s.dial(t)
	var b strings.Builder
	newReq(t, "BOOK", "/room?x=1", "t-1", []byte(`{"a":[1,2,3]}`)).Write(&b)
	bw := bufio.NewWriterSize(c.Conn, 16)
	for i := 0; i < b.Len(); i++ {
		bw.WriteByte(b.String()[i])
		bw.Flush()
	}
	resp, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	checkEcho(t, resp, "t-1", "BOOK", "/room?x=1", `{"a":[1,2,3]}`)
}
