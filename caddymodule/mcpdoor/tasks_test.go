package mcpdoor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/policy"
)

// tasksCall runs one tasks/* message through serveTasks as agent and
// returns the HTTP status and the JSON-RPC result or error.
func tasksCall(t *testing.T, d *Door, agent *policy.Agent, method, taskID string, declare bool, hdr ...string) (int, map[string]any, map[string]any) {
	t.Helper()
	return tasksCallRaw(t, d, agent, method, `"taskId":`+strconv.Quote(taskID)+`,`, declare, hdr...)
}

// tasksCallRaw is tasksCall with the params' taskId member as raw JSON
// (with its trailing comma; empty: no taskId). The status is the one
// the door asks for in place of the SDK's (200 when none).
func tasksCallRaw(t *testing.T, d *Door, agent *policy.Agent, method, taskIDMember string, declare bool, hdr ...string) (int, map[string]any, map[string]any) {
	t.Helper()
	caps := `{}`
	if declare {
		caps = `{"extensions":{"` + TasksExtension + `":{}}}`
	}
	var p tasksParams
	if err := json.Unmarshal([]byte(`{`+taskIDMember+`"_meta":{"io.modelcontextprotocol/clientCapabilities":`+caps+`}}`), &p); err != nil {
		t.Fatal(err)
	}
	rq := &mcpRequest{agent: agent, ident: &agtp.Identity{AgentID: agent.ID, OwnerID: testPerson}, header: http.Header{}}
	for i := 0; i+1 < len(hdr); i += 2 {
		rq.header.Set(hdr[i], hdr[i+1])
	}
	res, err := d.serveTasks(context.WithValue(context.Background(), mcpRequestKey{}, rq), method, &p)
	status := cmp.Or(rq.status, http.StatusOK)
	if err != nil {
		var rpcErr map[string]any
		if json.Unmarshal([]byte(mustMarshal(t, err)), &rpcErr) != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return status, nil, rpcErr
	}
	var members map[string]any // as the client reads them
	if err := json.Unmarshal([]byte(mustMarshal(t, res)), &members); err != nil {
		t.Fatal(err)
	}
	return status, members, nil
}

// testPerson is the OAuth sub the tasksCall requests act for ("": the
// agent's own owner).
var testPerson string

// TestTasksPerPerson: a task made for one person behind an agent (an
// OAuth sub) is unknown to another person behind the same agent and to
// the agent acting for its own owner: tasks/get and tasks/cancel are
// -32602 for them, as for another agent.
func TestTasksPerPerson(t *testing.T) {
	e := testEngine(t)
	d, err := New(e, &Config{Path: DefaultMCPPath})
	if err != nil {
		t.Fatal(err)
	}
	agent, _ := e.AgentRegistry().Lookup("677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa")
	now := time.Now().UTC()
	rec := store.Task{ID: "alices", AgentID: agent.ID, OwnerID: "alice", NodeID: "n1", Status: TaskWorking, CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}
	if err := e.Tasks().Put(context.Background(), rec, time.Hour); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testPerson = "" })
	for _, who := range []string{"bob", ""} {
		testPerson = who
		for _, method := range []string{"tasks/get", "tasks/cancel"} {
			if _, _, rpcErr := tasksCall(t, d, agent, method, "alices", true); rpcErr == nil || rpcErr["code"] != float64(-32602) {
				t.Errorf("%s of alice's task by %q: %v, want -32602", method, who, rpcErr)
			}
		}
	}
	if p, _ := e.Tasks().Poll(context.Background(), []string{"alices"}); len(p) == 1 && p[0].CancelRequested {
		t.Error("another person's cancel was stored")
	}
	testPerson = "alice"
	if _, res, rpcErr := tasksCall(t, d, agent, "tasks/get", "alices", true); rpcErr != nil || res["status"] != TaskWorking {
		t.Errorf("alice's own tasks/get: %v %v", res, rpcErr)
	}
}

