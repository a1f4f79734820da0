package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// TestRecordsDirLockRemoved: gateway.lock removed under a running
// gateway is locked again at its next check (a WARN), so a second
// gateway is still kept out; one that took the directory before the
// check is named in one ERROR (helper-140: the second gateway took the
// directory, both wrote it, and the chains broke without a word).
func TestRecordsDirLockRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	core, logs := observer.New(zap.WarnLevel)
	logger := zap.New(core)
	first := &recordState{name: "first"}
	if err := first.open(dir, records.FsyncOff, nil, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.close)
	removeLock := func() {
		t.Helper()
		for _, f := range []string{lockFile, ownerFile} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
	}

	removeLock()
	first.checkLock(logger)
	if n := logs.FilterMessageSnippet("it is locked again").Len(); n != 1 {
		t.Fatalf("%d WARN lines for the lock taken again, want 1: %v", n, logs.All())
	}
	second := &recordState{name: "second"}
	t.Cleanup(second.close)
	var held *heldError
	if err := second.open(dir, records.FsyncOff, nil, zap.NewNop()); !errors.As(err, &held) {
		t.Fatalf("second open after the lock was taken again: %v, want a heldError", err)
	}
	first.checkLock(logger)
	if logs.Len() != 1 {
		t.Fatalf("a check with the lock in place logged: %v", logs.All())
	}

	// Removed, and another gateway locks the directory before the check.
	removeLock()
	third := &recordState{name: "third"}
	t.Cleanup(third.close)
	if err := third.open(dir, records.FsyncOff, nil, zap.NewNop()); err != nil {
		t.Fatalf("third open on the unlocked directory: %v", err)
	}
	first.checkLock(logger)
	first.checkLock(logger)
	errs := logs.FilterLevelExact(zap.ErrorLevel)
	if errs.Len() != 1 || errs.FilterMessageSnippet("another gateway has locked records_dir since").Len() != 1 {
		t.Fatalf("ERROR lines %v, want one naming the other gateway", errs.All())
	}

	// A directory put at the lock's path is not another gateway: a WARN
	// (helper-141: the ERROR blamed one).
	third.close()
	first.checkLock(logger) // locked again
	removeLock()
	if err := os.Mkdir(filepath.Join(dir, lockFile), 0o750); err != nil {
		t.Fatal(err)
	}
	before := logs.Len()
	first.checkLock(logger)
	first.checkLock(logger)
	added := logs.All()[before:]
	if len(added) != 1 || added[0].Level != zap.WarnLevel || !strings.Contains(added[0].Message, "cannot be locked again yet") {
		t.Fatalf("lines for a directory at the lock's path: %v, want one WARN", added)
	}
}

// TestCheckLockWhileCloseWaits: the flusher's lock check does not wait
// for rs.mu, which open and close hold while they wait for the flusher
// to stop: with mu held (a close under way), a check still ends, and so
// does a close that meets a check (helper-143: a reload that did hung
// the gateway, every request after it waiting on mu, and a
// configuration unload hung a test run for 10 minutes).
func TestCheckLockWhileCloseWaits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	rs := &recordState{name: "close-waits"}
	if err := rs.open(dir, records.FsyncOff, nil, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.close)
	rs.mu.Lock()
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		rs.checkLock(zap.NewNop())
	}()
	select {
	case <-checked:
	case <-time.After(10 * time.Second):
		rs.mu.Unlock() // lets the check, and the cleanup's close, end
		t.Fatal("checkLock waited on rs.mu: a close holding it, waiting for the flusher, never ends")
	}
	rs.mu.Unlock()

	// Open and close across the flusher's ticks (each second): none
	// hangs.
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(2500 * time.Millisecond)
		for i := 0; time.Now().Before(deadline); i++ {
			policy := records.FsyncOff
			if i%2 == 1 {
				policy = records.FsyncGroup
			}
			if err := rs.open(dir, policy, nil, zap.NewNop()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("open and close across the flusher's ticks hung")
	}
}
