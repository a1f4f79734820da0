package caddymodule

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
)

// nativeDoor starts a plain-text native AGTP/1.0 listener on a loopback
// port the system picks, served by h's engine, its access lines
// (access_log) to access; it returns the listener's address.
func nativeDoor(t *testing.T, h *Handler, access *zap.Logger) string {
	t.Helper()
	return nativeDoorOf(t, &AGTPServer{Listen: []string{"127.0.0.1:0"}, Handler: h.Name, AccessLog: true}, access)
}

// nativeDoorOf starts s (listening on one loopback address), its access
// lines to access, and returns the listener's address.
func nativeDoorOf(t *testing.T, s *AGTPServer, access *zap.Logger) string {
	t.Helper()
	ctx := benchContext(t)
	if err := s.provision(ctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	s.accessLog = access
	if err := s.start(ctx, zap.NewNop()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range s.stop() {
			<-c.done
		}
	})
	return s.sockets[0].ln.Addr().String()
}

// TestNativeIncompleteRequestAnswered: a peer that ends its sending
// side (shutdown SHUT_WR) inside the request line or headers reads 400
// incomplete-request (the AGTP error body, the AGTP response headers,
// Connection: close), then EOF, and the refusal has its access line.
// The door closed without a word (refuse returned early on
// io.ErrUnexpectedEOF). A connection that ends before its first byte
// is still closed without an answer or an access line.
func TestNativeIncompleteRequestAnswered(t *testing.T) {
	h := benchHandler(t, benchUpstream(t).URL, false)
	core, logs := observer.New(zap.InfoLevel)
	addr := nativeDoor(t, h, zap.New(core))
	// A peer that closed altogether cannot read the answer: its write
	// fails or is reset, harmlessly; the refusal is still logged and
	// the door goes on serving (the cases below).
	logs.TakeAll()
	gone, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(gone, "AGTP/1.0 FETCH /guests/g-1\r\nAgent-ID: "+benchAgent+"\r\n")
	_ = gone.Close()
	waitLines(t, logs, 1)
	for _, tc := range []struct{ name, sent string }{
		{"headers_without_end", "AGTP/1.0 FETCH /guests/g-1\r\nAgent-ID: " + benchAgent + "\r\n"},
		{"inside_a_header_line", "AGTP/1.0 FETCH /guests/g-1\r\nAgent-ID: " + benchAgent[:10]},
		{"inside_the_request_line", "AGTP/1.0 FET"},
		{"nothing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.TakeAll()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tc.sent); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			if tc.sent == "" {
				if b, err := io.ReadAll(br); err != nil || len(b) > 0 {
					t.Fatalf("a connection that sent nothing read %q, %v; want EOF and nothing", b, err)
				}
				if n := logs.Len(); n != 0 {
					t.Fatalf("%d access lines for a connection that sent nothing: %v", n, logs.All())
				}
				return
			}
			resp, err := wire.ReadResponse(br, wire.Limits{}, 1<<20)
			if err != nil {
				t.Fatalf("no answer after half-closing inside the head: %v", err)
			}
			var body map[string]any
			if err := json.Unmarshal(resp.Body, &body); err != nil {
				t.Fatalf("answer %d %q: %v", resp.Status, resp.Body, err)
			}
			if resp.Status != 400 || body["reason"] != "incomplete-request" || body["status"] != 400.0 || body["retryable"] != false {
				t.Fatalf("answer %d %s; want 400 incomplete-request with the AGTP error body", resp.Status, resp.Body)
			}
			if resp.Header.Get("Connection") != "close" || resp.Header.Get("Server-ID") == "" || resp.Header.Get("AGTP-API-Version") == "" {
				t.Errorf("answer header %v; want Connection: close and the AGTP response headers (Server-ID, AGTP-API-Version)", resp.Header)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the answer: %v; want EOF", err)
			}
			f := waitLines(t, logs, 1)[0].ContextMap()
			if f["status"] != int64(400) || f["reason"] != "incomplete-request" {
				t.Errorf("access line %v; want status 400, reason incomplete-request", f)
			}
		})
	}
}

// waitLines waits for n lines in logs (an access line is written once
// its answer is, so after the client read it), takes them and fails
// the test unless exactly n came.
func waitLines(t *testing.T, logs *observer.ObservedLogs, n int) []observer.LoggedEntry {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); logs.Len() < n && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for one too many
	lines := logs.TakeAll()
	if len(lines) != n {
		t.Fatalf("%d log lines; want %d: %v", len(lines), n, lines)
	}
	return lines
}

