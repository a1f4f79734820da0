package mcpdoor

// The tasks extension (io.modelcontextprotocol/tasks, SEP-2663, MCP
// 2026-07-28; docs/agent-guide-mcp.md "Tasks"). A recipe tool's call
// from a client that declared the extension, not answered within the mcp
// block's task_after, answers with a task (CreateTaskResult: resultType
// "task", taskId, status working) and goes on at the node that accepted
// it, through the same engine path as a synchronous call (the same
// contract, records and Idempotency-Key claim). The task's state lives
// in the store (store.Tasks), so tasks/get and tasks/cancel are answered
// on every node sharing it. The go-sdk implements no tasks: tasks/get,
// tasks/update and tasks/cancel are the door's, registered on the SDK's
// servers as custom methods (addTasksMethods) so that the SDK's
// transport and message rules apply to them as to its own, and a
// CreateTaskResult replaces the SDK's answer to the call that became a
// task (taskWriter).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/internal/workers"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// TasksExtension is the extension's identifier, under
// capabilities.extensions (server/discover, initialize) and a client's
// _meta clientCapabilities.
const TasksExtension = "io.modelcontextprotocol/tasks"

// Task statuses (SEP-2663).
const (
	TaskWorking   = "working"
	TaskCompleted = "completed"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// Task timing.
const (
	// TaskTTL is how long a task is kept after its last write (ttlMs).
	TaskTTL = time.Hour
	// TaskPollInterval is the poll interval the door suggests
	// (pollIntervalMs), and how often the running node polls the store
	// for a cancel request and for the task's record (store.Tasks.Poll).
	TaskPollInterval = 250 * time.Millisecond
	// TaskLease is how long a running task's lease lasts; the running
	// node renews it every TaskLease/3. A working task whose lease
	// passed is reported failed: its node stopped (docs/agent-guide-mcp.md
	// "Tasks": a node that dies).
	TaskLease = 15 * time.Second
	// TaskWriteMargin is how long before the lease last stored the
	// running node stops writing a task: a renewal or an end that
	// lands after it could turn a task a reader saw failed (its lease
	// over) back into working or completed (storeTask).
	TaskWriteMargin = time.Second
)

// taskEndRetry is the first wait between tries of a task's end the
// store refused (finish); each next wait doubles, up to taskEndRetryMax.
const (
	taskEndRetry    = 100 * time.Millisecond
	taskEndRetryMax = 2 * time.Second
)

// errLeaseOver is storeTask's refusal to write a task whose lease, as
// last stored, ends within TaskWriteMargin.
var errLeaseOver = errors.New("the task's lease as last stored ends within " + TaskWriteMargin.String() + ": readers may count it failed")

// JSON-RPC error codes of the extension (SEP-2575, SEP-2243).
const (
	codeMissingCapability = -32021
	codeHeaderMismatch    = -32020
	codeInvalidParams     = -32602
	codeInternal          = -32603
)

// tasksDeclared reports whether a request's _meta declares the tasks
// extension among the client's capabilities (SEP-2575 per-request
// clientCapabilities): its value an object (its settings), as a
// capability is declared; false, null or any other value declares
// nothing.
func tasksDeclared(meta map[string]any) bool {
	caps, _ := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[TasksExtension].(map[string]any)
	return ok
}

// capabilitiesShape says what is wrong with the shape of a request
// _meta's client capabilities as far as tasksDeclared reads them (the
// capabilities, their extensions, the tasks extension's entry: each an
// object when present and not null), "" when nothing is: a client
// that sent the extension in another shape (true, false, an array) is
// told so, not that it did not declare it. null reads as absent.
func capabilitiesShape(meta map[string]any) string {
	key := "_meta[\"" + mcp.MetaKeyClientCapabilities + "\"]"
	raw, ok := meta[mcp.MetaKeyClientCapabilities]
	if !ok || raw == nil {
		return ""
	}
	caps, ok := raw.(map[string]any)
	if !ok {
		return key + " must be an object (ClientCapabilities)"
	}
	raw, ok = caps["extensions"]
	if !ok || raw == nil {
		return ""
	}
	ext, ok := raw.(map[string]any)
	if !ok {
		return key + ".extensions must be an object keyed by extension name, such as {\"" + TasksExtension + "\": {}}"
	}
	if raw, ok = ext[TasksExtension]; ok && raw != nil {
		if _, ok = raw.(map[string]any); !ok {
			return key + ".extensions[\"" + TasksExtension + "\"] must be an object ({} declares the extension)"
		}
	}
	return ""
}

// newTaskID is 128 random bits, hex.
func newTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// taskCandidate reports whether body is one tools/call message whose
// client declared the tasks extension, so that its answer may become a
// CreateTaskResult (the door buffers the SDK's answer then).
func (d *Door) taskCandidate(body []byte) bool {
	if d.cfg.TaskAfter <= 0 || !bytes.Contains(body, []byte(TasksExtension)) || !bytes.Contains(body, []byte("tools/call")) {
		return false
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	return decodeAsSDK(body, &msg) == nil && msg.Method == "tools/call" && tasksDeclared(msg.Params.Meta)
}

// createdTask is the CreateTaskResult a call became.
type createdTask struct{ rec store.Task }

// runAsTask serves in for a call of t that may become a task: it waits
// up to task_after for the engine's answer and returns it (the handler
// makes it the synchronous result, as always); past it, the task is
// stored (working) before its placeholder result is returned (taskWriter
// makes the answer the CreateTaskResult), and the call goes on here, its
// answer written to the task when it comes. A cancel request (through
// any node) stops the recipe's plan between steps (recipes.WithStop),
// and so does the lease's end: a node paused, or cut off from its
// store, past the lease it last stored starts no further step of a task
// every reader counts failed (recipes.WithStopCheck: leaseOver, its
// time moved with each renewal).
// When the task cannot be stored (the store refuses it, or the memory
// store holds its most) the call waits on as a synchronous one: its
// answer within the door's timeout, else the call-timeout tool error
// (keyed: the call carries an Idempotency-Key).
func (d *Door) runAsTask(ctx context.Context, rq *mcpRequest, t *mcpTool, req *mcp.CallToolRequest, in *agtp.Request, keyed bool) (*agtp.Response, *mcp.CallToolResult) {
	stop := make(chan struct{})
	var actUntil atomic.Int64 // 0 until the task is stored; then the lease last stored, less TaskWriteMargin (Unix ns)
	var polled atomic.Int64   // when the task's last poll was answered (Unix ns)
	in.Context = recipes.WithStopCheck(recipes.WithStop(context.WithoutCancel(in.Context), stop),
		func() bool { return leaseOver(&polled, &actUntil, stop) })
	done := make(chan *agtp.Response, 1)
	workers.Go(func() { // a reused goroutine, as serveWithin's (internal/workers)
		defer func() {
			if p := recover(); p != nil {
				recovered.Log(d.e.Logger(), "panic in an MCP task", p, zap.String("target", in.Target))
				done <- internalErrorResponse()
			}
		}()
		done <- d.e.Serve(in.Context, in)
	})
	start := time.Now()
	timer := time.NewTimer(time.Duration(d.cfg.TaskAfter))
	defer timer.Stop()
	select {
	case resp := <-done:
		return resp, nil
	case <-timer.C:
	}
	now := time.Now().UTC()
	rec := store.Task{ID: newTaskID(), AgentID: rq.agent.ID, OwnerID: rq.person(), NodeID: d.e.NodeID(), Tool: t.name, Keyed: keyed, Status: TaskWorking,
		StatusMessage: "the recipe is running", CreatedAt: now, UpdatedAt: now, LeaseUntil: now.Add(TaskLease)}
	tasks := d.e.Tasks()
	if err := tasks.Put(context.WithoutCancel(ctx), rec, TaskTTL); err != nil {
		// Not durably created: no task is answered. The call waits on
		// as a synchronous one, up to the door's timeout, then answers
		// as one that outlived it.
		d.e.Logger().Warn("an MCP task could not be stored; the call waits for its answer as a synchronous one", zap.Error(err))
		timer.Reset(d.timeout() - time.Since(start)) // the refused Put's own wait counted
		select {
		case resp := <-done:
			return resp, nil
		case <-timer.C:
		}
		go func() { <-done }()
		rq.answered("", agtp.CallTimeout.Token)
		return nil, d.timedOut(t, keyed, req)
	}
	rq.mu.Lock()
	rq.task = &createdTask{rec: rec}
	rq.mu.Unlock()
	polled.Store(time.Now().UnixNano())
	actUntil.Store(rec.LeaseUntil.Add(-TaskWriteMargin).UnixNano())
	running.Add(1)
	go func() {
		defer running.Done()
		d.follow(rq, t, req, in.Target, rec, stop, &actUntil, &polled, done)
	}()
	return nil, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "task " + rec.ID}}}
}