// TestTasksMethods: tasks/get, tasks/cancel and tasks/update as the
// extension says (gating -32021, unknown -32602, header mismatch
// -32020, cancel and update acks), and a working task whose node
// stopped renewing its lease reads failed.
func TestTasksMethods(t *testing.T) {
	e := testEngine(t)
	d, err := New(e, &Config{Path: DefaultMCPPath})
	if err != nil {
		t.Fatal(err)
	}
	agent, _ := e.AgentRegistry().Lookup("677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa")
	other := &policy.Agent{ID: strings.Repeat("e", 64)}
	now := time.Now().UTC()
	live := store.Task{ID: "live", AgentID: agent.ID, NodeID: "n1", Status: TaskWorking, CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}
	dead := live
	dead.ID, dead.LeaseUntil = "dead", now.Add(-time.Second)
	deadKeyed := dead
	deadKeyed.ID, deadKeyed.Keyed = "dead-keyed", true
	for _, rec := range []store.Task{live, dead, deadKeyed} {
		if err := e.Tasks().Put(context.Background(), rec, time.Hour); err != nil {
			t.Fatal(err)
		}
	}

	if _, _, rpcErr := tasksCall(t, d, agent, "tasks/get", "live", false); rpcErr == nil || rpcErr["code"] != float64(-32021) ||
		!strings.Contains(mustMarshal(t, rpcErr["data"]), `"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`) {
		t.Errorf("undeclared: %v, want -32021 with requiredCapabilities", rpcErr)
	}
	// The capabilities in another shape are named, not taken for
	// undeclared (helper-127 L2).
	for caps, want := range map[string]string{
		`5`:                 `clientCapabilities"] must be an object`,
		`{"extensions":[]}`: `.extensions must be an object keyed by extension name`,
		`{"extensions":{"` + TasksExtension + `":true}}`: `.extensions["io.modelcontextprotocol/tasks"] must be an object`,
	} {
		var p tasksParams
		if err := json.Unmarshal([]byte(`{"taskId":"live","_meta":{"io.modelcontextprotocol/clientCapabilities":`+caps+`}}`), &p); err != nil {
			t.Fatal(err)
		}
		rq := &mcpRequest{agent: agent, ident: &agtp.Identity{AgentID: agent.ID}, header: http.Header{}}
		_, err := d.serveTasks(context.WithValue(context.Background(), mcpRequestKey{}, rq), "tasks/get", &p)
		var rpcErr map[string]any
		if err == nil || json.Unmarshal([]byte(mustMarshal(t, err)), &rpcErr) != nil || rpcErr["code"] != float64(-32602) ||
			!strings.Contains(rpcErr["message"].(string), want) {
			t.Errorf("capabilities %s: %v, want -32602 saying %s", caps, err, want)
		}
	}
	for _, id := range []string{"nope", "live"} {
		a := agent
		if id == "live" {
			a = other // another agent's task is unknown to it
		}
		if _, _, rpcErr := tasksCall(t, d, a, "tasks/get", id, true); rpcErr == nil || rpcErr["code"] != float64(-32602) {
			t.Errorf("tasks/get %s: %v, want -32602", id, rpcErr)
		}
	}
	for _, member := range []string{``, `"taskId":"",`, `"taskId":42,`, `"taskId":null,`, `"taskId":["live"],`} {
		for _, method := range []string{"tasks/get", "tasks/cancel"} {
			if _, _, rpcErr := tasksCallRaw(t, d, agent, method, member, true); rpcErr == nil || rpcErr["code"] != float64(-32602) ||
				!strings.Contains(rpcErr["message"].(string), "params.taskId is required") {
				t.Errorf("%s with params {%s}: %v, want -32602 naming params.taskId", method, member, rpcErr)
			}
		}
	}
	if code, _, rpcErr := tasksCall(t, d, agent, "tasks/get", "live", true, "Mcp-Name", "other", "Mcp-Protocol-Version", "2026-07-28"); code != http.StatusBadRequest || rpcErr["code"] != float64(-32020) {
		t.Errorf("Mcp-Name mismatch: %d %v, want 400 -32020", code, rpcErr)
	}
	_, res, rpcErr := tasksCall(t, d, agent, "tasks/get", "live", true, "Mcp-Name", "live", "Mcp-Protocol-Version", "2026-07-28")
	if rpcErr != nil || res["status"] != TaskWorking || res["resultType"] != "complete" || res["taskId"] != "live" || res["ttlMs"] != float64(TaskTTL.Milliseconds()) {
		t.Errorf("tasks/get live: %v %v", res, rpcErr)
	}
	// What a repeat does depends on the call's key: without one it runs
	// again (helper-130: the message told to repeat under the key).
	for id, want := range map[string]string{
		"dead":       "carried no Idempotency-Key, so a repeat would run it again",
		"dead-keyed": "A repeat of the call with the same Idempotency-Key tells once the key's lease",
	} {
		_, res, _ = tasksCall(t, d, agent, "tasks/get", id, true)
		if res["status"] != TaskFailed || !strings.Contains(mustMarshal(t, res["error"]), "task-lease-expired") ||
			!strings.Contains(fmt.Sprint(res["statusMessage"]), want) || strings.Contains(fmt.Sprint(res["statusMessage"]), "Idempotency-Key tells") != (id == "dead-keyed") {
			t.Errorf("a task (%s) whose lease passed reads %v, want failed task-lease-expired saying %q", id, res, want)
		}
	}
	_, ack, rpcErr := tasksCall(t, d, agent, "tasks/cancel", "live", true)
	if rpcErr != nil || len(ack) != 1 || ack["resultType"] != "complete" {
		t.Errorf("tasks/cancel ack: %v %v", ack, rpcErr)
	}
	if p, _ := e.Tasks().Poll(context.Background(), []string{"live"}); !(len(p) == 1 && p[0].CancelRequested) {
		t.Error("tasks/cancel stored no cancel request")
	}
	if _, ack, rpcErr := tasksCall(t, d, agent, "tasks/update", "live", true); rpcErr != nil || len(ack) != 1 || ack["resultType"] != "complete" {
		t.Errorf("tasks/update ack: %v %v", ack, rpcErr)
	}
}

