// Package workers runs the gateway's per-request goroutines on reused
// ones: an MCP tool call the door runs beside its own wait (so that it
// can answer at its timeout while the call goes on), and a recipe's
// steps that run in parallel.
//
// Why: such a goroutine runs the engine or an upstream HTTP call, whose
// stack is tens of KiB deep, and a new goroutine starts with a small
// stack that the runtime grows by copying it, once per doubling. On an
// MCP tools/call that copying was about a tenth of the door's CPU
// (BenchmarkMCPToolCall/mcp-20251125: 104 µs of CPU per call with a new
// goroutine, 84 µs on a reused one; docs/doors.md "MCP door"). A reused
// goroutine keeps the stack it grew, until the garbage collector
// shrinks an idle one.
//
// The pool is github.com/panjf2000/ants: one per process, without a
// bound (Go never waits: a call finds an idle goroutine or gets a new
// one, as the go statement would), and a goroutine idle for IdleFor
// ends.
//
// What differs from a go statement:
//   - profiler labels (runtime/pprof.Do): a reused goroutine keeps the
//     labels of the call that started it, not those of the call it
//     runs now (nothing in the gateway sets labels);
//   - importing ants starts its default pool's two background
//     goroutines (ants' init; they wake every second and half second),
//     and the first Go starts this pool's two.
package workers

import (
	"sync"
	"time"

	"github.com/panjf2000/ants/v2"
)

// IdleFor is how long a reused goroutine waits for more work before it
// ends (ants' expiry; its scavenger runs at that period, so an idle
// one ends within twice that).
const IdleFor = time.Second

var pool = sync.OnceValue(func() *ants.Pool {
	p, err := ants.NewPool(-1, ants.WithExpiryDuration(IdleFor), ants.WithPanicHandler(rethrow))
	if err != nil {
		return nil
	}
	return p
})

// rethrow ends the process with a panic f did not recover, as a
// goroutine of its own would have (ants would log it and go on).
func rethrow(v any) { panic(v) }

// Go runs f on a reused goroutine, or on a new one when none is idle
// (or the pool cannot be had). f must recover its own panics: one it
// lets through ends the process, as it would from a go statement.
func Go(f func()) {
	if p := pool(); p != nil && p.Submit(f) == nil {
		return
	}
	go f()
}