// running counts the tasks whose call still runs in this process,
// across config reloads (a task outlives the door that made it).
var running sync.WaitGroup

// WaitTasks waits, at most max, for the calls of this process's running
// tasks to end and their ends to be stored; it reports whether they
// all did. The handler calls it when the process exits (a graceful
// stop), before it closes the engine and the store, so a rolling
// restart ends a task as it would have ended rather than cutting its
// step and leaving it to its lease (docs/agent-guide-mcp.md "Tasks").
// A reload does not wait: the process, and the task, go on.
func WaitTasks(max time.Duration) bool {
	ended := make(chan struct{})
	go func() {
		running.Wait()
		close(ended)
	}()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-ended:
		return true
	case <-t.C:
		return false
	}
}

// follow runs beside a task's call on the node that accepted it: it
// reads the store's poll of the task every TaskPollInterval (d.polls:
// one poll of every task the door runs) for a cancel request (closing
// stop) and for the task's record (one the store lost is written again
// at once, logged at INFO), renews the lease, and writes the answer
// into the task when it comes.
// Every write is held to the lease last stored (storeTask): once the
// store has refused renewals until that lease is about to end, the
// task is left to read failed and nothing more is written. A panic in
// it (a defect: in the task store, or in making the answer a tool
// result) is recovered and logged at ERROR ("panic following an MCP
// task", with its id) instead of ending the process; the task is then
// left as last stored, working, and reads failed once its lease ends,
// as when its end cannot be stored (TestPanicInTaskFinish).
func (d *Door) follow(rq *mcpRequest, t *mcpTool, req *mcp.CallToolRequest, target string, rec store.Task, stop chan struct{}, actUntil, polled *atomic.Int64, done <-chan *agtp.Response) {
	defer recovered.Guard(d.e.Logger(), "panic following an MCP task; it is left to its lease and reads failed after it",
		zap.String("task_id", rec.ID), zap.String("agent_id", rec.AgentID), zap.String("tool", rec.Tool))
	ctx := context.Background()
	polls, unwatch := d.polls.watch(d.e.Tasks(), d.e.Logger(), rec.ID)
	defer unwatch()
	// The renewal keeps its own clock: a poll the store is slow to
	// answer (a stalled Cluster node, a slow link) must not hold it back.
	tick := time.NewTicker(TaskPollInterval)
	defer tick.Stop()
	renewed := time.Now()
	lease := rec.LeaseUntil // as last stored: readers count the task failed after it
	var once sync.Once
	cancelled := false
	renew := func(lost bool) {
		if time.Since(renewed) < TaskLease/3 {
			return
		}
		now := time.Now().UTC()
		rec.UpdatedAt, rec.LeaseUntil = now, now.Add(TaskLease)
		if err := d.storeTask(ctx, rec, lease); err == nil {
			renewed, lease = time.Now(), rec.LeaseUntil
			actUntil.Store(lease.Add(-TaskWriteMargin).UnixNano())
			if lost {
				d.e.Logger().Info("an MCP task the store no longer held was written again",
					zap.String("task_id", rec.ID), zap.String("agent_id", rec.AgentID), zap.String("tool", rec.Tool))
			}
		}
	}
	for {
		select {
		case resp := <-done:
			d.finish(ctx, rq, t, req, target, rec, lease, resp, cancelled)
			return
		case <-tick.C:
			renew(false)
		case r := <-polls:
			if r.Err != nil {
				continue // not known this tick (the store, or its node holding the task, did not answer)
			}
			if r.CancelRequested && !cancelled {
				cancelled = true
				once.Do(func() { close(stop) })
				rec.StatusMessage = "cancel requested: the steps not started will not run; those running finish"
				renewed = time.Time{} // written at once
			}
			if !r.Stored {
				// The store lost the task (a Redis restarted without its
				// data): readers get "unknown task" until it is written
				// again, so it is, at once, not at the next renewal.
				renewed = time.Time{}
			}
			polled.Store(time.Now().UnixNano()) // after stop is closed: leaseOver's caller then sees it
			renew(!r.Stored)
		}
	}
}