// TestNativeLegacyIdempotencyKey: on the native door as on the others,
// X-Idempotency-Key alone is 400 invalid-idempotency-key and beside
// another Idempotency-Key 400 ambiguous-idempotency-key, nothing run;
// beside the same key it is the key's request (helper-77, helper-80).
func TestNativeLegacyIdempotencyKey(t *testing.T) {
	url, calls := countingUpstream(t)
	h := benchHandler(t, url, false)
	addr := nativeDoor(t, h, zap.NewNop())
	send := func(extra string) *wire.Response {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "AGTP/1.0 FETCH /items/1\r\nAgent-ID: "+benchAgent+"\r\nAuthority-Scope: "+testScope+"\r\n"+extra+"Content-Length: 0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := wire.ReadResponse(bufio.NewReader(c), wire.Limits{}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct{ name, hdr, reason string }{
		{"alone", "X-Idempotency-Key: n-1\r\n", "invalid-idempotency-key"},
		{"beside another key", "Idempotency-Key: n-2\r\nX-Idempotency-Key: n-3\r\n", "ambiguous-idempotency-key"},
	} {
		resp := send(tc.hdr)
		var body map[string]any
		_ = json.Unmarshal(resp.Body, &body)
		if resp.Status != 400 || body["reason"] != tc.reason {
			t.Fatalf("%s: %d %s; want 400 %s", tc.name, resp.Status, resp.Body, tc.reason)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("refused requests reached the upstream %d times", n)
	}
	first := send("Idempotency-Key: n-4\r\nX-Idempotency-Key: n-4\r\n")
	again := send("Idempotency-Key: n-4\r\nX-Idempotency-Key: n-4\r\n")
	if first.Status != 200 || again.Status != 200 || again.Header.Get("Idempotent-Replayed") != "true" || calls.Load() != 1 {
		t.Fatalf("the same key in both: %d then %d (replayed %q), %d upstream calls; want one run and a replay",
			first.Status, again.Status, again.Header.Get("Idempotent-Replayed"), calls.Load())
	}
}

// TestNativePanicClosesConnection: a panic while a native request is
// served (a defect, injected here by testHookNativeServe) closes that
// connection without an answer and is logged at ERROR with its stack;
// the door and the process go on, and the next connection is served.
// Before, nothing recovered it: one request took down the whole
// process, every site and door with it.
func TestNativePanicClosesConnection(t *testing.T) {
	url, calls := countingUpstream(t)
	h := benchHandler(t, url, false)
	ctx := benchContext(t)
	core, logs := observer.New(zap.ErrorLevel)
	s := &AGTPServer{Listen: []string{"127.0.0.1:0"}, Handler: h.Name}
	if err := s.provision(ctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := s.start(ctx, zap.New(core)); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range s.stop() {
			<-c.done
		}
	})
	hook := func(r *agtp.Request) {
		if _, ok := r.Value("X-Test-Panic"); ok {
			panic("injected door defect")
		}
	}
	testHookNativeServe.Store(&hook)
	t.Cleanup(func() { testHookNativeServe.Store(nil) })
	addr := s.sockets[0].ln.Addr().String()
	send := func(extra string) (*bufio.Reader, net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "AGTP/1.0 FETCH /items/1\r\nAgent-ID: "+benchAgent+"\r\nAuthority-Scope: "+testScope+"\r\n"+extra+"Content-Length: 0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		return bufio.NewReader(c), c
	}
	br, _ := send("X-Test-Panic: 1\r\n")
	if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
		t.Fatalf("after the panic the connection gave %q, %v; want it closed with nothing written", b, err)
	}
	var line observer.LoggedEntry
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if all := logs.FilterMessageSnippet("panic serving").All(); len(all) > 0 {
			line = all[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ERROR line for the panic; logged %v", logs.All())
		}
	}
	f := line.ContextMap()
	if stack, _ := f["stack"].(string); f["panic"] != "injected door defect" || !strings.Contains(stack, "TestNativePanicClosesConnection") || f["remote"] == "" {
		t.Fatalf("the panic's line %v; want the panic value, its stack down to the injected defect, the remote address", f)
	}
	if calls.Load() != 0 {
		t.Fatalf("the panicking request reached the upstream %d times", calls.Load())
	}
	br, _ = send("")
	resp, err := wire.ReadResponse(br, wire.Limits{}, 1<<20)
	if err != nil || resp.Status != 200 || calls.Load() != 1 {
		t.Fatalf("the next connection after the panic: %v %v (upstream calls %d); want it served, 200", resp, err, calls.Load())
	}
}

