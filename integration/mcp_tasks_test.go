package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tasks extension for recipes (io.modelcontextprotocol/tasks, MCP
// 2026-07-28; docs/agent-guide-mcp.md "Tasks"): two gateways sharing a
// real Redis, a slow three-step recipe whose upstream is a real HTTP
// server on loopback, the go-sdk v1.8.0 client speaking 2026-07-28.

// slowUpstream answers /one, /two and /three with {"id": PATH}; /one
// waits until released, so a test can act while the first step runs.
// Each /one says it arrived on entered (buffered: a test reads one per
// call it makes) and then waits for release: a value sent on it lets
// one call go, closing it lets every call go.
type slowUpstream struct {
	*httptest.Server
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	seen    []string
}

func startSlowUpstream(t testing.TB) *slowUpstream {
	u := &slowUpstream{entered: make(chan struct{}, 16), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.URL.Path)
		u.mu.Unlock()
		if r.URL.Path == "/one" {
			select {
			case u.entered <- struct{}{}:
			default: // more calls than a test reads: none waits on it
			}
			select {
			case <-u.release:
			case <-time.After(requestTimeout):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q}`, strings.TrimPrefix(r.URL.Path, "/"))
	}))
	t.Cleanup(u.Server.Close)
	return u
}

// waitEntered waits for a call's /one to arrive, at most requestTimeout:
// a call that never reaches the upstream fails the test, not the suite's
// timeout.
func (u *slowUpstream) waitEntered(t testing.TB) {
	t.Helper()
	select {
	case <-u.entered:
	case <-time.After(requestTimeout):
		t.Fatalf("no call reached the upstream's first step within %s", requestTimeout)
	}
}

func (u *slowUpstream) paths() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

const slowStepDoc = `method: FETCH
path: /slow/%[1]s
description: One slow step.
semantic: {intent: Fetch one slow thing., actor: agent, outcome: The thing is returned., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
input_schema: {type: object, additionalProperties: false, properties: {id: {type: string}}}
output_schema: {type: object, additionalProperties: true, properties: {id: {type: string}}}
errors: [upstream_timeout, upstream_connection_error, upstream_malformed_response, upstream_authentication_failed, upstream_error]
required_scopes: [hotel:read]
external_service: {upstream: slow, method: GET, path: /%[1]s, timeout_seconds: 30}
`

const slowRecipeDoc = `name: slow-three
version: "1"
description: Three slow steps in a row.
required_scopes: [hotel:read]
pattern: {method: FETCH, path_exact: /slow-three}
endpoint:
  description: Runs three slow steps in a row.
  semantic: {intent: Run three slow steps., actor: agent, outcome: The three answers., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
  input_schema: {type: object, additionalProperties: false, properties: {id: {type: string}}}
  output_schema: {type: object, additionalProperties: true}
  errors: [composition_failed]
steps:
  - {name: first, method: FETCH, path: /slow/one, input: '{id: $input.id}'}
  - {name: second, method: FETCH, path: /slow/two, input: '{id: $first.id}'}
  - {name: third, method: FETCH, path: /slow/three, input: '{id: $second.id}'}
output: '{first: $first, second: $second, third: $third}'
`

// rawTransport keeps the raw JSON-RPC results the go-sdk client reads
// (its CallToolResult has no taskId member: the SDK implements no
// tasks), by request id.
type rawTransport struct {
	mcp.Transport
	mu   sync.Mutex
	last json.RawMessage
}

type rawConn struct {
	mcp.Connection
	t *rawTransport
}

func (t *rawTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &rawConn{Connection: c, t: t}, nil
}

func (c *rawConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Response); ok && err == nil {
		c.t.mu.Lock()
		c.t.last = append(json.RawMessage(nil), r.Result...)
		c.t.mu.Unlock()
	}
	return m, err
}

// tasksRPC sends one tasks/* request to url as agent (the go-sdk has
// no tasks methods), with the per-request _meta of 2026-07-28 declaring
// the extension, and returns the JSON-RPC result or error.
func tasksRPC(t testing.TB, url, agent, method, taskID string, declare bool) (map[string]any, map[string]any) {
	t.Helper()
	caps := map[string]any{}
	if declare {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": map[string]any{"taskId": taskID,
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}}})
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Agent-ID", agent)
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28") // as the _meta says (SEP-2575: the SDK refuses a mismatch)
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", taskID)
	resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var msg struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("%s: %d %s", method, resp.StatusCode, raw)
	}
	return msg.Result, msg.Error
}

// TestMCPTaskCancelAcrossNodes: the go-sdk client calls the slow
// three-step recipe through node A and gets a task; node B reads it
// over Redis (working); cancelled through node B while the first step
// runs, the task ends cancelled on A: the upstream saw the first step
// and not the rest, and the task names the step that ran.
func TestMCPTaskCancelAcrossNodes(t *testing.T) {
	up, w, s, tr, tool := startTaskWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	keyed := mcp.Meta{metaIdemKey: "task-cancel-1"}
	id, created := createTask(t, s, tr, tool, keyed)
	for _, k := range []string{"result", "error", "inputRequests", "requestState", "task"} {
		if _, ok := created[k]; ok {
			t.Errorf("CreateTaskResult carries %s: %v", k, created)
		}
	}
	up.waitEntered(t) // the first step runs (the tools/call answered past task_after)

	// Read through node B over the shared Redis.
	mcpB := w.B.URL + "/mcp"
	got, rpcErr := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
	if rpcErr != nil || got["taskId"] != id || got["status"] != "working" || got["resultType"] != "complete" {
		t.Fatalf("tasks/get through node B: %v %v", got, rpcErr)
	}
	// Another agent does not see it; a client without the extension is refused.
	if _, e := tasksRPC(t, mcpB, agentOP, "tasks/get", id, true); e == nil || e["code"] != float64(-32602) {
		t.Errorf("another agent's tasks/get: %v, want -32602", e)
	}
	if _, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, false); e == nil || e["code"] != float64(-32021) {
		t.Errorf("tasks/get without the extension: %v, want -32021", e)
	}
	// Cancel through node B while the first step runs, then let it answer.
	ack, rpcErr := tasksRPC(t, mcpB, agentA1, "tasks/cancel", id, true)
	if rpcErr != nil || ack["resultType"] != "complete" || ack["taskId"] != nil || ack["status"] != nil {
		t.Fatalf("tasks/cancel: %v %v", ack, rpcErr)
	}
	// The running node notes the cancel request (it polls the store);
	// once it has, the first step is let answer.
	for i := 0; ; i++ {
		g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		if m, _ := g["statusMessage"].(string); strings.HasPrefix(m, "cancel requested") {
			break
		}
		if i == 100 {
			t.Fatalf("the running node never noted the cancel request: %v", g)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(up.release)
	var final map[string]any
	for i := 0; i < 100; i++ {
		final, rpcErr = tasksRPC(t, w.A.URL+"/mcp", agentA1, "tasks/get", id, true)
		if rpcErr != nil {
			t.Fatalf("tasks/get: %v", rpcErr)
		}
		if final["status"] != "working" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if final["status"] != "cancelled" {
		t.Fatalf("task ended %v, want cancelled: %v", final["status"], final)
	}
	msg, _ := final["statusMessage"].(string)
	if !strings.Contains(msg, "first (succeeded)") || !strings.Contains(msg, "second, third") {
		t.Errorf("statusMessage does not name the step that ran: %q", msg)
	}
	meta, _ := final["_meta"].(map[string]any)
	steps, _ := meta["io.github.caddy-rcns/steps"].([]any)
	if len(steps) != 3 || steps[0].(map[string]any)["state"] != "succeeded" || steps[1].(map[string]any)["state"] != "not-started" {
		t.Errorf("steps = %v", steps)
	}
	if p := up.paths(); strings.Join(p, " ") != "/one" {
		t.Errorf("the upstream saw %v, want /one only", p)
	}
	// The same task read through node B, and a repeat cancel is an ack.
	if b, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true); b["status"] != "cancelled" {
		t.Errorf("node B reads %v", b["status"])
	}
	if ack, e := tasksRPC(t, mcpB, agentA1, "tasks/cancel", id, true); e != nil || ack["resultType"] != "complete" {
		t.Errorf("cancel of a terminal task: %v %v", ack, e)
	}
	if _, e := tasksRPC(t, mcpB, agentA1, "tasks/get", "nonexistent", true); e == nil || e["code"] != float64(-32602) {
		t.Errorf("unknown task: %v, want -32602", e)
	}
	// The task's call was the synchronous call's: a repeat with its
	// Idempotency-Key replays the stored answer (at once: no task), and
	// the upstream sees nothing more.
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"id": "x"}, Meta: keyed})
	if err != nil {
		t.Fatalf("keyed repeat: %v", err)
	}
	if !res.IsError || res.Meta[metaReplayed] != true {
		t.Errorf("keyed repeat: isError %v, _meta %v; want the stopped plan's answer replayed", res.IsError, res.Meta)
	}
	if p := up.paths(); strings.Join(p, " ") != "/one" {
		t.Errorf("after the keyed repeat the upstream saw %v, want /one only", p)
	}
}

// startTaskWorld starts the slow upstream, two nodes on one Redis
// serving the slow-three recipe with task_after 200ms, and the go-sdk
// client (2026-07-28, declaring the tasks extension) on node A; it
// returns them and the recipe's tool name.
func startTaskWorld(t *testing.T) (*slowUpstream, *clusterWorld, *mcp.ClientSession, *rawTransport, string) {
	t.Helper()
	_, topo := startSingleRedis(t)
	up := startSlowUpstream(t)
	w, s, tr, tool := startTaskWorldAt(t, up.URL, topo.block(), "\t\t\ttask_after 200ms\n")
	return up, w, s, tr, tool
}

// startTaskWorldAt is startTaskWorld with the slow steps' upstream at
// upstream, the nodes' store block and the lines of their mcp block.
func startTaskWorldAt(t *testing.T, upstream, store, mcpLines string) (*clusterWorld, *mcp.ClientSession, *rawTransport, string) {
	t.Helper()
	return startTaskWorldStores(t, upstream, store, "", mcpLines)
}

// startTaskWorldStores is startTaskWorldAt with node B's own store block
// (storeB; "" is node A's).
func startTaskWorldStores(t *testing.T, upstream, store, storeB, mcpLines string) (*clusterWorld, *mcp.ClientSession, *rawTransport, string) {
	t.Helper()
	dir := t.TempDir()
	var docs []string
	for _, s := range []string{"one", "two", "three"} {
		docs = append(docs, writeDoc(t, dir, "fetch-slow-"+s+".yaml", fmt.Sprintf(slowStepDoc, s)))
	}
	recipe := writeDoc(t, dir, "slow-three.yaml", slowRecipeDoc)
	w := startClusterWorld(t, store, clusterOpts{StoreB: storeB, Extra: fmt.Sprintf("\t\tupstream slow %s\n\t\tendpoints %s\n\t\trecipes %s\n\t\tmcp {\n%s\t\t}\n",
		upstream, strings.Join(docs, " "), recipe, mcpLines)})

	tr := &rawTransport{Transport: &mcp.StreamableClientTransport{Endpoint: w.A.URL + "/mcp",
		HTTPClient: &http.Client{Transport: &mcpTransport{hdr: map[string]string{"Agent-ID": agentA1, "Authority-Scope": scopeAll}, base: http.DefaultTransport}, Timeout: requestTimeout}}}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "rcns-it-tasks", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Extensions: map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}})
	s, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if v := s.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s, want 2026-07-28", v)
	}
	if s.InitializeResult().Capabilities.Extensions["io.modelcontextprotocol/tasks"] == nil {
		t.Fatalf("the server does not declare the tasks extension: %+v", s.InitializeResult().Capabilities)
	}
	tool := ""
	for tl, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(tl.Name, "slow") && strings.Contains(tl.Name, "three") {
			tool = tl.Name
		}
	}
	if tool == "" {
		t.Fatal("no tool for the slow-three recipe")
	}
	return w, s, tr, tool
}

// createTask calls tool and returns the CreateTaskResult's taskId.
func createTask(t *testing.T, s *mcp.ClientSession, tr *rawTransport, tool string, meta mcp.Meta) (string, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"id": "x"}, Meta: meta}); err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	tr.mu.Lock()
	var created map[string]any
	_ = json.Unmarshal(tr.last, &created)
	tr.mu.Unlock()
	id, _ := created["taskId"].(string)
	if created["resultType"] != "task" || id == "" || created["status"] != "working" || created["ttlMs"] == nil {
		t.Fatalf("tools/call did not answer a CreateTaskResult: %v", created)
	}
	return id, created
}

// TestMCPTaskNodeDies: the node running a task is killed mid-step; the
// other node reads the task working until the lease the dead node no
// longer renews ends, then failed (task-lease-expired): never working
// forever.
func TestMCPTaskNodeDies(t *testing.T) {
	up, w, s, tr, tool := startTaskWorld(t)
	id, _ := createTask(t, s, tr, tool, nil)
	up.waitEntered(t)
	w.A.Kill(t)
	mcpB := w.B.URL + "/mcp"
	var got map[string]any
	for i := 0; i < 250; i++ { // the lease is 15 s
		g, rpcErr := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		if rpcErr != nil {
			t.Fatalf("tasks/get through B: %v", rpcErr)
		}
		if got = g; got["status"] != "working" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got["status"] != "failed" || !strings.Contains(mustJSONIT(got["error"]), "task-lease-expired") {
		t.Fatalf("the dead node's task reads %v, want failed task-lease-expired", got)
	}
	close(up.release)
	if p := up.paths(); strings.Join(p, " ") != "/one" {
		t.Errorf("the upstream saw %v, want /one only", p)
	}
}

// TestMCPTaskPausedNodeStopsPlan (helper-123's finding): node A is
// paused (SIGSTOP) while its task's first step runs, past the task's
// lease: node B reads the task failed. When A resumes, it starts none
// of the plan's later steps (recipes.WithStopCheck: the door's
// leaseOver, the lease moved with each renewal): a client that read failed and called again would otherwise
// meet their side effects twice. B keeps reading failed.
func TestMCPTaskPausedNodeStopsPlan(t *testing.T) {
	up, id, resume, mcpB := taskPausedInFirstStep(t)
	waitFor(t, mcpdoor.TaskLease+10*time.Second, 250*time.Millisecond, "node B reads the paused node's task failed", func() bool {
		g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		return g["status"] == "failed"
	})
	up.release <- struct{}{} // the first step's answer waits in A's socket
	resume()
	time.Sleep(2 * time.Second) // A reads the step's answer, and would start the next
	if p := strings.Join(up.paths(), " "); p != "/one" {
		t.Errorf("after node A resumed past its task's lease, the upstream saw %q; want /one only", p)
	}
	if g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true); e != nil || g["status"] != "failed" {
		t.Errorf("node B reads %v %v after A resumed; want failed", g, e)
	}
}

// TestMCPTaskCancelDuringPause (helper-125's finding): node A is paused
// (SIGSTOP, shorter than the lease) while its task's first step runs,
// and the task is cancelled through node B meanwhile. When A resumes,
// the first step's answer is waiting: A polls the task's cancel request
// afresh before it starts the next step (recipes.WithStopCheck: the
// door's leaseOver waits for a fresh poll), so no
// later step runs and the task ends cancelled. Before, A started the
// remaining steps on what it had last polled before the pause, and the
// task ended completed (or, before the task poller, one step late).
func TestMCPTaskCancelDuringPause(t *testing.T) {
	up, id, resume, mcpB := taskPausedInFirstStep(t)
	time.Sleep(time.Second)
	if ack, e := tasksRPC(t, mcpB, agentA1, "tasks/cancel", id, true); e != nil || ack["resultType"] != "complete" {
		t.Fatalf("tasks/cancel through B while A is paused: %v %v", ack, e)
	}
	time.Sleep(2 * time.Second)
	up.release <- struct{}{} // the first step's answer waits in A's socket
	resume()
	var g map[string]any
	waitFor(t, 15*time.Second, 100*time.Millisecond, "node B reads the task ended", func() bool {
		g, _ = tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		return g["status"] != "working"
	})
	if g["status"] != "cancelled" {
		t.Errorf("the task cancelled while its node was paused reads %s; want cancelled", mustJSONIT(g))
	}
	if p := strings.Join(up.paths(), " "); p != "/one" {
		t.Errorf("the upstream saw %q; want /one only (the steps not started when the cancel was made do not run)", p)
	}
}

// taskPausedInFirstStep is the pause tests' start: a task world, a task
// created through node A, and A paused (pauseNode) once the plan's first
// step has reached the upstream. It returns the upstream, the task's id,
// the func that resumes A, and node B's MCP endpoint.
func taskPausedInFirstStep(t *testing.T) (*slowUpstream, string, func(), string) {
	t.Helper()
	up, w, s, tr, tool := startTaskWorld(t)
	id, _ := createTask(t, s, tr, tool, nil)
	up.waitEntered(t)
	return up, id, pauseNode(t, w.A), w.B.URL + "/mcp"
}

// pauseNode stops node n (SIGSTOP: a stalled VM, a process descheduled
// for long) and returns the func that resumes it (SIGCONT), which the
// test's cleanup also calls.
func pauseNode(t *testing.T, n *Gateway) func() {
	t.Helper()
	proc := n.proc.cmd.Process
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume := func() {
		once.Do(func() {
			if err := proc.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("resuming the paused node: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// mustJSONIT is v as JSON.
func mustJSONIT(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestMCPTaskGracefulStop: a graceful stop (SIGINT) of the node running
// a task waits for its call, so the step under way is not cut and the
// task's end is stored: the other node reads it completed, not failed
// by its lease, and the upstream saw every step once.
func TestMCPTaskGracefulStop(t *testing.T) {
	up, w, s, tr, tool := startTaskWorld(t)
	id, _ := createTask(t, s, tr, tool, nil)
	up.waitEntered(t)
	if err := w.A.proc.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if w.A.proc.exited() {
		t.Fatal("node A exited on SIGINT while its task's step was running")
	}
	close(up.release)
	select {
	case <-w.A.proc.done:
	case <-time.After(30 * time.Second):
		t.Fatal("node A did not exit once its task ended")
	}
	got, rpcErr := tasksRPC(t, w.B.URL+"/mcp", agentA1, "tasks/get", id, true)
	if rpcErr != nil {
		t.Fatalf("tasks/get through B: %v", rpcErr)
	}
	if got["status"] != "completed" {
		t.Fatalf("after a graceful stop the task reads %v, want completed", got)
	}
	if p := up.paths(); len(p) == 0 || p[0] != "/one" || len(p) != len(slices.Compact(slices.Clone(p))) {
		t.Errorf("the upstream saw %v, want each step once, /one first", p)
	}
}

// TestMCPTaskStoreStalled: the tasks extension on a Redis that stops
// answering. Three calls of the slow recipe, each first step held until
// the test lets it go, task_after 1s, the door's timeout 8s, Redis
// behind a proxy that can hold its bytes both ways (read timeout 500 ms):
//   - before the stall, the call becomes a task node B reads, and it
//     completes (the task path is on: the control);
//   - with Redis held from the moment the plan runs, the task cannot be
//     stored at task_after (node A logs so); the call waits on as a
//     synchronous call and answers its result within the timeout: not
//     a task no node could read, not call-timeout at task_after;
//   - once Redis answers again, the next call becomes a task again and
//     completes, read through node B: nothing is stuck.
//
// Every step ran once per call.
func TestMCPTaskStoreStalled(t *testing.T) {
	srv, _ := startSingleRedis(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	up := startSlowUpstream(t)
	w, s, tr, tool := startTaskWorldAt(t, up.URL, storeBlock("address "+proxy.Addr(), ""), "\t\t\ttask_after 1s\n\t\t\ttimeout 8s\n")
	mcpB := w.B.URL + "/mcp"
	type result struct {
		res  *mcp.CallToolResult
		raw  map[string]any
		err  error
		took time.Duration
	}
	start := func() chan result {
		done := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			begun := time.Now()
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"id": "x"}})
			took := time.Since(begun)
			var raw map[string]any
			tr.mu.Lock()
			_ = json.Unmarshal(tr.last, &raw)
			tr.mu.Unlock()
			done <- result{res, raw, err, took}
		}()
		return done
	}
	// taskEnds holds that call became a task node B reads working, lets
	// its first step go, and waits for node B to read it completed.
	taskEnds := func(what string, call chan result) {
		t.Helper()
		got := <-call
		id, _ := got.raw["taskId"].(string)
		if got.err != nil || got.raw["resultType"] != "task" || id == "" {
			t.Fatalf("%s: %v %v; want a task", what, got.err, got.raw)
		}
		if g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true); e != nil || g["status"] != "working" {
			t.Fatalf("%s: node B reads %v %v, want working", what, g, e)
		}
		up.release <- struct{}{}
		waitFor(t, 10*time.Second, 100*time.Millisecond, what+": the task completed, read through node B", func() bool {
			g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
			return g["status"] == "completed"
		})
	}
	const notStored = "an MCP task could not be stored"

	call := start()
	up.waitEntered(t)
	taskEnds("before the stall", call)
	if strings.Contains(w.A.Output(), notStored) {
		t.Fatalf("node A logged %q before the stall", notStored)
	}

	call = start()
	up.waitEntered(t) // minted and claimed: the first step runs, task_after not yet passed
	proxy.Hold(true, true)
	waitFor(t, 10*time.Second, 50*time.Millisecond, "node A logs that the task could not be stored", func() bool {
		return strings.Contains(w.A.Output(), notStored)
	})
	up.release <- struct{}{}
	got := <-call
	proxy.Release()
	if got.err != nil || got.res.IsError || got.raw["taskId"] != nil || !strings.Contains(mustJSONIT(got.raw), `third`) {
		t.Fatalf("the call whose task could not be stored: after %v: %v %v; want its result, no task", got.took, got.err, got.raw)
	}
	if got.took >= 8*time.Second {
		t.Errorf("the call answered after %v: past the door's timeout (8s)", got.took)
	}

	call = start()
	up.waitEntered(t)
	taskEnds("once Redis answers again", call)
	if p, want := strings.Join(up.paths(), " ")+" ", strings.Repeat("/one /two /three ", 3); p != want {
		t.Errorf("the upstream saw %q, want each step once per call: %q", p, want)
	}
}

// TestMCPTaskStoreRestarted: Redis goes away while a task's plan runs,
// then comes back: killed and restarted without its data (the task's
// record lost with it). The node running the task tries its end again
// until the store takes it, within the task's lease: node B then reads
// the task completed with its result, and the upstream saw each step
// once. At its maxmemory (noeviction: writes refused, reads answered)
// the end is written all the same, as an answer already given is
// (allow-oom). Before, the end was a plain SET written once: the
// restart left the task unknown (-32602) and maxmemory left it
// working, then failed.
func TestMCPTaskStoreRestarted(t *testing.T) {
	srv, topo := startSingleRedis(t)
	up := startSlowUpstream(t)
	w, s, tr, tool := startTaskWorldAt(t, up.URL, topo.block(), "\t\t\ttask_after 200ms\n")
	mcpB := w.B.URL + "/mcp"
	const retried, gaveUp = "an MCP task's end was stored after the store refused it", "could not be stored before its lease ends"
	do := func(args ...string) {
		t.Helper()
		if _, err := redistest.Do(srv.Addr(), args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	for _, c := range []struct {
		what        string
		fault, mend func()
		// whileDown checks what node B reads once the plan has ended,
		// before mend.
		whileDown func(g, e map[string]any) bool
		retries   int // INFO lines of an end stored after refusals
	}{
		{"Redis killed, then restarted without its data", srv.Stop, srv.Restart,
			func(g, e map[string]any) bool {
				return e != nil && strings.Contains(mustJSONIT(e), "store-unavailable")
			}, 1},
		{"Redis at its maxmemory, then given room", func() { do("CONFIG", "SET", "maxmemory", "1") }, func() { do("CONFIG", "SET", "maxmemory", "0") },
			func(g, e map[string]any) bool { return e == nil && g["status"] == "completed" }, 0},
	} {
		ran := len(up.paths())
		logged := strings.Count(w.A.Output(), retried)
		id, _ := createTask(t, s, tr, tool, nil)
		up.waitEntered(t)
		if g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true); e != nil || g["status"] != "working" {
			t.Fatalf("%s: node B reads %v %v before the fault, want working", c.what, g, e)
		}
		c.fault()
		up.release <- struct{}{}
		waitFor(t, 10*time.Second, 50*time.Millisecond, c.what+": the plan's three steps ran", func() bool { return len(up.paths()) >= ran+3 })
		time.Sleep(500 * time.Millisecond) // the end tried and refused
		g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		if !c.whileDown(g, e) {
			t.Errorf("%s: node B reads %v %v while the store refuses the end", c.what, g, e)
		}
		c.mend()
		waitFor(t, 10*time.Second, 100*time.Millisecond, c.what+": node B reads the task completed", func() bool {
			g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
			return g["status"] == "completed"
		})
		if g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true); e != nil || !strings.Contains(mustJSONIT(g["result"]), `three`) || strings.Contains(mustJSONIT(g["result"]), `"isError":true`) {
			t.Errorf("%s: the completed task: %v %v, want the plan's result", c.what, g, e)
		}
		if p := strings.Join(up.paths()[ran:], " "); p != "/one /two /three" {
			t.Errorf("%s: the upstream saw %q, want each step once", c.what, p)
		}
		if n := strings.Count(w.A.Output(), retried); n != logged+c.retries {
			t.Errorf("%s: node A logged %q %d times, want %d", c.what, retried, n-logged, c.retries)
		}
	}
	if strings.Contains(w.A.Output(), gaveUp) {
		t.Errorf("node A gave a task up: %s", w.A.Output())
	}
}

// TestMCPTaskLostWrittenAgain: Redis restarts without its data while a
// task's first step runs on node A. Node A polls the task every
// TaskPollInterval, sees its record gone and writes it again at once:
// node B reads it working again well before A's next renewal
// (TaskLease/3 after the task began), where it read "unknown task"
// until then before (helper-121's low finding). The plan then ends,
// each step once, and B reads it completed.
func TestMCPTaskLostWrittenAgain(t *testing.T) {
	srv, topo := startSingleRedis(t)
	up := startSlowUpstream(t)
	w, s, tr, tool := startTaskWorldAt(t, up.URL, topo.block(), "\t\t\ttask_after 200ms\n")
	mcpB := w.B.URL + "/mcp"
	id, _ := createTask(t, s, tr, tool, nil)
	began := time.Now() // node A's renewal is due TaskLease/3 after about this
	up.waitEntered(t)
	srv.Restart() // killed, started again without its data
	restarted := time.Now()
	if renewal := began.Add(mcpdoor.TaskLease / 3); restarted.After(renewal.Add(-2 * time.Second)) {
		t.Skipf("Redis took %v to restart: node A's renewal, due at %v, would write the task again anyway", restarted.Sub(began), renewal.Sub(began))
	}
	var last string
	for deadline := began.Add(mcpdoor.TaskLease/3 - 500*time.Millisecond); ; time.Sleep(50 * time.Millisecond) {
		g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		if e == nil && g["status"] == "working" {
			break
		}
		last = mustJSONIT(g) + " " + mustJSONIT(e)
		if time.Now().After(deadline) {
			t.Fatalf("node B still reads %s %v after Redis restarted without its data; want working again before node A's renewal", last, time.Since(restarted))
		}
	}
	if !strings.Contains(w.A.Output(), "an MCP task the store no longer held was written again") {
		t.Errorf("node A did not log writing the lost task again:\n%s", w.A.Output())
	}
	up.release <- struct{}{}
	waitFor(t, 10*time.Second, 100*time.Millisecond, "node B reads the task completed", func() bool {
		g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		return g["status"] == "completed"
	})
	if p := strings.Join(up.paths(), " "); p != "/one /two /three" {
		t.Errorf("the upstream saw %q, want each step once", p)
	}
}

// heldTask is a running task of the slow recipe on node A, which
// reaches Redis through a proxy that can hold its bytes (node B
// directly), its first step held by the test and node B reading it
// working.
type heldTask struct {
	srv     *redistest.Server
	proxy   *redistest.Proxy
	up      *slowUpstream
	mcpB    string
	id      string
	created map[string]any // the CreateTaskResult
}

func startHeldTask(t *testing.T) heldTask {
	t.Helper()
	srv, _ := startSingleRedis(t)
	tw := heldTask{srv: srv, proxy: redistest.StartProxy(t, srv.Addr()), up: startSlowUpstream(t)}
	w, s, tr, tool := startTaskWorldStores(t, tw.up.URL, storeBlock("address "+tw.proxy.Addr(), ""), storeBlock("address "+srv.Addr(), ""), "\t\t\ttask_after 200ms\n")
	tw.mcpB = w.B.URL + "/mcp"
	tw.id, tw.created = createTask(t, s, tr, tool, nil)
	tw.up.waitEntered(t)
	if g, e := tasksRPC(t, tw.mcpB, agentA1, "tasks/get", tw.id, true); e != nil || g["status"] != "working" {
		t.Fatalf("node B reads %v %v before the fault, want working", g, e)
	}
	return tw
}

// TestMCPTaskEndHeldPastLease: node A reaches Redis through a path that
// holds its bytes (node B directly) as a task's plan ends: A's end, and
// any renewal, wait in the path while the lease runs out, and node B
// reads the task failed. When the path lets them through, long after
// the lease, Redis writes none of them (Tasks.Update, judged by its own
// clock): B keeps reading failed; the answer is not turned back into
// completed, nor the task into working (helper-121's finding: the end
// was a plain SET, written whenever it arrived).
func TestMCPTaskEndHeldPastLease(t *testing.T) {
	tw := startHeldTask(t)
	proxy, up, mcpB, id := tw.proxy, tw.up, tw.mcpB, tw.id
	proxy.Hold(true, true)
	up.release <- struct{}{}
	waitFor(t, 10*time.Second, 50*time.Millisecond, "the plan's three steps ran", func() bool { return len(up.paths()) >= 3 })
	waitFor(t, mcpdoor.TaskLease+10*time.Second, 250*time.Millisecond, "node B reads the task failed once its lease ends", func() bool {
		g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		return g["status"] == "failed"
	})
	proxy.Release() // what node A sent reaches Redis now
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true); e != nil || g["status"] != "failed" {
			t.Fatalf("after the held writes arrived, node B reads %v %v; want failed for good", g, e)
		}
	}
	if p := strings.Join(up.paths(), " "); p != "/one /two /three" {
		t.Errorf("the upstream saw %q, want each step once", p)
	}
}

// TestMCPTaskLeaseRestoredOlder: Redis comes back from a snapshot older
// than the running node's last lease renewal (an RDB restore, an fsync
// lost, a failover to a replica without the last write): the task's
// stored lease is the older one, node B reads the task failed once it
// passes, and node A's end, which A may still write by the lease it
// renewed, must not turn it back (helper-122's finding: the write was
// judged by A's lease alone). Node A reaches Redis through a path that
// holds its bytes while Redis restarts, node B directly.
func TestMCPTaskLeaseRestoredOlder(t *testing.T) {
	tw := startHeldTask(t)
	srv, proxy, up, mcpB, id, created := tw.srv, tw.proxy, tw.up, tw.mcpB, tw.id, tw.created
	if _, err := redistest.Do(srv.Addr(), "SAVE"); err != nil { // the snapshot holds the task's first lease
		t.Fatal(err)
	}
	waitFor(t, mcpdoor.TaskLease, 200*time.Millisecond, "node A renews the task's lease", func() bool {
		g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		return g["status"] == "working" && g["lastUpdatedAt"] != created["lastUpdatedAt"]
	})
	proxy.Hold(true, true)
	srv.Restart() // from the snapshot: the first lease, older than A's renewal
	up.release <- struct{}{}
	waitFor(t, 10*time.Second, 50*time.Millisecond, "the plan's three steps ran", func() bool { return len(up.paths()) >= 3 })
	waitFor(t, mcpdoor.TaskLease+10*time.Second, 250*time.Millisecond, "node B reads the task failed once the restored lease passes", func() bool {
		g, _ := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true)
		return g["status"] == "failed"
	})
	proxy.Release() // node A's end, still within the lease A renewed, reaches Redis
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if g, e := tasksRPC(t, mcpB, agentA1, "tasks/get", id, true); e != nil || g["status"] != "failed" {
			t.Fatalf("after node A's end could reach Redis, node B reads %v %v; want failed for good", g, e)
		}
	}
	if p := strings.Join(up.paths(), " "); p != "/one /two /three" {
		t.Errorf("the upstream saw %q, want each step once", p)
	}
}
