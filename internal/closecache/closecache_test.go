package closecache

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

func newCache(t *testing.T) *Cache[string, int] {
	t.Helper()
	c, err := ristretto.NewCache(&ristretto.Config[string, int]{NumCounters: 1000, MaxCost: 100, BufferItems: 64})
	if err != nil {
		t.Fatal(err)
	}
	return New(c)
}

// TestCloseWhileUsed: caches closed while goroutines Set, Del and Get on
// them in tight loops harm none of them (with ristretto's Close called at
// once, this panics with "send on closed channel"); after Close, Load is
// nil and a call on it misses; the caches' goroutines stop after
// CloseDelay.
func TestCloseWhileUsed(t *testing.T) {
	before := runtime.NumGoroutine()
	const caches = 20
	hs := make([]*Cache[string, int], caches)
	for i := range hs {
		hs[i] = newCache(t)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, h := range hs {
		for range 2 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					h.Load().SetWithTTL("k", i, 1, time.Minute)
					h.Load().Get("k")
					h.Load().Del("k")
				}
			})
		}
	}
	time.Sleep(50 * time.Millisecond)
	for _, h := range hs {
		h.Close()
		h.Close() // twice: a no-op
	}
	time.Sleep(CloseDelay + 200*time.Millisecond)
	close(stop)
	wg.Wait()
	for _, h := range hs {
		if h.Load() != nil {
			t.Fatal("Load after Close is not nil")
		}
		if h.Load().Set("k", 1, 1) {
			t.Fatal("a closed cache kept a value")
		}
		if _, ok := h.Load().Get("k"); ok {
			t.Fatal("a closed cache hit")
		}
	}
	var grown int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if grown = runtime.NumGoroutine() - before; grown < caches || time.Now().After(deadline) {
			break
		}
	}
	if grown >= caches {
		t.Fatalf("%d goroutines more after %d caches closed", grown, caches)
	}
	var nilCache *Cache[string, int]
	nilCache.Close()
	if nilCache.Load() != nil {
		t.Fatal("a nil Cache loads a cache")
	}
}
