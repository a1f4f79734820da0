package records

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// signedBuild returns a build function that signs a record carrying prev.
func signedBuild(s *Signer, agent string, n int) func(prev string) (string, string, error) {
	return func(prev string) (string, string, error) {
		return s.Sign(map[string]any{"agent_id": agent, "previous_audit_id": prev, "n": n})
	}
}

// checkLinear asserts that links (prev -> auditID) form one chain from
// ZeroHash through all of them, ending at head.
func checkLinear(t *testing.T, links map[string]string, n int, head string) {
	t.Helper()
	if len(links) != n {
		t.Fatalf("%d distinct prev values for %d records: the chain forked", len(links), n)
	}
	cur, steps := ZeroHash, 0
	for {
		next, ok := links[cur]
		if !ok {
			break
		}
		cur = next
		steps++
	}
	if steps != n {
		t.Fatalf("walked %d records from ZeroHash, want %d", steps, n)
	}
	if cur != head {
		t.Fatalf("chain ends at %s, head is %s", cur, head)
	}
}

func TestChainsConcurrentOneKey(t *testing.T) {
	s := mustSigner(t, newKey(t))
	var c Chains // zero value is usable
	const n = 100
	var mu sync.Mutex
	links := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev string
			_, id, err := c.Append("agent-1", func(p string) (string, string, error) {
				prev = p
				return signedBuild(s, "agent-1", i)(p)
			})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if old, dup := links[prev]; dup {
				t.Errorf("prev %s used by %s and %s", prev, old, id)
			}
			links[prev] = id
		}()
	}
	wg.Wait()
	checkLinear(t, links, n, c.Next("agent-1"))
}