// Fresh polls: the plan of a task starts a step only after a poll of
// its cancel request answered within freshPoll, waiting at most
// freshPollWait for one (leaseOver).
const (
	freshPoll     = 2 * TaskPollInterval
	freshPollWait = 2 * time.Second
)

// leaseOver is a task's plan's check before it starts steps
// (recipes.WithStopCheck): once the call is a task (actUntil set), it
// first waits, while the task's last answered poll (polled) is older
// than freshPoll (the node was paused, or its link to the store lost,
// or polls are slow), for a fresh one, for stop to close (a cancel
// request: the plan's WithStop then stops it) or for actUntil to pass,
// at most freshPollWait; then it reports whether actUntil has passed.
// So a node that comes back from a pause sees a cancel request made
// meanwhile before it starts the next step (helper-125's finding), and
// one paused or cut off past the lease it last stored starts none
// (helper-123's); a store that does not answer delays each step by at
// most freshPollWait (a cancel made then may be missed; the lease still
// stops the plan).
func leaseOver(polled, actUntil *atomic.Int64, stop <-chan struct{}) bool {
	if actUntil.Load() == 0 {
		return false // not a task (yet): nothing polls, no lease
	}
	deadline := time.Now().Add(freshPollWait)
	for time.Since(time.Unix(0, polled.Load())) > freshPoll && time.Now().Before(deadline) && time.Now().UnixNano() <= actUntil.Load() {
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-stop:
			t.Stop()
			return false // stopped by WithStop's channel
		case <-t.C:
		}
	}
	return time.Now().UnixNano() > actUntil.Load()
}

