package caddymodule

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// httpDoorServer serves h's HTTP door on a real loopback net/http
// server, as Caddy hands requests over, and returns its address.
func httpDoorServer(t *testing.T, h *Handler) string {
	t.Helper()
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusTeapot)
		return nil
	})
	srv := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, benchServer)
		if err := h.ServeHTTP(w, r, next); err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	}))
	return strings.TrimPrefix(srv.URL, "http://")
}

// writeAllThenRead is the client of cases/05: it writes head and then a
// body of n bytes completely before reading anything, as Python's
// http.client does, and returns the answer it then reads. A reset
// while writing or reading fails the test.
func writeAllThenRead(t *testing.T, conn net.Conn, head string, n int) *bufio.Reader {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write head: %v", err)
	}
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for left := n; left > 0; left -= len(chunk) {
		if _, err := conn.Write(chunk[:min(left, len(chunk))]); err != nil {
			t.Fatalf("write body, %d of %d bytes left: %v (the gateway closed before draining)", left, n, err)
		}
	}
	return bufio.NewReader(conn)
}

// wantBodyTooLarge checks an AGTP 413 body-too-large error body.
func wantBodyTooLarge(t *testing.T, status int, body []byte) {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal(body, &b); err != nil || status != 413 || b["reason"] != "body-too-large" || b["status"] != 413.0 ||
		b["explanation"] == "" || b["retryable"] != false {
		t.Fatalf("answer %d %s; want 413 with the AGTP error body body-too-large", status, body)
	}
}

// TestRefusedBodyDrainedHTTP is ../shared/cases/05 on the HTTP door
// (and the MCP door it carries): a client that writes its whole 8 MiB
// body before reading reads the 413 body-too-large (it got a connection reset: the gateway closed with
// the body unread), then EOF; nothing reached the upstream. The drain is
// bounded: a declared body over refused_body_drain is not waited for,
// nor one that does not come within refused_body_drain_timeout. (Short
// subtest names: they name the handler.)
func TestRefusedBodyDrainedHTTP(t *testing.T) {
	url, calls := countingUpstream(t)
	head := func(addr string, n int) string {
		return fmt.Sprintf("FETCH /items/1 HTTP/1.1\r\nHost: %s\r\nAgent-ID: %s\r\nAuthority-Scope: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
			addr, benchAgent, testScope, n)
	}

	for _, tc := range []struct{ name, target string }{
		{"write_all_then_read", "/items/1"},
		{"mcp_write_all_then_read", "/mcp"}, // the MCP door's own 413
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := benchHandlerWith(t, url, false, "", "", func(h *Handler) { h.MCP = &mcpdoor.Config{} })
			addr := httpDoorServer(t, h)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			const n = 8 << 20
			hd := head(addr, n)
			if tc.target == "/mcp" {
				hd = strings.Replace(hd, "FETCH /items/1", "POST /mcp", 1)
			}
			br := writeAllThenRead(t, conn, hd, n)
			resp, err := http.ReadResponse(br, &http.Request{Method: "FETCH"})
			if err != nil {
				t.Fatalf("read the answer after writing the whole body: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read the answer's body: %v", err)
			}
			wantBodyTooLarge(t, resp.StatusCode, body)
			if !resp.Close {
				t.Errorf("the 413 does not say Connection: close")
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the answer: %v, want EOF (a clean close)", err)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		adjust func(*Handler)
	}{
		{"over_the_byte_bound", func(h *Handler) { h.RefusedBodyDrain = 2 << 20 }},
		{"over_the_time_bound", func(h *Handler) {
			h.RefusedBodyDrainTimeout = engine.Duration(300 * time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := httpDoorServer(t, benchHandlerWith(t, url, false, "", "", tc.adjust))
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The head only: 4 MiB declared, none sent, the connection
			// left open.
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(conn, head(addr, 4<<20)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, &http.Request{Method: "FETCH"})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			wantBodyTooLarge(t, resp.StatusCode, body)
			// net/http then waits 500 ms before it closes; a hang check.
			start := time.Now()
			_, err = br.ReadByte()
			if d := time.Since(start); d > 5*time.Second || err == nil {
				t.Fatalf("the gateway closed after %s (%v); want a close within the drain's bounds", d, err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("refused requests made %d upstream calls", n)
	}
}

// TestCloseNativeDrains is ../shared/cases/05 on the native door's
// close: after a refusal written before the body was read, closeNative
// shuts the write side and drains the declared rest, so a client that
// writes its whole body before reading reads the answer and then EOF.
// A rest over the bound is not read.
func TestCloseNativeDrains(t *testing.T) {
	const answer = "AGTP/1.0 413 Content Too Large\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	for _, tc := range []struct {
		name     string
		declared int
		bounds   engine.DrainBounds
		drained  bool
	}{
		{"rest within the bound", 16 << 20, engine.DrainBounds{Max: 32 << 20, Timeout: 30 * time.Second}, true},
		{"rest over the bound", 16 << 20, engine.DrainBounds{Max: 1 << 20, Timeout: 30 * time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				req, err := wire.ReadRequest(bufio.NewReader(c), wire.Limits{})
				if err != nil {
					done <- err
					_ = c.Close()
					return
				}
				_, err = io.WriteString(c, answer)
				closeNative(tc.bounds, c, req)
				done <- err
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := fmt.Sprintf("AGTP/1.0 BOOK /room\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tc.declared)
			if !tc.drained {
				// Nothing the server would wait for: only the head.
				if _, err := io.WriteString(conn, head); err != nil {
					t.Fatal(err)
				}
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, err := io.ReadAll(conn)
				if string(got) != answer || err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
					t.Fatalf("read %q, %v; want the answer, then the close", got, err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				return
			}
			br := writeAllThenRead(t, conn, head, tc.declared)
			got, err := io.ReadAll(br)
			if err != nil || string(got) != answer {
				t.Fatalf("read %q, %v; want the answer, then EOF", got, err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// isReset reports whether err is a connection reset.
func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