// TestPlanSteps: a composition_failed answer's steps are read from its
// error details, and a stopped plan is told apart from a failed one.
func TestPlanSteps(t *testing.T) {
	body := `{"status":422,"reason":"composition-failed","error":{"code":"composition_failed","details":{"underlying":"plan_stopped","steps":[` +
		`{"name":"first","method":"FETCH","path":"/a","state":"succeeded","output":{"id":1}},{"name":"second","state":"not-started"},{"name":"third","state":"not-started"}]}}}`
	raw, stopped := planSteps([]byte(body))
	if !stopped || strings.Contains(string(raw), "output") {
		t.Fatalf("planSteps = %s %v", raw, stopped)
	}
	if got := stepSentence(raw); got != "steps run: first (succeeded); steps not started: second, third" {
		t.Errorf("stepSentence = %q", got)
	}
	if _, stopped := planSteps([]byte(strings.Replace(body, "plan_stopped", "upstream_error", 1))); stopped {
		t.Error("a failed plan taken for a stopped one")
	}
	if raw, _ := planSteps([]byte(`{"id":1}`)); raw != nil {
		t.Errorf("steps of a success: %s", raw)
	}
}

// TestTaskAfterBelowTimeout: task_after at or past the door's timeout
// is refused at provision.
func TestTaskAfterBelowTimeout(t *testing.T) {
	c := &Config{Path: DefaultMCPPath, Timeout: engine.Duration(time.Second), TaskAfter: engine.Duration(2 * time.Second)}
	if err := c.Validate("header"); err == nil || !strings.Contains(err.Error(), "must be below timeout") {
		t.Fatalf("Validate = %v", err)
	}
	c.TaskAfter = engine.Duration(500 * time.Millisecond)
	if err := c.Validate("header"); err != nil {
		t.Fatalf("Validate = %v", err)
	}
}

// TestPanicInTaskFinish: a panic while a task's end is written (a
// defect; here a test hook in finish), on the goroutine that follows
// the task outside any request, is logged at ERROR with the task's id
// instead of ending the process; the task stays as last stored
// (working, left to its lease).
func TestPanicInTaskFinish(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	e := testEngineLogged(t, zap.New(core), "http://127.0.0.1:9")
	d, err := New(e, &Config{Path: DefaultMCPPath})
	if err != nil {
		t.Fatal(err)
	}
	hook := func() { panic("task finish defect") }
	testHookTaskFinish.Store(&hook)
	defer testHookTaskFinish.Store(nil)
	now := time.Now().UTC()
	rec := store.Task{ID: "t-panics", AgentID: strings.Repeat("a", 64), NodeID: "n1", Tool: "lookup", Status: TaskWorking,
		CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(TaskLease)}
	if err := e.Tasks().Put(context.Background(), rec, TaskTTL); err != nil {
		t.Fatal(err)
	}
	done := make(chan *agtp.Response, 1)
	done <- &agtp.Response{Status: 200}
	d.follow(&mcpRequest{}, nil, nil, "/x", rec, make(chan struct{}), new(atomic.Int64), new(atomic.Int64), done) // returns: the panic is recovered
	lines := logs.FilterMessageSnippet("panic following an MCP task").All()
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1: %v", len(lines), logs.All())
	}
	if f := lines[0].ContextMap(); f["task_id"] != "t-panics" || f["panic"] != "task finish defect" || !strings.Contains(f["stack"].(string), "finish") {
		t.Fatalf("the line's fields: %v", f)
	}
	got, ok, err := e.Tasks().Get(context.Background(), "t-panics")
	if err != nil || !ok || got.Status != TaskWorking {
		t.Fatalf("the task after the panic: %+v %v %v, want it as stored (working)", got, ok, err)
	}
}