// storeTask writes rec unless the lease last stored (lease) ends within
// TaskWriteMargin (errLeaseOver), waiting at most until that point; the
// store writes it only if it gets there by then, by its own clock, and
// the task as stored is still working (store.Tasks.Update, which
// otherwise answers store.ErrTaskLate): a reader past the lease reads
// the task failed, and a write landing after that, however long a
// stalled store or network path held it, must not undo that terminal
// state. The margin covers the clocks' disagreement.
func (d *Door) storeTask(ctx context.Context, rec store.Task, lease time.Time) error {
	last := lease.Add(-TaskWriteMargin)
	if !time.Now().Before(last) {
		return errLeaseOver
	}
	ctx, cancel := context.WithDeadline(ctx, last)
	defer cancel()
	return d.e.Tasks().Update(ctx, rec, TaskTTL, last, TaskWriteMargin)
}

// finish writes a task's end: completed with the tool result (a tool
// error included, isError), cancelled when a cancel request stopped the
// plan before every step ran (the steps that ran are named), failed
// when no tool result could be made. A write the store does not take (a
// Redis stall or restart) is tried again, after 100 ms and then twice
// as long each time up to 2 s, while the lease last stored (lease)
// allows (storeTask); the record is written whole, so a store
// that lost the task while it ran (a restart without persistence)
// holds it again. The answer is in this process's memory meanwhile.
func (d *Door) finish(ctx context.Context, rq *mcpRequest, t *mcpTool, req *mcp.CallToolRequest, target string, rec store.Task, lease time.Time, resp *agtp.Response, cancelled bool) {
	if h := testHookTaskFinish.Load(); h != nil {
		(*h)()
	}
	rq.answered(resp.RequestID, resp.Reason)
	now := time.Now().UTC()
	rec.UpdatedAt, rec.LeaseUntil = now, time.Time{}
	steps, stoppedPlan := planSteps(resp.Body)
	rec.Steps = steps
	res, err := d.result(t, rq, req, target, resp)
	switch {
	case err != nil:
		rec.Status, rec.StatusMessage = TaskFailed, "the call's answer could not be made a tool result"
		rec.Error, _ = json.Marshal(map[string]any{"code": codeInternal, "message": err.Error()})
	case cancelled && stoppedPlan:
		rec.Status, rec.StatusMessage = TaskCancelled, "cancelled: "+stepSentence(steps)
		rec.Result, _ = json.Marshal(res)
	default:
		rec.Status, rec.StatusMessage = TaskCompleted, "completed"
		if res.IsError {
			rec.StatusMessage = "completed with a tool error"
		}
		rec.Result, _ = json.Marshal(res)
	}
	d.storeEnd(ctx, rec, lease)
}

