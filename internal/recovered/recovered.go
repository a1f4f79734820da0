// Package recovered turns a panic (a defect) in a function whose panic
// nothing above could recover into that function's error: one run for
// several callers (singleflight's DoChan re-panics in a goroutine of its
// own, which ends the process), or a goroutine the gateway starts.
package recovered

import (
	"fmt"
	"runtime/debug"
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