// TestNativeFirstRequestHeaderTimeout: a new connection that sends
// nothing is closed at read_header_timeout, counted from its start, as
// the HTTP door (net/http) closes one (helper-148: it was held for
// idle_timeout, 12 times as long with the example's settings), while
// a kept-alive connection still waits idle_timeout for its next
// request.
func TestNativeFirstRequestHeaderTimeout(t *testing.T) {
	h := benchHandler(t, benchUpstream(t).URL, false)
	const header, idle = 300 * time.Millisecond, time.Minute
	addr := nativeDoorOf(t, &AGTPServer{Listen: []string{"127.0.0.1:0"}, Handler: h.Name,
		ReadHeaderTimeout: caddy.Duration(header), IdleTimeout: caddy.Duration(idle)}, zap.NewNop())

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Well under idle_timeout: a close by then is read_header_timeout's.
	_ = silent.SetReadDeadline(time.Now().Add(idle / 2))
	if b, err := io.ReadAll(silent); err != nil || len(b) > 0 {
		t.Fatalf("a new connection that sent nothing read %q, %v; want it closed (EOF) at read_header_timeout, not held for idle_timeout", b, err)
	}

	kept, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	_ = kept.SetDeadline(time.Now().Add(idle / 2))
	br := bufio.NewReader(kept)
	for i := range 2 {
		if i == 1 {
			time.Sleep(4 * header) // kept alive: idle_timeout, not read_header_timeout
		}
		if _, err := io.WriteString(kept, "AGTP/1.0 DISCOVER /\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		resp, err := wire.ReadResponse(br, wire.Limits{}, 1<<20)
		if err != nil || resp.Status != 200 {
			t.Fatalf("request %d on a kept-alive connection: %v, %v; want 200", i+1, resp, err)
		}
	}
}

// TestNativeWriteLeavesOutBadField: an answer whose header field holds
// a control character (a defect before the door: a value from outside
// left unchecked) is written without that field, and the defect logged
// at ERROR; the codec refused the whole answer, and the connection
// closed with nothing sent after the request had run (helper-149).
func TestNativeWriteLeavesOutBadField(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	server, client := net.Pipe()
	defer client.Close()
	c := &nativeConn{c: server, sock: &nativeSocket{key: "test"}, srv: &AGTPServer{logger: zap.New(core), WriteTimeout: caddy.Duration(5 * time.Second)}}
	resp := &agtp.Response{Status: 200, Body: []byte(`{}`)}
	resp.Header = append(resp.Header, agtp.Field{Name: "Owner-ID", Value: "a\r\nX-Evil: 1"}, agtp.Field{Name: "Server-ID", Value: "gw"})
	go func() {
		bw := bufio.NewWriter(server)
		if err := c.write(bw, server, resp, true); err != nil {
			t.Errorf("write: %v", err)
		}
		_ = server.Close()
	}()
	got, err := wire.ReadResponse(bufio.NewReader(client), wire.Limits{}, 1<<20)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if got.Status != 200 || got.Header.Get("Server-ID") != "gw" || got.Header.Get("Owner-ID") != "" || got.Header.Get("X-Evil") != "" {
		t.Fatalf("answer %d %v; want 200 with Server-ID and without the bad Owner-ID", got.Status, got.Header)
	}
	if e := logs.FilterField(zap.String("field", "Owner-ID")).All(); len(e) != 1 {
		t.Fatalf("ERROR lines naming the field: %v; want one", logs.All())
	}
}

// TestAccessAgent: the access line names the agent the answer names (an
// agent identified by a token alone sent no Agent-ID: helper-149 found
// its lines without one), else the request's Agent-ID.
func TestAccessAgent(t *testing.T) {
	named := &agtp.Response{Status: 200}
	named.Header = append(named.Header, agtp.Field{Name: "Agent-ID", Value: benchAgent})
	if got := accessAgent(http.Header{}, named); got != benchAgent {
		t.Errorf("token alone: agent_id %q, want the answer's %q", got, benchAgent)
	}
	if got := accessAgent(http.Header{"Agent-Id": {"x"}}, &agtp.Response{Status: 400}); got != "x" {
		t.Errorf("refused before identity: agent_id %q, want the request's", got)
	}
}
