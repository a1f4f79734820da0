package workers

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// goroutineID is the id of the calling goroutine (runtime.Stack's
// first line: "goroutine N [running]:").
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(b, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// TestGoUnbounded: Go never waits for a goroutine to come free: 64
// calls that each wait for all the others all run. The calls are made
// from a goroutine of the test's, so that a Go that blocks fails the
// test at its deadline instead of hanging it.
func TestGoUnbounded(t *testing.T) {
	const n = 64
	var all sync.WaitGroup
	all.Add(n)
	done := make(chan struct{}, n)
	go func() {
		for range n {
			Go(func() {
				all.Done()
				all.Wait() // returns only once every call runs at once
				done <- struct{}{}
			})
		}
	}()
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("%d of %d calls ran within 10 s: Go waited for a goroutine to come free", i, n)
		}
	}
}

// TestGoReusesGoroutine: calls made one after another run on a
// goroutine that ran an earlier one (the point of the package: its
// stack is grown already), not each on a new one. Within 5 s, to bear
// a busy machine.
func TestGoReusesGoroutine(t *testing.T) {
	seen := map[string]bool{}
	ids := make(chan string, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		Go(func() { ids <- goroutineID() })
		id := <-ids
		if seen[id] {
			return
		}
		seen[id] = true
		time.Sleep(time.Millisecond) // the goroutine is back in the pool
	}
	t.Fatalf("%d calls one after another in 5 s ran on %d goroutines, none twice", len(seen), len(seen))
}

// TestIdleGoroutinesEnd: the goroutines a burst started end once idle
// for IdleFor (within twice that: the scavenger's period).
func TestIdleGoroutinesEnd(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(32)
	release := make(chan struct{})
	for range 32 {
		Go(func() { wg.Done(); <-release })
	}
	wg.Wait()
	if n := pool().Running(); n < 32 {
		t.Fatalf("%d goroutines running, want at least the 32 blocked calls", n)
	}
	close(release)
	deadline := time.Now().Add(2*IdleFor + 3*time.Second)
	for pool().Running() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still alive %s after they went idle", pool().Running(), 2*IdleFor+3*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUnrecoveredPanicEndsProcess: a panic f lets through ends the
// process, as from a go statement (ants alone would log it and go on).
// The test runs itself in a child process that panics so.
func TestUnrecoveredPanicEndsProcess(t *testing.T) {
	if os.Getenv("WORKERS_PANIC_CHILD") == "1" {
		Go(func() { panic("a defect in a worker") })
		time.Sleep(5 * time.Second)
		os.Exit(0) // not reached when the panic ends the process
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestUnrecoveredPanicEndsProcess$")
	cmd.Env = append(os.Environ(), "WORKERS_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child exited 0: the panic was swallowed\n%s", out)
	}
	if !strings.Contains(string(out), "a defect in a worker") {
		t.Fatalf("the child failed without the panic's value:\n%s", out)
	}
}