// storeEnd writes a task's end rec (finish), trying again while the
// store does not take it and the lease last stored allows (a write the
// store judged late, store.ErrTaskLate, is not tried again); it reports
// whether the end was stored. Each refusal is logged at DEBUG, the last
// (the task left to read failed) at WARN.
func (d *Door) storeEnd(ctx context.Context, rec store.Task, lease time.Time) bool {
	wait := taskEndRetry
	for tries := 1; ; tries++ {
		err := d.storeTask(ctx, rec, lease)
		if err == nil {
			if tries > 1 {
				d.e.Logger().Info("an MCP task's end was stored after the store refused it", zap.String("task_id", rec.ID), zap.Int("tries", tries))
			}
			return true
		}
		if errors.Is(err, errLeaseOver) || errors.Is(err, store.ErrTaskLate) || !time.Now().Add(wait).Before(lease.Add(-TaskWriteMargin)) {
			d.e.Logger().Warn("an MCP task's end could not be stored before its lease ends; it reads failed",
				zap.String("task_id", rec.ID), zap.Int("tries", tries), zap.Error(err))
			return false
		}
		d.e.Logger().Debug("an MCP task's end was not stored; trying again", zap.String("task_id", rec.ID), zap.Duration("after", wait), zap.Error(err))
		time.Sleep(wait)
		wait = min(2*wait, taskEndRetryMax)
	}
}

// testHookTaskFinish, set by tests only (nil otherwise), runs as a
// task's end is written (finish): a fault injected into follow.
var testHookTaskFinish atomic.Pointer[func()]

// taskStep is one recipe step's state as a task names it.
type taskStep struct {
	Name   string `json:"name"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	State  string `json:"state"`
}

// planDetails are the members of a composition_failed details object
// a task reads.
type planDetails struct {
	Steps      []taskStep `json:"steps"`
	Underlying string     `json:"underlying"`
}

// planSteps are the step states of a recipe's composition_failed
// answer (error.details.steps, details.steps or steps) as JSON, and whether
// the plan was stopped (recipes.StopCode); nil otherwise.
func planSteps(body []byte) ([]byte, bool) {
	var b struct {
		Steps      []taskStep  `json:"steps"`
		Underlying string      `json:"underlying"`
		Details    planDetails `json:"details"`
		Error      struct {
			Details planDetails `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil {
		return nil, false
	}
	steps, under := b.Steps, b.Underlying
	for _, d := range []planDetails{b.Error.Details, b.Details} {
		if steps == nil {
			steps, under = d.Steps, d.Underlying
		}
	}
	if steps == nil {
		return nil, false
	}
	raw, _ := json.Marshal(steps)
	return raw, under == recipes.StopCode
}

// stepSentence names which steps ran and which did not start.
func stepSentence(raw []byte) string {
	var steps []taskStep
	_ = json.Unmarshal(raw, &steps)
	var ran, not []string
	for _, s := range steps {
		if s.State == recipes.StepNotStarted {
			not = append(not, s.Name)
		} else {
			ran = append(ran, s.Name+" ("+s.State+")")
		}
	}
	out := "steps run: " + join(ran) + "; steps not started: " + join(not)
	return out
}

