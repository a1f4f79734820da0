package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Calls: the built-ins (INSPECT, REVOKE, SUSPEND, PROPOSE), listings,
// and concurrent or tolerant request loops.

// builtinBody is the envelope of a Tier A built-in at "/".
func builtinBody(method string, params map[string]any) map[string]any {
	return map[string]any{"method": method, "task_id": "t-" + strings.ToLower(method), "parameters": params}
}

// builtinCall sends METHOD / with params in the envelope.
func builtinCall(t testing.TB, g *Gateway, method, agent, scope string, params map[string]any, kv ...string) *Resp {
	t.Helper()
	return g.Do(t, method, "/", hdr(agent, scope, kv...), builtinBody(method, params))
}

func inspectContract(t testing.TB, g *Gateway, agent, scope, id string) *Resp {
	t.Helper()
	return builtinCall(t, g, "INSPECT", agent, scope, map[string]any{"target": "contract", "synthesis_id": id})
}

func revokeContract(t testing.TB, g *Gateway, agent, scope, id string) *Resp {
	t.Helper()
	return builtinCall(t, g, "REVOKE", agent, scope, map[string]any{
		"target": "contract", "synthesis_id": id, "reason": "integration test", "actor": "it-operator"})
}

func suspendContract(t testing.TB, g *Gateway, agent, scope, id string) *Resp {
	t.Helper()
	return builtinCall(t, g, "SUSPEND", agent, scope, map[string]any{"synthesis_id": id, "reason": "integration test"})
}

// contractIDs returns the synthesis ids of a DISCOVER /contracts listing.
func contractIDs(list []any) []string {
	var out []string
	for _, c := range list {
		out = append(out, str(c, "synthesis_id"))
	}
	return out
}

func hasContract(list []any, id string) bool {
	for _, c := range list {
		if str(c, "synthesis_id") == id {
			return true
		}
	}
	return false
}

// contracts lists the caller's contracts with DISCOVER /contracts.
func contracts(t testing.TB, g *Gateway, agent string) []any {
	t.Helper()
	r := g.Do(t, "DISCOVER", "/contracts", hdr(agent, ""), nil)
	wantStatus(t, r, 200)
	return r.Array(t)
}

// proposeCall sends PROPOSE / with the given parameters.
func proposeCall(t testing.TB, g *Gateway, agent, scope string, params map[string]any, kv ...string) *Resp {
	t.Helper()
	return builtinCall(t, g, "PROPOSE", agent, scope, params, kv...)
}

// nextLink returns the target of a `Link: <…>; rel="next"` header as a
// path with query relative to the gateway, or "" when there is none.
func nextLink(t testing.TB, g *Gateway, r *Resp) string {
	t.Helper()
	v := strings.TrimSpace(r.Header.Get("Link"))
	if v == "" {
		return ""
	}
	m := linkNextRe.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("Link %q is not `<URI>; rel=\"next\"`", v)
	}
	base, _ := url.Parse(g.URL + "/contracts")
	u, err := base.Parse(m[1])
	if err != nil {
		t.Fatalf("Link target %q: %v", m[1], err)
	}
	if u.Host != "" && u.Host != g.Addr {
		t.Fatalf("Link target %q points to another host", m[1])
	}
	return u.RequestURI()
}

// concurrently runs f(i) for i in [0, n) at the same moment and waits
// (bounded by requestTimeout plus a margin) for all of them.
func concurrently(t testing.TB, n int, f func(i int)) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			f(i)
		}(i)
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(requestTimeout + 10*time.Second):
		t.Fatalf("%d concurrent requests did not finish within %s", n, requestTimeout+10*time.Second)
	}
	// A burst leaves dialed-but-unused connections; a server waits up to
	// 5 s for those on shutdown. Close them now.
	if tr, ok := testClient.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// tryDo is Gateway.Do without t: safe to call from any goroutine. body is
// JSON-encoded (nil sends none).
func tryDo(g *Gateway, method, path string, h map[string]string, body any) (*Resp, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = []string{v}
	}
	if body != nil {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Resp{Method: method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: b,
		TransferEncoding: resp.TransferEncoding}, nil
}

// waitFor polls cond every interval until it is true or limit passes.
func waitFor(t testing.TB, limit, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(interval)
	}
}