// TestTasksThroughSDK: the tasks methods over the door's HTTP answer,
// dispatched by the SDK as custom methods: a stored task read under
// 2025-11-25 and under 2026-07-28 (the _meta triple and Mcp-Method the
// SDK requires there), the errors' HTTP statuses (SEP-2575 at
// 2026-07-28: -32602 and -32021 are 400; before it, 200), the door's
// Mcp-Name rule (400), a tasks method inside a batch (2025-03-26), and the removed
// tasks/list (-32601).
func TestTasksThroughSDK(t *testing.T) {
	e := testEngine(t)
	d := newTestDoor(t, e, nil)
	agentID := diffBase["Agent-Id"][0]
	now := time.Now().UTC()
	if err := e.Tasks().Put(context.Background(), store.Task{ID: "mine", AgentID: agentID, NodeID: "n1", Status: TaskWorking, CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	declared := `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"` + TasksExtension + `":{}}}`
	msg := func(method, taskID, meta string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":{"taskId":"` + taskID + `","_meta":{` + meta + `}}}`
	}
	newMeta := `"io.modelcontextprotocol/protocolVersion":"2026-07-28",` + declared
	v2026 := map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tasks/get"}}
	for _, c := range []struct {
		name   string
		body   string
		hdr    map[string][]string
		status int
		want   string // in the body
	}{
		{name: "get 2025-11-25", body: msg("tasks/get", "mine", declared), status: 200, want: `"result":{"_meta":{"io.github.caddy-rcns/task-node":"n1"},"createdAt":`},
		{name: "get 2026-07-28", body: msg("tasks/get", "mine", newMeta), hdr: v2026, status: 200, want: `"status":"working"`},
		{name: "unknown 2025-11-25", body: msg("tasks/get", "nope", declared), status: 200, want: `"code":-32602,"message":"unknown taskId`},
		{name: "unknown 2026-07-28", body: msg("tasks/get", "nope", newMeta), hdr: v2026, status: 400, want: `"code":-32602,"message":"unknown taskId`},
		{name: "undeclared 2025-11-25", body: msg("tasks/get", "mine", ""), status: 200, want: `"code":-32021`},
		{name: "undeclared 2026-07-28", body: msg("tasks/get", "mine", `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`), hdr: v2026, status: 400, want: `"code":-32021`},
		{name: "2026-07-28 without Mcp-Method", body: msg("tasks/get", "mine", newMeta), hdr: map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}}, status: 400, want: `missing required Mcp-Method header`},
		{name: "2026-07-28 Mcp-Method mismatch", body: msg("tasks/get", "mine", newMeta), hdr: map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tasks/cancel"}}, status: 400, want: `"code":-32020`},
		{name: "2026-07-28 without the _meta version", body: msg("tasks/get", "mine", declared), hdr: v2026, status: 400, want: `missing or invalid _meta field \"io.modelcontextprotocol/protocolVersion\"`},
		{name: "Mcp-Name mismatch", body: msg("tasks/get", "mine", newMeta), hdr: map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tasks/get"}, "Mcp-Name": {"other"}}, status: 400, want: `"code":-32020`},
		{name: "Mcp-Name mismatch, undeclared", body: msg("tasks/get", "mine", `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`), hdr: map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tasks/get"}, "Mcp-Name": {"other"}}, status: 400, want: `"code":-32020`},
		{name: "Mcp-Name match", body: msg("tasks/get", "mine", newMeta), hdr: map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tasks/get"}, "Mcp-Name": {"mine"}}, status: 200, want: `"taskId":"mine"`},
		{name: "Mcp-Name before 2026-07-28", body: msg("tasks/get", "mine", declared), hdr: map[string][]string{"Mcp-Name": {"other"}}, status: 200, want: `"taskId":"mine"`}, // as tools/call's: the SDK reads the standard headers from 2026-07-28
		{name: "serverInfo at 2026-07-28", body: msg("tasks/get", "mine", newMeta), hdr: v2026, status: 200, want: `"_meta":{"io.github.caddy-rcns/task-node":"n1","io.modelcontextprotocol/serverInfo":{"name":`},
		{name: "params null", body: `{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":null}`, status: 200, want: `"code":-32021`},
		{name: "extension false", body: msg("tasks/get", "mine", `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"`+TasksExtension+`":false}}`), status: 200, want: `"code":-32602,"message":"invalid params: tasks/get: _meta[\"io.modelcontextprotocol/clientCapabilities\"].extensions[\"io.modelcontextprotocol/tasks\"] must be an object ({} declares the extension)"`},
		{name: "extensions null", body: msg("tasks/get", "mine", `"io.modelcontextprotocol/clientCapabilities":{"extensions":null}`), status: 200, want: `"code":-32021`},
		{name: "extension null", body: msg("tasks/get", "mine", `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"`+TasksExtension+`":null}}`), status: 200, want: `"code":-32021`},
		{name: "no params", body: `{"jsonrpc":"2.0","id":7,"method":"tasks/get"}`, status: 200, want: `"code":-32021`},
		{name: "params null 2026-07-28", body: `{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":null}`, hdr: v2026, status: 400, want: `"code":-32602`},
		{name: "in a batch", body: `[` + msg("tasks/get", "mine", declared) + `,{"jsonrpc":"2.0","id":8,"method":"tools/list"}]`, hdr: map[string][]string{"Mcp-Protocol-Version": {"2025-03-26"}}, status: 200, want: `"taskId":"mine"`},
		{name: "tasks/list removed", body: msg("tasks/list", "mine", declared), status: 200, want: `"code":-32601`},
		{name: "cancel", body: msg("tasks/cancel", "mine", declared), status: 200, want: `"result":{"resultType":"complete"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := serveCase(d, fastCase{body: c.body, hdr: c.hdr})
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
				t.Errorf("%d %s\nwant %d and %s", w.Code, w.Body, c.status, c.want)
			}
		})
	}
	if p, _ := e.Tasks().Poll(context.Background(), []string{"mine"}); !(len(p) == 1 && p[0].CancelRequested) {
		t.Error("tasks/cancel through the SDK stored no cancel request")
	}
}

// TestTasksMethodPanics: a tasks method whose handler panics (a defect,
// injected) is answered -32603 and logged with its stack, and the
// process goes on: the SDK runs the handler on a goroutine of its own
// that recovers nothing (recoverPanics). A stored record that cannot
// be encoded is a -32603 answer at once, not a response the SDK fails
// to write (the client would wait for its own timeout).
func TestTasksMethodPanics(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	e := testEngineLogged(t, zap.New(core), "http://127.0.0.1:9")
	d := newTestDoor(t, e, nil)
	agentID := diffBase["Agent-Id"][0]
	now := time.Now().UTC()
	for _, rec := range []store.Task{
		{ID: "fine", AgentID: agentID, NodeID: "n1", Status: TaskWorking, CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(time.Minute)},
		{ID: "bad", AgentID: agentID, NodeID: "n1", Status: TaskCompleted, CreatedAt: now, UpdatedAt: now, Result: []byte(`{"unclosed":`)},
	} {
		if err := e.Tasks().Put(context.Background(), rec, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	get := func(id string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"` + id + `","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}}}`
	}
	hook := func() { panic("injected tasks defect") }
	testHookServeTasks.Store(&hook)
	w := serveCase(d, fastCase{body: get("fine")})
	testHookServeTasks.Store(nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"code":-32603`) {
		t.Errorf("a panicking tasks/get: %d %s, want 200 and -32603", w.Code, w.Body)
	}
	if n := logs.FilterMessage("panic in an MCP method").FilterFieldKey("stack").Len(); n != 1 {
		t.Errorf("%d ERROR lines with the panic's stack, want 1: %v", n, logs.All())
	}
	if w := serveCase(d, fastCase{body: get("fine")}); w.Code != 200 || !strings.Contains(w.Body.String(), `"status":"working"`) {
		t.Errorf("the next tasks/get: %d %s", w.Code, w.Body)
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serveCase(d, fastCase{body: get("bad")}) }()
	select {
	case w := <-done:
		if !strings.Contains(w.Body.String(), `"code":-32603`) || !strings.Contains(w.Body.String(), "task-record-invalid") {
			t.Errorf("a record that cannot be encoded: %d %s, want -32603 task-record-invalid", w.Code, w.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tasks/get of a record that cannot be encoded never answered")
	}
}

// TestCreateTaskResultServerInfo: the CreateTaskResult that replaces a
// tool result keeps the serverInfo the SDK put in the tool result's
// _meta (2026-07-28) and drops the rest of it (the call's own).
func TestCreateTaskResultServerInfo(t *testing.T) {
	now := time.Now().UTC()
	ct := &createdTask{rec: store.Task{ID: "t1", Status: TaskWorking, CreatedAt: now, UpdatedAt: now}}
	for _, c := range []struct{ sdk, want string }{
		{`{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"gw","version":"1"},"io.github.caddy-rcns/audit-id":"a"},"content":[]}}`,
			`"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"gw","version":"1"}}`},
		{`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`, ``},
	} {
		tw := &taskWriter{hd: http.Header{}}
		_, _ = tw.Write([]byte(c.sdk))
		rec := httptest.NewRecorder()
		tw.flush(rec, ct)
		body := rec.Body.String()
		if !strings.Contains(body, `"resultType":"task"`) || !strings.Contains(body, `"taskId":"t1"`) || strings.Contains(body, "audit-id") ||
			(c.want != "" && !strings.Contains(body, c.want)) || (c.want == "" && strings.Contains(body, "_meta")) {
			t.Errorf("%s\n-> %s, want a CreateTaskResult with %q", c.sdk, body, c.want)
		}
	}
}

// refusingTasks is a task store whose Put fails (a Redis fault, or the
// memory store at its most).
type refusingTasks struct{ store.Tasks }

// Put refuses after 1 s, as a slow store: the call's wait counts it.
func (refusingTasks) Put(context.Context, store.Task, time.Duration) error {
	time.Sleep(time.Second)
	return store.ErrUnavailable
}

// TestTaskNotStoredWaitsOn: a call that would become a task whose task
// the store refuses waits on as a synchronous call: a plan that answers
// within the door's timeout is its ordinary result, one that does not
// is call-timeout, after the whole timeout (the refused Put's own wait
// inside it, not added to it), with retry_after_seconds
// counted from it (before, the call answered call-timeout at task_after,
// naming the door's timeout, its retry_after counted from that).
func TestTaskNotStoredWaitsOn(t *testing.T) {
	var delay atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(delay.Load()))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","name":"n","price":1}`))
	}))
	t.Cleanup(up.Close)
	e := testEngineSet(t, zap.NewNop(), up.URL, func(s store.Set) store.Set {
		s.Tasks = refusingTasks{s.Tasks}
		return s
	}, func(c *engine.Config) { c.CompositionTimeout = engine.Duration(10 * time.Second) })
	cfg := &Config{TaskAfter: engine.Duration(100 * time.Millisecond), Timeout: engine.Duration(1500 * time.Millisecond)}
	ec := &engine.Config{}
	ec.CompositionTimeout = engine.Duration(10 * time.Second) // the handler's, as the engine's
	ec.SetDefaults()
	cfg.SetDefaults(ec)
	d, err := New(e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	call := func(item string) (*httptest.ResponseRecorder, time.Duration) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow-one","arguments":{"item_id":"` + item + `","path":"/slow-one/` + item + `"},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}}}`
		start := time.Now()
		w := serveCase(d, fastCase{body: body, hdr: map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"slow-one"},
			"Authority-Scope": {"bench:read, rcns:negotiate"}}})
		return w, time.Since(start)
	}
	delay.Store(int64(400 * time.Millisecond)) // past task_after, within the timeout
	if w, took := call("a"); took < 400*time.Millisecond || !strings.Contains(w.Body.String(), `"outcome":"succeeded"`) || strings.Contains(w.Body.String(), `"resultType":"task"`) {
		t.Errorf("a plan answering within the timeout, its task refused: after %s %d %s, want its result", took, w.Code, w.Body)
	}
	delay.Store(int64(2500 * time.Millisecond)) // past the timeout
	w, took := call("b")
	// Bounds with room for a loaded machine: the old wait, the refused
	// Put's second on top of the timeout, was 2.5 s.
	if took < 1500*time.Millisecond || took > 2100*time.Millisecond || !strings.Contains(w.Body.String(), `"code":"call-timeout"`) ||
		!strings.Contains(w.Body.String(), `did not finish within 1.5s`) || !strings.Contains(w.Body.String(), `"retry_after_seconds":9`) {
		t.Errorf("a plan outliving the timeout, its task refused: after %s %d %s, want call-timeout after 1.5s, retry_after_seconds 9", took, w.Code, w.Body)
	}
}

