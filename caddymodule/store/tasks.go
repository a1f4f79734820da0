package store

// The MCP task store's types: a task's record, the store that keeps it
// (Tasks) and what its running node polls (TaskPoll).

import (
	"context"
	"errors"
	"time"
)

// TaskStatusWorking is the status of a task whose call still runs: the
// only one Tasks.Update writes over.
const TaskStatusWorking = "working"

// ErrTaskLate is Tasks.Update's refusal: the write came after the time
// it was held to, or after the task ended; nothing was written.
var ErrTaskLate = errors.New("store: the task's write came after its lease, or after the task ended")

// Task is the state of one MCP task (the io.modelcontextprotocol/tasks
// extension, MCP 2026-07-28: docs/agent-guide-mcp.md "Tasks"): a tool
// call that answered with a task handle and runs on the node that
// accepted it. That node alone writes it (Tasks.Put); any node reads it.
type Task struct {
	// ID is the task id (unguessable: 128 random bits, hex).
	ID string `json:"id"`
	// AgentID is the Agent-ID whose call made it: only that agent reads
	// or cancels it.
	AgentID string `json:"agent_id"`
	// OwnerID is the person the call acted for when that is not the
	// agent's own owner (identity oauth: the token's sub), else "": only
	// that person reads or cancels it.
	OwnerID string `json:"owner_id,omitempty"`
	// NodeID names the node running it.
	NodeID string `json:"node_id"`
	// Tool is the called tool's name.
	Tool string `json:"tool"`
	// Keyed reports that the call carried an Idempotency-Key: a repeat
	// of it under that key runs nothing again (what a reader tells of a
	// task whose node stopped).
	Keyed bool `json:"keyed,omitempty"`
	// Status is working (TaskStatusWorking), completed, failed or
	// cancelled (the extension's names).
	Status string `json:"status"`
	// StatusMessage says what happened, for a human.
	StatusMessage string `json:"status_message,omitempty"`
	// CreatedAt and UpdatedAt are when it was made and last written.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// LeaseUntil is, while Status is working, when the running node's
	// lease ends: the node renews it while it runs the task; a reader
	// that finds it passed reports the task failed (the node stopped).
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Result is the tool result (MCP CallToolResult JSON) once completed.
	Result []byte `json:"result,omitempty"`
	// Error is the JSON-RPC error object ({code, message}) once failed.
	Error []byte `json:"error,omitempty"`
	// Steps are a recipe's per-step states once it ended (JSON array of
	// {name, method, path, state}): which steps ran.
	Steps []byte `json:"steps,omitempty"`
}

// Tasks keeps MCP tasks' state for a bounded time, by id, shared by
// every node of a store.
type Tasks interface {
	// Put stores t (replacing the record with its id), kept for ttl.
	Put(ctx context.Context, t Task, ttl time.Duration) error
	// Update stores t, kept for ttl, as the running node's renewal or
	// end of a task it created, judged on the store's own clock (Redis's
	// TIME; this host's time translated by the offset last measured):
	// only if the write takes place no later than notAfter, and, over a
	// task stored working, no later than margin before that record's
	// lease (readers count a working task failed once its lease has
	// passed, by their own clocks: margin covers their disagreement); a
	// task the store lost is written again. A working t whose lease is
	// not later than the stored one is a renewal arriving after a newer
	// one: nothing is written and Update returns nil. Otherwise, over an
	// ended task, late, or over a stored lease it cannot read, it writes
	// nothing and returns ErrTaskLate: a write landing after a reader
	// may have seen the task failed (held in a stalled store or a held
	// network path, or over a record restored from an older snapshot)
	// must not turn that terminal state into another, nor may a late
	// renewal overwrite an end.
	Update(ctx context.Context, t Task, ttl time.Duration, notAfter time.Time, margin time.Duration) error
	// Get returns the task with id, or false when unknown or expired.
	Get(ctx context.Context, id string) (Task, bool, error)
	// RequestCancel notes that task id is asked to stop, kept for ttl.
	// It is apart from the record, which the running node alone writes.
	RequestCancel(ctx context.Context, id string, ttl time.Duration) error
	// Poll is what a node reads of the tasks it runs (each
	// mcpdoor.TaskPollInterval, all of them at once): for each of ids,
	// in order, whether RequestCancel was called for it and whether the
	// store holds its record at all. One round trip on Redis however
	// many ids (a pipeline; on Cluster one per node holding them, in
	// parallel), at most MaxTaskPoll ids a call. A task whose state
	// could not be read has its TaskPoll's Err set, the others are
	// answered all the same (on Cluster a stalled node fails only the
	// tasks it holds, once ctx ends or its timeouts pass); the error is
	// for a call that could not be made (over MaxTaskPoll ids).
	Poll(ctx context.Context, ids []string) ([]TaskPoll, error)
}

// MaxTaskPoll bounds the ids of one Tasks.Poll (the pipeline of one
// round trip on Redis: two EXISTS each); a caller polls more in several
// calls.
const MaxTaskPoll = 1024

// TaskPoll is what Tasks.Poll read of one running task.
type TaskPoll struct {
	// CancelRequested reports that RequestCancel was called for the
	// task (and its request has not expired).
	CancelRequested bool
	// Stored reports that the store holds a record of the task. False
	// for a task its node wrote means the store lost it (a Redis
	// restarted without its data, flushed, or failed over to a replica
	// that missed the write): readers get "unknown task" until the
	// running node writes it again, which it then does at once.
	Stored bool
	// Err is set when the task's state could not be read (it wraps
	// ErrUnavailable); CancelRequested and Stored are then false and
	// mean nothing.
	Err error
}
