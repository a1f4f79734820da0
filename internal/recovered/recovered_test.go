package recovered

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sync/singleflight"
)

// TestIntoSingleflight: a panic in a singleflight.DoChan function,
// which the package re-panics in a goroutine of its own (ending the
// process), becomes the callers' error with Into.
func TestIntoSingleflight(t *testing.T) {
	var g singleflight.Group
	r := <-g.DoChan("k", func() (v any, err error) {
		defer Into(&err)
		panic("fetch defect")
	})
	var p *Panic
	if !errors.As(r.Err, &p) || p.Value != "fetch defect" || !strings.Contains(string(p.Stack), "TestIntoSingleflight") {
		t.Fatalf("DoChan's result %v, want a *Panic with the value and the stack", r.Err)
	}
	if msg := p.Error(); msg != "a panic in the gateway (a defect): fetch defect" {
		t.Fatalf("Error() = %q", msg)
	}
	var err error
	func() { defer Into(&err) }()
	if err != nil {
		t.Fatalf("no panic gave %v", err)
	}
}

// TestLog: the line carries the caller's fields, the panic value and
// the stack down to the panicking frame; a nil logger logs nothing.
func TestLog(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	func() {
		defer func() {
			if v := recover(); v != nil {
				Log(zap.New(core), "panic in a test", v, zap.String("where", "here"))
				Log(nil, "not logged", v)
			}
		}()
		panic("log defect")
	}()
	all := logs.All()
	if len(all) != 1 {
		t.Fatalf("%d lines, want 1: %v", len(all), all)
	}
	f := all[0].ContextMap()
	if all[0].Message != "panic in a test" || f["where"] != "here" || f["panic"] != "log defect" || !strings.Contains(f["stack"].(string), "TestLog") {
		t.Fatalf("line %q %v", all[0].Message, f)
	}
}

// TestGuard: a panic in a goroutine started with Go (Guard deferred)
// is logged with the caller's fields and the panicking frame's stack,
// and the process goes on; the goroutine's other deferred calls run.
func TestGuard(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	ended := make(chan struct{})
	Go(zap.New(core), "panic in a background test", func() {
		defer close(ended)
		panicInGuardTest()
	}, zap.String("key", "k1"))
	<-ended
	for i := 0; len(logs.All()) == 0 && i < 1000; i++ {
		time.Sleep(time.Millisecond) // Guard logs after the deferred close
	}
	all := logs.All()
	if len(all) != 1 {
		t.Fatalf("%d lines, want 1: %v", len(all), all)
	}
	f := all[0].ContextMap()
	if all[0].Message != "panic in a background test" || f["key"] != "k1" || f["panic"] != "guard defect" ||
		!strings.Contains(f["stack"].(string), "panicInGuardTest") {
		t.Fatalf("line %q %v", all[0].Message, f)
	}
	func() { defer Guard(zap.New(core), "not logged") }()
	if n := len(logs.All()); n != 1 {
		t.Fatalf("Guard without a panic logged: %d lines", n)
	}
}

func panicInGuardTest() { panic("guard defect") }

// TestIntoLog: as Into, and the panic logged once with its stack where
// it happened; a nil logger only sets the error.
func TestIntoLog(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	var g singleflight.Group
	r := <-g.DoChan("k", func() (v any, err error) {
		defer IntoLog(&err, zap.New(core), "fetch panicked", zap.String("fetch", "k"))
		panic("fetch defect")
	})
	var p *Panic
	if !errors.As(r.Err, &p) || p.Value != "fetch defect" {
		t.Fatalf("DoChan's result %v, want a *Panic with the value", r.Err)
	}
	all := logs.All()
	if len(all) != 1 || all[0].Message != "fetch panicked" {
		t.Fatalf("logged %+v, want one line", all)
	}
	f := all[0].ContextMap()
	if f["fetch"] != "k" || f["panic"] != "fetch defect" || !strings.Contains(f["stack"].(string), "TestIntoLog") {
		t.Fatalf("fields %v, want fetch, panic and a stack down to the panicking frame", f)
	}
	var err error
	func() {
		defer IntoLog(&err, nil, "not logged")
		panic("quiet")
	}()
	if !errors.As(err, &p) || p.Value != "quiet" {
		t.Fatalf("with a nil logger: %v", err)
	}
	func() { defer IntoLog(&err, zap.New(core), "no panic") }()
	if len(logs.All()) != 1 {
		t.Fatalf("no panic logged a line")
	}
}

// TestThrottle: the first panic is logged, the next ones within Every
// are only counted, and the first line after Every says how many were
// not logged; each panic becomes the error all the same, and a nil
// Throttle logs every one.
func TestThrottle(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	th := &Throttle{Every: 50 * time.Millisecond}
	panicThrough := func(th *Throttle, v any) (err error) {
		defer th.IntoLog(&err, zap.New(core), "loop panicked", zap.String("site", "test"))
		panic(v)
	}
	var p *Panic
	if err := panicThrough(th, "v1"); !errors.As(err, &p) || p.Value != "v1" || len(logs.All()) != 1 {
		t.Fatalf("the first panic: %v, %d lines, want it as the error and logged", err, len(logs.All()))
	}
	for range 10 {
		if err := panicThrough(th, "v2"); !errors.As(err, &p) || p.Value != "v2" {
			t.Fatalf("a panic within Every: %v, want it as the error", err)
		}
	}
	if n := len(logs.All()); n != 1 {
		t.Fatalf("%d lines after panics within Every, want 1", n)
	}
	time.Sleep(60 * time.Millisecond)
	_ = panicThrough(th, "v3")
	all := logs.All()
	if len(all) != 2 {
		t.Fatalf("%d lines, want 2", len(all))
	}
	if f := all[0].ContextMap(); f["panic"] != "v1" || f["suppressed"] != nil || f["site"] != "test" {
		t.Fatalf("first line %v", f)
	}
	if f := all[1].ContextMap(); f["panic"] != "v3" || f["suppressed"] != int64(10) || f["stack"] == nil || f["site"] != "test" {
		t.Fatalf("second line %v, want v3 with suppressed 10, the caller's fields and a stack", f)
	}
	_ = panicThrough(nil, "v4")
	_ = panicThrough(nil, "v5")
	if n := len(logs.All()); n != 4 {
		t.Fatalf("a nil Throttle wrote %d lines for 2 panics", n-2)
	}
	func() {
		defer th.IntoLog(nil, zap.New(core), "no panic")
	}()
	if n := len(logs.All()); n != 4 {
		t.Fatal("no panic logged a line")
	}
}
