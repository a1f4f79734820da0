package records

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestLogPanicDoesNotWedge: a panic inside Append under the log's lock
// (a defect; here its clock) unlocks it on the way out: the next Append
// runs and is written, chained to the last record written. Before, the
// lock stayed held and every later record, and every gate request,
// waited on it for the life of the process.
func TestLogPanicDoesNotWedge(t *testing.T) {
	var armed atomic.Bool
	dir := t.TempDir()
	l, err := OpenLog(LogOptions{Dir: dir, Fsync: FsyncOff, Now: func() time.Time {
		if armed.CompareAndSwap(true, false) {
			panic("clock defect")
		}
		return time.Now()
	}})
	if err != nil {
		t.Fatal(err)
	}
	agent := "677812645a9fe530d9c0251df0296775b37b392ac32b2003ab5beba14490e4fa"
	rec := func() map[string]any {
		return map[string]any{"kind": "gate", "outcome": "refused", "requested": map[string]any{}, "granted": nil}
	}
	first, err := l.Append(agent, rec())
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	func() {
		defer func() {
			if p := recover(); p != "clock defect" {
				t.Fatalf("recovered %v, want the clock's panic", p)
			}
		}()
		_, _ = l.Append(agent, rec())
	}()
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(agent, rec())
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the Append after the panic: %v", err)
		}
	case <-time.After(10 * time.Second):
		// Not closed: Close would wait on the held lock too.
		t.Fatal("the Append after the panic is still blocked: the lock was left held")
	}
	defer l.Close()
	if head, ok := l.heads[agent]; !ok || head.seq != 2 {
		t.Fatalf("head %+v after the panic, want seq 2 chained to %s", head, first)
	}
}
