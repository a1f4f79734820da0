package mcpdoor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

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
// (with its trailing comma; empty: no taskId).
func tasksCallRaw(t *testing.T, d *Door, agent *policy.Agent, method, taskIDMember string, declare bool, hdr ...string) (int, map[string]any, map[string]any) {
	t.Helper()
	caps := `{}`
	if declare {
		caps = `{"extensions":{"` + TasksExtension + `":{}}}`
	}
	body := `{"jsonrpc":"2.0","id":3,"method":"` + method + `","params":{` + taskIDMember + `"_meta":{"io.modelcontextprotocol/clientCapabilities":` + caps + `}}}`
	m, ok := tasksMethod([]byte(body))
	if !ok {
		t.Fatalf("%s not taken as a tasks method", method)
	}
	r := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	d.serveTasks(w, r, &mcpRequest{agent: agent, ident: &agtp.Identity{AgentID: agent.ID, OwnerID: testPerson}}, m)
	var msg struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &msg); err != nil {
		t.Fatalf("%s: %s", method, w.Body)
	}
	return w.Code, msg.Result, msg.Error
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
	if c, _ := e.Tasks().CancelRequested(context.Background(), "alices"); c {
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
	for _, rec := range []store.Task{live, dead} {
		if err := e.Tasks().Put(context.Background(), rec, time.Hour); err != nil {
			t.Fatal(err)
		}
	}

	if _, _, rpcErr := tasksCall(t, d, agent, "tasks/get", "live", false); rpcErr == nil || rpcErr["code"] != float64(-32021) ||
		!strings.Contains(mustMarshal(t, rpcErr["data"]), `"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`) {
		t.Errorf("undeclared: %v, want -32021 with requiredCapabilities", rpcErr)
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
	if code, _, rpcErr := tasksCall(t, d, agent, "tasks/get", "live", true, "Mcp-Name", "other"); code != http.StatusBadRequest || rpcErr["code"] != float64(-32020) {
		t.Errorf("Mcp-Name mismatch: %d %v, want 400 -32020", code, rpcErr)
	}
	_, res, rpcErr := tasksCall(t, d, agent, "tasks/get", "live", true, "Mcp-Name", " live ", "Mcp-Method", "tasks/get")
	if rpcErr != nil || res["status"] != TaskWorking || res["resultType"] != "complete" || res["taskId"] != "live" || res["ttlMs"] != float64(TaskTTL.Milliseconds()) {
		t.Errorf("tasks/get live: %v %v", res, rpcErr)
	}
	_, res, _ = tasksCall(t, d, agent, "tasks/get", "dead", true)
	if res["status"] != TaskFailed || !strings.Contains(mustMarshal(t, res["error"]), "task-lease-expired") {
		t.Errorf("a task whose lease passed reads %v, want failed task-lease-expired", res)
	}
	_, ack, rpcErr := tasksCall(t, d, agent, "tasks/cancel", "live", true)
	if rpcErr != nil || len(ack) != 1 || ack["resultType"] != "complete" {
		t.Errorf("tasks/cancel ack: %v %v", ack, rpcErr)
	}
	if c, _ := e.Tasks().CancelRequested(context.Background(), "live"); !c {
		t.Error("tasks/cancel stored no cancel request")
	}
	if _, ack, rpcErr := tasksCall(t, d, agent, "tasks/update", "live", true); rpcErr != nil || len(ack) != 1 || ack["resultType"] != "complete" {
		t.Errorf("tasks/update ack: %v %v", ack, rpcErr)
	}
	for _, m := range []string{"tasks/result", "tasks/list"} {
		if _, ok := tasksMethod([]byte(`{"jsonrpc":"2.0","id":1,"method":"` + m + `","params":{}}`)); ok {
			t.Errorf("%s taken by the door (the SDK answers it -32601)", m)
		}
	}
	// A member whose name differs from "method" only in case is not the
	// method: the SDK reads "method" (tools/call), so the door must not
	// serve the message as tasks/get (encoding/json matched "Method").
	if _, ok := tasksMethod([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"tasks/get","params":{"taskId":"live"}}`)); ok {
		t.Error(`a tools/call with a "Method":"tasks/get" member taken as tasks/get`)
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
	d.follow(&mcpRequest{}, nil, nil, "/x", rec, make(chan struct{}), done) // returns: the panic is recovered
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
