package engine

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
)

// fakeSealKeys is a shared store's seal key that fails until told to
// answer, counting the reads.
type fakeSealKeys struct {
	mu    sync.Mutex
	key   []byte // nil: the store does not answer
	reads int
}

func (f *fakeSealKeys) SealKey(context.Context) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.key == nil {
		return nil, fmt.Errorf("%w: test", store.ErrUnavailable)
	}
	return f.key, nil
}

// TestSealKeyMemoryAndShared: with the memory store the seal key is the
// State's own (32 bytes, stable); with a shared store that does not
// answer at attach there is no key (never a key of the node's own),
// reads are throttled, and the store's key is used once it answers,
// then no longer read.
func TestSealKeyMemoryAndShared(t *testing.T) {
	e := newTestEngine(t)
	k := e.SealKey()
	if len(k) != 32 || !bytes.Equal(k, e.st.sealKey) || !bytes.Equal(e.SealKey(), k) {
		t.Fatalf("memory store: seal key %x, want the State's 32-byte key %x", k, e.st.sealKey)
	}

	f := &fakeSealKeys{}
	e.sto.Seal = f
	e.loadSealKey(true) // as Attach does
	if got := e.SealKey(); got != nil {
		t.Fatalf("store down: seal key %x, want none", got)
	}
	if f.reads != 1 {
		t.Fatalf("store down: %d reads, want 1 (the attach's; the next waits %v)", f.reads, SealRetryEvery)
	}
	f.mu.Lock()
	f.key = bytes.Repeat([]byte{7}, 32)
	f.mu.Unlock()
	e.seal.mu.Lock()
	e.seal.next = time.Time{} // the retry is due
	e.seal.mu.Unlock()
	if got := e.SealKey(); !bytes.Equal(got, f.key) {
		t.Fatalf("store back: seal key %x, want the store's", got)
	}
	_ = e.SealKey()
	if f.reads != 2 {
		t.Fatalf("%d reads, want 2: a key once read is not read again", f.reads)
	}
}
