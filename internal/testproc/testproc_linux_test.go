package testproc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChildDiesWithParent: a child started with DieWithParent by a
// process that then crashes is gone shortly after. The test starts
// itself as the parent (TESTPROC_PARENT), which starts a sleep,
// prints its pid and panics.
func TestChildDiesWithParent(t *testing.T) {
	if os.Getenv("TESTPROC_PARENT") == "1" {
		cmd := exec.Command("sleep", "60")
		DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			panic(err)
		}
		os.Stdout.WriteString("child " + strconv.Itoa(cmd.Process.Pid) + "\n")
		panic("the test binary crashes")
	}
	parent := exec.Command(os.Args[0], "-test.run", "^TestChildDiesWithParent$")
	parent.Env = append(os.Environ(), "TESTPROC_PARENT=1")
	out, _ := parent.CombinedOutput()
	_, rest, ok := strings.Cut(string(out), "child ")
	if !ok {
		t.Fatalf("the parent started no child:\n%s", out)
	}
	pid, err := strconv.Atoi(strings.Fields(rest)[0])
	if err != nil {
		t.Fatalf("child pid in %q: %v", out, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the child %d outlived its crashed parent by 5 s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether process pid runs: it answers signal 0 and is
// not a zombie (ended, not yet reaped by init, which may take a while).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}
