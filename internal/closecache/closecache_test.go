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

// TestCloseWhileUsed: caches closed while goroutines Set, Del, Wait and
// Get on them in tight loops harm none of them (with ristretto's Close
// called under them, this panics with "send on closed channel"; with
// Close a second after detaching, the race detector found it unordered
// with such a send); after Close, Do passes nil and every call misses;
// the caches' goroutines stop.
func TestCloseWhileUsed(t *testing.T) {
	before := runtime.NumGoroutine()
	const caches = 6
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
					h.SetWithTTL("k", i, 1, time.Minute)
					h.Get("k")
					h.Del("k")
					if i%1024 == 0 {
						h.Wait()
					}
				}
			})
		}
	}
	time.Sleep(50 * time.Millisecond)
	for _, h := range hs {
		h.Close()
		h.Close() // twice: a no-op
	}
	time.Sleep(50 * time.Millisecond) // the calls go on against closed caches
	close(stop)
	wg.Wait()
	for _, h := range hs {
		h.Do(func(c *ristretto.Cache[string, int]) {
			if c != nil {
				t.Fatal("Do after Close passes a cache")
			}
		})
		if h.Set("k", 1, 1) || h.SetWithTTL("k", 1, 1, time.Minute) {
			t.Fatal("a closed cache kept a value")
		}
		if _, ok := h.Get("k"); ok {
			t.Fatal("a closed cache hit")
		}
		h.Del("k")
		h.Wait()
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
	nilCache.Do(func(c *ristretto.Cache[string, int]) {
		if c != nil {
			t.Fatal("a nil Cache passes a cache")
		}
	})
	if _, ok := nilCache.Get("k"); ok || nilCache.Set("k", 1, 1) || nilCache.SetWithTTL("k", 1, 1, time.Minute) {
		t.Fatal("a nil Cache holds a value")
	}
	nilCache.Del("k")
	nilCache.Wait()
}