// failingGet is a task store whose Get fails with err.
type failingGet struct {
	store.Tasks
	err error
}

func (f failingGet) Get(context.Context, string) (store.Task, bool, error) {
	return store.Task{}, false, f.err
}

// TestTasksGetErrors: a task store that does not answer is
// store-unavailable (retry); one that answers with a record that does
// not decode (Redis: a value this door did not write) is
// task-record-invalid, which no retry mends.
func TestTasksGetErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: task: i/o timeout", store.ErrUnavailable), "store-unavailable: the task store did not answer; retry"},
		{errors.New(`redisstore: task x: invalid character 'o' in literal null (expecting 'u')`), "task-record-invalid"},
	} {
		e := testEngineSet(t, zap.NewNop(), "http://127.0.0.1:9", func(s store.Set) store.Set {
			s.Tasks = failingGet{s.Tasks, c.err}
			return s
		})
		d := newTestDoor(t, e, nil)
		body := `{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"x","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}}}`
		if w := serveCase(d, fastCase{body: body}); !strings.Contains(w.Body.String(), `"code":-32603`) || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("Get failing with %v: %d %s, want -32603 %s", c.err, w.Code, w.Body, c.want)
		}
	}
}

// flakyTasks is a task store that refuses Update (as Redis stalled or
// restarting) while refuse is above zero, counting down, or always when
// refuse is negative; it notes when each Update came.
type flakyTasks struct {
	store.Tasks
	refuse atomic.Int64
	mu     sync.Mutex
	puts   []time.Time
	// stall, when set, holds every Poll until it is closed, whatever
	// its context says (a stalled Redis Cluster node).
	stall chan struct{}
}

