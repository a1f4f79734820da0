package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-rcns/caddy-rcns/internal/dirsnap"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// appendGate appends one gate record for agent to rs's log.
func appendGate(t *testing.T, rs *recordState, agent string) {
	t.Helper()
	rs.mu.Lock()
	log := rs.log
	rs.mu.Unlock()
	if log == nil {
		t.Fatal("no negotiation log open")
	}
	if _, err := log.Append(agent, map[string]any{"kind": records.KindGate, "outcome": records.OutcomeAccepted, "requested": map[string]any{}, "granted": nil}); err != nil {
		t.Fatal(err)
	}
}

// A records_dir belongs to one gateway: a second record state (another
// gateway, or another handler name in this process) opening it fails
// with an error that says who holds it and writes nothing there, so the
// hash chains stay intact; once the first closes, the second opens it.
// The holder itself reopens it (fsync changed on a reload) without
// tripping over its own lock, and verify-log reads it while held.
func TestRecordsDirBelongsToOneGateway(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	first := &recordState{name: "first"}
	if err := first.open(dir, records.FsyncOff, nil, zap.NewNop()); err != nil {
		t.Fatalf("first open: %v", err)
	}
	t.Cleanup(first.close)
	appendGate(t, first, "a")

	// A reload that changes fsync reopens the directory it holds.
	if err := first.open(dir, records.FsyncAlways, nil, zap.NewNop()); err != nil {
		t.Fatalf("reopen by the holder: %v", err)
	}
	if first.dir != dir {
		t.Fatalf("holder reopened memory-only (dir %q)", first.dir)
	}
	appendGate(t, first, "a")

	before := dirsnap.Take(t, dir)
	second := &recordState{name: "second"}
	t.Cleanup(second.close)
	err := second.open(dir, records.FsyncOff, nil, zap.NewNop())
	var held *heldError
	if !errors.As(err, &held) {
		t.Fatalf("second open: err %v, want a heldError", err)
	}
	for _, want := range []string{"records_dir " + dir + " is held by another rcns handler of this Caddy process", `name "first"`, "each gateway needs its own records_dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if second.log != nil || second.dir != "" || second.lock != nil {
		t.Fatalf("second state kept log %v, dir %q, lock %v; want memory-only", second.log, second.dir, second.lock)
	}
	// It serves on memory-only: the chain heads and AGTP-API-Version go
	// nowhere near dir.
	if _, err := second.bumpAPIVersion("h"); err != nil {
		t.Fatal(err)
	}
	if err := second.chains.Flush(); err != nil {
		t.Fatal(err)
	}
	dirsnap.Same(t, "the gateway that does not hold records_dir", before, dirsnap.Take(t, dir))

	// verify-log only reads: it works on a held directory.
	if st, err := records.VerifyDirStats(filepath.Join(dir, "negotiations")); err != nil || st.Chains != 1 || st.Records != 2 {
		t.Fatalf("verify-log on a held records_dir: %v, %+v", err, st)
	}

	// Released on close: the second opens it and continues the chain.
	first.close()
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); !os.IsNotExist(err) {
		t.Errorf("owner file left after close (%v)", err)
	}
	if err := second.open(dir, records.FsyncOff, nil, zap.NewNop()); err != nil {
		t.Fatalf("second open after the first closed: %v", err)
	}
	appendGate(t, second, "a")
	raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
	var o lockOwner
	if err != nil || json.Unmarshal(raw, &o) != nil || o.PID != os.Getpid() || o.Name != "second" {
		t.Errorf("owner file %q (%v), want pid %d and name second", raw, err, os.Getpid())
	}
	if st, err := records.VerifyDirStats(filepath.Join(dir, "negotiations")); err != nil || st.Chains != 1 || st.Records != 3 {
		t.Fatalf("verify-log after the handover: %v, %+v", err, st)
	}
}