func join(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	var b bytes.Buffer
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(x)
	}
	return b.String()
}

// tasksParams are a tasks method's params, as the SDK decodes them.
type tasksParams struct {
	mcp.ParamsBase // _meta: the client's capabilities
	// TaskID is kept raw so that a missing or non-string taskId is
	// answered -32602 naming params.taskId.
	TaskID json.RawMessage `json:"taskId"`
}

// taskID is params.taskId when it is a non-empty JSON string.
func (p *tasksParams) taskID() (string, bool) {
	var id string
	if p == nil || json.Unmarshal(p.TaskID, &id) != nil || id == "" {
		return "", false
	}
	return id, true
}

// tasksResult is a tasks method's result: its members, with the _meta
// the SDK adds to every result (at 2026-07-28, serverInfo) merged into
// theirs when it is encoded. Its members always encode: the only ones
// that could fail, a task's stored JSON, are checked first (validJSON).
type tasksResult struct {
	mcp.ResultBase
	members map[string]any
}

// MarshalJSON writes the result's members, with the SDK's _meta keys
// added to the members' own _meta (theirs win).
func (r *tasksResult) MarshalJSON() ([]byte, error) {
	out := r.members
	if len(r.Meta) > 0 {
		out = maps.Clone(r.members)
		own, _ := out["_meta"].(map[string]any)
		meta := maps.Clone(r.Meta)
		maps.Copy(meta, own)
		out["_meta"] = meta
	}
	return json.Marshal(out)
}

// validJSON reports whether each non-empty raw is JSON: a task's stored
// result, error and steps, which tasks/get writes as they are (the SDK
// writes no answer at all for a result that does not encode).
func validJSON(raws ...[]byte) bool {
	for _, raw := range raws {
		if len(raw) > 0 && !json.Valid(raw) {
			return false
		}
	}
	return true
}

// taskRecordInvalid is the -32603 task-record-invalid answer to a
// tasks method whose task's stored record cannot be read (why: err), a
// record this door did not write, which no retry mends; its ERROR line
// goes through the agent's log budget (a client polls tasks/get).
func (d *Door) taskRecordInvalid(rq *mcpRequest, id string, err error) error {
	if l := d.e.AgentLog(rq.agent.ID, "task-record-invalid"); l != nil {
		l.Error("an MCP task's stored record cannot be read", zap.String("task_id", id), zap.Error(err))
	}
	return tasksError(rq, "task-record-invalid", codeInternal, "task-record-invalid: the task's stored record cannot be read", nil)
}

// tasksMethods are the extension's methods the door serves; the
// removed tasks/result and tasks/list stay unknown (-32601).
var tasksMethods = []string{"tasks/get", "tasks/update", "tasks/cancel"}

// addTasksMethods registers the tasks methods on s as SDK custom
// methods, so that they meet every transport and message rule the SDK
// applies to the methods it serves itself (HTTP method, Content-Type,
// Accept, protocol versions, the 2026-07-28 _meta triple and Mcp-Method
// header, batches), and their errors the HTTP statuses SEP-2575 gives
// them (2026-07-28: -32602 and -32021 are 400). An SDK that one day
// serves these methods itself refuses the registration: it is logged,
// and the SDK's own methods answer.
func (d *Door) addTasksMethods(s *mcp.Server) {
	for _, method := range tasksMethods {
		err := mcp.AddReceivingCustomMethod(s, method, func(ctx context.Context, _ *mcp.ServerSession, p *tasksParams) (*tasksResult, error) {
			return d.serveTasks(ctx, method, p)
		})
		if err != nil {
			d.e.Logger().Error("MCP door: the go-sdk refused the tasks extension's method", zap.String("method", method), zap.Error(err))
		}
	}
}

// tasksError notes reason for the access log and returns the JSON-RPC
// error (code, message, data when not nil) the caller is answered.
func tasksError(rq *mcpRequest, reason string, code int64, message string, data any) error {
	rq.answered("", reason)
	e := &jsonrpc.Error{Code: code, Message: message}
	if data != nil {
		e.Data, _ = json.Marshal(data)
	}
	return e
}