func (f *flakyTasks) Poll(ctx context.Context, ids []string) ([]store.TaskPoll, error) {
	f.mu.Lock()
	stall := f.stall
	f.mu.Unlock()
	if stall != nil {
		<-stall
	}
	return f.Tasks.Poll(ctx, ids)
}

func (f *flakyTasks) Update(ctx context.Context, rec store.Task, ttl time.Duration, notAfter time.Time, margin time.Duration) error {
	f.mu.Lock()
	f.puts = append(f.puts, time.Now())
	f.mu.Unlock()
	if n := f.refuse.Load(); n != 0 {
		if n > 0 {
			f.refuse.Add(-1)
		}
		return store.ErrUnavailable
	}
	return f.Tasks.Update(ctx, rec, ttl, notAfter, margin)
}

func (f *flakyTasks) putTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.puts...)
}

// taskWithFlakyStore is a door on an engine whose task store is a
// flakyTasks, and a working task stored through it with lease.
func taskWithFlakyStore(t *testing.T, lease time.Duration) (*Door, *flakyTasks, store.Task, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	flaky := &flakyTasks{}
	e := testEngineSet(t, zap.New(core), "http://127.0.0.1:9", func(s store.Set) store.Set {
		flaky.Tasks = s.Tasks
		s.Tasks = flaky
		return s
	})
	d := newTestDoor(t, e, &Config{Path: DefaultMCPPath})
	now := time.Now().UTC()
	rec := store.Task{ID: "t-" + strings.ToLower(t.Name()), AgentID: strings.Repeat("a", 64), NodeID: "n1", Tool: "lookup", Status: TaskWorking,
		CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(lease)}
	if err := flaky.Tasks.Put(context.Background(), rec, TaskTTL); err != nil {
		t.Fatal(err)
	}
	return d, flaky, rec, logs
}