// The holder of a records_dir named in another process's owner file is
// described by its pid, host and name, even when its pid is this
// process's (containers sharing a volume).
func TestHeldErrorNamesAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	// Another container on a shared volume: Caddy is pid 1 in both.
	other := lockOwner{PID: os.Getpid(), Host: "gw-a", Process: "0123", Name: "default", Since: "2026-01-01T00:00:00Z"}
	raw, _ := json.Marshal(other)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), raw, 0o640); err != nil {
		t.Fatal(err)
	}
	l := flock.New(filepath.Join(dir, lockFile))
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	before := dirsnap.Take(t, dir)
	rs := &recordState{name: "default"}
	t.Cleanup(rs.close)
	err := rs.open(dir, records.FsyncOff, nil, zap.NewNop())
	want := fmt.Sprintf(`records_dir %s is held by another gateway (pid %d on host gw-a, rcns handler name "default", since 2026-01-01T00:00:00Z): each gateway needs its own records_dir`, dir, os.Getpid())
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want prefix %q", err, want)
	}
	dirsnap.Same(t, "the gateway refused the lock", before, dirsnap.Take(t, dir))

	// The holder has not written its owner file yet.
	if err := os.Remove(filepath.Join(dir, ownerFile)); err != nil {
		t.Fatal(err)
	}
	err = rs.open(dir, records.FsyncOff, nil, zap.NewNop())
	if err == nil || !strings.HasPrefix(err.Error(), "records_dir "+dir+" is held by another gateway: ") {
		t.Errorf("holder unknown: %v", err)
	}
}

// TestFlushReportBounded: a chain-head flush that fails once a second
// (a full disk) logs its first failure, then at most once per
// flushReportEvery with the count, and an INFO when a flush works
// again; it logged an ERROR every second.
func TestFlushReportBounded(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(core)
	var f flushReport
	now := time.Unix(1_700_000_000, 0)
	full := errors.New("write attribution-chains.json: no space left on device")
	for i := range 150 { // 150 s of failed flushes
		f.note(logger, full, now.Add(time.Duration(i)*time.Second))
	}
	f.note(logger, nil, now.Add(150*time.Second))
	f.note(logger, nil, now.Add(151*time.Second))
	errs := logs.FilterMessage("persisting attribution chain heads").All()
	if len(errs) != 3 { // at 0 s, 60 s, 120 s
		t.Fatalf("%d ERROR lines over 150 failed flushes, want 3: %v", len(errs), errs)
	}
	if n := errs[2].ContextMap()["failed_flushes"]; n != int64(121) {
		t.Errorf("third line failed_flushes %v, want 121", n)
	}
	back := logs.FilterMessage("persisting attribution chain heads works again").All()
	if len(back) != 1 || back[0].ContextMap()["failed_flushes"] != int64(150) {
		t.Fatalf("recovery lines %v, want one with failed_flushes 150", back)
	}
}

// TestPanicInFlushKeepsFlushing: a panic in a chain-head flush, which
// runs on the flusher's goroutine outside any request, is logged at
// ERROR with its stack instead of ending the process, counted as a
// failed flush, and the flusher flushes again a second later and still
// stops when told.
func TestPanicInFlushKeepsFlushing(t *testing.T) {
	chains, err := records.OpenChains(filepath.Join(t.TempDir(), "attribution-chains.json"))
	if err != nil {
		t.Fatal(err)
	}
	var flushes atomic.Int32
	hook := func() {
		if flushes.Add(1) == 1 {
			panic("flush defect")
		}
	}
	testHookFlush.Store(&hook)
	defer testHookFlush.Store(nil)
	core, logs := observer.New(zap.ErrorLevel)
	stop, done := make(chan struct{}), make(chan struct{})
	go (&recordState{}).flusher(chains, stop, done, zap.New(core))
	deadline := time.Now().Add(5 * time.Second)
	for flushes.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d flushes in 5 s, want a second one after the panic", flushes.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-done
	panics := logs.FilterMessageSnippet("panic persisting attribution chain heads").All()
	if len(panics) != 1 || panics[0].ContextMap()["panic"] != "flush defect" || !strings.Contains(panics[0].ContextMap()["stack"].(string), "flushChains") {
		t.Fatalf("panic lines %v, want one with the value and the stack", panics)
	}
	if n := logs.FilterMessage("persisting attribution chain heads").Len(); n != 1 {
		t.Fatalf("%d failed-flush lines, want 1 (the panic counts as a failed flush)", n)
	}
}

