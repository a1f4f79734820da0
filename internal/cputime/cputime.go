// Package cputime reads the process's CPU time, for benchmarks that
// report CPU beside wall time on a shared machine.
package cputime

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Process returns the CPU time the process has used so far, user and
// system, every thread's (getrusage RUSAGE_SELF); 0 when it cannot be
// read.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Collection returns the mean CPU time of n forced garbage collections
// (runtime.GC: a full mark, by every P's workers, and sweep), after
// one more that settles the heap first: what a collection of the
// current live heap costs. n < 1 counts as 1.
func Collection(n int) time.Duration {
	n = max(n, 1)
	runtime.GC()
	start := Process()
	for range n {
		runtime.GC()
	}
	return (Process() - start) / time.Duration(n)
}

// BenchmarkCollection runs a benchmark of what a collection pays for
// the live state fill builds: it measures a collection before fill,
// keeps what fill returns live, and reports, as gc-cpu-ns/op, the CPU
// of one collection (Collection(5) per iteration) minus that first
// measure.
func BenchmarkCollection(b *testing.B, fill func() any) {
	empty := Collection(5)
	live := fill()
	b.ResetTimer()
	var total time.Duration
	for b.Loop() {
		total += Collection(5) - empty
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "gc-cpu-ns/op")
	runtime.KeepAlive(live)
}