// TestTaskEndStoredAfterRefusals: a task's end the store refuses (a
// Redis stall or restart as the plan ends) is tried again, and stored
// once the store answers, rather than left for the lease to turn the
// task failed. Before, one refusal lost the answer.
func TestTaskEndStoredAfterRefusals(t *testing.T) {
	d, flaky, rec, logs := taskWithFlakyStore(t, TaskLease)
	flaky.refuse.Store(3)
	done := make(chan *agtp.Response, 1)
	done <- &agtp.Response{Status: 200, Body: []byte(`{"outcome":"succeeded","result":{"id":"x"}}`)}
	d.follow(&mcpRequest{}, &mcpTool{kind: mcpRecipe, name: "lookup"}, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "lookup"}}, "/x", rec, make(chan struct{}), new(atomic.Int64), new(atomic.Int64), done)
	got, ok, err := flaky.Tasks.Get(context.Background(), rec.ID)
	if err != nil || !ok || got.Status != TaskCompleted || got.StatusMessage != "completed" || !strings.Contains(string(got.Result), `"id":"x"`) {
		t.Fatalf("the task after 3 refused ends: %+v %v %v, want completed with its result", got, ok, err)
	}
	if n := len(flaky.putTimes()); n != 4 {
		t.Errorf("%d tries of the end, want 4 (3 refused, 1 stored)", n)
	}
	if l := logs.FilterMessageSnippet("end was stored after the store refused it").All(); len(l) != 1 || l[0].ContextMap()["tries"] != int64(4) {
		t.Errorf("log lines: %v, want one INFO line with tries 4", logs.All())
	}
}