// testHookServeTasks, set by tests only, runs as serveTasks begins: a
// fault injected into a tasks method.
var testHookServeTasks atomic.Pointer[func()]

// serveTasks answers one tasks/get, tasks/update or tasks/cancel (method)
// with params p (nil when the message has none) from the caller the
// door identified (in ctx).
func (d *Door) serveTasks(ctx context.Context, method string, p *tasksParams) (*tasksResult, error) {
	if h := testHookServeTasks.Load(); h != nil {
		(*h)()
	}
	rq, _ := ctx.Value(mcpRequestKey{}).(*mcpRequest)
	if rq == nil {
		return nil, &jsonrpc.Error{Code: codeInternal, Message: "the request did not come through the MCP door"}
	}
	id, valid := p.taskID()
	if name := rq.header.Get("Mcp-Name"); name != "" && rq.header.Get("Mcp-Protocol-Version") >= "2026-07-28" && (!valid || name != id) {
		// The standard headers' rule (2026-07-28, where the SDK takes
		// no batch), as the SDK holds tools/call's Mcp-Name to its
		// params.name before the method reads the message: a 400.
		rq.answerStatus(http.StatusBadRequest)
		return nil, tasksError(rq, "header-mismatch", codeHeaderMismatch, "the Mcp-Name header does not match params.taskId", nil)
	}
	var meta map[string]any
	if p != nil {
		meta = p.Meta
	}
	if why := capabilitiesShape(meta); why != "" {
		return nil, tasksError(rq, "invalid-params", codeInvalidParams, "invalid params: "+method+": "+why, nil)
	}
	if !tasksDeclared(meta) {
		return nil, tasksError(rq, "missing-capability", codeMissingCapability,
			method+" needs the "+TasksExtension+" extension among the client's capabilities (_meta "+mcp.MetaKeyClientCapabilities+".extensions)",
			map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	}
	if !valid {
		return nil, tasksError(rq, "invalid-params", codeInvalidParams, method+": params.taskId is required, a non-empty string (the taskId of the CreateTaskResult)", nil)
	}
	rec, ok, err := d.e.Tasks().Get(ctx, id)
	if err != nil && !errors.Is(err, store.ErrUnavailable) {
		// The store answered with a record that does not decode: a
		// record this door did not write; a retry reads the same.
		return nil, d.taskRecordInvalid(rq, id, err)
	}
	if err != nil {
		return nil, tasksError(rq, agtp.StoreUnavailable.Token, codeInternal, "store-unavailable: the task store did not answer; retry", nil)
	}
	if !ok || rec.AgentID != rq.agent.ID || rec.OwnerID != rq.person() {
		return nil, tasksError(rq, "unknown-task", codeInvalidParams, "unknown taskId: no task of this agent (and person) has that id (it may have expired)", nil)
	}
	switch method {
	case "tasks/cancel":
		if rec.Status == TaskWorking {
			if err := d.e.Tasks().RequestCancel(ctx, rec.ID, TaskTTL); err != nil {
				return nil, tasksError(rq, agtp.StoreUnavailable.Token, codeInternal, "store-unavailable: the cancel request was not stored; retry", nil)
			}
		}
		return &tasksResult{members: map[string]any{"resultType": "complete"}}, nil
	case "tasks/update":
		// The door's tasks never ask for input: responses are ignored.
		return &tasksResult{members: map[string]any{"resultType": "complete"}}, nil
	default:
		if !validJSON(rec.Result, rec.Error, rec.Steps) {
			// A stored result, error or step list that is not JSON: a
			// record this door did not write.
			return nil, d.taskRecordInvalid(rq, rec.ID, errors.New("its result, error or steps are not JSON"))
		}
		return &tasksResult{members: detailedTask(rec, time.Now())}, nil
	}
}

// taskEnvelope is the Task members of rec (SEP-2663 Task).
func taskEnvelope(rec store.Task) map[string]any {
	return map[string]any{"taskId": rec.ID, "status": rec.Status, "statusMessage": rec.StatusMessage,
		"createdAt": rec.CreatedAt.UTC().Format(time.RFC3339Nano), "lastUpdatedAt": rec.UpdatedAt.UTC().Format(time.RFC3339Nano),
		"ttlMs": TaskTTL.Milliseconds(), "pollIntervalMs": TaskPollInterval.Milliseconds()}
}

// detailedTask is tasks/get's answer (DetailedTask): the envelope, the
// result once completed or cancelled, the error once failed, and the
// recipe's step states in _meta. A working task whose lease passed is
// failed: the node running it stopped.
func detailedTask(rec store.Task, now time.Time) map[string]any {
	if rec.Status == TaskWorking && !rec.LeaseUntil.IsZero() && now.After(rec.LeaseUntil) {
		rec.Status = TaskFailed
		rec.StatusMessage = "the gateway node running this task (" + rec.NodeID + ") stopped renewing it: its outcome is unknown. "
		if rec.Keyed {
			rec.StatusMessage += "A repeat of the call with the same Idempotency-Key tells once the key's lease, which covers the call's whole run, has ended: until then it answers idempotency-key-in-flight with Retry-After"
		} else {
			rec.StatusMessage += "The call carried no Idempotency-Key, so a repeat would run it again: check its effect (INSPECT target=audit for this agent's records, or the service itself) before calling again"
		}
		rec.Error, _ = json.Marshal(map[string]any{"code": codeInternal, "message": "task-lease-expired: " + rec.StatusMessage})
	}
	out := taskEnvelope(rec)
	out["resultType"] = "complete"
	switch rec.Status {
	case TaskCompleted, TaskCancelled:
		if len(rec.Result) > 0 && rec.Status == TaskCompleted {
			out["result"] = json.RawMessage(rec.Result)
		}
	case TaskFailed:
		if len(rec.Error) > 0 {
			out["error"] = json.RawMessage(rec.Error)
		}
	}
	meta := map[string]any{MCPMetaPrefix + "task-node": rec.NodeID}
	if len(rec.Steps) > 0 {
		meta[MCPMetaPrefix+"steps"] = json.RawMessage(rec.Steps)
	}
	if rec.Status == TaskCancelled && len(rec.Result) > 0 {
		// What the steps that ran answered (the plan's partial answer).
		meta[MCPMetaPrefix+"partial-result"] = json.RawMessage(rec.Result)
	}
	out["_meta"] = meta
	return out
}

// taskWriter buffers the SDK's answer to a tools/call that may become a
// task; flush writes it, or, when the call became a task, the same
// JSON-RPC response with its result replaced by the CreateTaskResult.
type taskWriter struct {
	hd     http.Header
	status int
	buf    bytes.Buffer
}

func (w *taskWriter) Header() http.Header         { return w.hd }
func (w *taskWriter) WriteHeader(code int)        { w.status = code }
func (w *taskWriter) Write(b []byte) (int, error) { return w.buf.Write(b) }

// flush writes the buffered answer to w.
func (tw *taskWriter) flush(w http.ResponseWriter, ct *createdTask) {
	body := tw.buf.Bytes()
	if ct != nil {
		var msg map[string]json.RawMessage
		if json.Unmarshal(body, &msg) == nil && msg["result"] != nil {
			res := taskEnvelope(ct.rec)
			res["resultType"] = "task"
			// The serverInfo the SDK put on the tool result (2026-07-28)
			// stays on the result that replaces it, as on every result;
			// the rest of that _meta was the call's, not the task's.
			var was struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			if json.Unmarshal(msg["result"], &was) == nil && was.Meta[mcp.MetaKeyServerInfo] != nil {
				res["_meta"] = map[string]json.RawMessage{mcp.MetaKeyServerInfo: was.Meta[mcp.MetaKeyServerInfo]}
			}
			msg["result"], _ = json.Marshal(res)
			body, _ = json.Marshal(msg)
		}
	}
	hd := w.Header()
	for k, v := range tw.hd {
		hd[k] = v
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(cmpStatus(tw.status))
	_, _ = w.Write(body)
}

func cmpStatus(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}
