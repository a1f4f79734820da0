// Package recovered handles a panic (a defect) where nothing above
// could recover it and it would end the process: Into turns it into the
// function's error (one run for several callers: singleflight's DoChan
// re-panics in a goroutine of its own), Log writes what a recover site
// caught (a door's connection or call, a goroutine the gateway starts),
// IntoLog does both, once, where the panic happened; Guard and Go
// recover and log a background goroutine's panic; Throttle (its
// IntoLog) bounds the lines of a loop a defect hits on every pass.
package recovered

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Panic is the error a recovered panic becomes: Value is what was
// panicked with, Stack the panicking goroutine's stack.
type Panic struct {
	Value any
	Stack []byte
}

// Error names the panic's value only (it may reach an explanation; the
// stack does not).
func (p *Panic) Error() string { return fmt.Sprintf("a panic in the gateway (a defect): %v", p.Value) }

// Into, deferred directly (defer recovered.Into(&err)), recovers a
// panic of the function and sets *err to a *Panic; without a panic it
// does nothing.
func Into(err *error) {
	if v := recover(); v != nil {
		*err = &Panic{Value: v, Stack: debug.Stack()}
	}
}

// IntoLog, deferred directly (defer recovered.IntoLog(&err, l, msg,
// fields...)), is Into that also logs the panic as Log does, where it
// happened: the callers that share the error (a singleflight fetch's
// waiters) each see only its value, so its stack is written once here.
// A nil err only logs.
func IntoLog(err *error, l *zap.Logger, msg string, fields ...zap.Field) {
	if v := recover(); v != nil {
		intoLog(nil, err, l, msg, v, fields)
	}
}

// intoLog sets *err (err not nil) to the *Panic of v and logs it
// through t (nil: always).
func intoLog(t *Throttle, err *error, l *zap.Logger, msg string, v any, fields []zap.Field) {
	stack := debug.Stack()
	if err != nil {
		*err = &Panic{Value: v, Stack: stack}
	}
	if t.allow(&fields) {
		logStack(l, msg, v, stack, fields)
	}
}

// logStack writes msg at ERROR with fields, the panic and stack.
func logStack(l *zap.Logger, msg string, v any, stack []byte, fields []zap.Field) {
	if l != nil {
		l.Error(msg, append(fields, zap.Any("panic", v), zap.ByteString("stack", stack))...)
	}
}

// Log writes msg at ERROR with fields, v (what recover returned) as
// field "panic" and the calling goroutine's stack as "stack": called
// from the deferred function that recovered, the stack still holds the
// panicking frames. A nil l logs nothing.
func Log(l *zap.Logger, msg string, v any, fields ...zap.Field) {
	if l == nil {
		return
	}
	logStack(l, msg, v, debug.Stack(), fields)
}

// Guard, deferred directly in a goroutine the gateway starts outside a
// request (defer recovered.Guard(logger, msg, fields...)), recovers a
// panic there, which would otherwise end the whole process, and logs it
// as Log does; without a panic it does nothing. The goroutine then
// ends: what it was doing is left as an error would have left it, and
// its other deferred calls still run.
func Guard(l *zap.Logger, msg string, fields ...zap.Field) {
	if v := recover(); v != nil {
		Log(l, msg, v, fields...)
	}
}

// Go runs fn in a goroutine of its own under Guard(l, msg, fields...).
func Go(l *zap.Logger, msg string, fn func(), fields ...zap.Field) {
	go func() {
		defer Guard(l, msg, fields...)
		fn()
	}()
}

// Throttle bounds the lines of a recover site that a defect can hit
// again and again (a background loop's every pass: a flusher, a health
// check, a writer's loop): the first panic is logged with its stack,
// then at most one line per Every, carrying the count of panics not
// logged since ("suppressed"). The zero value is ready, with Every 0
// (each panic logged); set Every before use. Safe for concurrent use.
type Throttle struct {
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// IntoLog is recovered.IntoLog with its line throttled by t: written
// unless a line of t was written less than t.Every ago, in which case
// the panic is only counted (a nil t writes every line; a nil err only
// logs). Deferred directly: defer t.IntoLog(&err, l, msg, fields...).
func (t *Throttle) IntoLog(err *error, l *zap.Logger, msg string, fields ...zap.Field) {
	if v := recover(); v != nil {
		intoLog(t, err, l, msg, v, fields)
	}
}

// allow reports whether a line may be written now (a nil t: always),
// counting the panic when not; when it may, the count of those not
// logged since the last line is appended to *fields as "suppressed".
func (t *Throttle) allow(fields *[]zap.Field) bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	now := time.Now()
	if !t.last.IsZero() && now.Sub(t.last) < t.Every {
		t.suppressed++
		t.mu.Unlock()
		return false
	}
	n := t.suppressed
	t.last, t.suppressed = now, 0
	t.mu.Unlock()
	if n > 0 {
		*fields = append(*fields, zap.Int("suppressed", n))
	}
	return true
}