func TestChainsConcurrentManyKeys(t *testing.T) {
	s := mustSigner(t)
	var c Chains
	const keys, per = 8, 25
	var mu sync.Mutex
	links := map[string]map[string]string{}
	for k := range keys {
		links[fmt.Sprintf("agent-%d", k)] = map[string]string{}
	}
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("agent-%d", k)
		for i := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var prev string
				_, id, err := c.Append(key, func(p string) (string, string, error) {
					prev = p
					return signedBuild(s, key, i)(p)
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				links[key][prev] = id
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for key, l := range links {
		t.Run(key, func(t *testing.T) { checkLinear(t, l, per, c.Next(key)) })
	}
}

func TestChainsAppendErrors(t *testing.T) {
	var c Chains
	_, first, err := c.Append("a", func(prev string) (string, string, error) {
		if prev != ZeroHash {
			t.Errorf("first prev = %s, want ZeroHash", prev)
		}
		return "x", AuditID("x"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	tests := []struct {
		name    string
		key     string
		build   func(string) (string, string, error)
		wantErr error
	}{
		{name: "build fails", key: "a", build: func(string) (string, string, error) { return "", "", boom }, wantErr: boom},
		{name: "audit id not hex", key: "a", build: func(string) (string, string, error) { return "y", "XYZ", nil }, wantErr: ErrBadAuditID},
		{name: "audit id upper hex", key: "a", build: func(string) (string, string, error) { return "y", strings.ToUpper(AuditID("y")), nil }, wantErr: ErrBadAuditID},
		{name: "new key build fails", key: "b", build: func(string) (string, string, error) { return "", "", boom }, wantErr: boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compact, id, err := c.Append(tt.key, tt.build)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if compact != "" || id != "" {
				t.Errorf("Append returned %q, %q with an error", compact, id)
			}
		})
	}
	if got := c.Next("a"); got != first {
		t.Errorf("head after failed appends = %s, want %s", got, first)
	}
	if got := c.Next("b"); got != ZeroHash {
		t.Errorf("head of never-committed chain = %s, want ZeroHash", got)
	}
	if c.Len() != 1 {
		t.Errorf("Len = %d, want 1 (failed first append keeps nothing)", c.Len())
	}
}

func TestChainsNextCommit(t *testing.T) {
	var c Chains
	if got := c.Next("a"); got != ZeroHash {
		t.Errorf("Next of new key = %s", got)
	}
	id := AuditID("r1")
	c.Commit("a", id)
	c.Commit("a", "not-hex") // ignored
	if got := c.Next("a"); got != id {
		t.Errorf("Next after Commit = %s, want %s", got, id)
	}
}

func TestChainsEviction(t *testing.T) {
	c, err := NewChains(ChainsOptions{MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	c.Commit("a", AuditID("a"))
	c.Commit("b", AuditID("b"))
	c.Next("a") // a is now more recently used than b
	c.Commit("c", AuditID("c"))
	tests := []struct {
		name string
		key  string
		want string
	}{
		{name: "recently read kept", key: "a", want: AuditID("a")},
		{name: "least recently used dropped", key: "b", want: ZeroHash},
		{name: "newest kept", key: "c", want: AuditID("c")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Next(tt.key); got != tt.want {
				t.Errorf("Next(%s) = %s, want %s", tt.key, got, tt.want)
			}
		})
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
}

func TestChainsEvictionSparesBusyChain(t *testing.T) {
	c, err := NewChains(ChainsOptions{MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.Commit("busy", AuditID("0"))
	_, _, err = c.Append("busy", func(prev string) (string, string, error) {
		// Another key arrives while "busy" is mid-append.
		c.Commit("other", AuditID("o"))
		return "r", AuditID("r"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Next("busy"); got != AuditID("r") {
		t.Errorf("busy head = %s, want the record committed while over the bound", got)
	}
	if c.Len() != 1 {
		t.Errorf("Len = %d, want 1 once idle", c.Len())
	}
}

func TestChainsPersist(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "heads.json")
	c, err := OpenChains(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Flush with nothing changed wrote a file (stat err %v)", err)
	}
	s := mustSigner(t, newKey(t))
	heads := map[string]string{}
	for _, key := range []string{"a1", "a2", "a1"} {
		_, id, err := c.Append(key, signedBuild(s, key, 0))
		if err != nil {
			t.Fatal(err)
		}
		heads[key] = id
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}

	re, err := OpenChains(path)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range heads {
		if got := re.Next(key); got != want {
			t.Errorf("after reopen Next(%s) = %s, want %s", key, got, want)
		}
	}
	_, _, err = re.Append("a1", func(prev string) (string, string, error) {
		if prev != heads["a1"] {
			t.Errorf("prev after reopen = %s, want %s", prev, heads["a1"])
		}
		return "z", AuditID("z"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := re.Flush(); err != nil {
		t.Fatal(err)
	}
	again, err := OpenChains(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Next("a1"); got != AuditID("z") {
		t.Errorf("second reopen Next(a1) = %s", got)
	}
}

func TestChainsPersistKeepsRecency(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heads.json")
	c, err := NewChains(ChainsOptions{Path: path, MaxKeys: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		c.Commit(k, AuditID(k))
	}
	c.Next("a") // order, oldest first: b, c, a
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	re, err := NewChains(ChainsOptions{Path: path, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	if re.Next("b") != ZeroHash || re.Next("a") != AuditID("a") || re.Next("c") != AuditID("c") {
		t.Errorf("reload into a smaller bound kept the wrong heads")
	}
}

func TestOpenChainsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		opt  ChainsOptions
		want string
	}{
		{name: "not json", opt: ChainsOptions{Path: write("a.json", "{")}, want: "a.json"},
		{name: "wrong version", opt: ChainsOptions{Path: write("b.json", `{"version":2,"heads":[]}`)}, want: "version 2"},
		{name: "bad head", opt: ChainsOptions{Path: write("c.json", `{"version":1,"heads":[{"key":"k","head":"zz"}]}`)}, want: `key "k"`},
		{name: "path is a directory", opt: ChainsOptions{Path: dir}, want: "read chain heads"},
		{name: "negative bound", opt: ChainsOptions{MaxKeys: -1}, want: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewChains(tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestChainsMemoryOnlyFlush(t *testing.T) {
	c, err := OpenChains("")
	if err != nil {
		t.Fatal(err)
	}
	c.Commit("a", AuditID("a"))
	if err := c.Flush(); err != nil {
		t.Errorf("Flush of memory-only chains = %v, want nil", err)
	}
}

// TestChainsValidKeyDropsOnLoad: entries whose key ValidKey refuses are
// dropped on load, counted, and gone from the file after the next
// Flush; the others load as written.
func TestChainsValidKeyDropsOnLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chains.json")
	c, err := NewChains(ChainsOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	good := strings.Repeat("a", 64)
	head := strings.Repeat("b", 64)
	for _, k := range []string{good, "", "EVIL<script>", strings.Repeat("x", 12000)} {
		c.Commit(k, head)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	valid := func(k string) bool { return k == "" || len(k) == 64 }
	c, err = NewChains(ChainsOptions{Path: path, ValidKey: valid})
	if err != nil {
		t.Fatal(err)
	}
	if c.Dropped() != 2 || c.Len() != 2 || c.Next(good) != head || c.Next("") != head || c.Next("EVIL<script>") != ZeroHash {
		t.Fatalf("after load: dropped %d, %d chains, heads %s / %s / %s", c.Dropped(), c.Len(), c.Next(good), c.Next(""), c.Next("EVIL<script>"))
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "EVIL") || strings.Contains(string(raw), "xxxx") {
		t.Fatalf("the dropped keys are still in the file after Flush: %.200s", raw)
	}
	c, err = NewChains(ChainsOptions{Path: path, ValidKey: valid})
	if err != nil || c.Dropped() != 0 || c.Len() != 2 {
		t.Fatalf("reload: %v, dropped %d, %d chains", err, c.Dropped(), c.Len())
	}
}

// TestChainsFlushPanicReleasesLock: a panic (a defect) while Flush
// reads the heads, recovered by its caller (the gateway's flusher),
// leaves no lock held: Append, which takes the same lock for every
// record, goes on. Here the defect is a foreign element in the chains'
// list.
func TestChainsFlushPanicReleasesLock(t *testing.T) {
	c, err := OpenChains(filepath.Join(t.TempDir(), "heads.json"))
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.init()
	c.lru.PushBack("not a chain")
	c.gen++
	c.mu.Unlock()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Flush over a foreign list element did not panic")
			}
		}()
		_ = c.Flush()
	}()
	if !c.mu.TryLock() {
		t.Fatal("the chains' lock is still held after a panic in Flush")
	}
	c.mu.Unlock()
	if !c.flushMu.TryLock() {
		t.Fatal("Flush's own lock is still held after its panic")
	}
	c.flushMu.Unlock()
}