// TestAPIVersionAfterFailedWrite: after a write of manifest-version.json
// failed, the version served is the in-memory one, and it numbered the
// manifest served with it, not the one the file names: the next
// manifest, even one equal to the file's, gets a new version rather than
// that number again (spec §15.4: never reused), and a shared store
// numbers from the same floor.
func TestAPIVersionAfterFailedWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manifest-version.json"), []byte(`{"version":5,"hash":"A"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	rs := &recordState{name: "t", dir: dir}
	rs.apiVersion, rs.apiHash = 6, "B" // served 6 for B; its write failed
	if st, err := rs.servedAPIVersion(); err != nil || st != (manifestState{Version: 6, Hash: "B"}) {
		t.Fatalf("served = %+v, %v; want 6 for B", st, err)
	}
	if v, err := rs.bumpAPIVersion("A"); err != nil || v != 7 {
		t.Fatalf("the file's manifest A after 6 was served for B: version %d, %v; want 7", v, err)
	}
	if v, err := rs.adoptAPIVersion(7, "C"); err != errVersionOvertaken || v != 0 {
		t.Fatalf("adopting 7 for C after 7 was served for A: %d, %v; want refused", v, err)
	}
	if v, err := rs.adoptAPIVersion(9, "C"); err != nil || v != 9 {
		t.Fatalf("adopting 9 for C: %d, %v", v, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "manifest-version.json"))
	if string(raw) != `{"version":9,"hash":"C"}` {
		t.Fatalf("stored %s, want version 9 for C", raw)
	}
}

// A negotiation log file removed under a running gateway is found at
// the next record's fsync: the record goes into a new file, and the
// gateway's log says so at ERROR, naming the records_dir and both files,
// through the logger of the newest configuration (a reload that keeps
// records_dir keeps the log open, not the first configuration's logger).
func TestRecordsLogFileRemovedIsLogged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	oldCore, oldLogs := observer.New(zap.WarnLevel)
	core, logs := observer.New(zap.WarnLevel)
	rs := &recordState{name: "moved"}
	if err := rs.open(dir, records.FsyncGroup, nil, zap.New(oldCore)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.close)
	if err := rs.open(dir, records.FsyncGroup, nil, zap.New(core)); err != nil { // a reload
		t.Fatal(err)
	}
	appendGate(t, rs, "a")
	files, _ := filepath.Glob(filepath.Join(dir, "negotiations", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("log files %v, want one", files)
	}
	first := files[0]
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	appendGate(t, rs, "a")
	got := logs.FilterMessage("negotiation log file moved under the gateway").All()
	if len(got) != 1 || got[0].Level != zap.ErrorLevel || got[0].ContextMap()["records_dir"] != dir ||
		!strings.Contains(fmt.Sprint(got[0].ContextMap()["note"]), first+" was removed, moved, replaced or copied over") {
		t.Fatalf("logged %v, want one ERROR naming %s and %s", logs.All(), dir, first)
	}
	if n := oldLogs.FilterMessage("negotiation log file moved under the gateway").Len(); n != 0 {
		t.Errorf("the first configuration's logger got %d of the ERRORs, want none", n)
	}
	if files, _ = filepath.Glob(filepath.Join(dir, "negotiations", "*.jsonl")); len(files) != 1 || files[0] == first {
		t.Fatalf("log files after the removal %v, want one new file", files)
	}
	if data, err := os.ReadFile(files[0]); err != nil || !strings.Contains(string(data), `"seq":2`) {
		t.Fatalf("%s = %s, %v; want the record written after the removal", files[0], data, err)
	}
}