// TestTaskEndHeldToLease: a task's end is not written once the lease
// last stored is about to end (TaskWriteMargin before it): a reader past
// the lease reads the task failed, and a later write would turn that
// terminal state into another. A store that keeps refusing is tried
// until then and no later; a lease already within the margin is not
// tried at all. Either way one WARN line says the task reads failed.
func TestTaskEndHeldToLease(t *testing.T) {
	lease := TaskWriteMargin + 600*time.Millisecond
	d, flaky, rec, logs := taskWithFlakyStore(t, lease)
	flaky.refuse.Store(-1)
	end := rec
	end.Status, end.LeaseUntil = TaskCompleted, time.Time{}
	if d.storeEnd(context.Background(), end, rec.LeaseUntil) {
		t.Fatal("storeEnd reported a refused end stored")
	}
	last := rec.LeaseUntil.Add(-TaskWriteMargin)
	puts := flaky.putTimes()
	if len(puts) < 2 {
		t.Errorf("%d tries within the lease, want the end tried again while the lease allowed", len(puts))
	}
	for i, p := range puts {
		if !p.Before(last) {
			t.Errorf("try %d came %v after the last moment the lease allowed", i+1, p.Sub(last))
		}
	}
	if got, _, _ := flaky.Tasks.Get(context.Background(), rec.ID); got.Status != TaskWorking {
		t.Errorf("the stored task: %+v, want it as last stored (working)", got)
	}

	time.Sleep(time.Until(last))
	flaky.refuse.Store(0) // the store answers again, but too late
	if d.storeEnd(context.Background(), end, rec.LeaseUntil) {
		t.Fatal("storeEnd stored an end past the lease's margin")
	}
	if n := len(flaky.putTimes()); n != len(puts) {
		t.Errorf("%d more tries past the lease's margin, want none", n-len(puts))
	}
	if got, _, _ := flaky.Tasks.Get(context.Background(), rec.ID); got.Status != TaskWorking {
		t.Errorf("the stored task: %+v, want it as last stored (working)", got)
	}
	if l := logs.FilterMessageSnippet("could not be stored before its lease ends").All(); len(l) != 2 {
		t.Errorf("log lines: %v, want two WARN lines", logs.All())
	}
}

// TestTaskEndOverAnEndedTask: an end the store refuses as late
// (store.ErrTaskLate: past the time it was held to, by the store's
// clock, or over a task that ended) is not tried again, and nothing is
// written over the stored end.
func TestTaskEndOverAnEndedTask(t *testing.T) {
	d, flaky, rec, logs := taskWithFlakyStore(t, TaskLease)
	ended := rec
	ended.Status, ended.StatusMessage, ended.LeaseUntil = TaskFailed, "failed elsewhere", time.Time{}
	if err := flaky.Tasks.Put(context.Background(), ended, TaskTTL); err != nil {
		t.Fatal(err)
	}
	end := rec
	end.Status, end.LeaseUntil = TaskCompleted, time.Time{}
	if d.storeEnd(context.Background(), end, rec.LeaseUntil) {
		t.Fatal("an end was stored over an ended task")
	}
	if n := len(flaky.putTimes()); n != 1 {
		t.Errorf("%d tries, want 1: a late end is not tried again", n)
	}
	if got, _, _ := flaky.Tasks.Get(context.Background(), rec.ID); got.Status != TaskFailed || got.StatusMessage != "failed elsewhere" {
		t.Errorf("the stored task: %+v, want the ended one unchanged", got)
	}
	if l := logs.FilterMessageSnippet("could not be stored before its lease ends").All(); len(l) != 1 {
		t.Errorf("log lines: %v, want one WARN line", logs.All())
	}
}

// TestTaskRenewedWhilePollsStall: a task's lease is renewed on time
// while the store's polls hang (a Redis Cluster node holding other
// tasks stalled; helper-124's finding: the renewal waited for the
// poll, and a task on a healthy node read failed and lost its answer),
// and its end is stored.
func TestTaskRenewedWhilePollsStall(t *testing.T) {
	d, flaky, rec, _ := taskWithFlakyStore(t, TaskLease)
	flaky.mu.Lock()
	flaky.stall = make(chan struct{})
	flaky.mu.Unlock()
	defer close(flaky.stall)
	done := make(chan *agtp.Response, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		d.follow(&mcpRequest{}, &mcpTool{kind: mcpRecipe, name: "lookup"}, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "lookup"}}, "/x", rec, make(chan struct{}), new(atomic.Int64), new(atomic.Int64), done)
	}()
	deadline := time.Now().Add(TaskLease/3 + 3*time.Second)
	for len(flaky.putTimes()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal %v after the task began while its polls hang", TaskLease/3+3*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got, ok, err := flaky.Tasks.Get(context.Background(), rec.ID)
	if err != nil || !ok || got.Status != TaskWorking || !got.LeaseUntil.After(rec.LeaseUntil) {
		t.Fatalf("the task after its renewal: %+v %v %v, want working with a later lease", got, ok, err)
	}
	done <- &agtp.Response{Status: 200, Body: []byte(`{"outcome":"succeeded","result":{"id":"x"}}`)}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end after the answer")
	}
	if got, ok, err := flaky.Tasks.Get(context.Background(), rec.ID); err != nil || !ok || got.Status != TaskCompleted {
		t.Fatalf("the task after its end: %+v %v %v, want completed", got, ok, err)
	}
}
